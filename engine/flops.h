// The floating-point operations of one training step, counted from the model's shapes: what
// the log's TFLOP/s and MFU divide by (docs/profiling.md, "FLOPs of a step").
//
// Counted: the matrix products, 2 FLOPs (a multiply and an add) per multiply-accumulate:
//   a linear layer on N tokens, (N, in) x (in, out):           2 N in out
//   attention per head: scores q.k and the weighted sum of v, 2 HS each per (query, key) pair
//     the mask allows: T^2 pairs per sequence, T (T + 1) / 2 when causal
// Backward: twice the forward's products (the input gradient and the weight gradient of each
// linear; dq and dk, dv and the weights' gradients for attention).
// Not counted: embedding lookups and their scatter-add, LayerNorm, softmax, GELU/ReLU, dropout,
// residual adds, cross-entropy and AdamW: elementwise work of a few FLOPs per element, under 1%
// of the products at the seed workload's shapes and never what bounds a GEMM-shaped peak. This
// is the usual convention of MFU (model FLOPs utilisation): the work the model needs, whatever
// the kernels do; recomputation (--recompute) is reported apart, as it is work the hardware
// does but the model does not need.
#pragma once
#include <cstdint>

#include "engine/config.h"
#include "engine/lora.h"

namespace tt {

struct StepFlops {
  double forward = 0;    // one forward over the batch
  double backward = 0;   // its backward (2 x forward)
  double recompute = 0;  // the forward work --recompute repeats in the backward
  double model() const { return forward + backward; }              // what MFU counts
  double hardware() const { return forward + backward + recompute; }  // what the kernels did
};

// FLOPs of one forward over B sequences of T tokens, split by where they go.
struct ForwardFlops {
  double qkv, attention, out_proj, ffn;  // summed over the layers
  double head;                           // lm_head
  double total() const { return qkv + attention + out_proj + ffn + head; }
};
ForwardFlops forward_flops(const ModelConfig& model, int64_t B, int64_t T);

// One optimizer step over a global batch of B sequences of T tokens (all micro-batches, all ranks).
// With LoRA (engine/lora.h) the frozen linears' backward is their input gradient alone (1 x
// their forward, not 2 x), and the adapters add their two rank-r products forward, twice that
// backward, and again where --recompute repeats their linear.
StepFlops training_step_flops(const ModelConfig& model, int64_t B, int64_t T, Recompute recompute,
                              const LoraConfig& lora = {});

}  // namespace tt
