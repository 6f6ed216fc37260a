// tinytrain's GEMM ladder: the product cuBLASLt makes for the linear ops (kernels/cuda/linear.cu),
// as four kernels, each a step from the one before, one file each, so that a reader diffs rung n
// against rung n+1 (`--gemm naive|tiled|regblock|mma`; docs/kernels.md):
//
//   gemm_naive.cu     one thread per element of D, operands straight from global memory
//   gemm_tiled.cu     a block stages 64 x 16 slices of op(A) and op(B) in shared memory; each
//                     thread a 4 x 4 block of D
//   gemm_regblock.cu  128 x 128 tiles, an 8 x 8 block of D per thread held in registers, 16-byte
//                     global and shared loads where the alignment allows
//   gemm_mma.cu       tensor cores (ldmatrix, mma.sync), the slices copied by cp.async into two
//                     shared stages with a swizzled layout
//
// The tiled rung also runs the GEMMs cuBLASLt has no algorithm for (--gemm cublaslt).
//
// Every rung takes the one argument struct GemmArgs (kernels/gemm_args.h): any of the four
// transpose combinations, A/B in fp32, bf16 or fp16, D and the bias in A/B's type or fp32, and
// does every epilogue itself (the bias, beta C, the bias gradient written or added), so the
// linear ops need no other kernel. Numerics, common to all: fp32 accumulation, one rounding into
// D (each file says in which order it sums); the bias gradient sums op(B)'s column over p = 0,
// 1, ..., k-1 in order in fp32 from zero and then stores or adds it, the CPU backend's bits.
// Enqueued on `stream` (capturable, no allocation, no atomics, the same bits every run). A GEMM a
// rung cannot do (a D type other than A/B's or fp32, A/B not a float type; fp32 on the mma rung
// without allow_tf32; more columns than its grid can hold) is a std::invalid_argument or
// std::runtime_error naming it; an empty D is nothing to do.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "kernels/gemm_args.h"

namespace tt {

// "m=.. n=.. k=.. transa=.. transb=.. A/B .. D ..": a GEMM in a message.
inline std::string describe_gemm_args(const GemmArgs& g) {
  return "m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
         " transa=" + std::to_string(g.transa) + " transb=" + std::to_string(g.transb) + " A/B " +
         dtype_name(g.ab_type) + " D " + dtype_name(g.d_type);
}

void gemm_naive(const GemmArgs& args, cudaStream_t stream);
void gemm_tiled(const GemmArgs& args, cudaStream_t stream);
void gemm_regblock(const GemmArgs& args, cudaStream_t stream);
void gemm_mma(const GemmArgs& args, cudaStream_t stream);

}  // namespace tt
