// The emulator's stand-in for the toolkit's <cublasLt.h>: the cuBLASLt subset that
// kernels/cuda/linear.cu uses, declared in namespace simt::cuda_api and implemented on the
// host by a reference GEMM (simt/cublaslt.cpp). Seen only by the emulated build.
#pragma once
#include "simt/cublaslt_api.h"
