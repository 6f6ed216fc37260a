// CUB's device-wide radix sort as the emulator provides it: SortKeys of 64-bit keys, the one
// form kernels/cuda/embedding.cu calls, with CUB's two-call protocol (a null d_temp_storage asks
// for the size of the temporary storage and does nothing else) and its meaning: the keys of
// d_keys_in ordered by their bits [begin_bit, end_bit), stably, into d_keys_out, on `stream`. On
// a GPU CUB launches its own kernels (a single-tile kernel for a short list, an upsweep and one
// onesweep kernel per 8 bits of key otherwise); here the sort is one piece of library work on
// the stream, a kernel node named DeviceRadixSort... when captured, done on the host
// (simt/cub.cpp). The namespace is the emulator's, cub an alias of it in the emulated build.
#pragma once
#include <cstddef>
#include <cstdint>

#include "simt/cuda_api.h"

namespace simt::cub_api {

struct DeviceRadixSort {
  static cudaError_t SortKeys(void* d_temp_storage, size_t& temp_storage_bytes, const uint64_t* d_keys_in,
                              uint64_t* d_keys_out, int num_items, int begin_bit = 0, int end_bit = 64,
                              cudaStream_t stream = nullptr);
};

}  // namespace simt::cub_api

namespace cub = simt::cub_api;
