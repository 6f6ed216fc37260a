// Conversion between float storage types (CUDA), with the shared rounding of
// kernels/common/half.h: the working weights are the fp32 masters rounded to bf16 or fp16.
#include <stdexcept>

#include "kernels/common/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace tt {

namespace {

// src (n) -> dst (n). One thread per element, grid-stride.
template <typename D, typename S>
__global__ void cast_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = from_float<D>(to_float(src[i]));
}

template <typename D, typename S>
void launch_cast(Tensor dst, Tensor src, cudaStream_t stream) {
  const int64_t n = src.numel();
  if (n == 0) return;
  cast_kernel<D, S><<<grid_stride_blocks(n), kThreadsPerBlock, 0, stream>>>(dst.as<D>(), src.as<S>(), n);
  CUDA_CHECK(cudaGetLastError());
}

template <typename S>
void cast_from(Tensor dst, Tensor src, cudaStream_t stream) {
  switch (dst.dtype) {
    case DType::F32: return launch_cast<float, S>(dst, src, stream);
    case DType::BF16: return launch_cast<bf16, S>(dst, src, stream);
    case DType::F16: return launch_cast<f16, S>(dst, src, stream);
    default: throw std::logic_error("cast: the destination is not a float tensor");
  }
}

}  // namespace

// src (n) -> dst (n), any float dtypes
void CudaBackend::cast(Tensor dst, Tensor src) {
  switch (src.dtype) {
    case DType::F32: return cast_from<float>(dst, src, stream_);
    case DType::BF16: return cast_from<bf16>(dst, src, stream_);
    case DType::F16: return cast_from<f16>(dst, src, stream_);
    default: throw std::logic_error("cast: the source is not a float tensor");
  }
}

}  // namespace tt
