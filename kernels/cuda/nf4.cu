// NF4 dequantisation (CUDA): a frozen weight stored in 4 bits (kernels/common/nf4.h) decoded into
// a float view, QLoRA's base weight made ready for a GEMM. The fp32 operations are nf4.h's, each
// rounded as written (mul_rn, add_rn), so the bits are the CPU backend's.
#include <cstdint>

#include "kernels/common/half.h"
#include "kernels/common/nf4.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

// codes (n/2) U8, absmax_codes (ceil(n/64)) U8, absmax2 (ceil(n/16384)) F32, offset (1) F32 -> out (n)
// Decomposition: one thread per weight, grid-stride. Consecutive threads take consecutive
// weights: a warp writes 32 consecutive outputs and reads 16 consecutive code bytes, and the
// absmax code of its 64-weight block (two warps share one). Each thread block first fills its
// shared copies of the 16 levels and the 256 values of the dynamic map (nf4.h computes them from
// their definitions), then waits for them at the one barrier.
template <typename S>
__global__ void nf4_dequantize_kernel(S* out, const uint8_t* codes, const uint8_t* absmax_codes,
                                      const float* absmax2, const float* offset, int64_t n) {
  __shared__ float levels[nf4::kLevels];
  __shared__ float dynamic_map[nf4::kDynamicCodes];
  for (int c = threadIdx.x; c < nf4::kDynamicCodes; c += blockDim.x) {
    dynamic_map[c] = nf4::dynamic_map_value(c);
    if (c < nf4::kLevels) levels[c] = nf4::level(c);
  }
  __syncthreads();
  const float mean_absmax = *offset;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t block = i / nf4::kBlockSize;
    const float absmax =
        nf4::block_absmax(dynamic_map[absmax_codes[block]], absmax2[block / nf4::kAbsmaxBlockSize], mean_absmax);
    const uint8_t byte = codes[i / 2];
    const int code = i % 2 == 0 ? byte >> 4 : byte & 0x0F;  // element 2j: the high nibble
    out[i] = from_float<S>(nf4::dequantize(levels[code], absmax));
  }
}

}  // namespace

void CudaBackend::nf4_dequantize(Tensor out, const Nf4Tensor& w) {
  check_nf4_views("nf4_dequantize", out, w);
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_storage(out.dtype, [&](auto storage) {
    using S = decltype(storage);
    nf4_dequantize_kernel<S><<<grid_stride_blocks(n), kThreadsPerBlock, 0, stream_>>>(
        out.as<S>(), w.codes.u8(), w.absmax_codes.u8(), w.absmax2.f32(), w.offset.f32(), n);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
