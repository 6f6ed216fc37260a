// The emulator's stand-in for the toolkit's <cuda_runtime.h>: the CUDA runtime subset that
// kernels/cuda/ uses, declared in namespace simt::cuda_api and implemented on the host
// (simt/runtime.cpp). Only the emulated build of kernels/cuda/ sees this file (its include
// path puts simt/include first); the real build sees the toolkit's header.
#pragma once
#include "simt/cuda_api.h"
