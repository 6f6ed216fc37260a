// Multi-head attention core on the GPU (between in_proj and out_proj), forward and backward:
// per head, softmax(q k^T / sqrt(HS) [+ causal mask]) with dropout on the weights, times v.
// Our own kernels, fp32 throughout; they compute what kernels/cpu/attention.cpp computes, in
// the same order wherever one thread owns a sum (score dot products, the weighted sums of v,
// dq, dk, dv), so those match the CPU bit for bit given equal inputs (--fmad=false); only the
// softmax row sums (warp reductions) and expf differ in rounding.
//
// cuDNN: its fused scaled-dot-product attention (FlashAttention-2 style) takes fp16/bf16
// inputs only (fp32 is only its accumulation type), so these kernels serve fp32, and they are
// the default for every precision. `--attention cudnn` hands bf16/fp16 cases to cuDNN instead
// (kernels/cuda/cudnn_attention.h; use_library_attention below dispatches).
//
// Every kernel reads and writes the packed layout directly: qkv (B,T,3C) holds [q|k|v] per
// token and head h uses channels h*HS .. h*HS+HS-1 of each part. Any T (keys and queries are
// streamed through shared memory in tiles of 32) and any HS (outputs are built in slabs of 128
// channels; shared memory grows with HS, about 20 KiB at HS = 128).
// Deterministic: no atomics; every output element is written by exactly one thread, and every
// sum runs in a fixed order.
//
// Storage: qkv, out, probs, dout, dqkv and dprobs are in the activation storage type S (float,
// bf16 or f16; kernels/cuda/storage.cuh). Tiles are converted to fp32 as they are loaded, and
// all math is fp32. The softmax weights and the score gradients are kept in an fp32 "work"
// tensor (B,NH,T,T) while the kernels use them, exactly as the CPU backend keeps them in its
// fp32 copies: for S = float the work tensor IS probs (forward) or dprobs (backward); for 16-bit
// storage it is CudaBackend::attention_work(), and the kernels also store the rounded values in
// probs / dprobs. So, as on the CPU, `out` is computed from the fp32 weights (then probs is
// rounded for storage), dq and dk from the fp32 score gradients, and the backward reads the
// probs as stored (rounded).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dropout_factor.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp.cuh"

