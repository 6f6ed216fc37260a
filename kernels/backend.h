// The backend contract. A backend owns memory (allocate, copy, free) and runs every op of
// the model family. The engine holds Tensor views into backend memory and only orchestrates.
// Ops may run asynchronously (CUDA: on the backend's stream); only copy_to_host and
// synchronize wait.
//
// Precision: every float view carries its storage dtype (F32, BF16 or F16). Activations,
// activation gradients and working weights share one storage dtype; ops load them into fp32,
// compute in fp32 (GEMMs accumulate in fp32; LayerNorm statistics, softmax and cross-entropy
// are fp32) and round what they store. Parameter gradients, LayerNorm mean/rstd, the losses
// and everything the optimizer touches are always F32.
//
// Shape letters: B batch, T sequence, C d_model, NH heads, HS head size (C / NH),
// F d_ff, V vocab, N = B*T tokens. "dX" is the gradient of the loss with respect to X.
// Backward ops ACCUMULATE (+=) into parameter gradients and OVERWRITE input gradients.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/stream_clock.h"
#include "kernels/nf4_tensor.h"
#include "kernels/tensor.h"
#include "kernels/common/adamw_update.h"
#include "kernels/common/loss_scaler.h"
#include "kernels/common/philox.h"
#include "kernels/common/qkv_layout.h"

namespace tt {

// The FFN's activation. Relu and Gelu map each element of the hidden layer (N,F) to one
// output. Swiglu (Llama's gated unit) takes a pre-activation twice as wide, (N,2F) as
// [gate | up] per row, and gives silu(gate) * up (N,F): linear1 holds both projections.
enum class Activation { Relu, Gelu, Swiglu };

// How a backward op writes the parameter gradients it produces: the first micro-batch of a
// step writes them (Write: the step needs no memset of the gradients first), later
// micro-batches add to them (Add), so accumulation keeps its exact sums.
enum class ParamGrads { Write, Add };
// How linear_backward writes the input gradient: Write, or Add when the input also feeds a
// residual connection and its gradient is the sum of both paths (the GEMM adds it: beta = 1).
enum class InputGrad { Write, Add };

// One attention core's shape. The packed qkv of a token holds NH query heads, then KVH key
// heads, then KVH value heads, HS channels each (kernels/common/qkv_layout.h); query head h
// reads key/value head h / (NH / KVH). KVH 0 (or NH): every query head has its own key and
// value (multi-head); 1: multi-query; between: grouped-query attention (--n-kv-head).
struct AttentionShape {
  int B, T, NH, HS;
  bool causal;
  int KVH = 0;
  int kv_heads() const { return KVH > 0 ? KVH : NH; }
  QkvLayout layout() const { return QkvLayout{NH, kv_heads(), HS}; }
};

// The loss scaler's state (kernels/common/loss_scaler.h), in backend memory so that one
// captured CUDA graph serves every step, skipped or not.
struct LossScalerState {
  Tensor scale;               // F32 [1]: the loss gradient, and so every gradient, is multiplied by it
  Tensor growth_tracker;      // I32 [1]: clean steps since the scale last changed
  Tensor found_inf;           // I32 [1]: this step's gradients hold an inf or NaN
  Tensor skipped_steps;       // I32 [1]
  Tensor first_skipped_step;  // I32 [1]: -1 until a step is skipped
  Tensor grad_norm_sq;        // F32 [1]: sum of the squared (scaled) gradients
};

// What one captured graph holds, node by node, by kind (a CUDA graph: kernels, memsets and
// copies; tinytrain profile and the trainer's done: line print it).
struct GraphNodeCount {
  int gemm = 0;         // matrix products: cuBLASLt's kernels, the tiled GEMM
  int attention = 0;    // the attention core's kernels (ours or cuDNN's)
  int elementwise = 0;  // one pass over elements or rows: embedding, dropout, residual, LayerNorm, activation, cast
  int reduction = 0;    // sums over rows or tokens: bias and LayerNorm parameter gradients, cross-entropy, embedding backward
  int optimizer = 0;    // the gradient check, AdamW, the loss scaler
  int memset_copy = 0;  // memsets and copies
  int other = 0;        // a kernel no kind above names (a library's helper)
  int total() const { return gemm + attention + elementwise + reduction + optimizer + memset_copy + other; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory ----
  virtual void* allocate(size_t bytes) = 0;  // zero-filled; throws std::runtime_error on failure
  virtual void release(void* ptr) = 0;
  // May return before the copy lands (CUDA stages it through pinned memory); `src` may be
  // reused as soon as the call returns.
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;  // waits for the copy
  virtual void fill_zero(Tensor t) = 0;
  virtual void synchronize() = 0;
  // CUDA: the cudaStream_t every op is enqueued on; what the NCCL communicator enqueues on.
  virtual void* native_stream() { return nullptr; }

  // ---- whole-step graphs: what is enqueued between begin_capture and end_capture is
  // recorded once (CUDA graph) and re-run by replay_graph. Backends without graphs say so
  // and the trainer runs the same ops eagerly.
  virtual bool supports_graphs() const { return false; }
  virtual void begin_capture() {}
  virtual void end_capture() {}
  virtual void replay_graph() {}
  // The nodes of the graph the last end_capture recorded (all zero without graphs).
  virtual GraphNodeCount captured_graph_nodes() const { return {}; }
  // The GEMMs (distinct shapes) that ran on a slower kernel than the one asked for, and why, for
  // the run's summary line ("done: ..."): "" when none did. Each is also said once on stderr
  // when it first happens.
  virtual std::string gemm_fallbacks() const { return ""; }

  // ---- observability: named scopes and op timing (`tinytrain profile`, engine/profile/profiler.h) ----
  // range_push/range_pop bracket a named part of the step ("forward", "layer 0", "optimizer"),
  // nesting like a stack; the engine calls them around its phases, never inside an op. They
  // change nothing that is computed: a profiler records them, the CUDA backend passes them to
  // NVTX (Nsight Systems shows them), other backends ignore them. BackendRange below pairs them
  // and calls range_pop from its destructor, so range_pop must not throw.
  virtual void range_push(const char* /*name*/) {}
  virtual void range_pop() {}
  // A clock on this backend's timeline (kernels/stream_clock.h). The default reads the host
  // clock, which is right for a backend whose ops have finished when their call returns;
  // asynchronous backends return one that records on their stream.
  virtual std::unique_ptr<StreamClock> make_stream_clock() { return std::make_unique<HostClock>(); }

  // ---- embedding ----
  // tokens (B,T) int32, wte (V,C), wpe (maxT,C) or null data -> out (B,T,C)
  virtual void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) = 0;
  // dout (B,T,C) -> dwte (V,C), dwpe (maxT,C) (skipped when null data), written or added (grads)
  virtual void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) = 0;

