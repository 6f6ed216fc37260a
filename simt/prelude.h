// Force-included (g++ -include) into every kernels/cuda/ file that is built for the SIMT
// emulator, in front of the file's own code as simt/rewrite_cu.py left it. It supplies what
// nvcc would (simt/simt.h).
//
// One program holds the real CUDA backend and this emulated one, compiled from the same
// sources, so the emulated build lives in its own namespace: `tt` is defined to `tt::emu`,
// and `namespace tt {` in a kernels/cuda/ file opens tt::emu. The types both builds share
// (tensor views, the Backend interface, CudaOptions, the shared host/device math) are included
// here first, while `tt` is still tt, so inside tt::emu they are the engine's own.
#pragma once
// The shared host/device formulas' mul_rn/add_rn hold each rounded value here, where the
// kernels are compiled with -ffp-contract=fast (kernels/common/host_device.h).
#define TINYTRAIN_SIMT_KERNEL_CODE 1
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/dtype_dispatch.h"
#include "kernels/common/gelu.h"
#include "kernels/common/half.h"
#include "kernels/cuda_options.h"
#include "simt/simt.h"

#define tt tt::emu
