// AdamW over the flat parameter buffer (CUDA). The element update and the per-step scalars
// are the shared host/device definitions in kernels/common/adamw_update.h, so both backends
// apply torch.optim.AdamW's arithmetic in the same order.
#include "kernels/common/adamw_update.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace tt {

namespace {

// params (n), grads (n), exp_avg (n), exp_avg_sq (n) updated in place; step_count (1) read only
// Decomposition: one thread per element, grid-stride. The step t = *step_count + 1 is read
// from device memory when the kernel runs (so a captured graph serves every step); thread 0
// of each block turns it into the step's scalars (double math, as PyTorch's Python floats)
// once, and shares them through shared memory.
__global__ void adamw_kernel(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                             const int32_t* step_count, AdamWHyper hyper, int64_t n) {
  __shared__ AdamWStepScalars shared_scalars;
  if (threadIdx.x == 0) shared_scalars = adamw_step_scalars(hyper, static_cast<int64_t>(*step_count) + 1);
  __syncthreads();
  const AdamWStepScalars s = shared_scalars;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    adamw_update(params + i, exp_avg + i, exp_avg_sq + i, grads[i], s);
}

// step_count (1) += 1. One thread, launched after adamw_kernel on the same stream, so every
// block of the update has read the old count before it changes.
__global__ void increment_step_kernel(int32_t* step_count) { *step_count += 1; }

}  // namespace

// params (n), grads (n), exp_avg (n), exp_avg_sq (n); step_count (1) int32 += 1
void CudaBackend::adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                             const AdamWHyper& hyper) {
  const int64_t n = params.numel();
  if (n > 0) {
    adamw_kernel<<<grid_stride_blocks(n), kThreadsPerBlock, 0, stream_>>>(
        params.f32(), grads.f32(), exp_avg.f32(), exp_avg_sq.f32(), step_count.i32(), hyper, n);
    CUDA_CHECK(cudaGetLastError());
  }
  increment_step_kernel<<<1, 1, 0, stream_>>>(step_count.i32());
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
