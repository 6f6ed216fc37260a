// Linear layer y = x W^T + b with PyTorch's weight layout (out_features, in_features),
// forward and backward (CUDA): the three GEMMs through cuBLASLt (the bias fused into the forward
// GEMM's epilogue, the bias gradient into the dW GEMM's) or, with `--gemm naive|tiled|regblock|mma`,
// a rung of our own GEMM ladder (gemm/gemm.h), which fuses every epilogue; a GEMM cuBLASLt has no
// algorithm for runs on the tiled rung. Where cuBLASLt cannot make the bias gradient, our own
// deterministic column-sum kernel makes it in one launch.
// Activations and working weights in fp32, bf16 or fp16 storage, parameter gradients in fp32
// (see "Data types" below).
//
// ---- Row-major tensors, column-major cuBLASLt ----
// cuBLASLt reads matrices column-major. A row-major (r,c) matrix X with row stride c is, byte
// for byte, the column-major (c,r) matrix X^T with leading dimension c. So every row-major
// tensor below is handed to cuBLASLt as its transpose, and each product is rewritten so that
// its column-major result is the transpose of the row-major result we want:
//
//   forward  out (N,O) = inp (N,I) W^T     <=>  out^T (O,N) = W (O,I) inp^T (I,N)
//     A = W:   stored column-major as W^T (I,O), ld I; we need W, so op(A) = T.   m = O, k = I
//     B = inp: stored as inp^T (I,N), ld I; we need inp^T, so op(B) = N.         n = N
//     D = out^T (O,N), ld O. The bias epilogue adds a vector of length m = O (rows of D) to
//     every column, i.e. to every token: exactly out[n][o] += b[o].
//
//   backward dinp (N,I) = dout (N,O) W (O,I)  <=>  dinp^T (I,N) = W^T (I,O) dout^T (O,N)
//     A = W:    stored as W^T (I,O), ld I; op(A) = N.                             m = I, k = O
//     B = dout: stored as dout^T (O,N), ld O; op(B) = N.                          n = N
//     D = dinp^T (I,N), ld I; beta = 0 (input gradients are overwritten).
//
//   backward dW (O,I) += dout^T (O,N) inp (N,I)  <=>  dW^T (I,O) += inp^T (I,N) dout (N,O)
//     A = inp:  stored as inp^T (I,N), ld I; op(A) = N.                           m = I, k = N
//     B = dout: stored as dout^T (O,N), ld O; we need dout (N,O), so op(B) = T.   n = O
//     D = dW^T (I,O), ld I; beta = 0 (ParamGrads::Write) or 1 (Add: C = D in place).
//     The bias gradient db[o] = sum_n dout[n][o] is the sum of op(B) = dout (N,O) over the
//     GEMM's k dimension (the tokens), one value per column of D: exactly cuBLASLt's BGRADB
//     epilogue ("bias gradient of the input matrix B; its size is the number of columns of D;
//     the reduction runs over k"), which WRITES it into the bias pointer. So with
//     ParamGrads::Write the dW GEMM makes both gradients in one launch; with Add (a later
//     micro-batch) the gradient must be added, which the epilogue cannot do, and one column-sum
//     launch adds it instead. BGRADA would sum op(A) = inp^T over k: not what we want.
//
// Every matrix is packed (leading dimension = stored rows), so (m, n, k, transa, transb)
// determines all three layouts.
//
// ---- Data types ----
// inp, weight, bias, out, dout and dinp are in the activation storage type (F32, BF16 or F16:
// the Tensor views say which); dweight and dbias are always F32. Every GEMM accumulates in fp32
// (CUBLAS_COMPUTE_32F, alpha/beta CUDA_R_32F) and rounds once into D:
//
//   GEMM        A, B        C = D       bias          compute
//   forward     16-bit      16-bit      16-bit        CUBLAS_COMPUTE_32F, scale CUDA_R_32F
//   dinp        16-bit      16-bit      -             CUBLAS_COMPUTE_32F, scale CUDA_R_32F (beta 0 or 1)
//   dweight     16-bit      CUDA_R_32F  CUDA_R_32F    CUBLAS_COMPUTE_32F, scale CUDA_R_32F (beta 0 or 1)
//   all three   CUDA_R_32F  CUDA_R_32F  CUDA_R_32F    CUBLAS_COMPUTE_32F (_FAST_TF32 with --tf32)
//
// where 16-bit is CUDA_R_16BF for bf16 storage and CUDA_R_16F for fp16 storage.
// All are rows of the supported-types table of cublasLtMatmul() in the cuBLAS documentation
// (https://docs.nvidia.com/cuda/cublas/#cublasltmatmul): for computeType CUBLAS_COMPUTE_32F and
// scaleType CUDA_R_32F, Atype = Btype = CUDA_R_16BF with Ctype = Dtype CUDA_R_16BF or
// CUDA_R_32F, and the same for CUDA_R_16F; so dweight's 16-bit inputs accumulate straight into
// the fp32 gradient (beta = 1), no fp32 copy of the activations needed. The bias vector's type
// is CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, whose default is "the same type as the elements of
// the output matrix (Dtype)" (cublasLt.h); we set it explicitly to D's type, which is also the
// stored type of the bias, and, for the dW GEMM's BGRADB epilogue, fp32: the type of D there
// (dW) and of the bias gradient alike. TF32 only exists for fp32 inputs, so --tf32 changes the fp32 GEMMs
// only: on the mma rung they then run as TF32 on the tensor cores, and without --tf32 on the
// regblock rung (the other rungs always multiply in fp32). A combination cuBLASLt has no
// algorithm for is said once, with its shape and types, and runs on the tiled rung.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "kernels/common/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/gemm/gemm.h"

