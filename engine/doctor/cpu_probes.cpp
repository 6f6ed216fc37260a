// Host probes (engine/doctor/cpu_probes.h): /proc/cpuinfo, /proc/meminfo, OpenBLAS, and two timed loops.
#include "engine/doctor/cpu_probes.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "kernels/cpu/gemm.h"

namespace tt {

const std::vector<std::string> kIsaFlags = {"avx2", "fma", "avx512f"};

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// "key<tabs>: value" -> value; "" when the line is not "key".
std::string field_value(const std::string& line, const std::string& key) {
  if (line.compare(0, key.size(), key) != 0) return "";
  const size_t colon = line.find(':', key.size());
  if (colon == std::string::npos || line.find_first_not_of(" \t", key.size()) != colon) return "";
  const size_t start = line.find_first_not_of(" \t", colon + 1);
  return start == std::string::npos ? "" : line.substr(start);
}

}  // namespace

CpuInfo read_cpu_info() {
  CpuInfo info;
  info.hardware_concurrency = std::thread::hardware_concurrency();
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, physical_id, flags;
  std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
  while (std::getline(cpuinfo, line)) {  // one block of "key : value" lines per logical CPU
    if (!field_value(line, "processor").empty()) ++info.logical_cpus;
    if (info.model.empty()) info.model = field_value(line, "model name");
    if (!field_value(line, "physical id").empty()) physical_id = field_value(line, "physical id");
    if (!field_value(line, "core id").empty()) cores.emplace(physical_id, field_value(line, "core id"));
    if (flags.empty()) flags = field_value(line, "flags");  // every CPU lists the same flags
  }
  if (info.model.empty()) info.model = "unknown CPU";
  info.physical_cores = static_cast<int>(cores.size());
  std::istringstream words(flags);
  const std::set<std::string> present{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
  for (const std::string& flag : kIsaFlags) (present.count(flag) ? info.isa_present : info.isa_missing).push_back(flag);
  cpu_set_t usable;
  if (sched_getaffinity(0, sizeof(usable), &usable) == 0) info.usable_cpus = CPU_COUNT(&usable);
  return info;
}

namespace {

struct CpuTimes {
  uint64_t busy = 0, total = 0;  // in clock ticks, all CPUs together
};

// /proc/stat's first line: "cpu  user nice system idle iowait irq softirq steal guest guest_nice".
CpuTimes read_cpu_times() {
  std::ifstream stat("/proc/stat");
  std::string label;
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  stat >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const uint64_t busy = user + nice + system + irq + softirq + steal;  // guest time is inside user already
  return {busy, busy + idle + iowait};
}

}  // namespace

double measure_busy_cpus(double seconds) {
  const CpuTimes before = read_cpu_times();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const CpuTimes after = read_cpu_times();
  const uint64_t total = after.total - before.total;
  if (total == 0) return 0.0;  // no /proc/stat, or too short a wait to see a tick
  const int cpus = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return cpus * static_cast<double>(after.busy - before.busy) / static_cast<double>(total);
}

HostMemory read_host_memory() {
  HostMemory memory;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {  // "MemTotal:       24683620 kB"
    const std::string total = field_value(line, "MemTotal"), available = field_value(line, "MemAvailable");
    if (!total.empty()) memory.total_bytes = std::stoull(total) * 1024;
    if (!available.empty()) memory.available_bytes = std::stoull(available) * 1024;
  }
  return memory;
}

BlasInfo read_blas_info() {
  BlasInfo info;
  info.config = openblas_get_config();
  info.core = openblas_get_corename();
  const int parallel = openblas_get_parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
  info.threading = parallel == 2 ? "OpenMP" : parallel == 1 ? "pthreads" : "sequential";
  info.threads = openblas_get_num_threads();
  return info;
}

double measure_sgemm_gflops(int n, double min_seconds) {
  const size_t elements = static_cast<size_t>(n) * n;
  std::vector<float> a(elements), b(elements), c(elements);
  // Values in [-1, 1]: what a GEMM of weights and activations sees (zeros could take shortcuts).
  for (size_t i = 0; i < elements; ++i) {
    a[i] = static_cast<float>(i % 2001) / 1000.0f - 1.0f;
    b[i] = static_cast<float>((i * 7) % 2001) / 1000.0f - 1.0f;
  }
  auto gemm = [&] {
    gemm_f32(false, false, n, n, n, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  gemm();
  double best = INFINITY, timed = 0;
  while (timed < min_seconds) {
    const Clock::time_point start = Clock::now();
    gemm();
    const double seconds = seconds_since(start);
    best = std::min(best, seconds);
    timed += seconds;
  }
  return 2.0 * n * static_cast<double>(n) * n / best / 1e9;
}

double measure_memory_gbps(size_t bytes) {
  constexpr int kPasses = 5;
  const int64_t n = static_cast<int64_t>(bytes / (3 * sizeof(double)));
  // Uninitialised, then written by the threads that will use each part: Linux places a page on
  // the memory node of the thread that first touches it.
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
  double* pa = a.get();
  double* pb = b.get();
  double* pc = c.get();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 0.0;
    pb[i] = 1.0;
    pc[i] = 2.0;
  }
  const double s = 3.0;
  double best = INFINITY;
  for (int pass = 0; pass < kPasses; ++pass) {
    const Clock::time_point start = Clock::now();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    best = std::min(best, seconds_since(start));
  }
  return 3.0 * sizeof(double) * static_cast<double>(n) / best / 1e9;
}

}  // namespace tt
