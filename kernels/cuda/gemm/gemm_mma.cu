// The GEMM ladder's fourth rung (gemm.h): D = op(A) op(B) [+ bias] + beta D, and the bias
// gradient, on tensor cores: each warp multiplies 16 x 16 by 16 x 8 blocks in one mma.sync
// (kernels/cuda/mma.cuh, the only place with PTX), its operands brought from shared memory by
// ldmatrix, the shared tiles filled by cp.async in two stages, so the copy of the next slice of k
// runs while the tensor cores work on this one. bf16 and fp16 operands multiply as they are;
// fp32 operands only as TF32 (m16n8k8, 10-bit mantissas), and only where the user allowed it
// (GemmArgs::allow_tf32, --tf32), as cuBLASLt does: the CUDA backend runs an fp32 GEMM without it
// on the regblock rung (linear.cu).
//
// ---- Decomposition ----
// One block of 4 warps (128 threads) computes a 64 x 64 tile of D, each warp a 32 x 32 quarter:
// 2 x 4 mma tiles of 16 x 8, 32 fp32 accumulators per thread. The block walks k in stages of
// one 128-byte line of k per row: 64 elements (16-bit) or 32 (fp32). Per stage and per 16 (tf32:
// 8) of k, a warp loads its A fragments with 2 ldmatrix.x4 and its B fragments with 2 more, then
// issues 8 mma.sync. Each element loaded from global memory serves 64 multiply-adds (the regblock
// rung: 128), but a multiply-add costs a tensor core a sixteenth of a CUDA-core cycle or less.
//
// ---- Shared layout ----
// A stage holds each operand as 64 lines of 128 bytes (8 KiB; two stages of two operands: 32 KiB),
// in the layout the operand has in global memory, so that 16-byte chunks copy straight across:
//   k-major (A transposed, B not): one line per row (m or n) of the tile, holding its k slice;
//   m/n-major (A not transposed, B transposed): one line per k (two in fp32), holding 64 rows.
// ldmatrix reads 8 rows of 16 bytes per 8x8 matrix: from a k-major tile each lane's register is
// exactly its A or B fragment; from an m/n-major tile the matrices are stored transposed, and
// ldmatrix .trans transposes them back (16-bit elements only: a tf32 m/n-major tile is read by
// plain 32-bit loads). The 8 chunks of line L sit at chunk index c XOR (L % 8): the 8 rows one
// ldmatrix phase reads are 8 consecutive lines at one chunk index, which the swizzle spreads over
// the 8 chunk positions, all 32 banks: no bank conflict (unswizzled, all 8 would hit the same 4).
//
// ---- Copies and edges ----
// Each thread copies 4 chunks of 16 bytes per operand per stage. Where the operand's rows are
// 16-byte aligned (pointer and leading dimension) a chunk is one cp.async (cp.async.cg: 16 bytes,
// L2 only), zero-filled past the matrix's edge by its src_bytes argument; elsewhere (odd leading
// dimensions, element-aligned views) the same chunk is loaded element by element and stored, the
// same layout. Rows and columns of D past m and n compute on zeros and are not stored; k past the
// end of the last stage is zero in both operands. Double buffering: stage s+1's copies are issued
// before stage s is multiplied; cp.async.wait_group 1 waits for stage s only, a barrier makes it
// every thread's, and a second barrier keeps stage s+2 from being copied over stage s while a warp
// still reads it.
//
// ---- Numerics ----
// fp32 accumulators, products exact in fp32 (bf16 x bf16, fp16 x fp16, tf32 x tf32). The order of
// the sums is the tensor core's: each mma adds its 16 (tf32: 8) products to the accumulator, and
// the mma of p = 0..15 comes before the one of p = 16..31; the SIMT emulator adds the products one
// at a time in k order, rounding each sum (simt/tensor_core.h), which gives the other rungs' k-term
// fp32 error, k u sum|a_ip b_pj| (u = 2^-24). A GPU's tensor cores align the products of one mma
// and truncate, so their error is up to about twice that; tolerances must allow it. TF32 rounds
// each fp32 operand to 10 mantissa bits first (to_tf32: round to nearest), a relative error of up
// to 2^-11 per operand, 2^-10 per product. Then beta C and the bias in fp32 and one rounding
// (gemm_common.cuh). The bias gradient sums op(B)'s column from the shared tiles (the fp32 values
// for tf32, not their TF32 roundings) in order p = 0, 1, ..., k-1 from zero: the CPU backend's bits.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common/half.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/mma.cuh"

