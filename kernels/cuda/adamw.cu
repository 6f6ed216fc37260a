// The optimizer step on the GPU (CUDA): the gradient check (global norm + inf/NaN), AdamW over
// the flat parameter buffer, and the loss-scaler update. Every decision (skip the step? grow
// or back off the scale?) is taken on the device from state in device memory, so the whole
// step stays one CUDA graph with no host synchronisation. Two launches per training step: the
// check, and AdamW whose last block also counts the step and updates the scaler. The element
// update, the per-step scalars and the scaler rule are the shared host/device definitions in
// kernels/common/.
#include "kernels/common/adamw_update.h"
#include "kernels/common/loss_scaler.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"

namespace tt {

namespace {

constexpr int kNormBlocks = 256;  // partial sums of the gradient check, reduced in order
static_assert(kNormBlocks == kThreadsPerBlock, "the last block loads one partial per thread");

// The "last block finishes" pattern, called by every thread of a block once the block's
// results are stored: true, in every thread, for the one block that counts in last, which
// then sees the stores of all the others. Thread 0 fences (release: this block's stores are
// visible device-wide before its ticket is), takes a ticket from `counter` (an integer atomic:
// the sums themselves stay in a fixed order) and, in the last block, fences again (acquire: its
// reads of the others' results come after the ticket that saw them all counted in, not before,
// from a stale cached copy) and resets the counter to 0, so the next launch (a replayed CUDA
// graph) starts from zero again. The barrier shares the answer with the block; the caller's own
// barrier must precede the call when other threads than thread 0 stored results. (Without the
// acquire fence the emulator's fence check stops grad_check_kernel: docs/emulation.md.)
__device__ bool last_block_to_finish(unsigned int* counter) {
  __shared__ bool is_last;
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned int ticket = atomicAdd(counter, 1u);
    is_last = ticket == gridDim.x - 1;
    if (is_last) {
      __threadfence();
      *counter = 0u;
    }
  }
  __syncthreads();
  return is_last;
}

// grads (n) -> grad_norm_sq (1) = sum of squares (fp32 of a double sum), found_inf (1);
// partial_sq (kNormBlocks) double, partial_bad (kNormBlocks) int: scratch.
// Decomposition: kNormBlocks blocks stride over the buffer; each thread sums its elements in
// double, the block reduces in shared memory in a fixed tree order and stores its partial;
// the last block to finish loads the partials (one per thread) and thread 0 adds them in
// block order 0..kNormBlocks-1. The same sums in the same order as the two kernels this
// replaced (partials, then a one-thread reduce), in one launch; deterministic. The partials are
// volatile, as in the CUDA programming guide's example of this pattern: the last block's loads
// go to memory for the other blocks' stores, never to a stale cached copy.
__global__ void grad_check_kernel(const float* grads, int64_t n, volatile double* partial_sq,
                                  volatile int* partial_bad, unsigned int* blocks_done, float* grad_norm_sq,
                                  int32_t* found_inf) {
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
  if (!last_block_to_finish(blocks_done)) return;
  sums[threadIdx.x] = partial_sq[threadIdx.x];  // the block's own tree results are no longer needed
  bads[threadIdx.x] = partial_bad[threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    int any_bad = 0;
    for (int b = 0; b < kNormBlocks; ++b) {
      total += sums[b];
      any_bad |= bads[b];
    }
    *grad_norm_sq = static_cast<float>(total);
    *found_inf = any_bad;
  }
}

// The loss scaler's state that the optimizer kernel's last block updates (when `update`).
struct ScalerTail {
  bool update;
  int32_t* growth_tracker;
  int32_t* skipped_steps;
  int32_t* first_skipped_step;
  LossScalerConfig config;
};

// params (n), grads (n) scaled by *scale, exp_avg (n), exp_avg_sq (n) updated in place; nothing
// happens to them when *found_inf is set. Decomposition: one thread per element, grid-stride.
// The step t = *step_count + 1, the training step (for the lr schedule), the scale and the
// squared gradient norm (for clipping) are read from device memory when the kernel runs (so a
// captured graph serves every step); thread 0 of each block turns them into the step's lr,
// scalars and clip coefficient (double math, as PyTorch's Python floats) once and shares them
// through shared memory.
// Then the last block to finish (last_block_to_finish) does the step's bookkeeping, which two
// one-thread kernels after the update used to do: step_count += 1 unless found_inf and, with
// scaler.update, the loss scaler's update (kernels/common/loss_scaler.h, which may change
// *scale) with the step read from train_step. Every block's thread 0 reads the step count and
// the scale before its block counts in, and the tail runs only after every block has counted
// in, so no block sees them changed. A skipped step still counts in; only the update is skipped.
__global__ void adamw_kernel(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                             int32_t* step_count, const int32_t* train_step, AdamWHyper hyper, float* scale,
                             const float* grad_norm_sq, const int32_t* found_inf, int64_t n,
                             unsigned int* blocks_done, ScalerTail scaler) {
  __shared__ AdamWStepScalars shared_scalars;
  __shared__ float shared_inv_scale;
  __shared__ float shared_clip_coef;
  const bool skip = *found_inf != 0;  // a skipped step: every block sees the same flag
  const bool clip = hyper.grad_clip > 0;
  if (!skip) {
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
      adamw_update(params + i, exp_avg + i, exp_avg_sq + i, unscaled_clipped_grad(grads[i], inv_scale, clip, coef),
                   s);
  }
  if (!last_block_to_finish(blocks_done) || threadIdx.x != 0) return;
  if (!skip) *step_count += 1;
  if (scaler.update)
    loss_scaler_update(scale, scaler.growth_tracker, scaler.skipped_steps, scaler.first_skipped_step, *found_inf,
                       *train_step, scaler.config);
}

// The scaler rule of kernels/common/loss_scaler.h, one thread: loss_scaler_update on its own.
__global__ void loss_scaler_update_kernel(float* scale, int32_t* growth_tracker, int32_t* skipped_steps,
                                          int32_t* first_skipped_step, const int32_t* found_inf, const int32_t* step,
                                          LossScalerConfig config) {
  loss_scaler_update(scale, growth_tracker, skipped_steps, first_skipped_step, *found_inf, *step, config);
}

}  // namespace

