// What a kernel launch did, counted by the emulator (counting mode): the inputs of the cost
// model (engine/profile/kernel_model.h), which turns them into a modelled time on a GPU. Global
// and shared memory are counted per warp-wide access, as the hardware serves them: a warp's
// load of 32 consecutive floats is one request of four 32-byte sectors; 32 floats 128 bytes
// apart are one request of 32 sectors (uncoalesced). A shared-memory access takes one
// wavefront per pass the 32 banks need: 32 threads on 32 different banks take one, 32 threads
// on one bank take 32 (a 32-way bank conflict), as Nsight Compute counts them. Arithmetic comes
// from the op-count plugin's counters (simt/op_counts.h), tensor-core instructions from
// simt/tensor_core.cpp. Counting costs time, so it is off unless asked for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "simt/cuda_api.h"
#include "simt/memory_watch.h"

namespace simt {

struct LaunchCounters {
  // Device memory, per direction: bytes the threads asked for, warp-wide requests, and the
  // distinct 32-byte sectors each request touched, summed over requests.
  uint64_t global_load_bytes = 0, global_store_bytes = 0;
  uint64_t global_load_requests = 0, global_store_requests = 0;
  uint64_t global_load_sectors = 0, global_store_sectors = 0;
  uint64_t global_atomics = 0;  // atomic operations on device memory (per thread)
  // Shared memory: bytes, warp-wide requests and the wavefronts they took (bank conflicts).
  uint64_t shared_load_bytes = 0, shared_store_bytes = 0;
  uint64_t shared_load_requests = 0, shared_store_requests = 0;
  uint64_t shared_load_wavefronts = 0, shared_store_wavefronts = 0;
  // Arithmetic on the CUDA cores, per thread (the op-count plugin; 0 when not built with it).
  uint64_t fp32_ops = 0, fp64_ops = 0, special_ops = 0, statements = 0;
  // Tensor-core and warp instructions, per warp.
  uint64_t mma_bf16 = 0, mma_fp16 = 0;  // mma.sync m16n8k16: 4096 FLOPs each
  uint64_t mma_tf32 = 0;                // mma.sync m16n8k8 tf32: 2048 FLOPs each
  uint64_t ldmatrix = 0;                // ldmatrix instructions (each .x1/.x2/.x4 one)
  uint64_t cp_async_bytes = 0;          // bytes copied global -> shared by cp.async
  uint64_t shuffles = 0;                // shuffles and votes
  uint64_t syncwarps = 0;
  uint64_t barriers = 0;                // __syncthreads opened, per block
  uint64_t fences = 0;                  // __threadfence, per thread
  // The launch's shape.
  uint64_t blocks = 0;
  unsigned threads_per_block = 0;
  size_t shared_bytes_per_block = 0;    // static + dynamic, the most any block used

  void add(const LaunchCounters& other);  // sums, and the largest shape
  void scale(double factor);               // the work counts (not the shape) times `factor`
  uint64_t mma_flops() const { return 4096 * (mma_bf16 + mma_fp16) + 2048 * mma_tf32; }
};

// One kernel launch (or one call of an emulated library, `library`), with what it did.
struct LaunchRecord {
  std::string kernel;  // the kernel as its launch names it: "layernorm_forward_kernel<S>"
  cuda_api::dim3 grid, block;
  LaunchCounters counters;
  uint64_t blocks_run = 0;  // blocks the emulator ran: all, or a sample (set_block_sampling)
  // An emulated library call (cuBLASLt): no kernel code ran, so the record holds the work as
  // its API describes it: FLOPs, and the bytes of its operands read and written once.
  bool library = false;
  double library_flops = 0;
  uint64_t library_bytes = 0;
  std::string library_precision;  // the GEMM's input precision: fp32, tf32, bf16, fp16
};

// Whether this build counts: the memory watch sees the accesses and the op-count plugin the
// arithmetic (a GCC build; not the clang sanitizer build). Where it does not, counting mode
// records launches with zero counts, which no model may read (ops perf, profile --estimate refuse).
bool counting_available();
// Counting mode: while on, every launch adds a LaunchRecord. Off by default.
void set_counting(bool on);
bool counting();
// The records since the last call, oldest first; the list is emptied.
std::vector<LaunchRecord> take_launch_records();
// Block sampling, for estimates of runs too long to emulate whole (profile --sample-blocks):
// each launch runs at most `max_blocks` of its blocks, evenly spaced over the grid, and its counts
// are scaled by blocks / blocks run. Nothing a sampled launch computes is right. 0: off.
void set_block_sampling(uint64_t max_blocks);
uint64_t block_sampling();

// A library call's record (simt/cublaslt.cpp; the runtime's memsets and device-to-device copies,
// with no FLOPs), in counting mode only.
void record_library_call(const char* name, double flops, uint64_t bytes, const std::string& precision);

namespace detail {
// The running launch's counters in counting mode, else null: events count with one test.
extern LaunchCounters* g_counters;
void counting_launch_begin(const char* kernel, cuda_api::dim3 grid, cuda_api::dim3 block);
void counting_launch_end(uint64_t blocks_run);
// One thread's access, grouped with its warp's accesses of the same instruction.
void count_access(BlockWatch& block, unsigned thread, const void* addr, size_t bytes, AccessKind kind, bool shared,
                  const void* pc);
// A warp's collective shared read of rows (ldmatrix: 8 lanes' 16-byte rows per phase).
void count_shared_rows(const void* const* rows, int count, size_t row_bytes);
void counting_block_end(BlockWatch& block, size_t shared_bytes);
}  // namespace detail

}  // namespace simt
