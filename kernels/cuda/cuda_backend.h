// The CUDA backend: every op of the contract as hand-written kernels on one stream, GEMMs
// through cuBLASLt, memory in device allocations, and whole-step CUDA graphs. One file per
// op family (embedding.cu, linear.cu, attention.cu, ...), each kernel with its shapes and
// parallel decomposition in a comment. Only compiled when the CUDA toolkit is found.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda_options.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/workspace.h"

namespace tt {

// Whether flash_attention.cu's kernels serve this shape (head sizes up to 256); the naive
// kernels serve any.
bool flash_attention_serves(const AttentionShape& s);
// Whether flash_attention_mma.cu's tensor-core kernels serve this shape and these views (head
// sizes 64 and 128, bf16 or fp16, 16-byte aligned).
bool flash_attention_mma_serves(const AttentionShape& s, std::initializer_list<Tensor> views);

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options);  // throws std::runtime_error naming the CUDA failure
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }

  void* allocate(size_t bytes) override;  // cudaMalloc + memset; "GPU out of memory: ..." on failure
  void release(void* ptr) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void fill_zero(Tensor t) override;
  void synchronize() override;
  void* native_stream() override { return stream_; }

  bool supports_graphs() const override { return true; }
  void begin_capture() override;
  void end_capture() override;
  void replay_graph() override;
  GraphNodeCount captured_graph_nodes() const override { return graph_nodes_; }  // counted by end_capture
  // NVTX ranges, and a clock of CUDA events on the stream (stream_clock.cu)
  void range_push(const char* name) override;
  void range_pop() override;
  std::unique_ptr<StreamClock> make_stream_clock() override;

  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) override;
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) override;
  void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override;
  void linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                       ParamGrads grads, InputGrad input) override;
  std::string use_library_attention(const AttentionShape& s, DType storage, float dropout_p) override;
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                         const DropoutMask& dropout) override;
  void attention_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                          const AttentionShape& s, const DropoutMask& dropout) override;
  void kv_cache_append(Tensor k_cache, Tensor v_cache, Tensor qkv, int pos) override;  // attention_decode.cu
  void attention_decode(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, int pos, int NH) override;
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                         float eps) override;
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                          Tensor mean, Tensor rstd, ParamGrads grads) override;
  void dropout_residual_layernorm_forward(Tensor res_out, Tensor ln_out, Tensor mean, Tensor rstd, Tensor residual,
                                          Tensor branch, Tensor weight, Tensor bias, float eps,
                                          const DropoutMask& dropout) override;
  void layernorm_residual_dropout_backward(Tensor dinp, Tensor dbranch, Tensor dweight, Tensor dbias, Tensor dout,
                                           Tensor dout2, Tensor dskip, Tensor inp, Tensor weight, Tensor mean,
                                           Tensor rstd, const DropoutMask& branch_dropout, ParamGrads grads) override;
  void activation_forward(Tensor out, Tensor inp, Activation act) override;
  void activation_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act) override;
  void dropout_forward(Tensor out, Tensor inp, const DropoutMask& dropout) override;
  void dropout_backward(Tensor dinp, Tensor dout, const DropoutMask& dropout) override;
  void activation_dropout_forward(Tensor out, Tensor inp, Activation act, const DropoutMask& dropout) override;
  void activation_dropout_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act,
                                   const DropoutMask& dropout) override;
  void residual_forward(Tensor out, Tensor a, Tensor b) override;
  void add_scaled_columns(Tensor out, int64_t first, Tensor delta, float scale) override;
  void copy_scaled_columns(Tensor out, Tensor inp, int64_t first, float scale) override;
  void rope_forward(Tensor qkv, int NH, int KVH, int first_pos, float theta) override;    // rope.cu
  void rope_backward(Tensor dqkv, int NH, int KVH, int first_pos, float theta) override;
  void cross_entropy_forward_backward(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                                      Tensor dloss_scale, int64_t mean_over) override;
  void cast(Tensor dst, Tensor src) override;
  void grad_norm_check(Tensor grads, const LossScalerState& s) override;
  void adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                  Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s) override;
  void loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) override;
  void adamw_step_and_scaler_update(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                                    Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s,
                                    const LossScalerConfig& scaler) override;
  void nf4_dequantize(Tensor out, const Nf4Tensor& w) override;  // nf4.cu

 private:
  // One cuBLASLt matmul, its descriptors and chosen algorithm, built once per distinct GEMM
  // (shape, transposes, epilogue, pointer alignments, data types) and reused every step (linear.cu).
  struct GemmPlan;
  struct GemmPlanDeleter {  // defined in linear.cu, where GemmPlan is complete
    void operator()(GemmPlan* plan) const noexcept;
  };
  // m, n, k, transa, transb, epilogue, alignment in bytes of A/B/C/D (the least of the four,
  // up to 256), alignment of the bias or bias gradient (0 without): cuBLASLt picks algorithms by alignment too;
  // then the cudaDataType_t of A and B, and of C and D (the bias, or its gradient, has D's type).
  using GemmKey = std::tuple<int, int, int, int, int, int, int, int, int, int>;
  // The plan for `key`, built on first use; `bias` is the bias pointer of that first use
  // (its value, never dereferenced, tells the heuristic the bias alignment). Null when
  // cuBLASLt has no algorithm for a bias-epilogue GEMM (remembered too); for a plain one, a plan
  // that says the tiled GEMM runs it. A logic_error for a GEMM first seen during graph capture.
  const GemmPlan* gemm_plan(const GemmKey& key, const void* bias);
  // D (m,n) = op(A) (m,k) op(B) (k,n) [+ bias (m) broadcast over columns] + beta D, all
  // column-major and packed (linear.cu). A and B are of type ab_type, C = D and the bias of
  // type d_type (F32, BF16 or F16); the products are accumulated in fp32. With bias_grad (n,
  // fp32, for D of F32; bias null): also bias_grad[j] = sum over k of op(B)[p][j], written, or
  // added with add_bias_grad. On a rung of tinytrain's GEMM ladder (CudaOptions::gemm,
  // gemm/gemm.h) every epilogue is fused: it returns true. On cuBLASLt it returns false, having
  // enqueued nothing, when cuBLASLt cannot fuse this bias or bias gradient (its BGRADB epilogue
  // writes: add_bias_grad there is a logic_error): the caller makes it another way; a GEMM
  // cuBLASLt has no algorithm for (said once on stderr) runs on the tiled rung. An fp32 GEMM on
  // the mma rung without --tf32 runs on the regblock rung (said once per GEMM too).
  bool matmul(int m, int n, int k, bool transa, bool transb, const void* A, const void* B, DType ab_type, void* D,
              DType d_type, const void* bias, float beta, float* bias_grad = nullptr, bool add_bias_grad = false);
  // "GEMM fallbacks: N cuBLASLt -> tiled, N mma -> regblock" (each N distinct GEMMs), or "".
  std::string gemm_fallbacks() const override;
  // Activation::Swiglu, with the FFN's dropout (swiglu.cu): the activation ops call these
  void swiglu_forward(Tensor out, Tensor inp, const DropoutMask& dropout);
  void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp, const DropoutMask& dropout);
  // The attention ladder (attention.cu): flash_attention_mma.cu's kernels, flash_attention.cu's,
  // naive_attention.cu's.
  bool runs_naive_attention(const AttentionShape& s) const;
  bool runs_mma_attention(const AttentionShape& s, std::initializer_list<Tensor> views) const;
  void flash_attention_mma_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                                   const DropoutMask& dropout);
  void flash_attention_mma_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out,
                                    Tensor lse, const AttentionShape& s, const DropoutMask& dropout);
  void flash_attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s, const DropoutMask& dropout);
  void flash_attention_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                                const AttentionShape& s, const DropoutMask& dropout);
  void naive_attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s, const DropoutMask& dropout);
  void naive_attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, const AttentionShape& s,
                                const DropoutMask& dropout);
  // An fp32 buffer of at least `floats` elements: for naive_attention.cu, the (B,NH,T,T) softmax
  // weights and score gradients; for attention_decode.cu, the weights of the new token over the
  // cache (never captured). Grown on first use, so the trainer's
  // eager first step sizes it before graph capture; growing during a capture is a logic_error.
  float* attention_work(size_t floats);
  // adamw_step, and with `scaler` not null adamw_step_and_scaler_update, as one launch (adamw.cu)
  void launch_adamw(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                    Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s,
                    const LossScalerConfig* scaler);
  void require_not_capturing(const char* what) const;  // logic_error during graph capture
  void abandon_capture() noexcept;                     // ends a capture and drops the partial graph
  void release_resources() noexcept;                   // the destructor's work; also on a failed constructor

  CudaOptions options_;
  cudaStream_t stream_ = nullptr;
  // Device scratch for deterministic reductions (per-block partial sums, reduced in a fixed
  // order by a second kernel or by the kernel's last block to finish): any op may use it
  // within one call, since ops run in order.
  static constexpr size_t kReduceScratchFloats = kCudaReduceScratchFloats;  // kernels/workspace.h
  float* reduce_scratch_ = nullptr;
  // Counters of the single-launch reductions ("the last block to finish adds the partials" or
  // does the step's bookkeeping: layernorm.cu, adamw.cu): zeroed once at allocation; a kernel
  // that counts its finished blocks on its slot resets it to 0 in its last block, so the next
  // launch (or graph replay) finds it at 0. One slot per kernel (LayerNorm's backward, last,
  // takes the slots from kLayerNormCounter on: one per group of blocks and one for the groups);
  // kernels on the one stream never overlap, so a slot is never shared.
  enum ReduceCounter { kGradCheckCounter, kAdamWCounter, kLayerNormCounter };
  static constexpr size_t kReduceCounters = kCudaReduceCounters;  // kernels/workspace.h
  unsigned int* reduce_counters_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* lt_workspace_ = nullptr;  // cuBLASLt workspace, allocated once
  size_t lt_workspace_bytes_ = 0;
  std::map<GemmKey, std::unique_ptr<GemmPlan, GemmPlanDeleter>> gemm_plans_;
  std::set<std::string> gemm_rung_notes_;  // the GEMMs the mma rung handed to the regblock rung, said once each
  int gemm_tiled_fallbacks_ = 0;           // the GEMMs cuBLASLt had no algorithm for (the tiled rung ran them)
  float* attention_work_ = nullptr;  // see attention_work()
  // cuDNN's fused attention, for the cases use_library_attention prepared (attention.cu)
  std::unique_ptr<CudnnAttention> cudnn_attention_;
  size_t attention_work_floats_ = 0;
  // Work buffers outgrown while a captured graph may still read them: freed with the backend.
  std::vector<void*> retired_work_;
  // copy_to_device stages through this pinned buffer so the copy can be asynchronous;
  // staging_done_ marks when the previous copy has left it.
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  cudaEvent_t staging_done_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  GraphNodeCount graph_nodes_;  // graph_'s nodes by kind (graph_nodes.h)
  bool capturing_ = false;
};

// Throws std::runtime_error (one line) when no usable GPU is present.
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options);

}  // namespace tt
