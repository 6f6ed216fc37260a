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
  return d;
}

}  // namespace

std::optional<DeviceModel> find_device_model(const std::string& name) {
  if (name == "h200") return h200();
  return std::nullopt;
}

std::vector<std::string> device_model_names() { return {"h200"}; }

}  // namespace tt
