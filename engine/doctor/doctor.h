// `tinytrain doctor`: checks the chain training depends on, link by link, and measures what the
// hardware really does. Each probe prints one line: a verdict (ok, warn, FAIL, skip), its name
// and what it measured, and under a warn or FAIL one "  try: ..." line with the next thing to
// do. A broken link does not stop the chain: later probes still run, and those that depend on
// a broken one say skip and why.
//
//   cpu, cpu.blas, cpu.sgemm, cpu.memory, cpu.ram, cpu.train_step   the host and the CPU backend
//   gpu.runtime, gpu<d>, gpu<d>.copy, gpu<d>.memory, gpu<d>.gemm,    the driver, each device, and
//   gpu<d>.fit, gpu.train_step, cudnn, nccl                          the CUDA backend against the CPU's
//   allreduce                    under mpirun or torchrun: the bus bandwidth of the ranks' all-reduce
//   peaks                                                            the measured peaks file (last)
//
// Under a launch of several ranks, rank 0 runs the chain and prints; the other ranks wait for it
// and join the all-reduce (MPI ranks on the CPU backend, NCCL ranks on GPUs), printing only its
// FAIL line, on stderr, when it fails on their side.
//
// The measured peaks (sgemm and cuBLASLt TFLOP/s, memory bandwidth) are saved with
// engine/profile/peaks.h, for the training log's MFU and `tinytrain profile`; an emulated GPU's
// numbers never are. docs/doctor.md explains each probe.
#pragma once
#include <ostream>
#include <string>

#include "engine/config.h"

namespace tt {

struct DoctorOptions {
  // The backend training would run on, which decides which links it needs. auto: the GPU when
  // there is one, else the CPU (no GPU is then no failure). cpu: the GPU is not probed.
  // cuda-emu: the GPU probes run on the SIMT emulator, tiny.
  BackendChoice backend = BackendChoice::Auto;
  bool json = false;  // one JSON document instead of lines
  // --save-under-load: save the CPU's peaks even when other processes kept the CPUs busy while
  // they were measured (by default such peaks are reported, not saved: MFU against a peak
  // measured low reads high, above 100%)
  bool save_under_load = false;
};

// Runs every probe on the CPU threads in use (set_cpu_threads) and prints the report on `out`.
// Returns the exit status: 1 when a link that training on options.backend needs is broken, else 0.
int run_doctor(const DoctorOptions& options, std::ostream& out);

}  // namespace tt
