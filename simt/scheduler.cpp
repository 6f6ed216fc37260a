// The SIMT scheduler (simt/scheduler.h): blocks of fibers, barriers, warp operations, block-
// shared memory, the interleaving of blocks, and the checks that turn undefined behaviour into
// a message.
#include "simt/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "simt/device.h"
#include "simt/fiber.h"
#include "simt/launch_counters.h"
#include "simt/memory_watch.h"
#include "simt/tensor_core.h"

namespace simt {

using cuda_api::dim3;
using cuda_api::uint3;

namespace detail {
uint3 g_thread_idx;
uint3 g_block_idx;
dim3 g_block_dim;
dim3 g_grid_dim;
}  // namespace detail

using detail::BarrierOp;
using detail::BlockWatch;
using detail::SharedArray;
using detail::WarpOp;

namespace {

constexpr int kWarpSize = 32;
constexpr size_t kStaticSharedLimit = 48 * 1024;  // static __shared__ per block, as on every GPU since Volta
constexpr unsigned char kSharedFill = 0xff;       // new shared memory reads as NaN (float) or -1 (int)
// Blocks resident at once. Forward and reverse keep two and hand over at every barrier; random
// keeps four and picks among them at every scheduling point: more orders of the blocks' work.
constexpr size_t kResidentBlocks = 2;
constexpr size_t kResidentBlocksRandom = 4;

enum class Status : uint8_t { NotStarted, Ready, AtBarrier, AtWarpOp, Exited };

struct ThreadSlot {
  Status status = Status::NotStarted;
  int worker = -1;  // the fiber running it, once started
  // where it waits (barrier or warp op)
  const char* name = nullptr;
  const char* file = nullptr;
  int line = 0;
  // a warp operation's operands and result
  WarpOp op = WarpOp::SyncWarp;
  unsigned mask = 0;
  int lane_arg = 0;
  int width = kWarpSize;
  uint64_t value = 0;  // a collective's: the lane's data (a pointer)
  uint64_t result = 0;
  detail::WarpCollective collective = nullptr;
  // a barrier's result (_count/_and/_or)
  int barrier_result = 0;
};

// Lanes of one warp, as bit masks: waiting at a warp operation, and exited.
struct WarpState {
  unsigned waiting = 0;
  unsigned exited = 0;
};

struct GridRun;

// One resident block.
struct BlockRun {
  GridRun* grid = nullptr;
  unsigned n = 0;  // threads in the block
  std::vector<ThreadSlot> threads;
  std::vector<WarpState> warps;
  // Threads that may run (not started, or released by a barrier or warp operation), in the
  // order they will run (make_runnable).
  std::deque<unsigned> runnable;
  std::vector<unsigned> batch;  // make_runnable's scratch
  unsigned current = 0;
  unsigned exited = 0;
  unsigned at_barrier = 0;
  const char* barrier_name = nullptr;
  const char* barrier_file = nullptr;
  int barrier_line = 0;
  BarrierOp barrier_op = BarrierOp::Sync;
  int barrier_count = 0;
  bool hand_over = false;   // a barrier opened: other blocks run first (forward, reverse)
  size_t shared_bytes = 0;  // static + dynamic in use
  size_t static_bytes = 0;
  BlockWatch watch;         // indices, shared arrays and racecheck state
};

// One launch: its blocks in the schedule's order, a few of them resident.
struct GridRun {
  const GridLaunch* launch = nullptr;
  Order order = Order::Forward;
  std::mt19937_64* rng = nullptr;
  std::vector<uint64_t> block_order;
  size_t next_block = 0;  // the next of block_order to admit
  size_t max_resident = kResidentBlocks;
  std::vector<std::unique_ptr<BlockRun>> resident;
  std::vector<std::unique_ptr<BlockRun>> spare;  // finished blocks, their vectors kept for the next
  bool finished_block = false;                   // a resident block has just finished
  std::string fault;
  uint3 fault_block{0, 0, 0};
};

// A fiber that runs kernel threads. When its thread exits and the next runnable thread has not
// started yet, the same fiber runs it: a kernel without synchronisation runs every thread on
// one fiber, with no switch at all.
struct Worker {
  std::unique_ptr<Fiber> fiber;
  int index = 0;
};
struct WorkerPool {
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<int> idle;  // workers without a thread
  Context scheduler;      // the OS thread's own stack, where run_grid waits
};

GridRun* g_grid = nullptr;
BlockRun* g_run = nullptr;  // the running thread's block
WorkerPool g_pool;

std::string site(const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return std::string(base ? base + 1 : file) + ":" + std::to_string(line);
}

std::string hex(unsigned v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

std::string thread_name(const BlockRun& run, unsigned t) { return detail::thread_name(run.watch, t); }

// Makes thread t of `run` the running one: its indices and the scheduler's notion of "current".
void activate(BlockRun& run, unsigned t) {
  g_run = &run;
  run.current = t;
  const dim3 b = run.watch.dims;
  detail::g_thread_idx = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
  detail::g_block_idx = run.watch.index;
  detail::g_block = &run.watch;
  detail::g_thread = t;
  const Context& stack = g_pool.workers[run.threads[t].worker]->fiber->context();
  detail::g_stack_bottom = static_cast<const char*>(stack.stack_bottom);
  detail::g_stack_bytes = stack.stack_size;
}

// Makes threads runnable. The block's threads start, and leave a barrier, in the schedule's
// order (ascending for forward, descending for reverse, shuffled for random) at the back of
// the queue. Lanes leaving a warp operation go to the front in forward and reverse: a warp
// runs ahead through its warp operations until it waits at a barrier, as one warp of a real
// block may, which exposes a warp that rewrites shared data others have not read yet. In
// random order they go, shuffled, to the front or the back, at random.
enum class Release { Block, Warp };
template <typename Fn>
void make_runnable(BlockRun& run, unsigned first, unsigned count, Release release, Fn&& included) {
  std::vector<unsigned>& batch = run.batch;
  std::mt19937_64& rng = *run.grid->rng;
  const Order order = run.grid->order;
  batch.clear();
  for (unsigned t = first; t < first + count; ++t)
    if (included(t)) {
      run.threads[t].status = Status::Ready;
      batch.push_back(t);
    }
  if (order == Order::Reverse) std::reverse(batch.begin(), batch.end());
  if (order == Order::Random) std::shuffle(batch.begin(), batch.end(), rng);
  const bool front = release == Release::Warp && (order != Order::Random || rng() % 2 == 0);
  if (front)
    run.runnable.insert(run.runnable.begin(), batch.begin(), batch.end());
  else
    run.runnable.insert(run.runnable.end(), batch.begin(), batch.end());
}

// ---- blocks coming and going ----

// Shared memory of a block: 128-byte aligned, as a GPU's shared arrays start on a bank-0
// boundary (which banks an access hits, and so its bank conflicts, depend on the address modulo
// 128), and exactly as large as declared, so AddressSanitizer sees an overrun.
char* allocate_shared(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 128, std::max<size_t>(bytes, 1)) != 0) std::abort();
  std::memset(p, kSharedFill, bytes);
  return static_cast<char*>(p);
}


// Makes the next block of the schedule resident: its threads runnable, its shared memory ready.
void admit_block(GridRun& grid) {
  const GridLaunch& launch = *grid.launch;
  const dim3 g = launch.grid, b = launch.block;
  std::unique_ptr<BlockRun> run;
  if (!grid.spare.empty()) {
    run = std::move(grid.spare.back());
    grid.spare.pop_back();
  } else {
    run = std::make_unique<BlockRun>();
  }
  const uint64_t index = grid.block_order[grid.next_block++];
  run->grid = &grid;
  run->n = b.x * b.y * b.z;
  run->threads.assign(run->n, ThreadSlot{});
  run->warps.assign((run->n + kWarpSize - 1) / kWarpSize, WarpState{});
  run->runnable.clear();
  run->exited = run->at_barrier = 0;
  run->hand_over = false;
  run->shared_bytes = launch.dynamic_shared_bytes;
  run->static_bytes = 0;
  BlockWatch& w = run->watch;
  w.index = uint3{static_cast<unsigned>(index % g.x), static_cast<unsigned>((index / g.x) % g.y),
                  static_cast<unsigned>(index / (uint64_t{g.x} * g.y))};
  w.dims = b;
  w.linear = index;
  w.arrays.clear();
  detail::watch_block_begin(w);
  if (launch.dynamic_shared_bytes > 0) {
    SharedArray a;
    a.begin = allocate_shared(launch.dynamic_shared_bytes);
    a.bytes = launch.dynamic_shared_bytes;
    w.arrays.push_back(a);
  }
  make_runnable(*run, 0, run->n, Release::Block, [](unsigned) { return true; });
  grid.resident.push_back(std::move(run));
}

void release_shared(BlockRun& run) {
  for (const SharedArray& a : run.watch.arrays) std::free(a.begin);
  run.watch.arrays.clear();
}

// Retires the blocks whose threads have all exited and admits blocks in their place.
void retire_finished_blocks(GridRun& grid) {
  grid.finished_block = false;
  for (size_t i = 0; i < grid.resident.size();) {
    BlockRun& run = *grid.resident[i];
    if (run.exited != run.n) {
      ++i;
      continue;
    }
    if (detail::g_counters) detail::counting_block_end(run.watch, run.shared_bytes);
    detail::watch_block_end(run.watch);
    detail::cp_async_block_end(run.watch);
    release_shared(run);
    if (&run == g_run) g_run = nullptr;  // its object may come back as a new block: not "the running one"
    grid.spare.push_back(std::move(grid.resident[i]));
    grid.resident.erase(grid.resident.begin() + static_cast<std::ptrdiff_t>(i));
  }
  while (grid.resident.size() < grid.max_resident && grid.next_block < grid.block_order.size()) admit_block(grid);
}

// The next thread to run: of the running block while it has one (forward and reverse, until a
// barrier hands over), else of the next resident block in turn; in random order, of a resident
// block drawn at random. Null when no resident block has a runnable thread.
BlockRun* next_block_to_run(GridRun& grid) {
  if (grid.finished_block) retire_finished_blocks(grid);
  // The common case, first: the running block goes on (g_run is null once its block retired).
  if (grid.order != Order::Random && g_run && !g_run->runnable.empty() && !g_run->hand_over) return g_run;
  std::vector<std::unique_ptr<BlockRun>>& blocks = grid.resident;
  if (grid.order == Order::Random) {
    size_t candidates = 0;
    for (const auto& b : blocks) candidates += !b->runnable.empty();
    if (candidates == 0) return nullptr;
    size_t pick = (*grid.rng)() % candidates;
    for (const auto& b : blocks)
      if (!b->runnable.empty() && pick-- == 0) return b.get();
  }
  const auto here = std::find_if(blocks.begin(), blocks.end(), [](const auto& b) { return b.get() == g_run; });
  if (here != blocks.end() && !(*here)->runnable.empty() && !(*here)->hand_over) return here->get();
  const size_t start = here == blocks.end() ? 0 : static_cast<size_t>(here - blocks.begin()) + 1;
  for (size_t i = 0; i < blocks.size(); ++i) {
    BlockRun* b = blocks[(start + i) % blocks.size()].get();
    if (!b->runnable.empty()) {
      b->hand_over = false;
      return b;
    }
  }
  return nullptr;
}

unsigned take_runnable(BlockRun& run) {
  const unsigned t = run.runnable.front();
  run.runnable.pop_front();
  return t;
}

int idle_worker();

// Called on a fiber whose thread cannot go on (it waits, or it exited: `free`): continues with
// the next runnable thread of any resident block. Returns when this fiber has a thread to run
// again: at once when the next thread is its own or (when free) one not started yet, else when
// another fiber switches back to it. With nothing runnable it switches to the scheduler, which
// finds the launch done or deadlocked.
void dispatch(Worker& self, bool free) {
  BlockRun* run = next_block_to_run(*g_grid);
  if (!run) {
    if (free) g_pool.idle.push_back(self.index);
    switch_context(self.fiber->context(), g_pool.scheduler);
    return;
  }
  const unsigned next = take_runnable(*run);
  ThreadSlot& slot = run->threads[next];
  if (slot.worker < 0) {  // not started
    if (free) {
      slot.worker = self.index;
      activate(*run, next);
      return;
    }
    slot.worker = idle_worker();
  } else if (slot.worker == self.index) {
    activate(*run, next);
    return;
  } else if (free) {
    g_pool.idle.push_back(self.index);
  }
  activate(*run, next);
  switch_context(self.fiber->context(), g_pool.workers[slot.worker]->fiber->context());
}

void thread_exited();

// Thrown on a thread's fiber when it faults (fail), caught by its worker: unwinding the
// thread's frames frees what they hold (the fault's message, for one) before the fiber is
// abandoned.
struct ThreadAborted {};

void worker_main(void* arg) {
  fiber_started();
  auto* self = static_cast<Worker*>(arg);
  for (;;) {
    try {
      (*g_grid->launch->body)();
      thread_exited();
    } catch (const ThreadAborted&) {
      switch_context(self->fiber->context(), g_pool.scheduler);  // the launch is abandoned
      std::abort();                                               // and this fiber reset
    }
    dispatch(*self, /*free=*/true);
  }
}

// The index of a worker without a thread, made when there is none.
int idle_worker() {
  if (!g_pool.idle.empty()) {
    const int i = g_pool.idle.back();
    g_pool.idle.pop_back();
    return i;
  }
  g_pool.workers.push_back(std::make_unique<Worker>());
  Worker& w = *g_pool.workers.back();
  w.index = static_cast<int>(g_pool.workers.size() - 1);
  w.fiber = std::make_unique<Fiber>(&worker_main, &w);
  return w.index;
}

Worker& current_worker() { return *g_pool.workers[g_run->threads[g_run->current].worker]; }

// The running thread waits (at a barrier or warp operation): run others until it may go on.
void wait_here() { dispatch(current_worker(), /*free=*/false); }

void record_fault(const std::string& what) {
  GridRun& grid = *g_grid;
  if (!grid.fault.empty()) return;
  grid.fault = what;
  grid.fault_block = g_run->watch.index;
}

// Records the first fault and stops the running thread (its worker returns to the scheduler,
// which abandons the launch). Called on the thread's own fiber.
[[noreturn]] void fail(const std::string& what) {
  record_fault(what);
  throw ThreadAborted{};
}

const char* status_text(Status s) {
  switch (s) {
    case Status::NotStarted: return "not started";
    case Status::Ready: return "runnable";
    case Status::AtBarrier: return "waiting at";
    case Status::AtWarpOp: return "waiting at";
    case Status::Exited: return "exited";
  }
  return "?";
}

// Each thread's state, consecutive threads in the same state on one line.
std::string thread_states(const BlockRun& run) {
  std::string out;
  auto describe = [&](unsigned t) {
    const ThreadSlot& s = run.threads[t];
    std::string d = status_text(s.status);
    if (s.status == Status::AtBarrier || s.status == Status::AtWarpOp) {
      d += std::string(" ") + s.name + " " + site(s.file, s.line);
      if (s.status == Status::AtWarpOp) d += " (mask " + hex(s.mask) + ")";
    }
    return d;
  };
  unsigned begin = 0;
  while (begin < run.n) {
    const std::string d = describe(begin);
    unsigned end = begin + 1;
    while (end < run.n && describe(end) == d) ++end;
    out += "\n    " + thread_name(run, begin);
    if (end - begin > 1) out += " .. " + thread_name(run, end - 1).substr(7);
    out += ": " + d;
    begin = end;
  }
  return out;
}

void thread_exited() {
  BlockRun& run = *g_run;
  const unsigned t = run.current;
  detail::cp_async_thread_exit(run.watch, t);
  run.threads[t].status = Status::Exited;
  if (++run.exited == run.n) g_grid->finished_block = true;
  if (run.at_barrier > 0)
    fail("divergent barrier: " + thread_name(run, t) + " exited while " + std::to_string(run.at_barrier) +
         " threads wait at " + run.barrier_name + " " + site(run.barrier_file, run.barrier_line) +
         " (every thread of a block must reach the same __syncthreads)");
  const unsigned lane = t % kWarpSize, base = t - lane;
  WarpState& warp = run.warps[t / kWarpSize];
  warp.exited |= 1u << lane;
  // lanes of this warp waiting for this lane
  for (unsigned waiting = warp.waiting; waiting; waiting &= waiting - 1) {
    const unsigned l = static_cast<unsigned>(__builtin_ctz(waiting));
    const ThreadSlot& s = run.threads[base + l];
    if ((s.mask >> lane) & 1u)
      fail(std::string(s.name) + " at " + site(s.file, s.line) + ": the mask " + hex(s.mask) + " of lane " +
           std::to_string(l) + " names lane " + std::to_string(lane) + ", which exited without reaching it");
  }
}

void evaluate_warp_op(BlockRun& run, unsigned base, unsigned mask) {
  const ThreadSlot& first = run.threads[base + static_cast<unsigned>(__builtin_ctz(mask))];
  if (first.op == WarpOp::Collective) {
    void* lanes[kWarpSize];
    for (unsigned l = 0; l < kWarpSize; ++l) lanes[l] = reinterpret_cast<void*>(run.threads[base + l].value);
    const std::string fault = first.collective(lanes);
    if (!fault.empty()) fail(std::string(first.name) + " at " + site(first.file, first.line) + ": " + fault);
  } else if (first.op == WarpOp::SyncWarp) {
    detail::watch_syncwarp(run.watch, base / kWarpSize, mask);
    if (detail::g_counters) ++detail::g_counters->syncwarps;
  } else if (detail::g_counters) {
    ++detail::g_counters->shuffles;
  }
  uint64_t votes = 0;
  for (unsigned l = 0; l < kWarpSize; ++l)
    if ((mask >> l) & 1u && run.threads[base + l].value) votes |= uint64_t{1} << l;
  for (unsigned l = 0; l < kWarpSize && first.op != WarpOp::Collective; ++l) {
    if (!((mask >> l) & 1u)) continue;
    ThreadSlot& s = run.threads[base + l];
    const unsigned w = static_cast<unsigned>(s.width);
    const unsigned segment = l & ~(w - 1);
    unsigned src = l;
    switch (first.op) {
      case WarpOp::ShflIdx: src = segment + (static_cast<unsigned>(s.lane_arg) & (w - 1)); break;
      case WarpOp::ShflUp:
        src = static_cast<int>(l) - s.lane_arg >= static_cast<int>(segment) ? l - static_cast<unsigned>(s.lane_arg) : l;
        break;
      case WarpOp::ShflDown: src = l + static_cast<unsigned>(s.lane_arg) < segment + w ? l + s.lane_arg : l; break;
      case WarpOp::ShflXor: src = (l ^ static_cast<unsigned>(s.lane_arg)) < segment + w ? l ^ s.lane_arg : l; break;
      default: break;
    }
    switch (first.op) {
      case WarpOp::ShflIdx:
      case WarpOp::ShflUp:
      case WarpOp::ShflDown:
      case WarpOp::ShflXor:
        if (src >= static_cast<unsigned>(kWarpSize) || !((mask >> src) & 1u))
          fail(std::string(s.name) + " at " + site(s.file, s.line) + ": lane " + std::to_string(l) + " reads lane " +
               std::to_string(src) + ", which is not in the mask " + hex(mask) + " (its value is undefined)");
        s.result = run.threads[base + src].value;
        break;
      case WarpOp::Ballot: s.result = votes; break;
      case WarpOp::Any: s.result = votes != 0; break;
      case WarpOp::All: s.result = votes == mask; break;
      case WarpOp::SyncWarp: s.result = 0; break;
      case WarpOp::Collective: break;
    }
  }
  run.warps[base / kWarpSize].waiting &= ~mask;
  make_runnable(run, base, kWarpSize, Release::Warp, [mask, base](unsigned t) { return (mask >> (t - base)) & 1u; });
}

uint64_t arrive_at_warp_op(WarpOp op, unsigned mask, uint64_t value, int lane_arg, int width,
                           detail::WarpCollective collective, const char* name, const char* file, int line) {
  BlockRun& run = *g_run;
  const unsigned t = run.current;
  ThreadSlot& me = run.threads[t];
  const unsigned lane = t % kWarpSize, base = t - lane;
  WarpState& warp = run.warps[t / kWarpSize];
  const unsigned present = std::min<unsigned>(kWarpSize, run.n - base);
  const unsigned present_mask = present == 32 ? 0xffffffffu : (1u << present) - 1u;
  auto where = [&] { return std::string(name) + " at " + site(file, line) + ": "; };
  if (op == WarpOp::Collective && present != kWarpSize)
    fail(where() + "a .sync.aligned instruction needs every lane of the warp, and warp " +
         std::to_string(base / kWarpSize) + " of this " + std::to_string(run.n) + "-thread block has " +
         std::to_string(present) + " lanes");
  if (!((mask >> lane) & 1u))
    fail(where() + "lane " + std::to_string(lane) + " (" + thread_name(run, t) + ") calls it with the mask " +
         hex(mask) + ", which leaves the lane itself out");
  if (mask & ~present_mask)
    fail(where() + "the mask " + hex(mask) + " names lanes that do not exist: warp " +
         std::to_string(base / kWarpSize) + " of this " + std::to_string(run.n) + "-thread block has " +
         std::to_string(present) + " lanes");
  if (width < 1 || width > kWarpSize || (width & (width - 1)) != 0)
    fail(where() + "width " + std::to_string(width) + " is not a power of two from 1 to 32");
  if (mask & warp.exited)
    fail(where() + "the mask " + hex(mask) + " of lane " + std::to_string(lane) + " names lane " +
         std::to_string(__builtin_ctz(mask & warp.exited)) + ", which has exited");
  // Lanes of the mask already waiting must wait here, at the same operation with the same
  // mask. Each was checked against the first waiting lane when it came, so one comparison does.
  if (const unsigned waiting = warp.waiting & mask) {
    const unsigned l = static_cast<unsigned>(__builtin_ctz(waiting));
    const ThreadSlot& s = run.threads[base + l];
    const bool same_site = s.line == line && (s.file == file || std::strcmp(s.file, file) == 0);
    if (s.op != op || s.mask != mask || s.width != width || !same_site)
      fail("divergent warp operation: lane " + std::to_string(lane) + " reached " + name + " at " + site(file, line) +
           " with the mask " + hex(mask) + " while lane " + std::to_string(l) + " waits at " + s.name + " " +
           site(s.file, s.line) + " with the mask " + hex(s.mask) +
           " (every lane of a mask must reach the same warp operation)");
  }
  me.op = op;
  me.mask = mask;
  me.value = value;
  me.lane_arg = lane_arg;
  me.width = width;
  me.collective = collective;
  me.name = name;
  me.file = file;
  me.line = line;
  me.status = Status::AtWarpOp;
  warp.waiting |= 1u << lane;
  if ((warp.waiting & mask) == mask) evaluate_warp_op(run, base, mask);
  wait_here();
  return me.result;
}

Schedule g_schedule = schedule_from_environment();
uint64_t g_launches = 0;

}  // namespace

