// `tinytrain doctor` (engine/doctor/doctor.h): the probes in chain order, the report, the saved peaks.
#include "engine/doctor/doctor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/doctor/allreduce_probe.h"
#include "engine/backend_select.h"
#include "engine/config.h"
#include "engine/doctor/cpu_probes.h"
#include "engine/token_batch.h"
#include "engine/init.h"
#include "engine/memory_plan.h"
#include "engine/profile/peaks.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_simd.h"
#include "kernels/cpu/gemm.h"
#include "kernels/instruments/gpu_probes.h"
#include "parallel/communicator.h"
#include "parallel/rank_launch.h"

namespace tt {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

// ---- what one probe reports, and the report ----

enum class Verdict { Ok, Warn, Fail, Skip };

const char* verdict_word(Verdict verdict) {
  switch (verdict) {
    case Verdict::Ok: return "ok";
    case Verdict::Warn: return "warn";
    case Verdict::Fail: return "FAIL";
    case Verdict::Skip: return "skip";
  }
  return "?";
}

// A broken link is a FAIL when training on the chosen backend needs it (then doctor exits 1),
// a warning when training can do without it.
Verdict broken(bool needed) { return needed ? Verdict::Fail : Verdict::Warn; }

struct Probe {
  Probe(std::string probe_name, Verdict v = Verdict::Ok, std::string text = "")
      : name(std::move(probe_name)), verdict(v), message(std::move(text)) {}
  std::string name;
  Verdict verdict;
  std::string message;              // the line: what was measured, or why not
  json numbers = json::object();    // the measurements, named with their units
  std::string try_next;             // warn and FAIL: the next thing to try
};

// Lines are printed as each probe finishes (a slow probe shows where it is); --json collects
// them into one document printed at the end.
class Report {
 public:
  Report(std::ostream& out, bool as_json) : out_(out), as_json_(as_json) {}

  void add(Probe probe) {
    if (!as_json_) {
      char head[64];
      std::snprintf(head, sizeof head, "%-5s %-16s ", verdict_word(probe.verdict), probe.name.c_str());
      out_ << head << probe.message << '\n';
      if (!probe.try_next.empty()) out_ << "  try: " << probe.try_next << '\n';
      out_.flush();
    }
    probes_.push_back(std::move(probe));
  }

  bool any_fail() const {
    for (const Probe& p : probes_)
      if (p.verdict == Verdict::Fail) return true;
    return false;
  }

  void print_json(const std::string& backend, int threads, int exit_status) const {
    if (!as_json_) return;
    json doc = {{"backend", backend}, {"threads", threads}, {"peaks_file", peaks_file()},
                {"exit_status", exit_status}, {"probes", json::array()}};
    for (const Probe& p : probes_)
      doc["probes"].push_back({{"name", p.name},
                               {"verdict", verdict_word(p.verdict)},
                               {"numbers", p.numbers},
                               {"message", p.message},
                               {"try", p.try_next}});
    out_ << doc.dump(2) << std::endl;
  }

 private:
  std::ostream& out_;
  bool as_json_;
  std::vector<Probe> probes_;
};

// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  char buffer[1024];
  std::vsnprintf(buffer, sizeof buffer, fmt, args);
  va_end(args);
  return buffer;
}

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// "1 thread", "2 threads".
std::string threads_text(int threads) { return std::to_string(threads) + (threads == 1 ? " thread" : " threads"); }

// "12.8" from the runtime's 12080.
std::string cuda_version_text(int version) { return format("%d.%d", version / 1000, version % 1000 / 10); }

// ---- the workloads of the training-step probes ----

// The seed workload: `tinytrain train` with no flags.
TrainOptions seed_workload() {
  TrainOptions o;
  o.optimizer.lr = 1e-4;
  return o;
}

// The seed model on a batch small enough for the SIMT emulator to run in a moment.
TrainOptions tiny_workload() {
  TrainOptions o = seed_workload();
  o.run.batch = 2;
  o.run.seq = 16;
  return o;
}

struct StepResult {
  double loss;         // the first step's loss: the initial parameters' (nothing updated yet)
  double ms_per_step;  // the second step's time: the first pays for first-use setup
};

// Two training steps of `o` on `backend` from the seed's initial parameters and batches, eager
// (no CUDA graph), as `train` runs them.
StepResult two_training_steps(Backend& backend, const TrainOptions& o) {
  const int B = o.run.batch, T = o.run.seq;
  Trainer trainer(backend, o);
  trainer.load_params(init_params(trainer.model().layout(), o.model, o.run.seed, o.init).data());
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  StepResult result{};
  for (uint32_t step = 0; step < 2; ++step) {
    random_batch(o.run.seed, step, B, T, o.model.vocab_size, x.data(), y.data());
    const Clock::time_point start = Clock::now();
    trainer.load_batch(x.data(), y.data(), step);
    trainer.train_step(/*use_graph=*/false);
    const double loss = trainer.read_loss();  // waits for the backend
    if (step == 0) result.loss = loss;
    result.ms_per_step = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }
  return result;
}

