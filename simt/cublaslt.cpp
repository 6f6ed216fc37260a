// cuBLASLt on the host (simt/cublaslt_api.h). Descriptors hold their attributes; the heuristic
// checks a GEMM the way the library's documentation describes and returns one "algorithm"
// that records the alignments it was chosen for; cublasLtMatmul checks the call against it and
// computes D = alpha op(A) op(B) + beta C [+ bias] with fp32 accumulation (OpenBLAS sgemm on
// fp32 copies of the operands: 16-bit values widen exactly), rounding once into D's type: the
// product, alpha times it and beta C are added in fp32 and only their sum is rounded, as the
// library's epilogue does (for an fp32 D with alpha = beta = 1, the bits of a product stored in
// fp32 and then added to C). The BGRADB epilogue also writes the bias gradient, each column of
// op(B) summed over k in increasing order in fp32 (the CPU backend's column-sum order).
// With CUBLAS_COMPUTE_32F_FAST_TF32 the operands are first rounded to TF32 (10 mantissa bits,
// to nearest even): a model of tensor-core TF32, not its bits. Every refusal also prints one
// line on stderr saying why, since a status alone rarely tells a learner what was wrong.
// TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM=1 makes the heuristic find no algorithm for any GEMM
// (docs/emulation.md): how the tests reach the CUDA backend's fallback to its tiled GEMM.
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <utility>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "simt/cublaslt_api.h"
#include "simt/device_memory.h"
#include "simt/launch_counters.h"
#include "simt/library_work.h"
#include "simt/memory_watch.h"

namespace simt::cuda_api {

struct LtContext {};
struct LtMatmulDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type (the documented default)
};
struct LtMatrixLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct LtPreference {
  uint64_t max_workspace = 0;
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt's default assumption
};

}  // namespace simt::cuda_api

namespace simt {

using namespace cuda_api;

namespace {

constexpr uint64_t kAlgoMagic = 0x73696d74616c676full;  // marks an algorithm this heuristic made
constexpr uint32_t kWidestAccess = 16;                  // no kernel needs more than 16-byte alignment

cublasStatus_t refuse(cublasStatus_t status, const std::string& why) {
  std::fprintf(stderr, "simt cuBLASLt: %s\n", why.c_str());
  return status;
}

size_t type_size(int type) {
  switch (type) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

const char* type_name(int type) {
  switch (type) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    default: return "an unsupported cudaDataType_t";
  }
}

uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && a % alignment != 0) alignment /= 2;
  return alignment;
}

// The rows of cublasLtMatmul's supported-types table this emulation serves (scale type fp32):
// compute 32F with A = B fp32 and C = D fp32, or A = B bf16 (fp16) and C = D bf16 (fp16) or
// fp32; compute 32F_FAST_TF32 with everything fp32.
bool types_supported(const LtMatmulDesc& d, int ab, int b, int cd, int c) {
  if (ab != b || cd != c || d.scale != CUDA_R_32F) return false;
  if (d.compute == CUBLAS_COMPUTE_32F_FAST_TF32) return ab == CUDA_R_32F && cd == CUDA_R_32F;
  if (d.compute != CUBLAS_COMPUTE_32F) return false;
  if (ab == CUDA_R_32F) return cd == CUDA_R_32F;
  if (ab == CUDA_R_16BF || ab == CUDA_R_16F) return cd == ab || cd == CUDA_R_32F;
  return false;
}

