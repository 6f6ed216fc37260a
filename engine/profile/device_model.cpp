// The devices `profile --estimate` knows (see device_model.h).
#include "engine/profile/device_model.h"

namespace tt {

double DeviceModel::tflops(const std::string& precision) const {
  if (precision == "fp32") return fp32_tflops;
  if (precision == "tf32") return tf32_tflops;
  if (precision == "bf16") return bf16_tflops;
  if (precision == "fp16") return fp16_tflops;
  return 0.0;
}

namespace {

DeviceModel h200() {
  DeviceModel d;
  d.name = "h200";
  d.description = "NVIDIA H200 SXM";
  // NVIDIA's H200 datasheet: HBM3e at 4.8 TB/s; FP32 67 TFLOPS; TF32 989, BF16 and FP16 1,979
  // TFLOPS "with sparsity", half that dense. The H200 is the H100 SXM's GH100 at the same
  // clocks, whose exact dense figures (66.9, 494.7, 989.4) these are.
  d.memory_gbps = 4800;
  d.fp32_tflops = 66.9;
  d.tf32_tflops = 494.7;
  d.bf16_tflops = 989.4;
  d.fp16_tflops = 989.4;
  // 1.5 us per dependent node: the middle of the 1-2 us a dependent graph node was assumed to
  // cost when issue 24 was filed; NVIDIA's "Getting Started with CUDA Graphs" (2019, V100)
  // measured 3.4 us per node for a graph of 2.9 us kernels. Not measured on an H200.
  d.node_latency_us = 1.5;
  d.sources =
      "NVIDIA H200 datasheet (HBM3e 4.8 TB/s; dense fp32 66.9, tf32 494.7, bf16/fp16 989.4 TFLOP/s: the "
      "sparse figures halved), node latency 1.5 us (assumed: 1-2 us per dependent CUDA graph node; not "
      "measured on an H200)";
  // GH100 as NVIDIA's Hopper tuning guide and the H100 whitepaper describe an SM: 4 schedulers
  // (one warp instruction each a clock), 128 FP32 lanes (the 66.9 TFLOP/s above at 1.98 GHz:
  // 132 x 128 x 2 x 1.98e9), 16 special-function units, 32 banks of shared memory (128 bytes a
  // clock), at most 2048 threads and 32 blocks, 228 KiB of shared memory of which each block
  // also takes 1 KiB for the system.
  d.sms = 132;
  d.clock_ghz = 1.98;
  d.shared_wavefronts_per_clock = 1;
  d.special_per_clock = 16;
  d.issue_per_clock = 4;
  // An assumption, not a measurement: kernels built on mma.sync are reported to reach about
  // two thirds of the dense peak on Hopper; the rest needs wgmma. A lent GPU calibrates it.
  d.mma_sync_fraction = 0.625;
  d.max_threads_per_sm = 2048;
  d.max_blocks_per_sm = 32;
  d.shared_bytes_per_sm = 228 * 1024;
  d.shared_reserved_per_block = 1024;
  d.kernel_sources =
      "132 SMs at 1.98 GHz; per SM a clock: 4 warp instructions issued, 1 shared-memory wavefront (128 B), 16 "
      "special-function results, 128 fp32 FMAs (the fp32 peak); mma.sync at 62.5% of the dense tensor peak (assumed: "
      "Hopper's full rate needs wgmma); HBM 4.8 TB/s with no L2 (every 32-byte sector a kernel requests comes from "
      "HBM); at most 2048 threads, 32 blocks and 228 KiB of shared memory (1 KiB more per block) resident per SM";
  return d;
}

}  // namespace

std::optional<DeviceModel> find_device_model(const std::string& name) {
  if (name == "h200") return h200();
  return std::nullopt;
}

std::vector<std::string> device_model_names() { return {"h200"}; }

}  // namespace tt