// ---- the host ----

// Measurement sizes: large enough to leave the caches and amortise start-up, small enough for a
// 2-core CI machine to finish the whole chain in a few seconds.
constexpr int kSgemmN = 1024;
constexpr double kSgemmSeconds = 0.3;
constexpr size_t kTriadBytes = size_t{256} << 20;
// Half a CPU kept busy by others already slows every loop whose threads meet at a barrier:
// the thread that shares its core arrives last, each time.
constexpr double kBusySampleSeconds = 0.2;
constexpr double kBusyCpusWarning = 0.5;

// The host's probes; returns the CPU backend's seed-workload step (none when it failed), the
// reference the GPU's step is compared with. busy_cpus: what other processes kept busy before
// the measurements.
std::optional<StepResult> probe_cpu(Report& report, bool needed, std::vector<Peaks>& peaks, double& busy_cpus) {
  std::optional<StepResult> seed_step;
  const int threads = cpu_threads_in_use();
  const CpuInfo info = read_cpu_info();
  {
    Probe p{"cpu"};
    std::string isa;
    for (const std::string& flag : info.isa_present) isa += " " + flag;
    for (const std::string& flag : info.isa_missing) isa += " no-" + flag;
    // The loops' width: the widest this CPU runs, unless TINYTRAIN_CPU_SIMD caps it (cpu_simd.h).
    const std::string loops = cpu_simd_name(best_cpu_simd()), widest = cpu_simd_name(detected_cpu_simd());
    p.message = format("%s: %d logical CPUs, %d cores, %d usable here, hardware_concurrency %u; ISA%s; the CPU "
                       "backend's loops use %s%s",
                       info.model.c_str(), info.logical_cpus, info.physical_cores, info.usable_cpus,
                       info.hardware_concurrency, isa.c_str(), loops.c_str(),
                       loops == widest ? "" : format(" (TINYTRAIN_CPU_SIMD; the CPU has %s)", widest.c_str()).c_str());
    // Before anything of ours runs: what other processes take from the measurements below.
    const double busy = measure_busy_cpus(kBusySampleSeconds);
    busy_cpus = busy;
    p.message += format("; %.1f CPUs busy with other processes", busy);
    p.numbers = {{"model", info.model}, {"logical_cpus", info.logical_cpus}, {"physical_cores", info.physical_cores},
                 {"usable_cpus", info.usable_cpus}, {"hardware_concurrency", info.hardware_concurrency},
                 {"isa", info.isa_present}, {"isa_missing", info.isa_missing}, {"busy_cpus", busy},
                 {"loops_isa", loops}, {"widest_isa", widest}};
    if (busy >= kBusyCpusWarning) {
      p.verdict = Verdict::Warn;
      p.try_next = "the numbers below are what the other processes leave (top shows them), and the CPU's peaks "
                   "are not saved: run doctor again on an idle machine (or with --save-under-load)";
    }
    report.add(std::move(p));
  }
  {
    Probe p{"cpu.blas"};
    const BlasInfo blas = read_blas_info();
    // Which library computes which GEMMs, with which kernels (kernels/cpu/gemm.h).
    std::string gemms;
    nlohmann::json libraries = nlohmann::json::array();
    bool wider_than_loops = false;
    for (const GemmLibrary& lib : gemm_libraries()) {
      gemms += format("%s%s for %s (%s kernels, %s)", gemms.empty() ? "" : "; ", lib.name.c_str(), lib.products.c_str(),
                      lib.kernels.c_str(), lib.isa.c_str());
      libraries.push_back({{"name", lib.name}, {"kernels", lib.kernels}, {"isa", lib.isa}, {"products", lib.products}});
      wider_than_loops = wider_than_loops || (lib.isa == "avx512" && best_cpu_simd() != CpuSimd::Avx512);
    }
    p.message = format("GEMMs: %s. %s (kernels for %s), %s threading, %s; the CPU backend's loops: %d OpenMP",
                       gemms.c_str(), blas.config.c_str(), blas.core.c_str(), blas.threading.c_str(),
                       threads_text(blas.threads).c_str(), threads);
    p.numbers = {{"config", blas.config}, {"core", blas.core}, {"threading", blas.threading},
                 {"blas_threads", blas.threads}, {"openmp_threads", threads}, {"gemm_libraries", libraries}};
    if (wider_than_loops) {
      // OpenBLAS picks its kernels when it is loaded, before TINYTRAIN_CPU_SIMD is read.
      p.verdict = Verdict::Warn;
      p.try_next = format("the loops are capped at %s but a GEMM library uses AVX-512: OPENBLAS_CORETYPE=Haswell "
                          "caps OpenBLAS too",
                          cpu_simd_name(best_cpu_simd()));
    } else if (blas.threads != threads) {
      p.verdict = Verdict::Warn;
      p.try_next = format("--threads %d sets both to the same count (GEMMs and loops then share the cores evenly)",
                          threads);
    }
    report.add(std::move(p));
  }
  double sgemm_gflops = 0, triad_gbps = 0;
  {
    Probe p{"cpu.sgemm"};
    sgemm_gflops = measure_sgemm_gflops(kSgemmN, kSgemmSeconds);
    p.message = format("%.1f GFLOP/s fp32 (the CPU backend's GEMM, %d^3 on %s, best call over %.1f s)", sgemm_gflops, kSgemmN,
                       threads_text(threads).c_str(), kSgemmSeconds);
    p.numbers = {{"gflops", sgemm_gflops}, {"n", kSgemmN}, {"threads", threads}};
    report.add(std::move(p));
  }
  {
    Probe p{"cpu.memory"};
    triad_gbps = measure_memory_gbps(kTriadBytes);
    p.message = format("%.1f GB/s triad a = b + s c over %.0f MiB (bytes read + written, best of 5, %s)", triad_gbps,
                       kTriadBytes / kMiB, threads_text(threads).c_str());
    p.numbers = {{"gbps", triad_gbps}, {"bytes", kTriadBytes}, {"threads", threads}};
    report.add(std::move(p));
  }
  const TrainOptions seed = seed_workload();
  {
    Probe p{"cpu.ram"};
    const HostMemory memory = read_host_memory();
    const int fits = largest_micro_batch(seed, Recompute::None, memory.available_bytes, "cpu");
    p.message = format("%.1f GiB total, %.1f GiB available: the seed workload fits up to batch %d on the CPU backend",
                       memory.total_bytes / kGiB, memory.available_bytes / kGiB, fits);
    p.numbers = {{"total_bytes", memory.total_bytes}, {"available_bytes", memory.available_bytes},
                 {"largest_seed_batch", fits}};
    if (fits < seed.run.batch) {
      p.verdict = broken(needed);
      p.try_next = "free host memory (other processes), or train with a smaller --batch or --recompute layer";
    }
    report.add(std::move(p));
  }
  if (sgemm_gflops > 0 && triad_gbps > 0)
    peaks.push_back({cpu_device_key(threads), {{"fp32", sgemm_gflops / 1000.0}}, triad_gbps, utc_now_iso8601()});
  {
    Probe p{"cpu.train_step"};
    try {
      std::unique_ptr<Backend> cpu = make_cpu_backend();
      const StepResult step = two_training_steps(*cpu, seed);
      p.numbers = {{"ms_per_step", step.ms_per_step}, {"loss", step.loss}, {"batch", seed.run.batch},
                   {"seq", seed.run.seq}};
      if (std::isfinite(step.loss)) {
        seed_step = step;
        p.message = format("seed workload (batch %d, seq %d, fp32): %.1f ms/step, loss %.5f (finite)", seed.run.batch,
                           seed.run.seq, step.ms_per_step, step.loss);
      } else {
        p.verdict = broken(needed);
        p.message = format("seed workload: the loss is %f", step.loss);
        p.try_next = "tinytrain verify --backend cpu tests/data/<reference>.safetensors shows which tensor goes wrong";
      }
    } catch (const std::exception& e) {
      p.verdict = broken(needed);
      p.message = std::string("seed workload: ") + e.what();
      p.try_next = "tinytrain train --backend cpu --steps 1 --log-every 1 runs the same step on its own";
    }
    report.add(std::move(p));
  }
  return seed_step;
}