namespace tt {

namespace {

constexpr int kTileMN = 64;      // rows and columns of D per block
constexpr int kWarpTile = 32;    // rows and columns of D per warp: 2 x 2 warps
constexpr int kWarps = (kTileMN / kWarpTile) * (kTileMN / kWarpTile);
constexpr int kGemmThreads = 32 * kWarps;
constexpr int kMTiles = kWarpTile / 16;  // mma tiles per warp: 16 rows each...
constexpr int kNTiles = kWarpTile / 8;   // ... by 8 columns each
constexpr int kLineBytes = 128;          // a line of a shared tile: 8 chunks
constexpr int kChunkBytes = 16;
constexpr int kChunksPerLine = kLineBytes / kChunkBytes;
constexpr int kTileLines = 64;           // lines of one operand's tile in one stage: 8 KiB
constexpr int kTileBytes = kTileLines * kLineBytes;
constexpr int kStages = 2;

// The k depth of a stage (one line of k per row) and of one mma, for operands of type T.
template <typename T>
constexpr int kStageK = kLineBytes / static_cast<int>(sizeof(T));  // 64 (16-bit) or 32 (fp32)
template <typename T>
constexpr int kMmaK = std::is_same<T, float>::value ? 8 : 16;
template <typename T>
constexpr int kChunkElements = kChunkBytes / static_cast<int>(sizeof(T));

// An operand as the kernel reads it: op(A) (m,k) or op(B)^T (n,k) alike, an (mn, k) matrix.
template <typename T>
struct MmaOperand {
  const T* data;
  int64_t mn_len;  // m for A, n for B
  bool k_major;    // stored with k contiguous: A transposed, B not; else m (n) contiguous
  bool async;      // its rows are 16-byte aligned: copied by cp.async, else element by element
};

// The byte offset of chunk `chunk` of line `line` in a tile: the swizzle.
__device__ __forceinline__ int chunk_offset(int line, int chunk) {
  return line * kLineBytes + (chunk ^ (line % kChunksPerLine)) * kChunkBytes;
}

// The tile's rows are the stored matrix's: (mn) rows of kStageK elements, one line each, when
// k-major; (kl) rows of 64 elements when m/n-major, one line each (16-bit) or two (fp32).
template <typename T>
__device__ __forceinline__ int lines_per_row(bool k_major) {
  return k_major ? 1 : kTileMN * static_cast<int>(sizeof(T)) / kLineBytes;
}

// The byte offset of element (mn, kl) of an operand's tile: mn 0..63 along m (A) or n (B), kl
// along k within the stage.
template <typename T>
__device__ __forceinline__ int tile_offset(bool k_major, int mn, int kl) {
  const int row = k_major ? mn : kl;
  const int byte_in_row = (k_major ? kl : mn) * static_cast<int>(sizeof(T));
  const int line = row * lines_per_row<T>(k_major) + byte_in_row / kLineBytes;
  return chunk_offset(line, byte_in_row % kLineBytes / kChunkBytes) + byte_in_row % kChunkBytes;
}

// Copies (issues the copies of) the operand's 64 x kStageK slice at rows mn0.., depth p0.. into
// `tile`, zeros past the matrix's edges. 8 consecutive threads copy the 8 chunks of one line:
// 128 consecutive bytes of the stored matrix.
template <typename T>
__device__ void load_stage(char* tile, const MmaOperand<T>& x, int64_t mn0, int p0, int k) {
  const int row_lines = lines_per_row<T>(x.k_major);
  const int64_t outer_len = x.k_major ? x.mn_len : k, inner_len = x.k_major ? k : x.mn_len;
  for (int c = static_cast<int>(threadIdx.x); c < kTileLines * kChunksPerLine; c += kGemmThreads) {
    const int line = c / kChunksPerLine, chunk = c % kChunksPerLine;
    const int row = line / row_lines;
    const int first = ((line % row_lines) * kLineBytes + chunk * kChunkBytes) / static_cast<int>(sizeof(T));
    const int64_t outer = (x.k_major ? mn0 : p0) + row, inner = (x.k_major ? p0 : mn0) + first;
    const int64_t left = outer < outer_len ? inner_len - inner : 0;
    const int valid = static_cast<int>(left < 0 ? 0 : left < kChunkElements<T> ? left : kChunkElements<T>);
    const T* src = valid > 0 ? x.data + outer * inner_len + inner : x.data;
    char* dst = tile + chunk_offset(line, chunk);
    if (x.async) {
      cp_async_cg(dst, src, valid * static_cast<int>(sizeof(T)));
    } else {
      Chunk<T> chunk_data;
      for (int e = 0; e < kChunkElements<T>; ++e) chunk_data.v[e] = e < valid ? src[e] : from_float<T>(0.0f);
      *reinterpret_cast<Chunk<T>*>(dst) = chunk_data;
    }
  }
}

// Four fragment registers of the warp's operand block at (mn, kl): 16 rows of m by one mma's k
// for A (a0..a3), or 16 columns of n by one mma's k for B (b0, b1 of columns 0-7, then b0, b1 of
// columns 8-15). Register j comes from an 8 x 8 matrix of 16-bit elements (8 x 4 of fp32), 8 rows
// further down mn when bit 0 of place(j) is set, one chunk further along k when bit 1 is: A's
// registers step down m first (a1: rows 8-15), B's along k first (b1: the upper half of k), the
// PTX ISA's fragment orders. tf32: the fp32 values rounded to TF32.
template <typename T>
__device__ void load_fragments(uint32_t (&regs)[4], const char* tile, bool k_major, int mn, int kl, bool operand_a) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  auto place = [&](int j) { return operand_a ? j : (j % 2) * 2 + j / 2; };
  auto mn_at = [&](int j) { return mn + 8 * (place(j) % 2); };
  auto k_at = [&](int j) { return kl + kChunkElements<T> * (place(j) / 2); };
  if constexpr (std::is_same<T, float>::value) {
    if (!k_major) {  // ldmatrix .trans moves 16-bit elements: read a lane's element of each matrix
      for (int j = 0; j < 4; ++j) {
        const int offset = tile_offset<T>(false, mn_at(j) + lane / 4, k_at(j) + lane % 4);
        regs[j] = to_tf32(*reinterpret_cast<const float*>(tile + offset));
      }
      return;
    }
  }
  // Lanes 8j..8j+7 give the addresses of matrix j's 8 rows: along mn in a k-major tile, along k
  // in an m/n-major one.
  const int j = lane / 8, r = lane % 8;
  const char* row =
      tile + (k_major ? tile_offset<T>(true, mn_at(j) + r, k_at(j)) : tile_offset<T>(false, mn_at(j), k_at(j) + r));
  if (k_major)
    ldmatrix<4, false>(regs, row);
  else
    ldmatrix<4, true>(regs, row);
  if constexpr (std::is_same<T, float>::value)
    for (int i = 0; i < 4; ++i) regs[i] = to_tf32(bits_float(regs[i]));
}

// acc (16 x 8) += a b on the tensor cores: m16n8k16 for bf16/fp16, m16n8k8 for tf32.
template <typename T>
__device__ __forceinline__ void mma(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (std::is_same<T, float>::value)
    mma_m16n8k8_tf32(acc, a, b, acc);
  else
    mma_m16n8k16<T>(acc, a, b, acc);
}

// A (m,k) or, with transa, (k,m); B (k,n) or, with transb, (n,k) (as MmaOperand); D, bias (m) or
// null -> D (m,n) and bias_grad (n) or null, column-major, as in gemm.h. Grid (ceil(m/64),
// ceil(n/64)), 128 threads.
template <typename T, typename Out>
__global__ void mma_gemm_kernel(Out* d, MmaOperand<T> a, MmaOperand<T> b, const Out* bias, float* bias_grad, int m, int n,
                                int k, float beta, bool add_bias_grad) {
  __shared__ __align__(128) char tiles[kStages][2][kTileBytes];  // [stage][A, B]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kTileMN, j0 = static_cast<int64_t>(blockIdx.y) * kTileMN;
  const int wm = (warp % 2) * kWarpTile, wn = (warp / 2) * kWarpTile;  // the warp's quarter of the tile

  float acc[kMTiles][kNTiles][4] = {};
  // The bias gradient: the first row of blocks sums its columns of op(B) from the tiles, one
  // thread (of warps 0 and 1) per column.
  const bool sums_a_column = bias_grad && blockIdx.x == 0 && threadIdx.x < kTileMN;
  float column_sum = 0.0f;
  const int stages = (k + kStageK<T> - 1) / kStageK<T>;
  if (stages > 0) {
    load_stage(tiles[0][0], a, i0, 0, k);
    load_stage(tiles[0][1], b, j0, 0, k);
  }
  cp_async_commit_group();
  for (int s = 0; s < stages; ++s) {
    if (s + 1 < stages) {
      load_stage(tiles[(s + 1) % kStages][0], a, i0, (s + 1) * kStageK<T>, k);
      load_stage(tiles[(s + 1) % kStages][1], b, j0, (s + 1) * kStageK<T>, k);
    }
    cp_async_commit_group();
    cp_async_wait_group<1>();  // this thread's copies of stage s have landed; stage s + 1's may still fly
    __syncthreads();           // ... and every thread's: stage s is complete
    const char* a_tile = tiles[s % kStages][0];
    const char* b_tile = tiles[s % kStages][1];
    if (sums_a_column)
      for (int kl = 0; kl < kStageK<T>; ++kl)
        column_sum += to_float(*reinterpret_cast<const T*>(b_tile + tile_offset<T>(b.k_major, threadIdx.x, kl)));
    for (int kl = 0; kl < kStageK<T>; kl += kMmaK<T>) {
      uint32_t a_frag[kMTiles][4], b_frag[kNTiles][2];
      for (int mi = 0; mi < kMTiles; ++mi) load_fragments<T>(a_frag[mi], a_tile, a.k_major, wm + 16 * mi, kl, true);
      for (int nj = 0; nj < kNTiles; nj += 2) {
        uint32_t two[4];
        load_fragments<T>(two, b_tile, b.k_major, wn + 8 * nj, kl, false);
        b_frag[nj][0] = two[0];
        b_frag[nj][1] = two[1];
        b_frag[nj + 1][0] = two[2];
        b_frag[nj + 1][1] = two[3];
      }
      for (int mi = 0; mi < kMTiles; ++mi)
        for (int ni = 0; ni < kNTiles; ++ni) mma<T>(acc[mi][ni], a_frag[mi], b_frag[ni]);
    }
    __syncthreads();  // every warp is done with stage s before stage s + 2 is copied over it
  }

  if (sums_a_column && j0 + threadIdx.x < n) store_bias_grad(bias_grad + j0 + threadIdx.x, column_sum, add_bias_grad);
  // A lane's accumulators of an mma tile: rows lane/4 and lane/4 + 8, columns 2 (lane%4) and +1.
  for (int mi = 0; mi < kMTiles; ++mi)
    for (int ni = 0; ni < kNTiles; ++ni)
      for (int e = 0; e < 4; ++e) {
        const int64_t row = i0 + wm + 16 * mi + lane / 4 + (e / 2) * 8;
        const int64_t col = j0 + wn + 8 * ni + (lane % 4) * 2 + e % 2;
        if (row < m && col < n) store_output(d + col * m + row, acc[mi][ni][e], beta, bias, row);
      }
}

template <typename T>
MmaOperand<T> mma_operand(const void* data, int64_t mn_len, int k, bool k_major) {
  const T* typed = static_cast<const T*>(data);
  return {typed, mn_len, k_major, rows_16_byte_aligned(data, k_major ? k : mn_len, sizeof(T))};
}

}  // namespace

void gemm_mma(const GemmArgs& g, cudaStream_t stream) {
  if (!gemm_has_work(g, "mma")) return;
  if (g.ab_type == DType::F32 && !g.allow_tf32)
    throw std::invalid_argument("mma GEMM " + describe_gemm_args(g) +
                                ": fp32 operands reach the tensor cores only as TF32, which needs allow_tf32 (--tf32)");
  const dim3 grid = gemm_grid(g, kTileMN, kTileMN, "mma");
  dispatch_gemm_types(g, [&](auto ab, auto out) {
    using T = decltype(ab);
    using Out = decltype(out);
    // A is k-major when transposed, B when not (an (n,k) view of op(B) is B^T)
    mma_gemm_kernel<T, Out><<<grid, kGemmThreads, 0, stream>>>(
        static_cast<Out*>(g.D), mma_operand<T>(g.A, g.m, g.k, g.transa), mma_operand<T>(g.B, g.n, g.k, !g.transb),
        static_cast<const Out*>(g.bias), g.bias_grad, g.m, g.n, g.k, g.beta, g.add_bias_grad);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
