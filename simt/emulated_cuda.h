// The CUDA backend run on the CPU: kernels/cuda/ compiled for the SIMT emulator (simt/), in
// namespace tt::emu (simt/prelude.h says why). `--backend cuda-emu` and the CUDA tests on a
// machine without a GPU use it. Its kernels, cuBLASLt calls, graphs and checks are the CUDA
// backend's own; the device is emulated: correct enough to catch indexing, synchronisation,
// shuffle and layout bugs, slow, and never the GPU's bits (docs/emulation.md).
#pragma once
#include <memory>

#include <string>

#include "kernels/backend.h"
#include "kernels/cuda_options.h"

namespace simt::cuda_api {
struct Graph;  // the emulator's cudaGraph_t is Graph* (simt/cuda_api.h)
}

namespace tt::emu {

// Defined by kernels/cuda/cuda_backend.cu in its emulated build; cannot fail for want of a GPU.
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options);

// kernels/cuda/graph_nodes.h in its emulated build: a captured graph's nodes counted by kind,
// and the counter a kernel's name adds to (for tests/test_graph_nodes.cpp).
GraphNodeCount count_graph_nodes(simt::cuda_api::Graph* graph);
int& kernel_node_counter(GraphNodeCount& count, const std::string& name);

}  // namespace tt::emu
