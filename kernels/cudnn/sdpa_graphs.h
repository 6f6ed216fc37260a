// The two cuDNN operation graphs of fused scaled-dot-product attention ("flash attention"),
// forward and backward, in the form cuDNN's runtime-fusion engines recognise: op for op and
// attribute for attribute the composite graphs NVIDIA's cudnn-frontend (commit 3929da2) builds
// on cuDNN 9.19, the backward in its deterministic form (docs/kernels.md, "Against
// cudnn-frontend", lists what still differs). Only the shape of the computation is described
// here; cuDNN compiles it into one fused kernel per direction that never writes the (T,T)
// score matrix to memory.
#pragma once
#include <cudnn_graph.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cudnn/cudnn_graph.h"

namespace tt {

struct SdpaCase {
  int B, T, NH, HS;
  bool causal;
  cudnnDataType_t io;  // CUDNN_DATA_BFLOAT16 or CUDNN_DATA_HALF: q, k, v, o and their gradients
  float dropout_p;     // on the attention weights; 0: no dropout ops in the graph
};

// Tensor ids of the operands in memory, for the variant pack.
struct SdpaForwardIds {
  int64_t q, k, v;     // slices of the packed qkv (B,T,3C)
  int64_t o;           // (B,T,C)
  int64_t stats;       // (B,NH,T) fp32: log-sum-exp of each query row's scaled scores
  int64_t seed, offset;  // int64 device scalars of cuDNN's dropout RNG (0 when no dropout)
};
struct SdpaBackwardIds {
  int64_t q, k, v, o, dout, stats;
  int64_t softmax_sum;   // (B,NH,T) fp32 scratch: rowsum(dO * O), the softmax-backward term
  int64_t dq, dk, dv;    // slices of the packed dqkv (B,T,3C)
  int64_t seed, offset;
};

// Describe the graph into `g` (every tensor and operation descriptor finalized: no GPU
// needed) and fill in the ids; g.build(handle, ...) then makes the execution plan.
void describe_sdpa_forward(CudnnGraph& g, const SdpaCase& c, SdpaForwardIds& ids);
void describe_sdpa_backward(CudnnGraph& g, const SdpaCase& c, SdpaBackwardIds& ids);

// Every tensor descriptor declares kCudnnByteAlignment. The operands' addresses are their
// buffers' starts (the backend's allocations: 256-byte cudaMalloc blocks, 64-byte arena slots,
// kernels/arena.cpp) except k and v (dk and dv), which start C and 2C elements into each
// packed row. Checked once, when the plans are prepared: why this case breaks the declared
// alignment, or "" when it does not.
std::string sdpa_misaligned_operand(const SdpaCase& c);

}  // namespace tt
