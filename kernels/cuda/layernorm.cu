// LayerNorm over the last dimension on the GPU, forward and backward, as nn.LayerNorm and
// kernels/cpu/layernorm.cpp: fp32 statistics, biased variance, rstd = 1/sqrt(var + eps). With
// mean null, RMSNorm (kernels/backend.h): the mean is 0, neither subtracted nor kept, and the
// backward has no mean(g) term; with bias null, no bias (and no dbias).
// Per-element expressions are written as the CPU writes them; only the row sums (warp
// reductions) and column sums (two-level fixed-order reductions) differ in rounding order.
// Deterministic: no float atomics; the parameter gradients are reduced through per-block partial
// sums in CudaBackend::reduce_scratch_, added in block order within groups of blocks, then in
// group order, each by the last block to finish its level (integer counters,
// CudaBackend::reduce_counters_): one launch.
// The fused forms of the contract (kernels/backend.h) are one kernel each: dropout of the
// branch, the residual add and the norm in the forward; the gradient sum, the norm's backward,
// the skip gradient and the branch's dropout in the backward, with the roundings of the
// unfused ops (each intermediate the default stores is rounded to S here too).
// Storage: inp, out, weight, bias, dout and dinp are in the activation storage type S
// (kernels/cuda/storage.cuh), loaded into fp32 and rounded on store; mean, rstd, dweight and
// dbias are always F32, and every statistic and sum is computed in fp32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/common/half.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dropout_factor.cuh"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp.cuh"

namespace tt {

namespace {

constexpr int kRowsPerBlock = 8;                 // row kernels: one warp per row
constexpr int kRowThreads = kRowsPerBlock * kWarp;
constexpr int kMinRowsPerBlock = 32;             // backward: rows one block covers, at least
constexpr int kMaxBackwardBlocks = 512;          // backward: blocks (partial sums per column), at most
constexpr int kGroupBlocks = 32;                 // backward: blocks whose partials one block adds
constexpr int kMaxBackwardGroups = (kMaxBackwardBlocks + kGroupBlocks - 1) / kGroupBlocks;


// inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
// Decomposition: one warp per row (kRowsPerBlock rows per 256-thread block, grid ceil(N/8));
// lanes stride the C channels; mean, then the centred variance (two passes, as the CPU), by
// warp sums. out may alias inp: each lane reads an element before writing it.
template <typename S>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_forward_kernel(S* out, float* __restrict__ mean, float* __restrict__ rstd, const S* inp,
                             const S* __restrict__ weight, const S* __restrict__ bias, int N, int C, float eps) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;  // no block-level synchronisation below
  const S* x = inp + static_cast<int64_t>(row) * C;
  float m = 0.0f;  // RMSNorm (mean null): no mean
  if (mean) {
    float sum = 0.0f;
    for (int c = lane; c < C; c += kWarp) sum += to_float(x[c]);
    m = warp_sum(sum) / C;
  }
  float var = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float xc = to_float(x[c]);
    var += (xc - m) * (xc - m);
  }
  const float r = 1.0f / sqrtf(warp_sum(var) / C + eps);
  S* o = out + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += kWarp)
    o[c] = from_float<S>((to_float(x[c]) - m) * r * to_float(weight[c]) + (bias ? to_float(bias[c]) : 0.0f));
  if (lane == 0) {
    if (mean) mean[row] = m;
    rstd[row] = r;
  }
}

