// --backend auto|cpu|cuda: which backend runs, and a one-line explanation when auto falls back.
#pragma once
#include <memory>
#include <ostream>
#include <string>

#include "kernels/backend.h"

namespace tt {

// Options that only the CUDA backend reads.
struct GpuOptions {
  bool tf32 = false;             // --tf32: allow TF32 tensor-core GEMMs
  bool cudnn_attention = false;  // --attention cudnn: cuDNN's fused attention where it serves the case
  int device = 0;                // the CUDA device to run on: a rank's LOCAL_RANK
};

// "cpu": the CPU backend. "cuda": the CUDA backend, or InputError saying why there is none.
// "auto": CUDA when a GPU works, else the CPU backend, with one line on `note` saying why.
// "cuda" and "auto" on a machine with GPUs throw InputError when gpu.device is not one of them
// (a launch with more ranks per node than GPUs), rather than falling back to the CPU.
// "cuda-emu": the CUDA backend's code on the SIMT emulator (simt/), with one line on `note`.
std::unique_ptr<Backend> select_backend(const std::string& choice, const GpuOptions& gpu, std::ostream& note);

// Sets the threads used by the CPU backend's loops and by OpenBLAS to one count (0: OpenMP's
// default, all cores unless OMP_NUM_THREADS says otherwise).
void set_cpu_threads(int threads);
// The threads the CPU backend's GEMMs and loops run on now.
int cpu_threads_in_use();

}  // namespace tt
