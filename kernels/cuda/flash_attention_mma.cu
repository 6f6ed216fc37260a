// Flash attention on tensor cores (`--attention flash`, the default for bf16 and fp16 at head
// sizes 64 and 128): the FlashAttention-2 scheme, forward and backward, every product of the
// attention core an mma.sync of 16-bit operands with fp32 accumulators (kernels/cuda/mma.cuh).
// The algorithm is flash_attention.cu's (the CUDA-core rung, `--attention simt`): the online
// softmax forward, lse = m + log(l) kept for the backward, D = rowsum(dout * out), dS = P (dP - D),
// a row with one key giving dS = 0 exactly. docs/attention.md draws the fragments and the tiling.
//
// ---- Two-level tiling ----
// A block of 8 warps owns 128 rows (queries in the forward and the dq kernel, keys in the dk/dv
// kernel), each warp 16 of them: one mma tile's m. The block streams the other side in tiles of
// 64 rows (keys, or queries) through shared memory, two stages of cp.async: the next tile's
// copy runs while the tensor cores work on this one. 128 own rows rather than 64 halve how often
// the streamed side is read from memory (each of a head's T / 128 blocks reads it once); a tile
// that lies wholly above a warp's rows (causal) is skipped by that warp. Per streamed tile a warp computes a 16 x 64
// block of scores S (8 mma n-tiles of 8 columns, HS/16 mma k-steps each) into registers, turns it
// into weights there, and multiplies the weights (rounded to 16 bits) by the tile's rows. The
// accumulator fragment of two neighbouring n-tiles is exactly an A fragment of 16 x 16 (PTX ISA,
// "Matrix Fragments for mma.m16n8k16": C[g][2t..2t+1] of n-tiles 2k and 2k+1 are A[g][2t..2t+1]
// and A[g][2t+8..2t+9]), so S and P never leave registers.
//
//   forward        per key tile: S = Q K^T, online softmax on S's fragments, O += P V
//   backward dq    first D = rowsum(dout * out) (written for the next kernel); per key tile:
//                  S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K          (3 products)
//   backward dk/dv per query tile of each query head of the key's group: S^T = K Q^T,
//                  dP^T = V dO^T, dV += P^T dO, dK += dS^T Q                   (4 products)
// The backward computes dS twice, once for dQ and once for dK (7 products against the forward's
// 2), so that dQ is summed by one block in a fixed order with no atomics and no workspace:
// deterministic, and no (T, HS) partial per key block.
//
// ---- Layout, edges and causality ----
// A tile's rows sit in shared memory at HS + 8 elements apart (144 or 272 bytes): the 8 rows one
// ldmatrix phase reads start 4 banks apart, all 32 banks, no conflict. Rows past T are copied as
// zeros (cp.async's src_bytes 0) and never written back. Causal: key tiles wholly above a query
// block's last row are never loaded (and query tiles wholly before a key block's first row); the
// tile on the diagonal masks its scores one by one.
//
// ---- Numerics ----
// Scores, the softmax, D and every accumulator are fp32. The weights P (and dS) are rounded to
// the storage type before their products, as FlashAttention-2 does: a relative error of up to
// u_16 = 2^-8 (bf16) or 2^-11 (fp16) on each weight, on top of the CUDA-core rung's fp32 sums
// (the tests' tolerances add it). The emulator sums an mma's products one at a time in k order
// (simt/tensor_core.h); a GPU's tensor core may round differently within one mma.
// Dropout: the factor of weight (b,h,t,j) is element ((b NH + h) T + t) T + j of the mask, drawn
// from kernels/common/philox.h as every backend draws it.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common/half.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dropout_factor.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp.cuh"

