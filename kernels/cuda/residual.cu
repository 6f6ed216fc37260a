// Residual add (CUDA). Its backward passes the gradient unchanged to both inputs, so the
// engine simply hands the same gradient view to both branches.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace tt {

namespace {

// a (n), b (n) -> out (n) = a + b; out may alias a or b
// Decomposition: one thread per element, grid-stride; each element is read before it is written.
__global__ void residual_forward_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

}  // namespace

// a (n), b (n) -> out (n) = a + b, out may alias a or b
void CudaBackend::residual_forward(Tensor out, Tensor a, Tensor b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  residual_forward_kernel<<<grid_stride_blocks(n), kThreadsPerBlock, 0, stream_>>>(out.f32(), a.f32(), b.f32(), n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
