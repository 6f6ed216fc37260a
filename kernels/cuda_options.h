// Options the CUDA backend reads, shared by its two builds: the real one (kernels/cuda/ with
// nvcc) and the emulated one (the same sources through the SIMT emulator, simt/).
#pragma once

#include "kernels/gemm_args.h"  // shared by the two builds too: see there

namespace tt {

// Which kernel runs the GEMMs of the linear ops (--gemm): cuBLASLt, or a rung of tinytrain's
// GEMM ladder (kernels/cuda/gemm/, one file per rung, each a step from the one before).
enum class GemmKernel {
  CublasLt,  // cuBLASLt; the tiled rung only where cuBLASLt has no algorithm
  Naive,     // one thread per element of D (gemm_naive.cu)
  Tiled,     // shared-memory tiles (gemm_tiled.cu)
  RegBlock,  // tiles, and an 8 x 8 block of D in each thread's registers, 16-byte loads (gemm_regblock.cu)
  Mma,       // tensor cores: ldmatrix + mma.sync, cp.async double buffering (gemm_mma.cu); fp32 only with --tf32
};

// Which kernel runs the attention core (--attention; docs/attention.md has the ladder).
enum class AttentionKernel {
  Flash,  // flash attention on tensor cores (kernels/cuda/flash_attention_mma.cu) where it serves the case
          // (bf16/fp16, head sizes 64 and 128), else on the CUDA cores (Simt)
  Simt,   // flash attention on the CUDA cores (kernels/cuda/flash_attention.cu): tiles, online softmax, no (T,T) matrix
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
