// Residual add (CUDA). Its backward passes the gradient unchanged to both inputs, so the
// engine simply hands the same gradient view to both branches. Views of any float storage
// type S (kernels/cuda/storage.cuh): the sum is taken in fp32 and rounded once on store.
#include "kernels/common/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

// a (n), b (n) -> out (n) = a + b; out may alias a or b
// Decomposition: one thread per element, grid-stride; each element is read before it is written.
template <typename S>
__global__ void residual_forward_kernel(S* out, const S* a, const S* b, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<S>(to_float(a[i]) + to_float(b[i]));
}

}  // namespace

// a (n), b (n) -> out (n) = a + b, out may alias a or b
void CudaBackend::residual_forward(Tensor out, Tensor a, Tensor b) {
  const int64_t n = out.numel();
  const DType dtype = shared_storage_dtype("residual_forward", {out, a, b});
  if (n == 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    residual_forward_kernel<S>
        <<<grid_stride_blocks(n), kThreadsPerBlock, 0, stream_>>>(out.as<S>(), a.as<S>(), b.as<S>(), n);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
