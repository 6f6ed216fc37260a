// What the host is and what it really does: the CPU and its instruction sets, the BLAS library
// and its threads, host memory, and two measurements, single-precision GEMM throughput
// (kernels/cpu/gemm.h, what the CPU backend's matmuls run on) and memory bandwidth (a STREAM-style
// triad, what its elementwise loops are bound by). `tinytrain doctor` prints them and saves the
// measurements as this CPU's peaks (engine/profile/peaks.h); other commands may call them too.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace tt {

struct CpuInfo {
  std::string model;                   // /proc/cpuinfo "model name"
  int logical_cpus = 0;                // "processor" entries in /proc/cpuinfo (hardware threads)
  int physical_cores = 0;              // distinct (physical id, core id) pairs; 0 when not reported
  int usable_cpus = 0;                 // CPUs this process may run on (sched_getaffinity: taskset, containers)
  unsigned hardware_concurrency = 0;   // std::thread::hardware_concurrency()
  std::vector<std::string> isa_present;  // of kIsaFlags, those /proc/cpuinfo lists
  std::vector<std::string> isa_missing;  // of kIsaFlags, the others
};

// The instruction-set extensions that decide CPU GEMM speed: 256-bit vectors (avx2), fused
// multiply-add (fma, two FLOPs per lane per instruction), 512-bit vectors (avx512f). The build
// targets x86-64-v3, which needs avx2 and fma.
extern const std::vector<std::string> kIsaFlags;

CpuInfo read_cpu_info();

// How many CPUs' worth of time other processes use right now: /proc/stat's busy time (user,
// nice, system, irq, softirq, steal) over `seconds` while the calling thread sleeps. A
// measurement taken while others compute gets what they leave over (and threads that wait at
// every barrier for a core someone else holds), so a busy machine measures low.
double measure_busy_cpus(double seconds);

struct HostMemory {
  size_t total_bytes = 0;      // /proc/meminfo MemTotal
  size_t available_bytes = 0;  // MemAvailable: what can be allocated without swapping
};
HostMemory read_host_memory();

struct BlasInfo {
  std::string config;    // openblas_get_config(): version, build options, target core
  std::string core;      // openblas_get_corename(): the kernels chosen for this CPU at run time
  std::string threading; // how OpenBLAS parallelises: "OpenMP", "pthreads" or "sequential"
  int threads = 0;       // openblas_get_num_threads()
};
BlasInfo read_blas_info();

// GFLOP/s (1e9 FLOP/s, 2 n^3 per GEMM) of C = A B for n x n float matrices through the CPU
// backend's GEMM (kernels/cpu/gemm.h: oneDNN where built with it) on the threads in use now: the best of the calls timed within
// min_seconds, after one untimed call (thread start-up, page faults).
double measure_sgemm_gflops(int n, double min_seconds);

// GB/s (1e9 B/s) of a triad a[i] = b[i] + s c[i] over three double arrays that together take
// `bytes`, on the OpenMP threads in use, counting as STREAM does the bytes read and written
// (3 per element pass; the write-allocate read a cache may add is not counted): the best of a
// few passes after first touching the arrays on the threads that use them.
double measure_memory_gbps(size_t bytes);

}  // namespace tt
