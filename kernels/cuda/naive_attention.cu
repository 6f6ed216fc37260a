// The first rung of the attention ladder (`--attention naive`): the softmax weights of a
// whole (T,T) head are written to memory, then read back. Per head, softmax(q k^T / sqrt(HS)
// [+ causal mask]) with dropout on the weights, times v, forward and backward. Kept for
// teaching and comparison with flash_attention.cu (the default), which never writes them;
// docs/attention.md puts the two side by side.
// These kernels compute what kernels/cpu/attention.cpp computes, in the same order wherever one
// thread owns a sum (score dot products, the weighted sums of v, dq, dk, dv), so those differ
// from the CPU's only where the compiler fuses a multiply-add (nvcc does, the CPU backend does
// not: each fused pair rounds once instead of twice), the softmax row sums (warp reductions)
// and expf.
//
// Memory: the weights P and the score gradients dS, (B,NH,T,T) fp32 each, live in the
// backend's attention work buffer (CudaBackend::attention_work, 2 B NH T^2 floats, shared by
// every layer), not in the model's activations: the contract keeps only the log-sum-exp
// (kernels/backend.h). So the backward first recomputes P with the forward's own kernel (its
// first two passes: the same bits), then runs its two kernels on it.
//
// Every kernel reads and writes the packed layout directly: qkv (B,T,W) holds [q|k|v] per
// token (kernels/common/qkv_layout.h: query head h reads its group's key and value head). Any
// T (keys and queries are streamed through shared memory in tiles of 32) and any HS (outputs
// are built in slabs of 128 channels; shared memory grows with HS, about 20 KiB at HS = 128).
// Deterministic: no atomics; every output element is written by exactly one thread, and every
// sum runs in a fixed order. Storage: qkv, out, dout and dqkv are in the activation storage type
// S (float, bf16 or f16; kernels/cuda/storage.cuh), converted to fp32 as they are loaded; all
// math is fp32.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/common/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/dropout_factor.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp.cuh"

