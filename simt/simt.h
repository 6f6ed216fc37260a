// What nvcc gives CUDA code, for host C++: the CUDA runtime and cuBLASLt (simt/cuda_api.h,
// simt/cublaslt_api.h), device built-ins (simt/device.h), kernel launches (simt/kernel_launch.h)
// and the tensor-core instructions (simt/tensor_core.h, behind kernels/cuda/mma.cuh).
// Force-included (g++ -include) into a .cu file that simt/rewrite_cu.py has rewritten; the
// kernels/cuda/ files get it through simt/prelude.h, tests/test_simt.cu directly.
#pragma once
#include <math.h>

#include <cstdint>
#include <cstdio>

#include "simt/cublaslt_api.h"
#include "simt/cuda_api.h"
#include "simt/device.h"
#include "simt/kernel_launch.h"
#include "simt/tensor_core.h"

// Code that has two bodies, a GPU's and the emulator's (kernels/cuda/mma.cuh), picks by this.
#define TINYTRAIN_SIMT_EMULATOR 1
