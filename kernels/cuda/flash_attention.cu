// tinytrain's flash attention (`--attention flash`, the CUDA backend's default): the attention
// core, forward and backward, without ever writing the (T,T) weights to memory.
// docs/attention.md derives it and draws which block reads what.
//
// The idea. A query row's output is sum_j softmax(s)_j v_j with s_j = q.k_j / sqrt(HS). The
// softmax needs the row's max and sum, but they can be carried along as the keys arrive in
// tiles (the online softmax): keep a running max m, a running sum l of exp(s_j - m) and an
// unnormalised output acc = sum_j exp(s_j - m) v_j; when a tile raises the max to m', multiply l
// and acc by exp(m - m') first. At the end out = acc / l, and lse = m + log(l) is all the
// backward needs to recompute any weight: P_j = exp(s_j - lse).
// The backward: dP_j = dropout_j (dout . v_j) and dS_j = P_j (dP_j - D), where the row term
// D = sum_j P_j dP_j equals rowsum(dout * out) (out already holds the dropped-out weights), so it
// is one dot product per row, computed first. A row with a single key (T = 1, or a causal
// sequence's first query) has dS = 0 exactly, as the CPU's P (dP - P dP) gives it; D and dP
// would differ there by rounding, so those rows write the zero itself. Then
// dq_t = scale sum_j dS_tj k_j (per query row) and dk_j = scale sum_t dS_tj q_t,
// dv_j = sum_t dropout_tj P_tj dout_t (per key row).
//
// Decomposition (attention_tiles.cuh): one warp per row, kRowsPerBlock = 8 rows of one (b,h) per
// block, tiles of kTile = 32 keys (or queries) through shared memory, one per lane.
//   forward       warp = query row; per key tile: lane j scores key j, the warp's max and sum
//                 update m and l, lane d accumulates channels d + 32 i of acc.
//   backward dq   warp = query row; first D = dout . out (written for the next kernel), then per
//                 key tile: lane j recomputes P_j, dP_j, dS_j; dq accumulates like acc.
//   backward dkv  warp = key row (of a key/value head: with grouped-query attention it takes
//                 its group's query heads one after another); per query tile: each of the 256 threads recomputes one
//                 (query, key) pair's P, dropout and dS into shared memory, then lane d
//                 accumulates dk and dv over the tile's queries.
// Causal: the key tiles wholly above a query block's last row are never loaded (block_keys),
// nor the query tiles wholly before a key block's first row (first_query).
//
// Head sizes 1..kMaxHead: each lane holds ceil(HS/32) accumulators (a template parameter, 1, 2,
// 4 or 8), channel lane + 32 i. Any T. Shared memory per block, in floats: forward
// 8 HS + 32 (HS|1) + 32 HS; backward dq 16 HS + 64 (HS|1); backward dkv 80 (HS|1) + 576 (about
// 36, 40 and 43 KiB at HS = 128). A kernel asks for more than 48 KiB explicitly.
// Dropout: the factor of weight (b,h,t,j) is element ((b NH + h) T + t) T + j of the mask, drawn
// from kernels/common/philox.h as the CPU backend draws it: both backends drop the same weights.
// Deterministic: every output is written by one thread and every sum runs in a fixed order (no
// atomics). fp32 math, storage S = float, bf16 or fp16 (loads widened, stores rounded once).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dropout_factor.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp.cuh"