// ---- the GPU ----

// Sizes and times of the GPU measurements: a real GPU's, and the emulator's (tiny: they only
// show that the code runs; the numbers mean nothing).
struct GpuSizes {
  size_t copy_bytes;       // each pinned host<->device copy
  size_t memory_bytes;     // each of the copy kernel's two buffers
  int gemm_n;              // n of the n^3 GEMMs
  double seconds;          // timed per measurement
};
constexpr GpuSizes kRealGpu{size_t{256} << 20, size_t{512} << 20, 8192, 0.3};
constexpr GpuSizes kEmulatedGpu{size_t{1} << 20, size_t{1} << 20, 64, 0.01};

// The next thing to try when the runtime finds no GPU.
std::string try_for_no_gpu(const GpuRuntimeInfo& runtime) {
  if (runtime.insufficient_driver)
    return "update the NVIDIA driver to one that supports CUDA " + cuda_version_text(runtime.runtime_version) +
           " (nvidia-smi shows the driver's CUDA version)";
  if (runtime.runtime_version == 0)  // a build without CUDA
    return "install the CUDA toolkit and configure again (CMake looks for nvcc on PATH and in /usr/local/cuda)";
  if (runtime.driver_version == 0)
    return "install the NVIDIA driver (nvidia-smi should then list the GPU); in a container, run it with the GPU "
           "passed through (docker run --gpus all)";
  return "nvidia-smi should list the GPU; check CUDA_VISIBLE_DEVICES, and in a container that it was started with "
         "--gpus all";
}

