// The profile table: per-op sums, speeds and roofline (see profile_report.h).
#include "engine/profile/profile_report.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "engine/profile/mfu.h"
#include "engine/profile/peaks.h"

namespace tt {

RooflineLookup lookup_roofline_peaks(BackendChoice choice, const std::string& backend_name,
                                     Precision storage, bool tf32) {
  std::string why_none;
  const std::string device = peaks_device_key(choice, backend_name, /*local_rank=*/-1, &why_none);
  if (device.empty()) return {std::nullopt, "blank: " + why_none};
  const std::optional<Peaks> saved = load_peaks(device);
  if (!saved)
    return {std::nullopt, "blank: no measured peaks for '" + device + "' in " + peaks_file() +
                              " (run `tinytrain doctor` to measure them)"};
  RooflinePeaks peaks;
  peaks.precision = gemm_precision(backend_name, storage, tf32);
  peaks.tflops = peak_tflops(*saved, peaks.precision);
  peaks.memory_gbps = saved->memory_gbps;
  char line[512];
  std::snprintf(line, sizeof line, "the peaks `tinytrain doctor` measured for '%s' (%s): %.3f TFLOP/s %s, %.1f GB/s%s",
                device.c_str(), saved->measured.c_str(), peaks.tflops, peaks.precision.c_str(), peaks.memory_gbps,
                peaks.tflops > 0 && peaks.memory_gbps > 0
                    ? ""
                    : " (a peak is missing: rows that need it stay blank; run `tinytrain doctor`)");
  return {peaks, line};
}

ProfileSummary summarize(const std::vector<StepProfile>& steps) {
  ProfileSummary s;
  s.steps = static_cast<int>(steps.size());
  if (steps.empty()) return s;
  std::map<std::string, OpSummary> by_op;
  for (const StepProfile& step : steps) {
    s.step_ms += step.wall_ms;
    for (const ProfiledOp& op : step.ops) {
      OpSummary& o = by_op[op.name];
      o.op = op.name;
      o.calls += 1;
      o.ms += op.end_ms - op.start_ms;
      o.flops += op.cost.flops;
      o.bytes += op.cost.bytes;
    }
  }
  s.total.op = "all ops";
  const double n = s.steps;
  s.step_ms /= n;
  for (auto& [name, o] : by_op) {
    o.calls /= n;
    o.ms /= n;
    o.flops /= n;
    o.bytes /= n;
    s.total.calls += o.calls;
    s.total.ms += o.ms;
    s.total.flops += o.flops;
    s.total.bytes += o.bytes;
    s.ops.push_back(o);
  }
  std::stable_sort(s.ops.begin(), s.ops.end(), [](const OpSummary& a, const OpSummary& b) { return a.ms > b.ms; });
  return s;
}

std::optional<double> roofline_fraction(double flops, double bytes, double ms, const RooflinePeaks& peaks) {
  if (ms <= 0 || (flops > 0 && peaks.tflops <= 0) || (bytes > 0 && peaks.memory_gbps <= 0) || flops + bytes <= 0)
    return std::nullopt;
  const double compute_s = flops > 0 ? flops / (peaks.tflops * 1e12) : 0.0;
  const double memory_s = bytes > 0 ? bytes / (peaks.memory_gbps * 1e9) : 0.0;
  return std::max(compute_s, memory_s) / (ms * 1e-3);
}

namespace {

constexpr int kOpColumn = 35;  // the longest op name the profiler records: layernorm_residual_dropout_backward

// One row of the table. Values that do not apply (no FLOPs: no TFLOP/s or intensity) print "-".
void print_row(std::ostream& out, const OpSummary& o, double step_ms, const std::optional<RooflinePeaks>& peaks) {
  char calls[16], gflop[16] = "-", tflops[16] = "-", intensity[16] = "-", gbps[16] = "-", roofline[16] = "-";
  std::snprintf(calls, sizeof calls, "%.0f", o.calls);
  const double seconds = o.ms * 1e-3;
  if (o.flops > 0) {
    std::snprintf(gflop, sizeof gflop, "%.3f", o.flops / 1e9);
    if (seconds > 0) std::snprintf(tflops, sizeof tflops, "%.3f", o.flops / seconds / 1e12);
    if (o.bytes > 0) std::snprintf(intensity, sizeof intensity, "%.1f", o.flops / o.bytes);
  }
  if (seconds > 0 && o.bytes > 0) std::snprintf(gbps, sizeof gbps, "%.2f", o.bytes / seconds / 1e9);
  if (peaks)
    if (const std::optional<double> f = roofline_fraction(o.flops, o.bytes, o.ms, *peaks))
      std::snprintf(roofline, sizeof roofline, "%.1f%%", 100 * *f);
  char line[256];
  std::snprintf(line, sizeof line, "%-*s %6s %10.3f %6.1f%% %9s %10.3f %8s %8s %8s %9s", kOpColumn, o.op.c_str(), calls, o.ms,
                step_ms > 0 ? 100 * o.ms / step_ms : 0.0, gflop, o.bytes / 1e6, tflops, gbps, intensity, roofline);
  out << line << '\n';
}

}  // namespace

void print_profile_table(const ProfileSummary& s, const std::optional<RooflinePeaks>& peaks, std::ostream& out) {
  char line[256];
  std::snprintf(line, sizeof line, "%-*s %6s %10s %7s %9s %10s %8s %8s %8s %9s", kOpColumn, "op", "calls", "ms/step", "share",
                "GFLOP", "MB", "TFLOP/s", "GB/s", "FLOP/B", "roofline");
  const std::string rule(std::char_traits<char>::length(line), '-');
  out << line << '\n' << rule << '\n';
  for (const OpSummary& o : s.ops) print_row(out, o, s.step_ms, peaks);
  out << rule << '\n';
  print_row(out, s.total, s.step_ms, peaks);
  // The step as measured on the host: from the call until the backend had finished it.
  std::snprintf(line, sizeof line, "%-*s %6s %10.3f %6.1f%% %9.3f %10s %8.3f", kOpColumn, "step (measured)", "", s.step_ms, 100.0,
                s.total.flops / 1e9, "", s.step_ms > 0 ? s.total.flops / (s.step_ms * 1e-3) / 1e12 : 0.0);
  out << line << '\n';
  // What the ops do not account for: the host's work between them (the engine's own code and
  // the profiler's records) and, on a GPU, the time it sat idle waiting for launches.
  const double outside = s.step_ms - s.total.ms;
  std::snprintf(line, sizeof line, "%-*s %6s %10.3f %6.1f%%", kOpColumn, "outside ops", "", outside,
                s.step_ms > 0 ? 100 * outside / s.step_ms : 0.0);
  out << line << std::endl;
}

}  // namespace tt