namespace tt {

namespace {

using namespace attention_tiles;

constexpr int kMaxHead = 256;  // head sizes the kernels serve: accumulators per lane up to 8

// ---------------------------------------------------------------------------------------------
// Forward. qkv (B,T,W) (kernels/common/qkv_layout.h) -> out (B,T,C), lse (B,NH,T) fp32.
// Shared memory: q_s [8][HS] (each warp's query, times scale), k_s [32][HS|1] (odd stride: lane
// j reads row j, free of bank conflicts), v_s [32][HS].
// ---------------------------------------------------------------------------------------------
template <typename S, int kRegs>
__global__ void __launch_bounds__(kThreads)
    flash_attention_forward_kernel(S* __restrict__ out, float* __restrict__ lse, const S* __restrict__ qkv, int T,
                                   QkvLayout at, bool causal, DropoutMask dropout) {
  extern __shared__ float smem[];
  const int HS = at.HS;
  const int key_stride = HS | 1;
  const QueryRow r = query_row(T, at.NH, causal);
  float* q_s = smem + r.warp * HS;
  float* k_s = smem + kRowsPerBlock * HS;
  float* v_s = k_s + kTile * key_stride;

  const int64_t C = at.q_width(), W = at.width();
  const int64_t token0 = static_cast<int64_t>(r.b) * T * W;  // token 0 of batch b
  const int64_t q_base = token0 + at.q(r.h), k_base = token0 + at.k(r.h), v_base = token0 + at.v(r.h);
  const int64_t mask_row = (static_cast<int64_t>(r.bh) * T + r.t) * T;  // mask index of weight (b,h,t,0)
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float p = dropout.p;
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();  // reads the step from device memory
  const float keep_scale = 1.0f / (1.0f - p);

  if (r.active)
    for (int d = r.lane; d < HS; d += kWarp) q_s[d] = to_float(qkv[q_base + r.t * W + d]) * scale;

  float m = -INFINITY;  // running max of the row's scores
  float l = 0.0f;       // running sum of exp(score - m)
  float acc[kRegs];     // running sum of exp(score - m) dropout v, channels lane + 32 i
#pragma unroll
  for (int i = 0; i < kRegs; ++i) acc[i] = 0.0f;

  for (int tile = 0; tile < r.block_keys; tile += kTile) {
    __syncthreads();  // every warp is done with the previous tile (and, first time, q_s is written)
    load_tile(k_s, key_stride, qkv, k_base, tile, T, W, HS);
    load_tile(v_s, HS, qkv, v_base, tile, T, W, HS);
    __syncthreads();
    if (tile >= r.visible) continue;  // warp-uniform: this row sees none of the tile
    // lane j: the score of key tile + j, the row's order of products (the CPU's)
    const int j_key = tile + r.lane;
    const bool visible = j_key < r.visible;
    float score = -INFINITY;
    if (visible) {
      const float* k_row = k_s + r.lane * key_stride;
      float dot = 0.0f;
      for (int d = 0; d < HS; ++d) dot += q_s[d] * k_row[d];
      score = dot;
    }
    // the online softmax: raise the max, rescale what was summed under the old one
    const float m_new = fmaxf(m, warp_max(score));  // finite: key `tile` is visible
    const float rescale = expf(m - m_new);          // 0 on the first tile (m = -inf)
    const float e = visible ? expf(score - m_new) : 0.0f;
    l = l * rescale + warp_sum(e);
    m = m_new;
    float w = e;  // the weight's numerator, dropped out: v is summed with it
    if (p > 0.0f) w *= warp_dropout_factor(key, dropout.index_offset + static_cast<uint64_t>(mask_row + tile), p,
                                           keep_scale, r.lane);
#pragma unroll
    for (int i = 0; i < kRegs; ++i) acc[i] *= rescale;
    const int keys = min(kTile, r.visible - tile);
    for (int j = 0; j < keys; ++j) {
      const float wj = __shfl_sync(kFullMask, w, j);
      const float* v_row = v_s + j * HS;
#pragma unroll
      for (int i = 0; i < kRegs; ++i) {
        const int d = r.lane + kWarp * i;
        if (d < HS) acc[i] += wj * v_row[d];
      }
    }
  }
  if (!r.active) return;
  const float inv_l = 1.0f / l;
  S* out_row = out + (static_cast<int64_t>(r.b) * T + r.t) * C + r.h * HS;
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int d = r.lane + kWarp * i;
    if (d < HS) out_row[d] = from_float<S>(acc[i] * inv_l);
  }
  if (r.lane == 0) lse[static_cast<int64_t>(r.bh) * T + r.t] = m + logf(l);
}

// ---------------------------------------------------------------------------------------------
// Backward, kernel 1: D and dq. dout (B,T,C), out (B,T,C), qkv (B,T,W), lse (B,NH,T) ->
// dout_dot_out (B,NH,T) fp32 = D, dqkv q part (B,T,[0,C)).
// Shared memory: q_s and do_s [8][HS] (each warp's query times scale, and its dout row), k_s and
// v_s [32][HS|1] (lane j reads row j for its dot products).
// ---------------------------------------------------------------------------------------------
template <typename S, int kRegs>
__global__ void __launch_bounds__(kThreads)
    flash_attention_backward_dq_kernel(S* __restrict__ dqkv, float* __restrict__ dout_dot_out,
                                       const S* __restrict__ dout, const S* __restrict__ out,
                                       const S* __restrict__ qkv, const float* __restrict__ lse, int T,
                                       QkvLayout at, bool causal, DropoutMask dropout) {
  extern __shared__ float smem[];
  const int HS = at.HS;
  const int row_stride = HS | 1;
  const QueryRow r = query_row(T, at.NH, causal);
  float* q_s = smem + r.warp * HS;
  float* do_s = smem + (kRowsPerBlock + r.warp) * HS;
  float* k_s = smem + 2 * kRowsPerBlock * HS;
  float* v_s = k_s + kTile * row_stride;

  const int64_t C = at.q_width(), W = at.width();
  const int64_t token0 = static_cast<int64_t>(r.b) * T * W;
  const int64_t q_base = token0 + at.q(r.h), k_base = token0 + at.k(r.h), v_base = token0 + at.v(r.h);
  const int64_t mask_row = (static_cast<int64_t>(r.bh) * T + r.t) * T;
  const int64_t stat = static_cast<int64_t>(r.bh) * T + r.t;  // this row's lse and D
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float p = dropout.p;
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();
  const float keep_scale = 1.0f / (1.0f - p);

  // D = dout . out over the head's channels, before any key: the softmax backward's row term
  float row_lse = 0.0f, D = 0.0f;
  if (r.active) {
    const int64_t row = (static_cast<int64_t>(r.b) * T + r.t) * C + at.q(r.h);
    float part = 0.0f;
    for (int d = r.lane; d < HS; d += kWarp) {
      const float g = to_float(dout[row + d]);
      do_s[d] = g;
      q_s[d] = to_float(qkv[q_base + r.t * W + d]) * scale;
      part += g * to_float(out[row + d]);
    }
    D = warp_sum(part);
    if (r.lane == 0) dout_dot_out[stat] = D;
    row_lse = lse[stat];
  }

  float acc[kRegs];  // dq, channels lane + 32 i
#pragma unroll
  for (int i = 0; i < kRegs; ++i) acc[i] = 0.0f;
  for (int tile = 0; tile < r.block_keys; tile += kTile) {
    __syncthreads();
    load_tile(k_s, row_stride, qkv, k_base, tile, T, W, HS);
    load_tile(v_s, row_stride, qkv, v_base, tile, T, W, HS);
    __syncthreads();
    if (tile >= r.visible) continue;  // warp-uniform (the dropout helper shuffles)
    const int j_key = tile + r.lane;
    float factor = 1.0f;
    if (p > 0.0f)
      factor = warp_dropout_factor(key, dropout.index_offset + static_cast<uint64_t>(mask_row + tile), p,
                                   keep_scale, r.lane);
    float g = 0.0f;  // dS scale of key j_key: dq's weight
    if (j_key < r.visible) {
      const float* k_row = k_s + r.lane * row_stride;
      const float* v_row = v_s + r.lane * row_stride;
      float score = 0.0f, dov = 0.0f;
      for (int d = 0; d < HS; ++d) score += q_s[d] * k_row[d];
      for (int d = 0; d < HS; ++d) dov += do_s[d] * v_row[d];
      const float P = expf(score - row_lse);
      // dS = P (dP - D) is exactly 0 when the row has one key (softmax of one score is 1 whatever the
      // score), but dP and D are sums of the same products in different orders: keep the zero exact
      g = r.visible == 1 ? 0.0f : P * (factor * dov - D) * scale;
    }
    const int keys = min(kTile, r.visible - tile);
    for (int j = 0; j < keys; ++j) {
      const float gj = __shfl_sync(kFullMask, g, j);
      const float* k_row = k_s + j * row_stride;
#pragma unroll
      for (int i = 0; i < kRegs; ++i) {
        const int d = r.lane + kWarp * i;
        if (d < HS) acc[i] += gj * k_row[d];
      }
    }
  }
  if (!r.active) return;
  S* dq_row = dqkv + (static_cast<int64_t>(r.b) * T + r.t) * W + at.q(r.h);
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int d = r.lane + kWarp * i;
    if (d < HS) dq_row[d] = from_float<S>(acc[i]);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward, kernel 2: dk and dv, after kernel 1 has written D. dout (B,T,C), qkv (B,T,W), lse
// and D (B,NH,T) -> dqkv k and v parts.
// One warp per key row (b, key/value head, t2), kRowsPerBlock key rows of one (b, key/value
// head) per block; the block streams the queries of each query head of the key's group in
// turn (one head, as plain multi-head attention, unless grouped), in tiles of 32. Per tile,
// thread i takes the pair (query j = i / 8, key kk = i % 8) and recomputes w = dropout P (dv's
// weight) and g = dS scale (dk's), into w_s and g_s [32][8]; then lane d sums w dout_j and g q_j
// over the tile's queries in increasing order, head after head (the CPU's order).
// Shared memory: kq_s, kv_s [8][HS|1] (the block's keys and values), q_s, do_s [32][HS|1] (the
// tile's queries, unscaled, and their dout rows), lse_s, d_s [32], w_s, g_s [32][8].
// ---------------------------------------------------------------------------------------------
template <typename S, int kRegs>
__global__ void __launch_bounds__(kThreads)
    flash_attention_backward_dkv_kernel(S* __restrict__ dqkv, const S* __restrict__ dout, const S* __restrict__ qkv,
                                        const float* __restrict__ lse, const float* __restrict__ dout_dot_out, int T,
                                        QkvLayout at, bool causal, DropoutMask dropout) {
  extern __shared__ float smem[];
  const int HS = at.HS;
  const int stride = HS | 1;
  float* key_s = smem;                           // [8][stride]
  float* val_s = key_s + kRowsPerBlock * stride;  // [8][stride]
  float* q_s = val_s + kRowsPerBlock * stride;    // [32][stride]
  float* do_s = q_s + kTile * stride;             // [32][stride]
  float* lse_s = do_s + kTile * stride;           // [32]
  float* d_s = lse_s + kTile;                     // [32]
  float* w_s = d_s + kTile;                       // [32][8]
  float* g_s = w_s + kTile * kRowsPerBlock;       // [32][8]

  const int blocks_per_head = (T + kRowsPerBlock - 1) / kRowsPerBlock;
  const int bkv = static_cast<int>(blockIdx.x / blocks_per_head);  // b * KVH + key/value head
  const int key0 = static_cast<int>(blockIdx.x % blocks_per_head) * kRowsPerBlock;
  const int b = bkv / at.KVH, kv = bkv % at.KVH;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int t2 = key0 + warp;  // this warp's key

  const int64_t C = at.q_width(), W = at.width();
  const int64_t token0 = static_cast<int64_t>(b) * T * W;
  const int h0 = kv * at.group();  // the group's first query head: at.k(h0) is this key head
  const int64_t k_base = token0 + at.k(h0), v_base = token0 + at.v(h0);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float p = dropout.p;
  DropoutKey key{};
  if (p > 0.0f) key = dropout.key();
  const int first_query = causal ? key0 : 0;  // queries before a key never attend to it

  // the block's keys and values (rows past T are zero and never used)
  for (int i = threadIdx.x; i < kRowsPerBlock * HS; i += blockDim.x) {
    const int k = i / HS, d = i - k * HS;
    const int row = key0 + k;
    const bool in = row < T;
    key_s[k * stride + d] = in ? to_float(qkv[k_base + static_cast<int64_t>(row) * W + d]) : 0.0f;
    val_s[k * stride + d] = in ? to_float(qkv[v_base + static_cast<int64_t>(row) * W + d]) : 0.0f;
  }

  float acc_k[kRegs], acc_v[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i) acc_k[i] = acc_v[i] = 0.0f;
  for (int h = h0; h < h0 + at.group(); ++h) {
    const int64_t q_base = token0 + at.q(h);
    const int64_t do_base = static_cast<int64_t>(b) * T * C + at.q(h);
    const int64_t head = (static_cast<int64_t>(b) * at.NH + h) * T;  // (b,h) row 0, in rows of T
    for (int tile = first_query; tile < T; tile += kTile) {
      __syncthreads();  // the previous tile is consumed (and, first time, the keys are written)
      load_tile(q_s, stride, qkv, q_base, tile, T, W, HS);
      load_tile(do_s, stride, dout, do_base, tile, T, C, HS);
      if (threadIdx.x < kTile) {
        const int t = tile + threadIdx.x;
        lse_s[threadIdx.x] = t < T ? lse[head + t] : 0.0f;
        d_s[threadIdx.x] = t < T ? dout_dot_out[head + t] : 0.0f;
      }
      __syncthreads();
      {  // one (query, key) pair per thread
        const int j = threadIdx.x / kRowsPerBlock, k = threadIdx.x % kRowsPerBlock;
        const int t = tile + j, key_row = key0 + k;
        float w = 0.0f, g = 0.0f;
        if (t < T && key_row < T && (!causal || t >= key_row)) {
          const float* q_row = q_s + j * stride;
          const float* k_row = key_s + k * stride;
          const float* do_row = do_s + j * stride;
          const float* v_row = val_s + k * stride;
          float score = 0.0f, dov = 0.0f;
          for (int d = 0; d < HS; ++d) score += (q_row[d] * scale) * k_row[d];  // the forward's bits
          for (int d = 0; d < HS; ++d) dov += do_row[d] * v_row[d];
          const float P = expf(score - lse_s[j]);
          const float factor =
              p > 0.0f ? dropout_scale(key, dropout.index_offset + static_cast<uint64_t>((head + t) * T + key_row), p)
                       : 1.0f;
          w = factor * P;
          const bool one_key = (causal ? t + 1 : T) == 1;  // the query's row of weights has this key only
          g = one_key ? 0.0f : P * (factor * dov - d_s[j]) * scale;
        }
        w_s[threadIdx.x] = w;
        g_s[threadIdx.x] = g;
      }
      __syncthreads();
      if (t2 >= T) continue;  // warp-uniform; the block's barriers are all at the loop's top
      add_query_tile(acc_k, acc_v, w_s, g_s, q_s, do_s, stride, HS, min(kTile, T - tile), tile, t2, causal, warp,
                     lane);
    }
  }
  if (t2 >= T) return;
  S* dk = dqkv + token0 + static_cast<int64_t>(t2) * W + at.k(h0);
  S* dv = dqkv + token0 + static_cast<int64_t>(t2) * W + at.v(h0);
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int d = lane + kWarp * i;
    if (d < HS) {
      dk[d] = from_float<S>(acc_k[i]);
      dv[d] = from_float<S>(acc_v[i]);
    }
  }
}

size_t forward_smem_bytes(int HS) {
  return sizeof(float) * (static_cast<size_t>(kRowsPerBlock) * HS + static_cast<size_t>(kTile) * (HS | 1) +
                          static_cast<size_t>(kTile) * HS);
}
size_t backward_dq_smem_bytes(int HS) {
  return sizeof(float) * (2 * static_cast<size_t>(kRowsPerBlock) * HS + 2 * static_cast<size_t>(kTile) * (HS | 1));
}
size_t backward_dkv_smem_bytes(int HS) {
  return sizeof(float) * (2 * static_cast<size_t>(kRowsPerBlock + kTile) * (HS | 1) + 2 * kTile +
                          2 * static_cast<size_t>(kTile) * kRowsPerBlock);
}

// Calls f(std::integral_constant<int, kRegs>) with the accumulators per lane a head size needs.
template <typename F>
void dispatch_head_regs(int HS, F&& f) {
  if (HS <= 32)
    f(std::integral_constant<int, 1>{});
  else if (HS <= 64)
    f(std::integral_constant<int, 2>{});
  else if (HS <= 128)
    f(std::integral_constant<int, 4>{});
  else
    f(std::integral_constant<int, 8>{});
}

}  // namespace

