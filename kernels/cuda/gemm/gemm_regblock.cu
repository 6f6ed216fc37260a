// The GEMM ladder's third rung (gemm.h): D = op(A) op(B) [+ bias] + beta D, and the bias
// gradient, with shared-memory tiles as the tiled rung, made larger, and each thread holding an
// 8 x 8 block of D in registers, fed by 16-byte loads.
//
// ---- Decomposition ----
// One block of 16 x 16 = 256 threads computes a 128 x 128 tile of D (the tiled rung: 64 x 64),
// walking k in slices of 16. Thread (tx, ty) owns the rows i0 + 4 tx + {0..3} and
// i0 + 64 + 4 tx + {0..3}, and the same columns with ty: an 8 x 8 block of D as 2 x 2 blocks of
// 4 x 4, 64 accumulators in registers. Per step of k it reads its 8 values of op(A) and 8 of
// op(B) from shared memory as four 16-byte loads (each 4 consecutive floats) and makes 64
// multiply-adds of them: 1 shared load instruction per 16 multiply-adds, where the tiled rung
// makes 1 per 2 (8 scalar loads for 16). Within a quarter warp (the 8 threads a 16-byte shared
// load serves per pass) the threads read 8 consecutive 16-byte words: no bank conflict. Each
// element loaded from global memory serves 128 multiply-adds (the tiled rung: 64).
//
// ---- Loads ----
// A slice is copied in 16-byte chunks along the dimension the stored matrix is contiguous in
// (4 fp32 or 8 bf16/fp16 elements): down a column of a non-transposed A (m) or along k for a
// transposed one; along k for a non-transposed B, along n for a transposed one. A chunk is one
// 16-byte load (ld.global.v4) when the matrix's rows are 16-byte aligned (its pointer and its
// leading dimension) and the chunk lies inside the matrix; otherwise element by element, with
// zeros past the edges. Widened to fp32, the chunk goes into the tile: as 16-byte stores where
// it runs along the tile's rows (m or n), as single floats down a column where it runs along k.
//
// ---- Numerics ----
// As the tiled rung: each output adds its k products in order p = 0, 1, ..., k-1 into one fp32
// accumulator (the products of 16-bit operands exact), so its error is that of a k-term fp32 sum,
// at most about k u sum|a_ip b_pj| (u = 2^-24); then beta C and the bias in fp32 and one rounding
// (gemm_common.cuh). The bias gradient adds its column in the same order from zero: the CPU
// backend's bits.
#include <cstdint>

#include "kernels/common/half.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_common.cuh"