namespace tt {

namespace {

constexpr int kBlockRows = 128;             // the block's own rows
constexpr int kTileRows = 64;               // the rows of a streamed tile
constexpr int kMmaWarps = kBlockRows / 16;  // 16 rows per warp: one mma tile's m
constexpr int kMmaThreads = kMmaWarps * kWarp;
constexpr int kScoreTiles = kTileRows / 8;  // a warp's 16 x 64 scores: 8 mma n-tiles of 8 columns
constexpr int kPad = 8;                    // elements after each shared row: ldmatrix without conflicts

template <int kHS>
constexpr int kStride = kHS + kPad;        // elements from one shared row to the next

// A 16 x 64 block of fp32 accumulators: n-tile nt, register i holds row g + 8 (i / 2), column
// nt * 8 + 2 t + i % 2 (g = lane / 4, t = lane % 4).
using ScoreFragments = float[kScoreTiles][4];

// ---------------------------------------------------------------------------------------------
// Copies and fragments
// ---------------------------------------------------------------------------------------------

// Issues the copies of rows row0 .. row0 + kN - 1 of a matrix whose row r starts at src + r *
// stride (elements) into `tile` [kN][HS + 8]: 16 bytes a cp.async, consecutive threads along a
// row. Rows at or past T are zero-filled.
template <typename S, int kHS, int kN>
__device__ __forceinline__ void copy_tile(S* tile, const S* src, int64_t stride, int row0, int T) {
  constexpr int kChunks = kHS * static_cast<int>(sizeof(S)) / 16;  // 16-byte chunks per row
  constexpr int kPerChunk = 16 / static_cast<int>(sizeof(S));
#pragma unroll
  for (int c = static_cast<int>(threadIdx.x); c < kN * kChunks; c += kMmaThreads) {
    const int r = c / kChunks, chunk = c % kChunks;
    const bool inside = row0 + r < T;
    const S* from = inside ? src + static_cast<int64_t>(row0 + r) * stride + chunk * kPerChunk : src;
    cp_async_cg(tile + r * kStride<kHS> + chunk * kPerChunk, from, inside ? 16 : 0);
  }
}

// The A fragments of rows row0 .. row0 + 15 of a shared tile, all HS channels: a[ks] is the
// 16 x 16 block of channels 16 ks ..; ldmatrix.x4 matrix j is rows + 8 (j % 2), channels + 8 (j / 2).
template <typename S, int kHS>
__device__ __forceinline__ void load_row_fragments(uint32_t (&a)[kHS / 16][4], const S* tile, int row0) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp, j = lane / 8;
  const S* row = tile + (row0 + 8 * (j % 2) + lane % 8) * kStride<kHS> + 8 * (j / 2);
#pragma unroll
  for (int ks = 0; ks < kHS / 16; ++ks) ldmatrix<4, false>(a[ks], row + 16 * ks);
}

// Registers 0, 1 and 2, 3 of an ldmatrix.x4: the b operands of two neighbouring n-tiles, in place.
__device__ __forceinline__ const uint32_t (&first_pair(const uint32_t (&b)[4]))[2] {
  return *reinterpret_cast<const uint32_t(*)[2]>(&b[0]);
}
__device__ __forceinline__ const uint32_t (&second_pair(const uint32_t (&b)[4]))[2] {
  return *reinterpret_cast<const uint32_t(*)[2]>(&b[2]);
}

// acc (16 x 64) = a (16 x HS) times tile^T: column n of the result is the dot product with the
// tile's row n. B's registers from the tile's rows as they are: ldmatrix.x4 matrix j is rows
// 16 np + 8 (j / 2), channels 16 ks + 8 (j % 2), so registers 0, 1 are n-tile 2 np's b and 2, 3
// n-tile 2 np + 1's.
template <typename S, int kHS>
__device__ __forceinline__ void multiply_by_rows(ScoreFragments& acc, const uint32_t (&a)[kHS / 16][4],
                                                 const S* tile) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp, j = lane / 8;
#pragma unroll
  for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kHS / 16; ++ks) {
#pragma unroll
    for (int np = 0; np < kScoreTiles / 2; ++np) {
      uint32_t b[4];
      ldmatrix<4, false>(b, tile + (16 * np + 8 * (j / 2) + lane % 8) * kStride<kHS> + 16 * ks + 8 * (j % 2));
      mma_m16n8k16<S>(acc[2 * np], a[ks], first_pair(b), acc[2 * np]);
      mma_m16n8k16<S>(acc[2 * np + 1], a[ks], second_pair(b), acc[2 * np + 1]);
    }
  }
}

// acc (16 x HS) += w (16 x 64, accumulator fragments, rounded to S) times tile (64 x HS). The
// accumulators of n-tiles 2 kk and 2 kk + 1 are the A fragment of columns 16 kk ..; B's
// registers are the tile's rows transposed by ldmatrix.trans: matrix j is rows 16 kk + 8 (j % 2),
// channels 16 np + 8 (j / 2).
template <typename S, int kHS>
__device__ __forceinline__ void accumulate_rows(float (&acc)[kHS / 8][4], const ScoreFragments& w, const S* tile) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp, j = lane / 8;
#pragma unroll
  for (int kk = 0; kk < kScoreTiles / 2; ++kk) {
    const uint32_t a[4] = {pack_rn<S>(w[2 * kk][0], w[2 * kk][1]), pack_rn<S>(w[2 * kk][2], w[2 * kk][3]),
                           pack_rn<S>(w[2 * kk + 1][0], w[2 * kk + 1][1]),
                           pack_rn<S>(w[2 * kk + 1][2], w[2 * kk + 1][3])};
#pragma unroll
    for (int np = 0; np < kHS / 16; ++np) {
      uint32_t b[4];
      ldmatrix<4, true>(b, tile + (16 * kk + 8 * (j % 2) + lane % 8) * kStride<kHS> + 16 * np + 8 * (j / 2));
      mma_m16n8k16<S>(acc[2 * np], a, first_pair(b), acc[2 * np]);
      mma_m16n8k16<S>(acc[2 * np + 1], a, second_pair(b), acc[2 * np + 1]);
    }
  }
}

// ---- Dropout on fragments ----
// The mask's words come in Philox groups of 4 consecutive elements (kernels/common/philox.h):
// 4 keys of one query. When T and the mask's offset are multiples of 4 (`aligned`), each group
// a warp needs is held by the lanes of one fragment: 2 lanes (a row's 4 columns 8 nt + 4 (t / 2)
// ..: the forward and the dq kernel) or 4 lanes (a column's rows 4 (g / 4) ..: the transposed
// tile of the dk/dv kernel). They draw the group once between them and pass its words by
// shuffles: one Philox call per 4 weights, as the elementwise kernels draw. Otherwise each lane
// draws what it needs itself (a pair can straddle two groups).

