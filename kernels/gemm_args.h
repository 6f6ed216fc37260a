// What one GEMM of the CUDA backend asks of a kernel: the argument struct of tinytrain's own GEMM
// rungs (kernels/cuda/gemm/gemm.h declares them). A kernels/ header, not a kernels/cuda/ one, so
// that the CUDA backend's two builds share the type (kernels/cuda_options.h includes it, which
// simt/prelude.h includes before it renames tt): a test then hands the same struct to either
// build's rungs.
#pragma once

#include "kernels/tensor.h"

namespace tt {

// D (m,n) = op(A) (m,k) op(B) (k,n) [+ bias (m), added to every column] + beta D, and, when
// bias_grad is given, the bias gradient: the column sums of op(B) over k, one per column of D.
// Column-major, as cuBLAS reads matrices (kernels/cuda/linear.cu derives the linear ops' three
// GEMMs in this form), every matrix packed: A is (m,k), or (k,m) with transa; B is (k,n), or
// (n,k) with transb; D is (m,n).
struct GemmArgs {
  int m = 0, n = 0, k = 0;
  bool transa = false, transb = false;
  const void* A = nullptr;
  const void* B = nullptr;
  DType ab_type = DType::F32;  // A and B: F32, BF16 or F16
  void* D = nullptr;
  DType d_type = DType::F32;   // D and the bias: ab_type or F32
  const void* bias = nullptr;  // (m) of d_type, or null
  float beta = 0.0f;           // 0: D is not read (it may hold NaN); else C = D, read in place
  float* bias_grad = nullptr;  // (n) fp32, or null
  bool add_bias_grad = false;  // bias_grad += the column sums (a later micro-batch) instead of =
  bool allow_tf32 = false;     // fp32 operands may be rounded to TF32 for tensor cores (--tf32)
};

}  // namespace tt
