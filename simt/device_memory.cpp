// The emulated device's allocations and their shadow state (simt/device_memory.h).
#include "simt/device_memory.h"

#include <algorithm>
#include <map>

namespace simt::detail {

namespace {

std::map<const char*, DeviceAllocation> g_allocations;  // by start
size_t g_allocated = 0;
DeviceAllocation* g_last_found = nullptr;  // most accesses hit the allocation the last one did
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
}

void unregister_allocation(const void* p) {
  auto it = g_allocations.find(static_cast<const char*>(p));
  if (it == g_allocations.end()) return;
  if (g_last_found == &it->second) g_last_found = nullptr;
  // Its chunks of this launch's words go back to the free list with it.
  DeviceAllocation* gone = &it->second;
  g_chunks_in_use.erase(std::remove_if(g_chunks_in_use.begin(), g_chunks_in_use.end(),
                                       [gone](const auto& c) { return c.first == gone; }),
                        g_chunks_in_use.end());
  for (WordWrite* chunk : gone->chunks)
    if (chunk) g_free_chunks.push_back(chunk);
  g_allocated -= it->second.bytes;
  g_allocations.erase(it);
}

std::vector<void*> all_allocations() {
  std::vector<void*> out;
  for (auto& [start, a] : g_allocations) out.push_back(a.begin);
  return out;
}

size_t allocated_bytes() { return g_allocated; }

DeviceAllocation* find_allocation(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  if (g_last_found && contains(*g_last_found, c, bytes)) return g_last_found;
  auto it = g_allocations.upper_bound(c);
  if (it == g_allocations.begin()) return nullptr;
  --it;
  if (!contains(it->second, c, bytes)) return nullptr;
  g_last_found = &it->second;
  return g_last_found;
}

void mark_written(const void* p, size_t bytes) {
  DeviceAllocation* a = find_allocation(p, bytes);
  if (!a || bytes == 0) return;
  size_t first = static_cast<size_t>(static_cast<const char*>(p) - a->begin);
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

int64_t first_unwritten(const void* p, size_t bytes) {
  const DeviceAllocation* a = find_allocation(p, bytes);
  if (!a) return -1;
  const size_t start = static_cast<size_t>(static_cast<const char*>(p) - a->begin);
  for (size_t i = start; i < start + bytes; ++i) {
    if (i % 8 == 0 && i + 8 <= start + bytes && a->written[i / 8] == 0xff) {
      i += 7;
      continue;
    }
    if (!((a->written[i / 8] >> (i % 8)) & 1u)) return static_cast<int64_t>(i - start);
  }
  return -1;
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
