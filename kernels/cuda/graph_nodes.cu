// Counting a captured graph's nodes by kind (graph_nodes.h).
#include "kernels/cuda/graph_nodes.h"

#include <cuda.h>  // the driver API's types only: its functions come through the runtime

#include <algorithm>
#include <cctype>
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace tt {

namespace {

// Every kernel of kernels/cuda/, by kind: the one place that says what each kernel is. A new
// kernel must be added here, or a captured step counts it as `other` (and
// CudaTraining.SeedStepGraphHasNoUnclassifiedNode fails).
struct KernelKind {
  const char* kernel;
  int GraphNodeCount::*counter;
};
constexpr KernelKind kOurKernels[] = {
    // the GEMM ladder, kernels/cuda/gemm/
    {"naive_gemm_kernel", &GraphNodeCount::gemm},     // gemm_naive.cu
    {"tiled_gemm_kernel", &GraphNodeCount::gemm},     // gemm_tiled.cu
    {"regblock_gemm_kernel", &GraphNodeCount::gemm},  // gemm_regblock.cu
    {"mma_gemm_kernel", &GraphNodeCount::gemm},       // gemm_mma.cu
    // flash_attention.cu, naive_attention.cu, attention_decode.cu
    {"flash_attention_forward_kernel", &GraphNodeCount::attention},
    {"flash_attention_backward_dq_kernel", &GraphNodeCount::attention},
    {"flash_attention_backward_dkv_kernel", &GraphNodeCount::attention},
    {"attention_forward_kernel", &GraphNodeCount::attention},
    {"attention_backward_dq_kernel", &GraphNodeCount::attention},
    {"attention_backward_dkv_kernel", &GraphNodeCount::attention},
    {"attention_decode_kernel", &GraphNodeCount::attention},
    {"kv_cache_append_kernel", &GraphNodeCount::attention},
    // one pass over elements or rows
    {"embedding_forward_kernel", &GraphNodeCount::elementwise},   // embedding.cu
    {"layernorm_forward_kernel", &GraphNodeCount::elementwise},   // layernorm.cu
    {"dropout_residual_layernorm_forward_kernel", &GraphNodeCount::elementwise},
    {"activation_forward_kernel", &GraphNodeCount::elementwise},  // activation.cu
    {"activation_backward_kernel", &GraphNodeCount::elementwise},
    {"activation_dropout_kernel", &GraphNodeCount::elementwise},
    {"dropout_kernel", &GraphNodeCount::elementwise},             // dropout.cu
    {"residual_forward_kernel", &GraphNodeCount::elementwise},    // residual.cu
    {"broadcast_rows_kernel", &GraphNodeCount::elementwise},      // linear.cu: a bias cuBLASLt cannot fuse
    {"cast_kernel", &GraphNodeCount::elementwise},                // cast.cu
    {"rope_kernel", &GraphNodeCount::elementwise},                // rope.cu
    // sums over rows or tokens
    {"column_sums_kernel", &GraphNodeCount::reduction},  // linear.cu: bias gradients cuBLASLt does not make
    {"layernorm_backward_kernel", &GraphNodeCount::reduction},  // layernorm.cu: dinp and dweight/dbias
    {"cross_entropy_kernel", &GraphNodeCount::reduction},       // cross_entropy.cu
    {"embedding_backward_kernel", &GraphNodeCount::reduction},  // embedding.cu
    {"embedding_sort_keys_kernel", &GraphNodeCount::reduction},        // the sorted path's keys...
    {"embedding_backward_sorted_kernel", &GraphNodeCount::reduction},  // ...and its runs
    // adamw.cu
    {"grad_check_kernel", &GraphNodeCount::optimizer},
    {"adamw_kernel", &GraphNodeCount::optimizer},
    {"loss_scaler_update_kernel", &GraphNodeCount::optimizer},
};

// Libraries' kernels, by what their names contain (lower case): cuBLASLt's GEMMs are
// sm90_xmma_gemm_..., nvjet_..., cutlass..., gemv..., and the kernels it adds to finish one live
// in its namespace (cublasLt::splitKreduce_kernel for a split-K product, the epilogue's
// cublasLt::epilogue::impl::globalKernel and the bias gradient's reductions): mangled, each name
// holds "8cublasLt"; cuBLAS's reduce_1Block_kernel likewise. CUB's sort kernels (the embedding
// backward's) are DeviceRadixSort...Kernel. cuDNN's attention kernels name cudnn, fmha or flash.
struct LibraryPattern {
  const char* part;
  int GraphNodeCount::*counter;
};
constexpr LibraryPattern kLibraryPatterns[] = {
    {"cublaslt", &GraphNodeCount::gemm},
    {"reduce_1block", &GraphNodeCount::gemm},
    {"gemm", &GraphNodeCount::gemm},
    {"gemv", &GraphNodeCount::gemm},
    {"xmma", &GraphNodeCount::gemm},
    {"nvjet", &GraphNodeCount::gemm},
    {"cutlass", &GraphNodeCount::gemm},
    {"splitkreduce", &GraphNodeCount::gemm},
    {"radixsort", &GraphNodeCount::reduction},  // CUB's DeviceRadixSort... kernels (the embedding's sort)
    {"cudnn", &GraphNodeCount::attention},
    {"fmha", &GraphNodeCount::attention},
    {"flash", &GraphNodeCount::attention},
};

bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The kernel's own identifier in `name`: the last component of a mangled (Itanium ABI) symbol's
// name, _ZN2tt12_GLOBAL__N_124layernorm_forward_kernelIfEEvPT_ -> layernorm_forward_kernel;
// otherwise the identifier before any template arguments or parameters, with namespaces
// dropped: tt::layernorm_forward_kernel<S> -> layernorm_forward_kernel.
std::string base_identifier(const std::string& name) {
  if (name.rfind("_Z", 0) == 0) {
    size_t i = 2;
    if (i < name.size() && name[i] == 'N') ++i;  // a nested name: <len><id> components until 'E'
    std::string last;
    while (i < name.size()) {
      if (name[i] == 'L') ++i;  // internal linkage
      if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) break;
      size_t length = 0;
      while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) length = 10 * length + (name[i++] - '0');
      if (length == 0 || i + length > name.size()) break;
      last = name.substr(i, length);
      i += length;
    }
    return last;
  }
  size_t end = 0;
  while (end < name.size() && (is_identifier_char(name[end]) || name[end] == ':')) ++end;
  const std::string qualified = name.substr(0, end);
  const size_t colon = qualified.rfind("::");
  return colon == std::string::npos ? qualified : qualified.substr(colon + 2);
}

