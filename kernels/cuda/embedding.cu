// Token and learned positional embedding, forward and backward (CUDA). The backward adds
// each token's gradient row into the embedding rows in token order, without atomics, writing
// or adding every gradient element, so the result is deterministic and the same bits as the
// CPU backend's. Two ways to find each row's tokens: for a small vocabulary, every block scans
// the token ids (one launch); for a large one, the (id, position) pairs are sorted once (CUB's
// radix sort) and each row's tokens are one run of the sorted list (three launches). The tables
// and the output (and dout) are in the activation storage type S (kernels/cuda/storage.cuh);
// the embedding gradients dwte/dwpe are always F32.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

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

// Channel c of the dwpe rows [r0, r0 + 16): dwpe[t][c] = (0 or its value before) + dout[b][t][c]
// over b = 0..B-1 in order; rows t >= T get no term (0 when written, unchanged when added).
template <typename S>
__device__ void position_rows(float* dwpe, const S* dout, int r0, int c, int B, int T, int C, int maxT, bool add) {
  if (c >= C) return;
  for (int t = r0; t < min(maxT, r0 + kRowsPerBlock); ++t) {
    float* out = dwpe + static_cast<int64_t>(t) * C + c;
    float acc = add ? *out : 0.0f;
    if (t < T)
      for (int b = 0; b < B; ++b) acc += to_float(dout[(static_cast<int64_t>(b) * T + t) * C + c]);
    *out = acc;
  }
}

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
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (static_cast<int>(blockIdx.x) >= wte_blocks) {  // uniform over the block
    position_rows(dwpe, dout, (static_cast<int>(blockIdx.x) - wte_blocks) * kRowsPerBlock, c, B, T, C, maxT, add);
    return;
  }
  __shared__ float acc[kRowsPerBlock][kMaxBlockChannels];  // acc[row - r0][thread]
  const int r0 = static_cast<int>(blockIdx.x) * kRowsPerBlock;
  for (int j = 0; j < kRowsPerBlock; ++j) {
    const int row = r0 + j;
    acc[j][threadIdx.x] = add && row < V && c < C ? dwte[static_cast<int64_t>(row) * C + c] : 0.0f;
  }
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
  for (int j = 0; j < kRowsPerBlock; ++j) {
    const int row = r0 + j;
    if (row < V && c < C) dwte[static_cast<int64_t>(row) * C + c] = acc[j][threadIdx.x];
  }
}

// ---- the sorted path, for a large vocabulary ----
// tokens (N) -> keys (N): key n = (id << position_bits) | n. Sorted, the keys list the tokens by
// id and, within an id, by position: each embedding row's tokens are one run, in token order.
__global__ void embedding_sort_keys_kernel(uint64_t* keys, const int32_t* tokens, int64_t N, int position_bits) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x)
    keys[n] = (static_cast<uint64_t>(static_cast<uint32_t>(tokens[n])) << position_bits) | static_cast<uint64_t>(n);
}

constexpr int kSortedPerBlock = 32;  // sorted tokens a block of the sorted kernel looks at for runs starting there

// sorted (N) keys (above), dout (N,C) -> dwte (V,C), dwpe (maxT,C), as embedding_backward_kernel.
// Decomposition: blockIdx.x < run_blocks: the block looks at sorted keys [32 b, 32 b + 32) of
// the channels [c0, c0 + blockDim.x) (blockIdx.y); a key whose id differs from the key before it
// starts that id's run, and the block walks the whole run (past its 32 if need be) adding the
// tokens' dout rows in position order onto 0 or the old value, then stores the row; with Write
// it also zeroes the rows between the run before's id and this one (and, after the last run,
// the rest): every row has one writer. The blocks after them own dwpe rows as in the scan
// kernel. Each thread is one channel, with its sum in a register; no shared memory, no barrier.
template <typename S>
__global__ void embedding_backward_sorted_kernel(float* dwte, float* dwpe, const S* dout, const uint64_t* sorted,
                                                 int64_t N, int position_bits, int B, int T, int C, int V, int maxT,
                                                 int run_blocks, bool add) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (static_cast<int>(blockIdx.x) >= run_blocks) {
    position_rows(dwpe, dout, (static_cast<int>(blockIdx.x) - run_blocks) * kRowsPerBlock, c, B, T, C, maxT, add);
    return;
  }
  if (c >= C) return;
  const auto id_of = [&](int64_t i) { return static_cast<int>(sorted[i] >> position_bits); };
  const uint64_t position_mask = (uint64_t{1} << position_bits) - 1;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kSortedPerBlock;
  for (int64_t i = first; i < min(N, first + kSortedPerBlock); ++i) {
    const int id = id_of(i);
    const int before = i == 0 ? -1 : id_of(i - 1);
    if (id == before) continue;  // inside a run that starts earlier
    if (!add)
      for (int row = before + 1; row < id; ++row) dwte[static_cast<int64_t>(row) * C + c] = 0.0f;  // no token
    float* out = dwte + static_cast<int64_t>(id) * C + c;
    float acc = add ? *out : 0.0f;
    int64_t j = i;
    for (; j < N && id_of(j) == id; ++j)
      acc += to_float(dout[static_cast<int64_t>(sorted[j] & position_mask) * C + c]);
    *out = acc;
    if (j == N && !add)
      for (int row = id + 1; row < V; ++row) dwte[static_cast<int64_t>(row) * C + c] = 0.0f;
  }
}