// What the runtime said, in words: versions, and a driver too old for the runtime ("" in a
// build without CUDA: there is no runtime to ask).
std::string runtime_text(const GpuRuntimeInfo& runtime) {
  if (runtime.runtime_version == 0) return "";
  const std::string driver = runtime.driver_version
                                 ? "driver supports CUDA " + cuda_version_text(runtime.driver_version)
                                 : std::string("no CUDA driver");
  const std::string runtime_version = cuda_version_text(runtime.runtime_version);
  // (only when the runtime refused the driver: an older driver of the same major version may
  // still run this runtime, through CUDA's minor-version compatibility)
  if (runtime.insufficient_driver) return driver + ", runtime needs " + runtime_version + ": update the driver";
  return driver + ", runtime CUDA " + runtime_version;
}

// A rate with the digits that matter: 712, 48.3, 0.0412 (the emulator's rates are tiny).
std::string rate_text(double rate) { return format(rate >= 100 ? "%.0f" : rate >= 1 ? "%.1f" : "%.3g", rate); }

// The measurements of one device; adds its peaks unless emulated.
void probe_device(Report& report, GpuProbes& gpu, int d, bool needed, std::vector<Peaks>& peaks) {
  const bool emulated = gpu.emulated();
  const GpuSizes& size = emulated ? kEmulatedGpu : kRealGpu;
  const std::string name = "gpu" + std::to_string(d);
  const std::string prefix = emulated ? "emulated: " : "";
  GpuDeviceProps props;
  {
    Probe p{name};
    try {
      props = gpu.device(d);
      std::string clocks = emulated ? "no clocks (the emulator does not model time)" : "the driver reports no clocks";
      if (props.sm_clock_khz && props.memory_clock_khz && props.memory_bus_bits)
        clocks = format("SM clock %d MHz, memory clock %d MHz x %d-bit bus", props.sm_clock_khz / 1000,
                        props.memory_clock_khz / 1000, props.memory_bus_bits);
      p.message = prefix + format("%s, compute capability %d.%d, %d SMs, %.1f GiB (%.1f GiB free), ",
                                  props.name.c_str(), props.major, props.minor, props.sm_count,
                                  props.total_bytes / kGiB, props.free_bytes / kGiB) + clocks;
      p.numbers = {{"name", props.name}, {"major", props.major}, {"minor", props.minor}, {"sms", props.sm_count},
                   {"total_bytes", props.total_bytes}, {"free_bytes", props.free_bytes},
                   {"sm_clock_khz", props.sm_clock_khz}, {"memory_clock_khz", props.memory_clock_khz},
                   {"memory_bus_bits", props.memory_bus_bits}, {"emulated", emulated}};
    } catch (const std::exception& e) {
      p.verdict = broken(needed);
      p.message = e.what();
      p.try_next = "nvidia-smi -q -i " + std::to_string(d) + " (is the GPU in an error state or taken by another process?)";
      report.add(std::move(p));
      for (const char* what : {".copy", ".memory", ".gemm", ".fit"})
        report.add({name + what, Verdict::Skip, "needs the device (" + name + " failed)"});
      return;
    }
    report.add(std::move(p));
  }
  Peaks peak{cuda_device_key(props.name, props.major, props.minor), {}, 0, utc_now_iso8601()};
  {
    Probe p{name + ".copy"};
    try {
      const double h2d = gpu.pinned_copy_gbps(d, CopyDirection::HostToDevice, size.copy_bytes, size.seconds);
      const double d2h = gpu.pinned_copy_gbps(d, CopyDirection::DeviceToHost, size.copy_bytes, size.seconds);
      p.message = prefix + "pinned host-to-device " + rate_text(h2d) + " GB/s, device-to-host " + rate_text(d2h) +
                  format(" GB/s (%.0f MiB copies)", size.copy_bytes / kMiB);
      p.numbers = {{"host_to_device_gbps", h2d}, {"device_to_host_gbps", d2h}, {"bytes", size.copy_bytes}};
    } catch (const std::exception& e) {
      p.verdict = broken(needed);
      p.message = e.what();
      p.try_next = "pinned memory is locked RAM: check free host memory and `ulimit -l`";
    }
    report.add(std::move(p));
  }
  {
    Probe p{name + ".memory"};
    try {
      peak.memory_gbps = gpu.device_copy_gbps(d, size.memory_bytes, size.seconds);
      const double spec = props.spec_memory_gbps();
      p.numbers = {{"gbps", peak.memory_gbps}, {"spec_gbps", spec}, {"bytes", size.memory_bytes}};
      p.message = prefix + rate_text(peak.memory_gbps) +
                  format(" GB/s copy kernel (bytes read + written, 2 x %.0f MiB)", size.memory_bytes / kMiB);
      if (spec > 0) {
        p.message += format(": %.0f%% of the %.0f GB/s spec (2 x %d MHz x %d bit / 8)", 100 * peak.memory_gbps / spec,
                            spec, props.memory_clock_khz / 1000, props.memory_bus_bits);
        // A plain copy kernel reaches 80-90% of the spec on current GPUs; far less means
        // something else shares the memory or the clocks are held down.
        if (!emulated && peak.memory_gbps < 0.6 * spec) {
          p.verdict = Verdict::Warn;
          p.try_next = "nvidia-smi (another process on the GPU?) and nvidia-smi -q -d PERFORMANCE (throttled?)";
        }
      } else if (!emulated) {
        p.message += ": no spec to compare (the driver reports no memory clock or bus width)";
      }
    } catch (const std::exception& e) {
      p.verdict = broken(needed);
      p.message = e.what();
      p.try_next = "compute-sanitizer build/tinytrain doctor --backend cuda (a kernel fault names its line)";
    }
    report.add(std::move(p));
  }
  {
    Probe p{name + ".gemm"};
    std::string rates, errors;
    for (GemmPrecision precision : {GemmPrecision::BF16, GemmPrecision::FP16, GemmPrecision::TF32, GemmPrecision::FP32}) {
      const char* key = gemm_precision_name(precision);
      try {
        const double tflops = gpu.gemm_tflops(d, precision, size.gemm_n, size.seconds);
        peak.tflops[key] = tflops;
        p.numbers[std::string(key) + "_tflops"] = tflops;
        rates += (rates.empty() ? "" : ", ") + std::string(key) + " " + rate_text(tflops);
      } catch (const std::exception& e) {
        errors += format("; %s: %s", key, e.what());
      }
    }
    p.numbers["n"] = size.gemm_n;
    p.message = prefix + format("cuBLASLt %d^3: ", size.gemm_n) + (rates.empty() ? "none ran" : rates + " TFLOP/s") + errors;
    if (!errors.empty()) {
      p.verdict = broken(needed);
      p.try_next = "nvidia-smi (memory taken by another process?); the CUDA backend runs every GEMM through cuBLASLt";
    }
    report.add(std::move(p));
  }
  {
    Probe p{name + ".fit"};
    const TrainOptions seed = seed_workload();
    const int fits = largest_micro_batch(seed, Recompute::None, props.free_bytes, "cuda");
    const int fits_recompute = largest_micro_batch(seed, Recompute::Layer, props.free_bytes, "cuda");
    p.message = prefix + format("%.1f GiB free: the seed workload fits up to batch %d (recompute none), %d (recompute "
                                "layer)", props.free_bytes / kGiB, fits, fits_recompute);
    p.numbers = {{"free_bytes", props.free_bytes}, {"largest_seed_batch", fits},
                 {"largest_seed_batch_recompute_layer", fits_recompute}};
    if (fits < seed.run.batch) {
      p.verdict = broken(needed);
      p.try_next = "nvidia-smi shows what else holds GPU memory; or train with a smaller --batch or --recompute layer";
    }
    report.add(std::move(p));
  }
  // One entry per kind of GPU: identical GPUs share a key, and the first one measured speaks for them.
  const bool key_saved =
      std::any_of(peaks.begin(), peaks.end(), [&](const Peaks& saved) { return saved.device == peak.device; });
  if (!emulated && !key_saved && peak.memory_gbps > 0 && !peak.tflops.empty()) peaks.push_back(peak);
}

