// `tinytrain doctor` (engine/doctor/doctor.h) and its host measurements (engine/doctor/cpu_probes.h): the
// measuring functions give physically possible numbers, and the command, run as a user runs
// it, prints one line per probe, says plainly when there is no GPU, fails (exit 1, with a line
// saying what to try) only when a link training needs is broken, emits JSON on --json, runs
// the GPU probes on the SIMT emulator with --backend cuda-emu, and saves measured peaks, never
// emulated ones nor, unless asked, ones measured while other processes held the CPUs; and the
// training log says a saved peak is stale rather than print an MFU above 100%.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend_select.h"
#include "engine/doctor/cpu_probes.h"
#include "engine/profile/mfu.h"
#include "engine/profile/peaks.h"
#include "kernels/cpu/cpu_simd.h"
#include "kernels/device_query.h"
#include "kernels/instruments/gpu_probes.h"
#include "tests/cli_test_util.h"

namespace tt {
namespace {

using test::CliResult;
using test::contains;
using test::regex_match_groups;
using test::regex_search_groups;
using test::run_command;
using test::ScratchDir;

const std::string kBin = TINYTRAIN_BIN;

// ---- the measuring functions ----

// No core does more than 64 fp32 FLOP per cycle (two 512-bit FMA units: 2 x 16 lanes x 2), and
// none runs above 5 GHz for long.
double physical_gflops_bound() { return read_cpu_info().hardware_concurrency * 5.0 * 64.0; }

TEST(CpuProbes, SgemmGflopsArePositiveAndPhysicallyPossible) {
  const double gflops = measure_sgemm_gflops(256, 0.05);
  EXPECT_GT(gflops, 0.0);
  EXPECT_LT(gflops, physical_gflops_bound());
}

// Even from L1 a core moves at most about 128 bytes per cycle; 32 MiB may sit in a large L3,
// so the bound is the caches', not DRAM's.
TEST(CpuProbes, MemoryBandwidthIsPositiveAndPhysicallyPossible) {
  const double gbps = measure_memory_gbps(size_t{32} << 20);
  EXPECT_GT(gbps, 0.0);
  EXPECT_LT(gbps, read_cpu_info().hardware_concurrency * 5.0 * 128.0);
}

TEST(CpuProbes, BusyCpusAreBetweenNoneAndAll) {
  const double busy = measure_busy_cpus(0.05);
  EXPECT_GE(busy, 0.0);
  EXPECT_LE(busy, read_cpu_info().hardware_concurrency + 1e-9);
}

TEST(CpuProbes, CpuInfoAndHostMemoryComeFromProc) {
  const CpuInfo cpu = read_cpu_info();
  EXPECT_FALSE(cpu.model.empty());
  EXPECT_GE(cpu.logical_cpus, 1);
  EXPECT_GE(cpu.usable_cpus, 1);
  EXPECT_LE(cpu.usable_cpus, cpu.logical_cpus);
  EXPECT_EQ(cpu.isa_present.size() + cpu.isa_missing.size(), kIsaFlags.size());
  const HostMemory memory = read_host_memory();
  EXPECT_GT(memory.available_bytes, 0u);
  EXPECT_LE(memory.available_bytes, memory.total_bytes);
  const BlasInfo blas = read_blas_info();
  EXPECT_NE(blas.config.find("OpenBLAS"), std::string::npos) << blas.config;
  EXPECT_GE(blas.threads, 1);
}

// ---- the command ----

// Each test runs doctor with its own peaks file (TINYTRAIN_CACHE_DIR, which the child inherits
// and load_peaks in this process reads too).
class Doctor : public ::testing::Test {
 protected:
  void SetUp() override { setenv("TINYTRAIN_CACHE_DIR", cache_.path().c_str(), 1); }
  void TearDown() override { unsetenv("TINYTRAIN_CACHE_DIR"); }

  // doctor with `args`. The tests of the chain save peaks even when other tests keep the CPUs
  // busy (--save-under-load); PeaksMeasuredUnderLoadAreNotSaved tests that default.
  CliResult doctor(std::vector<std::string> args, bool save_under_load = true) {
    args.insert(args.begin(), {kBin, "doctor"});
    if (save_under_load) args.push_back("--save-under-load");
    return run_command(args, scratch_.path(), 120.0);
  }

  // The device keys in the peaks file.
  std::vector<std::string> saved_devices() const {
    std::vector<std::string> keys;
    const std::string text = test::read_whole_file(peaks_file());
    const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc.contains("devices"))
      for (const auto& entry : doc["devices"].items()) keys.push_back(entry.key());
    return keys;
  }

