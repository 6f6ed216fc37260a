// The CUDA backend under test: on the GPU when one is usable; otherwise the same kernels/cuda/
// code on the SIMT emulator (simt/, in the order TINYTRAIN_SIMT_SCHEDULE names), so the CUDA
// tests run everywhere. Only a build with neither makes them report SKIPPED (never a silent
// pass), saying why.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda_options.h"
#include "kernels/device_query.h"
#ifdef TINYTRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif
#ifdef TINYTRAIN_HAVE_SIMT
#include "simt/emulated_cuda.h"
#endif

#if defined(TINYTRAIN_HAVE_CUDA) || defined(TINYTRAIN_HAVE_SIMT)
#define TINYTRAIN_HAVE_CUDA_BACKEND 1
#endif

namespace tt::test {

// Is the CUDA backend under test the emulated one? Yes without a usable GPU, and where
// TINYTRAIN_TEST_CUDA=emulated asks for it (simt/run_mutants.py: mutants of the emulated build).
inline bool cuda_is_emulated() {
  const char* choice = std::getenv("TINYTRAIN_TEST_CUDA");
  return (choice && std::string(choice) == "emulated") || !query_cuda_device().usable;
}

inline std::unique_ptr<Backend> cuda_backend_or_skip(std::string& why, const CudaOptions& options = {}) {
#ifdef TINYTRAIN_HAVE_CUDA
  if (!cuda_is_emulated()) return make_cuda_backend(options);
#endif
#ifdef TINYTRAIN_HAVE_SIMT
  return emu::make_cuda_backend(options);
#else
  (void)options;
  why = "no usable CUDA GPU (" + query_cuda_device().reason + ") and this build has no SIMT emulator";
  return nullptr;
#endif
}

}  // namespace tt::test

// Declares `backend`, the CUDA backend, or skips the test saying why.
#define REQUIRE_CUDA(backend)                                 \
  std::string why_skipped;                                    \
  auto backend = tt::test::cuda_backend_or_skip(why_skipped); \
  if (!backend) GTEST_SKIP() << why_skipped
