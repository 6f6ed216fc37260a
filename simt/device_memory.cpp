// The emulated device's allocations and their shadow state (simt/device_memory.h).
#include "simt/device_memory.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>

namespace simt::detail {

namespace {

std::map<const char*, DeviceAllocation> g_allocations;  // by start
size_t g_allocated = 0;
// The allocations found last, most recent first: a kernel touches a few buffers over and over,
// so nearly every lookup ends here instead of in the map.
constexpr int kRecent = 6;
DeviceAllocation* g_recent[kRecent] = {};
// Gaps between allocations where an address was found in none, most recent first: kernels read
// host memory at every step too (threadIdx and the other built-ins are the emulator's globals,
// their arguments live in the launch's closure), and those lookups end here.
struct Gap {
  const char* begin = nullptr;
  const char* end = nullptr;
};
constexpr int kGaps = 4;
Gap g_gaps[kGaps];

void forget_gaps() {
  for (Gap& g : g_gaps) g = Gap{};
}
// Chunks of WordWrite: every one made (owned here, kept for reuse), the free ones, and those
// handed out this launch (allocation, chunk index).
std::vector<std::unique_ptr<WordWrite[]>> g_chunks_made;
std::vector<WordWrite*> g_free_chunks;
std::vector<std::pair<DeviceAllocation*, size_t>> g_chunks_in_use;

bool contains(const DeviceAllocation& a, const char* c, size_t bytes) {
  return c >= a.begin && static_cast<size_t>(c - a.begin) <= a.bytes && bytes <= a.bytes - static_cast<size_t>(c - a.begin);
}

}  // namespace

void register_allocation(void* p, size_t bytes) {
  DeviceAllocation& a = g_allocations[static_cast<const char*>(p)];
  a.begin = static_cast<char*>(p);
  a.bytes = bytes;
  a.written.assign((bytes + 7) / 8, 0);
  a.chunks.assign((bytes + kChunkBytes - 1) / kChunkBytes, nullptr);
  g_allocated += bytes;
  forget_gaps();
}

void unregister_allocation(const void* p) {
  auto it = g_allocations.find(static_cast<const char*>(p));
  if (it == g_allocations.end()) return;
  for (DeviceAllocation*& r : g_recent)
    if (r == &it->second) r = nullptr;
  // Its chunks of this launch's words go back to the free list with it.
  DeviceAllocation* gone = &it->second;
  g_chunks_in_use.erase(std::remove_if(g_chunks_in_use.begin(), g_chunks_in_use.end(),
                                       [gone](const auto& c) { return c.first == gone; }),
                        g_chunks_in_use.end());
  for (WordWrite* chunk : gone->chunks)
    if (chunk) g_free_chunks.push_back(chunk);
  g_allocated -= it->second.bytes;
  g_allocations.erase(it);
  forget_gaps();
}

std::vector<void*> all_allocations() {
  std::vector<void*> out;
  for (auto& [start, a] : g_allocations) out.push_back(a.begin);
  return out;
}

size_t allocated_bytes() { return g_allocated; }

DeviceAllocation* find_allocation(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int i = 0; i < kRecent; ++i) {
    DeviceAllocation* r = g_recent[i];
    if (r && contains(*r, c, bytes)) {
      for (int j = i; j > 0; --j) g_recent[j] = g_recent[j - 1];  // to the front
      g_recent[0] = r;
      return r;
    }
  }
  for (const Gap& g : g_gaps)
    if (c >= g.begin && c < g.end) return nullptr;
  auto next = g_allocations.upper_bound(c);
  if (next != g_allocations.begin()) {
    auto it = std::prev(next);
    if (contains(it->second, c, bytes)) {
      for (int j = kRecent - 1; j > 0; --j) g_recent[j] = g_recent[j - 1];
      g_recent[0] = &it->second;
      return g_recent[0];
    }
    if (c < it->second.begin + it->second.bytes) return nullptr;  // inside it, but running past its end
  }
  // In no allocation: remember the gap it is in.
  Gap gap;
  gap.begin = next == g_allocations.begin() ? nullptr : std::prev(next)->second.begin + std::prev(next)->second.bytes;
  gap.end = next == g_allocations.end() ? reinterpret_cast<const char*>(UINTPTR_MAX) : next->second.begin;
  for (int j = kGaps - 1; j > 0; --j) g_gaps[j] = g_gaps[j - 1];
  g_gaps[0] = gap;
  return nullptr;
}