// The CUDA backend's training step (`backend`: on the GPU or on the emulator) against the CPU
// backend's on the same workload and batch.
void probe_gpu_training(Report& report, BackendChoice backend, bool needed,
                        const std::optional<StepResult>& cpu_seed_step) {
  const bool emulated = runs_emulated(backend);
  Probe p{"gpu.train_step"};
  const TrainOptions work = emulated ? tiny_workload() : seed_workload();
  const std::string prefix = emulated ? "emulated: " : "";
  try {
    std::ostream no_notes(nullptr);  // select_backend's note on cuda-emu: the line says "emulated" already
    GpuOptions on_first_gpu;
    std::unique_ptr<Backend> gpu_backend = select_backend(backend, on_first_gpu, no_notes);
    const StepResult step = two_training_steps(*gpu_backend, work);
    // The reference: the CPU backend's first step on the same workload (the emulator's tiny
    // one costs the CPU a few milliseconds).
    std::optional<double> cpu_loss;
    if (emulated) {
      std::unique_ptr<Backend> cpu_backend = make_cpu_backend();
      cpu_loss = two_training_steps(*cpu_backend, work).loss;
    } else if (cpu_seed_step) {
      cpu_loss = cpu_seed_step->loss;
    }
    p.numbers = {{"ms_per_step", step.ms_per_step}, {"loss", step.loss}, {"batch", work.run.batch},
                 {"seq", work.run.seq}, {"emulated", emulated}};
    p.message = prefix + format("%s workload (batch %d, seq %d, fp32): %.1f ms/step, loss %.5f",
                                emulated ? "tiny" : "seed", work.run.batch, work.run.seq, step.ms_per_step, step.loss);
    if (!std::isfinite(step.loss)) {
      p.verdict = broken(needed);
      p.try_next = "tinytrain verify --backend cuda tests/data/<reference>.safetensors shows which tensor goes wrong";
    } else if (!cpu_loss) {
      p.message += " (finite; no CPU loss to compare: cpu.train_step failed)";
    } else {
      // fp32 on both: the same math summed in another order, so the losses agree to a few
      // units of fp32 rounding; 1e-4 relative is a decade and more above that.
      const double difference = std::fabs(step.loss - *cpu_loss);
      p.numbers["cpu_loss"] = *cpu_loss;
      p.numbers["loss_difference"] = difference;
      p.message += format(" vs the CPU backend's %.5f (|difference| %.1e)", *cpu_loss, difference);
      if (difference > 1e-4 * std::max(1.0, std::fabs(*cpu_loss))) {
        p.verdict = broken(needed);
        p.try_next = "tinytrain verify --backend cuda tests/data/<reference>.safetensors shows which tensor differs";
      }
    }
  } catch (const std::exception& e) {
    p.verdict = broken(needed);
    p.message = prefix + e.what();
    p.try_next = "tinytrain train --backend cuda --steps 2 --log-every 1 runs the same steps on their own";
  }
  report.add(std::move(p));
}

