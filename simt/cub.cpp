// cub::DeviceRadixSort::SortKeys on the emulated device (simt/cub_api.h): a stable sort on the
// host, enqueued on the stream like a library's kernel, checked like one (initcheck of the keys
// it reads), counted like one (simt/launch_counters.h: the bytes a radix sort's passes move).
#include <algorithm>
#include <string>
#include <vector>

#include "simt/cub_api.h"
#include "simt/device_memory.h"
#include "simt/launch_counters.h"
#include "simt/library_work.h"
#include "simt/memory_watch.h"

namespace simt {

namespace {
// What stands for CUB's sorting kernels: a captured sort is a kernel node of this address, named
// as CUB's onesweep kernel is (kernels/cuda/graph_nodes.cu counts it by that name).
const char kEmulatedSortKernel = 0;
constexpr const char* kEmulatedSortKernelName = "DeviceRadixSortOnesweepKernel_emulated_by_simt_cub";
constexpr size_t kTempStorageBytes = 256;  // what the emulated sort asks for (and never uses)
}  // namespace

}  // namespace simt

namespace simt::cub_api {

cudaError_t DeviceRadixSort::SortKeys(void* d_temp_storage, size_t& temp_storage_bytes, const uint64_t* d_keys_in,
                                      uint64_t* d_keys_out, int num_items, int begin_bit, int end_bit,
                                      cudaStream_t stream) {
  if (num_items < 0 || begin_bit < 0 || end_bit > 64 || begin_bit > end_bit) return cudaErrorInvalidValue;
  if (d_temp_storage == nullptr) {  // the size query
    temp_storage_bytes = kTempStorageBytes;
    return cudaSuccess;
  }
  if (temp_storage_bytes < kTempStorageBytes || (num_items > 0 && (!d_keys_in || !d_keys_out)))
    return cudaErrorInvalidValue;
  const size_t bytes = static_cast<size_t>(num_items) * sizeof(uint64_t);
  return enqueue_work(stream, &kEmulatedSortKernel, kEmulatedSortKernelName, [=]() {
    if (detail::kernel_writes_tracked()) {
      const int64_t at = detail::first_unwritten(d_keys_in, bytes);
      if (at >= 0) {
        library_fault("uninitialized device memory (initcheck): cub::DeviceRadixSort::SortKeys reads the keys, whose byte " +
                      std::to_string(at) + " (of " + std::to_string(bytes) +
                      ") was never written (nor copied or memset) since cudaMalloc");
        return cudaSuccess;
      }
    }
    const uint64_t mask = end_bit - begin_bit == 64 ? ~uint64_t{0} : ((uint64_t{1} << (end_bit - begin_bit)) - 1);
    std::vector<uint64_t> keys(d_keys_in, d_keys_in + num_items);
    std::stable_sort(keys.begin(), keys.end(), [&](uint64_t a, uint64_t b) {
      return ((a >> begin_bit) & mask) < ((b >> begin_bit) & mask);
    });
    std::copy(keys.begin(), keys.end(), d_keys_out);
    detail::mark_written(d_keys_out, bytes);
    // a radix sort's traffic: each pass of 8 bits reads and writes every key, after one read to count digits
    const int passes = std::max(1, (end_bit - begin_bit + 7) / 8);
    record_library_call(kEmulatedSortKernelName, 0.0, static_cast<uint64_t>(bytes) * (1 + 2 * passes), "fp32");
    return cudaSuccess;
  });
}

}  // namespace simt::cub_api
