// cuDNN's fused flash attention as an optional path of the CUDA backend (`--attention cudnn`).
// Our kernels (kernels/cuda/attention.cu) stay the default and the teaching path; this one
// hands the same math to cuDNN's runtime-fused engines (the graphs: sdpa_graphs.cpp).
//
// What it serves: bf16/fp16 storage (cuDNN's fused attention takes no fp32 inputs), head
// size a multiple of 8 up to 128, seq >= 2 (its backward needs a (T,T) problem; the saved
// statistics must fit where the softmax weights would be kept), with or without the causal
// mask and dropout. Anything else, or a case no cuDNN engine builds, keeps our kernel.
//
// How it differs from our kernel:
//   - nothing (T,T) is kept: the forward saves the per-row log-sum-exp (B,NH,T) fp32, and the
//     backward recomputes the weights from it;
//   - the dropout masks come from cuDNN's own Philox stream (seed and offset derived from
//     ours), so they differ from the CPU backend's masks: with dropout on the attention
//     weights, runs agree with our kernel only statistically (the rest of the model's
//     dropout is unchanged and still shared);
//   - the weights enter the P V product rounded to the storage type, where ours keeps fp32.
// Deterministic: engines that cuDNN notes as nondeterministic are never chosen, and dQ is
// written by its matmul directly (no fp32 atomic accumulation).
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "kernels/tensor.h"
#include "kernels/backend.h"

namespace tt {

class CudnnAttention {
 public:
  virtual ~CudnnAttention() = default;

  // One line for the log: the cuDNN version and the engines and workspace of the prepared cases.
  virtual std::string describe() const = 0;
  // Builds (once) the forward and backward plans of this case. Throws CudnnError or
  // std::runtime_error saying why cuDNN cannot serve it. Allocates: never during graph capture.
  virtual void prepare(const AttentionShape& s, DType storage, float dropout_p) = 0;
  virtual bool prepared(const AttentionShape& s, DType storage, float dropout_p) const = 0;

  // qkv (B,T,3C) -> out (B,T,C), stats (B,NH,T) F32 log-sum-exp per query row. A prepared case.
  virtual void forward(Tensor out, Tensor stats, Tensor qkv, const AttentionShape& s,
                       const DropoutMask& dropout) = 0;
  // dout (B,T,C) -> dqkv (B,T,3C), from qkv, out and stats of the forward (same dropout);
  // softmax_sum (B,NH,T) F32 is scratch.
  virtual void backward(Tensor dqkv, Tensor softmax_sum, Tensor dout, Tensor qkv, Tensor out, Tensor stats,
                        const AttentionShape& s, const DropoutMask& dropout) = 0;
};

// Why cuDNN's fused attention cannot serve this case, decided from the case alone (no GPU
// needed); "" when it may (cuDNN's engines have the last word when the plans are built).
std::string cudnn_attention_unsupported(const AttentionShape& s, DType storage, float dropout_p);

// The one line the log prints when cuDNN cannot serve a case (unsupported, or no engine
// builds its plans: `reason` says which and why) and tinytrain's kernel runs instead:
// "<reason>; tinytrain's attention kernel runs", line breaks in `reason` turned into "; ".
std::string cudnn_fallback_line(const std::string& reason);

// A cuDNN handle on `stream`. Throws std::runtime_error when cuDNN is missing from this
// build or cannot start.
std::unique_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t stream);

}  // namespace tt