// The dropout factors of mask elements `index` and `index + 1`: one Philox call for the pair, two
// when it straddles a group of four.
__device__ __forceinline__ void dropout_pair(const DropoutKey& key, uint64_t index, float p, float keep_scale,
                                             float& first, float& second) {
  const Philox4 bits = dropout_bits4(key, index >> 2);
  const int word = static_cast<int>(index & 3);
  first = dropout_factor(bits.v[word], p, keep_scale);
  const uint32_t next = word < 3 ? bits.v[word + 1] : dropout_bits4(key, (index >> 2) + 1).v[0];
  second = dropout_factor(next, p, keep_scale);
}

// Word k (0..3, known only at run time) of a group, by selects: an array indexed at run time
// would be local memory on a GPU.
__device__ __forceinline__ uint32_t word_of(const Philox4& bits, int k) {
  return k == 0 ? bits.v[0] : k == 1 ? bits.v[1] : k == 2 ? bits.v[2] : bits.v[3];
}

// The factors of a warp's 16 x 64 weights whose row g starts at mask element row_start0 and row
// g + 8 at row_start8 (forward, dq: rows are queries, columns keys). Aligned: lane t draws the
// group of row g (t even) or row g + 8 (t odd) at columns 8 nt + 4 (t / 2) ..; its neighbour
// t ^ 1 needs the other half of that group for the other row.
__device__ __forceinline__ void row_dropout_factors(ScoreFragments& factor, const DropoutKey& key,
                                                    uint64_t row_start0, uint64_t row_start8, bool aligned, float p,
                                                    float keep_scale) {
  const int t = static_cast<int>(threadIdx.x) % 4;
  if (!aligned) {
#pragma unroll
    for (int nt = 0; nt < kScoreTiles; ++nt) {
      dropout_pair(key, row_start0 + 8 * nt + 2 * t, p, keep_scale, factor[nt][0], factor[nt][1]);
      dropout_pair(key, row_start8 + 8 * nt + 2 * t, p, keep_scale, factor[nt][2], factor[nt][3]);
    }
    return;
  }
  const bool odd = (t & 1) != 0;
#pragma unroll
  for (int nt = 0; nt < kScoreTiles; ++nt) {
    const Philox4 bits = dropout_bits4(key, ((odd ? row_start8 : row_start0) + 8 * nt + 4 * (t >> 1)) >> 2);
    // this lane's columns 2t, 2t + 1 are words 2 (t % 2) and 2 (t % 2) + 1 of the group
    const uint32_t own0 = odd ? bits.v[2] : bits.v[0], own1 = odd ? bits.v[3] : bits.v[1];
    const uint32_t peer0 = __shfl_xor_sync(kFullMask, odd ? bits.v[0] : bits.v[2], 1);
    const uint32_t peer1 = __shfl_xor_sync(kFullMask, odd ? bits.v[1] : bits.v[3], 1);
    factor[nt][0] = dropout_factor(odd ? peer0 : own0, p, keep_scale);  // row g
    factor[nt][1] = dropout_factor(odd ? peer1 : own1, p, keep_scale);
    factor[nt][2] = dropout_factor(odd ? own0 : peer0, p, keep_scale);  // row g + 8
    factor[nt][3] = dropout_factor(odd ? own1 : peer1, p, keep_scale);
  }
}

// The factors of the dk/dv kernel's transposed 16 x 64 weights: rows are keys key_row0 + g
// (+ 8), columns queries query0 + 8 nt + 2 t (+ 1); element (query, key) is mask element
// head_start + query T + key. Aligned: the 4 lanes j = g % 4 of one t and one g / 4 share the
// 4 groups (half, c) of keys key_row0 + 8 half + 4 (g / 4) .. and query 8 nt + 2 t + c; lane j
// draws group j = 2 half + c, and in round r it sends word j ^ r to lane j ^ r, which needs
// exactly that word of that group.
__device__ __forceinline__ void key_dropout_factors(ScoreFragments& factor, const DropoutKey& key, uint64_t head_start,
                                                    int T, int key_row0, int query0, bool aligned, float p,
                                                    float keep_scale) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp, g = lane / 4, t = lane % 4;
  if (!aligned) {
#pragma unroll
    for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint64_t query = static_cast<uint64_t>(query0 + 8 * nt + 2 * t + i % 2);
        factor[nt][i] = dropout_scale(key, head_start + query * T + key_row0 + g + 8 * (i / 2), p);
      }
    return;
  }
  const int j = g & 3;
#pragma unroll
  for (int nt = 0; nt < kScoreTiles; ++nt) {
    const uint64_t query = static_cast<uint64_t>(query0 + 8 * nt + 2 * t + (j & 1));
    const Philox4 bits = dropout_bits4(key, (head_start + query * T + key_row0 + 8 * (j >> 1) + 4 * (g >> 2)) >> 2);
    uint32_t got[4];  // got[r]: word j of group j ^ r
#pragma unroll
    for (int r = 0; r < 4; ++r) got[r] = __shfl_xor_sync(kFullMask, word_of(bits, j ^ r), 4 * r);
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // register i is group i: it came in round j ^ i
      const int r = j ^ i;
      const uint32_t word = r == 0 ? got[0] : r == 1 ? got[1] : r == 2 ? got[2] : got[3];
      factor[nt][i] = dropout_factor(word, p, keep_scale);
    }
  }
}

