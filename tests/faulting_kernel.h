// A kernel that faults on purpose, for tests/test_debug_sync.cpp: tests/faulting_kernel.cu,
// built for the SIMT emulator as tests/test_simt.cu is (tests/CMakeLists.txt). No CUDA type
// crosses this header, so a test that includes it needs neither the toolkit nor the emulator's
// headers.
#pragma once

namespace tt::test {

// Enqueues on `stream` (the emulated CUDA backend's native_stream()) an embedding lookup with
// a device-side range check: out (N,C) = wte[tokens[n]] for wte (V,C). A token id outside
// [0, V) traps (__trap(), as a device-side assert does on a GPU), which faults the launch; the
// host hears of it at its next wait for the device (simt/runtime.cpp).
void launch_checked_embedding(void* stream, float* out, const int* tokens, const float* wte, int N, int C, int V);

// cudaDeviceReset on the emulated device: frees every allocation and clears the sticky fault,
// so that the next test starts on a working device. Call it after the backends are destroyed.
void reset_emulated_device();

}  // namespace tt::test