// residual (N,C), branch (N,C), weight (C), bias (C) -> res_out (N,C) = residual + dropout(branch);
// when ln_out is not null, also ln_out (N,C), mean (N), rstd (N) = layernorm(res_out).
// The roundings of dropout_forward, residual_forward, layernorm_forward in turn: the dropped
// branch is rounded to S, the sum is taken in fp32 and rounded to S, and the norm reads the
// stored (rounded) res_out row with layernorm_forward_kernel's expressions and order of sums,
// so every output is bitwise the unfused ops'. Mask element of (row, c): index_offset + row*C + c.
// Decomposition: as layernorm_forward_kernel, one warp per row; the lanes stride the row by
// 32 channels at a time (warp-uniform laps: the dropout factors are shuffled across the warp).
// res_out may alias branch: each lane reads an element before writing it; it is then read
// back only by the lane that wrote it.
template <typename S>
__global__ void __launch_bounds__(kRowThreads)
    dropout_residual_layernorm_forward_kernel(S* res_out, S* __restrict__ ln_out, float* __restrict__ mean,
                                              float* __restrict__ rstd, const S* __restrict__ residual,
                                              const S* branch, const S* __restrict__ weight,
                                              const S* __restrict__ bias, int N, int C, float eps,
                                              DropoutMask dropout) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;  // the whole warp: no block-level synchronisation below
  const int64_t base = static_cast<int64_t>(row) * C;
  const float p = dropout.p;
  const DropoutKey key = p > 0.0f ? dropout.key() : DropoutKey{};  // p == 0: the identity, no step read
  const float keep_scale = 1.0f / (1.0f - p);
  S* x = res_out + base;
  float sum = 0.0f;
  for (int c0 = 0; c0 < C; c0 += kWarp) {
    const int c = c0 + lane;
    const float factor =
        p > 0.0f ? warp_dropout_factor(key, dropout.index_offset + static_cast<uint64_t>(base + c0), p, keep_scale, lane)
                 : 1.0f;
    if (c < C) {
      // dropout_forward's stored product (mul_rn: rounded before the add, never fused into it)
      const float dropped = to_float(from_float<S>(mul_rn(to_float(branch[base + c]), factor)));
      const S stored = from_float<S>(to_float(residual[base + c]) + dropped);               // residual_forward
      x[c] = stored;
      sum += to_float(stored);
    }
  }
  if (!ln_out) return;
  // layernorm_forward_kernel on the stored row (RMSNorm, mean null: no mean)
  const float m = mean ? warp_sum(sum) / C : 0.0f;
  float var = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float xc = to_float(x[c]);
    var += (xc - m) * (xc - m);
  }
  const float r = 1.0f / sqrtf(warp_sum(var) / C + eps);
  S* o = ln_out + base;
  for (int c = lane; c < C; c += kWarp)
    o[c] = from_float<S>((to_float(x[c]) - m) * r * to_float(weight[c]) + (bias ? to_float(bias[c]) : 0.0f));
  if (lane == 0) {
    if (mean) mean[row] = m;
    rstd[row] = r;
  }
}

// The gradient that reaches the norm at element i: dout, or dout + dout2 rounded to S (what
// residual_forward would store).
template <typename S>
__device__ __forceinline__ float norm_grad(const S* dout, const S* dout2, int64_t i) {
  return dout2 ? to_float(from_float<S>(to_float(dout[i]) + to_float(dout2[i]))) : to_float(dout[i]);
}

