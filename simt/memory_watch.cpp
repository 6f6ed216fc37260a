// The checks of every access a kernel thread makes (simt/memory_watch.h): racecheck on shared
// memory, initcheck and the cross-block fence check on device memory, and the counting of
// both (simt/launch_counters.h).
#include "simt/memory_watch.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "simt/device_memory.h"
#include "simt/launch_counters.h"
#include "simt/symbolize.h"

namespace simt::detail {

extern cuda_api::dim3 g_grid_dim;  // the launch's gridDim (simt/device.h)

BlockWatch* g_block = nullptr;
unsigned g_thread = 0;
bool g_in_atomic = false;

namespace {

constexpr uint16_t kNobody = 0xffff;
constexpr uint16_t kManyReaders = 0xfffe;
constexpr uint16_t kManyWarps = 0xffff;
constexpr unsigned kWarp = 32;

// TINYTRAIN_SIMT_CHECKS=0 turns racecheck, initcheck and the fence check off (a long run that
// only wants counts); anything else, or nothing, leaves them on.
bool checks_from_environment() {
  const char* v = std::getenv("TINYTRAIN_SIMT_CHECKS");
  return !(v && std::strcmp(v, "0") == 0);
}
bool g_checks = checks_from_environment();

uint32_t g_next_serial = 1;  // block runs, for racecheck cells
uint32_t g_launch = 0;       // launches, for the fence check's words
uint32_t g_clock = 1;        // the fence check's clock: it ticks at every fence and atomic

// A block's fences and atomics in the current launch, for the fence check.
struct Event {
  uint32_t time;
  uint32_t epoch;
  uint16_t thread;
  bool fence;  // else an atomic
};
std::unordered_map<uint64_t, std::vector<Event>> g_events;  // block -> its events, in time order

// Racecheck cells are reused across blocks: a cell of another run is told apart by its serial.
std::vector<std::unique_ptr<RaceCell[]>> g_cells_made;
std::unordered_multimap<size_t, RaceCell*> g_free_cells;  // by length

RaceCell* take_cells(size_t bytes) {
  auto found = g_free_cells.find(bytes);
  if (found != g_free_cells.end()) {
    RaceCell* cells = found->second;
    g_free_cells.erase(found);
    return cells;
  }
  g_cells_made.push_back(std::make_unique<RaceCell[]>(bytes));
  return g_cells_made.back().get();
}

uint32_t sync_count(const BlockWatch& b, unsigned thread) {
  return b.syncs.empty() ? 0 : b.syncs[thread / kWarp].count;
}

// Is an access of `earlier` (at its warp's __syncwarp count `earlier_sync`) ordered before one
// of `later`, both in the same barrier interval? Only a __syncwarp both took part in since.
bool ordered(const BlockWatch& b, unsigned earlier, uint32_t earlier_sync, unsigned later) {
  if (earlier == later) return true;
  if (earlier / kWarp != later / kWarp || b.syncs.empty()) return false;
  return b.syncs[later / kWarp].together[later % kWarp][earlier % kWarp] > earlier_sync;
}

std::string shared_place(const SharedArray& a, size_t offset) {
  std::string where = "byte " + std::to_string(offset) + " of ";
  if (a.key < 0) return where + "the dynamic shared memory";
  const char* base = std::strrchr(a.file, '/');
  return where + "the __shared__ array declared at " + (base ? base + 1 : a.file) + ":" + std::to_string(a.line);
}

[[noreturn]] void report_race(const BlockWatch& b, const SharedArray& a, size_t offset, const char* hazard,
                              unsigned thread, const char* doing, uint16_t site, unsigned other,
                              const char* other_did, uint16_t other_site) {
  fault_in_thread(std::string("shared-memory race (racecheck, ") + hazard + "): " + thread_name(b, thread) + " " +
                  doing + " " + shared_place(a, offset) + " at " + site_line(site) + ", which " +
                  (other == kManyReaders ? std::string("other threads") : thread_name(b, other)) + " " + other_did +
                  " at " + site_line(other_site) +
                  " with no __syncthreads between them (nor a __syncwarp of both, in one warp)");
}

void check_shared(BlockWatch& b, SharedArray& a, const char* addr, size_t bytes, AccessKind kind, const void* pc) {
  if (!a.cells) a.cells = take_cells(a.bytes);
  const unsigned u = g_thread;
  const uint32_t sync = sync_count(b, u);
  const uint16_t site = site_of(pc);
  const size_t first = static_cast<size_t>(addr - a.begin);
  for (size_t i = first; i < first + bytes; ++i) {
    RaceCell& c = a.cells[i];
    if (c.serial != b.serial) {
      c = RaceCell{};
      c.serial = b.serial;
      c.writer = c.reader = kNobody;
    }
    const bool written_now = c.writer != kNobody && c.write_epoch == b.epoch;
    if (kind == AccessKind::Read) {
      if (written_now && !ordered(b, c.writer, c.write_sync, u))
        report_race(b, a, i, "read after write", u, "reads", site, c.writer, "wrote", c.write_site);
      if (c.reader == kNobody || c.read_epoch != b.epoch || c.reader == u) {
        c.reader = static_cast<uint16_t>(u);
        c.read_warp = static_cast<uint16_t>(u / kWarp);
      } else {
        c.reader = kManyReaders;
        if (c.read_warp != u / kWarp) c.read_warp = kManyWarps;
      }
      c.read_epoch = b.epoch;
      c.read_sync = sync;
      c.read_site = site;
      continue;
    }
    if (written_now && !ordered(b, c.writer, c.write_sync, u))
      report_race(b, a, i, "write after write", u, "writes", site, c.writer, "wrote", c.write_site);
    if (c.reader != kNobody && c.read_epoch == b.epoch) {
      bool after_reads;
      if (c.reader == kManyReaders)  // ordered only by a whole-warp __syncwarp since, all in u's warp
        after_reads = c.read_warp == u / kWarp && !b.syncs.empty() &&
                      b.syncs[u / kWarp].whole_warp[u % kWarp] > c.read_sync;
      else
        after_reads = ordered(b, c.reader, c.read_sync, u);
      if (!after_reads) report_race(b, a, i, "write after read", u, "writes", site, c.reader, "read", c.read_site);
    }
    c.writer = static_cast<uint16_t>(u);
    c.write_epoch = b.epoch;
    c.write_sync = sync;
    c.write_site = site;
    c.reader = kNobody;
  }
}

std::string device_place(const DeviceAllocation& a, const char* addr, size_t bytes) {
  return std::to_string(bytes) + " bytes at offset " + std::to_string(addr - a.begin) + " of a " +
         std::to_string(a.bytes) + "-byte device allocation";
}

// The earliest release of `write` by its block: a fence after the write (by the writing
// thread, or by any thread after a barrier that followed it) and then an atomic. 0: none.
uint32_t release_time(const WordWrite& write) {
  auto found = g_events.find(write.block);
  if (found == g_events.end()) return 0;
  bool fenced = false;
  for (const Event& e : found->second) {
    if (e.fence && e.time > write.time && (e.thread == write.thread || e.epoch > write.epoch)) fenced = true;
    if (!e.fence && fenced) return e.time;
  }
  return 0;
}

// Has the reading block acquired what was released at `released`: an atomic of its own after
// it, then a fence after that atomic, made by the reading thread or before a barrier since?
bool acquired(const BlockWatch& b, unsigned thread, uint32_t released) {
  auto found = g_events.find(b.linear);
  if (found == g_events.end()) return false;
  bool ticket = false;
  for (const Event& e : found->second) {
    if (!e.fence && e.time > released) ticket = true;
    if (e.fence && ticket && (e.thread == thread || e.epoch < b.epoch)) return true;
  }
  return false;
}

void check_device(BlockWatch& b, DeviceAllocation& a, const char* addr, size_t bytes, AccessKind kind,
                  const void* pc) {
  const unsigned u = g_thread;
  if (kind == AccessKind::Read) {
    const int64_t unwritten = first_unwritten(addr, bytes);
    if (unwritten >= 0)
      fault_in_thread("uninitialized device memory (initcheck): " + thread_name(b, u) + " reads " +
                      device_place(a, addr, bytes) + " at " + site_line(site_of(pc)) + ", and its byte " +
                      std::to_string(unwritten) + " was never written (nor copied or memset) since cudaMalloc");
  } else {
    mark_written(addr, bytes);
  }
  if (g_in_atomic) {  // atomics act at the coherence point: they read fresh values; a ticket
    if (kind == AccessKind::Read) g_events[b.linear].push_back({++g_clock, b.epoch, static_cast<uint16_t>(u), false});
    return;
  }
  const size_t first_word = static_cast<size_t>(addr - a.begin) / 4;
  const size_t last_word = (static_cast<size_t>(addr - a.begin) + bytes - 1) / 4;
  for (size_t w = first_word; w <= last_word; ++w) {
    const char* word_addr = a.begin + 4 * w;
    const size_t lo = std::max<size_t>(w * 4, static_cast<size_t>(addr - a.begin)) - w * 4;
    const size_t hi = std::min<size_t>(w * 4 + 4, static_cast<size_t>(addr - a.begin) + bytes) - w * 4;
    const uint8_t mask = static_cast<uint8_t>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
    if (kind == AccessKind::Write) {
      WordWrite& word = word_of(a, word_addr);
      word.launch = g_launch;
      word.block = static_cast<uint32_t>(b.linear);
      word.time = g_clock;
      word.epoch = b.epoch;
      word.thread = static_cast<uint16_t>(u);
      word.site = site_of(pc);
      word.bytes = mask;
      continue;
    }
    const WordWrite* word = word_if_written(a, word_addr);
    if (!word || word->launch != g_launch || word->block == static_cast<uint32_t>(b.linear) || !(word->bytes & mask))
      continue;
    const uint32_t released = release_time(*word);
    const cuda_api::dim3 g = g_grid_dim;
    const cuda_api::uint3 writer_block{word->block % g.x, (word->block / g.x) % g.y, word->block / (g.x * g.y)};
    const std::string writer =
        block_name(writer_block) + " (" + thread_name(b, word->thread) + ", at " + site_line(word->site) + ")";
    if (released == 0)
      fault_in_thread("stale read across blocks (fence check): " + thread_name(b, u) + " reads " +
                      device_place(a, addr, bytes) + " at " + site_line(site_of(pc)) + ", which " + writer +
                      " wrote in this launch with no __threadfence between that write and an atomic after it: on "
                      "a GPU the read may still see the old value");
    if (!acquired(b, u, released))
      fault_in_thread("stale read across blocks (fence check): " + thread_name(b, u) + " reads " +
                      device_place(a, addr, bytes) + " at " + site_line(site_of(pc)) + ", which " + writer +
                      " wrote and released (__threadfence, then an atomic), but this block has no __threadfence "
                      "between an atomic after that release and this read: on a GPU it may still see the old value");
  }
}

}  // namespace

void atomic_begins() { g_in_atomic = true; }
void atomic_ends() { g_in_atomic = false; }

bool memory_watch_available() { return TINYTRAIN_SIMT_WATCH; }

unsigned BlockWatch::lanes_in_warp(unsigned warp) const {
  const unsigned n = dims.x * dims.y * dims.z;
  return std::min(kWarp, n - warp * kWarp);
}

std::string block_name(cuda_api::uint3 b) {
  return "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) + ")";
}

