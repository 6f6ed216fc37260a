// What CUDA device code finds built in, for the emulator: the thread and block indices, the
// barriers and warp operations (each a scheduling point of simt/scheduler.cpp, with the
// caller's source line), block-shared memory, atomics, and the device math functions the
// kernels use (the host's libm: results match the CPU backend bit for bit, which says nothing
// about the GPU's own math, a few ulp away). Included by simt/prelude.h into every emulated
// kernels/cuda/ file.
#pragma once
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "simt/cuda_api.h"
#include "simt/memory_watch.h"

// ---- qualifiers: host C++ needs none ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// __shared__ variables are rewritten by simt/rewrite_cu.py into block_shared() below.

namespace simt {

namespace detail {
// The running thread's indices, set by the scheduler before it continues a thread. Globals: one
// OS thread drives the emulator at a time (its runtime, simt/runtime.cpp, is not thread safe).
extern cuda_api::uint3 g_thread_idx;
extern cuda_api::uint3 g_block_idx;
extern cuda_api::dim3 g_block_dim;
extern cuda_api::dim3 g_grid_dim;

enum class WarpOp : uint8_t { ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All, SyncWarp, Collective };
enum class BarrierOp : uint8_t { Sync, Count, And, Or };

// Scheduling points (simt/scheduler.cpp). warp_op returns the lane's result bits (the value
// read for a shuffle, the ballot for a vote); barrier returns the count, and or or of the
// predicates for the _count/_and/_or forms.
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int lane_arg, int width, const char* name,
                 const char* file, int line);
int barrier(BarrierOp op, int predicate, const char* name, const char* file, int line);
// A warp-wide instruction on every lane's own operands (the tensor-core instructions of
// simt/tensor_core.h): when all 32 lanes of the warp have reached it at the same line, it is
// evaluated once with each lane's `lane_data`, and returns "" or what the hardware would fault
// on. One lane missing, or a lane at another line, is a fault (.sync.aligned instructions).
using WarpCollective = std::string (*)(void* const lanes[32]);
void warp_collective(WarpCollective evaluate, void* lane_data, const char* name, const char* file, int line);
// This block's storage of one __shared__ declaration (key: its number in the file), and its
// dynamic shared memory (extern __shared__).
void* static_shared(size_t bytes, int key, const char* file, int line);
void* dynamic_shared();
// Stops the launch with a message (a device-side trap).
[[noreturn]] void device_fault(const char* what, const char* file, int line);

template <typename T>
uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "warp operations move up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
}  // namespace detail

// `__shared__ T name;` and `__shared__ T name[N]...;` become `auto& name = block_shared<T...>(key, ...)`.
template <typename T>
T& block_shared(int key, const char* file, int line) {
  return *static_cast<T*>(detail::static_shared(sizeof(T), key, file, line));
}
// `extern __shared__ T name[];` becomes `T* name = dynamic_shared<T>();`.
template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(detail::dynamic_shared());
}

}  // namespace simt

// The built-in indices: read-only views of the running thread's, which a debugger can print
// (`print threadIdx`).
static const ::simt::cuda_api::uint3& threadIdx = ::simt::detail::g_thread_idx;
static const ::simt::cuda_api::uint3& blockIdx = ::simt::detail::g_block_idx;
static const ::simt::cuda_api::dim3& blockDim = ::simt::detail::g_block_dim;
static const ::simt::cuda_api::dim3& gridDim = ::simt::detail::g_grid_dim;
constexpr int warpSize = 32;

// ---- barriers: every thread of the block, at the same line ----
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::simt::detail::barrier(::simt::detail::BarrierOp::Sync, 0, "__syncthreads", file, line);
}
inline int __syncthreads_count(int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::simt::detail::barrier(::simt::detail::BarrierOp::Count, predicate, "__syncthreads_count", file, line);
}
inline int __syncthreads_and(int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::simt::detail::barrier(::simt::detail::BarrierOp::And, predicate, "__syncthreads_and", file, line);
}
inline int __syncthreads_or(int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::simt::detail::barrier(::simt::detail::BarrierOp::Or, predicate, "__syncthreads_or", file, line);
}

