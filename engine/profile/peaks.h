// Measured hardware peaks: what `tinytrain doctor` measured on this machine, kept in a small
// JSON file so that the training log (MFU) and `tinytrain profile` (roofline) compare against
// what this hardware really does rather than a datasheet.
//
// The file ($TINYTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/tinytrain, else ~/.cache/tinytrain,
// then /peaks.json) holds one entry per device key:
//   {"version": 1, "devices": {"cpu Intel(R) Xeon(R) ... threads 2":
//        {"tflops": {"fp32": 0.112}, "memory_gbps": 9.8, "measured": "2026-12-01T08:00:00Z"}}}
// A CPU's peak depends on the threads it runs, so the thread count is part of its key.
#pragma once
#include <map>
#include <optional>
#include <string>

namespace tt {

struct Peaks {
  std::string device;                    // the key: cpu_device_key() or cuda_device_key()
  std::map<std::string, double> tflops;  // precision ("fp32", "tf32", "bf16", "fp16") -> dense GEMM TFLOP/s
  double memory_gbps = 0;                // memory bandwidth (host RAM or device memory), GB/s (1e9 B/s)
  std::string measured;                  // UTC time of the measurement, ISO 8601
};

// Where the peaks live (the directory need not exist yet).
std::string peaks_file();

// The CPU's key: its model name (/proc/cpuinfo) and the threads its GEMMs run, then the vector
// width when TINYTRAIN_CPU_SIMD caps it below the CPU's ("cpu AMD EPYC threads 1 avx2").
std::string cpu_device_key(int threads);
// A GPU's key: its name and compute capability, e.g. "cuda NVIDIA H200 sm_90".
std::string cuda_device_key(const std::string& name, int major, int minor);

// The saved peaks of `device`; nullopt when there is no file, no entry for it, or the file is
// not one of ours (a broken cache file is not an error: doctor rewrites it).
std::optional<Peaks> load_peaks(const std::string& device);

// Adds (or replaces) the entry of peaks.device, keeping the others; written to a temporary file
// and renamed, so a reader never sees half a file. Throws std::runtime_error naming the path
// when it cannot be written.
void save_peaks(const Peaks& peaks);

// The peak TFLOP/s of `precision` in `peaks`, or 0 when that precision was not measured.
double peak_tflops(const Peaks& peaks, const std::string& precision);

}  // namespace tt
