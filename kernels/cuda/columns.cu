// Column windows of a row-major matrix (CUDA): a LoRA adapter's product added to its part of a
// fused projection's output, and its part of the output gradient read out (engine/lora.h).
// Views of any float storage type S (kernels/cuda/storage.cuh): fp32 math, scale * value
// rounded first and then the sum (mul_rn, add_rn: no fused multiply-add), so the bits are the
// CPU backend's.
#include <stdexcept>

#include "kernels/common/half.h"
#include "kernels/common/host_device.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

void check_window(const char* op, Tensor wide, Tensor narrow, int64_t first) {
  if (wide.shape.rank != 2 || narrow.shape.rank != 2 || wide.shape[0] != narrow.shape[0] || first < 0 ||
      first + narrow.shape[1] > wide.shape[1])
    throw std::invalid_argument(std::string(op) + ": the window does not fit the matrix");
}

// delta (N,W) -> out (N,O) columns [first, first + W) += scale * delta
// Decomposition: one thread per element of the window (N*W), grid-stride; consecutive threads
// take consecutive columns of a row, so both the window and delta are read coalesced.
template <typename S>
__global__ void add_scaled_columns_kernel(S* out, const S* delta, int64_t N, int64_t O, int64_t W, int64_t first,
                                          float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * W;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / W, j = i % W;
    S& o = out[n * O + first + j];
    o = from_float<S>(add_rn(to_float(o), mul_rn(scale, to_float(delta[i]))));
  }
}

// inp (N,O) -> out (N,W) = scale * inp columns [first, first + W); the same decomposition
template <typename S>
__global__ void copy_scaled_columns_kernel(S* out, const S* inp, int64_t N, int64_t O, int64_t W, int64_t first,
                                           float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * W;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / W, j = i % W;
    out[i] = from_float<S>(mul_rn(scale, to_float(inp[n * O + first + j])));
  }
}

}  // namespace

void CudaBackend::add_scaled_columns(Tensor out, int64_t first, Tensor delta, float scale) {
  check_window("add_scaled_columns", out, delta, first);
  const DType dtype = shared_storage_dtype("add_scaled_columns", {out, delta});
  const int64_t N = out.shape[0], O = out.shape[1], W = delta.shape[1];
  if (N * W == 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    add_scaled_columns_kernel<S><<<grid_stride_blocks(N * W), kThreadsPerBlock, 0, stream_>>>(
        out.as<S>(), delta.as<S>(), N, O, W, first, scale);
  });
  CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::copy_scaled_columns(Tensor out, Tensor inp, int64_t first, float scale) {
  check_window("copy_scaled_columns", inp, out, first);
  const DType dtype = shared_storage_dtype("copy_scaled_columns", {out, inp});
  const int64_t N = out.shape[0], O = inp.shape[1], W = out.shape[1];
  if (N * W == 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    copy_scaled_columns_kernel<S><<<grid_stride_blocks(N * W), kThreadsPerBlock, 0, stream_>>>(
        out.as<S>(), inp.as<S>(), N, O, W, first, scale);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