// Checks types, shapes and the epilogue; "" when the GEMM is one cuBLASLt runs.
std::string check_gemm(const LtMatmulDesc& d, const LtMatrixLayout& a, const LtMatrixLayout& b,
                       const LtMatrixLayout& c, const LtMatrixLayout& out) {
  if (!types_supported(d, a.type, b.type, out.type, c.type))
    return std::string("no algorithm for A ") + type_name(a.type) + ", B " + type_name(b.type) + ", C " +
           type_name(c.type) + ", D " + type_name(out.type) + " with this compute type (cublasLtMatmul's table)";
  const uint64_t m = d.transa == CUBLAS_OP_N ? a.rows : a.cols, k = d.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = d.transb == CUBLAS_OP_N ? b.rows : b.cols, n = d.transb == CUBLAS_OP_N ? b.cols : b.rows;
  if (k != kb || out.rows != m || out.cols != n || c.rows != out.rows || c.cols != out.cols)
    return "shapes do not chain: op(A) is " + std::to_string(m) + "x" + std::to_string(k) + ", op(B) " +
           std::to_string(kb) + "x" + std::to_string(n) + ", D " + std::to_string(out.rows) + "x" +
           std::to_string(out.cols);
  for (const LtMatrixLayout* l : {&a, &b, &c, &out})
    if (l->ld < static_cast<int64_t>(std::max<uint64_t>(l->rows, 1)))
      return "a leading dimension (" + std::to_string(l->ld) + ") is smaller than its rows (" +
             std::to_string(l->rows) + ")";
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_BIAS &&
      d.epilogue != CUBLASLT_EPILOGUE_BGRADB)
    return "this emulation serves the DEFAULT, BIAS and BGRADB epilogues only";
  // The bias (BIAS, read) or bias gradient (BGRADB, written) is of D's type, or fp32 with a 16-bit D.
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    const int bias_type = d.bias_type < 0 ? out.type : d.bias_type;
    if (bias_type != out.type && !(bias_type == CUDA_R_32F && out.type != CUDA_R_32F))
      return std::string("bias of type ") + type_name(bias_type) + " with D " + type_name(out.type);
  }
  return "";
}

// The bytes a matrix as stored (column-major, ld) spans, from its first element to its last.
size_t span_bytes(const LtMatrixLayout& l) {
  const size_t count = l.cols == 0 || l.rows == 0 ? 0 : static_cast<size_t>(l.ld) * (l.cols - 1) + l.rows;
  return count * type_size(l.type);
}

// initcheck for a library's operands (simt/device_memory.h): the first of them with a byte no
// one wrote since cudaMalloc, named, or "" (always "" where kernels' stores go unseen).
std::string unwritten_operand(std::initializer_list<std::pair<const char*, std::pair<const void*, size_t>>> operands) {
  if (!detail::kernel_writes_tracked()) return "";
  for (const auto& [name, range] : operands) {
    const int64_t at = detail::first_unwritten(range.first, range.second);
    if (at >= 0)
      return std::string("uninitialized device memory (initcheck): cublasLtMatmul reads ") + name + ", whose byte " +
             std::to_string(at) + " (of " + std::to_string(range.second) +
             ") was never written (nor copied or memset) since cudaMalloc";
  }
  return "";
}

// Element i of a buffer of `type`, widened to fp32 (exact for the 16-bit types).
float load(const void* p, int type, size_t i) {
  return type == CUDA_R_32F    ? static_cast<const float*>(p)[i]
         : type == CUDA_R_16BF ? tt::to_float(static_cast<const tt::bf16*>(p)[i])
                               : tt::to_float(static_cast<const tt::f16*>(p)[i]);
}

// Reads a matrix as stored (column-major, ld) into fp32, rounding to TF32 when asked.
std::vector<float> widen(const void* p, const LtMatrixLayout& l, bool tf32) {
  const size_t count = l.cols == 0 || l.rows == 0 ? 0 : static_cast<size_t>(l.ld) * (l.cols - 1) + l.rows;
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    float v = load(p, l.type, i);
    if (tf32) {
      uint32_t u = tt::float_bits(v);
      if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
      v = tt::bits_float(u);
    }
    out[i] = v;
  }
  return out;
}

void store(void* p, int type, size_t i, float v) {
  if (type == CUDA_R_32F)
    static_cast<float*>(p)[i] = v;
  else if (type == CUDA_R_16BF)
    static_cast<tt::bf16*>(p)[i] = tt::float_to_bf16(v);
  else
    static_cast<tt::f16*>(p)[i] = tt::float_to_f16(v);
}

}  // namespace

