// The table `tinytrain profile` prints: the recorded steps (engine/profile/profiler.h) summed per op,
// each op's speed and its place on the roofline, and the ops' total against the step's time.
//
// The roofline (Williams, Waterman and Patterson, 2009): an op that does F FLOPs and moves
// B bytes cannot take less than
//     max(F / peak FLOP/s, B / memory bandwidth)
// seconds; equivalently it cannot run faster than min(peak FLOP/s, I x bandwidth) FLOP/s, where
// I = F / B is its arithmetic intensity. The "roofline" column is that bound over the measured
// time: 100% means the op runs as fast as this hardware allows, whatever limits it. For an op
// with FLOPs, that is its achieved FLOP/s over min(peak, I x bandwidth); for an op that only
// moves memory (0 FLOPs counted, engine/profile/op_cost.h), its achieved bandwidth over the peak one.
// The peaks are the ones `tinytrain doctor` measured on this machine (engine/profile/peaks.h), never a
// datasheet's; without them the column stays blank.
#pragma once
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/profile/profiler.h"

namespace tt {

// One op (a Backend method) over the profiled steps, per step.
struct OpSummary {
  std::string op;
  double calls = 0;  // calls per step
  double ms = 0;     // time per step
  double flops = 0;  // FLOPs per step
  double bytes = 0;  // bytes moved per step
};

struct ProfileSummary {
  int steps = 0;               // the steps summed
  double step_ms = 0;          // measured wall time per step
  std::vector<OpSummary> ops;  // slowest first
  OpSummary total;             // every op together ("all ops")
};

ProfileSummary summarize(const std::vector<StepProfile>& steps);

// The two measured peaks the roofline needs.
struct RooflinePeaks {
  std::string precision;  // the GEMM precision the peak FLOP/s is for ("fp32", "tf32", "bf16", "fp16")
  double tflops = 0;      // peak dense GEMM TFLOP/s in that precision
  double memory_gbps = 0; // peak memory bandwidth, GB/s
};

// The roofline's peaks for a backend running `storage` (GEMMs in gemm_precision's precision):
// the ones `tinytrain doctor` saved for its device, and one phrase saying which they are
// ("the peaks `tinytrain doctor` measured for '<device>' (<time>): ...") or why there are none
// ("blank: ..."). `choice` is --backend as given (cuda-emu has no hardware peaks).
struct RooflineLookup {
  std::optional<RooflinePeaks> peaks;
  std::string said;
};
RooflineLookup lookup_roofline_peaks(BackendChoice choice, const std::string& backend_name,
                                     Precision storage, bool tf32);

// The roofline bound over the measured time (1 = at the bound); nullopt when it cannot be
// computed (no time, or a peak the op needs is missing).
std::optional<double> roofline_fraction(double flops, double bytes, double ms, const RooflinePeaks& peaks);

// Prints the table: per op calls/step, ms/step, share of the step, GFLOP, MB, TFLOP/s, GB/s,
// FLOP/B and roofline %; the "all ops" row; the measured step; the time outside any op. Without
// peaks the roofline column is "-".
void print_profile_table(const ProfileSummary& summary, const std::optional<RooflinePeaks>& peaks, std::ostream& out);

}  // namespace tt
