// `tinytrain profile`: trains a few steps of the `train` configuration eagerly through a
// ProfilingBackend (engine/profile/profiler.h), then prints the per-op table with its roofline
// (engine/profile/profile_report.h) and, with --trace, writes a Chrome trace (engine/profile/chrome_trace.h).
// docs/profiling.md shows the output and how to read it.
#pragma once
#include <ostream>
#include <string>

#include "engine/trainer.h"

namespace tt {

struct ProfileOptions {
  // The model, optimizer and run of `train` (run.steps: the steps to run, the first a warm-up
  // that is not counted; at least 2), its precision, recompute and grad_accum.
  TrainOptions train;
  std::string trace_path;      // --trace FILE.json; "": no trace
  BackendChoice backend = BackendChoice::Auto;  // --backend as given: cuda-emu has no hardware peaks
  bool tf32 = false;           // --tf32: the CUDA fp32 GEMMs' peak is the tf32 one
  // --estimate NAME: after the profile, one more step with every op's graph nodes counted, and
  // the step modelled on that device (engine/profile/step_estimate.h); "": none.
  std::string estimate_device;
  // --sample-blocks N (cuda-emu only): each kernel launch runs at most N of its blocks and its
  // counts are scaled to the grid (simt::set_block_sampling), so a step too long to emulate whole
  // (GPT-2 small) can still be estimated. Nothing the steps compute is right; 0: every block.
  uint64_t sample_blocks = 0;
  // --kernel-json FILE (cuda-emu, with --estimate): the kernel model as JSON (tools/kernel_times.py).
  std::string kernel_json_path;
};

// Throws InputError for fewer than 2 steps, an --estimate device the model does not know, or
// --sample-blocks without --backend cuda-emu and --estimate.
void check_profile_options(const ProfileOptions& options);

// Runs the profile on `backend` (one process) and prints it to `out`.
void run_profile(Backend& backend, const ProfileOptions& options, std::ostream& out);

}  // namespace tt