  ScratchDir cache_, scratch_;
};

// Every line is a probe line "<verdict> <name> <message>" or, under a warn or FAIL, "  try: ...".
struct ProbeLine {
  std::string verdict, name, message, try_next;
};

std::vector<ProbeLine> probe_lines(const CliResult& r) {
  std::vector<ProbeLine> probes;
  const char* probe_re = R"((ok|warn|FAIL|skip) +(\S+) +(.+))";
  for (const std::string& line : r.out_lines()) {
    if (line.rfind("  try: ", 0) == 0) {
      EXPECT_FALSE(probes.empty()) << "a try line before any probe";
      if (!probes.empty()) probes.back().try_next = line.substr(7);
    } else if (const auto m = regex_match_groups(line, probe_re)) {
      probes.push_back({(*m)[1], (*m)[2], (*m)[3], ""});
    } else {
      ADD_FAILURE() << "neither a probe line nor a try line: '" << line << "'";
    }
  }
  return probes;
}

const ProbeLine* find_probe(const std::vector<ProbeLine>& probes, const std::string& name) {
  for (const ProbeLine& p : probes)
    if (p.name == name) return &p;
  return nullptr;
}

// The number a message starts with ("89.5 GFLOP/s ..."), or -1.
double leading_number(const std::string& message) {
  const auto m = regex_search_groups(message, R"(^([\d.]+) )");
  return m ? std::stod((*m)[1]) : -1.0;
}

bool machine_has_gpu() { return query_cuda_device(0).usable; }

TEST_F(Doctor, RunsTheCpuChainSaysThereIsNoGpuAndSavesTheCpuPeaks) {
  const CliResult r = doctor({});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<ProbeLine> probes = probe_lines(r);
  for (const char* name : {"cpu", "cpu.blas", "cpu.sgemm", "cpu.memory", "cpu.ram", "cpu.train_step", "peaks"}) {
    const ProbeLine* p = find_probe(probes, name);
    ASSERT_NE(p, nullptr) << "no probe " << name << "\n" << r.describe();
    // (the cpu line warns when other processes keep the CPUs busy, as other tests may)
    const bool busy_warning = p->name == "cpu" && p->verdict == "warn" && contains(p->message, "busy");
    if (!busy_warning) EXPECT_EQ(p->verdict, "ok") << name << ": " << p->message;
  }
  EXPECT_GT(leading_number(find_probe(probes, "cpu.sgemm")->message), 0.0) << r.out;
  EXPECT_TRUE(contains(find_probe(probes, "cpu.sgemm")->message, "GFLOP/s"));
  EXPECT_GT(leading_number(find_probe(probes, "cpu.memory")->message), 0.0) << r.out;
  EXPECT_TRUE(contains(find_probe(probes, "cpu.memory")->message, "GB/s"));
  EXPECT_TRUE(contains(find_probe(probes, "cpu.train_step")->message, "ms/step"));
  EXPECT_TRUE(contains(find_probe(probes, "cpu.train_step")->message, "(finite)"));
  if (!machine_has_gpu()) {
    const ProbeLine* gpu = find_probe(probes, "gpu.runtime");
    ASSERT_NE(gpu, nullptr) << r.describe();
    EXPECT_EQ(gpu->verdict, "skip");
    EXPECT_TRUE(contains(gpu->message, "no GPU (")) << gpu->message;
    EXPECT_TRUE(contains(gpu->message, "training runs on the CPU backend")) << gpu->message;
    EXPECT_EQ(find_probe(probes, "gpu.train_step"), nullptr) << "auto without a GPU: the GPU section is one line";
  }
  // One process: no all-reduce to measure, and the line says how to get one
  // (tests/mpi/doctor_ranks.sh measures it under mpirun).
  const ProbeLine* all_reduce = find_probe(probes, "allreduce");
  ASSERT_NE(all_reduce, nullptr) << r.describe();
  EXPECT_EQ(all_reduce->verdict, "skip");
  EXPECT_TRUE(contains(all_reduce->message, "one rank")) << all_reduce->message;
  EXPECT_TRUE(contains(all_reduce->message, "mpirun")) << all_reduce->message;
  // The peaks line is the last and names the file; the file holds this CPU's peaks at the
  // threads in use (the child's default is this process's).
  EXPECT_EQ(probes.back().name, "peaks");
  EXPECT_TRUE(contains(probes.back().message, peaks_file())) << probes.back().message;
  const std::optional<Peaks> peaks = load_peaks(cpu_device_key(cpu_threads_in_use()));
  ASSERT_TRUE(peaks.has_value()) << test::read_whole_file(peaks_file());
  EXPECT_GT(peak_tflops(*peaks, "fp32"), 0.0);
  EXPECT_GT(peaks->memory_gbps, 0.0);
  EXPECT_EQ(peaks->measured.size(), std::string("2026-12-01T08:00:00Z").size()) << peaks->measured;
}

TEST_F(Doctor, BackendCudaWithoutGpuFailsAndSaysWhatToTry) {
  if (machine_has_gpu()) GTEST_SKIP() << "this machine has a GPU";
  const CliResult r = doctor({"--backend", "cuda"});
  ASSERT_TRUE(r.exited) << r.describe();
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  const std::vector<ProbeLine> probes = probe_lines(r);
  const ProbeLine* gpu = find_probe(probes, "gpu.runtime");
  ASSERT_NE(gpu, nullptr) << r.describe();
  EXPECT_EQ(gpu->verdict, "FAIL");
  EXPECT_TRUE(contains(gpu->message, "no GPU")) << gpu->message;
  EXPECT_FALSE(gpu->try_next.empty()) << "a FAIL says what to try";
  // The chain went on: the CPU was measured, what needs the GPU says skip and why, and the
  // CPU's peaks were still saved.
  EXPECT_EQ(find_probe(probes, "cpu.sgemm")->verdict, "ok");
  const ProbeLine* step = find_probe(probes, "gpu.train_step");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->verdict, "skip");
  EXPECT_TRUE(contains(step->message, "gpu.runtime failed")) << step->message;
  EXPECT_EQ(probes.back().name, "peaks");
  EXPECT_EQ(probes.back().verdict, "ok");
  for (const ProbeLine& p : probes)
    if (p.verdict == "FAIL") EXPECT_FALSE(p.try_next.empty()) << p.name;
}