// ---- device-side entry points (simt/device.h, simt/memory_watch.h) ----

namespace detail {

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int lane_arg, int width, const char* name,
                 const char* file, int line) {
  return arrive_at_warp_op(op, mask, value, lane_arg, width, nullptr, name, file, line);
}

void warp_collective(WarpCollective evaluate, void* lane_data, const char* name, const char* file, int line) {
  arrive_at_warp_op(WarpOp::Collective, 0xffffffffu, reinterpret_cast<uint64_t>(lane_data), 0, kWarpSize, evaluate,
                    name, file, line);
}

int barrier(BarrierOp op, int predicate, const char* name, const char* file, int line) {
  BlockRun& run = *g_run;
  const unsigned t = run.current;
  ThreadSlot& me = run.threads[t];
  if (run.exited > 0) {
    unsigned gone = 0;
    while (run.threads[gone].status != Status::Exited) ++gone;
    fail("divergent barrier: " + thread_name(run, t) + " reached " + name + " at " + site(file, line) + ", but " +
         std::to_string(run.exited) + " threads of the block have exited without it (first: " +
         thread_name(run, gone) + "); every thread of a block must reach the same __syncthreads");
  }
  if (run.at_barrier == 0) {
    run.barrier_name = name;
    run.barrier_file = file;
    run.barrier_line = line;
    run.barrier_op = op;
    run.barrier_count = 0;
  } else if (run.barrier_line != line || run.barrier_op != op ||
             (run.barrier_file != file && std::strcmp(run.barrier_file, file) != 0)) {
    fail("divergent barrier: " + thread_name(run, t) + " reached " + name + " at " + site(file, line) + " while " +
         std::to_string(run.at_barrier) + " threads wait at " + run.barrier_name + " " +
         site(run.barrier_file, run.barrier_line) + " (every thread of a block must reach the same __syncthreads)");
  }
  me.name = name;
  me.file = file;
  me.line = line;
  me.status = Status::AtBarrier;
  run.barrier_count += predicate != 0;
  if (++run.at_barrier == run.n) {
    const int count = run.barrier_count;
    const int result = op == BarrierOp::Count ? count
                       : op == BarrierOp::And ? count == static_cast<int>(run.n)
                       : op == BarrierOp::Or  ? count > 0
                                              : 0;
    for (ThreadSlot& s : run.threads) s.barrier_result = result;
    run.at_barrier = 0;
    watch_barrier_opened(run.watch);
    if (g_counters) ++g_counters->barriers;
    run.hand_over = run.grid->order != Order::Random;
    make_runnable(run, 0, run.n, Release::Block, [](unsigned) { return true; });
  }
  wait_here();
  return me.barrier_result;
}

