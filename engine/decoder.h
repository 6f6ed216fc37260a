// Incremental decoding with a KV cache, for sampling from a causal model: B sequences advance
// one token at a time, and each layer keeps the keys and values of every position so far
// (its KV cache, B x max_seq_len x C each) so that a new token attends over them instead of
// the whole prefix being run again. A step costs O(t) attention work at position t (and a
// constant amount of everything else) instead of the O(t^2) of a full forward over t + 1
// tokens, and its logits are those the full forward gives at row t (tests/test_kv_cache.cpp).
//
// Inference only: no dropout, no gradients, no optimizer state. Like Model, it never touches
// an element itself: every line of step() is one backend op on planned views.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/config.h"
#include "engine/param_layout.h"
#include "kernels/arena.h"
#include "kernels/backend.h"

namespace tt {

class Decoder {
 public:
  // B sequences decoded side by side, each up to config.max_seq_len tokens, fp32 throughout.
  // Throws InputError when the model is not causal: a bidirectional model's earlier outputs
  // depend on later tokens, so nothing computed for them could be kept.
  Decoder(Backend& backend, const ModelConfig& config, int B);

  // Every buffer, before anything is allocated: the parameters, the caches (2 x n_layer x B x
  // max_seq_len x C floats) and one token's activations per sequence.
  static ArenaPlan plan(const ModelConfig& config, int B);

  // host (P) F32, the parameters in ParamLayout order (a checkpoint's, or init_params') ->
  // the decoder's copy in backend memory. Throws std::invalid_argument for a wrong size.
  void load_params(const std::vector<float>& host);

  // tokens (B) int32 on the host, each sequence's token at `position` -> logits (B,V) F32 in
  // backend memory for the token after it, valid until the next step. Positions run 0, 1, 2,
  // ...: a step at position p reads the cache of positions 0..p-1. A step at an earlier
  // position than the next one rewinds: it overwrites that position and forgets the later ones.
  // Throws InputError (one line) for a position outside [0, max_seq_len), a position past the
  // next one, or a token id outside the vocabulary.
  Tensor step(const int32_t* tokens, int position);
  void reset();  // forget every sequence: the next step is at position 0
  int length() const { return length_; }  // positions held in the cache

  const ParamLayout& layout() const { return layout_; }
  size_t bytes() const { return arena_.bytes(); }

 private:
  struct LayerCache {
    Tensor k, v;  // (B,maxT,C) each: the keys and values of positions [0, length_)
  };
  void layer_step(int l, int position);  // x_ (B,C) in, the layer's output in x_

  Backend& backend_;
  ModelConfig config_;
  int B_;
  ParamLayout layout_;
  Arena arena_;
  ModelParams p_;  // views into params_
  Tensor params_;  // (P) F32
  Tensor tokens_;  // (B,1) int32: this step's tokens
  std::vector<LayerCache> caches_;
  // One token's activations per sequence, shared by every layer (nothing is kept for a backward).
  Tensor x_;                        // (B,C) the residual stream: the layer's input, then its output
  Tensor ln_, ln_mean_, ln_rstd_;   // (B,C), (B), (B): a LayerNorm's output and statistics
  Tensor qkv_;                      // (B,3C) in_proj output
  Tensor att_;                      // (B,C) attention over the cache, heads merged
  Tensor branch_;                   // (B,C) attention / FFN branch before its residual add
  Tensor res_;                      // (B,C) a residual sum
  Tensor h_pre_, h_;                // (B,F) linear1 output, its activation
  Tensor logits_;                   // (B,V)
  int length_ = 0;
};

}  // namespace tt