// Writes rows row0 .. row0 + 15 of a warp's 16 x HS accumulators, times `scale`, to dst + row *
// stride + channel (rows at or past T are not written): a lane's two neighbouring channels
// rounded into one register (pack_rn, the bits of from_float) and stored as one 4-byte word, so
// a warp's store covers 8 rows of 16 bytes, not 16 bytes in two halves.
template <typename S, int kHS>
__device__ __forceinline__ void store_rows(S* dst, int64_t stride, const float (&acc)[kHS / 8][4], int row0, int T,
                                           float scale0, float scale1) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + g + 8 * half;
    if (row >= T) continue;
    const float scale = half == 0 ? scale0 : scale1;
    S* out = dst + static_cast<int64_t>(row) * stride;
#pragma unroll
    for (int nd = 0; nd < kHS / 8; ++nd)  // 4-byte aligned: rows are 16-byte aligned (flash_attention_mma_serves)
      *reinterpret_cast<uint32_t*>(out + 8 * nd + 2 * t) =
          pack_rn<S>(acc[nd][2 * half] * scale, acc[nd][2 * half + 1] * scale);
  }
}

// The sum and the max of a value over the 4 lanes that share a row of a fragment (lanes 4g .. 4g+3).
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  return v + __shfl_xor_sync(kFullMask, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}

// The key tiles a block of query rows row0 .. row0 + 127 streams: when causal, those up to its
// last row (the tiles wholly above it are never loaded).
__device__ __forceinline__ int key_tiles(int T, int row0, bool causal) {
  const int key_end = causal ? min(T, row0 + kBlockRows) : T;  // keys any row of the block sees
  return (key_end + kTileRows - 1) / kTileRows;
}

// Issues the copies of key tile `tile` of a head, its keys and its values, into stage tile % 2:
// stage s holds k_s [64][HS+8] at stages + 2 s tiles, v_s after it.
template <typename S, int kHS>
__device__ __forceinline__ void copy_key_tile(S* stages, const S* token0, const QkvLayout& at, int head, int tile,
                                              int T) {
  constexpr int kTileElements = kTileRows * kStride<kHS>;
  S* stage = stages + 2 * (tile % 2) * kTileElements;
  copy_tile<S, kHS, kTileRows>(stage, token0 + at.k(head), at.width(), tile * kTileRows, T);
  copy_tile<S, kHS, kTileRows>(stage + kTileElements, token0 + at.v(head), at.width(), tile * kTileRows, T);
}

// Which (b, head) and which 128 rows a block owns: grid B * heads * ceil(T / 128).
struct BlockRows {
  int b, head, row0;
};
__device__ __forceinline__ BlockRows block_rows(int T, int heads) {
  const int per_head = (T + kBlockRows - 1) / kBlockRows;
  const int bh = static_cast<int>(blockIdx.x) / per_head;
  return {bh / heads, bh % heads, (static_cast<int>(blockIdx.x) % per_head) * kBlockRows};
}