TEST_F(Doctor, JsonHasEveryProbe) {
  const CliResult r = doctor({"--json", "--backend", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(doc.is_object()) << "stdout is not one JSON document:\n" << r.out;
  EXPECT_EQ(doc.value("backend", ""), "cpu");
  EXPECT_EQ(doc.value("exit_status", -1), 0);
  EXPECT_EQ(doc.value("peaks_file", ""), peaks_file());
  ASSERT_TRUE(doc.contains("probes") && doc["probes"].is_array());
  std::vector<std::string> names;
  for (const nlohmann::json& p : doc["probes"]) {
    for (const char* field : {"name", "verdict", "message", "try"}) EXPECT_TRUE(p[field].is_string()) << p.dump();
    EXPECT_TRUE(p["numbers"].is_object()) << p.dump();
    names.push_back(p["name"]);
  }
  for (const char* name :
       {"cpu", "cpu.blas", "cpu.sgemm", "cpu.memory", "cpu.ram", "cpu.train_step", "gpu", "allreduce", "peaks"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << "no probe " << name;
  for (const nlohmann::json& p : doc["probes"]) {
    if (p["name"] == "cpu.sgemm") EXPECT_GT(p["numbers"].value("gflops", 0.0), 0.0);
    if (p["name"] == "cpu.memory") EXPECT_GT(p["numbers"].value("gbps", 0.0), 0.0);
    if (p["name"] == "gpu") EXPECT_EQ(p["verdict"], "skip");
  }
}

TEST_F(Doctor, CudaEmuRunsTheGpuProbesOnTheEmulatorAndSavesNoEmulatedPeaks) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator";
#endif
  const CliResult r = doctor({"--backend", "cuda-emu"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<ProbeLine> probes = probe_lines(r);
  for (const char* name : {"gpu0", "gpu0.copy", "gpu0.memory", "gpu0.gemm", "gpu.train_step"}) {
    const ProbeLine* p = find_probe(probes, name);
    ASSERT_NE(p, nullptr) << "no probe " << name << "\n" << r.describe();
    EXPECT_EQ(p->verdict, "ok") << name << ": " << p->message;
    EXPECT_EQ(p->message.rfind("emulated: ", 0), 0u) << name << ": " << p->message;
  }
  EXPECT_TRUE(contains(find_probe(probes, "gpu0.gemm")->message, "bf16")) << r.out;
  EXPECT_TRUE(contains(find_probe(probes, "gpu.train_step")->message, "vs the CPU backend's")) << r.out;
  EXPECT_TRUE(contains(probes.back().message, "not saved")) << probes.back().message;
  const std::vector<std::string> saved = saved_devices();
  EXPECT_EQ(saved.size(), 1u) << "only the CPU's peaks";
  for (const std::string& key : saved) EXPECT_EQ(key.rfind("cpu ", 0), 0u) << key;
}

// Processes that spin on every CPU while they live: the "other processes" of a busy machine.
class BusyCpus {
 public:
  explicit BusyCpus(int count) {
    for (int i = 0; i < count; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        execl("/bin/sh", "sh", "-c", "while :; do :; done", static_cast<char*>(nullptr));
        _exit(127);
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyCpus() {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  BusyCpus(const BusyCpus&) = delete;
  BusyCpus& operator=(const BusyCpus&) = delete;

 private:
  std::vector<pid_t> pids_;
};

// Peaks measured while other processes keep the CPUs busy are too low: doctor reports them and
// does not save them unless told to (--save-under-load), and says how.
TEST_F(Doctor, PeaksMeasuredUnderLoadAreNotSaved) {
  const int cpus = static_cast<int>(read_cpu_info().hardware_concurrency);
  const BusyCpus spinners(cpus);
  const CliResult r = doctor({"--backend", "cpu"}, /*save_under_load=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<ProbeLine> probes = probe_lines(r);
  ASSERT_FALSE(probes.empty()) << r.describe();
  const ProbeLine* cpu = find_probe(probes, "cpu");
  ASSERT_NE(cpu, nullptr) << r.describe();
  EXPECT_EQ(cpu->verdict, "warn") << cpu->message;
  EXPECT_TRUE(contains(cpu->message, "busy with other processes")) << cpu->message;
  const ProbeLine& peaks = probes.back();
  EXPECT_EQ(peaks.name, "peaks");
  EXPECT_EQ(peaks.verdict, "warn") << peaks.message;
  EXPECT_TRUE(contains(peaks.message, "are not saved")) << peaks.message;
  EXPECT_TRUE(contains(peaks.try_next, "--save-under-load")) << peaks.try_next;
  EXPECT_TRUE(saved_devices().empty()) << test::read_whole_file(peaks_file());
  // asked to, it saves them anyway
  const CliResult forced = doctor({"--backend", "cpu"}, /*save_under_load=*/true);
  ASSERT_EQ(forced.exit_code, 0) << forced.describe();
  EXPECT_EQ(saved_devices().size(), 1u) << forced.describe();
}

// The probes of one `doctor --json` run, by name.
std::map<std::string, nlohmann::json> json_probes(const CliResult& r) {
  std::map<std::string, nlohmann::json> probes;
  const nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(doc.is_object() && doc.contains("probes")) << r.describe();
  if (doc.is_object() && doc.contains("probes"))
    for (const nlohmann::json& p : doc["probes"]) probes[p.value("name", "")] = p;
  return probes;
}

// TINYTRAIN_CPU_SIMD=avx2 on an AVX-512 machine reaches the loops and oneDNN from within;
// OpenBLAS, which picks its kernels when it is loaded, only through OPENBLAS_CORETYPE. doctor
// reports what each uses, warns while a GEMM library still uses AVX-512, and saves the capped
// peaks under their own key, beside the uncapped ones.
TEST_F(Doctor, AnAvx2CapReachesTheLoopsAndTheGemmsAndItsPeaksGetTheirOwnKey) {
  if (detected_cpu_simd() != CpuSimd::Avx512) GTEST_SKIP() << "no AVX-512 on this CPU: nothing to cap";
  const std::vector<std::string> args = {"--backend", "cpu", "--threads", "1", "--json"};
  setenv("TINYTRAIN_CPU_SIMD", "avx2", 1);
  unsetenv("OPENBLAS_CORETYPE");
  const CliResult capped = doctor(args);
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  const CliResult both = doctor(args);
  unsetenv("TINYTRAIN_CPU_SIMD");
  unsetenv("OPENBLAS_CORETYPE");
  const CliResult uncapped = doctor(args);
  for (const CliResult* r : {&capped, &both, &uncapped}) ASSERT_EQ(r->exit_code, 0) << r->describe();

  auto gemm_isas = [](const nlohmann::json& blas) {
    std::vector<std::string> isas;
    for (const nlohmann::json& lib : blas["numbers"]["gemm_libraries"]) isas.push_back(lib["isa"]);
    return isas;
  };
  std::map<std::string, nlohmann::json> p = json_probes(capped);
  EXPECT_EQ(p["cpu"]["numbers"]["loops_isa"], "avx2") << capped.out;
  EXPECT_EQ(p["cpu"]["numbers"]["widest_isa"], "avx512") << capped.out;
  EXPECT_TRUE(contains(p["cpu"]["message"], "loops use avx2 (TINYTRAIN_CPU_SIMD")) << capped.out;
  const std::vector<std::string> capped_isas = gemm_isas(p["cpu.blas"]);
  EXPECT_NE(std::count(capped_isas.begin(), capped_isas.end(), "avx512"), 0) << "OpenBLAS keeps its AVX-512 kernels";
  EXPECT_EQ(p["cpu.blas"]["verdict"], "warn") << capped.out;
  EXPECT_TRUE(contains(p["cpu.blas"]["try"], "OPENBLAS_CORETYPE=Haswell")) << capped.out;

  p = json_probes(both);
  for (const std::string& isa : gemm_isas(p["cpu.blas"])) EXPECT_EQ(isa, "avx2") << both.out;
  EXPECT_EQ(p["cpu.blas"]["verdict"], "ok") << both.out;

  p = json_probes(uncapped);
  EXPECT_EQ(p["cpu"]["numbers"]["loops_isa"], "avx512") << uncapped.out;
  const std::vector<std::string> keys = saved_devices();
  EXPECT_EQ(keys.size(), 2u) << test::read_whole_file(peaks_file());
  EXPECT_NE(std::find(keys.begin(), keys.end(), cpu_device_key(1) + " avx2"), keys.end())
      << test::read_whole_file(peaks_file());
  EXPECT_NE(std::find(keys.begin(), keys.end(), cpu_device_key(1)), keys.end()) << test::read_whole_file(peaks_file());
}

// A saved peak below what a step reaches (measured under load, or on other hardware): the log
// says the peak is stale instead of printing an MFU above 100%, and the metrics leave it null.
TEST_F(Doctor, AnMfuAboveTheSavedPeakSaysThePeakIsStale) {
  EXPECT_EQ(mfu_text(0.564), "MFU 56.4%");
  EXPECT_TRUE(contains(mfu_text(1.081), "stale")) << mfu_text(1.081);
  EXPECT_FALSE(contains(mfu_text(1.081), "108")) << mfu_text(1.081);
  Peaks low;
  low.device = cpu_device_key(1);
  low.tflops["fp32"] = 1e-6;  // a microFLOP machine: every step beats it
  low.memory_gbps = 1.0;
  low.measured = "2026-12-03T00:00:00Z";
  save_peaks(low);
  const std::string metrics = scratch_.file("metrics.jsonl");
  const CliResult r = run_command({kBin, "train", "--backend", "cpu", "--threads", "1", "--vocab-size", "32", "--d-model",
                                   "16", "--n-head", "2", "--d-ff", "32", "--seq", "8", "--max-seq-len", "8", "--batch",
                                   "2", "--steps", "4", "--log-every", "1", "--metrics", metrics},
                                  scratch_.path(), 120.0);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  int timed = 0;
  for (const std::string& line : r.out_lines()) {
    if (line.rfind("step", 0) != 0 || contains(line, "? TFLOP/s")) continue;
    ++timed;
    EXPECT_TRUE(contains(line, "MFU ? (above 100%: the saved peak is stale")) << line;
  }
  EXPECT_GT(timed, 0) << r.out;
  for (const std::string& line : CliResult::split_lines(test::read_whole_file(metrics))) {
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_object() && row.contains("mfu")) EXPECT_TRUE(row["mfu"].is_null()) << line;
  }
}

// The copy-kernel probe in this process, on the emulator: it checks that its kernel copied every
// byte (2 MiB: 131072 chunks of 16 bytes, one per thread of 512 blocks).
TEST(GpuProbes, EmulatedCopyKernelCopiesEveryByte) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator";
#else
  const std::unique_ptr<GpuProbes> gpu = emu::make_gpu_probes();
  double gbps = 0;
  ASSERT_NO_THROW(gbps = gpu->device_copy_gbps(0, size_t{2} << 20, 1e-3));
  EXPECT_GT(gbps, 0.0);
#endif
}

TEST_F(Doctor, UnknownBackendIsOneErrorLine) {
  test::expect_user_error(doctor({"--backend", "tpu"}), {"unknown backend 'tpu'"});
}

}  // namespace
}  // namespace tt
