// What the emulator sees of memory while a kernel runs. Every load and store of the emulated
// kernels' code reaches watch_access (the compiler instruments them: simt/access_hooks.cpp), with
// the running thread's block and index, and is checked and counted there:
//
//   - shared memory (racecheck): two threads of a block touch one byte between the same two
//     __syncthreads, at least one of them writing, and no __syncwarp orders them (both in one
//     warp): a hazard as compute-sanitizer's racecheck defines it, reported with both lines;
//   - device memory (initcheck): a read of bytes nothing has written (nor memset or copied)
//     since cudaMalloc;
//   - device memory across blocks (the fence check): a block reads what another block of the
//     same launch wrote, without the writer's release (a __threadfence after the write, then an
//     atomic) and the reader's acquire (an atomic, then a __threadfence) between them: on a GPU
//     the read may see the old value (docs/emulation.md, "Blocks run interleaved");
//   - in counting mode, the traffic of each warp-wide access (simt/launch_counters.h).
//
// A check that fails stops the launch like any other fault, naming the kernel, the block, the
// threads and the source lines. The scheduler (simt/scheduler.cpp) keeps g_block and g_thread
// current and tells this file about barriers, __syncwarp and fences.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "simt/cuda_api.h"

namespace simt {
// racecheck, initcheck and the fence check: all on unless TINYTRAIN_SIMT_CHECKS says "memory"
// (no racecheck) or "0" (none: a run that only wants counts); a test that shows what a race
// does without them turns them all off or on.
void set_checks(bool on);
bool checks_on();
}  // namespace simt

namespace simt::detail {

enum class AccessKind : uint8_t { Read, Write };

// The racecheck state of one 4-byte word of shared memory (or of one byte of a split word):
// its last write, and its reads since then.
struct RaceCell {
  uint32_t serial = 0;       // the block run the rest belongs to (0: none yet)
  uint32_t write_epoch = 0;  // barriers the block had passed at the write
  uint32_t read_epoch = 0;
  uint32_t write_sync = 0;   // the writer's warp's __syncwarp count at the write
  uint32_t read_sync = 0;    // the same at the latest read
  uint16_t writer = 0;       // thread of the last write (kNobody: none)
  uint16_t reader = 0;       // thread of the reads since (kNobody, or kManyReaders)
  uint16_t read_warp = 0;    // with kManyReaders: their warp, or kManyWarps
  uint16_t write_site = 0;   // source sites (simt/symbolize.h's table)
  uint16_t read_site = 0;
  uint8_t bytes = 0;         // which bytes of the word this barrier interval's accesses touched
  bool split = false;        // threads touched different bytes: BlockWatch::split_words holds them
};

// One __shared__ array of a block (or its dynamic shared memory), with its racecheck cells.
struct SharedArray {
  char* begin = nullptr;
  size_t bytes = 0;
  int key = -1;               // its __shared__ declaration's number in the file; -1: the dynamic area
  const char* file = nullptr; // where it is declared
  int line = 0;
  RaceCell* cells = nullptr;  // one per 4-byte word
};

// The __syncwarp history of a warp, which orders its lanes' shared accesses for racecheck.
struct WarpSyncs {
  uint32_t count = 0;            // __syncwarp completions so far
  uint32_t together[32][32]{};   // together[a][b]: `count` at the last one lanes a and b both took part in
  uint32_t whole_warp[32]{};     // per lane: `count` at the last one every lane of the warp took part in
};

// What the checks know of the block a thread belongs to; part of the scheduler's block state.
struct BlockWatch {
  cuda_api::uint3 index{0, 0, 0};
  cuda_api::dim3 dims;
  uint64_t linear = 0;        // the block's index in the grid
  uint32_t serial = 0;        // this run of the block, unique in the process
  uint32_t epoch = 0;         // barriers opened so far
  unsigned lanes_in_warp(unsigned warp) const;  // 32, or fewer for a partial last warp
  std::vector<SharedArray> arrays;
  std::vector<WarpSyncs> syncs;          // per warp, made at the block's first __syncwarp
  std::unordered_map<const RaceCell*, std::array<RaceCell, 4>> split_words;  // byte cells of split words
  std::vector<uint32_t> access_seq;      // per thread: its accesses so far (counting mode)
};

// The running kernel thread (null and 0 outside kernels), kept by the scheduler.
extern BlockWatch* g_block;
extern bool g_checks;  // any check on (set_checks)
// The running thread's fiber stack: its locals that did not stay in registers are watched
// accesses too, and the first thing a watched access asks is whether it is one of those.
extern const char* g_stack_bottom;
extern size_t g_stack_bytes;
extern unsigned g_thread;
// Set while an atomic operation runs (simt/device.h): its accesses are neither races nor stale
// reads (atomics act at the device's coherence point), and it is the ticket of a release/acquire.
extern bool g_in_atomic;
void atomic_begins();
void atomic_ends();

// Whether this build watches the emulated kernels' accesses (GCC, not the sanitizer build:
// CMakeLists.txt, simt_watch_accesses). Without it the checks and the memory counts are off.
bool memory_watch_available();

// Whether kernels' stores set initcheck's bits (simt/device_memory.h) now: the watch is built
// and the memory checks are on. Without it a library's initcheck (simt/cublaslt.cpp) would
// take a kernel's output for memory nothing wrote, so it checks nothing.
bool kernel_writes_tracked();

// Every instrumented load and store while a kernel thread runs, checks or counting on
// (simt/access_hooks.cpp asks first). `pc`: the instruction (for the
// source line of a report and the grouping of a warp's accesses into one instruction).
void watch_access(const void* addr, size_t bytes, AccessKind kind, const void* pc);

// Is [addr, addr + bytes) inside the running block's shared memory? (ldmatrix, cp.async)
const SharedArray* shared_array_of(const void* addr, size_t bytes);

// Scheduler events.
void watch_launch_begin();
void watch_launch_end();
void watch_block_begin(BlockWatch& block);  // a fresh serial; arrays come and go with the block
void watch_block_end(BlockWatch& block);
void watch_barrier_opened(BlockWatch& block);
void watch_syncwarp(BlockWatch& block, unsigned warp, unsigned mask);
void watch_fence();  // the running thread's __threadfence

// "thread (x,y,z)" and "block (x,y,z)" as the reports write them.
std::string thread_name(const BlockWatch& block, unsigned thread);
std::string block_name(cuda_api::uint3 index);

// Stops the running kernel thread with a fault (simt/scheduler.cpp), from code that cannot
// unwind its caller's frames (an instrumented access): the thread's fiber is abandoned.
[[noreturn]] void fault_in_thread(const std::string& message);

}  // namespace simt::detail
