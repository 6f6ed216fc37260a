// CUDA device query: counts devices and reads one device's name and memory.
#include <cuda_runtime.h>

#include <string>

#include "kernels/device_query.h"

namespace tt {

CudaDeviceInfo query_cuda_device(int device) {
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
  if (device == -1 && cudaGetDevice(&device) != cudaSuccess) device = 0;
  if (device < 0 || device >= count) {
    info.reason = "no CUDA GPU " + std::to_string(device) + " (this machine has " + std::to_string(count) + ")";
    return info;
  }
  cudaDeviceProp prop;
  err = cudaGetDeviceProperties(&prop, device);
  if (err == cudaSuccess) err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
  if (err != cudaSuccess) {
    info.reason = "CUDA GPU " + std::to_string(device) + " is not usable: " + cudaGetErrorString(err);
    return info;
  }
  info.usable = true;
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  return info;
}

}  // namespace tt