bool flash_attention_serves(const AttentionShape& s) { return s.HS <= kMaxHead; }

// qkv (B,T,W) -> out (B,T,C), lse (B,NH,T)
void CudaBackend::flash_attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                                          const DropoutMask& dropout) {
  const unsigned blocks = row_blocks(s, s.NH, "attention_forward");
  const DType dtype = shared_storage_dtype("attention_forward", {out, qkv});
  const size_t smem = forward_smem_bytes(s.HS);
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    dispatch_head_regs(s.HS, [&](auto regs) {
      constexpr int kRegs = decltype(regs)::value;
      reserve_shared_memory(flash_attention_forward_kernel<S, kRegs>, smem, "attention_forward");
      flash_attention_forward_kernel<S, kRegs><<<blocks, kThreads, smem, stream_>>>(
          out.as<S>(), lse.f32(), qkv.as<S>(), s.T, s.layout(), s.causal, dropout);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (B,T,C) -> dqkv (B,T,W) overwritten; dout_dot_out (B,NH,T) gets D
void CudaBackend::flash_attention_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out,
                                           Tensor lse, const AttentionShape& s, const DropoutMask& dropout) {
  const unsigned blocks = row_blocks(s, s.NH, "attention_backward");
  const unsigned key_blocks = row_blocks(s, s.kv_heads(), "attention_backward");  // per key/value head
  const DType dtype = shared_storage_dtype("attention_backward", {dqkv, dout, qkv, out});
  const size_t smem_dq = backward_dq_smem_bytes(s.HS), smem_dkv = backward_dkv_smem_bytes(s.HS);
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    dispatch_head_regs(s.HS, [&](auto regs) {
      constexpr int kRegs = decltype(regs)::value;
      reserve_shared_memory(flash_attention_backward_dq_kernel<S, kRegs>, smem_dq, "attention_backward");
      flash_attention_backward_dq_kernel<S, kRegs><<<blocks, kThreads, smem_dq, stream_>>>(
          dqkv.as<S>(), dout_dot_out.f32(), dout.as<S>(), out.as<S>(), qkv.as<S>(), lse.f32(), s.T, s.layout(),
          s.causal, dropout);
      CUDA_CHECK(cudaGetLastError());
      reserve_shared_memory(flash_attention_backward_dkv_kernel<S, kRegs>, smem_dkv, "attention_backward");
      flash_attention_backward_dkv_kernel<S, kRegs><<<key_blocks, kThreads, smem_dkv, stream_>>>(
          dqkv.as<S>(), dout.as<S>(), qkv.as<S>(), lse.f32(), dout_dot_out.f32(), s.T, s.layout(), s.causal,
          dropout);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
