// Which measured peak MFU is against (engine/profile/mfu.h).
#include "engine/profile/mfu.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "engine/backend_select.h"
#include "engine/profile/peaks.h"
#include "kernels/device_query.h"

namespace tt {

std::string gemm_precision(const std::string& backend_name, Precision storage, bool tf32) {
  if (backend_name != "cuda") return "fp32";
  if (storage == Precision::BF16) return "bf16";
  if (storage == Precision::FP16) return "fp16";
  return tf32 ? "tf32" : "fp32";
}

std::string peaks_device_key(BackendChoice choice, const std::string& backend_name, int local_rank,
                             std::string* why_none) {
  if (runs_emulated(choice)) {
    *why_none = "the emulated GPU (cuda-emu) has no hardware peaks";
    return "";
  }
  if (backend_name == "cpu") return cpu_device_key(cpu_threads_in_use());
  const CudaDeviceInfo info = query_cuda_device(local_rank);
  if (!info.usable) {
    *why_none = info.reason;
    return "";
  }
  return cuda_device_key(info.name, info.major, info.minor);
}

MfuReference mfu_reference(BackendChoice choice, const std::string& backend_name, Precision storage, bool tf32,
                           int local_rank) {
  std::string why_none;
  const std::string device = peaks_device_key(choice, backend_name, local_rank, &why_none);
  if (device.empty()) return {0, "no MFU: " + why_none};
  const std::string precision = gemm_precision(backend_name, storage, tf32);
  const std::optional<Peaks> peaks = load_peaks(device);
  const double peak = peaks ? peak_tflops(*peaks, precision) : 0.0;
  if (peak <= 0)
    return {0, "no MFU: no measured " + precision + " peak for '" + device + "' in " + peaks_file() +
                   " (run `tinytrain doctor` to measure it)"};
  char note[160];
  std::snprintf(note, sizeof(note), "MFU against the %s peak %.3f TFLOP/s measured by `tinytrain doctor` on %s",
                precision.c_str(), peak, peaks->measured.substr(0, 10).c_str());
  return {peak, note};
}

double mfu(double achieved_tflops_per_device, const MfuReference& reference) {
  return reference.peak_tflops > 0 ? achieved_tflops_per_device / reference.peak_tflops : NAN;
}

std::string mfu_text(double mfu_fraction) {
  if (mfu_fraction > kMfuBeyondPeak)
    return "MFU ? (above 100%: the saved peak is stale; rerun `tinytrain doctor` on an idle machine)";
  char text[32];
  std::snprintf(text, sizeof(text), "MFU %.1f%%", 100 * mfu_fraction);
  return text;
}

}  // namespace tt