namespace tt {

namespace {

constexpr int kTile = 32;                         // keys (or queries) per shared-memory tile: one per lane
constexpr int kRowsPerBlock = 8;                  // warps per block, one row (query or key) each
constexpr int kThreads = kRowsPerBlock * kWarp;   // 256
constexpr int kSlab = 128;                        // output channels per pass over the tiles
constexpr int kSlabRegs = kSlab / kWarp;          // accumulators per lane: channel lane + 32 i
constexpr size_t kDefaultSmemBytes = 48 * 1024;   // above this a kernel must opt in

// Block-cooperative load of one tile, widened to fp32:
// dst[j * stride + d] = src[base + (row0 + j) * row_stride + d] for j < kTile, d < width; rows
// at or past T are zero. Consecutive threads read consecutive channels of one row (coalesced).
template <typename S>
__device__ __forceinline__ void load_tile(float* dst, int stride, const S* src, int64_t base, int row0, int T,
                                          int64_t row_stride, int width) {
  for (int i = threadIdx.x; i < kTile * width; i += blockDim.x) {
    const int j = i / width, d = i - j * width;
    const int row = row0 + j;
    dst[j * stride + d] = row < T ? to_float(src[base + static_cast<int64_t>(row) * row_stride + d]) : 0.0f;
  }
}

// True for 16-bit storage, where the fp32 work tensor is a separate buffer whose values are
// also stored, rounded, in the S-typed tensor.
template <typename S>
constexpr bool kRoundedCopy = !std::is_same<S, float>::value;

// The decomposition shared by the two "query row" kernels (forward, backward dS/dq): which
// (b, h) and which query row this warp owns.
struct QueryRow {
  int b, h, bh, t0, t, lane, warp;
  bool active;   // t < T (the last block of a head may run past T)
  int visible;   // keys this query may attend to: t + 1 when causal, else T; 0 when inactive
  int block_keys;  // keys any row of this block may attend to: the tile loops' bound
};
__device__ __forceinline__ QueryRow query_row(int T, int NH, bool causal) {
  QueryRow r;
  const int blocks_per_head = (T + kRowsPerBlock - 1) / kRowsPerBlock;
  r.bh = static_cast<int>(blockIdx.x / blocks_per_head);
  r.t0 = static_cast<int>(blockIdx.x % blocks_per_head) * kRowsPerBlock;
  r.b = r.bh / NH;
  r.h = r.bh % NH;
  r.warp = threadIdx.x / kWarp;
  r.lane = threadIdx.x % kWarp;
  r.t = r.t0 + r.warp;
  r.active = r.t < T;
  r.visible = !r.active ? 0 : causal ? r.t + 1 : T;
  r.block_keys = causal ? min(T, r.t0 + kRowsPerBlock) : T;
  return r;
}

// Pass 3 of the two query-row kernels: out_row[d] = sum over visible keys t2 of weight(t2) *
// row_t2[d], where row_t2 is key t2's slice of qkv at part_base (v for the forward's output,
// k for the backward's dq). Per 128-channel slab, the block streams key rows in tiles of 32
// through shared memory; lane owns channels lane + 32 i. weight_of(tile) returns, on lane j,
// the weight of key tile + j (0 past the visible keys); every lane of the warp calls it (the
// warp shuffles inside), and each key's weight is broadcast by shuffle and accumulated in key
// order (the CPU's order).
template <typename S, typename WeightOf>
__device__ __forceinline__ void weighted_key_rows(S* out_row, float* tile_s, const S* __restrict__ qkv,
                                                  int64_t part_base, const QueryRow& r, int T, int64_t C3, int HS,
                                                  WeightOf weight_of) {
  for (int slab = 0; slab < HS; slab += kSlab) {
    const int width = min(kSlab, HS - slab);
    float acc[kSlabRegs];
#pragma unroll
    for (int i = 0; i < kSlabRegs; ++i) acc[i] = 0.0f;
    for (int tile = 0; tile < r.block_keys; tile += kTile) {
      __syncthreads();
      load_tile(tile_s, width, qkv, part_base + slab, tile, T, C3, width);
      __syncthreads();
      if (tile < r.visible) {  // warp-uniform: the whole warp shuffles below
        const float w = weight_of(tile);
        const int keys = min(kTile, r.visible - tile);
        for (int j = 0; j < keys; ++j) {
          const float wj = __shfl_sync(kFullMask, w, j);
          const float* row_s = tile_s + j * width;
#pragma unroll
          for (int i = 0; i < kSlabRegs; ++i) {
            const int d = r.lane + kWarp * i;
            if (d < width) acc[i] += wj * row_s[d];
          }
        }
      }
    }
    if (r.active) {
#pragma unroll
      for (int i = 0; i < kSlabRegs; ++i) {
        const int d = r.lane + kWarp * i;
        if (d < width) out_row[slab + d] = from_float<S>(acc[i]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Forward. qkv (B,T,3C) -> out (B,T,C), probs (B,NH,T,T) softmax weights before dropout
// (masked entries 0), computed in work (B,NH,T,T) fp32; for 16-bit S also stored rounded in
// probs (for S = float, work is probs and the probs argument is null).
// Decomposition: one warp per query row (b,h,t); a block is kRowsPerBlock consecutive query rows
// of one (b,h), grid B*NH*ceil(T/kRowsPerBlock). The block streams the keys in tiles of 32
// through shared memory, shared by its warps:
//   pass 1 (K tiles): lane j scores key tile+j: (q*scale).k over HS in the CPU's order, raw
//          score into the probs row, running max;
//   pass 2 (global row): each lane exponentiates and sums the entries it wrote itself (t2 = lane
//          mod 32, so no synchronisation), warp sums, normalises, zeroes the masked entries;
//   pass 3 (V tiles, per 128-channel slab): lane owns channels lane + 32 i; each key's weight
//          P*dropout (fp32, from work) is broadcast by shuffle and accumulated in key order (the
//          CPU's order).
// Shared memory: kRowsPerBlock*HS (scaled q rows) + kTile*(HS|1) (tile; odd stride keeps the
// pass-1 column reads free of bank conflicts).
// ---------------------------------------------------------------------------------------------
template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(S* __restrict__ out, float* __restrict__ work, S* __restrict__ probs,
                             const S* __restrict__ qkv, int T, int NH, int HS, bool causal, DropoutMask dropout) {
  extern __shared__ float smem[];
  const int key_stride = HS | 1;
  const QueryRow r = query_row(T, NH, causal);
  float* q_s = smem + r.warp * HS;
  float* tile_s = smem + kRowsPerBlock * HS;

  const int C = NH * HS;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const int64_t q_base = static_cast<int64_t>(r.b) * T * C3 + static_cast<int64_t>(r.h) * HS;  // token 0 of (b,h)
  const int64_t k_base = q_base + C, v_base = q_base + 2 * C;
  const int64_t prob_row = (static_cast<int64_t>(r.bh) * T + r.t) * T;  // mask index of (b,h,t,0)
  float* prow = work + prob_row;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float p = dropout.p;

  if (r.active)
    for (int d = r.lane; d < HS; d += kWarp) q_s[d] = to_float(qkv[q_base + r.t * C3 + d]) * scale;

  // pass 1: scores and the row max
  float max_score = -INFINITY;
  for (int tile = 0; tile < r.block_keys; tile += kTile) {
    __syncthreads();  // the previous tile (and, first time, q_s) is complete / consumed
    load_tile(tile_s, key_stride, qkv, k_base, tile, T, C3, HS);
    __syncthreads();
    const int t2 = tile + r.lane;
    if (t2 < r.visible) {
      const float* k_s = tile_s + r.lane * key_stride;
      float dot = 0.0f;
      for (int d = 0; d < HS; ++d) dot += q_s[d] * k_s[d];
      prow[t2] = dot;
      max_score = fmaxf(max_score, dot);
    }
  }

  // pass 2: softmax over the row; each lane touches only the entries it wrote in pass 1
  if (r.active) {
    max_score = warp_max(max_score);
    float sum = 0.0f;
    for (int t2 = r.lane; t2 < r.visible; t2 += kWarp) {
      const float e = expf(prow[t2] - max_score);
      prow[t2] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    const float inv_sum = 1.0f / sum;
    for (int t2 = r.lane; t2 < T; t2 += kWarp) {
      const float weight = t2 < r.visible ? prow[t2] * inv_sum : 0.0f;
      prow[t2] = weight;
      if constexpr (kRoundedCopy<S>) probs[prob_row + t2] = from_float<S>(weight);
    }
  }

  // pass 3: out = sum_t2 (P dropout) v, one 128-channel slab at a time
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();  // reads the step from device memory
  const float keep_scale = 1.0f / (1.0f - p);
  S* orow = out + (static_cast<int64_t>(r.b) * T + r.t) * C + r.h * HS;
  weighted_key_rows(orow, tile_s, qkv, v_base, r, T, C3, HS, [&](int tile) {
    const int t2 = tile + r.lane;
    float w = t2 < r.visible ? prow[t2] : 0.0f;  // written by this lane in pass 2 (tile % 32 == 0)
    if (p > 0.0f)
      w *= warp_dropout_factor(key, dropout.index_offset + static_cast<uint64_t>(prob_row + tile), p, keep_scale,
                               r.lane);
    return w;
  });
}

// ---------------------------------------------------------------------------------------------
// Backward, kernel 1: score gradients and dq.
// dout (B,T,C), qkv (B,T,3C), probs (B,NH,T,T) -> work (B,NH,T,T) fp32 = dS (0 where masked),
// also stored rounded in dprobs for 16-bit S (for S = float, work is dprobs and dprobs is
// null); dqkv q part (B,T,[0,C)).
// Decomposition: as the forward, one warp per query row (b,h,t), kRowsPerBlock rows per block,
// grid B*NH*ceil(T/kRowsPerBlock), keys streamed in tiles of 32:
//   pass 1 (V tiles): lane j: dP = dropout * (dout_t . v_t2) over HS in the CPU's order, into
//          the dprobs row; sum of P*dP per lane, then a warp sum;
//   pass 2 (global row, own entries): dS = P (dP - sum P dP), zeros where masked;
//   pass 3 (K tiles, per 128-channel slab): dq_t = sum_t2 (dS scale) k_t2 in key order.
// ---------------------------------------------------------------------------------------------
template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(S* __restrict__ dqkv, float* __restrict__ work, S* __restrict__ dprobs,
                                 const S* __restrict__ dout, const S* __restrict__ qkv, const S* __restrict__ probs,
                                 int T, int NH, int HS, bool causal, DropoutMask dropout) {
  extern __shared__ float smem[];
  const int val_stride = HS | 1;
  const QueryRow r = query_row(T, NH, causal);
  float* do_s = smem + r.warp * HS;
  float* tile_s = smem + kRowsPerBlock * HS;

  const int C = NH * HS;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const int64_t q_base = static_cast<int64_t>(r.b) * T * C3 + static_cast<int64_t>(r.h) * HS;
  const int64_t k_base = q_base + C, v_base = q_base + 2 * C;
  const int64_t prob_row = (static_cast<int64_t>(r.bh) * T + r.t) * T;
  const S* prow = probs + prob_row;
  float* dsrow = work + prob_row;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float p = dropout.p;
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();
  const float keep_scale = 1.0f / (1.0f - p);

  if (r.active) {
    const S* drow = dout + (static_cast<int64_t>(r.b) * T + r.t) * C + r.h * HS;
    for (int d = r.lane; d < HS; d += kWarp) do_s[d] = to_float(drow[d]);
  }

  // pass 1: dP = dropout * (dout . v), and sum P dP
  float dot_pdp = 0.0f;
  for (int tile = 0; tile < r.block_keys; tile += kTile) {
    __syncthreads();
    load_tile(tile_s, val_stride, qkv, v_base, tile, T, C3, HS);
    __syncthreads();
    if (tile < r.visible) {  // warp-uniform (the dropout helper shuffles)
      const int t2 = tile + r.lane;
      float m = 1.0f;
      if (p > 0.0f) m = warp_dropout_factor(key, dropout.index_offset + static_cast<uint64_t>(prob_row + tile), p, keep_scale, r.lane);
      if (t2 < r.visible) {
        const float* v_s = tile_s + r.lane * val_stride;
        float dot = 0.0f;
        for (int d = 0; d < HS; ++d) dot += do_s[d] * v_s[d];
        const float dp = m * dot;
        dsrow[t2] = dp;
        dot_pdp += to_float(prow[t2]) * dp;
      }
    }
  }

  // pass 2: softmax backward over the entries this lane wrote
  if (r.active) {
    dot_pdp = warp_sum(dot_pdp);
    for (int t2 = r.lane; t2 < T; t2 += kWarp) {
      const float ds = t2 < r.visible ? to_float(prow[t2]) * (dsrow[t2] - dot_pdp) : 0.0f;
      dsrow[t2] = ds;
      if constexpr (kRoundedCopy<S>) dprobs[prob_row + t2] = from_float<S>(ds);
    }
  }

  // pass 3: dq = sum_t2 (dS scale) k, per slab
  S* dqrow = dqkv + (static_cast<int64_t>(r.b) * T + r.t) * C3 + r.h * HS;
  weighted_key_rows(dqrow, tile_s, qkv, k_base, r, T, C3, HS, [&](int tile) {
    const int t2 = tile + r.lane;
    return t2 < r.visible ? dsrow[t2] * scale : 0.0f;  // this lane's own entry
  });
}

// ---------------------------------------------------------------------------------------------
// Backward, kernel 2: dk and dv, after kernel 1 has stored dS (fp32) in work.
// dout (B,T,C), qkv (B,T,3C), probs (B,NH,T,T), work (B,NH,T,T) fp32 dS -> dqkv k and v parts
// (B,T,[C,3C)).
// Decomposition: one warp per key row (b,h,t2); a block is kRowsPerBlock consecutive key rows of
// one (b,h), grid B*NH*ceil(T/kRowsPerBlock). The block streams the queries t (from its first
// key when causal) in tiles of 32: q and dout slabs of the tile, plus the tile's weights for its
// keys, w = dropout*P[t,t2] and g = dS[t,t2]*scale, one element per thread. Lane owns channels
// lane + 32 i; each warp sums over t in increasing order (the CPU's order):
// dv_t2 = sum_t w dout_t, dk_t2 = sum_t g q_t. Per 128-channel slab.
// Shared memory: 2*kTile*min(HS,128) (q and dout slabs) + 2*kTile*kRowsPerBlock (w and g).
// ---------------------------------------------------------------------------------------------
template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkv_kernel(S* __restrict__ dqkv, const float* __restrict__ work, const S* __restrict__ dout,
                                  const S* __restrict__ qkv, const S* __restrict__ probs, int T, int NH, int HS,
                                  bool causal, DropoutMask dropout) {
  extern __shared__ float smem[];
  const int slab_width = min(kSlab, HS);
  float* q_s = smem;                              // [kTile][slab_width]
  float* do_s = q_s + kTile * slab_width;         // [kTile][slab_width]
  float* w_s = do_s + kTile * slab_width;         // [kTile][kRowsPerBlock]
  float* g_s = w_s + kTile * kRowsPerBlock;       // [kTile][kRowsPerBlock]

  const int blocks_per_head = (T + kRowsPerBlock - 1) / kRowsPerBlock;
  const int bh = static_cast<int>(blockIdx.x / blocks_per_head);
  const int key0 = static_cast<int>(blockIdx.x % blocks_per_head) * kRowsPerBlock;
  const int b = bh / NH, h = bh % NH;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int t2 = key0 + warp;

  const int C = NH * HS;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const int64_t q_base = static_cast<int64_t>(b) * T * C3 + static_cast<int64_t>(h) * HS;
  const int64_t do_base = static_cast<int64_t>(b) * T * C + static_cast<int64_t>(h) * HS;
  const int64_t head = static_cast<int64_t>(bh) * T;  // (b,h) row 0 of probs, in rows of T
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float p = dropout.p;
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();
  const int first_query = causal ? key0 : 0;  // queries before a key never attend to it

  for (int slab = 0; slab < HS; slab += kSlab) {
    const int width = min(kSlab, HS - slab);
    float acc_k[kSlabRegs], acc_v[kSlabRegs];
#pragma unroll
    for (int i = 0; i < kSlabRegs; ++i) acc_k[i] = acc_v[i] = 0.0f;
    for (int tile = first_query; tile < T; tile += kTile) {
      __syncthreads();
      load_tile(q_s, width, qkv, q_base + slab, tile, T, C3, width);
      load_tile(do_s, width, dout, do_base + slab, tile, T, C, width);
      for (int i = threadIdx.x; i < kTile * kRowsPerBlock; i += blockDim.x) {
        const int j = i / kRowsPerBlock, k = i % kRowsPerBlock;
        const int t = tile + j, key_row = key0 + k;
        float w = 0.0f, g = 0.0f;
        if (t < T && key_row < T && (!causal || t >= key_row)) {
          const int64_t index = (head + t) * T + key_row;
          const float m = p > 0.0f ? dropout_scale(key, dropout.index_offset + static_cast<uint64_t>(index), p) : 1.0f;
          w = m * to_float(probs[index]);
          g = work[index] * scale;
        }
        w_s[i] = w;
        g_s[i] = g;
      }
      __syncthreads();
      if (t2 < T) {
        const int queries = min(kTile, T - tile);
        for (int j = 0; j < queries; ++j) {
          if (causal && tile + j < t2) continue;  // warp-uniform
          const float w = w_s[j * kRowsPerBlock + warp];
          const float g = g_s[j * kRowsPerBlock + warp];
          const float* qrow = q_s + j * width;
          const float* dorow = do_s + j * width;
#pragma unroll
          for (int i = 0; i < kSlabRegs; ++i) {
            const int d = lane + kWarp * i;
            if (d < width) {
              acc_v[i] += w * dorow[d];
              acc_k[i] += g * qrow[d];
            }
          }
        }
      }
    }
    if (t2 < T) {
      S* dk = dqkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * HS + slab;
      S* dv = dk + C;
#pragma unroll
      for (int i = 0; i < kSlabRegs; ++i) {
        const int d = lane + kWarp * i;
        if (d < width) {
          dk[d] = from_float<S>(acc_k[i]);
          dv[d] = from_float<S>(acc_v[i]);
        }
      }
    }
  }
}

// Opts a kernel into more than 48 KiB of dynamic shared memory when a large head needs it.
template <typename Kernel>
void reserve_shared_memory(Kernel kernel, size_t bytes, const char* what) {
  if (bytes <= kDefaultSmemBytes) return;
  int device = 0, limit = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<size_t>(limit))
    throw std::runtime_error(std::string(what) + ": head size needs " + std::to_string(bytes) +
                             " bytes of shared memory per block, the GPU allows " + std::to_string(limit));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Blocks for one warp per row of every (b,h): B*NH*ceil(T/kRowsPerBlock).
unsigned row_blocks(const AttentionShape& s, const char* what) {
  if (s.B <= 0 || s.T <= 0 || s.NH <= 0 || s.HS <= 0)
    throw std::runtime_error(std::string(what) + ": empty or negative attention shape");
  const int64_t blocks = static_cast<int64_t>(s.B) * s.NH * ((s.T + kRowsPerBlock - 1) / kRowsPerBlock);
  if (blocks > 0x7fffffff) throw std::runtime_error(std::string(what) + ": too many blocks for one launch");
  return static_cast<unsigned>(blocks);
}

// Shared memory of the two query-row kernels: per-warp rows of HS plus one odd-stride tile.
size_t query_row_smem_bytes(int HS) {
  return sizeof(float) * (static_cast<size_t>(kRowsPerBlock) * HS + static_cast<size_t>(kTile) * (HS | 1));
}

// The (B,NH,T) fp32 row statistics kept in the first bytes of a (B,NH,T,T) weights tensor
// (cuDNN's fused path).
Tensor row_statistics(Tensor weights, const AttentionShape& s) {
  return Tensor{weights.data, DType::F32, Shape{s.B, s.NH, s.T}};
}

}  // namespace

std::string cudnn_fallback_line(const std::string& reason) {
  std::string line;
  bool line_break = false;  // each run of line breaks inside the reason becomes "; "
  for (char c : reason) {
    if (c == '\n' || c == '\r') {
      line_break = true;
      continue;
    }
    if (line_break && !line.empty()) line += "; ";
    line_break = false;
    line += c;
  }
  return line + "; tinytrain's attention kernel runs";
}

// qkv (B,T,3C) -> out (B,T,C), probs (B,NH,T,T)
// `--attention cudnn`: cuDNN's fused attention for this case from now on, when it can serve
// it (kernels/cuda/cudnn_attention.h); else one line saying why, and our kernels keep it.
std::string CudaBackend::use_library_attention(const AttentionShape& s, DType storage, float dropout_p) {
  if (!options_.cudnn_attention) return "";
  require_not_capturing("use_library_attention");
  // A captured graph holds cuDNN's workspace pointer, which a new case could reallocate.
  if (graph_exec_ != nullptr && !(cudnn_attention_ && cudnn_attention_->prepared(s, storage, dropout_p)))
    return cudnn_fallback_line("cuDNN attention is set up before the first CUDA graph is captured, not after");
  try {
    const std::string why_not = cudnn_attention_unsupported(s, storage, dropout_p);
    if (!why_not.empty()) return cudnn_fallback_line(why_not);
    if (!cudnn_attention_) cudnn_attention_ = make_cudnn_attention(stream_);
    cudnn_attention_->prepare(s, storage, dropout_p);
  } catch (const std::runtime_error& e) {
    // A failed cudaMalloc stays the runtime's last error: clear it, or the next kernel's
    // launch check would report it.
    cudaGetLastError();
    return cudnn_fallback_line(std::string("cuDNN cannot serve this attention: ") + e.what());
  }
  return cudnn_attention_->describe() + " runs the attention" +
         (dropout_p > 0.0f ? " (its own dropout masks: not the CPU backend's)" : "");
}

void CudaBackend::attention_forward(Tensor out, Tensor probs, Tensor qkv, const AttentionShape& s,
                                    const DropoutMask& dropout) {
  if (cudnn_attention_ && cudnn_attention_->prepared(s, qkv.dtype, dropout.p)) {
    cudnn_attention_->forward(out, row_statistics(probs, s), qkv, s, dropout);
    return;
  }
  const unsigned blocks = row_blocks(s, "attention_forward");
  const DType dtype = shared_storage_dtype("attention_forward", {out, probs, qkv});
  const size_t smem = query_row_smem_bytes(s.HS);
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    // The fp32 softmax weights: probs itself in fp32; a work buffer when probs is 16-bit.
    float* work = kRoundedCopy<S> ? attention_work(static_cast<size_t>(probs.numel())) : probs.f32();
    S* rounded_probs = kRoundedCopy<S> ? probs.as<S>() : nullptr;
    reserve_shared_memory(attention_forward_kernel<S>, smem, "attention_forward");
    attention_forward_kernel<S><<<blocks, kThreads, smem, stream_>>>(out.as<S>(), work, rounded_probs, qkv.as<S>(),
                                                                     s.T, s.NH, s.HS, s.causal, dropout);
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (B,T,C) -> dqkv (B,T,3C) overwritten; dprobs (B,NH,T,T) scratch, left holding dS
void CudaBackend::attention_backward(Tensor dqkv, Tensor dprobs, Tensor dout, Tensor qkv, Tensor out, Tensor probs,
                                     const AttentionShape& s, const DropoutMask& dropout) {
  if (cudnn_attention_ && cudnn_attention_->prepared(s, qkv.dtype, dropout.p)) {
    cudnn_attention_->backward(dqkv, row_statistics(dprobs, s), dout, qkv, out, row_statistics(probs, s), s,
                               dropout);
    return;
  }
  const unsigned blocks = row_blocks(s, "attention_backward");
  const DType dtype = shared_storage_dtype("attention_backward", {dqkv, dprobs, dout, qkv, probs});
  const size_t smem_dq = query_row_smem_bytes(s.HS);
  const size_t slab_width = static_cast<size_t>(std::min(kSlab, s.HS));
  const size_t smem_dkv = sizeof(float) * (2 * kTile * slab_width + 2 * kTile * kRowsPerBlock);
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    // The fp32 score gradients dS, which both kernels use: dprobs itself in fp32; a work buffer
    // when dprobs is 16-bit (kernel 1 also leaves dS, rounded, in dprobs).
    float* work = kRoundedCopy<S> ? attention_work(static_cast<size_t>(dprobs.numel())) : dprobs.f32();
    S* rounded_dprobs = kRoundedCopy<S> ? dprobs.as<S>() : nullptr;
    reserve_shared_memory(attention_backward_dq_kernel<S>, smem_dq, "attention_backward");
    attention_backward_dq_kernel<S><<<blocks, kThreads, smem_dq, stream_>>>(
        dqkv.as<S>(), work, rounded_dprobs, dout.as<S>(), qkv.as<S>(), probs.as<S>(), s.T, s.NH, s.HS, s.causal,
        dropout);
    CUDA_CHECK(cudaGetLastError());
    attention_backward_dkv_kernel<S><<<blocks, kThreads, smem_dkv, stream_>>>(
        dqkv.as<S>(), work, dout.as<S>(), qkv.as<S>(), probs.as<S>(), s.T, s.NH, s.HS, s.causal, dropout);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
