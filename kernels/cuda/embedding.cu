// Token and learned positional embedding, forward and backward (CUDA). The backward adds
// each token's gradient row into the embedding rows in token order, without atomics, so the
// result is deterministic and the same bits as the CPU backend's. The tables and the output
// (and dout) are in the activation storage type S (kernels/cuda/storage.cuh); the embedding
// gradients dwte/dwpe are always F32.
#include <cstdint>

#include "kernels/common/half.h"

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

// tokens (N) int32, wte (V,C), wpe (maxT,C) or null -> out (N,C), N = B*T, token n at position n % T
// Decomposition: one thread per output element (grid-stride); consecutive threads take
// consecutive channels of one token, so the row gathers are coalesced. The sum is taken in
// fp32 and rounded once on store, as the CPU backend does.
template <typename S>
__global__ void embedding_forward_kernel(S* out, const int32_t* tokens, const S* wte, const S* wpe, int64_t N, int T,
                                         int C) {
  const int64_t total = N * C;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / C;
    const int c = static_cast<int>(i % C);
    float value = to_float(wte[static_cast<int64_t>(tokens[n]) * C + c]);
    if (wpe) value = value + to_float(wpe[(n % T) * C + c]);
    out[i] = from_float<S>(value);
  }
}

// Tokens handled per step of the backward scan (see below).
constexpr int kTokenWindow = 8;

// dout (N,C), tokens (N) -> dwte (V,C) += dout row n added into row tokens[n], for every n
// Decomposition: one thread per channel c, scanning all N tokens in order, as the CPU loop
// does. Several tokens may share an id; since the channels are split between threads and
// the tokens never are, every dwte element has one writer that adds its terms in increasing
// token order: no atomics, and the same bits as the CPU backend. A warp holds 32
// consecutive channels of the same token, so its reads and writes of a row are coalesced
// and its branches (which depend only on the token ids) never diverge.
// A plain read-add-write per token would wait a full memory round trip per token. Instead
// the scan takes tokens in windows of kTokenWindow: it loads the window's gradients and,
// once per distinct id, that row's current value, all in parallel; adds the gradients in
// token order (a repeated id's terms go to its first occurrence's accumulator, in order);
// and stores each distinct row once. That is the same sequence of fp32 additions as one
// token at a time. Parallelism is C threads; sorting tokens by id would allow more, at the
// price of a device sort.
template <typename S>
__global__ void embedding_backward_wte_kernel(float* dwte, const S* dout, const int32_t* tokens, int64_t N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t start = 0; start < N; start += kTokenWindow) {
    int id[kTokenWindow];       // token ids of the window, -1 past the end
    float grad[kTokenWindow];   // dout[n][c] of the window's tokens
    bool first[kTokenWindow];   // is token j the first of the window with its id?
    float acc[kTokenWindow];    // running value of row id[j], kept at its first occurrence j
#pragma unroll
    for (int j = 0; j < kTokenWindow; ++j) {
      const int64_t n = start + j;
      id[j] = n < N ? tokens[n] : -1;
      grad[j] = n < N ? to_float(dout[n * C + c]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kTokenWindow; ++j) {
      first[j] = id[j] >= 0;
#pragma unroll
      for (int i = 0; i < j; ++i)
        if (id[i] == id[j]) first[j] = false;
      acc[j] = first[j] ? dwte[static_cast<int64_t>(id[j]) * C + c] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kTokenWindow; ++j) {
#pragma unroll
      for (int i = 0; i <= j; ++i)
        if (first[i] && id[i] == id[j]) acc[i] += grad[j];  // exactly one i: the first occurrence
    }
#pragma unroll
    for (int j = 0; j < kTokenWindow; ++j)
      if (first[j]) dwte[static_cast<int64_t>(id[j]) * C + c] = acc[j];
  }
}

// dout (B,T,C) -> dwpe (maxT,C) += sum over b of dout[b][t], for the first T rows
// Decomposition: one thread per (t, c) (grid-stride), each summing the batch in order
// b = 0..B-1 into its own element: the CPU's order, no atomics. Rows t >= T are untouched.
template <typename S>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const S* dout, int B, int T, int C) {
  const int64_t total = static_cast<int64_t>(T) * C;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = dwpe[i];  // i = t * C + c
    for (int b = 0; b < B; ++b) acc += to_float(dout[static_cast<int64_t>(b) * total + i]);
    dwpe[i] = acc;
  }
}

}  // namespace

// tokens (B,T) int32, wte (V,C), wpe (maxT,C) or null data -> out (B,T,C)
// Token ids are checked on the host before they reach a backend (engine/token_batch).
void CudaBackend::embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) {
  const int64_t N = tokens.shape[0] * tokens.shape[1];
  const int T = static_cast<int>(tokens.shape[1]), C = static_cast<int>(wte.shape[1]);
  const DType dtype = shared_storage_dtype("embedding_forward", {out, wte, wpe});
  if (N * C == 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    embedding_forward_kernel<S><<<grid_stride_blocks(N * C), kThreadsPerBlock, 0, stream_>>>(
        out.as<S>(), tokens.i32(), wte.as<S>(), data_or_null<S>(wpe), N, T, C);
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (B,T,C) -> dwte (V,C), dwpe (maxT,C) (skipped when null data): written or added (grads)
void CudaBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) {
  const int B = static_cast<int>(tokens.shape[0]), T = static_cast<int>(tokens.shape[1]);
  const int C = static_cast<int>(dwte.shape[1]);
  const int64_t N = static_cast<int64_t>(B) * T;
  const DType dtype = shared_storage_dtype("embedding_backward", {dout});
  float* dtable = dwte.f32();  // parameter gradients: F32 whatever the activations' storage
  float* dpos = dwpe.data ? dwpe.f32() : nullptr;
  if (C <= 0) return;
  if (grads == ParamGrads::Write) {  // the kernels below add: start from zero
    fill_zero(dwte);
    if (dpos) fill_zero(dwpe);
  }
  // Small blocks spread the C channel threads over as many SMs as possible.
  const int threads = 64;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    embedding_backward_wte_kernel<S><<<static_cast<unsigned int>(ceil_div(C, threads)), threads, 0, stream_>>>(
        dtable, dout.as<S>(), tokens.i32(), N, C);
    CUDA_CHECK(cudaGetLastError());
    if (dpos) {
      embedding_backward_wpe_kernel<S><<<grid_stride_blocks(static_cast<int64_t>(T) * C), kThreadsPerBlock, 0,
                                         stream_>>>(dpos, dout.as<S>(), B, T, C);
      CUDA_CHECK(cudaGetLastError());
    }
  });
}

}  // namespace tt
