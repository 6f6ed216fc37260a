// The checks of every access a kernel thread makes (simt/memory_watch.h): racecheck on shared
// memory, initcheck and the cross-block fence check on device memory, and the counting of
// both (simt/launch_counters.h).
#include "simt/memory_watch.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <array>
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
const char* g_stack_bottom = nullptr;
size_t g_stack_bytes = 0;
unsigned g_thread = 0;
bool g_in_atomic = false;

namespace {

constexpr uint16_t kNobody = 0xffff;
constexpr uint16_t kManyReaders = 0xfffe;
constexpr uint16_t kManyWarps = 0xffff;
constexpr unsigned kWarp = 32;

// TINYTRAIN_SIMT_CHECKS: unset or "all", every check; "memory", the device-memory checks
// (initcheck, the fence check) without racecheck, for long end-to-end runs whose kernels the
// kernel suites race-check; "0", none (a run that only wants counts).
struct CheckChoice {
  bool race, memory;
};
CheckChoice checks_from_environment() {
  const char* v = std::getenv("TINYTRAIN_SIMT_CHECKS");
  if (!v || !*v || std::strcmp(v, "all") == 0) return {true, true};
  if (std::strcmp(v, "memory") == 0) return {false, true};
  if (std::strcmp(v, "0") == 0) return {false, false};
  std::fprintf(stderr, "simt: TINYTRAIN_SIMT_CHECKS=%s is not all, memory or 0; every check is on\n", v);
  return {true, true};
}
const CheckChoice g_choice = checks_from_environment();
bool g_racecheck = g_choice.race;
bool g_memcheck = g_choice.memory;

}  // namespace

bool g_checks = g_racecheck || g_memcheck;

