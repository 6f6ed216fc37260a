// The emulator's stand-in for CUB's <cub/device/device_radix_sort.cuh>: the part of
// cub::DeviceRadixSort that kernels/cuda/ calls (simt/cub_api.h, implemented on the host by
// simt/cub.cpp). Seen only by the emulated build, whose include path puts simt/include first.
#pragma once
#include "simt/cub_api.h"