std::string thread_name(const BlockWatch& block, unsigned t) {
  const cuda_api::dim3 b = block.dims;
  const unsigned x = t % b.x, y = (t / b.x) % b.y, z = t / (b.x * b.y);
  return "thread (" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) + ")";
}

const SharedArray* shared_array_of(const void* addr, size_t bytes) {
  if (!g_block) return nullptr;
  const char* c = static_cast<const char*>(addr);
  for (const SharedArray& a : g_block->arrays)
    if (c >= a.begin && static_cast<size_t>(c - a.begin) + bytes <= a.bytes) return &a;
  return nullptr;
}

void watch_access(const void* addr, size_t bytes, AccessKind kind, const void* pc) {
  BlockWatch* b = g_block;
  if (!b || (!g_checks && !g_counters)) return;
  const char* c = static_cast<const char*>(addr);
  for (SharedArray& a : b->arrays) {
    if (c < a.begin || static_cast<size_t>(c - a.begin) >= a.bytes) continue;
    if (g_checks && !g_in_atomic) check_shared(*b, a, c, std::min(bytes, a.bytes - static_cast<size_t>(c - a.begin)), kind, pc);
    if (g_counters) count_access(*b, g_thread, addr, bytes, kind, /*shared=*/true, pc);
    return;
  }
  DeviceAllocation* a = find_allocation(addr, bytes);
  if (!a) return;  // the thread's own stack, the kernel's arguments, host memory
  if (g_checks) check_device(*b, *a, c, bytes, kind, pc);
  if (g_counters) {
    if (g_in_atomic) {
      if (kind == AccessKind::Read) ++g_counters->global_atomics;
    } else {
      count_access(*b, g_thread, addr, bytes, kind, /*shared=*/false, pc);
    }
  }
}

