// LayerNorm over the last dimension on the GPU, forward and backward, as nn.LayerNorm and
// kernels/cpu/layernorm.cpp: fp32 statistics, biased variance, rstd = 1/sqrt(var + eps).
// Per-element expressions are written as the CPU writes them; only the row sums (warp
// reductions) and column sums (two-level fixed-order reductions) differ in rounding order.
// Deterministic: no atomics; the parameter gradients are reduced through per-block partial
// sums in CudaBackend::reduce_scratch_ and a second kernel that adds them in a fixed order.
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
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp.cuh"

namespace tt {

namespace {

constexpr int kRowsPerBlock = 8;                 // row kernels: one warp per row
constexpr int kRowThreads = kRowsPerBlock * kWarp;
constexpr int kColumnsPerBlock = 32;             // column-sum kernel: 32 columns x 8 row lanes
constexpr int kRowLanes = 8;
constexpr int kMinRowsPerChunk = 64;             // rows one column-sum block covers, at least
constexpr int kMaxChunks = 1024;                 // partial sums per column, at most


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
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarp) sum += to_float(x[c]);
  const float m = warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float xc = to_float(x[c]);
    var += (xc - m) * (xc - m);
  }
  const float r = 1.0f / sqrtf(warp_sum(var) / C + eps);
  S* o = out + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += kWarp)
    o[c] = from_float<S>((to_float(x[c]) - m) * r * to_float(weight[c]) + to_float(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// Column partial sums for the parameter gradients.
// dout (N,C), inp (N,C), mean (N), rstd (N) -> partial_dw (chunks,C), partial_db (chunks,C):
// partial[y][c] = sum over rows of chunk y of dout*xhat (resp. dout).
// Decomposition: grid (ceil(C/32), chunks), block 32x8: threadIdx.x picks the column (a warp reads
// 32 consecutive floats of a row: coalesced), threadIdx.y strides the chunk's rows by 8; the 8
// per-thread sums of a column are then added in order of threadIdx.y through shared memory.
template <typename S>
__global__ void __launch_bounds__(kColumnsPerBlock* kRowLanes)
    layernorm_param_partials_kernel(float* __restrict__ partial_dw, float* __restrict__ partial_db,
                                    const S* __restrict__ dout, const S* __restrict__ inp,
                                    const float* __restrict__ mean, const float* __restrict__ rstd, int N, int C,
                                    int rows_per_chunk) {
  __shared__ float sw_s[kRowLanes][kColumnsPerBlock];
  __shared__ float sb_s[kRowLanes][kColumnsPerBlock];
  const int c = blockIdx.x * kColumnsPerBlock + threadIdx.x;
  const int row_begin = blockIdx.y * rows_per_chunk;
  const int row_end = min(N, row_begin + rows_per_chunk);
  float sw = 0.0f, sb = 0.0f;
  if (c < C) {
    for (int n = row_begin + threadIdx.y; n < row_end; n += kRowLanes) {
      const int64_t i = static_cast<int64_t>(n) * C + c;
      const float xhat = (to_float(inp[i]) - mean[n]) * rstd[n];
      const float d = to_float(dout[i]);
      sw += d * xhat;
      sb += d;
    }
  }
  sw_s[threadIdx.y][threadIdx.x] = sw;
  sb_s[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = sw_s[0][threadIdx.x], tb = sb_s[0][threadIdx.x];
    for (int y = 1; y < kRowLanes; ++y) {
      tw += sw_s[y][threadIdx.x];
      tb += sb_s[y][threadIdx.x];
    }
    partial_dw[static_cast<int64_t>(blockIdx.y) * C + c] = tw;
    partial_db[static_cast<int64_t>(blockIdx.y) * C + c] = tb;
  }
}

// partial_dw (chunks,C), partial_db (chunks,C) -> dweight (C), dbias (C) written or added
// Decomposition: one thread per column, adding the chunks' partials in chunk order (coalesced
// across the threads of a warp).
__global__ void layernorm_param_reduce_kernel(float* __restrict__ dweight, float* __restrict__ dbias,
                                              const float* __restrict__ partial_dw,
                                              const float* __restrict__ partial_db, int chunks, int C,
                                              bool accumulate) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float tw = 0.0f, tb = 0.0f;
  for (int y = 0; y < chunks; ++y) {
    tw += partial_dw[static_cast<int64_t>(y) * C + c];
    tb += partial_db[static_cast<int64_t>(y) * C + c];
  }
  dweight[c] = accumulate ? dweight[c] + tw : tw;
  dbias[c] = accumulate ? dbias[c] + tb : tb;
}

// dout (N,C), inp (N,C), weight (C), mean (N), rstd (N) -> dinp (N,C), which may alias dout.
// dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dout*weight.
// Decomposition: one warp per row (kRowsPerBlock rows per block); two warp sums, then each lane
// rewrites the channels it read (read before write of every element: aliasing is safe).
template <typename S>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_dinp_kernel(S* dinp, const S* dout, const S* __restrict__ inp, const S* __restrict__ weight,
                          const float* __restrict__ mean, const float* __restrict__ rstd, int N, int C) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;
  const S* x = inp + static_cast<int64_t>(row) * C;
  const S* d = dout + static_cast<int64_t>(row) * C;
  const float mu = mean[row], rs = rstd[row];
  float mean_g = 0.0f, mean_gx = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float xhat = (to_float(x[c]) - mu) * rs;
    const float g = to_float(d[c]) * to_float(weight[c]);
    mean_g += g;
    mean_gx += g * xhat;
  }
  mean_g = warp_sum(mean_g) / C;
  mean_gx = warp_sum(mean_gx) / C;
  S* dx = dinp + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += kWarp) {
    const float xhat = (to_float(x[c]) - mu) * rs;
    dx[c] = from_float<S>(rs * (to_float(d[c]) * to_float(weight[c]) - mean_g - xhat * mean_gx));
  }
}

