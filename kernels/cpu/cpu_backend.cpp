// CPU backend memory: host allocations, aligned for SIMD, zero-filled.
#include "kernels/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace tt {

void* CpuBackend::allocate(size_t bytes) {
  const size_t alignment = 64;  // one cache line; also what AVX-512 loads like
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* ptr = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (!ptr) throw std::runtime_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(ptr, 0, rounded == 0 ? alignment : rounded);
  return ptr;
}

void CpuBackend::release(void* ptr) { std::free(ptr); }

void CpuBackend::copy_to_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

void CpuBackend::copy_to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

void CpuBackend::fill_zero(Tensor t) { std::memset(t.data, 0, t.bytes()); }

std::unique_ptr<Backend> make_cpu_backend(CpuSimd simd) { return std::make_unique<CpuBackend>(simd); }

}  // namespace tt