// cuDNN's fused attention and NCCL: optional libraries, never a FAIL (training has its own
// attention kernel, and one GPU needs no NCCL).
void probe_libraries(Report& report, GpuProbes& gpu, int device_count) {
  const bool emulated = gpu.emulated();
  {
    Probe p{"cudnn"};
    const std::string version = gpu.cudnn_version();
    p.numbers = {{"version", version}};
    const TrainOptions seed = seed_workload();
    const AttentionShape shape{seed.run.batch, seed.run.seq, seed.model.n_head, seed.model.head_dim(),
                               seed.model.causal};
    if (device_count == 0) {
      p.verdict = Verdict::Skip;
      p.message = version.empty() ? "this build has no cuDNN" : "cuDNN " + version + ": its attention graph needs a GPU";
    } else {
      try {
        const std::string description = gpu.cudnn_attention(0, shape);
        p.message = format("fused attention (SDPA) builds for the seed shape (B %d, T %d, %d heads of %d) in bf16: ",
                           shape.B, shape.T, shape.NH, shape.HS) + description;
      } catch (const std::exception& e) {
        p.message = e.what();
        if (emulated) {
          p.verdict = Verdict::Skip;
        } else {
          p.verdict = Verdict::Warn;
          p.try_next = version.empty()
                           ? "configure with -DCUDNN_ROOT=<cuDNN install or wheel folder> for --attention cudnn "
                             "(optional: tinytrain's attention kernel runs without it)"
                           : "--attention cudnn will say the same and keep tinytrain's attention kernel; check that "
                             "cuDNN's version supports this GPU";
        }
      }
    }
    report.add(std::move(p));
  }
  {
    Probe p{"nccl"};
    const std::string version = gpu.nccl_version();
    p.numbers = {{"version", version}};
    if (!version.empty()) {
      p.message = "NCCL " + version + ": data parallelism across GPUs";
    } else if (emulated) {
      p.verdict = Verdict::Skip;
      p.message = "the emulated device has no NCCL (and cuda-emu trains in one process)";
    } else {
      p.verdict = device_count > 1 ? Verdict::Warn : Verdict::Skip;
      p.message = "this build has no NCCL: several GPU ranks cannot train";
      if (device_count > 1) p.try_next = "configure with -DNCCL_ROOT=<NCCL install or wheel folder>";
    }
    report.add(std::move(p));
  }
}

