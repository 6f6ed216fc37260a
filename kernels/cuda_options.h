// Options the CUDA backend reads, shared by its two builds: the real one (kernels/cuda/ with
// nvcc) and the emulated one (the same sources through the SIMT emulator, simt/).
#pragma once

namespace tt {

// Which kernel runs the GEMMs of the linear ops (--gemm).
enum class GemmKernel {
  CublasLt,  // cuBLASLt; tinytrain's tiled GEMM only where cuBLASLt has no algorithm
  Tiled,     // tinytrain's tiled GEMM (kernels/cuda/gemm/gemm_tiled.cu) for every GEMM
};

// Which kernel runs the attention core (--attention; docs/attention.md has the ladder).
enum class AttentionKernel {
  Flash,  // tinytrain's flash attention (kernels/cuda/flash_attention.cu): tiles, online softmax, no (T,T) matrix
  Naive,  // the first rung (kernels/cuda/naive_attention.cu): the (T,T) weights in a workspace, for teaching and comparison
  Cudnn,  // cuDNN's fused attention where it serves the case (use_library_attention), else Flash
};

struct CudaOptions {
  bool tf32 = false;            // allow TF32 tensor-core GEMMs (fp32 inputs, 10-bit mantissa products)
  AttentionKernel attention = AttentionKernel::Flash;  // the attention core's kernels
  int device = 0;               // the CUDA device the backend runs on (a rank's LOCAL_RANK)
  GemmKernel gemm = GemmKernel::CublasLt;  // the linear ops' GEMMs
};

}  // namespace tt