void mark_written(DeviceAllocation& allocation, const void* p, size_t bytes) {
  DeviceAllocation* a = &allocation;
  size_t first = static_cast<size_t>(static_cast<const char*>(p) - a->begin);
  if (bytes <= 8 && first % 8 + bytes <= 8) {  // one shadow byte: one or, the common case
    a->written[first / 8] |= static_cast<uint8_t>(((1u << bytes) - 1u) << (first % 8));
    return;
  }
  const size_t end = first + bytes;
  for (; first < end && first % 8 != 0; ++first) a->written[first / 8] |= static_cast<uint8_t>(1u << (first % 8));
  const size_t whole_end = end / 8 * 8;
  if (first < whole_end) {
    std::fill(a->written.begin() + static_cast<std::ptrdiff_t>(first / 8),
              a->written.begin() + static_cast<std::ptrdiff_t>(whole_end / 8), uint8_t{0xff});
    first = whole_end;
  }
  for (; first < end; ++first) a->written[first / 8] |= static_cast<uint8_t>(1u << (first % 8));
}

void mark_written(const void* p, size_t bytes) {
  DeviceAllocation* a = find_allocation(p, bytes);
  if (a && bytes > 0) mark_written(*a, p, bytes);
}

int64_t first_unwritten(const DeviceAllocation& allocation, const void* p, size_t bytes) {
  const DeviceAllocation* a = &allocation;
  const size_t start = static_cast<size_t>(static_cast<const char*>(p) - a->begin);
  if (bytes <= 8 && start % 8 + bytes <= 8) {  // one shadow byte: one test, the common case
    const unsigned want = ((1u << bytes) - 1u) << (start % 8);
    if ((a->written[start / 8] & want) == want) return -1;
  }
  for (size_t i = start; i < start + bytes; ++i) {
    if (i % 8 == 0 && i + 8 <= start + bytes && a->written[i / 8] == 0xff) {
      i += 7;
      continue;
    }
    if (!((a->written[i / 8] >> (i % 8)) & 1u)) return static_cast<int64_t>(i - start);
  }
  return -1;
}

int64_t first_unwritten(const void* p, size_t bytes) {
  const DeviceAllocation* a = find_allocation(p, bytes);
  return a ? first_unwritten(*a, p, bytes) : -1;
}

WordWrite& word_of(DeviceAllocation& a, const void* p) {
  const size_t offset = static_cast<size_t>(static_cast<const char*>(p) - a.begin);
  WordWrite*& chunk = a.chunks[offset / kChunkBytes];
  if (!chunk) {
    // Stale entries are told apart by their launch number, so a recycled chunk needs no clearing.
    if (g_free_chunks.empty()) {
      g_chunks_made.push_back(std::make_unique<WordWrite[]>(kWordsPerChunk));
      g_free_chunks.push_back(g_chunks_made.back().get());
    }
    chunk = g_free_chunks.back();
    g_free_chunks.pop_back();
    g_chunks_in_use.emplace_back(&a, offset / kChunkBytes);
  }
  return chunk[(offset % kChunkBytes) / 4];
}

const WordWrite* word_if_written(const DeviceAllocation& a, const void* p) {
  const size_t offset = static_cast<size_t>(static_cast<const char*>(p) - a.begin);
  const WordWrite* chunk = a.chunks[offset / kChunkBytes];
  return chunk ? &chunk[(offset % kChunkBytes) / 4] : nullptr;
}

void recycle_launch_words() {
  for (auto& [allocation, index] : g_chunks_in_use) {
    g_free_chunks.push_back(allocation->chunks[index]);
    allocation->chunks[index] = nullptr;
  }
  g_chunks_in_use.clear();
}

}  // namespace simt::detail