// grads (n) F32 -> s.grad_norm_sq, s.found_inf: one launch
void CudaBackend::grad_norm_check(Tensor grads, const LossScalerState& s) {
  static_assert(kNormBlocks * (sizeof(double) + sizeof(int)) <= kReduceScratchFloats * sizeof(float),
                "the reduction scratch holds the partials");
  double* partial_sq = reinterpret_cast<double*>(reduce_scratch_);
  int* partial_bad = reinterpret_cast<int*>(partial_sq + kNormBlocks);
  grad_check_kernel<<<kNormBlocks, kThreadsPerBlock, 0, stream_>>>(grads.f32(), grads.numel(), partial_sq,
                                                                   partial_bad, reduce_counters_ + kGradCheckCounter,
                                                                   s.grad_norm_sq.f32(), s.found_inf.i32());
  CUDA_CHECK(cudaGetLastError());
}

// The AdamW kernel and its tail (adamw_kernel), the scaler's update too when `scaler` is not
// null: one launch, of at least one block, so the tail runs for an empty buffer too.
void CudaBackend::launch_adamw(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                               Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s,
                               const LossScalerConfig* scaler) {
  const int64_t n = params.numel();
  const ScalerTail tail{scaler != nullptr, s.growth_tracker.i32(), s.skipped_steps.i32(), s.first_skipped_step.i32(),
                        scaler ? *scaler : LossScalerConfig{}};
  adamw_kernel<<<grid_stride_blocks(n), kThreadsPerBlock, 0, stream_>>>(
      params.f32(), grads.f32(), exp_avg.f32(), exp_avg_sq.f32(), step_count.i32(), train_step.i32(), hyper,
      s.scale.f32(), s.grad_norm_sq.f32(), s.found_inf.i32(), n, reduce_counters_ + kAdamWCounter, tail);
  CUDA_CHECK(cudaGetLastError());
}

// params (n), grads (n), exp_avg (n), exp_avg_sq (n); step_count (1) int32 += 1 unless skipped;
// train_step (1) int32 the 0-based training step (the lr schedule). One launch.
void CudaBackend::adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                             Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s) {
  launch_adamw(params, grads, exp_avg, exp_avg_sq, step_count, train_step, hyper, s, nullptr);
}

void CudaBackend::loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) {
  loss_scaler_update_kernel<<<1, 1, 0, stream_>>>(s.scale.f32(), s.growth_tracker.i32(), s.skipped_steps.i32(),
                                                  s.first_skipped_step.i32(), s.found_inf.i32(), step.i32(), config);
  CUDA_CHECK(cudaGetLastError());
}

// adamw_step then loss_scaler_update with step = train_step, in one launch.
void CudaBackend::adamw_step_and_scaler_update(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq,
                                               Tensor step_count, Tensor train_step, const AdamWHyper& hyper,
                                               const LossScalerState& s, const LossScalerConfig& scaler) {
  launch_adamw(params, grads, exp_avg, exp_avg_sq, step_count, train_step, hyper, s, &scaler);
}

}  // namespace tt
