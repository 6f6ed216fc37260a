// The SIMT scheduler: runs one kernel launch on the CPU. Each block's threads are fibers on
// the calling OS thread; a thread runs until it reaches a synchronisation point (a barrier, a
// warp operation, a tensor-core instruction) or exits, and then the next thread in the
// schedule's order runs. A barrier opens when every thread of the block has reached it; a warp
// operation is evaluated when every lane its mask names has reached it. Blocks run interleaved:
// a few are resident at once, as on the SMs of a GPU, and the schedule switches between them,
// so a block can read what another block of the launch has or has not written yet (the fence
// check of simt/memory_watch.h says when that read is unsafe). What real hardware would leave
// undefined (a barrier some threads skip, a mask that names an exited or absent lane, a
// deadlock, a race in shared memory, a read of unwritten memory) stops the launch with a
// message naming the kernel, the block, the threads and the source lines (docs/emulation.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "simt/cuda_api.h"
#include "simt/schedule.h"

namespace simt {

struct GridLaunch {
  cuda_api::dim3 grid, block;
  size_t dynamic_shared_bytes = 0;
  size_t shared_limit_bytes = 48 * 1024;  // static + dynamic per block (more after cudaFuncSetAttribute)
  const char* kernel = "";                // as written at the launch: "layernorm_forward_kernel<S>"
  const char* file = "";                  // the launch's source line
  int line = 0;
  const std::function<void()>* body = nullptr;  // one thread's work: the kernel called with its arguments
};

// Runs every block of the launch. Returns "" when it completed, else one message (the first
// fault) naming the kernel, its launch site, the block and what went wrong.
std::string run_grid(const GridLaunch& launch);

}  // namespace simt
