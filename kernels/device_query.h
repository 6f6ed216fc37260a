// Is there a usable CUDA GPU? Used by --backend auto|cuda to decide and to explain.
#pragma once
#include <string>

namespace tt {

struct CudaDeviceInfo {
  bool usable = false;
  std::string reason;       // why not usable, one line; empty when usable
  std::string name;         // the device's name when usable
  int major = 0, minor = 0; // its compute capability (9.0: Hopper)
  size_t total_bytes = 0;
  size_t free_bytes = 0;
};

// Asks about CUDA device `device` (a rank's LOCAL_RANK) and makes it the calling thread's
// current device; -1: the current device (0 in a fresh process). Once a rank's backend runs on
// its GPU, later queries stay there, and no rank touches (and takes memory on) another's GPU.
CudaDeviceInfo query_cuda_device(int device = -1);

}  // namespace tt