namespace tt {

// The descriptors and chosen algorithm of one GEMM; built once (first use, which the trainer's
// eager first step makes happen before graph capture) and reused every step.
struct CudaBackend::GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // C and D share one layout
  cublasLtMatmulAlgo_t algo{};
  bool tiled = false;  // cuBLASLt has no algorithm for this GEMM: the tiled rung runs it

  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {  // statuses ignored: destruction must not throw
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

void CudaBackend::GemmPlanDeleter::operator()(GemmPlan* plan) const noexcept { delete plan; }

namespace {

// The largest power of two (up to 256, cuBLASLt's default assumption) dividing the address.
int pointer_alignment(const void* ptr) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  int alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// The cuBLASLt data type of a float storage dtype.
cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: throw std::invalid_argument(std::string("linear: expected a float tensor, got ") + dtype_name(dtype));
  }
}

const char* cuda_data_type_name(int type) {
  switch (type) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_16F: return "CUDA_R_16F";
    default: return "another cudaDataType_t";
  }
}

// Destroys a matmul preference when it goes out of scope (also when a check throws).
struct PreferenceGuard {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceGuard() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

// "m=.. n=.. k=.. transa=.. transb=.. alignment=.. A/B .. C/D .. compute ..": a GEMM in a message.
std::string describe_gemm(int m, int n, int k, int transa, int transb, int alignment, cudaDataType_t ab_type,
                          cudaDataType_t d_type, bool tf32) {
  return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
         " transa=" + std::to_string(transa) + " transb=" + std::to_string(transb) +
         " alignment=" + std::to_string(alignment) + " A/B " + cuda_data_type_name(ab_type) + " C/D " +
         cuda_data_type_name(d_type) + (tf32 ? " compute 32F_FAST_TF32" : " compute 32F");
}

}  // namespace

