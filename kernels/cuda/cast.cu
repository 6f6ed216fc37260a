// Conversion between float storage types (CUDA), with the shared rounding of
// kernels/common/half.h: the working weights are the fp32 masters rounded to bf16 or fp16.
#include "kernels/common/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

// src (n) -> dst (n). One thread per element, grid-stride.
template <typename D, typename S>
__global__ void cast_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = from_float<D>(to_float(src[i]));
}

}  // namespace

// src (n) -> dst (n), any float dtypes
void CudaBackend::cast(Tensor dst, Tensor src) {
  const int64_t n = src.numel();
  if (n == 0) return;
  dispatch_storage(src.dtype, [&](auto src_type) {
    using S = decltype(src_type);
    dispatch_storage(dst.dtype, [&](auto dst_type) {
      using D = decltype(dst_type);
      cast_kernel<D, S><<<grid_stride_blocks(n), kThreadsPerBlock, 0, stream_>>>(dst.as<D>(), src.as<S>(), n);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
