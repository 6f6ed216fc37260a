// The attention ladder of the CUDA backend (--attention, kernels/cuda_options.h): which
// kernels run the attention core. flash (the default): flash attention on tensor cores
// (flash_attention_mma.cu) for bf16 and fp16 at head sizes 64 and 128, on the CUDA cores
// (flash_attention.cu) for the rest. simt: flash_attention.cu's kernels for every case: tiles
// and the online softmax, nothing (T,T) in memory, fp32 arithmetic. naive (naive_attention.cu):
// the (T,T) weights written to a work buffer and read back, the first rung, for teaching and
// comparison. cudnn: cuDNN's fused attention (kernels/cuda/cudnn_attention.h) for the cases it
// serves, flash for the rest. All of them keep the contract of kernels/backend.h: lse (B,NH,T) saved by the forward,
// dout_dot_out (B,NH,T) scratch for the backward. docs/attention.md compares them.
#include <string>

#include "kernels/cuda/cuda_backend.h"

namespace tt {

std::string cudnn_fallback_line(const std::string& reason) {
  std::string line;
  bool line_break = false;  // each run of line breaks inside the reason becomes "; "
  for (char c : reason) {
    if (c == '\n' || c == '\r') {
      line_break = true;
      continue;
    }
    if (line_break && !line.empty()) line += "; ";
    line_break = false;
    line += c;
  }
  return line + "; tinytrain's attention kernel runs";
}

// `--attention cudnn`: cuDNN's fused attention for this case from now on, when it can serve
// it (kernels/cuda/cudnn_attention.h); else one line saying why, and our kernels keep it.
std::string CudaBackend::use_library_attention(const AttentionShape& s, DType storage, float dropout_p) {
  if (options_.attention != AttentionKernel::Cudnn) return "";
  require_not_capturing("use_library_attention");
  // A captured graph holds cuDNN's workspace pointer, which a new case could reallocate.
  if (graph_exec_ != nullptr && !(cudnn_attention_ && cudnn_attention_->prepared(s, storage, dropout_p)))
    return cudnn_fallback_line("cuDNN attention is set up before the first CUDA graph is captured, not after");
  try {
    const std::string why_not = cudnn_attention_unsupported(s, storage, dropout_p);
    if (!why_not.empty()) return cudnn_fallback_line(why_not);
    if (!cudnn_attention_) cudnn_attention_ = make_cudnn_attention(stream_);
    cudnn_attention_->prepare(s, storage, dropout_p);
  } catch (const std::runtime_error& e) {
    // A failed cudaMalloc stays the runtime's last error: clear it, or the next kernel's
    // launch check would report it.
    cudaGetLastError();
    return cudnn_fallback_line(std::string("cuDNN cannot serve this attention: ") + e.what());
  }
  return cudnn_attention_->describe() + " runs the attention" +
         (dropout_p > 0.0f ? " (its own dropout masks: not the CPU backend's)" : "");
}

// The naive kernels run when asked for, and for heads larger than the flash kernels serve.
bool CudaBackend::runs_naive_attention(const AttentionShape& s) const {
  return options_.attention == AttentionKernel::Naive || !flash_attention_serves(s);
}

// The tensor-core kernels run by default (flash, and cudnn's fallback) where they serve the case.
bool CudaBackend::runs_mma_attention(const AttentionShape& s, std::initializer_list<Tensor> views) const {
  return (options_.attention == AttentionKernel::Flash || options_.attention == AttentionKernel::Cudnn) &&
         flash_attention_mma_serves(s, views);
}

// qkv (B,T,3C) -> out (B,T,C), lse (B,NH,T)
void CudaBackend::attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                                    const DropoutMask& dropout) {
  if (cudnn_attention_ && cudnn_attention_->prepared(s, qkv.dtype, dropout.p))
    cudnn_attention_->forward(out, lse, qkv, s, dropout);
  else if (runs_naive_attention(s))
    naive_attention_forward(out, lse, qkv, s, dropout);
  else if (runs_mma_attention(s, {out, qkv}))
    flash_attention_mma_forward(out, lse, qkv, s, dropout);
  else
    flash_attention_forward(out, lse, qkv, s, dropout);
}

// dout (B,T,C) -> dqkv (B,T,3C) overwritten; dout_dot_out (B,NH,T) scratch
void CudaBackend::attention_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                                     const AttentionShape& s, const DropoutMask& dropout) {
  if (cudnn_attention_ && cudnn_attention_->prepared(s, qkv.dtype, dropout.p))
    cudnn_attention_->backward(dqkv, dout_dot_out, dout, qkv, out, lse, s, dropout);
  else if (runs_naive_attention(s))
    naive_attention_backward(dqkv, dout, qkv, s, dropout);
  else if (runs_mma_attention(s, {dqkv, dout, qkv, out}))
    flash_attention_mma_backward(dqkv, dout_dot_out, dout, qkv, out, lse, s, dropout);
  else
    flash_attention_backward(dqkv, dout_dot_out, dout, qkv, out, lse, s, dropout);
}

}  // namespace tt