// ---------------------------------------------------------------------------------------------
// Forward. qkv (B,T,W) (kernels/common/qkv_layout.h) -> out (B,T,C), lse (B,NH,T) fp32.
// Shared: q_s [128][HS+8], then two stages of k_s, v_s [64][HS+8].
// ---------------------------------------------------------------------------------------------
template <typename S, int kHS>
__global__ void __launch_bounds__(kMmaThreads)
    flash_attention_mma_forward_kernel(S* __restrict__ out, float* __restrict__ lse, const S* __restrict__ qkv, int T,
                                       QkvLayout at, bool causal, DropoutMask dropout) {
  extern __shared__ __align__(16) char smem[];
  constexpr int kTileElements = kTileRows * kStride<kHS>;
  S* q_s = reinterpret_cast<S*>(smem);
  S* stages = q_s + kBlockRows * kStride<kHS>;  // stage s: k at stages + 2 s tile, v after it
  const BlockRows blk = block_rows(T, at.NH);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int64_t W = at.width(), C = at.q_width();
  const S* token0 = qkv + static_cast<int64_t>(blk.b) * T * W;
  const int bh = blk.b * at.NH + blk.head;
  const int tiles = key_tiles(T, blk.row0, causal);
  const float scale = 1.0f / sqrtf(static_cast<float>(kHS));
  const float p = dropout.p, keep_scale = 1.0f / (1.0f - p);
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();
  // weight (row, key) of this head is mask element row_mask + row T + key
  const uint64_t row_mask = dropout.index_offset + static_cast<uint64_t>(bh) * T * T;
  const bool aligned = T % 4 == 0 && dropout.index_offset % 4 == 0;  // see "Dropout on fragments"

  copy_tile<S, kHS, kBlockRows>(q_s, token0 + at.q(blk.head), W, blk.row0, T);
  copy_key_tile<S, kHS>(stages, token0, at, blk.head, 0, T);
  cp_async_commit_group();

  const int warp_row0 = blk.row0 + 16 * warp;
  uint32_t q_frag[kHS / 16][4];
  float o[kHS / 8][4] = {};                  // unnormalised output, rows g and g + 8
  float m[2] = {-INFINITY, -INFINITY};       // running max of rows g and g + 8
  float l[2] = {0.0f, 0.0f};                 // running sum of exp(score - m)
  for (int tile = 0; tile < tiles; ++tile) {
    // the next tile's copy, into the stage the previous iteration freed
    if (tile + 1 < tiles) copy_key_tile<S, kHS>(stages, token0, at, blk.head, tile + 1, T);
    cp_async_commit_group();
    cp_async_wait_group<1>();  // this tile's group has landed (for this thread) ...
    __syncthreads();           // ... and every thread's
    if (tile == 0) load_row_fragments<S, kHS>(q_frag, q_s, 16 * warp);
    const S* k_s = stages + 2 * (tile % 2) * kTileElements;
    const S* v_s = k_s + kTileElements;
    const int key0 = tile * kTileRows;
    // a key tile wholly above the warp's rows adds nothing to them (warp-uniform)
    if (!causal || key0 <= warp_row0 + 15) {
      // warp-uniform: whether a score of the warp's 16 rows lies past T or above the diagonal; the
      // other tiles (most of them) skip the mask
      const bool edge = key0 + kTileRows > T || (causal && key0 + kTileRows - 1 > warp_row0);

      ScoreFragments s;
      multiply_by_rows<S, kHS>(s, q_frag, k_s);
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // rows g and g + 8: the online softmax
        const int row = warp_row0 + g + 8 * half;
        float tile_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& score = s[nt][2 * half + c];
            score *= scale;
            if (edge) {
              const int key_j = key0 + 8 * nt + 2 * t + c;
              if (key_j >= T || (causal && key_j > row)) score = -INFINITY;
            }
            tile_max = fmaxf(tile_max, score);
          }
        const float m_new = fmaxf(m[half], quad_max(tile_max));
        const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row that has seen no key yet
        const float rescale = expf(m[half] - base);            // 0 on the row's first visible tile
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& e = s[nt][2 * half + c];
            e = expf(e - base);  // 0 where masked
            sum += e;
          }
        l[half] = l[half] * rescale + quad_sum(sum);
        m[half] = m_new;
#pragma unroll
        for (int nd = 0; nd < kHS / 8; ++nd) {
          o[nd][2 * half] *= rescale;
          o[nd][2 * half + 1] *= rescale;
        }
      }
      if (p > 0.0f) {  // the weights v is summed with are dropped out; l is not
        ScoreFragments factor;
        row_dropout_factors(factor, key, row_mask + (static_cast<uint64_t>(warp_row0 + g) * T + key0),
                            row_mask + (static_cast<uint64_t>(warp_row0 + g + 8) * T + key0), aligned, p, keep_scale);
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) s[nt][i] *= factor[nt][i];
      }
      accumulate_rows<S, kHS>(o, s, v_s);
    }
    __syncthreads();  // every warp is done with this stage before the next iteration copies over it
  }
  S* out_head = out + static_cast<int64_t>(blk.b) * T * C + at.q(blk.head);
  store_rows<S, kHS>(out_head, C, o, warp_row0, T, 1.0f / l[0], 1.0f / l[1]);
  if (t == 0)
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row0 + g + 8 * half;
      if (row < T) lse[static_cast<int64_t>(bh) * T + row] = m[half] + logf(l[half]);
    }
}

