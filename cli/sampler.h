// `tinytrain sample`: text from a trained causal model (docs/toy-lm.md, "Sampling").
//
// The checkpoint's model runs in an fp32 Decoder (engine/decoder.h, a KV cache per layer), its
// --num-samples sequences side by side as the Decoder's B rows. Each sequence starts with the
// tokenizer's end-of-text id (what precedes every document in the training shards) and the
// encoded prompt, fed one position at a time; then each step draws one token per sequence:
//   logits / temperature -> the top-k (ties: the lower id) -> softmax in double -> the first id,
//   in id order, whose cumulative probability exceeds a uniform u,
// where u is a pure function of (seed, sample index, position) (engine/rng.h, RngStream::Sample):
// the same seed gives the same text on any backend, up to logits within rounding of a boundary.
// Temperature 0 is greedy (the argmax, ties to the lower id). A sequence stops at end-of-text
// (not shown), after --max-new-tokens, or when the next token would be fed at max_seq_len.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "engine/config.h"
#include "kernels/backend.h"

namespace tt {

struct SampleOptions {
  std::string checkpoint;     // a tinytrain checkpoint (engine/io/checkpoint.h), or a directory: its latest
  std::string prompt;         // text after the end-of-text id; may be empty
  std::string prompt_ids;     // --prompt-ids "50256,464,...": the prefix as ids, as given (no end-of-text added)
  int max_new_tokens = 200;   // per sample
  double temperature = 1.0;   // 0: greedy
  int top_k = 0;              // 0: every id
  uint64_t seed = 1337;
  int num_samples = 1;
  std::string tokenizer;      // a directory with tokenizer.json or llm.c's GPT-2 tokenizer file
                              // (data/llmc_tokenizer.h); empty: the checkpoint's metadata "tokenizer"
  std::string dump_logits;    // non-empty: write the prompt's logits there instead of sampling
};

// Throws InputError (one line naming the flag) for values out of range.
void check_sample_options(const SampleOptions& options);

// One draw from the logits (V) of sample `sample` for the token at `position` (see above).
// Throws InputError when a logit is not finite.
int32_t draw_token(const float* logits, int V, double temperature, int top_k, uint64_t seed, uint32_t sample,
                   uint64_t position);

struct Generation {
  std::vector<std::vector<int32_t>> tokens;  // per sample: the prefix, then the drawn tokens (no end-of-text)
  int64_t new_tokens = 0;                    // drawn over all samples (a final end-of-text counts)
  bool out_of_context = false;               // some sample stopped at max_seq_len
  double seconds = 0;                        // the drawing loop, after the prefix was fed
};

// `options.num_samples` sequences from `prefix` (end-of-text first; at most max_seq_len ids),
// drawing among the first `drawable` ids (the tokenizer's, when the model's vocabulary is padded
// past it as llm.c pads GPT-2's 50257 to 50304).
Generation generate(Backend& backend, const ModelConfig& config, const std::vector<float>& params,
                    const std::vector<int32_t>& prefix, const SampleOptions& options, int32_t end_of_text,
                    int drawable);

// The logits (T, V) at every position of `tokens` (T <= max_seq_len), one sequence through the Decoder.
std::vector<float> decoder_logits(Backend& backend, const ModelConfig& config, const std::vector<float>& params,
                                  const std::vector<int32_t>& tokens);

// The whole command: checks, reads the checkpoint and tokenizer, then samples and prints each
// sample's text (prompt + continuation; samples separated by a line "---") on `out`, and only
// that, so `sample > out.txt` holds the samples alone; the line with the generation's tokens/s
// (and a note when a sample reached the context's end) goes to `err`. With dump_logits it writes
// a safetensors file instead: tokens I32 [T] (the end-of-text id and the prompt's), logits F32
// [T, V]; its line goes to `err`. Errors are one InputError line.
void run_sample(Backend& backend, const SampleOptions& options, std::ostream& out, std::ostream& err);

}  // namespace tt