const CudaBackend::GemmPlan* CudaBackend::gemm_plan(const GemmKey& key, const void* bias) {
  auto found = gemm_plans_.find(key);
  if (found != gemm_plans_.end()) return found->second.get();

  const auto [m, n, k, transa, transb, epilogue, alignment, bias_alignment, ab_type_key, d_type_key] = key;
  (void)bias_alignment;  // part of the key; the heuristic reads it from the bias pointer itself
  const cudaDataType_t ab_type = static_cast<cudaDataType_t>(ab_type_key);
  const cudaDataType_t d_type = static_cast<cudaDataType_t>(d_type_key);
  // fp32 accumulation, fp32 alpha/beta (see the type table at the top). TF32 tensor cores only
  // for fp32 inputs and only when the user asked for them.
  const bool tf32 = options_.tf32 && ab_type == CUDA_R_32F;
  const std::string gemm = describe_gemm(m, n, k, transa, transb, alignment, ab_type, d_type, tf32) +
                           (epilogue == CUBLASLT_EPILOGUE_BIAS     ? " epilogue BIAS"
                            : epilogue == CUBLASLT_EPILOGUE_BGRADB ? " epilogue BGRADB"
                                                                   : "");

  // Plans are made in the eager first step. A GEMM first seen inside a graph capture is a bug of
  // the caller (a shape the eager step did not run): the heuristic is not called there, since
  // what it may do (allocate, synchronise) is not capturable on every driver.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    throw std::logic_error("the GEMM " + gemm +
                           " is first seen during CUDA graph capture: its cuBLASLt plan must be made before, "
                           "by running the same op eagerly");

  std::unique_ptr<GemmPlan, GemmPlanDeleter> plan(new GemmPlan);
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
  const int32_t op_a = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_b = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const uint32_t epi = static_cast<uint32_t>(epilogue);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
    // BIAS: the bias is stored in the output's type; BGRADB: the bias gradient is fp32, as D (dW) is
    const int32_t bias_type = d_type;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof(bias_type)));
    // the heuristic uses the pointer's value to learn its alignment
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }

  // Layouts of the matrices as stored: op(A) is (m,k), so A is (k,m) when transposed.
  const uint64_t a_rows = transa ? k : m, a_cols = transa ? m : k;
  const uint64_t b_rows = transb ? n : k, b_cols = transb ? k : n;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, ab_type, a_rows, a_cols, static_cast<int64_t>(a_rows)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, ab_type, b_rows, b_cols, static_cast<int64_t>(b_rows)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, d_type, m, n, m));

  // Ask for the heuristic's best algorithm that fits our workspace and our pointers'
  // alignment (cuBLASLt assumes 256-byte aligned matrices unless told otherwise).
  PreferenceGuard pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.pref));
  const uint64_t workspace = lt_workspace_bytes_;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace, sizeof(workspace)));
  const uint32_t align = static_cast<uint32_t>(alignment);
  for (cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.pref, attr, &align, sizeof(align)));

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                                               pref.pref, 1, &result, &returned);
  // No algorithm is CUBLAS_STATUS_NOT_SUPPORTED, or success with no usable result; any other
  // status is a mistake in the call.
  if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED)
    throw_cublas_error(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  const bool found_algo = status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (!found_algo && epi != CUBLASLT_EPILOGUE_DEFAULT) {
    // Fusing the epilogue (bias or bias gradient) is an optimisation: remember that it is not
    // available here; the caller then runs the plain GEMM and makes the vector another way.
    gemm_plans_.emplace(key, nullptr);
    return nullptr;
  }
  if (found_algo) {
    plan->algo = result.algo;
  } else {
    // Said once per distinct GEMM: the plan remembers it, and every later call goes straight
    // to the tiled kernel.
    plan->tiled = true;
    ++gemm_tiled_fallbacks_;
    std::fprintf(stderr, "tinytrain: cuBLASLt has no algorithm for the GEMM %s; tinytrain's tiled GEMM runs it\n",
                 gemm.c_str());
  }

  const GemmPlan* ready = plan.get();
  gemm_plans_.emplace(key, std::move(plan));
  return ready;
}

