// What the emulator's own tests (tests/test_simt*.cu, CUDA built for the emulator) share: a
// fixture whose device buffers are freed, and the device reset (clearing any fault), the
// schedule and the checks restored, at the end of each test.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "simt/launch_counters.h"
#include "simt/memory_watch.h"
#include "simt/schedule.h"

class Simt : public ::testing::Test {
 protected:
  void TearDown() override {
    for (void* p : buffers_) cudaFree(p);
    cudaDeviceReset();
    simt::set_schedule(simt::schedule_from_environment());
    simt::set_checks(true);
    simt::set_counting(false);
    simt::take_launch_records();
  }

 public:  // for the tests' helper functions too
  // n elements of device memory, holding `init` when given (else never written: initcheck).
  template <typename T>
  T* device(size_t n, const std::vector<T>& init = {}) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    buffers_.push_back(p);
    if (!init.empty()) EXPECT_EQ(cudaMemcpy(p, init.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> host(const T* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  // The fault the last launch left, reported when the host next waits for the device (as on a
  // GPU): the sticky error's description.
  std::string fault() {
    const cudaError_t e = cudaDeviceSynchronize();
    EXPECT_EQ(e, cudaErrorLaunchFailure) << cudaGetErrorName(e);
    return cudaGetErrorString(e);
  }

 private:
  std::vector<void*> buffers_;
};
