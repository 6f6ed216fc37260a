// GPU probes for builds without the CUDA toolkit: the runtime reports no device and says why,
// so `tinytrain doctor` skips (or, with --backend cuda, fails) the GPU section in one line.
// The emulated probes (emu::make_gpu_probes) need no toolkit and are still built with the
// SIMT emulator.
#include <stdexcept>

#include "kernels/instruments/gpu_probes.h"

namespace tt {

namespace {

const char* const kNoCuda = "this build has no CUDA support (no CUDA toolkit at configure time)";

class NoGpuProbes final : public GpuProbes {
 public:
  bool emulated() const override { return false; }
  GpuRuntimeInfo runtime() override {
    GpuRuntimeInfo info;
    info.error = kNoCuda;
    return info;
  }
  // Never reached: doctor asks for devices only when the runtime counted some.
  GpuDeviceProps device(int) override { throw std::runtime_error(kNoCuda); }
  double pinned_copy_gbps(int, CopyDirection, size_t, double) override { throw std::runtime_error(kNoCuda); }
  double device_copy_gbps(int, size_t, double) override { throw std::runtime_error(kNoCuda); }
  double gemm_tflops(int, GemmPrecision, int, double) override { throw std::runtime_error(kNoCuda); }
  std::string cudnn_version() override { return ""; }
  std::string cudnn_attention(int, const AttentionShape&) override { throw std::runtime_error(kNoCuda); }
  std::string nccl_version() override { return ""; }
};

}  // namespace

std::unique_ptr<GpuProbes> make_gpu_probes() { return std::make_unique<NoGpuProbes>(); }

}  // namespace tt
