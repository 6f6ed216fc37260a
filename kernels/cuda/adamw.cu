// The optimizer step on the GPU (CUDA): the gradient check (global norm + inf/NaN), AdamW over
// the flat parameter buffer, and the loss-scaler update. Every decision (skip the step? grow
// or back off the scale?) is taken on the device from state in device memory, so the whole
// step stays one CUDA graph with no host synchronisation. The element update, the per-step
// scalars and the scaler rule are the shared host/device definitions in kernels/common/.
#include "kernels/common/adamw_update.h"
#include "kernels/common/loss_scaler.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"

namespace tt {

namespace {

constexpr int kNormBlocks = 256;  // partial sums of the gradient check, reduced in order

// grads (n) -> partial_sq (kNormBlocks) double, partial_bad (kNormBlocks) int
// Decomposition: kNormBlocks blocks stride over the buffer; each thread sums its elements in
// double, the block reduces in shared memory in a fixed tree order: deterministic.
__global__ void grad_check_partials_kernel(const float* grads, int64_t n, double* partial_sq, int* partial_bad) {
  __shared__ double sums[kThreadsPerBlock];
  __shared__ int bads[kThreadsPerBlock];
  double sum = 0.0;
  int bad = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grads[i];
    sum += static_cast<double>(g) * g;
    bad |= !isfinite(g);
  }
  sums[threadIdx.x] = sum;
  bads[threadIdx.x] = bad;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      sums[threadIdx.x] += sums[threadIdx.x + stride];
      bads[threadIdx.x] |= bads[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partial_sq[blockIdx.x] = sums[0];
    partial_bad[blockIdx.x] = bads[0];
  }
}

// partials -> grad_norm_sq (1), found_inf (1). One thread, in block order.
__global__ void grad_check_reduce_kernel(const double* partial_sq, const int* partial_bad, float* grad_norm_sq,
                                         int32_t* found_inf) {
  double sum = 0.0;
  int bad = 0;
  for (int b = 0; b < kNormBlocks; ++b) {
    sum += partial_sq[b];
    bad |= partial_bad[b];
  }
  *grad_norm_sq = static_cast<float>(sum);
  *found_inf = bad;
}

// params (n), grads (n) scaled by *scale, exp_avg (n), exp_avg_sq (n) updated in place; nothing
// happens when *found_inf is set. Decomposition: one thread per element, grid-stride. The step
// t = *step_count + 1, the training step (for the lr schedule), the scale and the squared
// gradient norm (for clipping) are read from device memory when the kernel runs (so a captured
// graph serves every step); thread 0 of each block turns them into the step's lr, scalars and
// clip coefficient (double math, as PyTorch's Python floats) once and shares them through
// shared memory.
__global__ void adamw_kernel(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                             const int32_t* step_count, const int32_t* train_step, AdamWHyper hyper,
                             const float* scale, const float* grad_norm_sq, const int32_t* found_inf, int64_t n) {
  if (*found_inf) return;  // a skipped step: every block sees the same flag
  __shared__ AdamWStepScalars shared_scalars;
  __shared__ float shared_inv_scale;
  __shared__ float shared_clip_coef;
  const bool clip = hyper.grad_clip > 0;
  if (threadIdx.x == 0) {
    const double lr = scheduled_lr(hyper.lr, hyper.schedule, *train_step);
    shared_scalars = adamw_step_scalars(hyper, lr, static_cast<int64_t>(*step_count) + 1);
    const float inv_scale = static_cast<float>(1.0 / static_cast<double>(*scale));  // as GradScaler.unscale_
    shared_inv_scale = inv_scale;
    shared_clip_coef = clip ? clip_coefficient(hyper.grad_clip, *grad_norm_sq, inv_scale) : 1.0f;
  }
  __syncthreads();
  const AdamWStepScalars s = shared_scalars;
  const float inv_scale = shared_inv_scale;
  const float coef = shared_clip_coef;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    adamw_update(params + i, exp_avg + i, exp_avg_sq + i, unscaled_clipped_grad(grads[i], inv_scale, clip, coef), s);
}

// step_count (1) += 1 unless the step was skipped. One thread, launched after adamw_kernel on
// the same stream, so every block of the update has read the old count before it changes.
__global__ void increment_step_kernel(int32_t* step_count, const int32_t* found_inf) {
  if (!*found_inf) *step_count += 1;
}

// The scaler rule of kernels/common/loss_scaler.h, one thread.
__global__ void loss_scaler_update_kernel(float* scale, int32_t* growth_tracker, int32_t* skipped_steps,
                                          int32_t* first_skipped_step, const int32_t* found_inf, const int32_t* step,
                                          LossScalerConfig config) {
  loss_scaler_update(scale, growth_tracker, skipped_steps, first_skipped_step, *found_inf, *step, config);
}

}  // namespace

// grads (n) F32 -> s.grad_norm_sq, s.found_inf
void CudaBackend::grad_norm_check(Tensor grads, const LossScalerState& s) {
  static_assert(kNormBlocks * (sizeof(double) + sizeof(int)) <= kReduceScratchFloats * sizeof(float),
                "the reduction scratch holds the partials");
  double* partial_sq = reinterpret_cast<double*>(reduce_scratch_);
  int* partial_bad = reinterpret_cast<int*>(partial_sq + kNormBlocks);
  grad_check_partials_kernel<<<kNormBlocks, kThreadsPerBlock, 0, stream_>>>(grads.f32(), grads.numel(), partial_sq,
                                                                            partial_bad);
  CUDA_CHECK(cudaGetLastError());
  grad_check_reduce_kernel<<<1, 1, 0, stream_>>>(partial_sq, partial_bad, s.grad_norm_sq.f32(), s.found_inf.i32());
  CUDA_CHECK(cudaGetLastError());
}

// params (n), grads (n), exp_avg (n), exp_avg_sq (n); step_count (1) int32 += 1 unless skipped;
// train_step (1) int32 the 0-based training step (the lr schedule)
void CudaBackend::adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                             Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s) {
  const int64_t n = params.numel();
  if (n > 0) {
    adamw_kernel<<<grid_stride_blocks(n), kThreadsPerBlock, 0, stream_>>>(
        params.f32(), grads.f32(), exp_avg.f32(), exp_avg_sq.f32(), step_count.i32(), train_step.i32(), hyper,
        s.scale.f32(), s.grad_norm_sq.f32(), s.found_inf.i32(), n);
    CUDA_CHECK(cudaGetLastError());
  }
  increment_step_kernel<<<1, 1, 0, stream_>>>(step_count.i32(), s.found_inf.i32());
  CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) {
  loss_scaler_update_kernel<<<1, 1, 0, stream_>>>(s.scale.f32(), s.growth_tracker.i32(), s.skipped_steps.i32(),
                                                  s.first_skipped_step.i32(), s.found_inf.i32(), step.i32(), config);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt

namespace tt {

void CudaBackend::adamw_step_and_scaler_update(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq,
                                               Tensor step_count, Tensor train_step, const AdamWHyper& hyper,
                                               const LossScalerState& s, const LossScalerConfig& scaler) {
  Backend::adamw_step_and_scaler_update(params, grads, exp_avg, exp_avg_sq, step_count, train_step, hyper, s, scaler);
}

}  // namespace tt
