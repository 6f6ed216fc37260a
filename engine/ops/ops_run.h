// `tinytrain ops check|perf`: the op harness (engine/ops/op_harness.h) as a command, for kernel
// engineers (docs/ops.md). `check` runs every op case (engine/ops/op_cases.h) on the chosen backend
// and on the CPU backend, the reference, and prints one line per (op, shape, dtype): ok or FAIL,
// the largest error against its tolerance. `perf` times every case on the chosen backend and
// prints its speed (GFLOP/s, GB/s) and its share of the roofline from the peaks `tinytrain
// doctor` measured (engine/profile/peaks.h).
#pragma once
#include <ostream>
#include <string>

#include "engine/backend_select.h"

namespace tt {

struct OpsOptions {
  std::string mode;                     // "check" or "perf"
  std::string op;                       // --op: "" every op; an op's name, or a part of names ("linear")
  BackendChoice backend = BackendChoice::Auto;  // --backend
  std::string dtype;                    // --dtype: "" all three; fp32 | bf16 | fp16
  GpuOptions gpu;                       // what the CUDA backend is made with (its defaults: exact fp32 GEMMs)
  bool attention_sweep = false;         // --attention-sweep: the long-sequence attention cases only
  bool gpt2_gemms = false;              // --gpt2-gemms: the linear ops at GPT-2 small's GEMM shapes only
  // --sample-blocks N (perf on cuda-emu): each launch runs at most N of its blocks, its counts
  // scaled to the grid (simt::set_block_sampling): a model of a GEMM too large to emulate whole.
  uint64_t sample_blocks = 0;
};

// Runs the command; returns the exit status: 1 when a check fails, else 0. Throws InputError
// when --op and --dtype select no case (an unknown op: listing the names) and when the backend
// cannot be had.
int run_ops(const OpsOptions& options, std::ostream& out);

}  // namespace tt
