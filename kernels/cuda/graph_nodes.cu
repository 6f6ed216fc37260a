// Counting a captured graph's nodes by kind (graph_nodes.h).
#include "kernels/cuda/graph_nodes.h"

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
    // adamw.cu
    {"grad_check_kernel", &GraphNodeCount::optimizer},
    {"adamw_kernel", &GraphNodeCount::optimizer},
    {"loss_scaler_update_kernel", &GraphNodeCount::optimizer},
};

// Libraries' kernels, by what their names contain (lower case): cuBLASLt's GEMMs are
// sm90_xmma_gemm_..., nvjet_..., cutlass..., gemv..., with splitKreduce_kernel finishing a
// split-K product; cuDNN's attention kernels name cudnn, fmha or flash.
struct LibraryPattern {
  const char* part;
  int GraphNodeCount::*counter;
};
constexpr LibraryPattern kLibraryPatterns[] = {
    {"gemm", &GraphNodeCount::gemm},
    {"gemv", &GraphNodeCount::gemm},
    {"xmma", &GraphNodeCount::gemm},
    {"nvjet", &GraphNodeCount::gemm},
    {"cutlass", &GraphNodeCount::gemm},
    {"splitkreduce", &GraphNodeCount::gemm},
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
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType type;
    CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &type));
    if (type == cudaGraphNodeTypeMemset || type == cudaGraphNodeTypeMemcpy) {
      ++count.memset_copy;
    } else if (type == cudaGraphNodeTypeKernel) {
      cudaKernelNodeParams params{};
      const char* name = nullptr;
      if (cudaGraphKernelNodeGetParams(nodes[i], &params) == cudaSuccess &&
          cudaFuncGetName(&name, params.func) == cudaSuccess && name) {
        ++kernel_node_counter(count, name);
      } else {
        (void)cudaGetLastError();  // a kernel the runtime cannot name: clear the error it left
        ++count.other;
      }
    } else {
      ++count.other;
    }
  }
  return count;
}

}  // namespace tt