// The driver's functions that name a kernel node's kernel (CUDA 12.3 and later), looked up
// through the runtime (once per count), so the program links no libcuda and starts where there
// is no driver.
struct DriverNaming {
  CUresult(CUDAAPI* node_params)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*) = nullptr;
  CUresult(CUDAAPI* func_name)(const char**, CUfunction) = nullptr;
  CUresult(CUDAAPI* kernel_name)(const char**, CUkernel) = nullptr;
};

template <typename Function>
void driver_function(const char* symbol, Function*& out) {
  void* found = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &found, 12030, cudaEnableDefault, &status) == cudaSuccess &&
      status == cudaDriverEntryPointSuccess)
    out = reinterpret_cast<Function*>(found);
  else
    (void)cudaGetLastError();  // an older driver: no name from it
}

DriverNaming driver_naming() {
  DriverNaming n;
  driver_function("cuGraphKernelNodeGetParams", n.node_params);
  driver_function("cuFuncGetName", n.func_name);
  driver_function("cuKernelGetName", n.kernel_name);
  return n;
}

// The name of a kernel node's kernel. The runtime names the kernels of this program
// (cudaGraphKernelNodeGetParams, cudaFuncGetName); a library's kernels (cuBLASLt's, cuDNN's)
// come from modules the library loaded itself, which the runtime never registered, so it fails
// for their nodes (cudaErrorInvalidDeviceFunction) and the driver names them instead: the node's
// CUfunction through cuFuncGetName, or its CUkernel (a module loaded as a library) through
// cuKernelGetName. nullptr when neither can.
const char* kernel_node_name(cudaGraphNode_t node, const DriverNaming& driver) {
  cudaKernelNodeParams params{};
  const char* name = nullptr;
  if (cudaGraphKernelNodeGetParams(node, &params) == cudaSuccess && cudaFuncGetName(&name, params.func) == cudaSuccess)
    return name;
  (void)cudaGetLastError();  // the runtime's failure, which the driver may make up for
  CUDA_KERNEL_NODE_PARAMS p{};
  if (!driver.node_params || driver.node_params(node, &p) != CUDA_SUCCESS) return nullptr;
  if (p.func && driver.func_name && driver.func_name(&name, p.func) == CUDA_SUCCESS) return name;
  if (!p.func && p.kern && driver.kernel_name && driver.kernel_name(&name, p.kern) == CUDA_SUCCESS) return name;
  return nullptr;
}

}  // namespace

int& kernel_node_counter(GraphNodeCount& count, const std::string& name) {
  const std::string base = base_identifier(name);
  for (const KernelKind& k : kOurKernels)
    if (base == k.kernel) return count.*k.counter;
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const LibraryPattern& p : kLibraryPatterns)
    if (lower.find(p.part) != std::string::npos) return count.*p.counter;
  return count.other;
}

GraphNodeCount count_graph_nodes(cudaGraph_t graph) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  GraphNodeCount count;
  const DriverNaming driver = driver_naming();
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType type;
    CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &type));
    if (type == cudaGraphNodeTypeMemset || type == cudaGraphNodeTypeMemcpy) {
      ++count.memset_copy;
    } else if (type == cudaGraphNodeTypeKernel) {
      const char* name = kernel_node_name(nodes[i], driver);
      ++(name ? kernel_node_counter(count, name) : count.other);
    } else {
      ++count.other;
    }
  }
  return count;
}

}  // namespace tt