void* static_shared(size_t bytes, int key, const char* file, int line) {
  BlockRun& run = *g_run;
  for (const SharedArray& a : run.watch.arrays)
    if (a.key == key && (a.file == file || std::strcmp(a.file, file) == 0)) return a.begin;
  if (run.static_bytes + bytes > kStaticSharedLimit)
    fail("__shared__ at " + site(file, line) + ": " + std::to_string(run.static_bytes + bytes) +
         " bytes of static shared memory per block, more than the 48 KiB a block may declare");
  if (run.shared_bytes + bytes > run.grid->launch->shared_limit_bytes)
    fail("__shared__ at " + site(file, line) + ": " + std::to_string(run.shared_bytes + bytes) +
         " bytes of shared memory per block (static and dynamic), more than the " +
         std::to_string(run.grid->launch->shared_limit_bytes) + " this kernel may use");
  SharedArray a;
  a.begin = allocate_shared(bytes);
  a.bytes = bytes;
  a.key = key;
  a.file = file;
  a.line = line;
  run.watch.arrays.push_back(a);
  run.static_bytes += bytes;
  run.shared_bytes += bytes;
  return a.begin;
}

void* dynamic_shared() {
  for (const SharedArray& a : g_run->watch.arrays)
    if (a.key < 0) return a.begin;
  return nullptr;
}

