// Device query for builds without the CUDA toolkit: there is never a usable GPU.
#include "kernels/device_query.h"

namespace tt {

CudaDeviceInfo query_cuda_device(int /*device*/) {
  CudaDeviceInfo info;
  info.reason = "this build has no CUDA support (no CUDA toolkit at configure time)";
  return info;
}

}  // namespace tt
