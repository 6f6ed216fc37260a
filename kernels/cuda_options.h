// Options the CUDA backend reads, shared by its two builds: the real one (kernels/cuda/ with
// nvcc) and the emulated one (the same sources through the SIMT emulator, simt/).
#pragma once

namespace tt {

// Which kernel runs the GEMMs of the linear ops (--gemm).
enum class GemmKernel {
  CublasLt,  // cuBLASLt; tinytrain's tiled GEMM only where cuBLASLt has no algorithm
  Tiled,     // tinytrain's tiled GEMM (kernels/cuda/tiled_gemm.cu) for every GEMM
};

struct CudaOptions {
  bool tf32 = false;            // allow TF32 tensor-core GEMMs (fp32 inputs, 10-bit mantissa products)
  bool cudnn_attention = false; // may serve attention through cuDNN's fused kernel (use_library_attention)
  int device = 0;               // the CUDA device the backend runs on (a rank's LOCAL_RANK)
  GemmKernel gemm = GemmKernel::CublasLt;  // the linear ops' GEMMs
};

}  // namespace tt
