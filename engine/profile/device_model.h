// The datasheet numbers of a GPU the step estimate (engine/profile/step_estimate.h) models:
// what `tinytrain profile --estimate NAME` assumes a device can do. A model's inputs, never a
// measurement: `tinytrain doctor` measures the machine it runs on (engine/profile/peaks.h).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tt {

struct DeviceModel {
  std::string name;         // "h200"
  std::string description;  // "NVIDIA H200 SXM"
  double memory_gbps = 0;   // peak memory bandwidth, GB/s
  // Dense peak TFLOP/s (no 2:4 sparsity): fp32 on the CUDA cores (what our own kernels use),
  // and the tensor cores' tf32, bf16 and fp16.
  double fp32_tflops = 0, tf32_tflops = 0, bf16_tflops = 0, fp16_tflops = 0;
  // The time one node of a CUDA graph costs when its work is negligible: the launch and the
  // ramp up and down of a dependent kernel. Each node waits for the one before it.
  double node_latency_us = 0;
  std::string sources;  // where the numbers come from, printed with every estimate

  // ---- per SM: what the kernel model (engine/profile/kernel_model.h) divides the emulator's
  // ---- counts by ----
  int sms = 0;
  double clock_ghz = 0;             // the clock the per-clock rates run at
  double shared_wavefronts_per_clock = 0;  // shared memory: 32 banks x 4 bytes, one pass a clock
  double special_per_clock = 0;     // special-function unit results (exp, log, sqrt, ...) per clock
  double issue_per_clock = 0;       // warp instructions issued per clock (one per scheduler)
  // mma.sync's rate as a fraction of the dense tensor peak: on Hopper the full rate needs the
  // asynchronous warpgroup instruction (wgmma), which our kernels do not use.
  double mma_sync_fraction = 0;
  int max_threads_per_sm = 0, max_blocks_per_sm = 0;
  size_t shared_bytes_per_sm = 0;   // shared memory an SM can give its resident blocks
  size_t shared_reserved_per_block = 0;  // of which each block costs this much more than it asks
  std::string kernel_sources;       // where these come from, printed with every kernel estimate

  // Peak TFLOP/s for a GEMM precision name ("fp32", "tf32", "bf16", "fp16"); 0 if unknown.
  double tflops(const std::string& precision) const;
};

// The devices the estimate knows; nullopt for any other name.
std::optional<DeviceModel> find_device_model(const std::string& name);
std::vector<std::string> device_model_names();

}  // namespace tt