// The bits that hold the numbers 0..count-1.
int bits_for(int64_t count) {
  int bits = 0;
  while ((int64_t{1} << bits) < count) ++bits;
  return bits;
}

// The scan kernel reads every token id once per warp of every dwte block; past this many id
// reads (16 MiB: about 3.5 us of an H200's 4.8 TB/s, a model estimate: on a GPU its L2 serves
// most of them) the sorted path's two more graph nodes (about 1.5 us each, assumed) cost less.
// The seed step (V 512, 1024 tokens: 131,072 reads) scans; GPT-2 small (V 50,257, 8,192
// tokens: 618 million) sorts.
constexpr int64_t kMaxScanIdReads = int64_t{1} << 22;

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
// One launch (embedding_backward_kernel) for a small vocabulary; for a large one three: the
// keys, CUB's radix sort of them in CudaBackend::reduce_scratch_, embedding_backward_sorted_kernel.
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
  const int slices = static_cast<int>(ceil_div(C, threads));
  const int64_t scan_id_reads = static_cast<int64_t>(wte_blocks) * slices * (threads / 32) * N;
  const bool add = grads == ParamGrads::Add;
  if (scan_id_reads <= kMaxScanIdReads || V <= 0) {
    const dim3 grid(static_cast<unsigned int>(wte_blocks + wpe_blocks), static_cast<unsigned int>(slices));
    dispatch_storage(dtype, [&](auto storage) {
      using S = decltype(storage);
      embedding_backward_kernel<S><<<grid, threads, 0, stream_>>>(dtable, dpos, dout.as<S>(), tokens.i32(), N, B, T,
                                                                  C, V, maxT, wte_blocks, add);
    });
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  // The keys, sorted, in the reduction scratch: keys (N), sorted keys (N), then CUB's own storage.
  const int position_bits = bits_for(N), id_bits = bits_for(V);
  const auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };  // CUB's alignment
  const size_t keys_bytes = aligned(static_cast<size_t>(N) * sizeof(uint64_t));
  uint64_t* keys = reinterpret_cast<uint64_t*>(reduce_scratch_);
  uint64_t* sorted = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(reduce_scratch_) + keys_bytes);
  void* sort_storage = reinterpret_cast<char*>(reduce_scratch_) + 2 * keys_bytes;
  size_t sort_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, keys, sorted, static_cast<int>(N), 0,
                                            position_bits + id_bits, stream_));
  if (2 * keys_bytes + sort_bytes > kReduceScratchFloats * sizeof(float))
    throw std::runtime_error("embedding_backward: sorting " + std::to_string(N) + " token ids needs " +
                             std::to_string(2 * keys_bytes + sort_bytes) + " bytes of reduction scratch, more than " +
                             std::to_string(kReduceScratchFloats * sizeof(float)));
  embedding_sort_keys_kernel<<<grid_stride_blocks(N), kThreadsPerBlock, 0, stream_>>>(keys, tokens.i32(), N,
                                                                                       position_bits);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cub::DeviceRadixSort::SortKeys(sort_storage, sort_bytes, keys, sorted, static_cast<int>(N), 0,
                                            position_bits + id_bits, stream_));
  const int run_blocks = static_cast<int>(ceil_div(N, kSortedPerBlock));
  const dim3 grid(static_cast<unsigned int>(run_blocks + wpe_blocks), static_cast<unsigned int>(slices));
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    embedding_backward_sorted_kernel<S><<<grid, threads, 0, stream_>>>(dtable, dpos, dout.as<S>(), sorted, N,
                                                                       position_bits, B, T, C, V, maxT, run_blocks, add);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
