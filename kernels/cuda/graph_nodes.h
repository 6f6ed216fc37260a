// What a captured CUDA graph holds: its nodes counted by kind (GraphNodeCount, kernels/backend.h),
// the number issue 24's node budget is about. Kernel nodes are told apart by the kernel's name:
// ours from the table in graph_nodes.cu, a library's (cuBLASLt, cuDNN) by the patterns its
// kernels' names follow; memset and memcpy nodes are memset_copy.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "kernels/backend.h"

namespace tt {

// The counter in `count` that a kernel named `name` adds to. `name` as cudaFuncGetName gives it:
// a mangled symbol (_ZN2tt...24layernorm_forward_kernelI...) on a GPU, the name the launch was
// written with (layernorm_forward_kernel<S>) on the emulator, or a library's own kernel name
// (sm90_xmma_gemm_...). A kernel neither ours nor matching a library pattern is `other`.
int& kernel_node_counter(GraphNodeCount& count, const std::string& name);

// Every node of `graph` counted by kind (cudaGraphGetNodes, cudaGraphNodeGetType, and for kernel
// nodes their kernel's name: the runtime's cudaGraphKernelNodeGetParams and cudaFuncGetName, or
// for a library's kernel, which the runtime cannot name, the driver's cuGraphKernelNodeGetParams
// and cuFuncGetName/cuKernelGetName). A kernel neither can name counts as `other`. Throws
// std::runtime_error on any other CUDA failure.
GraphNodeCount count_graph_nodes(cudaGraph_t graph);

}  // namespace tt
