// The CUDA backend for a test, or a reason to skip: tests that need a GPU report SKIPPED
// (never a silent pass) on machines without one and in builds without CUDA.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/device_query.h"
#ifdef TINYTRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace tt::test {

// cudnn_attention: allow cuDNN's fused attention (CudaOptions::cudnn_attention).
inline std::unique_ptr<Backend> cuda_backend_or_skip(std::string& why, bool cudnn_attention = false) {
#ifdef TINYTRAIN_HAVE_CUDA
  const CudaDeviceInfo gpu = query_cuda_device();
  if (!gpu.usable) {
    why = "no usable CUDA GPU: " + gpu.reason;
    return nullptr;
  }
  CudaOptions options;
  options.cudnn_attention = cudnn_attention;
  return make_cuda_backend(options);
#else
  (void)cudnn_attention;
  why = "this build has no CUDA backend";
  return nullptr;
#endif
}

}  // namespace tt::test

// Declares `backend`, the CUDA backend, or skips the test saying why.
#define REQUIRE_CUDA(backend)                                 \
  std::string why_skipped;                                    \
  auto backend = tt::test::cuda_backend_or_skip(why_skipped); \
  if (!backend) GTEST_SKIP() << why_skipped
