// What the attention kernels share (naive_attention.cu, flash_attention.cu): the block shape
// (one warp per query or key row, kRowsPerBlock rows per block), the tile of keys or queries
// streamed through shared memory (kTile rows, one per lane), and the host-side launch helpers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp.cuh"

namespace tt {
namespace attention_tiles {

constexpr int kTile = 32;                        // keys (or queries) per shared-memory tile: one per lane
constexpr int kRowsPerBlock = 8;                 // warps per block, one row (query or key) each
constexpr int kThreads = kRowsPerBlock * kWarp;  // 256
constexpr size_t kDefaultSmemBytes = 48 * 1024;  // above this a kernel must opt in

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

// The decomposition of the "query row" kernels: which (b, h) and which query row this warp
// owns. A block is kRowsPerBlock consecutive query rows of one (b,h), grid
// B*NH*ceil(T/kRowsPerBlock).
struct QueryRow {
  int b, h, bh, t0, t, lane, warp;
  bool active;     // t < T (the last block of a head may run past T)
  int visible;     // keys this query may attend to: t + 1 when causal, else T; 0 when inactive
  int block_keys;  // keys any row of this block may attend to: the tile loops' bound (causal:
                   // the key tiles wholly above the block's last row are never loaded)
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

// The dk/dv kernels' inner sum, one key row per warp (warp = the key's slot in the block, t2
// its index): over the tile's queries j in increasing order (the CPU's), acc_v += w_j dout_j
// and acc_k += g_j q_j, with w_j = dropout P and g_j = dS scale of (query tile + j, key t2) from
// w_s and g_s [kTile][kRowsPerBlock]; q_s and do_s hold the tile's rows at `stride`, channels
// lane + 32 i below `width`. Causal: the queries before the key are skipped.
template <int kRegs>
__device__ __forceinline__ void add_query_tile(float (&acc_k)[kRegs], float (&acc_v)[kRegs], const float* w_s,
                                               const float* g_s, const float* q_s, const float* do_s, int stride,
                                               int width, int queries, int tile, int t2, bool causal, int warp,
                                               int lane) {
  for (int j = 0; j < queries; ++j) {
    if (causal && tile + j < t2) continue;  // warp-uniform
    const float w = w_s[j * kRowsPerBlock + warp];
    const float g = g_s[j * kRowsPerBlock + warp];
    const float* q_row = q_s + j * stride;
    const float* do_row = do_s + j * stride;
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const int d = lane + kWarp * i;
      if (d < width) {
        acc_v[i] += w * do_row[d];
        acc_k[i] += g * q_row[d];
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

// Blocks for one warp per row of every (b, head) of `heads` heads (the query heads NH, or the
// key/value heads): B*heads*ceil(T/kRowsPerBlock). Checks the shape, grouping included.
inline unsigned row_blocks(const AttentionShape& s, int heads, const char* what) {
  if (s.B <= 0 || s.T <= 0 || s.NH <= 0 || s.HS <= 0 || heads <= 0)
    throw std::runtime_error(std::string(what) + ": empty or negative attention shape");
  if (s.NH % s.kv_heads() != 0)
    throw std::runtime_error(std::string(what) + ": " + std::to_string(s.kv_heads()) +
                             " key/value heads do not divide " + std::to_string(s.NH) + " query heads");
  const int64_t blocks = static_cast<int64_t>(s.B) * heads * ((s.T + kRowsPerBlock - 1) / kRowsPerBlock);
  if (blocks > 0x7fffffff) throw std::runtime_error(std::string(what) + ": too many blocks for one launch");
  return static_cast<unsigned>(blocks);
}

}  // namespace attention_tiles
}  // namespace tt
