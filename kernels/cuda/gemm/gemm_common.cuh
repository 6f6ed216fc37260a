// What the GEMM rungs (gemm.h) share: the checks of a GemmArgs and the dispatch over its types on
// the host; on the device, the one epilogue of an element of D and the store of a bias-gradient
// sum, so every rung rounds in the same order.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/common/half.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/gemm/gemm.h"

namespace tt {

// Whether `rung` has anything to do: false for an empty D; throws std::invalid_argument, naming
// the rung and the GEMM, for what no rung computes.
inline bool gemm_has_work(const GemmArgs& g, const char* rung) {
  auto refuse = [&](const std::string& why) {
    throw std::invalid_argument(std::string(rung) + " GEMM " + describe_gemm_args(g) + ": " + why);
  };
  if (g.m < 0 || g.n < 0 || g.k < 0) refuse("a negative size");
  if (!is_float(g.ab_type)) refuse("A/B must be F32, BF16 or F16");
  if (g.d_type != g.ab_type && g.d_type != DType::F32) refuse("D must be A/B's type or F32");
  return g.m > 0 && g.n > 0;  // no linear layer has 0 inputs or outputs, so no bias gradient is lost
}

// fn(AB{}, Out{}) with the storage types of A/B and of D (float, bf16, f16).
template <typename Fn>
void dispatch_gemm_types(const GemmArgs& g, Fn&& fn) {
  dispatch_storage(g.ab_type, [&](auto ab) {
    if (g.d_type == DType::F32)
      fn(ab, float{});
    else
      fn(ab, ab);
  });
}

// The grid of a rung whose blocks own tile_m x tile_n tiles of D: (ceil(m/tile_m), ceil(n/tile_n)).
// gridDim.y holds at most 65535 blocks: past that n (the tokens, for a linear layer) is refused.
inline dim3 gemm_grid(const GemmArgs& g, int tile_m, int tile_n, const char* rung) {
  const int64_t blocks_n = ceil_div(g.n, tile_n);
  if (blocks_n > 65535)
    throw std::runtime_error(std::string(rung) + " GEMM: n=" + std::to_string(g.n) + " needs more than 65535 blocks of " +
                             std::to_string(tile_n) + " columns");
  return dim3(static_cast<unsigned int>(ceil_div(g.m, tile_m)), static_cast<unsigned int>(blocks_n));
}

// Whether a matrix whose stored rows hold `row_elements` elements of `element_bytes`, from `data`,
// can be read in 16-byte chunks (vector loads, cp.async): every row starts 16-byte aligned.
inline bool rows_16_byte_aligned(const void* data, int64_t row_elements, size_t element_bytes) {
  return reinterpret_cast<uintptr_t>(data) % 16 == 0 && (row_elements * static_cast<int64_t>(element_bytes)) % 16 == 0;
}

// One element of D: the fp32 product sum, then + beta C and + bias in fp32 (cuBLASLt's order:
// alpha AB + beta C + bias), rounded once into D's type. C is D itself, read before it is written.
template <typename Out>
__device__ __forceinline__ void store_output(Out* out, float product_sum, float beta, const Out* bias, int64_t row) {
  float v = product_sum;
  if (beta != 0.0f) v += beta * to_float(*out);
  if (bias) v += to_float(bias[row]);
  *out = from_float<Out>(v);
}

// One column's bias gradient, written or added (one rounding more, as on the CPU).
__device__ __forceinline__ void store_bias_grad(float* out, float column_sum, bool add) {
  if (add)
    *out += column_sum;
  else
    *out = column_sum;
}

}  // namespace tt