std::string CudaBackend::gemm_fallbacks() const {
  std::string text;
  if (gemm_tiled_fallbacks_ > 0) text = std::to_string(gemm_tiled_fallbacks_) + " cuBLASLt -> tiled";
  if (!gemm_rung_notes_.empty())
    text += (text.empty() ? "" : ", ") + std::to_string(gemm_rung_notes_.size()) + " mma -> regblock";
  return text.empty() ? "" : "GEMM fallbacks: " + text;
}

bool CudaBackend::matmul(int m, int n, int k, bool transa, bool transb, const void* A, const void* B, DType ab_dtype,
                         void* D, DType d_dtype, const void* bias, float beta, float* bias_grad, bool add_bias_grad) {
  const GemmArgs args{m, n, k, transa, transb, A, B, ab_dtype, D, d_dtype, bias, beta, bias_grad, add_bias_grad,
                      options_.tf32};
  switch (options_.gemm) {  // a rung of the ladder: every GEMM, every epilogue fused
    case GemmKernel::Naive: gemm_naive(args, stream_); return true;
    case GemmKernel::Tiled: gemm_tiled(args, stream_); return true;
    case GemmKernel::RegBlock: gemm_regblock(args, stream_); return true;
    case GemmKernel::Mma:
      if (ab_dtype == DType::F32 && !args.allow_tf32) {  // no tensor cores for exact fp32 products
        const std::string gemm = describe_gemm_args(args);
        if (gemm_rung_notes_.insert(gemm).second)
          std::fprintf(stderr, "tinytrain: the mma GEMM multiplies fp32 only as TF32 (--tf32); the regblock GEMM runs %s\n",
                       gemm.c_str());
        gemm_regblock(args, stream_);
      } else {
        gemm_mma(args, stream_);
      }
      return true;
    case GemmKernel::CublasLt: break;
  }
  if (add_bias_grad)
    throw std::logic_error("matmul: cuBLASLt's bias-gradient epilogue writes the gradient; adding it is the caller's");
  const cudaDataType_t ab_type = cuda_data_type(ab_dtype), d_type = cuda_data_type(d_dtype);
  const int epilogue = bias        ? CUBLASLT_EPILOGUE_BIAS
                       : bias_grad ? CUBLASLT_EPILOGUE_BGRADB
                                   : CUBLASLT_EPILOGUE_DEFAULT;
  const void* vector = bias ? bias : bias_grad;  // the epilogue's bias pointer, read or written
  const int alignment = std::min({pointer_alignment(A), pointer_alignment(B), pointer_alignment(D)});
  const GemmKey key{m, n, k, transa ? 1 : 0, transb ? 1 : 0, epilogue, alignment, vector ? pointer_alignment(vector) : 0,
                    static_cast<int>(ab_type), static_cast<int>(d_type)};
  const GemmPlan* plan = gemm_plan(key, vector);
  if (!plan) return false;  // only for an epilogue: the caller makes the bias (gradient) another way
  if (plan->tiled) {  // a plain GEMM: plans with an epilogue are never tiled (gemm_plan)
    gemm_tiled(args, stream_);
    return true;
  }
  // The bias pointer differs per layer while the plan is shared: set it for this call (the
  // descriptor is read when the matmul is enqueued, so this is safe during graph capture too).
  if (vector)
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof(vector)));
  const float alpha = 1.0f;  // host scalars (the default pointer mode, scale type fp32), read at enqueue time
  // beta = 0: D is not read (it may hold anything, NaN included); C = D: in place when beta = 1.
  CUBLAS_CHECK(cublasLtMatmul(lt_, plan->desc, &alpha, A, plan->a, B, plan->b, &beta, D, plan->c, D, plan->c,
                              &plan->algo, lt_workspace_, lt_workspace_bytes_, stream_));
  return true;
}