  // ---- linear: out = inp @ weight^T + bias, weight in PyTorch's (out_features, in_features) ----
  // inp (N,I), weight (O,I), bias (O) or null data -> out (N,O)
  virtual void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) = 0;
  // dout (N,O) -> dinp (N,I) = dout weight, written or added (input; skipped when null data);
  // dweight (O,I) = dout^T inp, dbias (O) = column sums of dout, written or added (grads);
  // both skipped when dweight has null data (a frozen weight: LoRA's base, engine/lora.h)
  virtual void linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                               ParamGrads grads, InputGrad input) = 0;

  // ---- multi-head attention core (between in_proj and out_proj) ----
  // Nothing (B,NH,T,T) is kept between forward and backward (docs/attention.md): the forward
  // saves the log-sum-exp of each query row's scaled scores, and the backward recomputes the
  // softmax weights from q, k and it.
  // qkv (B,T,3C) packed [q|k|v] -> out (B,T,C) heads merged; lse (B,NH,T) F32, per query row
  // max + log(sum exp(score - max)) over the keys it sees (score = q.k / sqrt(HS)); dropout on
  // the weights (element index in (B,NH,T,T) order, though no such tensor exists).
  virtual void attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                                 const DropoutMask& dropout) = 0;
  // Optional: run attention of this shape, storage dtype and weight dropout through a vendor
  // library's fused kernel from now on (CUDA: cuDNN, `--attention cudnn`); other cases keep
  // the backend's own kernels. The library keeps the same contract (lse; dout_dot_out scratch).
  // Returns one line for the log when the backend was asked for library attention (CUDA:
  // CudaOptions::attention): what will run, or why the backend's own kernel runs instead; ""
  // when it was not asked. Call before graph capture: it may build plans.
  virtual std::string use_library_attention(const AttentionShape& /*s*/, DType /*storage*/, float /*dropout_p*/) {
    return "";
  }
  // dout (B,T,C) -> dqkv (B,T,3C) overwritten, from qkv, the forward's out (B,T,C) and lse;
  // dout_dot_out (B,NH,T) F32 is scratch for D = rowsum(dout * out) per head (the softmax
  // backward's row term; a backend that does not need it may leave it untouched)
  virtual void attention_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                                  const AttentionShape& s, const DropoutMask& dropout) = 0;

  // ---- rotary position embedding (--pos-embedding rope), in place on q and k ----
  // qkv (B,T,W) packed [q|k|v] with NH query and KVH key/value heads (kernels/common/
  // qkv_layout.h; W = (NH + 2 KVH) HS): each query and key head at token t turned by position
  // first_pos + t (kernels/common/rope.h: the pairs (i, i + HS/2), Hugging Face's
  // rotate-half); v untouched. HS even.
  virtual void rope_forward(Tensor qkv, int NH, int KVH, int first_pos, float theta) = 0;
  // dqkv (B,T,W): the q and k gradients turned back by the same angles (the transpose of the
  // forward's turn), in place; the v part untouched.
  virtual void rope_backward(Tensor dqkv, int NH, int KVH, int first_pos, float theta) = 0;

  // ---- incremental decoding with a KV cache (inference, causal models; engine/decoder.h) ----
  // One new token per sequence: its keys and values join the layer's cache, and its query
  // attends over the cache instead of the whole sequence being recomputed. A cache holds
  // (B,maxT,KC): the keys (or values) of every position so far, heads side by side as in qkv
  // (KC = C, or KVH HS with grouped key/value heads). Inference only, so no backward. Both backends implement them; the defaults (a
  // logic_error) only spare wrappers that never decode (tests' recording backends) the stubs.
  // qkv (B,C+2KC) the new token's packed [q|k|v] at position pos -> k_cache[:,pos,:] = its k,
  // v_cache[:,pos,:] = its v (B,maxT,KC); nothing else of the caches changes
  virtual void kv_cache_append(Tensor /*k_cache*/, Tensor /*v_cache*/, Tensor /*qkv*/, int /*pos*/) {
    throw std::logic_error(name() + " backend: no kv_cache_append (incremental decoding)");
  }
  // qkv (B,C+2KC) (its q part is read), k_cache, v_cache (B,maxT,KC) holding positions
  // [0,pos] -> out (B,C) heads merged: per query head of NH (HS = C/NH, KC/HS key/value heads
  // shared in groups as in attention_forward), softmax(q k^T / sqrt(HS)) over positions 0..pos
  // (fp32) times v. Positions past pos are never read. No dropout.
  virtual void attention_decode(Tensor /*out*/, Tensor /*qkv*/, Tensor /*k_cache*/, Tensor /*v_cache*/, int /*pos*/,
                                int /*NH*/) {
    throw std::logic_error(name() + " backend: no attention_decode (incremental decoding)");
  }

  // ---- layernorm over the last dim C, and RMSNorm ----
  // LayerNorm: out = (x - mean) rstd weight + bias, rstd = 1/sqrt(mean((x - mean)^2) + eps).
  // RMSNorm (Llama's) when `mean` has null data: out = x rstd weight, rstd = 1/sqrt(mean(x^2)
  // + eps), no mean subtracted nor kept. A bias with null data is none (both norms; dbias then
  // null too). Every op below that takes mean and rstd follows the same rule.
  // inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
  virtual void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                                 float eps) = 0;
  // dout (N,C) -> dinp (N,C), may alias dout; dweight (C), dbias (C) written or added (grads)
  virtual void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                  Tensor weight, Tensor mean, Tensor rstd, ParamGrads grads) = 0;

  // ---- the residual stream around a LayerNorm, fused (docs/kernels.md, "Fusions") ----
  // Each is one pass over memory on a backend that fuses it; the defaults run the ops above
  // in turn, and a fused version must give what they give (the same roundings, in order).
  //
  // A branch joins the residual stream, then the stream is normalised (post-norm: x + SA(x),
  // then norm1; pre-norm: the norm before the next block):
  //   res_out = residual + dropout(branch);  ln_out, mean, rstd = layernorm(res_out)
  // residual, branch (N,C) -> res_out (N,C), may alias branch, not residual; ln_out (N,C),
  // mean (N), rstd (N), all skipped when ln_out has null data (pre-norm's second residual).
  virtual void dropout_residual_layernorm_forward(Tensor res_out, Tensor ln_out, Tensor mean, Tensor rstd,
                                                  Tensor residual, Tensor branch, Tensor weight, Tensor bias,
                                                  float eps, const DropoutMask& dropout) {
    dropout_forward(res_out, branch, dropout);
    residual_forward(res_out, residual, res_out);
    if (ln_out.data) layernorm_forward(ln_out, mean, rstd, res_out, weight, bias, eps);
  }
  // Its backward, with the gradients that meet at the norm folded in:
  //   g = dout + dout2                      (dout2 optional: post-norm's norm input feeds two paths)
  //   dinp = layernorm_backward(g) + dskip  (dskip optional: pre-norm's residual around the block)
  //   dbranch = dropout_backward(dinp)      (optional: the gradient of the branch that joined)
  // dout, dout2, dskip (N,C) -> dinp (N,C), may alias dout or dout2, not dskip; dbranch (N,C),
  // aliasing none of them; dweight (C), dbias (C) written or added (grads). Optional tensors
  // are skipped when their data is null.
  virtual void layernorm_residual_dropout_backward(Tensor dinp, Tensor dbranch, Tensor dweight, Tensor dbias,
                                                   Tensor dout, Tensor dout2, Tensor dskip, Tensor inp,
                                                   Tensor weight, Tensor mean, Tensor rstd,
                                                   const DropoutMask& branch_dropout, ParamGrads grads) {
    Tensor g = dout;
    if (dout2.data) {
      residual_forward(dinp, dout, dout2);
      g = dinp;
    }
    layernorm_backward(dinp, dweight, dbias, g, inp, weight, mean, rstd, grads);
    if (dskip.data) residual_forward(dinp, dinp, dskip);
    if (dbranch.data) dropout_backward(dbranch, dinp, branch_dropout);
  }

  // ---- elementwise ----
  // inp (n) -> out (n). Swiglu: inp (N,2F) [gate | up] -> out (N,F) (kernels/common/swiglu.h)
  virtual void activation_forward(Tensor out, Tensor inp, Activation act) = 0;
  // dout (n), inp (n) the pre-activation -> dinp (n); dinp may alias dout. Swiglu: dout (N,F),
  // inp (N,2F) -> dinp (N,2F) [dgate | dup], which may alias inp (not dout)
  virtual void activation_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act) = 0;
  // inp (n) -> out (n), may alias; identity when p == 0
  virtual void dropout_forward(Tensor out, Tensor inp, const DropoutMask& dropout) = 0;
  // dout (n) -> dinp (n), may alias; the same mask as the forward
  virtual void dropout_backward(Tensor dinp, Tensor dout, const DropoutMask& dropout) = 0;
  // The FFN's hidden layer, activation then dropout: inp (n) the pre-activation -> out (n) =
  // dropout(act(inp)). One op so that a backend can do it in one pass over memory; the default
  // runs the two ops above, and a fused version must give what they give (the same rounding).
  virtual void activation_dropout_forward(Tensor out, Tensor inp, Activation act, const DropoutMask& dropout) {
    activation_forward(out, inp, act);
    dropout_forward(out, out, dropout);
  }
  // its gradient: dout (n), inp (n) the pre-activation -> dinp (n) = act'(inp) (mask dout);
  // dinp may alias dout. Swiglu's shapes as in activation_backward: a backend runs SwiGLU with
  // its dropout as one op of its own, rounding each output once (the default's two ops could
  // not: dinp is twice dout's size).
  virtual void activation_dropout_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act,
                                           const DropoutMask& dropout) {
    if (act == Activation::Swiglu) throw std::logic_error(name() + " backend: no fused SwiGLU dropout backward");
    dropout_backward(dinp, dout, dropout);
    activation_backward(dinp, dinp, inp, act);
  }
  // a (n), b (n) -> out (n) = a + b, out may alias a or b
  virtual void residual_forward(Tensor out, Tensor a, Tensor b) = 0;
  // residual backward is a copy of the gradient to both inputs: the engine reuses views.

  // ---- column windows: a LoRA adapter on part of a fused projection (engine/lora.h) ----
  // The Llama block's q, k and v (gate and up) are column windows of one GEMM's output; an
  // adapter adds its low-rank product to its window only, and reads its window of the gradient.
  // Both compute in fp32 and round once (scale * value rounded first, then the sum: the same
  // bits on every backend).
  // delta (N,W) -> out (N,O) columns [first, first + W) += scale * delta
  virtual void add_scaled_columns(Tensor out, int64_t first, Tensor delta, float scale) = 0;
  // inp (N,O) -> out (N,W) = scale * inp columns [first, first + W)
  virtual void copy_scaled_columns(Tensor out, Tensor inp, int64_t first, float scale) = 0;

  // ---- fused softmax + cross-entropy: the loss is the mean over mean_over tokens ----
  // logits (N,V), targets (N) int32, dloss_scale (1) F32 -> losses (N) F32 per-token loss,
  // computed in fp32; and, when dlogits has data, dlogits (N,V) = (softmax(logits) -
  // onehot(target)) * dloss_scale / mean_over. mean_over is N for one batch, and the whole
  // batch's tokens when these N rows are one of several accumulated micro-batches. dlogits may
  // alias logits: no probability tensor is kept. dloss_scale is read from backend memory: the
  // loss scaler's current scale.
  virtual void cross_entropy_forward_backward(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                                              Tensor dloss_scale, int64_t mean_over) = 0;

  // ---- precision ----
  // src (n) -> dst (n), any float dtypes: rounds to nearest even when narrowing (working
  // weights from the fp32 masters).
  virtual void cast(Tensor dst, Tensor src) = 0;

  // ---- optimizer step: check, update, scaler, all on the backend ----
  // grads (n) F32 -> s.grad_norm_sq = sum of squares, s.found_inf = any inf or NaN.
  // The global gradient norm and the loss scaler's inf/NaN check in one pass.
  virtual void grad_norm_check(Tensor grads, const LossScalerState& s) = 0;
  // params (n), grads (n), exp_avg (n), exp_avg_sq (n); step_count (1) int32 holds the steps
  // taken: the update is step t = step_count + 1, and step_count becomes t. The gradients are
  // scaled by s.scale and unscaled here (times 1/scale), then, with hyper.grad_clip > 0,
  // clipped to that global norm (clip_coefficient of s.grad_norm_sq, which grad_norm_check
  // wrote). The lr is scheduled_lr(hyper.lr, hyper.schedule, *train_step), train_step (1)
  // int32 the 0-based training step (skipped ones included). All read from backend memory when
  // the update runs. When s.found_inf is set nothing changes: parameters, moments and step
  // count stay as they are (a skipped step).
  virtual void adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                          Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s) = 0;
  // After the optimizer: loss_scaler_update (kernels/common/loss_scaler.h) on s, with the
  // training step read from `step` (1) int32.
  virtual void loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) = 0;
  // The two above as one op (one kernel on a backend that fuses them): the update, then the
  // scaler's update with the step read from train_step.
  virtual void adamw_step_and_scaler_update(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq,
                                            Tensor step_count, Tensor train_step, const AdamWHyper& hyper,
                                            const LossScalerState& s, const LossScalerConfig& scaler) {
    adamw_step(params, grads, exp_avg, exp_avg_sq, step_count, train_step, hyper, s);
    loss_scaler_update(s, scaler, train_step);
  }

  // ---- NF4: a frozen weight stored in 4 bits (QLoRA's base; kernels/nf4_tensor.h, docs/nf4.md) ----
  // w (n) NF4 -> out (n) F32, BF16 or F16: each weight level * absmax in fp32, the block's absmax
  // decoded from its 8-bit code first (kernels/common/nf4.h: the fp32 operations and their
  // order), then stored in out's dtype (16-bit: that fp32 value rounded once more). Every
  // backend gives the same bits.
  virtual void nf4_dequantize(Tensor out, const Nf4Tensor& w) = 0;
};

