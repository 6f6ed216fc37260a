// `tinytrain ops check|perf` (see ops_run.h): which cases run, and the lines they print.
#include "engine/ops/ops_run.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "engine/backend_select.h"
#include "engine/config.h"
#include "engine/ops/op_harness.h"
#include "engine/profile/device_model.h"
#include "engine/profile/kernel_estimate.h"
#include "engine/profile/kernel_model.h"
#include "engine/profile/profile_report.h"
#include "engine/profile/step_estimate.h"
#include "kernels/cpu/cpu_backend.h"

namespace tt {

namespace {

// The ops --op selects: the op of that exact name, else every op whose name contains it.
std::vector<std::string> selected_ops(const std::string& filter) {
  const std::vector<std::string> names = op_names();
  if (filter.empty()) return names;
  std::vector<std::string> chosen;
  for (const std::string& name : names)
    if (name == filter) return {name};
  for (const std::string& name : names)
    if (name.find(filter) != std::string::npos) chosen.push_back(name);
  if (chosen.empty()) {
    std::string list;
    for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
    throw InputError("--op " + filter + ": no op has that name or a name containing it (ops: " + list + ")");
  }
  return chosen;
}

// The storage precisions --dtype selects, all three by default.
std::vector<Precision> selected_precisions(const std::string& dtype) {
  if (dtype.empty()) return {Precision::FP32, Precision::BF16, Precision::FP16};
  return {parse_precision(dtype)};
}

// The cases of the selected ops and precisions, in table order per precision; never none.
std::vector<OpCaseSpec> selected_cases(const OpsOptions& o) {
  const std::vector<std::string> ops = selected_ops(o.op);
  std::vector<OpCaseSpec> cases;
  for (Precision precision : selected_precisions(o.dtype))
    for (const OpCaseSpec& spec : o.attention_sweep ? attention_sweep_cases(activation_dtype(precision))
                                  : o.gpt2_gemms    ? gpt2_gemm_cases(activation_dtype(precision))
                                                    : op_cases(activation_dtype(precision)))
      if (std::find(ops.begin(), ops.end(), spec.op) != ops.end()) cases.push_back(spec);
  if (cases.empty())
    throw InputError("--op " + o.op + " --dtype " + o.dtype +
                     ": no case (fill_zero, grad_norm_check, adamw_step and loss_scaler_update work on fp32 in every "
                     "precision: --dtype fp32)");
  return cases;
}

const char* dtype_label(DType dtype) { return dtype == DType::BF16 ? "bf16" : dtype == DType::F16 ? "fp16" : "fp32"; }

std::string sci(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", x);
  return text;
}

// ---- check ----

int run_check(const OpsOptions& o, Backend& backend, std::ostream& out) {
  if (backend.name() == "cpu") {
    out << "cpu is the reference backend: nothing to check against; use --backend cuda or cuda-emu" << std::endl;
    return 0;
  }
  const std::unique_ptr<Backend> reference = make_cpu_backend();
  char line[256];
  std::snprintf(line, sizeof line, "%-5s%-37s%-54s%-6s%-12s%10s %10s %10s", "", "op", "shape", "dtype", "tensor",
                "max_abs", "max_rel", "tol");
  out << line << std::endl;
  int cases = 0, failed = 0;
  for (const OpCaseSpec& spec : selected_cases(o)) {
    const TensorCheck r = check_case(prepared(spec.make(), *reference), backend, *reference);
    ++cases;
    failed += r.ok ? 0 : 1;
    std::snprintf(line, sizeof line, "%-5s%-37s%-54s%-6s%-12s%10s %10s %10s", r.ok ? "ok" : "FAIL", spec.op.c_str(),
                  spec.shape.c_str(), dtype_label(spec.dtype), r.tensor.c_str(), sci(r.max_abs).c_str(),
                  sci(r.max_rel).c_str(), r.tol == 0.0 ? "exact" : sci(r.tol).c_str());
    out << line << std::endl;  // one line as each case finishes: the emulator takes its time
  }
  if (failed == 0)
    out << "all " << cases << " cases within tolerance of the cpu backend" << std::endl;
  else
    out << failed << " of " << cases << " cases FAIL: beyond tolerance of the cpu backend" << std::endl;
  return failed == 0 ? 0 : 1;
}

// ---- perf ----

// Per case: 2 untimed calls (plans, page faults, caches), then about 0.2 s of timed calls, at
// most 1000 (a tiny op on a GPU takes a few microseconds).
constexpr int kWarmupCalls = 2;
constexpr double kTargetSeconds = 0.2;
constexpr int kMaxCalls = 1000;

#ifdef TINYTRAIN_HAVE_SIMT
// On the emulator: each case runs once with the emulator counting its kernels, and is modelled
// on an H200 twice: from those counts (engine/profile/kernel_model.h) and by its ideal bytes and
// FLOPs (engine/profile/step_estimate.h, the lower bound). Emulated times say nothing of a GPU.
int run_modelled(const OpsOptions& o, Backend& backend, std::ostream& out) {
  if (!simt::counting_available())
    throw InputError("ops perf --backend cuda-emu models each case from the emulator's counts, and this build counts "
                     "nothing (no memory watch, no op-count plugin: the clang sanitizer build); run a GCC build");
  const DeviceModel device = *find_device_model("h200");
  if (o.sample_blocks > 0) {
    simt::set_block_sampling(o.sample_blocks);
    simt::set_checks(false);  // a sampled launch leaves most of its output unwritten
    out << "sampled: each kernel launch runs at most " << o.sample_blocks
        << " of its blocks and its counts are scaled to its grid; the results are not computed, only modelled"
        << std::endl;
  }
  out << "cuda-emu: each case runs once, its kernels counted; 'model us' is a MODEL of them on an "
      << device.description << " from those counts, 'ideal us' a MODEL of its ideal bytes and FLOPs at the peaks (the "
      << "lower bound); neither is a measurement. Inputs: " << device.kernel_sources << "; " << device.sources
      << std::endl;
  const std::unique_ptr<Backend> reference = make_cpu_backend();  // computes the prepared inputs
  char line[320];
  std::snprintf(line, sizeof line, "%-5s %-37s%-54s%-6s %8s %10s %-8s %10s %8s", "", "op", "shape", "dtype",
                "kernels", "model us", "bound", "ideal us", "x ideal");
  out << line << std::endl;
  std::snprintf(line, sizeof line, "%-5s   %-41s%s %10s %-8s", "", "kernel", kernel_counts_header().c_str(), "model us",
                "bound");
  out << line << std::endl;
  for (const OpCaseSpec& spec : selected_cases(o)) {
    const OpTiming t = time_case(prepared(spec.make(), *reference), backend, 0, 0.0, 1, [] { simt::set_counting(true); });
    backend.synchronize();
    simt::set_counting(false);
    const std::vector<simt::LaunchRecord> launches = simt::take_launch_records();
    double model_us = 0, pipe_us[kPipes] = {};
    for (const simt::LaunchRecord& launch : launches) {
      const LaunchModel m = model_launch(launch, device);
      model_us += m.modelled_us;
      for (int p = 0; p < kPipes; ++p) pipe_us[p] += m.pipe_us[p];
    }
    const int bound = static_cast<int>(std::max_element(pipe_us, pipe_us + kPipes) - pipe_us);
    const std::string precision = dtype_label(spec.dtype);
    const IdealOp ideal = ideal_op(spec.op.c_str(), t.cost, static_cast<int>(launches.size()), device,
                                   precision == "fp32" ? "fp32" : precision);
    std::snprintf(line, sizeof line, "%-5s %-37s%-54s%-6s %8zu %10.2f %-8s %10.2f %8.2f", "MODEL", spec.op.c_str(),
                  spec.shape.c_str(), dtype_label(spec.dtype), launches.size(), model_us,
                  launches.empty() ? "-" : pipe_name(bound), ideal.us, ideal.us > 0 ? model_us / ideal.us : 0.0);
    out << line << std::endl;
    for (const simt::LaunchRecord& launch : launches) {  // each kernel: its counts, its time, what bounds it
      const LaunchModel m = model_launch(launch, device);
      std::snprintf(line, sizeof line, "%-5s   %-41s%s %10.2f %-8s", "MODEL", launch.kernel.c_str(),
                    launch.library ? "  (library: its ideal)" : kernel_counts(launch.counters).c_str(), m.modelled_us,
                    pipe_name(m.bound));
      out << line << std::endl;
    }
  }
  return 0;
}
#endif

int run_perf(const OpsOptions& o, Backend& backend, std::ostream& out) {
#ifdef TINYTRAIN_HAVE_SIMT
  if (runs_emulated(o.backend)) return run_modelled(o, backend, out);
#endif
  // The peaks per storage dtype (a GPU's GEMMs run at the dtype's peak), each said once: one
  // line when every dtype has the same (the CPU computes all in fp32), else one per dtype.
  std::map<DType, std::optional<RooflinePeaks>> peaks;
  std::vector<std::pair<std::string, std::string>> said;  // what is said, and of which dtypes
  for (Precision precision : selected_precisions(o.dtype)) {
    const RooflineLookup p = lookup_roofline_peaks(o.backend, backend.name(), precision, /*tf32=*/false);
    peaks[activation_dtype(precision)] = p.peaks;
    auto same = std::find_if(said.begin(), said.end(), [&](const auto& s) { return s.first == p.said; });
    if (same == said.end())
      said.emplace_back(p.said, precision_name(precision));
    else
      same->second += std::string(", ") + precision_name(precision);
  }
  for (const auto& [what, dtypes] : said)
    out << "roofline" << (said.size() > 1 ? " (" + dtypes + ")" : "") << ": " << what << std::endl;
  if (o.attention_sweep)  // what runs each shape: a vendor library's kernel or the backend's own
    for (Precision precision : selected_precisions(o.dtype))
      for (const AttentionShape& s : attention_sweep_shapes()) {
        const std::string said = backend.use_library_attention(s, activation_dtype(precision), 0.0f);
        if (!said.empty())
          out << "attention: " << precision_name(precision) << " T" << s.T << ": " << said << std::endl;
      }
  const std::unique_ptr<Backend> reference = make_cpu_backend();  // computes the prepared inputs
  char line[256];
  std::snprintf(line, sizeof line, "%-37s%-54s%-6s%11s %10s %9s %8s %9s", "op", "shape", "dtype", "us/call",
                "GFLOP/s", "GB/s", "FLOP/B", "roofline");
  out << line << std::endl;
  for (const OpCaseSpec& spec : selected_cases(o)) {
    const OpTiming t = time_case(prepared(spec.make(), *reference), backend, kWarmupCalls, kTargetSeconds, kMaxCalls);
    const double s = t.seconds_per_call;
    char gflops[16] = "-", gbps[16] = "-", intensity[16] = "-", roofline[16] = "-";
    if (t.cost.flops > 0) {
      std::snprintf(gflops, sizeof gflops, "%.1f", t.cost.flops / s / 1e9);
      if (t.cost.bytes > 0) std::snprintf(intensity, sizeof intensity, "%.1f", t.cost.flops / t.cost.bytes);
    }
    if (t.cost.bytes > 0) std::snprintf(gbps, sizeof gbps, "%.2f", t.cost.bytes / s / 1e9);
    if (const std::optional<RooflinePeaks>& p = peaks.at(spec.dtype))
      if (const std::optional<double> f = roofline_fraction(t.cost.flops, t.cost.bytes, s * 1e3, *p))
        std::snprintf(roofline, sizeof roofline, "%.1f%%", 100 * *f);
    std::snprintf(line, sizeof line, "%-37s%-54s%-6s%11.1f %10s %9s %8s %9s", spec.op.c_str(), spec.shape.c_str(),
                  dtype_label(spec.dtype), s * 1e6, gflops, gbps, intensity, roofline);
    out << line << std::endl;
  }
  return 0;
}

}  // namespace

int run_ops(const OpsOptions& o, std::ostream& out) {
  if (o.sample_blocks > 0 && (o.mode != "perf" || !runs_emulated(o.backend)))
    throw InputError("--sample-blocks samples the emulator's blocks for a model: it needs ops perf --backend cuda-emu");
  selected_cases(o);  // an --op that selects nothing is an error before any backend starts
  const std::unique_ptr<Backend> backend = select_backend(o.backend, o.gpu, out);
  return o.mode == "check" ? run_check(o, *backend, out) : run_perf(o, *backend, out);
}

}  // namespace tt
