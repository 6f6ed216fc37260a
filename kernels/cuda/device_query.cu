// CUDA device query: counts devices and reads device 0's name and memory.
#include <cuda_runtime.h>

#include "kernels/device_query.h"

namespace tt {

CudaDeviceInfo query_cuda_device() {
  CudaDeviceInfo info;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    info.reason = std::string("no usable CUDA GPU (cudaGetDeviceCount: ") + cudaGetErrorString(err) + ")";
    cudaGetLastError();  // clear the sticky error for later queries
    return info;
  }
  if (count == 0) {
    info.reason = "no CUDA GPU found";
    return info;
  }
  cudaDeviceProp prop;
  err = cudaGetDeviceProperties(&prop, 0);
  if (err == cudaSuccess) err = cudaSetDevice(0);
  if (err == cudaSuccess) err = cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
  if (err != cudaSuccess) {
    info.reason = std::string("CUDA GPU 0 is not usable: ") + cudaGetErrorString(err);
    return info;
  }
  info.usable = true;
  info.name = prop.name;
  return info;
}

}  // namespace tt