void device_fault(const char* what, const char* file, int line) {
  fail(std::string(what) + " at " + site(file, line) + " in " + thread_name(*g_run, g_run->current));
}

void fault_in_thread(const std::string& message) {
  record_fault(message);
  // Straight to the scheduler: an instrumented access cannot unwind the kernel's frames (the
  // compiler treats its hook as one that never throws). The fiber is reset with the others.
  switch_context(current_worker().fiber->context(), g_pool.scheduler);
  std::abort();
}

}  // namespace detail

// ---- schedules ----

Schedule schedule_from_environment() {
  Schedule s;
  const char* env = std::getenv("TINYTRAIN_SIMT_SCHEDULE");
  if (!env || !*env) return s;
  const std::string v = env;
  if (v == "forward") {
    s.order = Order::Forward;
  } else if (v == "reverse") {
    s.order = Order::Reverse;
  } else if (v == "random" || v.rfind("random:", 0) == 0) {
    s.order = Order::Random;
    if (v.size() > 7) s.seed = std::strtoull(v.c_str() + 7, nullptr, 10);
  } else {
    std::fprintf(stderr, "simt: TINYTRAIN_SIMT_SCHEDULE=%s is not forward, reverse, random or random:SEED; using forward\n",
                 env);
  }
  return s;
}

