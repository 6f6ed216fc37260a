// The GEMM ladder's first rung (gemm.h): D = op(A) op(B) [+ bias] + beta D, and the bias
// gradient, with one thread per element of D reading its row of op(A) and its column of op(B)
// straight from global memory. The product as its definition says, for reading and for
// comparison: every operand element is loaded once per multiply-add (two loads per two FLOPs),
// which is what the rungs after it remove.
//
// ---- Decomposition ----
// Blocks of 32 x 8 threads, thread (x, y) of block (bx, by) owns D[32 bx + x][8 by + y]: the 32
// threads of a warp own 32 consecutive rows of one column of D, so their stores (D is
// column-major) and their loads of a non-transposed A are coalesced; all of them read the same
// element of op(B) at each step (one broadcast load). The threads of D's first row also sum
// their column of op(B) for the bias gradient: one thread per column, k loads more.
//
// ---- Numerics ----
// Each element adds its k products in order p = 0, 1, ..., k-1 into one fp32 accumulator:
// products of 16-bit operands are exact in fp32 (8 + 8 or 11 + 11 significant bits), fp32
// products are rounded at most once (nvcc fuses each multiply-add: the product unrounded), so the
// error is that of a k-term fp32 sum, at most about k u sum_p |a_ip b_pj| (u = 2^-24). Then
// beta C and the bias in fp32 and one rounding into D's type (gemm_common.cuh). The bias
// gradient sums the column in the same order from zero: the CPU backend's bits.
#include <cstdint>

#include "kernels/common/half.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_common.cuh"

namespace tt {

namespace {

constexpr int kRowsPerBlock = 32;     // threadIdx.x: a warp down one column of D
constexpr int kColumnsPerBlock = 8;   // threadIdx.y

// A (m,k) or, with transa, (k,m); B (k,n) or, with transb, (n,k); D, bias (m) or null -> D (m,n)
// and bias_grad (n) or null, column-major, as in gemm.h. Grid (ceil(m/32), ceil(n/8)), 32 x 8 threads.
template <typename AB, typename Out>
__global__ void naive_gemm_kernel(Out* d, const AB* a, const AB* b, const Out* bias, float* bias_grad, int m, int n,
                                  int k, bool transa, bool transb, float beta, bool add_bias_grad) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kColumnsPerBlock + threadIdx.y;
  if (col >= n) return;
  if (bias_grad && row == 0) {
    float column_sum = 0.0f;
    for (int64_t p = 0; p < k; ++p) column_sum += to_float(transb ? b[p * n + col] : b[col * k + p]);
    store_bias_grad(bias_grad + col, column_sum, add_bias_grad);
  }
  if (row >= m) return;
  float sum = 0.0f;
  for (int64_t p = 0; p < k; ++p)
    sum += to_float(transa ? a[row * k + p] : a[p * m + row]) * to_float(transb ? b[p * n + col] : b[col * k + p]);
  store_output(d + col * m + row, sum, beta, bias, row);
}

}  // namespace

void gemm_naive(const GemmArgs& g, cudaStream_t stream) {
  if (!gemm_has_work(g, "naive")) return;
  const dim3 grid = gemm_grid(g, kRowsPerBlock, kColumnsPerBlock, "naive");
  dispatch_gemm_types(g, [&](auto ab, auto out) {
    using AB = decltype(ab);
    using Out = decltype(out);
    naive_gemm_kernel<AB, Out><<<grid, dim3(kRowsPerBlock, kColumnsPerBlock), 0, stream>>>(
        static_cast<Out*>(g.D), static_cast<const AB*>(g.A), static_cast<const AB*>(g.B),
        static_cast<const Out*>(g.bias), g.bias_grad, g.m, g.n, g.k, g.transa, g.transb, g.beta, g.add_bias_grad);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
