// The SIMT scheduler (simt/scheduler.h): blocks of fibers, barriers, warp operations, block-
// shared memory, and the checks that turn undefined behaviour into a message.
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
using detail::WarpOp;

namespace {

constexpr int kWarpSize = 32;
constexpr size_t kStaticSharedLimit = 48 * 1024;  // static __shared__ per block, as on every GPU since Volta
constexpr unsigned char kSharedFill = 0xff;       // new shared memory reads as NaN (float) or -1 (int)
constexpr unsigned kNone = ~0u;

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
  uint64_t value = 0;
  uint64_t result = 0;
  // a barrier's result (_count/_and/_or)
  int barrier_result = 0;
};

// Lanes of one warp, as bit masks: waiting at a warp operation, and exited.
struct WarpState {
  unsigned waiting = 0;
  unsigned exited = 0;
};

struct SharedAllocation {
  int key;
  const char* file;
  void* ptr;
  size_t bytes;
};

// One block being run.
struct BlockRun {
  const GridLaunch* launch = nullptr;
  Order order = Order::Forward;
  std::mt19937_64* rng = nullptr;
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
  std::vector<SharedAllocation> shared;
  size_t shared_bytes = 0;  // static + dynamic in use
  void* dynamic = nullptr;
  std::string fault;
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

BlockRun* g_run = nullptr;
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

std::string thread_name(const BlockRun& run, unsigned t) {
  const dim3 b = run.launch->block;
  const unsigned x = t % b.x, y = (t / b.x) % b.y, z = t / (b.x * b.y);
  std::string s = "thread (" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) + ")";
  return s;
}

// Makes thread t the running one: its indices and the scheduler's notion of "current".
void activate(BlockRun& run, unsigned t) {
  run.current = t;
  const dim3 b = run.launch->block;
  detail::g_thread_idx = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
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
  batch.clear();
  for (unsigned t = first; t < first + count; ++t)
    if (included(t)) {
      run.threads[t].status = Status::Ready;
      batch.push_back(t);
    }
  if (run.order == Order::Reverse) std::reverse(batch.begin(), batch.end());
  if (run.order == Order::Random) std::shuffle(batch.begin(), batch.end(), *run.rng);
  const bool front = release == Release::Warp && (run.order != Order::Random || (*run.rng)() % 2 == 0);
  if (front)
    run.runnable.insert(run.runnable.begin(), batch.begin(), batch.end());
  else
    run.runnable.insert(run.runnable.end(), batch.begin(), batch.end());
}

unsigned take_runnable(BlockRun& run) {
  if (run.runnable.empty()) return kNone;
  const unsigned t = run.runnable.front();
  run.runnable.pop_front();
  return t;
}

int idle_worker();

// Called on a fiber whose thread cannot go on (it waits, or it exited: `free`): continues with
// the next runnable thread. Returns when this fiber has a thread to run again: at once when the
// next thread is its own or (when free) one not started yet, else when another fiber switches
// back to it. With nothing runnable it switches to the scheduler, which finds the block done
// or deadlocked.
void dispatch(Worker& self, bool free) {
  BlockRun& run = *g_run;
  const unsigned next = take_runnable(run);
  if (next == kNone) {
    if (free) g_pool.idle.push_back(self.index);
    switch_context(self.fiber->context(), g_pool.scheduler);
    return;
  }
  ThreadSlot& slot = run.threads[next];
  if (slot.worker < 0) {  // not started
    if (free) {
      slot.worker = self.index;
      activate(run, next);
      return;
    }
    slot.worker = idle_worker();
  } else if (slot.worker == self.index) {
    activate(run, next);
    return;
  } else if (free) {
    g_pool.idle.push_back(self.index);
  }
  activate(run, next);
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
      (*g_run->launch->body)();
      thread_exited();
    } catch (const ThreadAborted&) {
      switch_context(self->fiber->context(), g_pool.scheduler);  // the block is abandoned
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

// Records the first fault and stops the running thread (its worker returns to the scheduler,
// which abandons the block). Called on the thread's own fiber.
[[noreturn]] void fail(const std::string& what) {
  BlockRun& run = *g_run;
  if (run.fault.empty()) run.fault = what;
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
  run.threads[t].status = Status::Exited;
  ++run.exited;
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
  uint64_t votes = 0;
  for (unsigned l = 0; l < kWarpSize; ++l)
    if ((mask >> l) & 1u && run.threads[base + l].value) votes |= uint64_t{1} << l;
  for (unsigned l = 0; l < kWarpSize; ++l) {
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
    }
  }
  run.warps[base / kWarpSize].waiting &= ~mask;
  make_runnable(run, base, kWarpSize, Release::Warp, [mask, base](unsigned t) { return (mask >> (t - base)) & 1u; });
}

// Runs one block to completion or to its first fault.
void run_block(BlockRun& run) {
  make_runnable(run, 0, run.n, Release::Block, [](unsigned) { return true; });
  const unsigned first = take_runnable(run);
  run.threads[first].worker = idle_worker();
  activate(run, first);
  switch_context(g_pool.scheduler, g_pool.workers[run.threads[first].worker]->fiber->context());
  // Back here: every thread exited, or none can run, or one faulted.
  if (run.fault.empty() && run.exited != run.n)
    run.fault = "deadlock: no thread can run; each thread's state:" + thread_states(run);
}

