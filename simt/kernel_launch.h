// Kernel launches for the emulator. simt/rewrite_cu.py turns
//     kernel<<<grid, block, shared_bytes, stream>>>(args...);
// into
//     kernel | ::simt::launch_config("kernel", __FILE__, __LINE__, grid, block, shared_bytes, stream)(args...);
// launch_config(...)(args...) evaluates and keeps the arguments (once, on the host, as a real
// launch does); `kernel | pending` converts them to the kernel's parameter types and hands
// the launch to the runtime (simt/runtime.cpp), which checks the configuration, then runs the
// grid at once or, while its stream is being captured, records it in the graph.
#pragma once
#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "simt/cuda_api.h"

namespace simt {

struct LaunchConfig {
  const char* kernel;
  const char* file;
  int line;
  cuda_api::dim3 grid, block;
  size_t shared_bytes;
  cuda_api::cudaStream_t stream;
};

// The runtime's side: validate, then run or record. `body` runs one thread.
void launch_kernel(const LaunchConfig& config, const void* kernel, std::function<void()> body);

template <typename... Args>
struct PendingLaunch {
  LaunchConfig config;
  std::tuple<Args...> args;
};

struct LaunchConfigBuilder {
  LaunchConfig config;
  template <typename... Args>
  PendingLaunch<std::decay_t<Args>...> operator()(Args&&... args) const {
    return {config, std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...)};
  }
};

inline LaunchConfigBuilder launch_config(const char* kernel, const char* file, int line, cuda_api::dim3 grid,
                                         cuda_api::dim3 block, size_t shared_bytes = 0,
                                         cuda_api::cudaStream_t stream = nullptr) {
  return {LaunchConfig{kernel, file, line, grid, block, shared_bytes, stream}};
}

template <typename... Params, typename... Args>
void operator|(void (*kernel)(Params...), PendingLaunch<Args...>&& pending) {
  static_assert(sizeof...(Params) == sizeof...(Args), "a kernel launch passes one argument per parameter");
  // The parameters as the kernel declares them, converted once from the arguments; every
  // thread gets its own copy when the kernel is called.
  auto params = std::apply(
      [](auto&&... a) { return std::tuple<std::decay_t<Params>...>(std::forward<decltype(a)>(a)...); },
      std::move(pending.args));
  launch_kernel(pending.config, reinterpret_cast<const void*>(kernel),
                [kernel, params]() { std::apply(kernel, params); });
}

}  // namespace simt