// ---------------------------------------------------------------------------------------------
// Backward, kernel 1: D and dq. dout (B,T,C), out (B,T,C), qkv (B,T,W), lse (B,NH,T) ->
// dout_dot_out (B,NH,T) = D, dqkv's q part. One block per 128 query rows of one (b, h).
// Shared: q_s, do_s [128][HS+8], two stages of k_s, v_s [64][HS+8], lse_s and d_s [128] fp32.
// ---------------------------------------------------------------------------------------------
template <typename S, int kHS>
__global__ void __launch_bounds__(kMmaThreads)
    flash_attention_mma_backward_dq_kernel(S* __restrict__ dqkv, float* __restrict__ dout_dot_out,
                                           const S* __restrict__ dout, const S* __restrict__ out,
                                           const S* __restrict__ qkv, const float* __restrict__ lse, int T,
                                           QkvLayout at, bool causal, DropoutMask dropout) {
  extern __shared__ __align__(16) char smem[];
  constexpr int kTileElements = kTileRows * kStride<kHS>;
  S* q_s = reinterpret_cast<S*>(smem);
  S* do_s = q_s + kBlockRows * kStride<kHS>;
  S* stages = do_s + kBlockRows * kStride<kHS>;
  float* lse_s = reinterpret_cast<float*>(stages + 4 * kTileElements);
  float* d_s = lse_s + kBlockRows;
  const BlockRows blk = block_rows(T, at.NH);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int64_t W = at.width(), C = at.q_width();
  const S* token0 = qkv + static_cast<int64_t>(blk.b) * T * W;
  const int64_t out0 = static_cast<int64_t>(blk.b) * T * C + at.q(blk.head);  // (b, token 0, head h) of dout, out
  const int bh = blk.b * at.NH + blk.head;
  const int tiles = key_tiles(T, blk.row0, causal);
  const float scale = 1.0f / sqrtf(static_cast<float>(kHS));
  const float p = dropout.p, keep_scale = 1.0f / (1.0f - p);
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();
  // weight (row, key) of this head is mask element row_mask + row T + key
  const uint64_t row_mask = dropout.index_offset + static_cast<uint64_t>(bh) * T * T;
  const bool aligned = T % 4 == 0 && dropout.index_offset % 4 == 0;  // see "Dropout on fragments"

  copy_tile<S, kHS, kBlockRows>(q_s, token0 + at.q(blk.head), W, blk.row0, T);
  copy_tile<S, kHS, kBlockRows>(do_s, dout + out0, C, blk.row0, T);
  copy_key_tile<S, kHS>(stages, token0, at, blk.head, 0, T);
  cp_async_commit_group();

  // D = dout . out for the warp's 16 rows (lanes along the channels), before any key
  const int warp_row0 = blk.row0 + 16 * warp;
  for (int r = 0; r < 16; ++r) {
    const int row = warp_row0 + r;
    float part = 0.0f;
    if (row < T)
      for (int d = lane; d < kHS; d += kWarp)
        part += to_float(dout[out0 + static_cast<int64_t>(row) * C + d]) *
                to_float(out[out0 + static_cast<int64_t>(row) * C + d]);
    const float D = warp_sum(part);
    if (lane == 0) {
      d_s[16 * warp + r] = D;
      lse_s[16 * warp + r] = row < T ? lse[static_cast<int64_t>(bh) * T + row] : 0.0f;
      if (row < T) dout_dot_out[static_cast<int64_t>(bh) * T + row] = D;
    }
  }

  uint32_t q_frag[kHS / 16][4], do_frag[kHS / 16][4];
  float dq[kHS / 8][4] = {};
  for (int tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) copy_key_tile<S, kHS>(stages, token0, at, blk.head, tile + 1, T);
    cp_async_commit_group();
    cp_async_wait_group<1>();
    __syncthreads();
    if (tile == 0) {
      load_row_fragments<S, kHS>(q_frag, q_s, 16 * warp);
      load_row_fragments<S, kHS>(do_frag, do_s, 16 * warp);
    }
    const S* k_s = stages + 2 * (tile % 2) * kTileElements;
    const S* v_s = k_s + kTileElements;
    const int key0 = tile * kTileRows;
    // a key tile wholly above the warp's rows adds nothing to their dq (warp-uniform)
    if (!causal || key0 <= warp_row0 + 15) {
      // warp-uniform: whether a pair of the warp's rows and this tile's keys is masked (past T,
      // above the diagonal) or a row has one key (those are on the diagonal, or T = 1)
      const bool edge = key0 + kTileRows > T || warp_row0 + 16 > T || (causal && key0 + kTileRows - 1 > warp_row0);

      ScoreFragments s, dp;
      multiply_by_rows<S, kHS>(s, q_frag, k_s);    // scores
      multiply_by_rows<S, kHS>(dp, do_frag, v_s);  // dout . v
      if (p > 0.0f) {  // dP's factors: the weights the forward summed v with were dropped out
        ScoreFragments factor;
        row_dropout_factors(factor, key, row_mask + (static_cast<uint64_t>(warp_row0 + g) * T + key0),
                            row_mask + (static_cast<uint64_t>(warp_row0 + g + 8) * T + key0), aligned, p,
                            keep_scale);
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) dp[nt][i] = factor[nt][i] * dp[nt][i];
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int local = 16 * warp + g + 8 * half, row = blk.row0 + local;
        const float row_lse = lse_s[local], D = d_s[local];
        const bool one_key = (causal ? row + 1 : T) == 1;  // dS is exactly 0 (file comment)
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& ds = s[nt][2 * half + c];
            const float P = expf(ds * scale - row_lse);
            ds = P * (dp[nt][2 * half + c] - D);
            if (edge) {
              const int key_j = key0 + 8 * nt + 2 * t + c;
              if (row >= T || key_j >= T || (causal && key_j > row) || one_key) ds = 0.0f;
            }
          }
        }
      }
      accumulate_rows<S, kHS>(dq, s, k_s);
    }
    __syncthreads();
  }
  store_rows<S, kHS>(dqkv + static_cast<int64_t>(blk.b) * T * W + at.q(blk.head), W, dq, warp_row0, T, scale, scale);
}

