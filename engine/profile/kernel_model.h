// The cost model of one kernel launch on a GPU, from what the SIMT emulator counted of it
// (simt/launch_counters.h): a MODEL, never a measurement. Each launch's work goes through the
// GPU's pipes, and the launch takes as long as its slowest pipe needs, plus the node latency:
//
//   dram     every 32-byte sector the kernel's warps request, loads and stores, at the HBM's
//            bandwidth: no L2 (an upper bound for kernels that re-read data an L2 would keep)
//   shared   shared-memory wavefronts (bank conflicts included), one per clock per SM
//   fp32     CUDA-core floating-point operations at the fp32 peak (every pair an FMA)
//   special  exp, log, sqrt, ... at the special-function units' rate
//   tensor   mma.sync FLOPs at the dense tensor peak of their type, times mma.sync's fraction
//   issue    warp instructions (the op-count plugin's statements / 32), 4 per clock per SM
//
// The SM pipes run on the busiest SM: the launch's blocks spread over the SMs, ceil(blocks /
// SMs) on the busiest, so a grid of fewer blocks than SMs uses only part of the GPU. HBM serves
// the active SMs' share of its bandwidth. Occupancy (blocks resident per SM, from threads and
// shared memory; registers unknown here) is stated, not used: the model assumes enough warps
// to hide latency. An emulated library call (cuBLASLt) has no counts: it is modelled by its
// FLOPs at the full tensor (or fp32) peak and its operands' bytes, the ideal bound.
#pragma once
#include <string>

#include "engine/profile/device_model.h"
#include "simt/launch_counters.h"

namespace tt {

enum Pipe { kDram, kShared, kFp32, kSpecial, kTensor, kIssue, kPipes };
const char* pipe_name(int pipe);

struct LaunchModel {
  double pipe_us[kPipes] = {};  // each pipe's time for this launch
  double latency_us = 0;        // the node's launch latency
  double modelled_us = 0;       // the slowest pipe + latency
  int bound = kDram;            // the slowest pipe
  int blocks_per_sm = 0;        // resident at once (threads, shared memory; registers not known)
  long long waves = 0;          // rounds of resident blocks the grid needs
  int active_sms = 0;
};

LaunchModel model_launch(const simt::LaunchRecord& launch, const DeviceModel& device);

}  // namespace tt