namespace tt {

namespace {

using namespace attention_tiles;

constexpr int kSlab = 128;                        // output channels per pass over the tiles
constexpr int kSlabRegs = kSlab / kWarp;          // accumulators per lane: channel lane + 32 i

// Pass 3 of the two query-row kernels: out_row[d] = sum over visible keys t2 of weight(t2) *
// row_t2[d], where row_t2 is key t2's slice of qkv at part_base (v for the forward's output,
// k for the backward's dq). Per 128-channel slab, the block streams key rows in tiles of 32
// through shared memory; lane owns channels lane + 32 i. weight_of(tile) returns, on lane j,
// the weight of key tile + j (0 past the visible keys); every lane of the warp calls it (the
// warp shuffles inside), and each key's weight is broadcast by shuffle and accumulated in key
// order (the CPU's order).
template <typename S, typename WeightOf>
__device__ __forceinline__ void weighted_key_rows(S* out_row, float* tile_s, const S* __restrict__ qkv,
                                                  int64_t part_base, const QueryRow& r, int T, int64_t W, int HS,
                                                  WeightOf weight_of) {
  for (int slab = 0; slab < HS; slab += kSlab) {
    const int width = min(kSlab, HS - slab);
    float acc[kSlabRegs];
#pragma unroll
    for (int i = 0; i < kSlabRegs; ++i) acc[i] = 0.0f;
    for (int tile = 0; tile < r.block_keys; tile += kTile) {
      __syncthreads();
      load_tile(tile_s, width, qkv, part_base + slab, tile, T, W, width);
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
// Forward. qkv (B,T,W) -> out (B,T,C), lse (B,NH,T), and in work (B,NH,T,T) fp32 the softmax
// weights before dropout (masked entries 0). With out null, only the weights (the backward's
// recomputation: passes 1 and 2); with lse null, no lse.
// Decomposition: one warp per query row (b,h,t); a block is kRowsPerBlock consecutive query rows
// of one (b,h), grid B*NH*ceil(T/kRowsPerBlock). The block streams the keys in tiles of 32
// through shared memory, shared by its warps:
//   pass 1 (K tiles): lane j scores key tile+j: (q*scale).k over HS in the CPU's order, raw
//          score into the probs row, running max;
//   pass 2 (global row): each lane exponentiates and sums the entries it wrote itself (t2 = lane
//          mod 32, so no synchronisation), warp sums, normalises, zeroes the masked entries;
//          lane 0 writes lse = max + log(sum);
//   pass 3 (V tiles, per 128-channel slab): lane owns channels lane + 32 i; each key's weight
//          P*dropout (fp32, from work) is broadcast by shuffle and accumulated in key order (the
//          CPU's order).
// Shared memory: kRowsPerBlock*HS (scaled q rows) + kTile*(HS|1) (tile; odd stride keeps the
// pass-1 column reads free of bank conflicts).
// ---------------------------------------------------------------------------------------------
template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(S* __restrict__ out, float* __restrict__ lse, float* __restrict__ work,
                             const S* __restrict__ qkv, int T, QkvLayout at, bool causal, DropoutMask dropout) {
  extern __shared__ float smem[];
  const int HS = at.HS;
  const int key_stride = HS | 1;
  const QueryRow r = query_row(T, at.NH, causal);
  float* q_s = smem + r.warp * HS;
  float* tile_s = smem + kRowsPerBlock * HS;

  const int64_t C = at.q_width(), W = at.width();
  const int64_t token0 = static_cast<int64_t>(r.b) * T * W;  // token 0 of batch b
  const int64_t q_base = token0 + at.q(r.h), k_base = token0 + at.k(r.h), v_base = token0 + at.v(r.h);
  const int64_t prob_row = (static_cast<int64_t>(r.bh) * T + r.t) * T;  // mask index of (b,h,t,0)
  float* prow = work + prob_row;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float p = dropout.p;

  if (r.active)
    for (int d = r.lane; d < HS; d += kWarp) q_s[d] = to_float(qkv[q_base + r.t * W + d]) * scale;

  // pass 1: scores and the row max
  float max_score = -INFINITY;
  for (int tile = 0; tile < r.block_keys; tile += kTile) {
    __syncthreads();  // the previous tile (and, first time, q_s) is complete / consumed
    load_tile(tile_s, key_stride, qkv, k_base, tile, T, W, HS);
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
    if (lse != nullptr && r.lane == 0) lse[static_cast<int64_t>(r.bh) * T + r.t] = max_score + logf(sum);
    const float inv_sum = 1.0f / sum;
    for (int t2 = r.lane; t2 < T; t2 += kWarp) prow[t2] = t2 < r.visible ? prow[t2] * inv_sum : 0.0f;
  }
  if (out == nullptr) return;  // block-uniform: the weights were all that was asked

  // pass 3: out = sum_t2 (P dropout) v, one 128-channel slab at a time
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();  // reads the step from device memory
  const float keep_scale = 1.0f / (1.0f - p);
  S* orow = out + (static_cast<int64_t>(r.b) * T + r.t) * C + at.q(r.h);
  weighted_key_rows(orow, tile_s, qkv, v_base, r, T, W, HS, [&](int tile) {
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
// dout (B,T,C), qkv (B,T,W), probs (B,NH,T,T) fp32 (the recomputed weights) -> dS (B,NH,T,T)
// fp32 (0 where masked); dqkv q part (B,T,[0,C)).
// Decomposition: as the forward, one warp per query row (b,h,t), kRowsPerBlock rows per block,
// grid B*NH*ceil(T/kRowsPerBlock), keys streamed in tiles of 32:
//   pass 1 (V tiles): lane j: dP = dropout * (dout_t . v_t2) over HS in the CPU's order, into
//          the dprobs row; sum of P*dP per lane, then a warp sum;
//   pass 2 (global row, own entries): dS = P (dP - sum P dP), zeros where masked;
//   pass 3 (K tiles, per 128-channel slab): dq_t = sum_t2 (dS scale) k_t2 in key order.
// ---------------------------------------------------------------------------------------------
template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(S* __restrict__ dqkv, float* __restrict__ dS, const S* __restrict__ dout,
                                 const S* __restrict__ qkv, const float* __restrict__ probs,
                                 int T, QkvLayout at, bool causal, DropoutMask dropout) {
  extern __shared__ float smem[];
  const int HS = at.HS;
  const int val_stride = HS | 1;
  const QueryRow r = query_row(T, at.NH, causal);
  float* do_s = smem + r.warp * HS;
  float* tile_s = smem + kRowsPerBlock * HS;

  const int64_t C = at.q_width(), W = at.width();
  const int64_t token0 = static_cast<int64_t>(r.b) * T * W;
  const int64_t k_base = token0 + at.k(r.h), v_base = token0 + at.v(r.h);
  const int64_t prob_row = (static_cast<int64_t>(r.bh) * T + r.t) * T;
  const float* prow = probs + prob_row;
  float* dsrow = dS + prob_row;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float p = dropout.p;
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();
  const float keep_scale = 1.0f / (1.0f - p);

  if (r.active) {
    const S* drow = dout + (static_cast<int64_t>(r.b) * T + r.t) * C + at.q(r.h);
    for (int d = r.lane; d < HS; d += kWarp) do_s[d] = to_float(drow[d]);
  }

  // pass 1: dP = dropout * (dout . v), and sum P dP
  float dot_pdp = 0.0f;
  for (int tile = 0; tile < r.block_keys; tile += kTile) {
    __syncthreads();
    load_tile(tile_s, val_stride, qkv, v_base, tile, T, W, HS);
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
        dot_pdp += prow[t2] * dp;
      }
    }
  }

  // pass 2: softmax backward over the entries this lane wrote
  if (r.active) {
    dot_pdp = warp_sum(dot_pdp);
    for (int t2 = r.lane; t2 < T; t2 += kWarp) dsrow[t2] = t2 < r.visible ? prow[t2] * (dsrow[t2] - dot_pdp) : 0.0f;
  }

  // pass 3: dq = sum_t2 (dS scale) k, per slab
  S* dqrow = dqkv + token0 + r.t * W + at.q(r.h);
  weighted_key_rows(dqrow, tile_s, qkv, k_base, r, T, W, HS, [&](int tile) {
    const int t2 = tile + r.lane;
    return t2 < r.visible ? dsrow[t2] * scale : 0.0f;  // this lane's own entry
  });
}

// ---------------------------------------------------------------------------------------------
// Backward, kernel 2: dk and dv, after kernel 1 has stored dS.
// dout (B,T,C), qkv (B,T,W), probs and dS (B,NH,T,T) fp32 -> dqkv k and v parts.
// Decomposition: one warp per key row (b, key/value head, t2); a block is kRowsPerBlock
// consecutive key rows of one (b, key/value head), grid B*KVH*ceil(T/kRowsPerBlock). For each
// query head of the key's group in turn (one, unless grouped), the block streams the queries t
// (from its first key when causal) in tiles of 32: q and dout slabs of the tile, plus the
// tile's weights for its keys, w = dropout*P[t,t2] and g = dS[t,t2]*scale, one element per
// thread. Lane owns channels lane + 32 i; each warp sums over t in increasing order, head after
// head (the CPU's order): dv_t2 = sum_t w dout_t, dk_t2 = sum_t g q_t. Per 128-channel slab.
// Shared memory: 2*kTile*min(HS,128) (q and dout slabs) + 2*kTile*kRowsPerBlock (w and g).
// ---------------------------------------------------------------------------------------------
template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkv_kernel(S* __restrict__ dqkv, const float* __restrict__ dS, const S* __restrict__ dout,
                                  const S* __restrict__ qkv, const float* __restrict__ probs, int T, QkvLayout at,
                                  bool causal, DropoutMask dropout) {
  extern __shared__ float smem[];
  const int HS = at.HS;
  const int slab_width = min(kSlab, HS);
  float* q_s = smem;                              // [kTile][slab_width]
  float* do_s = q_s + kTile * slab_width;         // [kTile][slab_width]
  float* w_s = do_s + kTile * slab_width;         // [kTile][kRowsPerBlock]
  float* g_s = w_s + kTile * kRowsPerBlock;       // [kTile][kRowsPerBlock]

  const int blocks_per_head = (T + kRowsPerBlock - 1) / kRowsPerBlock;
  const int bkv = static_cast<int>(blockIdx.x / blocks_per_head);  // b * KVH + key/value head
  const int key0 = static_cast<int>(blockIdx.x % blocks_per_head) * kRowsPerBlock;
  const int b = bkv / at.KVH, kv = bkv % at.KVH;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int t2 = key0 + warp;

  const int64_t C = at.q_width(), W = at.width();
  const int64_t token0 = static_cast<int64_t>(b) * T * W;
  const int h0 = kv * at.group();  // the group's first query head
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
    for (int h = h0; h < h0 + at.group(); ++h) {
      const int64_t q_base = token0 + at.q(h);
      const int64_t do_base = static_cast<int64_t>(b) * T * C + at.q(h);
      const int64_t head = (static_cast<int64_t>(b) * at.NH + h) * T;  // (b,h) row 0 of probs, in rows of T
      for (int tile = first_query; tile < T; tile += kTile) {
        __syncthreads();
        load_tile(q_s, width, qkv, q_base + slab, tile, T, W, width);
        load_tile(do_s, width, dout, do_base + slab, tile, T, C, width);
        for (int i = threadIdx.x; i < kTile * kRowsPerBlock; i += blockDim.x) {
          const int j = i / kRowsPerBlock, k = i % kRowsPerBlock;
          const int t = tile + j, key_row = key0 + k;
          float w = 0.0f, g = 0.0f;
          if (t < T && key_row < T && (!causal || t >= key_row)) {
            const int64_t index = (head + t) * T + key_row;
            const float m =
                p > 0.0f ? dropout_scale(key, dropout.index_offset + static_cast<uint64_t>(index), p) : 1.0f;
            w = m * probs[index];
            g = dS[index] * scale;
          }
          w_s[i] = w;
          g_s[i] = g;
        }
        __syncthreads();
        if (t2 < T) {
          add_query_tile(acc_k, acc_v, w_s, g_s, q_s, do_s, width, width, min(kTile, T - tile), tile, t2, causal,
                         warp, lane);
        }
      }
    }
    if (t2 < T) {
      S* dk = dqkv + token0 + static_cast<int64_t>(t2) * W + at.k(h0) + slab;
      S* dv = dqkv + token0 + static_cast<int64_t>(t2) * W + at.v(h0) + slab;
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

// Shared memory of the two query-row kernels: per-warp rows of HS plus one odd-stride tile.
size_t query_row_smem_bytes(int HS) {
  return sizeof(float) * (static_cast<size_t>(kRowsPerBlock) * HS + static_cast<size_t>(kTile) * (HS | 1));
}

}  // namespace

// qkv (B,T,W) -> out (B,T,C), lse (B,NH,T); the weights in the work buffer's first B NH T^2 floats
void CudaBackend::naive_attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                                          const DropoutMask& dropout) {
  const unsigned blocks = row_blocks(s, s.NH, "attention_forward");
  const DType dtype = shared_storage_dtype("attention_forward", {out, qkv});
  const size_t smem = query_row_smem_bytes(s.HS);
  float* weights = attention_work(2 * static_cast<size_t>(s.B) * s.NH * s.T * s.T);
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    reserve_shared_memory(attention_forward_kernel<S>, smem, "attention_forward");
    attention_forward_kernel<S><<<blocks, kThreads, smem, stream_>>>(out.as<S>(), lse.f32(), weights, qkv.as<S>(),
                                                                     s.T, s.layout(), s.causal, dropout);
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (B,T,C) -> dqkv (B,T,W) overwritten: the weights recomputed into the work buffer's first
// half by the forward kernel (no output), dS into its second half, then dq, then dk and dv.
void CudaBackend::naive_attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, const AttentionShape& s,
                                           const DropoutMask& dropout) {
  const unsigned blocks = row_blocks(s, s.NH, "attention_backward");
  const unsigned key_blocks = row_blocks(s, s.kv_heads(), "attention_backward");  // per key/value head
  const DType dtype = shared_storage_dtype("attention_backward", {dqkv, dout, qkv});
  const size_t smem_rows = query_row_smem_bytes(s.HS);
  const size_t slab_width = static_cast<size_t>(std::min(kSlab, s.HS));
  const size_t smem_dkv = sizeof(float) * (2 * kTile * slab_width + 2 * kTile * kRowsPerBlock);
  const size_t weights_floats = static_cast<size_t>(s.B) * s.NH * s.T * s.T;
  float* weights = attention_work(2 * weights_floats);
  float* dS = weights + weights_floats;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    reserve_shared_memory(attention_forward_kernel<S>, smem_rows, "attention_backward");
    attention_forward_kernel<S><<<blocks, kThreads, smem_rows, stream_>>>(nullptr, nullptr, weights, qkv.as<S>(),
                                                                          s.T, s.layout(), s.causal, dropout);
    CUDA_CHECK(cudaGetLastError());
    reserve_shared_memory(attention_backward_dq_kernel<S>, smem_rows, "attention_backward");
    attention_backward_dq_kernel<S><<<blocks, kThreads, smem_rows, stream_>>>(
        dqkv.as<S>(), dS, dout.as<S>(), qkv.as<S>(), weights, s.T, s.layout(), s.causal, dropout);
    CUDA_CHECK(cudaGetLastError());
    attention_backward_dkv_kernel<S><<<key_blocks, kThreads, smem_dkv, stream_>>>(
        dqkv.as<S>(), dS, dout.as<S>(), qkv.as<S>(), weights, s.T, s.layout(), s.causal, dropout);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