// `training_backend`: what training would run on (a GPU one whenever a device is there).
void probe_gpu(Report& report, GpuProbes& gpu, const GpuRuntimeInfo& runtime, BackendChoice training_backend,
               bool needed, const std::optional<StepResult>& cpu_seed_step, std::vector<Peaks>& peaks) {
  const bool emulated = gpu.emulated();
  {
    Probe p{"gpu.runtime"};
    p.numbers = {{"driver_version", runtime.driver_version}, {"runtime_version", runtime.runtime_version},
                 {"device_count", runtime.device_count}, {"error", runtime.error}, {"emulated", emulated}};
    if (emulated) {
      p.verdict = Verdict::Skip;
      p.message = "emulated device: no driver, the SIMT emulator is the runtime (simt/)";
    } else if (runtime.device_count > 0) {
      p.message = runtime_text(runtime) + format(", %d GPU(s)", runtime.device_count);
    } else {
      const std::string why = "no GPU (" + runtime.error + ")";
      if (needed) {
        p.verdict = Verdict::Fail;
        p.message = why;
      } else {
        // --backend auto without a GPU trains on the CPU: not a failure, unless a GPU is there
        // and the driver is merely too old for it.
        p.verdict = runtime.insufficient_driver ? Verdict::Warn : Verdict::Skip;
        p.message = why + ", training runs on the CPU backend";
      }
      if (!runtime_text(runtime).empty()) p.message += "; " + runtime_text(runtime);
      if (p.verdict != Verdict::Skip) p.try_next = try_for_no_gpu(runtime);
    }
    report.add(std::move(p));
  }
  if (runtime.device_count == 0 && !needed) return;  // auto without a GPU: the section is that one line
  if (runtime.device_count == 0) {
    report.add({"gpu.devices", Verdict::Skip, "need a GPU (gpu.runtime failed)"});
    report.add({"gpu.train_step", Verdict::Skip, "needs a GPU (gpu.runtime failed)"});
  } else {
    for (int d = 0; d < runtime.device_count; ++d) probe_device(report, gpu, d, needed, peaks);
    probe_gpu_training(report, training_backend, needed, cpu_seed_step);
  }
  probe_libraries(report, gpu, runtime.device_count);
}

// ---- data parallelism: the all-reduce across the ranks of a launch ----

// Rank 0 probes the whole chain before the all-reduce while the other ranks wait in its first
// collective: the GPU's probes take tens of seconds, far less than this.
constexpr double kAllReduceTimeoutSeconds = 300;
// Sizes where the bus bandwidth is near its plateau: 256 MiB through NCCL (as nccl_busbw's
// largest), 32 MiB of host memory through MPI, which a 2-core CI machine moves in milliseconds.
constexpr int64_t kNcclAllReduceBytes = int64_t{256} << 20;
constexpr int64_t kMpiAllReduceBytes = int64_t{32} << 20;
constexpr int kAllReduceWarmup = 3;
constexpr int kAllReduceIters = 10;

// The all-reduce of data parallelism, on every rank of the launch, through the communicator
// training on `backend` (Cpu, Cuda or CudaEmu) would use: MPI on the CPU, NCCL on GPUs.
// Needed when there are several ranks (they were launched to train together).
void probe_all_reduce(Report& report, const Launch& launch, BackendChoice backend) {
  Probe p{"allreduce"};
  if (launch.world_size == 1) {
    p.verdict = Verdict::Skip;
    p.message = "one rank: launch doctor as training is launched (mpirun -np N; on GPUs also torchrun-style) for "
                "the all-reduce bus bandwidth";
    report.add(std::move(p));
    return;
  }
  if (runs_emulated(backend)) {
    p.verdict = Verdict::Skip;
    p.message = format("%d ranks: the emulated GPU (cuda-emu) has no data parallelism", launch.world_size);
    report.add(std::move(p));
    return;
  }
  try {
    const bool on_gpu = backend == BackendChoice::Cuda;
    std::ostream no_note(nullptr);
    GpuOptions gpu;
    gpu.device = launch.local_rank;
    std::unique_ptr<Communicator> comm;  // (declared first, so that it outlives the backend, as in train)
    const std::unique_ptr<Backend> memory = select_backend(backend, gpu, no_note);
    comm = make_communicator(launch, running_backend_name(backend, *memory), memory->native_stream(),
                             kAllReduceTimeoutSeconds);
    const int W = comm->world_size();
    const AllReduceMeasure m = measure_all_reduce(*comm, *memory, on_gpu ? kNcclAllReduceBytes : kMpiAllReduceBytes,
                                                  kAllReduceWarmup, kAllReduceIters);
    p.numbers = {{"transport", comm->transport()}, {"ranks", W},          {"bytes", m.bytes},
                 {"ms", m.seconds * 1e3},          {"algbw_gbps", m.algbw_gbps()}, {"busbw_gbps", m.busbw_gbps(W)},
                 {"sums_right", m.sums_right}};
    p.message = format("%s, %d ranks: busbw %s GB/s (algbw %s GB/s): %.0f MiB float32 sums in %.3f ms, mean of %d "
                       "calls and the ranks",
                       comm->transport(), W, rate_text(m.busbw_gbps(W)).c_str(), rate_text(m.algbw_gbps()).c_str(),
                       m.bytes / kMiB, m.seconds * 1e3, kAllReduceIters);
    if (!m.sums_right) {
      p.verdict = Verdict::Fail;
      p.message += format("; but the sums are wrong (every element should be %d)", W * (W + 1) / 2);
      p.try_next = on_gpu ? "run nccl_busbw --ranks 2 and NCCL_DEBUG=INFO to see the transport NCCL chose"
                          : "check that every rank runs the same OpenMPI (mpirun --version, ldd build/tinytrain)";
    }
  } catch (const std::exception& e) {
    p.verdict = Verdict::Fail;
    p.message = format("%d ranks: ", launch.world_size) + e.what();
    p.try_next = "CPU ranks: mpirun -np N tinytrain doctor --backend cpu; GPU ranks: one per GPU, under mpirun or "
                 "torchrun-style variables (docs/parallel.md)";
  }
  report.add(std::move(p));
}