namespace {

// in (rows, cols) -> out (cols): the column sums, written or added (accumulate); in in any
// storage type, the sums in fp32. It makes the bias gradient when cuBLASLt's dW GEMM cannot
// (ParamGrads::Add, no cuBLASLt algorithm, a dbias not 16-byte aligned); the rungs of our GEMM
// ladder make it themselves. Decomposition: a block of 32 x 32 threads owns 32 consecutive
// columns; thread (x, y) sums rows y, y + 32, y + 64, ... of column x in that order (each warp
// reads 32 consecutive columns of one row: coalesced), then the 32 partial sums of a column are
// added pairwise in shared memory in a fixed tree (rows y and y + 16, then y and y + 8, ...).
// Deterministic, and 32 threads down each column where one walked all the rows; not the CPU's
// order (rows 0..N-1 in turn), so the two agree to an N-term fp32 sum's rounding.
constexpr int kSumColumns = 32;  // columns a block owns: threadIdx.x
constexpr int kSumRowLanes = 32;  // threads down each column: threadIdx.y

template <typename In>
__global__ void __launch_bounds__(kSumColumns* kSumRowLanes)
    column_sums_kernel(float* out, const In* in, int rows, int cols, bool accumulate) {
  __shared__ float partial[kSumRowLanes][kSumColumns];
  const int x = threadIdx.x, y = threadIdx.y;
  const int col = static_cast<int>(blockIdx.x) * kSumColumns + x;
  float sum = 0.0f;
  if (col < cols)
    for (int64_t r = y; r < rows; r += kSumRowLanes) sum += to_float(in[r * cols + col]);
  partial[y][x] = sum;
  for (int half = kSumRowLanes / 2; half > 0; half /= 2) {
    __syncthreads();  // the rows this step adds are written
    if (y < half) partial[y][x] += partial[y + half][x];
  }
  if (y == 0 && col < cols) out[col] = accumulate ? out[col] + partial[0][x] : partial[0][x];
}

template <typename In>
void launch_column_sums(float* out, const In* in, int rows, int cols, bool accumulate, cudaStream_t stream) {
  column_sums_kernel<In><<<static_cast<unsigned int>(ceil_div(cols, kSumColumns)), dim3(kSumColumns, kSumRowLanes), 0,
                           stream>>>(out, in, rows, cols, accumulate);
  CUDA_CHECK(cudaGetLastError());
}

// Whether to ask cuBLASLt for a vector epilogue (a bias or its gradient) at all: not for a vector
// that is not 16-byte aligned (parameters are packed without padding in the flat buffer, so a
// bias is aligned only when the sizes before it are multiples of 16 bytes) nor for a GEMM with
// a dimension of 1 (where cuBLASLt's bias epilogue has been known to refuse). cuBLASLt may still
// decline; the caller then makes the vector's part another way.
bool vector_epilogue_worth_asking(const void* vector, int m, int n, int k) {
  return reinterpret_cast<uintptr_t>(vector) % 16 == 0 && m > 1 && n > 1 && k > 1;
}

// bias (O) -> out (N,O): every row of out set to the bias (the same storage type: a copy)
// Decomposition: one thread per element of out (grid-stride), consecutive threads on consecutive columns.
template <typename S>
__global__ void broadcast_rows_kernel(S* out, const S* bias, int64_t N, int O) {
  const int64_t total = N * O;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = bias[i % O];
}

}  // namespace