namespace {
// What stands for cuBLASLt's GEMM kernel: its address is the kernel's (a captured matmul is a
// kernel node of it), and its name follows the library's kernels' (sm90_xmma_gemm_...), which is
// how a captured graph's nodes are told apart on a GPU too (kernels/cuda/graph_nodes.cu).
const char kEmulatedGemmKernel = 0;
constexpr const char* kEmulatedGemmKernelName = "sm90_xmma_gemm_emulated_by_simt_cublaslt";
}  // namespace

}  // namespace simt

namespace simt::cuda_api {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new LtContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  }
  return "unknown status";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  *desc = new LtMatmulDesc;
  (*desc)->compute = compute;
  (*desc)->scale = scale;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!desc || !buf) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: null descriptor or buffer");
  auto copy = [&](auto& field) {
    if (size != sizeof(field))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: attribute " + std::to_string(attr) +
                                                     " takes " + std::to_string(sizeof(field)) + " bytes, given " +
                                                     std::to_string(size));
    std::memcpy(&field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return copy(desc->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return copy(desc->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return copy(desc->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return copy(desc->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return copy(desc->bias_type);
    default: return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: attribute " +
                                                            std::to_string(attr) + " is not emulated");
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (type_size(type) == 0) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, std::string("layout of ") + type_name(type));
  *layout = new LtMatrixLayout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new LtPreference;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (!pref || !buf) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: null argument");
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (size != sizeof(uint64_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "MAX_WORKSPACE_BYTES takes a uint64_t");
    std::memcpy(&pref->max_workspace, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
    if (size != sizeof(uint32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "MIN_ALIGNMENT_*_BYTES takes a uint32_t");
    std::memcpy(&pref->min_alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  return refuse(CUBLAS_STATUS_INVALID_VALUE, "preference attribute " + std::to_string(attr) + " is not emulated");
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* returned) {
  *returned = 0;
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !a || !b || !c || !d || !pref || requested < 1 || !results)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: null or invalid argument");
  const std::string why = check_gemm(*desc, *a, *b, *c, *d);
  if (!why.empty()) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "heuristic: " + why);
  // TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM=1: find nothing for any GEMM, as the library does for
  // shapes and alignments it has no kernel for, so that tests can see what the caller does
  // then. Silent (the caller says it), unlike the refusals above, which are the caller's mistakes.
  if (const char* none = std::getenv("TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM"); none && std::string(none) == "1")
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // The algorithm is chosen for the alignments the preference promises (up to the widest
  // access) and for the bias pointer's alignment as it is now (the heuristic reads the
  // pointer's value, never its contents); cublasLtMatmul then refuses less aligned buffers.
  cublasLtMatmulHeuristicResult_t r{};
  r.algo.data[0] = kAlgoMagic;
  for (int i = 0; i < 4; ++i) r.algo.data[1 + i] = std::min(pref->min_alignment[i], kWidestAccess);
  if (desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT) r.algo.data[5] = std::min(alignment_of(desc->bias), kWidestAccess);
  r.algo.data[6] = desc->epilogue;
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  results[0] = r;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !a || !b || !c || !d || !alpha || !beta || !A || !B || !D)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: null argument");
  const std::string why = check_gemm(*desc, *a, *b, *c, *d);
  if (!why.empty()) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: " + why);
  const float alpha_value = *static_cast<const float*>(alpha), beta_value = *static_cast<const float*>(beta);
  if (!C && beta_value != 0.0f) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: beta != 0 without C");
  if (C == D && (c->ld != d->ld || c->type != d->type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: in place (C = D) with different layouts");
  const bool with_bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS;
  const bool with_bias_grad = desc->epilogue == CUBLASLT_EPILOGUE_BGRADB;
  if ((with_bias || with_bias_grad) && !desc->bias)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a BIAS or BGRADB epilogue without a bias pointer");
  if (algo) {
    if (algo->data[0] != kAlgoMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: an algorithm no heuristic made");
    if (algo->data[6] != desc->epilogue)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the algorithm was chosen for another epilogue");
    const void* buffers[4] = {A, B, C ? C : D, D};
    const char* names = "ABCD";
    for (int i = 0; i < 4; ++i)
      if (alignment_of(buffers[i]) < algo->data[1 + i])
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, std::string("cublasLtMatmul: matrix ") + names[i] + " is aligned to " +
                                                       std::to_string(alignment_of(buffers[i])) +
                                                       " bytes; the algorithm was chosen for " +
                                                       std::to_string(algo->data[1 + i]));
    if ((with_bias || with_bias_grad) && alignment_of(desc->bias) < algo->data[5])
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: the bias is aligned to " +
                                                     std::to_string(alignment_of(desc->bias)) +
                                                     " bytes; the algorithm was chosen for " +
                                                     std::to_string(algo->data[5]));
  }
  // Everything the matmul reads from the descriptors and host scalars is taken now, at
  // enqueue time, as cuBLASLt does; the buffers are read when the work runs.
  const LtMatmulDesc dd = *desc;
  const LtMatrixLayout la = *a, lb = *b, lc = *c, ld = *d;
  const int bias_type = dd.bias_type < 0 ? ld.type : dd.bias_type;
  const cudaError_t e = enqueue_work(stream, &kEmulatedGemmKernel, kEmulatedGemmKernelName, [=]() {
    const bool tf32 = dd.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    const size_t bias_bytes = (with_bias ? ld.rows : ld.cols) * type_size(bias_type);
    const std::string unwritten = unwritten_operand({{"matrix A", {A, span_bytes(la)}},
                                                     {"matrix B", {B, span_bytes(lb)}},
                                                     {"matrix C", {beta_value != 0.0f ? C : nullptr, span_bytes(lc)}},
                                                     {"the bias", {with_bias ? dd.bias : nullptr, bias_bytes}}});
    if (!unwritten.empty()) {
      library_fault(unwritten);
      return cudaSuccess;
    }
    const std::vector<float> fa = widen(A, la, tf32), fb = widen(B, lb, tf32);
    const int m = static_cast<int>(ld.rows), n = static_cast<int>(ld.cols);
    const int k = static_cast<int>(dd.transa == CUBLAS_OP_N ? la.cols : la.rows);
    std::vector<float> product(static_cast<size_t>(m) * n, 0.0f);
    if (k > 0)
      cblas_sgemm(CblasColMajor, dd.transa == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                  dd.transb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, 1.0f, fa.data(),
                  static_cast<int>(la.ld), fb.data(), static_cast<int>(lb.ld), 0.0f, product.data(), m);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        // fp32 throughout, one rounding into D's type at the store
        float v = alpha_value * product[static_cast<size_t>(j) * m + i];
        if (beta_value != 0.0f) v += beta_value * load(C, lc.type, static_cast<size_t>(j) * lc.ld + i);
        if (with_bias) v += load(dd.bias, bias_type, static_cast<size_t>(i));
        store(D, ld.type, static_cast<size_t>(j) * ld.ld + i, v);
      }
    if (with_bias_grad)  // bias[j] = sum over p = 0..k-1 of op(B)[p][j], from B as stored (not TF32-rounded)
      for (int j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (int p = 0; p < k; ++p)
          sum += load(B, lb.type,
                      dd.transb == CUBLAS_OP_N ? static_cast<size_t>(j) * lb.ld + p : static_cast<size_t>(p) * lb.ld + j);
        store(const_cast<void*>(dd.bias), bias_type, static_cast<size_t>(j), sum);
      }
    detail::mark_written(D, span_bytes(ld));
    if (with_bias_grad) detail::mark_written(dd.bias, bias_bytes);
    const char* precision = tf32 ? "tf32" : la.type == CUDA_R_16BF ? "bf16" : la.type == CUDA_R_16F ? "fp16" : "fp32";
    record_library_call(kEmulatedGemmKernelName, 2.0 * m * n * k,
                        span_bytes(la) + span_bytes(lb) + span_bytes(ld) * (beta_value != 0.0f ? 2 : 1), precision);
    return cudaSuccess;
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace simt::cuda_api
