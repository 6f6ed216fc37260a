// Per-launch counters (simt/launch_counters.h). A warp's accesses of one instruction are put
// together by (block run, warp, the thread's access count, the instruction's address): lanes of
// a converged warp run the same instructions, so the k-th access of each lane at one address is
// one warp-wide request, whichever order the schedule ran the lanes in. The groups are measured
// when the block ends.
#include "simt/launch_counters.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "simt/op_counts.h"

namespace simt {

bool counting_available() { return detail::memory_watch_available() && op_counts_available(); }

void LaunchCounters::add(const LaunchCounters& o) {
  global_load_bytes += o.global_load_bytes;
  global_store_bytes += o.global_store_bytes;
  global_load_requests += o.global_load_requests;
  global_store_requests += o.global_store_requests;
  global_load_sectors += o.global_load_sectors;
  global_store_sectors += o.global_store_sectors;
  global_atomics += o.global_atomics;
  shared_load_bytes += o.shared_load_bytes;
  shared_store_bytes += o.shared_store_bytes;
  shared_load_requests += o.shared_load_requests;
  shared_store_requests += o.shared_store_requests;
  shared_load_wavefronts += o.shared_load_wavefronts;
  shared_store_wavefronts += o.shared_store_wavefronts;
  fp32_ops += o.fp32_ops;
  fp64_ops += o.fp64_ops;
  special_ops += o.special_ops;
  statements += o.statements;
  mma_bf16 += o.mma_bf16;
  mma_fp16 += o.mma_fp16;
  mma_tf32 += o.mma_tf32;
  ldmatrix += o.ldmatrix;
  cp_async_bytes += o.cp_async_bytes;
  shuffles += o.shuffles;
  syncwarps += o.syncwarps;
  barriers += o.barriers;
  fences += o.fences;
  blocks += o.blocks;
  threads_per_block = std::max(threads_per_block, o.threads_per_block);
  shared_bytes_per_block = std::max(shared_bytes_per_block, o.shared_bytes_per_block);
}

void LaunchCounters::scale(double f) {
  for (uint64_t* c : {&global_load_bytes, &global_store_bytes, &global_load_requests, &global_store_requests,
                      &global_load_sectors, &global_store_sectors, &global_atomics, &shared_load_bytes,
                      &shared_store_bytes, &shared_load_requests, &shared_store_requests, &shared_load_wavefronts,
                      &shared_store_wavefronts, &fp32_ops, &fp64_ops, &special_ops, &statements, &mma_bf16, &mma_fp16,
                      &mma_tf32, &ldmatrix, &cp_async_bytes, &shuffles, &syncwarps, &barriers, &fences})
    *c = static_cast<uint64_t>(static_cast<double>(*c) * f + 0.5);
}

namespace {

constexpr unsigned kWarp = 32;
constexpr unsigned kBanks = 32;     // 4-byte banks of shared memory
constexpr uint64_t kSectorBytes = 32;

bool g_counting = false;
uint64_t g_sample_blocks = 0;
std::vector<LaunchRecord> g_records;
LaunchRecord g_current;
OpCounts g_ops_at_launch;

struct GroupKey {
  uint32_t warp, seq;
  const void* pc;
  bool operator==(const GroupKey& o) const { return warp == o.warp && seq == o.seq && pc == o.pc; }
};
struct GroupKeyHash {
  size_t operator()(const GroupKey& k) const {
    return std::hash<const void*>()(k.pc) ^ (size_t{k.warp} << 40) ^ (size_t{k.seq} * 0x9E3779B97F4A7C15ull);
  }
};
struct LaneAccess {
  uintptr_t addr;
  uint32_t bytes;
  uint32_t lane;
};
// One instruction of one warp: its lanes' accesses.
struct Group {
  bool shared = false;
  detail::AccessKind kind = detail::AccessKind::Read;
  std::vector<LaneAccess> lanes;
};
using BlockGroups = std::unordered_map<GroupKey, Group, GroupKeyHash>;
std::unordered_map<uint32_t, BlockGroups> g_groups;  // by block run (serial): blocks interleave

// Wavefronts of one pass of lanes over the banks: the most distinct 4-byte words any bank holds
// (two lanes reading one word share it: a broadcast, no conflict).
uint64_t pass_wavefronts(const LaneAccess* begin, const LaneAccess* end) {
  std::vector<uintptr_t> words[kBanks];
  for (const LaneAccess* a = begin; a != end; ++a)
    for (uintptr_t w = a->addr / 4; w <= (a->addr + a->bytes - 1) / 4; ++w) {
      std::vector<uintptr_t>& bank = words[w % kBanks];
      if (std::find(bank.begin(), bank.end(), w) == bank.end()) bank.push_back(w);
    }
  size_t most = 0;
  for (const auto& bank : words) most = std::max(most, bank.size());
  return most;
}

// A warp's shared access is served in passes of 128 bytes: all 32 lanes for accesses of up to
// 4 bytes, half-warps for 8 bytes, quarter-warps for 16 (the CUDA programming guide's
// shared-memory rules for compute capability 5.x and later); each pass takes as many wavefronts
// as its worst bank needs.
uint64_t shared_wavefronts(std::vector<LaneAccess>& lanes) {
  uint32_t widest = 0;
  for (const LaneAccess& a : lanes) widest = std::max(widest, a.bytes);
  const uint32_t lanes_per_pass = widest <= 4 ? 32 : widest <= 8 ? 16 : 8;
  std::sort(lanes.begin(), lanes.end(), [](const LaneAccess& a, const LaneAccess& b) { return a.lane < b.lane; });
  uint64_t wavefronts = 0;
  for (auto first = lanes.begin(); first != lanes.end();) {
    const uint32_t pass = first->lane / lanes_per_pass;
    auto last = std::find_if(first, lanes.end(), [&](const LaneAccess& a) { return a.lane / lanes_per_pass != pass; });
    wavefronts += pass_wavefronts(&*first, &*first + (last - first));
    first = last;
  }
  return wavefronts;
}

uint64_t distinct_sectors(const std::vector<LaneAccess>& lanes) {
  std::vector<uintptr_t> sectors;
  for (const LaneAccess& a : lanes)
    for (uintptr_t s = a.addr / kSectorBytes; s <= (a.addr + a.bytes - 1) / kSectorBytes; ++s) sectors.push_back(s);
  std::sort(sectors.begin(), sectors.end());
  return static_cast<uint64_t>(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
}

void measure(Group& g, LaunchCounters& c) {
  uint64_t bytes = 0;
  for (const LaneAccess& a : g.lanes) bytes += a.bytes;
  const bool load = g.kind == detail::AccessKind::Read;
  if (g.shared) {
    const uint64_t wavefronts = shared_wavefronts(g.lanes);
    (load ? c.shared_load_bytes : c.shared_store_bytes) += bytes;
    (load ? c.shared_load_requests : c.shared_store_requests) += 1;
    (load ? c.shared_load_wavefronts : c.shared_store_wavefronts) += wavefronts;
  } else {
    (load ? c.global_load_bytes : c.global_store_bytes) += bytes;
    (load ? c.global_load_requests : c.global_store_requests) += 1;
    (load ? c.global_load_sectors : c.global_store_sectors) += distinct_sectors(g.lanes);
  }
}

}  // namespace

void set_counting(bool on) { g_counting = on; }
bool counting() { return g_counting; }
void set_block_sampling(uint64_t max_blocks) { g_sample_blocks = max_blocks; }
uint64_t block_sampling() { return g_sample_blocks; }

std::vector<LaunchRecord> take_launch_records() {
  std::vector<LaunchRecord> out;
  out.swap(g_records);
  return out;
}

void record_library_call(const char* name, double flops, uint64_t bytes, const std::string& precision) {
  if (!g_counting) return;
  LaunchRecord r;
  r.kernel = name;
  r.library = true;
  r.library_flops = flops;
  r.library_bytes = bytes;
  r.library_precision = precision;
  g_records.push_back(std::move(r));
}

namespace detail {

LaunchCounters* g_counters = nullptr;

void counting_launch_begin(const char* kernel, cuda_api::dim3 grid, cuda_api::dim3 block) {
  g_current = LaunchRecord{};
  g_current.kernel = kernel;
  g_current.grid = grid;
  g_current.block = block;
  g_current.counters.blocks = uint64_t{grid.x} * grid.y * grid.z;
  g_current.counters.threads_per_block = block.x * block.y * block.z;
  g_counters = &g_current.counters;
  g_ops_at_launch = read_op_counts();
}

void counting_launch_end(uint64_t blocks_run) {
  const OpCounts now = read_op_counts();
  LaunchCounters& c = g_current.counters;
  c.fp32_ops = now.fp32 - g_ops_at_launch.fp32;
  c.fp64_ops = now.fp64 - g_ops_at_launch.fp64;
  c.special_ops = now.special - g_ops_at_launch.special;
  c.statements = now.statements - g_ops_at_launch.statements;
  for (auto& [serial, groups] : g_groups)  // blocks a fault abandoned
    for (auto& [key, group] : groups) measure(group, c);
  g_groups.clear();
  g_current.blocks_run = blocks_run;
  if (blocks_run > 0 && blocks_run < c.blocks) c.scale(static_cast<double>(c.blocks) / static_cast<double>(blocks_run));
  g_counters = nullptr;
  g_records.push_back(std::move(g_current));
}

void count_access(BlockWatch& block, unsigned thread, const void* addr, size_t bytes, AccessKind kind, bool shared,
                  const void* pc) {
  const uint32_t seq = block.access_seq[thread]++;
  Group& g = g_groups[block.serial][GroupKey{thread / kWarp, seq, pc}];
  g.shared = shared;
  g.kind = kind;
  g.lanes.push_back({reinterpret_cast<uintptr_t>(addr), static_cast<uint32_t>(bytes), thread % kWarp});
}

void count_shared_rows(const void* const* rows, int count, size_t row_bytes) {
  std::vector<LaneAccess> lanes;
  for (int i = 0; i < count; ++i)
    lanes.push_back({reinterpret_cast<uintptr_t>(rows[i]), static_cast<uint32_t>(row_bytes), static_cast<uint32_t>(i)});
  g_counters->shared_load_bytes += static_cast<uint64_t>(count) * row_bytes;
  g_counters->shared_load_requests += 1;
  g_counters->shared_load_wavefronts += shared_wavefronts(lanes);
}

void counting_block_end(BlockWatch& block, size_t shared_bytes) {
  auto found = g_groups.find(block.serial);
  if (found != g_groups.end()) {
    for (auto& [key, group] : found->second) measure(group, *g_counters);
    g_groups.erase(found);
  }
  g_counters->shared_bytes_per_block = std::max(g_counters->shared_bytes_per_block, shared_bytes);
}

}  // namespace detail

}  // namespace simt