// inp (N,I), weight (O,I), bias (O) or null -> out (N,O)
void CudaBackend::linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  const int N = static_cast<int>(inp.shape[0]), I = static_cast<int>(inp.shape[1]);
  const int O = static_cast<int>(weight.shape[0]);
  const DType dtype = shared_storage_dtype("linear_forward", {out, inp, weight, bias});
  const DType type = dtype;  // A, B, C, D and the bias alike
  const void* b = bias.data;
  // out^T (O,N) = op_T(W^T (I,O)) inp^T (I,N) [+ b]; see the derivation at the top.
  // The bias goes into the GEMM's epilogue when cuBLASLt can fuse it (vector_epilogue_worth_asking
  // says when it is asked to). Otherwise we do as the CPU backend does: fill out with the bias
  // and let the GEMM add onto it (beta = 1; C = D is read in its storage type, and the sum
  // rounded once). The rungs of our GEMM ladder (--gemm naive|tiled|regblock|mma) fuse any bias.
  if (!b) {
    matmul(O, N, I, /*transa=*/true, /*transb=*/false, weight.data, inp.data, type, out.data, type, nullptr, 0.0f);
    return;
  }
  const bool try_epilogue = options_.gemm != GemmKernel::CublasLt || vector_epilogue_worth_asking(b, O, N, I);
  if (try_epilogue && matmul(O, N, I, true, false, weight.data, inp.data, type, out.data, type, b, 0.0f)) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    broadcast_rows_kernel<S><<<grid_stride_blocks(static_cast<int64_t>(N) * O), kThreadsPerBlock, 0, stream_>>>(
        out.as<S>(), bias.as<S>(), N, O);
  });
  CUDA_CHECK(cudaGetLastError());
  matmul(O, N, I, /*transa=*/true, /*transb=*/false, weight.data, inp.data, type, out.data, type, nullptr, 1.0f);
}

// dout (N,O) -> dinp (N,I) = dout W (skipped when null; InputGrad::Add: added to dinp),
// dweight (O,I) = dout^T inp, dbias (O) = column sums of dout (both written or added: grads;
// both skipped when dweight has null data: a frozen weight).
// Work enqueued: the dinp GEMM (when dinp is given) and the dW GEMM, which also makes dbias on a
// rung of our GEMM ladder (written or added), and on cuBLASLt in ParamGrads::Write when it fuses
// the BGRADB epilogue; otherwise one column-sum launch.
void CudaBackend::linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                                  ParamGrads grads, InputGrad input) {
  const int N = static_cast<int>(inp.shape[0]), I = static_cast<int>(inp.shape[1]);
  const int O = static_cast<int>(weight.shape[0]);
  const DType dtype = shared_storage_dtype("linear_backward", {dinp, dout, inp, weight});
  const DType type = dtype;
  float* dw = dweight.data ? dweight.f32() : nullptr;  // parameter gradients: F32 whatever the activations' storage
  float* db = dbias.data ? dbias.f32() : nullptr;
  const bool add = grads == ParamGrads::Add;
  // dinp^T (I,N) = W^T (I,O) dout^T (O,N), overwritten, or added in the GEMM (beta = 1)
  if (dinp.data)
    matmul(I, N, O, false, false, weight.data, dout.data, type, dinp.data, type, nullptr,
           input == InputGrad::Add ? 1.0f : 0.0f);
  if (!dweight.data) return;  // a frozen weight (LoRA's base): no weight or bias gradient
  // dW^T (I,O) = inp^T (I,N) op_T(dout^T (O,N)), written or accumulated in place: 16-bit (or
  // fp32) inputs, fp32 accumulation into the fp32 gradient. dbias from the same GEMM (dout summed
  // over the tokens, k = N): always on our rungs; on cuBLASLt written by its BGRADB epilogue, when
  // it fuses it.
  const bool own_gemm = options_.gemm != GemmKernel::CublasLt;
  const bool write_bias_grad_in_gemm = db && grads == ParamGrads::Write && vector_epilogue_worth_asking(db, I, O, N);
  float* gemm_bias_grad = own_gemm || write_bias_grad_in_gemm ? db : nullptr;
  const bool bias_grad_done = gemm_bias_grad && matmul(I, O, N, false, true, inp.data, dout.data, type, dw, DType::F32,
                                                       nullptr, add ? 1.0f : 0.0f, gemm_bias_grad, add);
  if (!bias_grad_done)
    matmul(I, O, N, false, true, inp.data, dout.data, type, dw, DType::F32, nullptr, add ? 1.0f : 0.0f);

  if (db && !bias_grad_done)  // column sums of dout in one deterministic launch, written or added
    dispatch_storage(dtype, [&](auto storage) {
      using S = decltype(storage);
      launch_column_sums(db, dout.as<S>(), N, O, add, stream_);
    });
}

}  // namespace tt