// Saves the measured peaks. held_back: why peaks that were measured are not among them ("" for
// none), said on the line with a warning.
void save_measured_peaks(Report& report, const std::vector<Peaks>& peaks, bool emulated_gpu,
                         const std::string& held_back) {
  Probe p{"peaks"};
  std::string not_saved = emulated_gpu ? "; the emulated GPU's numbers are not peaks: not saved" : "";
  if (!held_back.empty()) {
    not_saved += "; " + held_back;
    p.verdict = Verdict::Warn;
    p.try_next = "run doctor again on an idle machine, or add --save-under-load to save these anyway";
  }
  if (peaks.empty()) {
    if (held_back.empty()) p.verdict = Verdict::Skip;
    p.message = "nothing saved" + not_saved;
    report.add(std::move(p));
    return;
  }
  try {
    std::string keys;
    for (const Peaks& peak : peaks) {
      save_peaks(peak);
      keys += (keys.empty() ? "'" : ", '") + peak.device + "'";
      p.numbers["devices"].push_back(peak.device);
    }
    p.numbers["file"] = peaks_file();
    p.message = "saved " + keys + " to " + peaks_file() + not_saved;
  } catch (const std::exception& e) {
    p.verdict = Verdict::Warn;
    p.message = e.what();
    p.try_next = "set TINYTRAIN_CACHE_DIR to a writable directory (the training log's MFU reads the peaks from there)";
  }
  report.add(std::move(p));
}

}  // namespace

int run_doctor(const DoctorOptions& options, std::ostream& out) {
  const BackendChoice choice = options.backend;
  // Under a launch of several ranks only rank 0 probes and reports; the others join it for the
  // all-reduce, the one link that needs them all, and say only what failed there (on stderr).
  const Launch launch = detect_launch();
  std::ostringstream other_rank_lines;
  Report report(launch.rank == 0 ? out : other_rank_lines, /*as_json=*/launch.rank == 0 && options.json);
  const std::unique_ptr<GpuProbes> gpu = select_gpu_probes(choice);
  const GpuRuntimeInfo runtime = gpu ? gpu->runtime() : GpuRuntimeInfo{};
  // The links training needs: the GPU's where it would train there, else the CPU's.
  const BackendChoice training_backend = resolve_auto(choice, runtime.device_count > 0);
  const bool trains_on_gpu = training_backend != BackendChoice::Cpu;
  if (launch.rank != 0) {
    probe_all_reduce(report, launch, training_backend);
    if (!report.any_fail()) return 0;
    std::cerr << "doctor, rank " << launch.rank << ": " << other_rank_lines.str() << std::flush;
    return 1;
  }
  std::vector<Peaks> peaks;
  double busy_cpus = 0.0;
  const std::optional<StepResult> cpu_seed_step = probe_cpu(report, /*needed=*/!trains_on_gpu, peaks, busy_cpus);
  // The CPU's peaks (all of `peaks` so far) measured while other processes held the CPUs are too
  // low: saved, they would make every later MFU read high (above 100% once the machine is idle).
  std::string held_back;
  if (busy_cpus >= kBusyCpusWarning && !peaks.empty() && !options.save_under_load) {
    held_back = format("the CPU's peaks, measured with %.1f CPUs busy with other processes, are not saved", busy_cpus);
    peaks.clear();
  }
  if (gpu)
    probe_gpu(report, *gpu, runtime, training_backend, trains_on_gpu, cpu_seed_step, peaks);
  else
    report.add({"gpu", Verdict::Skip, "--backend cpu: the GPU is not probed"});
  probe_all_reduce(report, launch, training_backend);
  save_measured_peaks(report, peaks, gpu && gpu->emulated(), held_back);
  const int exit_status = report.any_fail() ? 1 : 0;
  report.print_json(backend_choice_name(choice), cpu_threads_in_use(), exit_status);
  return exit_status;
}

}  // namespace tt
