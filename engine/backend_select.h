// --backend auto|cpu|cuda|cuda-emu: which backend runs, and a one-line explanation when auto
// falls back; the CPU threads. This is the one place that knows the CUDA backend can also run
// on the SIMT emulator (simt/): everything else asks it what the choice means.
#pragma once
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>

#include "engine/config.h"
#include "kernels/backend.h"
#include "kernels/cuda_options.h"
#include "kernels/instruments/gpu_probes.h"

namespace tt {

// Options that only the CUDA backend reads.
struct GpuOptions {
  bool tf32 = false;             // --tf32: allow TF32 tensor-core GEMMs
  AttentionKernel attention = AttentionKernel::Flash;  // --attention flash|simt|naive|cudnn
  int device = 0;                // the CUDA device to run on: a rank's LOCAL_RANK
  bool debug_sync = false;       // --debug-sync: wait after every op, name the op that fails
  GemmKernel gemm = GemmKernel::CublasLt;  // --gemm cublaslt|naive|tiled|regblock|mma: what runs the linear ops' GEMMs
};

// Cpu: the CPU backend. Cuda: the CUDA backend, or InputError saying why there is none.
// Auto: CUDA when a GPU works, else the CPU backend, with one line on `note` saying why.
// Cuda and Auto on a machine with GPUs throw InputError when gpu.device is not one of them
// (a launch with more ranks per node than GPUs), rather than falling back to the CPU.
// CudaEmu: the CUDA backend's code on the SIMT emulator (simt/), with one line on `note`.
// With gpu.debug_sync or TINYTRAIN_DEBUG_SYNC=1, a CUDA backend (emulated too) comes wrapped in
// a DebugSyncBackend (kernels/debug_sync_backend.h: every op waited for, no graphs), and one line
// on `note` says so; the CPU backend, whose ops have finished when they return, is left as it is.
std::unique_ptr<Backend> select_backend(BackendChoice choice, const GpuOptions& gpu, std::ostream& note);

// TINYTRAIN_DEBUG_SYNC: "1" on, "0" or unset off; anything else is an InputError.
bool debug_sync_from_environment();

// The backend a choice trains on, before any exists: Auto is Cuda when a GPU is there
// (gpu_present), else Cpu; every other choice is itself.
BackendChoice resolve_auto(BackendChoice choice, bool gpu_present);

// Whether the choice runs the CUDA backend on the emulator: its times and numbers are no
// hardware's (no peaks, no MFU) and its stream is no GPU's (no NCCL, one process).
bool runs_emulated(BackendChoice choice);

// The name of the backend that runs, for the log and the communicator (make_communicator):
// the backend's own name, "cpu" or "cuda", but "cuda-emu" for the CUDA backend on the emulator.
std::string running_backend_name(BackendChoice choice, const Backend& backend);

// doctor's GPU probes (kernels/instruments/gpu_probes.h) for a choice: none for Cpu, the
// emulator's for CudaEmu (InputError in a build without it), the real GPU's otherwise.
std::unique_ptr<GpuProbes> select_gpu_probes(BackendChoice choice);

// Which kind of backend a run would use, and how much memory it may plan for.
struct Placement {
  std::string kind;  // "cpu" or "cuda" (also for cuda-emu: the CUDA backend's own allocations)
  size_t available;  // bytes
  bool measured;     // the free memory measured; false: --device-memory
};

// device_memory (--device-memory, "" when not given) when given, else the free memory of the
// device the run would use (GPU `device`, a rank's LOCAL_RANK). Without a usable GPU there is
// nothing to measure: `train --backend cuda` then stops in select_backend with the reason;
// `plan --backend cuda` (must_measure) needs --device-memory. The emulated device allocates
// what the CUDA backend does, in host memory.
Placement place_run(BackendChoice choice, const std::string& device_memory, bool must_measure, int device);

// Sets the threads used by the CPU backend's loops and by OpenBLAS to one count (0: OpenMP's
// default, all cores unless OMP_NUM_THREADS says otherwise).
void set_cpu_threads(int threads);
// The threads the CPU backend's GEMMs and loops run on now.
int cpu_threads_in_use();

}  // namespace tt
