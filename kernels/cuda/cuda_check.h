// Error checking for CUDA runtime and cuBLASLt calls, shared by every .cu file of the CUDA
// backend. Each macro evaluates the call once and, on failure, throws std::runtime_error with
// one line: the call as written, file:line, and the library's error name and description.
//
//   CUDA_CHECK(cudaMalloc(&p, bytes));
//   CUBLAS_CHECK(cublasLtMatmul(...));
//   CUDA_CHECK(cudaGetLastError());  // after a kernel launch
//
// cuBLASLt names its own statuses (cublasLtGetStatusName): only libcublasLt is linked, not libcublas.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace tt {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error: ") + call + " at " + file + ":" + std::to_string(line) +
                           ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("cuBLAS error: ") + call + " at " + file + ":" + std::to_string(line) +
                           ": " + cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) + ")");
}

}  // namespace tt

#define CUDA_CHECK(call)                                                   \
  do {                                                                     \
    cudaError_t tt_cuda_err_ = (call);                                     \
    if (tt_cuda_err_ != cudaSuccess) {                                     \
      ::tt::throw_cuda_error(tt_cuda_err_, #call, __FILE__, __LINE__);     \
    }                                                                      \
  } while (0)

#define CUBLAS_CHECK(call)                                                 \
  do {                                                                     \
    cublasStatus_t tt_cublas_status_ = (call);                             \
    if (tt_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                      \
      ::tt::throw_cublas_error(tt_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                      \
  } while (0)