Schedule current_schedule() { return g_schedule; }
void set_schedule(const Schedule& schedule) {
  g_schedule = schedule;
  g_launches = 0;
}
std::string schedule_name(const Schedule& s) {
  switch (s.order) {
    case Order::Forward: return "forward";
    case Order::Reverse: return "reverse";
    case Order::Random: return "random:" + std::to_string(s.seed);
  }
  return "?";
}

// ---- the grid ----

namespace {

// Every unfinished resident block's threads, for a deadlock's message.
std::string deadlock_message(const GridRun& grid) {
  std::string out = "deadlock: no thread can run; each thread's state:";
  const bool several = grid.resident.size() > 1;
  for (const auto& b : grid.resident) {
    if (b->exited == b->n) continue;
    if (several) out += "\n  " + detail::block_name(b->watch.index) + ":";
    out += thread_states(*b);
  }
  return out;
}

}  // namespace

std::string run_grid(const GridLaunch& launch) {
  const dim3 g = launch.grid;
  const uint64_t blocks = uint64_t{g.x} * g.y * g.z;
  std::mt19937_64 rng(g_schedule.seed * 0x9E3779B97F4A7C15ull + g_launches++);

  GridRun grid;
  grid.launch = &launch;
  grid.order = g_schedule.order;
  grid.rng = &rng;
  grid.max_resident = grid.order == Order::Random ? kResidentBlocksRandom : kResidentBlocks;
  // Block order: the whole grid in the schedule's order (a random permutation, when random).
  grid.block_order.resize(blocks);
  std::iota(grid.block_order.begin(), grid.block_order.end(), uint64_t{0});
  if (const uint64_t sample = block_sampling(); sample > 0 && blocks > sample) {
    // A sample (simt/launch_counters.h): one block from each of `sample` equal stretches of the
    // grid, at a place within it that varies from stretch to stretch, so the sample does not
    // alias with the grid's own period (a causal attention's blocks repeat every head, heavy
    // and light: a fixed stride could pick only light ones).
    for (uint64_t i = 0; i < sample; ++i) {
      const uint64_t begin = i * blocks / sample, end = (i + 1) * blocks / sample;
      const uint64_t mixed = (i + 1) * 0x9E3779B97F4A7C15ull;
      grid.block_order[i] = begin + (mixed >> 17) % (end - begin);
    }
    grid.block_order.resize(sample);
  }
  if (grid.order == Order::Reverse) std::reverse(grid.block_order.begin(), grid.block_order.end());
  if (grid.order == Order::Random) std::shuffle(grid.block_order.begin(), grid.block_order.end(), rng);
  g_grid = &grid;
  g_run = nullptr;
  detail::g_block_dim = launch.block;
  detail::g_grid_dim = g;
  detail::watch_launch_begin();
  if (counting()) detail::counting_launch_begin(launch.kernel, g, launch.block);

  retire_finished_blocks(grid);  // admits the first blocks
  for (;;) {
    BlockRun* run = next_block_to_run(grid);
    if (!run) break;  // every block done, or none can go on
    const unsigned first = take_runnable(*run);
    run->threads[first].worker = idle_worker();
    activate(*run, first);
    switch_context(g_pool.scheduler, g_pool.workers[run->threads[first].worker]->fiber->context());
    // Back here: nothing can run, or a thread faulted.
    if (!grid.fault.empty()) break;
  }
  if (grid.fault.empty() && !grid.resident.empty()) {  // blocks remain, none can go on
    grid.fault = deadlock_message(grid);
    grid.fault_block = grid.resident.front()->watch.index;
  }
  detail::g_block = nullptr;
  detail::g_thread = 0;
  std::string fault;
  if (!grid.fault.empty()) {
    fault = std::string(launch.kernel) + " launched at " + site(launch.file, launch.line) + ", " +
            detail::block_name(grid.fault_block) + ": " + grid.fault;
    // The blocks' fibers stopped mid-thread: start them afresh for the next launch.
    for (auto& b : grid.resident) {
      detail::watch_block_end(b->watch);
      detail::cp_async_block_end(b->watch);
      release_shared(*b);
    }
    g_pool.idle.clear();
    for (auto& w : g_pool.workers) {
      w->fiber->reset();
      g_pool.idle.push_back(w->index);
    }
  }
  detail::watch_launch_end();
  if (detail::g_counters) detail::counting_launch_end(grid.block_order.size());
  g_grid = nullptr;
  g_run = nullptr;
  return fault;
}

}  // namespace simt
