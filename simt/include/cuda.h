// The emulator's stand-in for the toolkit's <cuda.h>: the driver API's types that kernels/cuda/
// uses (graph_nodes.cu names a library's kernel nodes through the driver). They live with the
// runtime's in simt/cuda_api.h, as do the functions, which the runtime hands out
// (cudaGetDriverEntryPointByVersion) and nothing links.
#pragma once
#include "simt/cuda_api.h"