// A named scope of the step for as long as it lives: range_push now, range_pop at the end
// of the enclosing block (also when an exception leaves it).
class BackendRange {
 public:
  BackendRange(Backend& backend, const std::string& name) : backend_(backend) { backend_.range_push(name.c_str()); }
  ~BackendRange() { backend_.range_pop(); }
  BackendRange(const BackendRange&) = delete;
  BackendRange& operator=(const BackendRange&) = delete;

 private:
  Backend& backend_;
};

// SwiGLU's views, checked by every backend: out (..., F) and inp (..., 2F) with the same rows.
// Returns F. Throws std::invalid_argument naming the op.
inline int64_t check_swiglu_views(const char* op, const Tensor& out, const Tensor& inp) {
  const int64_t F = out.shape.rank > 0 ? out.shape[out.shape.rank - 1] : 0;
  const int64_t inp_last = inp.shape.rank > 0 ? inp.shape[inp.shape.rank - 1] : -1;
  if (inp_last != 2 * F || inp.numel() != 2 * out.numel())
    throw std::invalid_argument(std::string(op) + ": input " + inp.shape.str() + " is not [gate | up] for output " +
                                out.shape.str() + " (inp (N,2F), out (N,F))");
  return F;
}

// The views of kv_cache_append and attention_decode against each other, checked by every
// backend before it touches memory (a position past the cache would write outside it): caches
// (B,maxT,KC) of one shape, qkv (B,C+2KC) with C >= KC, one storage dtype, 0 <= pos < maxT;
// with NH > 0 (attention_decode) also NH heads dividing C into HS, and KC/HS key/value heads
// dividing NH. Returns the qkv row's layout (with NH 0, the widths alone: all zero). Throws
// std::invalid_argument naming the op.
inline QkvLayout check_decode_views(const char* op, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv,
                                    int pos, int NH) {
  const Shape& s = k_cache.shape;
  const int64_t KC = s.rank == 3 ? s[2] : 0, C = qkv.shape.rank == 2 ? qkv.shape[1] - 2 * KC : 0;
  const int heads = NH > 0 ? NH : 1;
  const int64_t HS = C > 0 && C % heads == 0 ? C / heads : 0;
  const bool heads_fit = HS > 0 && KC % HS == 0 && KC > 0 && (NH <= 0 || NH % (KC / HS) == 0);
  if (s.rank != 3 || v_cache.shape != s || qkv.shape.rank != 2 || qkv.shape[0] != s[0] || C < KC || pos < 0 ||
      pos >= s[1] || (NH > 0 && !heads_fit))
    throw std::invalid_argument(std::string(op) + ": caches " + s.str() + " and " + v_cache.shape.str() + ", qkv " +
                                qkv.shape.str() + ", position " + std::to_string(pos) + ", " + std::to_string(NH) +
                                " heads do not fit (caches (B,maxT,KC), qkv (B,C+2KC), 0 <= pos < maxT, NH heads "
                                "of C, KC a whole number of heads dividing NH)");
  if (v_cache.dtype != k_cache.dtype || qkv.dtype != k_cache.dtype)
    throw std::invalid_argument(std::string(op) + ": caches " + dtype_name(k_cache.dtype) + " and " +
                                dtype_name(v_cache.dtype) + ", qkv " + dtype_name(qkv.dtype) +
                                ": they share one storage dtype");
  if (NH <= 0) return QkvLayout{};  // widths only (kv_cache_append): no heads to lay out
  return QkvLayout{NH, static_cast<int>(KC / HS), static_cast<int>(HS)};
}

}  // namespace tt
