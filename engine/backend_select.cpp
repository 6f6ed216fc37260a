// Backend choice and CPU thread control.
#include "engine/backend_select.h"

#include <cblas.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>

#include "engine/memory_plan.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/debug_sync_backend.h"
#include "kernels/cuda_options.h"
#include "kernels/device_query.h"
#ifdef TINYTRAIN_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_backend.h"
#endif
#ifdef TINYTRAIN_HAVE_SIMT
#include "simt/emulated_cuda.h"
#include "simt/schedule.h"
#endif

namespace tt {

namespace {

[[maybe_unused]] CudaOptions cuda_options(const GpuOptions& gpu) {  // unused when neither CUDA build is in
  CudaOptions options;
  options.tf32 = gpu.tf32;
  options.attention = gpu.attention;
  options.device = gpu.device;
  options.gemm = gpu.gemm;
  return options;
}

// A rank's GPU comes from its LOCAL_RANK: more ranks on a node than it has GPUs is a launch
// error, said in one line, and never a silent fallback to the CPU or to a shared GPU. Without
// a usable CUDA driver there is nothing to check: the usual no-GPU path explains that.
void check_device_exists(const GpuOptions& gpu) {
#ifdef TINYTRAIN_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error for the queries that follow
    return;
  }
  if (count > 0 && (gpu.device < 0 || gpu.device >= count))
    throw InputError("LOCAL_RANK " + std::to_string(gpu.device) + " picks GPU " + std::to_string(gpu.device) +
                     ", but this machine has " + std::to_string(count) + " GPU(s)");
#else
  (void)gpu;
#endif
}

// The CUDA backend's own code on the SIMT emulator, with one line saying so.
std::unique_ptr<Backend> open_emulated_cuda_backend(const GpuOptions& gpu, std::ostream& note) {
#ifdef TINYTRAIN_HAVE_SIMT
  note << "backend cuda-emu: the CUDA backend's kernels run on the CPU through the SIMT emulator (schedule "
       << simt::schedule_name(simt::current_schedule()) << "): slow, and results are not a GPU's bits" << std::endl;
  return emu::make_cuda_backend(cuda_options(gpu));
#else
  (void)gpu;
  (void)note;
  throw InputError("--backend cuda-emu: this build has no SIMT emulator (configure with -DTINYTRAIN_SIMT=ON)");
#endif
}

// The CUDA backend, or InputError naming why there is none (no device, driver too old,
// a build without CUDA, out of memory while setting up).
std::unique_ptr<Backend> open_cuda_backend(const GpuOptions& gpu) {
  const CudaDeviceInfo info = query_cuda_device(gpu.device);
  if (!info.usable) throw InputError(info.reason);
#ifdef TINYTRAIN_HAVE_CUDA
  try {
    return make_cuda_backend(cuda_options(gpu));
  } catch (const std::runtime_error& e) {
    throw InputError(std::string("CUDA GPU ") + info.name + " is not usable: " + e.what());
  }
#else
  (void)gpu;
  throw InputError("this build has no CUDA support");
#endif
}

std::unique_ptr<Backend> open_backend(BackendChoice choice, const GpuOptions& gpu, std::ostream& note) {
  switch (choice) {
    case BackendChoice::Cpu:
      return make_cpu_backend();
    case BackendChoice::Cuda:
      check_device_exists(gpu);
      try {
        return open_cuda_backend(gpu);
      } catch (const InputError& e) {
        throw InputError(std::string("--backend cuda: ") + e.what());
      }
    case BackendChoice::CudaEmu:
      return open_emulated_cuda_backend(gpu, note);
    case BackendChoice::Auto:
      break;
  }
  check_device_exists(gpu);
  try {
    return open_cuda_backend(gpu);
  } catch (const InputError& e) {
    note << "backend auto: " << e.what() << "; running on the CPU backend" << std::endl;
    return make_cpu_backend();
  }
}

}  // namespace

bool debug_sync_from_environment() {
  const char* value = std::getenv("TINYTRAIN_DEBUG_SYNC");
  if (!value || std::string(value).empty() || std::string(value) == "0") return false;
  if (std::string(value) == "1") return true;
  throw InputError(std::string("TINYTRAIN_DEBUG_SYNC must be 1 (on) or 0 (off), got '") + value + "'");
}

std::unique_ptr<Backend> select_backend(BackendChoice choice, const GpuOptions& gpu, std::ostream& note) {
  const bool debug_sync = gpu.debug_sync || debug_sync_from_environment();
  std::unique_ptr<Backend> backend = open_backend(choice, gpu, note);
  if (!debug_sync) return backend;
  // The CPU backend runs each op to its end before returning, and an error is thrown by the op
  // that failed: debug-sync has nothing to add there. Accepting the flag (not refusing it) lets
  // one command line serve `--backend auto` on a laptop and on a GPU machine alike.
  if (backend->name() == "cpu") {
    note << "debug-sync: the cpu backend finishes every op before it returns; nothing to add" << std::endl;
    return backend;
  }
  note << "debug-sync: the " << running_backend_name(choice, *backend)
       << " backend waits after every op and names the op that fails; CUDA graphs off (a stream being "
          "captured cannot synchronise); slower"
       << std::endl;
  return std::make_unique<DebugSyncBackend>(std::move(backend));
}

BackendChoice resolve_auto(BackendChoice choice, bool gpu_present) {
  if (choice != BackendChoice::Auto) return choice;
  return gpu_present ? BackendChoice::Cuda : BackendChoice::Cpu;
}

bool runs_emulated(BackendChoice choice) { return choice == BackendChoice::CudaEmu; }

std::string running_backend_name(BackendChoice choice, const Backend& backend) {
  return runs_emulated(choice) ? backend_choice_name(choice) : backend.name();
}

std::unique_ptr<GpuProbes> select_gpu_probes(BackendChoice choice) {
  if (choice == BackendChoice::Cpu) return nullptr;
  if (!runs_emulated(choice)) return make_gpu_probes();
#ifdef TINYTRAIN_HAVE_SIMT
  return emu::make_gpu_probes();
#else
  throw InputError("--backend cuda-emu: this build has no SIMT emulator (configure with -DTINYTRAIN_SIMT=ON)");
#endif
}

Placement place_run(BackendChoice choice, const std::string& device_memory, bool must_measure, int device) {
  const bool emulated = runs_emulated(choice);
  const bool gpu_usable = query_cuda_device(device).usable;
  const std::string kind = resolve_auto(choice, gpu_usable) == BackendChoice::Cpu ? "cpu" : "cuda";
  if (!device_memory.empty()) return {kind, parse_bytes(device_memory), false};
  const bool measurable = kind == "cpu" || emulated || gpu_usable;
  if (must_measure && !measurable)
    throw InputError("plan --backend cuda: no usable CUDA GPU to measure; give --device-memory");
  return {kind, measurable ? available_memory(emulated ? "cpu" : kind, device) : SIZE_MAX, true};
}

void set_cpu_threads(int threads) {
  // 0: OpenMP's default (all cores, or OMP_NUM_THREADS), given to OpenBLAS too. Left alone, the
  // two can disagree: a clang build links LLVM's OpenMP beside the GNU one Debian's OpenBLAS
  // uses, and its GEMMs then ran on 1 thread while our loops ran on all cores.
  if (threads <= 0) threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int cpu_threads_in_use() { return omp_get_max_threads(); }

}  // namespace tt