// LayerNorm backward, with the fused op's extra terms (kernels/backend.h), in one launch:
//   g = dout (+ dout2, rounded to S)                       dout2 optional
//   dinp = rstd (g w - mean(g w) - xhat mean(g w xhat)), rounded to S, (+ dskip, rounded)
//   dbranch = dinp * dropout factor, rounded               optional
//   dweight = sum over rows of g xhat, dbias = sum of g    written or added (accumulate)
// dout, dout2, dskip, inp (N,C), weight (C), mean (N), rstd (N) -> dinp (N,C), which may alias
// dout or dout2 (not dskip); dbranch (N,C) or null; dweight (C), dbias (C) F32.
// scratch: 2 * (blocks + groups) * C floats; counters: 1 + groups, 0 at launch and 0 again when
// the kernel ends (groups = ceil(blocks / kGroupBlocks)).
// Decomposition: block b covers rows [b * rows_per_block, (b+1) * rows_per_block).
//   1. column pass: thread t owns the channels c = t (mod 256) and sums g xhat and g down the
//      block's rows, in row order, in two registers: the block's partial sums, stored to
//      scratch (coalesced: consecutive threads, consecutive channels);
//   2. row pass: one warp per row in turn (warp w takes rows w, w+8, ...), lanes stride the
//      channels: the two row sums (warp sums), then the row's dinp / dbranch;
//   3. two levels of fixed-order sums, each finished by whichever block counts last: blocks come
//      in groups of kGroupBlocks, and the last block of a group to finish adds the group's block
//      partials in block order into the group's partial; the last group to finish adds the group
//      partials in group order into dweight/dbias. Each level fences its partials before it
//      counts them (integer atomicAdd) and after it finds itself last, and resets its counter
//      for the next launch or replay. A block adds at most 32 partials a channel (512 blocks: 16
//      groups of 32), where one block adding every block's partial would load 512.
// Aliasing: the column pass reads all of the block's dout/dout2 before the barrier that opens
// the row pass, whose lanes read element c of dout/dout2 before writing element c of dinp.
template <typename S>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_backward_kernel(S* dinp, S* __restrict__ dbranch, float* __restrict__ dweight,
                              float* __restrict__ dbias, float* scratch, unsigned int* counters, const S* dout,
                              const S* dout2, const S* __restrict__ dskip, const S* __restrict__ inp,
                              const S* __restrict__ weight, const float* __restrict__ mean,
                              const float* __restrict__ rstd, int N, int C, int rows_per_block, bool accumulate,
                              DropoutMask dropout) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int blocks = static_cast<int>(gridDim.x);
  const int groups = (blocks + kGroupBlocks - 1) / kGroupBlocks;
  // scratch layout: block partials of dweight (blocks, C) and of dbias (blocks, C), then group
  // partials of dweight (groups, C) and of dbias (groups, C)
  float* block_dw = scratch;
  float* block_db = block_dw + static_cast<int64_t>(blocks) * C;
  float* group_dw = block_db + static_cast<int64_t>(blocks) * C;
  float* group_db = group_dw + static_cast<int64_t>(groups) * C;
  const int first_row = static_cast<int>(blockIdx.x) * rows_per_block;
  const int row_end = min(N, first_row + rows_per_block);

  // 1. the block's column sums, before any lane writes dinp (which may alias dout)
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float tw = 0.0f, tb = 0.0f;
    for (int row = first_row; row < row_end; ++row) {
      const int64_t i = static_cast<int64_t>(row) * C + c;
      const float xhat = (to_float(inp[i]) - (mean ? mean[row] : 0.0f)) * rstd[row];
      const float g = norm_grad(dout, dout2, i);
      tw += g * xhat;
      tb += g;
    }
    block_dw[static_cast<int64_t>(blockIdx.x) * C + c] = tw;
    block_db[static_cast<int64_t>(blockIdx.x) * C + c] = tb;
  }
  __syncthreads();  // the block's dout/dout2 are read before the row pass overwrites them

  // 2. the rows: dinp and dbranch
  const float p = dbranch ? dropout.p : 0.0f;
  const DropoutKey key = p > 0.0f ? dropout.key() : DropoutKey{};
  const float keep_scale = 1.0f / (1.0f - p);
  for (int row = first_row + warp; row < row_end; row += kRowsPerBlock) {
    const int64_t base = static_cast<int64_t>(row) * C;
    const float mu = mean ? mean[row] : 0.0f, rs = rstd[row];
    float mean_g = 0.0f, mean_gx = 0.0f;
    for (int c = lane; c < C; c += kWarp) {
      const float xhat = (to_float(inp[base + c]) - mu) * rs;
      const float gw = norm_grad(dout, dout2, base + c) * to_float(weight[c]);
      mean_g += gw;
      mean_gx += gw * xhat;
    }
    mean_g = mean ? warp_sum(mean_g) / C : 0.0f;  // RMSNorm: no mean was subtracted, no mean(g) term
    mean_gx = warp_sum(mean_gx) / C;
    for (int c0 = 0; c0 < C; c0 += kWarp) {  // warp-uniform laps: the dropout factors shuffle
      const int c = c0 + lane;
      const float factor =
          p > 0.0f ? warp_dropout_factor(key, dropout.index_offset + static_cast<uint64_t>(base + c0), p, keep_scale, lane)
                   : 1.0f;
      if (c < C) {
        const float xhat = (to_float(inp[base + c]) - mu) * rs;
        const float g = norm_grad(dout, dout2, base + c);
        // layernorm_backward's stored dinp: rounded before dskip is added (mul_rn: never fused)
        S dx = from_float<S>(mul_rn(rs, g * to_float(weight[c]) - mean_g - xhat * mean_gx));
        if (dskip) dx = from_float<S>(to_float(dx) + to_float(dskip[base + c]));
        dinp[base + c] = dx;
        if (dbranch) dbranch[base + c] = from_float<S>(to_float(dx) * factor);
      }
    }
  }

  // 3a. the last block of this group to finish adds the group's block partials, in block order
  __threadfence();  // this thread's block partials reach device memory before the block is counted
  __syncthreads();  // every thread of the block has fenced its partials
  const int group = static_cast<int>(blockIdx.x) / kGroupBlocks;
  const int first_member = group * kGroupBlocks, end_member = min(blocks, first_member + kGroupBlocks);
  unsigned int* group_counter = counters + 1 + group;
  __shared__ int last_block;
  if (threadIdx.x == 0)
    last_block = atomicAdd(group_counter, 1u) == static_cast<unsigned int>(end_member - first_member - 1) ? 1 : 0;
  __syncthreads();  // last_block is written
  if (last_block != 1) return;
  __threadfence();  // the other blocks' partials, fenced before they were counted, are read after the count
  {
    const volatile float* all_dw = block_dw;  // volatile: read from memory, not a stale cache line
    const volatile float* all_db = block_db;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float tw = 0.0f, tb = 0.0f;
      for (int b = first_member; b < end_member; ++b) {
        tw += all_dw[static_cast<int64_t>(b) * C + c];
        tb += all_db[static_cast<int64_t>(b) * C + c];
      }
      group_dw[static_cast<int64_t>(group) * C + c] = tw;
      group_db[static_cast<int64_t>(group) * C + c] = tb;
    }
  }
  if (threadIdx.x == 0) *group_counter = 0u;  // ready for the next launch (a replayed graph launches again)

  // 3b. the last group to finish adds the group partials, in group order, into dweight/dbias
  __threadfence();  // this thread's group partials reach device memory before the group is counted
  __syncthreads();  // every thread of the block has fenced its group partials
  if (threadIdx.x == 0) last_block = atomicAdd(counters, 1u) == static_cast<unsigned int>(groups - 1) ? 1 : 0;
  __syncthreads();  // the group's last_block is written
  if (last_block != 1) return;
  __threadfence();  // the other groups' partials, fenced before they were counted, are read after the count
  const volatile float* all_dw = group_dw;
  const volatile float* all_db = group_db;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float tw = 0.0f, tb = 0.0f;
    for (int g = 0; g < groups; ++g) {
      tw += all_dw[static_cast<int64_t>(g) * C + c];
      tb += all_db[static_cast<int64_t>(g) * C + c];
    }
    dweight[c] = accumulate ? dweight[c] + tw : tw;
    if (dbias) dbias[c] = accumulate ? dbias[c] + tb : tb;
  }
  if (threadIdx.x == 0) *counters = 0u;  // ready for the next launch
}