// ---------------------------------------------------------------------------------------------
// Backward, kernel 2: dk and dv, after kernel 1 has written D. One block per 128 key rows of one
// (b, key/value head); it streams the query tiles of each query head of the key's group, head
// after head. Shared: k_s, v_s [128][HS+8] (the block's keys and values), two stages of q_s, do_s
// [64][HS+8] and lse_s, d_s [64] fp32.
// ---------------------------------------------------------------------------------------------
template <typename S, int kHS>
__global__ void __launch_bounds__(kMmaThreads)
    flash_attention_mma_backward_dkv_kernel(S* __restrict__ dqkv, const S* __restrict__ dout,
                                            const S* __restrict__ qkv, const float* __restrict__ lse,
                                            const float* __restrict__ dout_dot_out, int T, QkvLayout at, bool causal,
                                            DropoutMask dropout) {
  extern __shared__ __align__(16) char smem[];
  constexpr int kTileElements = kTileRows * kStride<kHS>;
  constexpr int kStageElements = 2 * kTileElements + 2 * kTileRows * static_cast<int>(sizeof(float) / sizeof(S));
  S* k_s = reinterpret_cast<S*>(smem);
  S* v_s = k_s + kBlockRows * kStride<kHS>;
  S* stages = v_s + kBlockRows * kStride<kHS>;  // stage s: q_s, do_s, then lse_s and d_s as fp32
  const BlockRows blk = block_rows(T, at.KVH);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int64_t W = at.width(), C = at.q_width();
  const S* token0 = qkv + static_cast<int64_t>(blk.b) * T * W;
  const int h0 = blk.head * at.group();  // the group's first query head: at.k(h0) is this block's key head
  const int first_query = causal ? blk.row0 : 0;  // queries before a key never attend to it
  const int per_head = (T - first_query + kTileRows - 1) / kTileRows;
  const int tiles = per_head * at.group();
  const float scale = 1.0f / sqrtf(static_cast<float>(kHS));
  const float p = dropout.p, keep_scale = 1.0f / (1.0f - p);
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();
  const bool aligned = T % 4 == 0 && dropout.index_offset % 4 == 0;  // see "Dropout on fragments"

  // Stream tile i: query head h0 + i / per_head, queries from first_query + 64 (i % per_head).
  auto copy_stage = [&](int i) {
    S* stage = stages + (i % 2) * kStageElements;
    const int h = h0 + i / per_head, query0 = first_query + (i % per_head) * kTileRows;
    copy_tile<S, kHS, kTileRows>(stage, token0 + at.q(h), W, query0, T);
    copy_tile<S, kHS, kTileRows>(stage + kTileElements, dout + static_cast<int64_t>(blk.b) * T * C + at.q(h), C,
                                 query0, T);
    float* stats = reinterpret_cast<float*>(stage + 2 * kTileElements);
    const int64_t head_rows = (static_cast<int64_t>(blk.b) * at.NH + h) * T;
    for (int r = static_cast<int>(threadIdx.x); r < kTileRows; r += kMmaThreads) {
      const int query = query0 + r;
      stats[r] = query < T ? lse[head_rows + query] : 0.0f;
      stats[kTileRows + r] = query < T ? dout_dot_out[head_rows + query] : 0.0f;
    }
  };
  copy_tile<S, kHS, kBlockRows>(k_s, token0 + at.k(h0), W, blk.row0, T);
  copy_tile<S, kHS, kBlockRows>(v_s, token0 + at.v(h0), W, blk.row0, T);
  copy_stage(0);
  cp_async_commit_group();

  const int warp_row0 = blk.row0 + 16 * warp;  // the warp's 16 keys
  uint32_t k_frag[kHS / 16][4], v_frag[kHS / 16][4];
  float dk[kHS / 8][4] = {}, dv[kHS / 8][4] = {};
  for (int i = 0; i < tiles; ++i) {
    if (i + 1 < tiles) copy_stage(i + 1);
    cp_async_commit_group();
    cp_async_wait_group<1>();
    __syncthreads();
    const S* stage = stages + (i % 2) * kStageElements;
    const S* q_s = stage;
    const S* do_s = stage + kTileElements;
    const float* lse_s = reinterpret_cast<const float*>(stage + 2 * kTileElements);
    const float* d_s = lse_s + kTileRows;
    const int h = h0 + i / per_head, query0 = first_query + (i % per_head) * kTileRows;
    const uint64_t head_mask = dropout.index_offset + (static_cast<uint64_t>(blk.b) * at.NH + h) * T * T;

    // the warp's K and V fragments: loaded once at HS 64; reloaded per tile at HS 128, where
    // holding them beside dk, dv, S and dP would pass the 255 registers a thread may have
    if (i == 0 || kHS > 64) {
      load_row_fragments<S, kHS>(k_frag, k_s, 16 * warp);
      load_row_fragments<S, kHS>(v_frag, v_s, 16 * warp);
    }
    // a query tile wholly before the warp's keys sees none of them (warp-uniform)
    if (!causal || query0 + kTileRows - 1 >= warp_row0) {
      // warp-uniform: whether a pair of the warp's keys and this tile's queries is masked (past T,
      // a query before a key) or a query has one key (query 0 when causal, or T = 1)
      const bool edge = query0 + kTileRows > T || warp_row0 + 16 > T || (causal && query0 < warp_row0 + 15);

      ScoreFragments s, dp;  // transposed: rows are the warp's keys, columns the tile's queries
      multiply_by_rows<S, kHS>(s, k_frag, q_s);
      multiply_by_rows<S, kHS>(dp, v_frag, do_s);
      ScoreFragments factor;
      if (p > 0.0f) key_dropout_factors(factor, key, head_mask, T, warp_row0, query0, aligned, p, keep_scale);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key_row = warp_row0 + g + 8 * half;
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int local = 8 * nt + 2 * t + c, query = query0 + local;
            const float P = expf(s[nt][2 * half + c] * scale - lse_s[local]);
            const float f = p > 0.0f ? factor[nt][2 * half + c] : 1.0f;
            float w = f * P, ds = P * (f * dp[nt][2 * half + c] - d_s[local]);
            if (edge) {  // a masked pair may have computed inf: replaced, never summed
              const bool visible = query < T && key_row < T && (!causal || query >= key_row);
              const bool one_key = (causal ? query + 1 : T) == 1;
              if (!visible) w = 0.0f;
              if (!visible || one_key) ds = 0.0f;
            }
            s[nt][2 * half + c] = w;    // dv's weight
            dp[nt][2 * half + c] = ds;  // dS
          }
      }
      accumulate_rows<S, kHS>(dv, s, do_s);
      accumulate_rows<S, kHS>(dk, dp, q_s);
    }
    __syncthreads();
  }
  S* key_rows = dqkv + static_cast<int64_t>(blk.b) * T * W;
  store_rows<S, kHS>(key_rows + at.k(h0), W, dk, warp_row0, T, scale, scale);
  store_rows<S, kHS>(key_rows + at.v(h0), W, dv, warp_row0, T, 1.0f, 1.0f);
}