namespace {

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

// Cells for an array of `words` 4-byte words, from the free list when one that long is there.
RaceCell* take_cells(size_t words) {
  auto found = g_free_cells.find(words);
  if (found != g_free_cells.end()) {
    RaceCell* cells = found->second;
    g_free_cells.erase(found);
    return cells;
  }
  g_cells_made.push_back(std::make_unique<RaceCell[]>(words));
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

// One access of the running thread to the bytes a cell covers: the hazards it makes with the
// cell's history, then the history updated. `offset`: the first byte, for the report.
struct Access {
  const BlockWatch& b;
  const SharedArray& a;
  unsigned thread;
  uint32_t sync;
  uint16_t site;
  AccessKind kind;
};

[[noreturn]] void report_race(const Access& x, size_t offset, const char* hazard, unsigned other,
                              const char* other_did, uint16_t other_site) {
  const bool read = x.kind == AccessKind::Read;
  fault_in_thread(std::string("shared-memory race (racecheck, ") + hazard + "): " + thread_name(x.b, x.thread) + " " +
                  (read ? "reads " : "writes ") + shared_place(x.a, offset) + " at " + site_line(x.site) + ", which " +
                  (other == kManyReaders ? std::string("other threads") : thread_name(x.b, other)) + " " + other_did +
                  " at " + site_line(other_site) +
                  " with no __syncthreads between them (nor a __syncwarp of both, in one warp)");
}

void visit(RaceCell& c, const Access& x, size_t offset) {
  const BlockWatch& b = x.b;
  const unsigned u = x.thread;
  const bool written_now = c.writer != kNobody && c.write_epoch == b.epoch;
  if (x.kind == AccessKind::Read) {
    if (written_now && !ordered(b, c.writer, c.write_sync, u))
      report_race(x, offset, "read after write", c.writer, "wrote", c.write_site);
    if (c.reader == kNobody || c.read_epoch != b.epoch || c.reader == u) {
      c.reader = static_cast<uint16_t>(u);
      c.read_warp = static_cast<uint16_t>(u / kWarp);
    } else {
      c.reader = kManyReaders;
      if (c.read_warp != u / kWarp) c.read_warp = kManyWarps;
    }
    c.read_epoch = b.epoch;
    c.read_sync = x.sync;
    c.read_site = x.site;
    return;
  }
  if (written_now && !ordered(b, c.writer, c.write_sync, u))
    report_race(x, offset, "write after write", c.writer, "wrote", c.write_site);
  if (c.reader != kNobody && c.read_epoch == b.epoch) {
    bool after_reads;
    if (c.reader == kManyReaders)  // ordered only by a whole-warp __syncwarp since, all in u's warp
      after_reads =
          c.read_warp == u / kWarp && !b.syncs.empty() && b.syncs[u / kWarp].whole_warp[u % kWarp] > c.read_sync;
    else
      after_reads = ordered(b, c.reader, c.read_sync, u);
    if (!after_reads) report_race(x, offset, "write after read", c.reader, "read", c.read_site);
  }
  c.writer = static_cast<uint16_t>(u);
  c.write_epoch = b.epoch;
  c.write_sync = x.sync;
  c.write_site = x.site;
  c.reader = kNobody;
}

// Has another thread than `u` touched the cell in the current barrier interval?
bool others_now(const RaceCell& c, const BlockWatch& b, unsigned u) {
  return (c.writer != kNobody && c.write_epoch == b.epoch && c.writer != u) ||
         (c.reader != kNobody && c.read_epoch == b.epoch && c.reader != u);
}

// A cell holds the history of a whole 4-byte word while every thread touching it in a barrier
// interval touches the same bytes of it (floats, ints: nearly always). When two threads touch
// different bytes of one word (bf16 neighbours), the word is split into four byte cells, each
// starting from the word's history, kept beside the block (BlockWatch::split_words).
void check_shared(BlockWatch& b, SharedArray& a, const char* addr, size_t bytes, AccessKind kind, const void* pc) {
  if (!a.cells) a.cells = take_cells((a.bytes + 3) / 4);
  const Access x{b, a, g_thread, sync_count(b, g_thread), site_of(pc), kind};
  const size_t first = static_cast<size_t>(addr - a.begin), end = first + bytes;
  for (size_t w = first / 4; w * 4 < end; ++w) {
    const size_t lo = std::max(first, w * 4), hi = std::min(end, w * 4 + 4);
    const uint8_t mask = static_cast<uint8_t>(((1u << (hi - w * 4)) - 1u) & ~((1u << (lo - w * 4)) - 1u));
    RaceCell& c = a.cells[w];
    if (c.serial != b.serial) {
      c = RaceCell{};
      c.serial = b.serial;
      c.writer = c.reader = kNobody;
    }
    if (!c.split) {
      const bool active = (c.writer != kNobody && c.write_epoch == b.epoch) || (c.reader != kNobody && c.read_epoch == b.epoch);
      if (!active) c.bytes = mask;
      if (c.bytes == mask || !others_now(c, b, x.thread)) {
        c.bytes |= mask;
        visit(c, x, lo);
        continue;
      }
      // Each byte starts from the word's history if this interval's accesses touched it, else
      // fresh (what came before the interval's barrier cannot race with what comes after).
      std::array<RaceCell, 4>& split = b.split_words[&c];
      for (int i = 0; i < 4; ++i) {
        split[i] = c;
        if (!((c.bytes >> i) & 1u)) split[i].writer = split[i].reader = kNobody;
      }
      c.split = true;
    }
    std::array<RaceCell, 4>& split = b.split_words[&c];
    for (size_t i = lo; i < hi; ++i) visit(split[i - w * 4], x, i);
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
    const int64_t unwritten = first_unwritten(a, addr, bytes);
    if (unwritten >= 0)
      fault_in_thread("uninitialized device memory (initcheck): " + thread_name(b, u) + " reads " +
                      device_place(a, addr, bytes) + " at " + site_line(site_of(pc)) + ", and its byte " +
                      std::to_string(unwritten) + " was never written (nor copied or memset) since cudaMalloc");
  } else {
    mark_written(a, addr, bytes);
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
bool kernel_writes_tracked() { return TINYTRAIN_SIMT_WATCH && g_memcheck; }

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
  const char* c = static_cast<const char*>(addr);
  if (static_cast<size_t>(c - g_stack_bottom) < g_stack_bytes) return;  // the thread's own locals
  for (SharedArray& a : b->arrays) {
    if (c < a.begin || static_cast<size_t>(c - a.begin) >= a.bytes) continue;
    if (g_racecheck && !g_in_atomic) check_shared(*b, a, c, std::min(bytes, a.bytes - static_cast<size_t>(c - a.begin)), kind, pc);
    if (g_counters) count_access(*b, g_thread, addr, bytes, kind, /*shared=*/true, pc);
    return;
  }
  DeviceAllocation* a = find_allocation(addr, bytes);
  if (!a) return;  // the thread's own stack, the kernel's arguments, host memory
  if (g_memcheck) check_device(*b, *a, c, bytes, kind, pc);
  if (g_counters) {
    if (g_in_atomic) {
      if (kind == AccessKind::Read) ++g_counters->global_atomics;
    } else {
      count_access(*b, g_thread, addr, bytes, kind, /*shared=*/false, pc);
    }
  }
}

void watch_launch_begin() {
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
      g_free_cells.emplace((a.bytes + 3) / 4, a.cells);
      a.cells = nullptr;
    }
  block.split_words.clear();
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
  if (!g_block || !g_memcheck) return;
  g_events[g_block->linear].push_back({++g_clock, g_block->epoch, static_cast<uint16_t>(g_thread), true});
}

}  // namespace simt::detail

namespace simt {
void set_checks(bool on) { detail::g_checks = detail::g_racecheck = detail::g_memcheck = on; }
bool checks_on() { return detail::g_checks; }
}  // namespace simt
