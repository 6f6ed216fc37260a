// MFU, model FLOPs utilisation: the model FLOPs a step needs (engine/flops.h) per second, over
// the peak FLOP/s this very hardware was measured to reach (engine/profile/peaks.h, saved by
// `tinytrain doctor`) in the precision the step's GEMMs run in. A measured peak, not the
// datasheet's: it tells how much of what the machine can really do the step uses.
#pragma once
#include <string>

#include "engine/config.h"
#include "engine/train_options.h"  // MfuReference

namespace tt {

// The GEMM precision a backend computes `storage` in: the CPU backend computes everything in
// fp32 (cblas_sgemm); CUDA's fp32 GEMMs run as tf32 with --tf32.
std::string gemm_precision(const std::string& backend_name, Precision storage, bool tf32);

// The key the peaks of the device a backend runs on are saved under (engine/profile/peaks.h): the CPU
// at the threads in use, or the CUDA device of local_rank. "" for the emulated GPU
// and a GPU that is not usable, with *why_none saying so.
std::string peaks_device_key(BackendChoice choice, const std::string& backend_name, int local_rank,
                             std::string* why_none);

// The peak for the backend `train` runs on: the --backend choice (cuda-emu runs CUDA code on
// the CPU: no hardware peak applies), backend_name the backend's own name, the CUDA device
// a rank uses (local_rank) and, on the CPU, the threads in use.
MfuReference mfu_reference(BackendChoice choice, const std::string& backend_name, Precision storage,
                           bool tf32, int local_rank);

// MFU as a fraction: achieved TFLOP/s of one device over its peak; NaN without a peak.
double mfu(double achieved_tflops_per_device, const MfuReference& reference);

// Above 1 a step would beat the hardware's own peak: the saved peak is what is wrong (measured
// while other work held the machine, or on other hardware under the same key).
constexpr double kMfuBeyondPeak = 1.0;
// The log's field for an MFU fraction: "MFU 56.4%", or, above kMfuBeyondPeak, no number and the
// reason: "MFU ? (above 100%: the saved peak is stale; rerun `tinytrain doctor` on an idle machine)".
std::string mfu_text(double mfu_fraction);

}  // namespace tt