unsigned row_blocks(int N) { return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

// inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
void CudaBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                                    float eps) {
  const int N = static_cast<int>(inp.shape[0]), C = static_cast<int>(inp.shape[1]);
  const DType dtype = shared_storage_dtype("layernorm_forward", {out, inp, weight, bias});
  float* mu = mean.f32();  // statistics: F32 whatever the activations' storage
  float* rs = rstd.f32();
  if (N <= 0 || C <= 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    layernorm_forward_kernel<S><<<row_blocks(N), kRowThreads, 0, stream_>>>(
        out.as<S>(), mu, rs, inp.as<S>(), weight.as<S>(), bias.as<S>(), N, C, eps);
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (N,C) -> dinp (N,C) (may alias dout), dweight (C), dbias (C) written or added (grads)
// The parameter gradients are reduced first: they read dout, which dinp may overwrite.
void CudaBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                     Tensor weight, Tensor mean, Tensor rstd, ParamGrads grads) {
  const int N = static_cast<int>(inp.shape[0]), C = static_cast<int>(inp.shape[1]);
  const DType dtype = shared_storage_dtype("layernorm_backward", {dinp, dout, inp, weight});
  float* dw = dweight.f32();  // parameter gradients and statistics: F32
  float* db = dbias.f32();
  const float* mu = mean.f32();
  const float* rs = rstd.f32();
  if (N <= 0 || C <= 0) return;

  // Row chunks: enough blocks to fill the GPU, at most kMaxChunks partials per column, and
  // 2 * chunks * C floats must fit the scratch (more rows per chunk when they would not).
  const int64_t max_chunks_by_scratch = static_cast<int64_t>(kReduceScratchFloats / (2 * static_cast<size_t>(C)));
  if (max_chunks_by_scratch < 1)
    throw std::runtime_error("layernorm_backward: C = " + std::to_string(C) +
                             " needs more reduction scratch than the backend holds");
  const int64_t max_chunks = std::min<int64_t>(kMaxChunks, max_chunks_by_scratch);
  int64_t rows_per_chunk = kMinRowsPerChunk;
  if ((N + rows_per_chunk - 1) / rows_per_chunk > max_chunks) rows_per_chunk = (N + max_chunks - 1) / max_chunks;
  const int chunks = static_cast<int>((N + rows_per_chunk - 1) / rows_per_chunk);  // <= max_chunks
  float* partial_dw = reduce_scratch_;
  float* partial_db = reduce_scratch_ + static_cast<size_t>(chunks) * C;

  const dim3 grid((C + kColumnsPerBlock - 1) / kColumnsPerBlock, chunks);
  const dim3 block(kColumnsPerBlock, kRowLanes);
  constexpr int kReduceThreads = 256;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    layernorm_param_partials_kernel<S><<<grid, block, 0, stream_>>>(partial_dw, partial_db, dout.as<S>(),
                                                                    inp.as<S>(), mu, rs, N, C,
                                                                    static_cast<int>(rows_per_chunk));
    CUDA_CHECK(cudaGetLastError());
    layernorm_param_reduce_kernel<<<(C + kReduceThreads - 1) / kReduceThreads, kReduceThreads, 0, stream_>>>(
        dw, db, partial_dw, partial_db, chunks, C, grads == ParamGrads::Add);
    CUDA_CHECK(cudaGetLastError());

    layernorm_dinp_kernel<S><<<row_blocks(N), kRowThreads, 0, stream_>>>(dinp.as<S>(), dout.as<S>(), inp.as<S>(),
                                                                        weight.as<S>(), mu, rs, N, C);
    CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace tt

namespace tt {

// res_out = residual + dropout(branch); ln_out, mean, rstd = layernorm(res_out) (kernels/backend.h)
void CudaBackend::dropout_residual_layernorm_forward(Tensor res_out, Tensor ln_out, Tensor mean, Tensor rstd,
                                                     Tensor residual, Tensor branch, Tensor weight, Tensor bias,
                                                     float eps, const DropoutMask& dropout) {
  Backend::dropout_residual_layernorm_forward(res_out, ln_out, mean, rstd, residual, branch, weight, bias, eps, dropout);
}

// dinp = layernorm_backward(dout + dout2) + dskip; dbranch = dropout_backward(dinp) (kernels/backend.h)
void CudaBackend::layernorm_residual_dropout_backward(Tensor dinp, Tensor dbranch, Tensor dweight, Tensor dbias,
                                                      Tensor dout, Tensor dout2, Tensor dskip, Tensor inp,
                                                      Tensor weight, Tensor mean, Tensor rstd,
                                                      const DropoutMask& branch_dropout, ParamGrads grads) {
  Backend::layernorm_residual_dropout_backward(dinp, dbranch, dweight, dbias, dout, dout2, dskip, inp, weight, mean,
                                               rstd, branch_dropout, grads);
}

}  // namespace tt