template <typename S, int kHS>
constexpr size_t kForwardSmem = (kBlockRows + 4 * kTileRows) * kStride<kHS> * sizeof(S);
template <typename S, int kHS>
constexpr size_t kDqSmem = (2 * kBlockRows + 4 * kTileRows) * kStride<kHS> * sizeof(S) + 2 * kBlockRows * sizeof(float);
template <typename S, int kHS>
constexpr size_t kDkvSmem = (2 * kBlockRows + 4 * kTileRows) * kStride<kHS> * sizeof(S) + 4 * kTileRows * sizeof(float);

// Calls f(std::integral_constant<int, HS>) for the head sizes this rung serves.
template <typename F>
void dispatch_head_size(int HS, F&& f) {
  if (HS == 64)
    f(std::integral_constant<int, 64>{});
  else
    f(std::integral_constant<int, 128>{});
}

unsigned mma_blocks(const AttentionShape& s, int heads, const char* what) {
  attention_tiles::row_blocks(s, heads, what);  // checks the shape
  return static_cast<unsigned>(static_cast<int64_t>(s.B) * heads * ((s.T + kBlockRows - 1) / kBlockRows));
}

}  // namespace

// Head sizes 64 and 128 and 16-bit storage; the cp.async copies need every row 16-byte aligned:
// the row widths are multiples of 64 elements, so the views' pointers decide.
bool flash_attention_mma_serves(const AttentionShape& s, std::initializer_list<Tensor> views) {
  if (s.HS != 64 && s.HS != 128) return false;
  for (const Tensor& v : views) {
    if (v.dtype != DType::BF16 && v.dtype != DType::F16) return false;
    if (reinterpret_cast<uintptr_t>(v.data) % 16 != 0) return false;
  }
  return true;
}

// qkv (B,T,W) -> out (B,T,C), lse (B,NH,T)
void CudaBackend::flash_attention_mma_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                                              const DropoutMask& dropout) {
  const unsigned blocks = mma_blocks(s, s.NH, "attention_forward");
  const DType dtype = shared_storage_dtype("attention_forward", {out, qkv});
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    if constexpr (!std::is_same<S, float>::value) {
      dispatch_head_size(s.HS, [&](auto head) {
        constexpr int kHS = decltype(head)::value;
        attention_tiles::reserve_shared_memory(flash_attention_mma_forward_kernel<S, kHS>, kForwardSmem<S, kHS>,
                                               "attention_forward");
        flash_attention_mma_forward_kernel<S, kHS><<<blocks, kMmaThreads, kForwardSmem<S, kHS>, stream_>>>(out.as<S>(), lse.f32(), qkv.as<S>(), s.T,
                                                                        s.layout(), s.causal, dropout);
      });
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (B,T,C) -> dqkv (B,T,W) overwritten; dout_dot_out (B,NH,T) gets D
void CudaBackend::flash_attention_mma_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out,
                                               Tensor lse, const AttentionShape& s, const DropoutMask& dropout) {
  const unsigned query_blocks = mma_blocks(s, s.NH, "attention_backward");
  const unsigned key_blocks = mma_blocks(s, s.kv_heads(), "attention_backward");
  const DType dtype = shared_storage_dtype("attention_backward", {dqkv, dout, qkv, out});
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    if constexpr (!std::is_same<S, float>::value) {
      dispatch_head_size(s.HS, [&](auto head) {
        constexpr int kHS = decltype(head)::value;
        attention_tiles::reserve_shared_memory(flash_attention_mma_backward_dq_kernel<S, kHS>, kDqSmem<S, kHS>,
                                               "attention_backward");
        flash_attention_mma_backward_dq_kernel<S, kHS><<<query_blocks, kMmaThreads, kDqSmem<S, kHS>, stream_>>>(
            dqkv.as<S>(), dout_dot_out.f32(), dout.as<S>(), out.as<S>(), qkv.as<S>(), lse.f32(), s.T, s.layout(),
            s.causal, dropout);
        CUDA_CHECK(cudaGetLastError());
        attention_tiles::reserve_shared_memory(flash_attention_mma_backward_dkv_kernel<S, kHS>, kDkvSmem<S, kHS>,
                                               "attention_backward");
        flash_attention_mma_backward_dkv_kernel<S, kHS><<<key_blocks, kMmaThreads, kDkvSmem<S, kHS>, stream_>>>(dqkv.as<S>(), dout.as<S>(), qkv.as<S>(),
                                                                         lse.f32(), dout_dot_out.f32(), s.T,
                                                                         s.layout(), s.causal, dropout);
      });
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