namespace tt {

namespace {

constexpr int kTileM = 128;       // rows of D per block
constexpr int kTileN = 128;       // columns of D per block
constexpr int kTileK = 16;        // the slice of k loaded per step
constexpr int kThreadsSide = 16;  // 16 x 16 threads per block
constexpr int kGemmThreads = kThreadsSide * kThreadsSide;
constexpr int kQuad = 4;                            // a thread's 8 rows (columns): 2 runs of 4
constexpr int kHalfTile = kTileM / 2;               // the second run starts here
constexpr int kPerThread = 2 * kQuad;               // 8 x 8 outputs per thread
constexpr int kTilePad = 4;  // keeps tile rows 16-byte aligned, and spreads the down-a-column stores over banks
static_assert(kThreadsSide * kQuad == kHalfTile && kTileN == kTileM, "two runs of 4 per thread cover the tile");

// Four floats, loaded or stored as one (ld/st .v4 on the GPU).
struct alignas(16) Float4 {
  float v[4];
};

// The (kTileK x 128) slice of op(X) at depth p0 and rows (or columns) x0.. into tile[p][x], fp32:
// op(A) with x = i (m), or op(B) with x = j (n). Element (x, p) of the stored matrix is
// x_major ? X[p * x_len + x] : X[x * k + p] (A: x_major = !transa; B: x_major = transb).
// vector_ok: X's rows are 16-byte aligned (pointer and leading dimension).
template <typename T>
__device__ void load_slice(float (&tile)[kTileK][kTileM + kTilePad], const T* x, int64_t x_len, int k, int64_t x0,
                           int p0, bool x_major, bool vector_ok) {
  constexpr int kChunk = 16 / sizeof(T);  // elements per chunk
  constexpr int kChunks = kTileK * kTileM / kChunk;
  for (int c = static_cast<int>(threadIdx.x); c < kChunks; c += kGemmThreads) {
    // Consecutive threads take consecutive chunks of the stored matrix: along x when x_major,
    // along p otherwise.
    const int chunks_per_line = (x_major ? kTileM : kTileK) / kChunk;
    const int line = c / chunks_per_line, first = (c % chunks_per_line) * kChunk;
    const int xi = x_major ? first : line, pi = x_major ? line : first;  // the chunk's first element in the tile
    const int64_t xg = x0 + xi, pg = p0 + pi;
    // element e of the chunk: (xg + e, pg) when x_major, (xg, pg + e) otherwise
    auto inside = [&](int e) { return x_major ? xg + e < x_len && pg < k : xg < x_len && pg + e < k; };
    const T* src = x_major ? x + pg * x_len + xg : x + xg * k + pg;
    Chunk<T> chunk;
    if (vector_ok && inside(0)) {  // 16-byte aligned rows hold whole chunks: all of this one is inside
      chunk = *reinterpret_cast<const Chunk<T>*>(src);
    } else {
      for (int e = 0; e < kChunk; ++e) chunk.v[e] = inside(e) ? src[e] : from_float<T>(0.0f);
    }
    for (int q = 0; q < kChunk; q += kQuad) {
      Float4 wide;
      for (int e = 0; e < kQuad; ++e) wide.v[e] = to_float(chunk.v[q + e]);
      if (x_major) {
        *reinterpret_cast<Float4*>(&tile[pi][xi + q]) = wide;
      } else {
        for (int e = 0; e < kQuad; ++e) tile[pi + q + e][xi] = wide.v[e];
      }
    }
  }
}

// A (m,k) or, with transa, (k,m); B (k,n) or, with transb, (n,k); D, bias (m) or null -> D (m,n)
// and bias_grad (n) or null, column-major, as in gemm.h. Grid (ceil(m/128), ceil(n/128)), 256 threads.
template <typename AB, typename Out>
__global__ void regblock_gemm_kernel(Out* d, const AB* a, const AB* b, const Out* bias, float* bias_grad, int m, int n,
                                     int k, bool transa, bool transb, float beta, bool add_bias_grad, bool a_vector_ok,
                                     bool b_vector_ok) {
  // a_tile[p][i] = op(A)[i0 + i][p0 + p], b_tile[p][j] = op(B)[p0 + p][j0 + j]
  __shared__ __align__(16) float a_tile[kTileK][kTileM + kTilePad];
  __shared__ __align__(16) float b_tile[kTileK][kTileN + kTilePad];
  const int tx = static_cast<int>(threadIdx.x) % kThreadsSide, ty = static_cast<int>(threadIdx.x) / kThreadsSide;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kTileM, j0 = static_cast<int64_t>(blockIdx.y) * kTileN;

  float acc[kPerThread][kPerThread] = {};
  // The bias gradient: the first row of blocks sums its columns of op(B) from the slices it loads
  // anyway, one thread per column.
  const bool sums_a_column = bias_grad && blockIdx.x == 0 && threadIdx.x < kTileN;
  float column_sum = 0.0f;
  for (int p0 = 0; p0 < k; p0 += kTileK) {
    load_slice(a_tile, a, m, k, i0, p0, !transa, a_vector_ok);
    load_slice(b_tile, b, n, k, j0, p0, transb, b_vector_ok);
    __syncthreads();  // the tiles are complete before anyone multiplies
    if (sums_a_column)
      for (int p = 0; p < kTileK; ++p) column_sum += b_tile[p][threadIdx.x];
    for (int p = 0; p < kTileK; ++p) {
      float av[kPerThread], bv[kPerThread];
      for (int half = 0; half < 2; ++half) {
        const Float4 a4 = *reinterpret_cast<const Float4*>(&a_tile[p][half * kHalfTile + tx * kQuad]);
        const Float4 b4 = *reinterpret_cast<const Float4*>(&b_tile[p][half * kHalfTile + ty * kQuad]);
        for (int e = 0; e < kQuad; ++e) {
          av[half * kQuad + e] = a4.v[e];
          bv[half * kQuad + e] = b4.v[e];
        }
      }
      for (int r = 0; r < kPerThread; ++r)
        for (int c = 0; c < kPerThread; ++c) acc[r][c] += av[r] * bv[c];
    }
    __syncthreads();  // everyone is done with the tiles before the next slice overwrites them
  }

  if (sums_a_column && j0 + threadIdx.x < n) store_bias_grad(bias_grad + j0 + threadIdx.x, column_sum, add_bias_grad);
  for (int c = 0; c < kPerThread; ++c) {
    const int64_t col = j0 + (c / kQuad) * kHalfTile + ty * kQuad + c % kQuad;
    if (col >= n) continue;
    for (int r = 0; r < kPerThread; ++r) {
      const int64_t row = i0 + (r / kQuad) * kHalfTile + tx * kQuad + r % kQuad;
      if (row >= m) continue;
      store_output(d + col * m + row, acc[r][c], beta, bias, row);
    }
  }
}

}  // namespace

void gemm_regblock(const GemmArgs& g, cudaStream_t stream) {
  if (!gemm_has_work(g, "regblock")) return;
  const dim3 grid = gemm_grid(g, kTileM, kTileN, "regblock");
  const size_t ab_bytes = dtype_size(g.ab_type);
  // stored rows: A's of k elements when transposed, else of m; B's of n when transposed, else of k
  const bool a_vector_ok = rows_16_byte_aligned(g.A, g.transa ? g.k : g.m, ab_bytes);
  const bool b_vector_ok = rows_16_byte_aligned(g.B, g.transb ? g.n : g.k, ab_bytes);
  dispatch_gemm_types(g, [&](auto ab, auto out) {
    using AB = decltype(ab);
    using Out = decltype(out);
    regblock_gemm_kernel<AB, Out><<<grid, kGemmThreads, 0, stream>>>(
        static_cast<Out*>(g.D), static_cast<const AB*>(g.A), static_cast<const AB*>(g.B),
        static_cast<const Out*>(g.bias), g.bias_grad, g.m, g.n, g.k, g.transa, g.transb, g.beta, g.add_bias_grad,
        a_vector_ok, b_vector_ok);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