unsigned row_blocks(int N) { return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

// inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
void CudaBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                                    float eps) {
  const int N = static_cast<int>(inp.shape[0]), C = static_cast<int>(inp.shape[1]);
  const DType dtype = shared_storage_dtype("layernorm_forward", {out, inp, weight, bias});
  float* mu = mean.data ? mean.f32() : nullptr;  // statistics: F32 whatever the activations' storage
  float* rs = rstd.f32();
  if (N <= 0 || C <= 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    layernorm_forward_kernel<S><<<row_blocks(N), kRowThreads, 0, stream_>>>(
        out.as<S>(), mu, rs, inp.as<S>(), weight.as<S>(), data_or_null<S>(bias), N, C, eps);
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (N,C) -> dinp (N,C) (may alias dout), dweight (C), dbias (C) written or added (grads):
// the fused backward's kernel without its optional terms (one launch).
void CudaBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                     Tensor weight, Tensor mean, Tensor rstd, ParamGrads grads) {
  layernorm_residual_dropout_backward(dinp, Tensor{}, dweight, dbias, dout, Tensor{}, Tensor{}, inp, weight, mean,
                                      rstd, DropoutMask{}, grads);
}

// res_out = residual + dropout(branch); ln_out, mean, rstd = layernorm(res_out) (kernels/backend.h)
// residual, branch, res_out (N,C), res_out may alias branch; ln_out (N,C) or no data; weight,
// bias (C); mean, rstd (N) F32. One kernel.
void CudaBackend::dropout_residual_layernorm_forward(Tensor res_out, Tensor ln_out, Tensor mean, Tensor rstd,
                                                     Tensor residual, Tensor branch, Tensor weight, Tensor bias,
                                                     float eps, const DropoutMask& dropout) {
  const int N = static_cast<int>(residual.shape[0]), C = static_cast<int>(residual.shape[1]);
  const DType dtype = shared_storage_dtype("dropout_residual_layernorm_forward",
                                           {res_out, ln_out, residual, branch, weight, bias});
  float* mu = ln_out.data && mean.data ? mean.f32() : nullptr;  // statistics: F32 whatever the storage
  float* rs = ln_out.data ? rstd.f32() : nullptr;
  if (N <= 0 || C <= 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    dropout_residual_layernorm_forward_kernel<S><<<row_blocks(N), kRowThreads, 0, stream_>>>(
        res_out.as<S>(), data_or_null<S>(ln_out), mu, rs, residual.as<S>(), branch.as<S>(),
        data_or_null<S>(weight), data_or_null<S>(bias), N, C, eps, dropout);
  });
  CUDA_CHECK(cudaGetLastError());
}

