// `profile --estimate NAME` on the emulator (--backend cuda-emu): every kernel of a step
// modelled from the emulator's counts of it (engine/profile/kernel_model.h), one row per kernel
// of each op, with its counts, its pipes and the pipe that bounds it; then per op, the sum of
// its kernels beside the op's ideal bound of engine/profile/step_estimate.h (its ideal bytes and
// FLOPs at the peaks: the lower bound). Every line is labelled MODEL, and its inputs are printed.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/profile/device_model.h"
#include "engine/profile/kernel_model.h"
#include "engine/profile/profiler.h"
#include "engine/profile/step_estimate.h"

namespace tt {

// One kernel of one op, its launches in a step summed.
struct KernelRow {
  std::string op;
  std::string kernel;
  int launches = 0;
  simt::LaunchCounters counters;  // summed (the shape: the largest)
  double pipe_us[kPipes] = {};
  double modelled_us = 0;
  int blocks_per_sm = 0;          // of the launch with the most blocks
  bool library = false;
};

struct KernelEstimate {
  std::vector<KernelRow> kernels;          // in the order first launched
  std::vector<std::string> ops;            // the ops, in the order first called
  double modelled_us = 0;                  // every launch of the step
};

// A kernel's counts as the tables print them, with their header: dram MB (the sectors its warps
// requested x 32 bytes), shared-memory wavefronts (millions), fp32 GFLOP, special-function calls
// (millions), mma GFLOP, warp instructions (millions).
std::string kernel_counts_header();
std::string kernel_counts(const simt::LaunchCounters& c);

// `counted`: a step recorded in counting mode with the emulator counting (every op's launches).
KernelEstimate estimate_kernels(const StepProfile& counted, const DeviceModel& device);

// The table: kernels, then ops against their ideal bound (`ideal`, the same step's op estimate).
void print_kernel_estimate(const KernelEstimate& kernels, const StepEstimate& ideal, std::ostream& out);

// The kernels as JSON (profile --kernel-json): what tools/kernel_times.py sets beside the times a
// GPU measures for the same kernels (scripts/gpu_check.sh).
nlohmann::json kernel_estimate_json(const KernelEstimate& kernels, const StepEstimate& ideal);

}  // namespace tt
