// The GEMM ladder's second rung (gemm.h): D = op(A) op(B) [+ bias] + beta D, and the bias
// gradient, with shared-memory tiles and fp32 accumulation. It also runs a GEMM cuBLASLt finds no
// algorithm for (--gemm cublaslt); on the SIMT emulator the rungs are the GEMMs whose arithmetic
// is CUDA code (the emulated cuBLASLt is OpenBLAS). docs/kernels.md explains the tiling.
//
// ---- Decomposition ----
// One block of 16 x 16 = 256 threads computes a 64 x 64 tile of D. It walks k in steps of 16:
// the block loads the (64 x 16) slice of op(A) and the (16 x 64) slice of op(B) into shared
// memory (each thread 4 elements of each, widened to fp32), waits, and then every thread
// multiplies out its own 4 x 4 outputs from the shared tiles: each value loaded from global
// memory is used 64 times (the naive rung: once). Thread (tx, ty) owns rows i0 + tx + 16 r and
// columns j0 + ty + 16 c (r, c = 0..3), so neighbouring threads read neighbouring shared words
// and write neighbouring elements of D (a column of D is contiguous). The first row of blocks
// also makes the bias gradient: its threads 0..63 each sum one column of the op(B) slices.
//
// ---- Edges ----
// m, n and k need not be multiples of the tile: loads past an edge put 0 in the tile (adding
// 0 x 0 changes no sum), and stores past an edge are skipped. No alignment is assumed beyond
// the element's own, and leading dimensions may be anything: that is why it serves the GEMMs
// cuBLASLt declines.
//
// ---- Numerics ----
// Each output's k products are added in order p = 0, 1, ..., k-1 into one fp32 accumulator
// (16-bit operands widen exactly; a product of two 16-bit values is exact in fp32), so its
// error is that of a k-term fp32 sum, at most about k u sum|a_ip b_pj| with u = 2^-24. The
// epilogue adds beta C and the bias in fp32, in cuBLASLt's order (alpha AB + beta C + bias),
// and rounds once into D's type (gemm_common.cuh). The bias gradient adds its column in the
// same order from zero: the CPU backend's bits. No atomics, no split-k: the same bits every run.
#include <cstdint>

#include "kernels/common/half.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_common.cuh"

namespace tt {

namespace {

constexpr int kTileM = 64;      // rows of D per block
constexpr int kTileN = 64;      // columns of D per block
constexpr int kTileK = 16;      // the slice of k loaded per step
constexpr int kThreadsSide = 16;  // 16 x 16 threads per block
constexpr int kGemmThreads = kThreadsSide * kThreadsSide;
constexpr int kPerThread = kTileM / kThreadsSide;  // 4 x 4 outputs per thread
static_assert(kTileN / kThreadsSide == kPerThread, "square micro tiles");
static_assert((kTileM * kTileK) % kGemmThreads == 0 && (kTileK * kTileN) % kGemmThreads == 0, "whole loads");

// A (m,k) or, with transa, (k,m); B (k,n) or, with transb, (n,k); D, bias (m) or null -> D (m,n)
// and bias_grad (n) or null, column-major, as in gemm.h. Grid (ceil(m/64), ceil(n/64)), 256 threads.
template <typename AB, typename Out>
__global__ void tiled_gemm_kernel(Out* d, const AB* a, const AB* b, const Out* bias, float* bias_grad, int m, int n,
                                  int k, bool transa, bool transb, float beta, bool add_bias_grad) {
  // a_tile[p][i] = op(A)[i0 + i][p0 + p], b_tile[p][j] = op(B)[p0 + p][j0 + j]. One spare column:
  // a transposed A is stored along k, so its loads write down a column of a_tile; with rows of
  // 65 words those 16 writes fall in 16 different shared-memory banks instead of one.
  __shared__ float a_tile[kTileK][kTileM + 1];
  __shared__ float b_tile[kTileK][kTileN + 1];
  const int tx = static_cast<int>(threadIdx.x) % kThreadsSide, ty = static_cast<int>(threadIdx.x) / kThreadsSide;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kTileM, j0 = static_cast<int64_t>(blockIdx.y) * kTileN;

  float acc[kPerThread][kPerThread] = {};
  // The bias gradient: the first row of blocks sums its columns of op(B) from the slices it loads
  // anyway, one thread per column.
  const bool sums_a_column = bias_grad && blockIdx.x == 0 && threadIdx.x < kTileN;
  float column_sum = 0.0f;
  for (int p0 = 0; p0 < k; p0 += kTileK) {
    // Load both slices, consecutive threads on consecutive addresses of the stored matrix: down
    // a column of A (the i direction) when A is not transposed, along k when it is; B likewise.
    for (int e = static_cast<int>(threadIdx.x); e < kTileM * kTileK; e += kGemmThreads) {
      const int i = transa ? e / kTileK : e % kTileM, p = transa ? e % kTileK : e / kTileM;
      const int64_t row = i0 + i, depth = p0 + p;
      float v = 0.0f;
      if (row < m && depth < k) v = to_float(transa ? a[row * k + depth] : a[depth * m + row]);
      a_tile[p][i] = v;
    }
    for (int e = static_cast<int>(threadIdx.x); e < kTileK * kTileN; e += kGemmThreads) {
      const int j = transb ? e % kTileN : e / kTileK, p = transb ? e / kTileN : e % kTileK;
      const int64_t col = j0 + j, depth = p0 + p;
      float v = 0.0f;
      if (col < n && depth < k) v = to_float(transb ? b[depth * n + col] : b[col * k + depth]);
      b_tile[p][j] = v;
    }
    __syncthreads();  // the tiles are complete before anyone multiplies
    if (sums_a_column)
      for (int p = 0; p < kTileK; ++p) column_sum += b_tile[p][threadIdx.x];
    for (int p = 0; p < kTileK; ++p) {
      float av[kPerThread], bv[kPerThread];
      for (int r = 0; r < kPerThread; ++r) av[r] = a_tile[p][tx + r * kThreadsSide];
      for (int c = 0; c < kPerThread; ++c) bv[c] = b_tile[p][ty + c * kThreadsSide];
      for (int r = 0; r < kPerThread; ++r)
        for (int c = 0; c < kPerThread; ++c) acc[r][c] += av[r] * bv[c];
    }
    __syncthreads();  // everyone is done with the tiles before the next slice overwrites them
  }

  if (sums_a_column && j0 + threadIdx.x < n) store_bias_grad(bias_grad + j0 + threadIdx.x, column_sum, add_bias_grad);
  for (int c = 0; c < kPerThread; ++c) {
    const int64_t col = j0 + ty + c * kThreadsSide;
    if (col >= n) continue;
    for (int r = 0; r < kPerThread; ++r) {
      const int64_t row = i0 + tx + r * kThreadsSide;
      if (row >= m) continue;
      store_output(d + col * m + row, acc[r][c], beta, bias, row);
    }
  }
}

}  // namespace

void gemm_tiled(const GemmArgs& g, cudaStream_t stream) {
  if (!gemm_has_work(g, "tiled")) return;
  const dim3 grid = gemm_grid(g, kTileM, kTileN, "tiled");
  dispatch_gemm_types(g, [&](auto ab, auto out) {
    using AB = decltype(ab);
    using Out = decltype(out);
    tiled_gemm_kernel<AB, Out><<<grid, kGemmThreads, 0, stream>>>(
        static_cast<Out*>(g.D), static_cast<const AB*>(g.A), static_cast<const AB*>(g.B),
        static_cast<const Out*>(g.bias), g.bias_grad, g.m, g.n, g.k, g.transa, g.transb, g.beta, g.add_bias_grad);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
