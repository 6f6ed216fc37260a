// The emulator's schedule: in which order the SIMT scheduler (simt/scheduler.h) runs the
// runnable threads of a block and the blocks of a grid. A missing __syncthreads or __syncwarp
// shows only in some orders, so every emulated test runs in at least two (docs/emulation.md).
#pragma once
#include <cstdint>
#include <string>

namespace simt {

enum class Order { Forward, Reverse, Random };
struct Schedule {
  Order order = Order::Forward;
  uint64_t seed = 1;  // Random: each launch shuffles with (seed, launch number)
};
// TINYTRAIN_SIMT_SCHEDULE = forward | reverse | random | random:SEED (default forward).
// An unknown value is reported on stderr and forward is used.
Schedule schedule_from_environment();
Schedule current_schedule();
void set_schedule(const Schedule& schedule);
std::string schedule_name(const Schedule& schedule);

}  // namespace simt
