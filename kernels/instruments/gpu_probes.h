// The GPU half of `tinytrain doctor` (engine/doctor/doctor.h): what the CUDA driver, runtime and
// libraries say about themselves, and what the device really does (host<->device and device
// memory bandwidth, cuBLASLt GEMM throughput), measured rather than read off a datasheet.
//
// Two builds of kernels/instruments/gpu_probes.cu implement it, as for the CUDA backend itself:
//   make_gpu_probes()       the real GPU (nvcc); in a build without the CUDA toolkit a stub
//                           (kernels/instruments/gpu_probes_without_cuda.cpp) that says so;
//   emu::make_gpu_probes()  the SIMT emulator (simt/, builds with TINYTRAIN_HAVE_SIMT): the same
//                           kernels and cuBLASLt calls on the CPU. Its numbers only show that the
//                           code runs; the driver, cuDNN and NCCL do not exist there.
// The types below are the engine's own in both builds (gpu_probes.cu includes this header
// outside the emulator's `tt` -> `tt::emu` renaming, as simt/prelude.h does for the backend's).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "kernels/backend.h"  // AttentionShape

namespace tt {

// The CUDA runtime and driver, before any device is touched.
struct GpuRuntimeInfo {
  int driver_version = 0;   // the newest CUDA the driver supports, 1000 major + 10 minor (12080: 12.8); 0: no driver
  int runtime_version = 0;  // the CUDA runtime this program was built with, same encoding
  int device_count = 0;
  std::string error;        // why there are no devices: "cudaGetDeviceCount: <the runtime's words>"; "" otherwise
  bool insufficient_driver = false;  // the error is an installed driver older than the runtime
};

// One device as the runtime describes it. Attributes the driver does not report are 0.
struct GpuDeviceProps {
  std::string name;
  int major = 0, minor = 0;     // compute capability (9.0: Hopper)
  int sm_count = 0;
  int sm_clock_khz = 0;         // peak SM clock
  int memory_clock_khz = 0;     // peak memory clock
  int memory_bus_bits = 0;      // memory bus width
  size_t total_bytes = 0, free_bytes = 0;  // cudaMemGetInfo, on this device

  // The datasheet memory bandwidth, GB/s: double data rate x clock x bus width in bytes. 0 when
  // the driver reports no memory clock or bus width.
  double spec_memory_gbps() const { return 2.0 * memory_clock_khz * 1e3 * (memory_bus_bits / 8.0) / 1e9; }
};

enum class CopyDirection { HostToDevice, DeviceToHost };
inline const char* copy_direction_name(CopyDirection direction) {
  return direction == CopyDirection::HostToDevice ? "host-to-device" : "device-to-host";
}

// The GEMM precisions training uses, each as cuBLASLt computes it (fp32 accumulation throughout):
// fp32 (CUBLAS_COMPUTE_32F), tf32 (fp32 operands, CUBLAS_COMPUTE_32F_FAST_TF32), bf16 and fp16
// (16-bit A, B, C and D, CUBLAS_COMPUTE_32F).
enum class GemmPrecision { FP32, TF32, BF16, FP16 };
// "fp32", "tf32", "bf16", "fp16": the keys of engine/profile/peaks.h's tflops
inline const char* gemm_precision_name(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::FP32: return "fp32";
    case GemmPrecision::TF32: return "tf32";
    case GemmPrecision::BF16: return "bf16";
    case GemmPrecision::FP16: return "fp16";
  }
  return "?";
}

// Every measurement runs on `device`, made the calling thread's current device, repeats its
// work for at least min_seconds and reports the best rate of the batches it timed (noise only
// ever slows a run down). Each throws std::runtime_error with one line naming the failing call.
class GpuProbes {
 public:
  virtual ~GpuProbes() = default;
  virtual bool emulated() const = 0;

  virtual GpuRuntimeInfo runtime() = 0;
  virtual GpuDeviceProps device(int device) = 0;

  // Copies of `bytes` between pinned (page-locked) host memory and the device: the path batches
  // and checkpoints take. GB/s of bytes copied.
  virtual double pinned_copy_gbps(int device, CopyDirection direction, size_t bytes, double min_seconds) = 0;
  // A copy kernel from one device buffer of `bytes` to another, 16 bytes per thread and load:
  // GB/s of bytes read plus bytes written, the memory traffic elementwise kernels make.
  virtual double device_copy_gbps(int device, size_t bytes, double min_seconds) = 0;
  // D = A B for n x n matrices through cuBLASLt (operands filled with values in [-1, 1]:
  // zeros would draw less power and flatter the clock). TFLOP/s of 2 n^3 per GEMM.
  virtual double gemm_tflops(int device, GemmPrecision precision, int n, double min_seconds) = 0;

  // The cuDNN library's version ("9.10.2"); "" when this build has no cuDNN.
  virtual std::string cudnn_version() = 0;
  // Builds cuDNN's fused attention (SDPA) forward and backward graphs for `shape` in bf16 on
  // `device` and returns their description (version, engines, workspace); throws
  // std::runtime_error saying why when cuDNN cannot serve it.
  virtual std::string cudnn_attention(int device, const AttentionShape& shape) = 0;
  // The NCCL library's version ("2.28.9"); "" when this build has no NCCL.
  virtual std::string nccl_version() = 0;
};

// The real GPU's probes (a stub that finds no GPU in a build without CUDA).
std::unique_ptr<GpuProbes> make_gpu_probes();

namespace emu {
// The same probes on the SIMT emulator; defined only in builds with it (TINYTRAIN_HAVE_SIMT).
std::unique_ptr<GpuProbes> make_gpu_probes();
}  // namespace emu

}  // namespace tt