void watch_launch_begin(uint64_t) {
  ++g_launch;
  g_clock = 1;
  g_events.clear();
}

void watch_launch_end() { recycle_launch_words(); }

void watch_block_begin(BlockWatch& block) {
  block.serial = g_next_serial++;
  block.epoch = 0;
  block.syncs.clear();
  block.access_seq.assign(block.dims.x * block.dims.y * block.dims.z, 0);
}

void watch_block_end(BlockWatch& block) {
  for (SharedArray& a : block.arrays)
    if (a.cells) {
      g_free_cells.emplace(a.bytes, a.cells);
      a.cells = nullptr;
    }
}

void watch_barrier_opened(BlockWatch& block) { ++block.epoch; }

void watch_syncwarp(BlockWatch& block, unsigned warp, unsigned mask) {
  if (block.syncs.empty()) block.syncs.resize((block.dims.x * block.dims.y * block.dims.z + kWarp - 1) / kWarp);
  WarpSyncs& s = block.syncs[warp];
  const uint32_t now = ++s.count;
  for (unsigned a = 0; a < kWarp; ++a) {
    if (!((mask >> a) & 1u)) continue;
    for (unsigned b = 0; b < kWarp; ++b)
      if ((mask >> b) & 1u) s.together[a][b] = now;
  }
  const unsigned lanes = block.lanes_in_warp(warp);
  const unsigned whole = lanes == kWarp ? 0xffffffffu : (1u << lanes) - 1u;
  if ((mask & whole) == whole)
    for (unsigned a = 0; a < lanes; ++a) s.whole_warp[a] = now;
}

void watch_fence() {
  if (g_counters) ++g_counters->fences;
  if (!g_block || !g_checks) return;
  g_events[g_block->linear].push_back({++g_clock, g_block->epoch, static_cast<uint16_t>(g_thread), true});
}

}  // namespace simt::detail

namespace simt {
void set_checks(bool on) { detail::g_checks = on; }
bool checks_on() { return detail::g_checks; }
}  // namespace simt
