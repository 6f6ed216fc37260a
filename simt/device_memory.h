// The emulated device's memory: every cudaMalloc'd allocation (host memory, exactly its size),
// and the shadow state the checks keep beside it (simt/memory_watch.h):
//   - initcheck: one bit per byte, set when a kernel, a copy, a memset or a library writes the
//     byte; a read of a byte whose bit is clear reads what no one wrote since cudaMalloc;
//   - the fence check: for each 4-byte word, the last write a kernel made to it in the current
//     launch (which block, thread, barrier interval, watch-clock time and source site), kept in
//     64 KiB chunks made on a launch's first write to them and recycled when the launch ends.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace simt::detail {

// The last write of a 4-byte word by a kernel thread of the current launch.
struct WordWrite {
  uint32_t launch = 0;  // the launch it belongs to (entries of older launches are stale)
  uint32_t block = 0;   // the writing block's linear index (low 32 bits)
  uint32_t time = 0;    // the watch clock at the write (simt/memory_watch.cpp)
  uint32_t epoch = 0;   // barriers the block had passed
  uint16_t thread = 0;
  uint16_t site = 0;    // its source site
  uint8_t bytes = 0;    // which of the word's 4 bytes it wrote (bit i: byte i)
};

struct DeviceAllocation {
  char* begin = nullptr;
  size_t bytes = 0;
  std::vector<uint8_t> written;               // initcheck: bit i of byte j covers byte 8j + i
  std::vector<WordWrite*> chunks;             // the fence check's words, per 64 KiB; null: no write this launch
};

constexpr size_t kChunkBytes = size_t{64} << 10;
constexpr size_t kWordsPerChunk = kChunkBytes / 4;

// The registry (simt/runtime.cpp calls these for cudaMalloc, cudaFree and cudaDeviceReset).
void register_allocation(void* p, size_t bytes);
void unregister_allocation(const void* p);  // p must be an allocation's start
std::vector<void*> all_allocations();
size_t allocated_bytes();

// The allocation [p, p + bytes) lies in, or null (host memory, or it straddles an end).
DeviceAllocation* find_allocation(const void* p, size_t bytes = 1);

// initcheck's bits: written by a copy, memset, kernel or library; the offset (from p) of the
// first byte of [p, p + bytes) never written, or -1 when all were (or p is not device memory).
void mark_written(const void* p, size_t bytes);
int64_t first_unwritten(const void* p, size_t bytes);
// The same within an allocation already found (the watch's every access).
void mark_written(DeviceAllocation& a, const void* p, size_t bytes);
int64_t first_unwritten(const DeviceAllocation& a, const void* p, size_t bytes);

// The fence check's word of an address (made, from the chunk pool, on a launch's first write
// to its chunk) and its release at the launch's end.
WordWrite& word_of(DeviceAllocation& a, const void* p);
const WordWrite* word_if_written(const DeviceAllocation& a, const void* p);
void recycle_launch_words();

}  // namespace simt::detail
