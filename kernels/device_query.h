// Is there a usable CUDA GPU? Used by --backend auto|cuda to decide and to explain.
#pragma once
#include <string>

namespace tt {

struct CudaDeviceInfo {
  bool usable = false;
  std::string reason;       // why not usable, one line; empty when usable
  std::string name;         // device 0's name when usable
  size_t total_bytes = 0;
  size_t free_bytes = 0;
};

CudaDeviceInfo query_cuda_device();

}  // namespace tt