// dinp = layernorm_backward(dout + dout2) + dskip; dbranch = dropout_backward(dinp) (kernels/backend.h)
// dout, dout2, dskip (N,C) -> dinp (N,C), may alias dout or dout2, not dskip; dbranch (N,C) or no
// data; dweight (C), dbias (C) F32 written or added (grads). One kernel.
void CudaBackend::layernorm_residual_dropout_backward(Tensor dinp, Tensor dbranch, Tensor dweight, Tensor dbias,
                                                      Tensor dout, Tensor dout2, Tensor dskip, Tensor inp,
                                                      Tensor weight, Tensor mean, Tensor rstd,
                                                      const DropoutMask& branch_dropout, ParamGrads grads) {
  const int N = static_cast<int>(inp.shape[0]), C = static_cast<int>(inp.shape[1]);
  const DType dtype =
      shared_storage_dtype("layernorm_backward", {dinp, dbranch, dout, dout2, dskip, inp, weight});
  float* dw = dweight.f32();  // parameter gradients and statistics: F32
  float* db = dbias.data ? dbias.f32() : nullptr;
  const float* mu = mean.data ? mean.f32() : nullptr;
  const float* rs = rstd.f32();
  if (N <= 0 || C <= 0) return;

  // Blocks of at least kMinRowsPerBlock rows, at most kMaxBackwardBlocks of them, and the
  // partials (2 * C floats per block, and per group of blocks) must fit the scratch.
  static_assert(kLayerNormCounter + 1 + kMaxBackwardGroups <= kReduceCounters, "the backward's counters");
  const auto scratch_floats = [C](int64_t blocks) {
    return 2 * static_cast<int64_t>(C) * (blocks + (blocks + kGroupBlocks - 1) / kGroupBlocks);
  };
  int64_t max_blocks = kMaxBackwardBlocks;
  while (max_blocks >= 1 && scratch_floats(max_blocks) > static_cast<int64_t>(kReduceScratchFloats)) --max_blocks;
  if (max_blocks < 1)
    throw std::runtime_error("layernorm_backward: C = " + std::to_string(C) +
                             " needs more reduction scratch than the backend holds");
  int64_t rows_per_block = kMinRowsPerBlock;
  if ((N + rows_per_block - 1) / rows_per_block > max_blocks) rows_per_block = (N + max_blocks - 1) / max_blocks;
  const int blocks = static_cast<int>((N + rows_per_block - 1) / rows_per_block);  // <= max_blocks
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    layernorm_backward_kernel<S><<<blocks, kRowThreads, 0, stream_>>>(
        dinp.as<S>(), data_or_null<S>(dbranch), dw, db, reduce_scratch_, reduce_counters_ + kLayerNormCounter,
        dout.as<S>(), data_or_null<S>(dout2), data_or_null<S>(dskip), inp.as<S>(), weight.as<S>(), mu, rs, N, C,
        static_cast<int>(rows_per_block), grads == ParamGrads::Add, branch_dropout);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