std::string block_name(uint3 b) {
  return "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) + ")";
}

Schedule g_schedule = schedule_from_environment();
uint64_t g_launches = 0;

}  // namespace

// ---- device-side entry points (simt/device.h) ----

namespace detail {

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int lane_arg, int width, const char* name,
                 const char* file, int line) {
  BlockRun& run = *g_run;
  const unsigned t = run.current;
  ThreadSlot& me = run.threads[t];
  const unsigned lane = t % kWarpSize, base = t - lane;
  WarpState& warp = run.warps[t / kWarpSize];
  const unsigned present = std::min<unsigned>(kWarpSize, run.n - base);
  const unsigned present_mask = present == 32 ? 0xffffffffu : (1u << present) - 1u;
  auto where = [&] { return std::string(name) + " at " + site(file, line) + ": "; };
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
  me.name = name;
  me.file = file;
  me.line = line;
  me.status = Status::AtWarpOp;
  warp.waiting |= 1u << lane;
  if ((warp.waiting & mask) == mask) evaluate_warp_op(run, base, mask);
  wait_here();
  return me.result;
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
    make_runnable(run, 0, run.n, Release::Block, [](unsigned) { return true; });
  }
  wait_here();
  return me.barrier_result;
}

void* static_shared(size_t bytes, int key, const char* file, int line) {
  BlockRun& run = *g_run;
  for (const SharedAllocation& a : run.shared)
    if (a.key == key && (a.file == file || std::strcmp(a.file, file) == 0)) return a.ptr;
  size_t static_bytes = bytes;
  for (const SharedAllocation& a : run.shared) static_bytes += a.bytes;
  if (static_bytes > kStaticSharedLimit)
    fail("__shared__ at " + site(file, line) + ": " + std::to_string(static_bytes) +
         " bytes of static shared memory per block, more than the 48 KiB a block may declare");
  if (run.shared_bytes + bytes > run.launch->shared_limit_bytes)
    fail("__shared__ at " + site(file, line) + ": " + std::to_string(run.shared_bytes + bytes) +
         " bytes of shared memory per block (static and dynamic), more than the " +
         std::to_string(run.launch->shared_limit_bytes) + " this kernel may use");
  // Its own allocation, exactly as large as declared, so AddressSanitizer sees an overrun.
  void* ptr = std::malloc(std::max<size_t>(bytes, 1));
  std::memset(ptr, kSharedFill, bytes);
  run.shared.push_back({key, file, ptr, bytes});
  run.shared_bytes += bytes;
  return ptr;
}

void* dynamic_shared() { return g_run->dynamic; }

void device_fault(const char* what, const char* file, int line) {
  fail(std::string(what) + " at " + site(file, line) + " in " + thread_name(*g_run, g_run->current));
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

std::string run_grid(const GridLaunch& launch) {
  const dim3 g = launch.grid, b = launch.block;
  const uint64_t blocks = uint64_t{g.x} * g.y * g.z;
  const unsigned n = b.x * b.y * b.z;
  std::mt19937_64 rng(g_schedule.seed * 0x9E3779B97F4A7C15ull + g_launches++);

  BlockRun run;
  run.launch = &launch;
  run.order = g_schedule.order;
  run.rng = &rng;
  run.n = n;
  run.threads.resize(n);
  run.warps.resize((n + kWarpSize - 1) / kWarpSize);
  g_run = &run;
  detail::g_block_dim = b;
  detail::g_grid_dim = g;
  // Block order: the whole grid in the schedule's order (a random permutation, when random).
  std::vector<uint64_t> block_order(blocks);
  std::iota(block_order.begin(), block_order.end(), uint64_t{0});
  if (run.order == Order::Reverse) std::reverse(block_order.begin(), block_order.end());
  if (run.order == Order::Random) std::shuffle(block_order.begin(), block_order.end(), rng);

  std::string fault;
  for (uint64_t index : block_order) {
    const uint3 block_idx{static_cast<unsigned>(index % g.x), static_cast<unsigned>((index / g.x) % g.y),
                          static_cast<unsigned>(index / (uint64_t{g.x} * g.y))};
    detail::g_block_idx = block_idx;
    std::fill(run.threads.begin(), run.threads.end(), ThreadSlot{});
    std::fill(run.warps.begin(), run.warps.end(), WarpState{});
    run.runnable.clear();
    run.exited = run.at_barrier = 0;
    run.shared_bytes = launch.dynamic_shared_bytes;
    run.dynamic = nullptr;
    if (launch.dynamic_shared_bytes > 0) {
      run.dynamic = std::malloc(launch.dynamic_shared_bytes);
      std::memset(run.dynamic, kSharedFill, launch.dynamic_shared_bytes);
    }
    run_block(run);
    for (const SharedAllocation& a : run.shared) std::free(a.ptr);
    run.shared.clear();
    std::free(run.dynamic);
    if (!run.fault.empty()) {
      fault = std::string(launch.kernel) + " launched at " + site(launch.file, launch.line) + ", " +
              block_name(block_idx) + ": " + run.fault;
      // The block's fibers stopped mid-thread: start them afresh for the next launch.
      g_pool.idle.clear();
      for (auto& w : g_pool.workers) {
        w->fiber->reset();
        g_pool.idle.push_back(w->index);
      }
      break;
    }
  }
  g_run = nullptr;
  return fault;
}

}  // namespace simt
