// The `profile` command (see profile_run.h).
#include "engine/profile/profile_run.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "data/file_io.h"
#include "engine/backend_select.h"
#include "engine/profile/chrome_trace.h"
#include "engine/profile/kernel_estimate.h"
#include "engine/token_batch.h"
#include "engine/flops.h"
#include "engine/init.h"
#include "engine/profile/mfu.h"
#include "engine/profile/profile_report.h"
#include "engine/profile/profiler.h"
#include "engine/profile/step_estimate.h"

namespace tt {

namespace {

// Whether this build's emulator counts what its kernels do (simt/launch_counters.h).
bool emulator_counts() {
#ifdef TINYTRAIN_HAVE_SIMT
  return simt::counting_available();
#else
  return false;
#endif
}

}  // namespace

void check_profile_options(const ProfileOptions& o) {
  if (o.train.run.steps < 2)
    throw InputError("invalid config: profile --steps must be at least 2 (the first step is a warm-up, not counted), got " +
                     std::to_string(o.train.run.steps));
  if (!o.estimate_device.empty() && !find_device_model(o.estimate_device)) {
    std::string known;
    for (const std::string& name : device_model_names()) known += (known.empty() ? "" : ", ") + name;
    throw InputError("invalid config: profile --estimate '" + o.estimate_device + "' is not a device the model knows (" +
                     known + ")");
  }
  if (!o.kernel_json_path.empty() && (!runs_emulated(o.backend) || o.estimate_device.empty()))
    throw InputError("invalid config: profile --kernel-json writes the kernel model of --estimate on the emulator: it "
                     "needs --backend cuda-emu and --estimate");
  if (!o.kernel_json_path.empty() && !emulator_counts())
    throw InputError("invalid config: profile --kernel-json writes the emulator's counts modelled, and this build "
                     "counts nothing (the clang sanitizer build); run a GCC build");
  if (o.sample_blocks > 0 && (!runs_emulated(o.backend) || o.estimate_device.empty()))
    throw InputError("invalid config: profile --sample-blocks samples the emulator's blocks for --estimate: it needs "
                     "--backend cuda-emu and --estimate");
}

namespace {

// The emulator's per-launch counting (simt/launch_counters.h), in a build that has the emulator.
void set_emulator_counting(bool on) {
#ifdef TINYTRAIN_HAVE_SIMT
  simt::set_counting(on);
#else
  (void)on;
#endif
}

// --sample-blocks: the emulator runs a sample of each launch's blocks, its checks off (a sampled
// launch leaves most of its output unwritten, which initcheck would stop at).
void sample_emulator_blocks(uint64_t max_blocks) {
#ifdef TINYTRAIN_HAVE_SIMT
  simt::set_block_sampling(max_blocks);
  if (max_blocks > 0) simt::set_checks(false);
#else
  (void)max_blocks;
#endif
}

}  // namespace

void run_profile(Backend& backend, const ProfileOptions& o, std::ostream& out) {
  check_profile_options(o);
  const TrainOptions& t = o.train;
  const int B = t.run.batch, T = t.run.seq;
  // A trace that cannot be written is said before the steps run, not after.
  if (!o.trace_path.empty()) write_chrome_trace(nlohmann::json::object(), o.trace_path);

  if (o.sample_blocks > 0) {
    sample_emulator_blocks(o.sample_blocks);
    out << "sampled: each kernel launch runs at most " << o.sample_blocks
        << " of its blocks, evenly spaced over its grid, and its counts are scaled to the grid; nothing these steps "
           "compute is right, and the emulator's checks are off: only the estimate means something\n";
  }
  ProfilingBackend profiler(backend);
  Trainer trainer(profiler, t);
  if (t.lora.enabled()) {  // (a base drawn from --seed: the ops and their shapes are a fine-tune's)
    trainer.model().load_base(init_params(trainer.model().base_layout(), t.model, t.run.seed, t.init).data());
    trainer.load_params(lora_init(trainer.model().layout(), t.run.seed).data());
  } else {
    trainer.load_params(init_params(trainer.model().layout(), t.model, t.run.seed, t.init).data());
  }
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  std::vector<StepProfile> steps;
  // Step 0 is a warm-up: first touch of the activation memory, GEMM plans and work buffers
  // made on first use. It runs unrecorded; the table is the mean of the steps after it.
  for (int step = 0; step < t.run.steps; ++step) {
    random_batch(t.run.seed, static_cast<uint32_t>(step), B, T, t.model.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), y.data(), static_cast<uint32_t>(step));
    profiler.synchronize();  // (the batch's copy is not the step's time)
    if (step == 0) {
      trainer.train_step(/*use_graph=*/false);
      profiler.synchronize();
      continue;
    }
    profiler.begin_step();
    trainer.train_step(/*use_graph=*/false);  // eagerly: a graph would be one call, not ops
    steps.push_back(profiler.end_step());
  }
  // The profiled steps ran eagerly, op by op; `train` replays each step as one CUDA graph. To
  // say how many nodes that graph holds, one more step is captured on the backend itself (the
  // profiler, outside begin_step/end_step, passes every op on untimed) and counted, never replayed:
  // the profile reads nothing the step would have changed.
  std::optional<GraphNodeCount> graph_nodes;
  if (backend.supports_graphs()) {
    random_batch(t.run.seed, static_cast<uint32_t>(t.run.steps), B, T, t.model.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), y.data(), static_cast<uint32_t>(t.run.steps));
    profiler.synchronize();
    backend.begin_capture();
    trainer.train_step(/*use_graph=*/false);  // the same ops as a captured `train` step
    backend.end_capture();
    graph_nodes = backend.captured_graph_nodes();
  }

  const RooflineLookup peaks = lookup_roofline_peaks(o.backend, backend.name(), o.train.precision, o.tf32);
  const std::string where = backend.name() == "cpu" ? "cpu (" + std::to_string(cpu_threads_in_use()) + " threads)"
                                                    : running_backend_name(o.backend, backend);
  char line[512];
  std::snprintf(line, sizeof line,
                "profile: %d steps on %s, %s, batch %d x seq %d; step 0 was a warm-up, not counted: per step, the mean "
                "of steps 1-%d",
                t.run.steps, where.c_str(), precision_name(t.precision), B, T, t.run.steps - 1);
  out << line << '\n' << "roofline: " << (peaks.peaks ? "against " : "") << peaks.said << '\n';
  const ProfileSummary summary = summarize(steps);
  print_profile_table(summary, peaks.peaks, out);
  // The ops' matrix products against the model's count (engine/flops.h): they must agree.
  const StepFlops model = training_step_flops(t.model, B, T, t.recompute, t.lora);
  std::snprintf(line, sizeof line,
                "flops: %.3f GFLOP per step counted op by op; engine/flops.h: %.3f (model %.3f + recompute %.3f)",
                summary.total.flops / 1e9, model.hardware() / 1e9, model.model() / 1e9, model.recompute / 1e9);
  out << line << '\n';
  if (graph_nodes)
    out << "graph: one step captured as " << graph_nodes_text(*graph_nodes) << " (not replayed: counted only)\n";
  if (!backend.gemm_fallbacks().empty())  // GEMMs on a slower kernel than asked: their times are that kernel's
    out << backend.gemm_fallbacks() << " (distinct GEMMs; stderr names each)\n";
  if (!o.estimate_device.empty()) {
    // One more step, each op captured alone into a graph to count its nodes (so its times are
    // not the profile's), modelled on the named device. A backend without graphs (the CPU)
    // cannot count nodes: the estimate needs --backend cuda or cuda-emu.
    if (!backend.supports_graphs())
      throw InputError("profile --estimate counts each op's CUDA graph nodes: run it with --backend cuda or cuda-emu, "
                       "not " + backend.name());
    random_batch(t.run.seed, static_cast<uint32_t>(t.run.steps), B, T, t.model.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), y.data(), static_cast<uint32_t>(t.run.steps));
    profiler.synchronize();
    // On the emulator, every kernel launch of the step is counted too (simt/launch_counters.h):
    // the kernel model's inputs.
    const bool emulated = runs_emulated(o.backend);
    set_emulator_counting(emulated);
    profiler.begin_step(/*count_nodes=*/true);
    trainer.train_step(/*use_graph=*/false);
    const StepProfile counted = profiler.end_step();
    set_emulator_counting(false);
    const DeviceModel device = *find_device_model(o.estimate_device);
    const StepEstimate estimate =
        estimate_step(counted, device, gemm_precision(backend.name(), o.train.precision, o.tf32));
    const bool on_gpu = backend.name() == "cuda" && !emulated;
    print_step_estimate(estimate, on_gpu ? &summary : nullptr, out);
    if (emulated && !emulator_counts()) {
      out << "kernels: no per-kernel model: this build's emulator counts nothing (no memory watch, no op-count "
             "plugin: the clang sanitizer build); a GCC build prints it\n";
    } else if (emulated) {
      const KernelEstimate kernels = estimate_kernels(counted, device);
      print_kernel_estimate(kernels, estimate, out);
      if (!o.kernel_json_path.empty()) {
        write_file_atomically(o.kernel_json_path, kernel_estimate_json(kernels, estimate).dump(1) + "\n");
        out << "kernels: written to " << o.kernel_json_path << '\n';
      }
    } else
      out << "kernels: the per-kernel model needs the emulator's counts: the same command with --backend cuda-emu "
             "prints it\n";
  }
  if (!o.trace_path.empty()) {
    const nlohmann::json trace = chrome_trace(steps, 1, backend.name());
    write_chrome_trace(trace, o.trace_path);
    out << "trace: " << o.trace_path << " (" << trace["traceEvents"].size()
        << " events): open it in https://ui.perfetto.dev or chrome://tracing" << '\n';
  }
  out.flush();
}

}  // namespace tt
