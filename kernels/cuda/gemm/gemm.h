// tinytrain's own GEMM (gemm_tiled.cu): the same product as the CUDA backend's cuBLASLt
// matmuls, for when cuBLASLt has no algorithm for a GEMM (odd leading dimensions, operands
// aligned to 2, 4 or 8 bytes) and for every GEMM with `--gemm tiled` (docs/kernels.md).
#pragma once
#include <cuda_runtime.h>

#include "kernels/tensor.h"

namespace tt {

// D (m,n) = op(A) (m,k) op(B) (k,n) [+ bias (m) added to every column] + beta D, every matrix
// column-major and packed, as cuBLASLt reads them (linear.cu derives the layouts): A is (m,k),
// or (k,m) with transa; B is (k,n), or (n,k) with transb; D is (m,n). A and B are of ab_type
// (F32, BF16 or F16); D and the bias of d_type, which is ab_type or F32. The products are
// accumulated in fp32 and D is rounded once. beta = 0: D is not read (it may hold NaN).
// Enqueued on `stream` (capturable); throws std::runtime_error naming a failed launch.
void tiled_gemm(int m, int n, int k, bool transa, bool transb, const void* A, const void* B, DType ab_type, void* D,
                DType d_type, const void* bias, float beta, cudaStream_t stream);

}  // namespace tt
