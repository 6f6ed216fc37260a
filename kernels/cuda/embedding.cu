// Token and learned positional embedding, forward and backward (CUDA). The backward adds
// each token's gradient row into the embedding rows in token order, without atomics, in one
// launch that writes or adds every gradient element, so the result is deterministic and the
// same bits as the CPU backend's. The tables and the output
// (and dout) are in the activation storage type S (kernels/cuda/storage.cuh); the embedding
// gradients dwte/dwpe are always F32.
#include <algorithm>
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

// Embedding rows (of dwte, or of dwpe) one backward block owns; its threads are channels.
constexpr int kRowsPerBlock = 16;
constexpr int kMaxBlockChannels = 128;  // threads of a backward block (a multiple of 32, fewer for small C)

// dout (N,C), tokens (N) -> dwte (V,C) and dwpe (maxT,C) (null: none), each element written
// (grads = Write: the sum from 0) or added (Add: the sum from its value before), N = B*T, token
// n at position t = n % T: dwte[v][c] sums dout[n][c] over the tokens n with id v, in
// increasing n; dwpe[t][c] sums dout[b][t][c] over b = 0..B-1 (rows t >= T are 0 when
// written, unchanged when added).
// Decomposition: ownership by output row, so the launch is one kernel with no atomics, no
// scratch and no memset. blockIdx.x < wte_blocks: the block owns dwte rows [r0, r0 + 16) of
// the channels [c0, c0 + blockDim.x), blockIdx.y the channel slice; the blocks after them own
// dwpe rows the same way. A thread is one channel of its block's rows and the only writer of
// those elements, which it accumulates in its own column of shared memory (no barrier needed:
// no thread reads another's column). Every warp of a dwte block scans all N token ids, 32 at a
// time: lane l reads id of token base + l, a ballot marks the tokens whose id is one of the
// block's rows, and the warp visits those in increasing token order, each lane adding its
// channel of that token's dout row. So each element gets exactly the CPU backend's sequence of
// fp32 additions (tokens in order, onto 0 or the old value): the same bits, not merely within
// reduction_tol, and independent of the schedule. Every element of the owned rows is stored,
// rows no token uses included (Write overwrites them with 0).
// Cost: each dout row is read once per channel slice, each token id (V / 16) x (channel slices)
// x (warps) times, with 1/32 of a ballot each; the seed (V 512, C 128, N 1024) is 32 blocks of
// 128 threads, each warp 32 ballots. Parallelism is V x C / 16 threads instead of the C of a
// channel-per-thread scan; skewed ids (every token the same) serialise that row's N adds in one
// thread, as the CPU does.
template <typename S>
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const S* dout, const int32_t* tokens, int64_t N,
                                          int B, int T, int C, int V, int maxT, int wte_blocks, bool add) {
  __shared__ float acc[kRowsPerBlock][kMaxBlockChannels];  // acc[row - r0][thread]
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  const bool is_wte = static_cast<int>(blockIdx.x) < wte_blocks;  // uniform over the block
  const int r0 = (is_wte ? static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x) - wte_blocks) * kRowsPerBlock;
  const int rows = is_wte ? V : maxT;
  float* table = is_wte ? dwte : dwpe;
  for (int j = 0; j < kRowsPerBlock; ++j) {
    const int row = r0 + j;
    acc[j][threadIdx.x] = add && row < rows && c < C ? table[static_cast<int64_t>(row) * C + c] : 0.0f;
  }
  if (is_wte) {
    const int lane = threadIdx.x % 32;
    for (int64_t base = 0; base < N; base += 32) {  // the same trip count in every lane: the ballot is warp-wide
      const int64_t n = base + lane;
      const int id = n < N ? tokens[n] : -1;
      const unsigned hits = __ballot_sync(0xffffffffu, id >= r0 && id < r0 + kRowsPerBlock);
      for (int j = 0; j < 32 && (hits >> j) != 0u; ++j) {  // hit tokens in increasing order
        if (!((hits >> j) & 1u)) continue;
        const int64_t hit = base + j;
        if (c < C) acc[tokens[hit] - r0][threadIdx.x] += to_float(dout[hit * C + c]);
      }
    }
  } else {
    for (int j = 0; j < kRowsPerBlock; ++j) {
      const int t = r0 + j;
      if (t >= T || c >= C) continue;
      for (int b = 0; b < B; ++b) acc[j][threadIdx.x] += to_float(dout[(static_cast<int64_t>(b) * T + t) * C + c]);
    }
  }
  for (int j = 0; j < kRowsPerBlock; ++j) {
    const int row = r0 + j;
    if (row < rows && c < C) table[static_cast<int64_t>(row) * C + c] = acc[j][threadIdx.x];
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

// dout (B,T,C) -> dwte (V,C), dwpe (maxT,C) (skipped when null data): written or added (grads).
// One launch (embedding_backward_kernel), whatever the mode.
void CudaBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) {
  const int B = static_cast<int>(tokens.shape[0]), T = static_cast<int>(tokens.shape[1]);
  const int V = static_cast<int>(dwte.shape[0]), C = static_cast<int>(dwte.shape[1]);
  const int64_t N = static_cast<int64_t>(B) * T;
  const DType dtype = shared_storage_dtype("embedding_backward", {dout});
  float* dtable = dwte.f32();  // parameter gradients: F32 whatever the activations' storage
  float* dpos = dwpe.data ? dwpe.f32() : nullptr;
  const int maxT = dpos ? static_cast<int>(dwpe.shape[0]) : 0;
  if (C <= 0 || (V <= 0 && maxT <= 0)) return;
  // Whole warps (the ballot), as few idle channels as possible for a small C.
  const int threads = static_cast<int>(std::min<int64_t>(kMaxBlockChannels, ceil_div(C, 32) * 32));
  const int wte_blocks = static_cast<int>(ceil_div(V, kRowsPerBlock));
  const int wpe_blocks = static_cast<int>(ceil_div(maxT, kRowsPerBlock));
  const dim3 grid(static_cast<unsigned int>(wte_blocks + wpe_blocks), static_cast<unsigned int>(ceil_div(C, threads)));
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    embedding_backward_kernel<S><<<grid, threads, 0, stream_>>>(dtable, dpos, dout.as<S>(), tokens.i32(), N, B, T, C,
                                                                V, maxT, wte_blocks, grads == ParamGrads::Add);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