// ---- warp operations: every lane of the mask, at the same line ----
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::simt::detail::warp_op(::simt::detail::WarpOp::SyncWarp, mask, 0, 0, 32, "__syncwarp", file, line);
}
template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32, const char* file = __builtin_FILE(),
              int line = __builtin_LINE()) {
  using namespace ::simt::detail;
  return from_bits<T>(warp_op(WarpOp::ShflIdx, mask, to_bits(var), src_lane, width, "__shfl_sync", file, line));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
  using namespace ::simt::detail;
  return from_bits<T>(warp_op(WarpOp::ShflUp, mask, to_bits(var), static_cast<int>(delta), width, "__shfl_up_sync",
                              file, line));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                   int line = __builtin_LINE()) {
  using namespace ::simt::detail;
  return from_bits<T>(warp_op(WarpOp::ShflDown, mask, to_bits(var), static_cast<int>(delta), width,
                              "__shfl_down_sync", file, line));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  using namespace ::simt::detail;
  return from_bits<T>(warp_op(WarpOp::ShflXor, mask, to_bits(var), lane_mask, width, "__shfl_xor_sync", file, line));
}
inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return static_cast<unsigned>(::simt::detail::warp_op(::simt::detail::WarpOp::Ballot, mask, predicate != 0, 0, 32,
                                                       "__ballot_sync", file, line));
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(::simt::detail::warp_op(::simt::detail::WarpOp::Any, mask, predicate != 0, 0, 32,
                                                  "__any_sync", file, line));
}
inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(::simt::detail::warp_op(::simt::detail::WarpOp::All, mask, predicate != 0, 0, 32,
                                                  "__all_sync", file, line));
}

// ---- memory ----
template <typename T>
T __ldg(const T* ptr) {
  return *ptr;
}
// A fence orders the thread's memory operations: the cross-block fence check of
// simt/memory_watch.h needs to know where each one is. __threadfence_block orders within the
// block, which the emulator's one-thread-at-a-time blocks never need.
inline void __threadfence() { ::simt::detail::watch_fence(); }
inline void __threadfence_block() {}
[[noreturn]] inline void __trap(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::simt::detail::device_fault("__trap()", file, line);
}

// Atomics: one kernel thread runs at a time, so a plain read-modify-write is atomic here. Each
// returns the old value, as on the device. Its accesses are marked atomic for the checks
// (simt/memory_watch.h): no race, no stale read, and the ticket of a release or an acquire.
// (Calls, not inline stores of the flag: the compiler would drop a store no one reads before
// the next, and move the atomic's own accesses past it.)
namespace simt::detail {
struct AtomicScope {
  AtomicScope() { atomic_begins(); }
  ~AtomicScope() { atomic_ends(); }
};
}  // namespace simt::detail
template <typename T>
T atomicAdd(T* address, T value) {
  static_assert(std::is_arithmetic<T>::value, "atomicAdd on int, unsigned, unsigned long long, float or double");
  ::simt::detail::AtomicScope atomic;
  const T old = *address;
  *address = old + value;
  return old;
}
template <typename T>
T atomicSub(T* address, T value) {
  ::simt::detail::AtomicScope atomic;
  const T old = *address;
  *address = old - value;
  return old;
}
template <typename T>
T atomicMax(T* address, T value) {
  ::simt::detail::AtomicScope atomic;
  const T old = *address;
  *address = old < value ? value : old;
  return old;
}
template <typename T>
T atomicMin(T* address, T value) {
  ::simt::detail::AtomicScope atomic;
  const T old = *address;
  *address = value < old ? value : old;
  return old;
}
template <typename T>
T atomicExch(T* address, T value) {
  ::simt::detail::AtomicScope atomic;
  const T old = *address;
  *address = value;
  return old;
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
  static_assert(std::is_integral<T>::value, "atomicCAS on int, unsigned or unsigned long long");
  ::simt::detail::AtomicScope atomic;
  const T old = *address;
  if (old == compare) *address = value;
  return old;
}

// ---- math: CUDA's device functions that the host's libm does not have under these names ----
template <typename A, typename B>
constexpr std::common_type_t<A, B> min(A a, B b) {
  return b < a ? b : a;
}
template <typename A, typename B>
constexpr std::common_type_t<A, B> max(A a, B b) {
  return a < b ? b : a;
}
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
