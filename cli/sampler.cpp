// `tinytrain sample` (see sampler.h): the draw, the generation loop over a Decoder, the logits
// dump for the PyTorch check (tools/torch_interop.py logits), and the command around them.
#include "cli/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>

#include "data/llmc_tokenizer.h"
#include "data/tokenizer.h"
#include "base/checked_input.h"
#include "engine/io/checkpoint.h"
#include "engine/io/hf_weights.h"
#include "engine/decoder.h"
#include "engine/rng.h"
#include "engine/io/safetensors.h"

namespace tt {

void check_sample_options(const SampleOptions& o) {
  auto bad = [](const std::string& what) { return InputError("invalid option: " + what); };
  if (o.checkpoint.empty()) throw bad("--checkpoint FILE is required");
  if (o.max_new_tokens < 1) throw bad("--max-new-tokens must be 1 or more, got " + std::to_string(o.max_new_tokens));
  if (!(std::isfinite(o.temperature) && o.temperature >= 0))
    throw bad("--temperature must be a finite number, 0 (greedy) or more, got " + std::to_string(o.temperature));
  if (o.top_k < 0) throw bad("--top-k must be 0 (every id) or more, got " + std::to_string(o.top_k));
  if (o.num_samples < 1 || o.num_samples > 4096)
    throw bad("--num-samples must be in [1, 4096], got " + std::to_string(o.num_samples));
}

int32_t draw_token(const float* logits, int V, double temperature, int top_k, uint64_t seed, uint32_t sample,
                   uint64_t position) {
  for (int v = 0; v < V; ++v)
    if (!std::isfinite(logits[v]))
      throw InputError("the model's logit for id " + std::to_string(v) + " at position " + std::to_string(position) +
                       " is not finite: cannot sample");
  // the order of preference: larger logit first, the lower id on a tie
  auto before = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (temperature == 0) {
    int best = 0;
    for (int v = 1; v < V; ++v)
      if (before(v, best)) best = v;
    return best;
  }
  std::vector<int> kept(static_cast<size_t>(V));
  std::iota(kept.begin(), kept.end(), 0);
  if (top_k > 0 && top_k < V) {
    std::nth_element(kept.begin(), kept.begin() + (top_k - 1), kept.end(), before);
    const int kth = kept[top_k - 1];  // the k-th preferred id: keep it and those before it
    kept.erase(std::remove_if(kept.begin(), kept.end(), [&](int v) { return before(kth, v); }), kept.end());
    std::sort(kept.begin(), kept.end());  // id order, so the cumulative sum does not depend on the sort
  }
  double max_logit = -INFINITY;
  for (int v : kept) max_logit = std::max(max_logit, static_cast<double>(logits[v]));
  std::vector<double> weight(kept.size());
  double total = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    weight[i] = std::exp((static_cast<double>(logits[kept[i]]) - max_logit) / temperature);
    total += weight[i];
  }
  // u in [0, 1) with 48 random bits (two Philox words), so ids of probability down to ~1e-14 can be drawn
  const Philox4 bits = rng_bits(seed, RngStream::Sample, sample, position);
  const double u = (bits.v[0] >> 8) * 0x1p-24 + (bits.v[1] >> 8) * 0x1p-48;
  const double target = u * total;
  double cumulative = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    cumulative += weight[i];
    if (cumulative > target) return kept[i];
  }
  // (rounding left the sum a hair short of total: the last id of nonzero weight)
  for (size_t i = kept.size(); i-- > 0;)
    if (weight[i] > 0) return kept[i];
  return kept.back();
}

Generation generate(Backend& backend, const ModelConfig& config, const std::vector<float>& params,
                    const std::vector<int32_t>& prefix, const SampleOptions& o, int32_t end_of_text,
                    int drawable) {
  const int B = o.num_samples, V = config.vocab_size, maxT = config.max_seq_len;
  const int L = static_cast<int>(prefix.size());
  if (L < 1 || L > maxT)
    throw InputError("the prompt is " + std::to_string(L) + " tokens with end-of-text, the model's context is " +
                     std::to_string(maxT));
  Decoder decoder(backend, config, B);
  decoder.load_params(params);
  std::vector<int32_t> column(static_cast<size_t>(B));
  for (int p = 0; p + 1 < L; ++p) {
    std::fill(column.begin(), column.end(), prefix[p]);
    decoder.step(column.data(), p);
  }
  Generation g;
  g.tokens.assign(static_cast<size_t>(B), prefix);
  std::vector<bool> active(static_cast<size_t>(B), true);
  std::vector<int> drawn(static_cast<size_t>(B), 0);
  std::vector<float> logits(static_cast<size_t>(B) * V);
  std::fill(column.begin(), column.end(), prefix[L - 1]);
  const auto start = std::chrono::steady_clock::now();
  for (int pos = L - 1;; ++pos) {
    const Tensor out = decoder.step(column.data(), pos);
    backend.copy_to_host(logits.data(), out.data, out.bytes());
    bool any = false;
    for (int b = 0; b < B; ++b) {
      if (!active[b]) continue;  // (its row keeps being fed its last token; nothing is read from it)
      const int32_t t = draw_token(logits.data() + static_cast<size_t>(b) * V, drawable, o.temperature, o.top_k, o.seed,
                                   static_cast<uint32_t>(b), static_cast<uint64_t>(pos) + 1);
      ++g.new_tokens;
      column[b] = t;
      if (t == end_of_text) {
        active[b] = false;
        continue;
      }
      g.tokens[b].push_back(t);
      if (++drawn[b] == o.max_new_tokens) active[b] = false;
      any = any || active[b];
    }
    if (!any) break;
    if (pos + 1 >= maxT) {  // the next token would be fed at position max_seq_len
      g.out_of_context = true;
      break;
    }
  }
  g.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return g;
}

std::vector<float> decoder_logits(Backend& backend, const ModelConfig& config, const std::vector<float>& params,
                                  const std::vector<int32_t>& tokens) {
  const size_t V = static_cast<size_t>(config.vocab_size);
  Decoder decoder(backend, config, 1);
  decoder.load_params(params);
  std::vector<float> logits(tokens.size() * V);
  for (size_t p = 0; p < tokens.size(); ++p) {
    const Tensor out = decoder.step(&tokens[p], static_cast<int>(p));
    backend.copy_to_host(logits.data() + p * V, out.data, out.bytes());
  }
  return logits;
}

namespace {

// A directory's tokenizer.json, or a file: llm.c's GPT-2 tokenizer.
std::unique_ptr<Tokenizer> tokenizer_at(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return std::make_unique<LlmcTokenizer>(path);
  return load_tokenizer(path);
}

// --tokenizer DIR|FILE, else the directory the checkpoint names in its metadata "tokenizer".
std::unique_ptr<Tokenizer> sample_tokenizer(const SampleOptions& o, const CheckpointModel& model) {
  if (!o.tokenizer.empty()) return tokenizer_at(o.tokenizer);
  const auto it = model.metadata.find("tokenizer");
  if (it == model.metadata.end() || it->second.empty())
    throw InputError(o.checkpoint + ": the checkpoint names no tokenizer (metadata 'tokenizer'); pass --tokenizer DIR, " +
                     "the prepared data directory holding tokenizer.json, or --tokenizer FILE, llm.c's " +
                     "gpt2_tokenizer.bin");
  try {
    return load_tokenizer(it->second);
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) + " (the tokenizer named by " + o.checkpoint +
                     "; pass --tokenizer DIR|FILE to use another)");
  }
}

// --checkpoint: a tinytrain checkpoint (a directory: its latest), or a Hugging Face directory
// (config.json and its safetensors; dropout plays no part in sampling, so it is set to 0).
CheckpointModel read_model(const std::string& path) {
  if (!is_hf_model_dir(path)) return read_checkpoint_model(find_resume_checkpoint(path));
  const HfConfig hf = read_hf_config(path, 0.0f);
  CheckpointModel model;
  model.config = hf.model;
  model.params = read_hf_params(path, hf);
  return model;
}

// --prompt-ids "50256,464": each a decimal id below vocab, comma-separated, at least one.
std::vector<int32_t> parse_prompt_ids(const std::string& text, int vocab) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    // (the tokenizer's ids: [0, vocab - 1])
    ids.push_back(static_cast<int32_t>(parse_integer(item, 0, vocab - 1, "invalid option: each of --prompt-ids")));
    if (comma == std::string::npos) return ids;
    start = comma + 1;
  }
}

}  // namespace

void run_sample(Backend& backend, const SampleOptions& o, std::ostream& out, std::ostream& err) {
  check_sample_options(o);
  CheckpointModel model = read_model(o.checkpoint);
  const ModelConfig& config = model.config;
  if (!config.causal)
    throw InputError(o.checkpoint + ": sampling needs a causal model (--causal true): this one attends both ways");
  const std::unique_ptr<Tokenizer> tokenizer = sample_tokenizer(o, model);
  // A model's vocabulary may be padded past its tokenizer's (llm.c pads GPT-2's 50257 to 50304):
  // the padding ids are never drawn. A smaller one is another tokenizer than the model's.
  if (tokenizer->vocab_size() > config.vocab_size)
    throw InputError("the tokenizer has " + std::to_string(tokenizer->vocab_size()) + " ids but the model of " +
                     o.checkpoint + " has vocab_size " + std::to_string(config.vocab_size) +
                     ": sample with the tokenizer the model was trained with");
  if (!o.prompt_ids.empty() && !o.prompt.empty())
    throw InputError("invalid option: --prompt and --prompt-ids: give the prompt one way");
  std::vector<int32_t> prefix;
  if (!o.prompt_ids.empty()) {
    prefix = parse_prompt_ids(o.prompt_ids, tokenizer->vocab_size());
  } else {
    prefix = {tokenizer->end_of_text()};
    const std::vector<int32_t> prompt = tokenizer->encode(o.prompt);
    prefix.insert(prefix.end(), prompt.begin(), prompt.end());
  }
  if (static_cast<int64_t>(prefix.size()) > config.max_seq_len)
    throw InputError("invalid option: the prompt is " + std::to_string(prefix.size()) +
                     " ids with the end-of-text id; the model's context (max_seq_len " +
                     std::to_string(config.max_seq_len) + ") holds at most " + std::to_string(config.max_seq_len));

  if (!o.dump_logits.empty()) {
    const std::vector<float> logits = decoder_logits(backend, config, model.params, prefix);
    const int64_t T = static_cast<int64_t>(prefix.size()), V = config.vocab_size;
    write_safetensors(o.dump_logits,
                      {{"format", "tinytrain-logits"}, {"checkpoint", o.checkpoint},
                       {"config", model_config_to_json(config)}},
                      {{"tokens", DType::I32, Shape{T}, prefix.data()},
                       {"logits", DType::F32, Shape{T, V}, logits.data()}});
    err << "logits: wrote " << o.dump_logits << " (tokens [" << T << "], logits [" << T << ", " << V << "])"
        << std::endl;
    return;
  }

  const Generation g =
      generate(backend, config, model.params, prefix, o, tokenizer->end_of_text(), tokenizer->vocab_size());
  for (size_t b = 0; b < g.tokens.size(); ++b) {
    if (b > 0) out << "---\n";
    // the text without a leading end-of-text id (what every prefix from --prompt starts with)
    const bool leading_end = !g.tokens[b].empty() && g.tokens[b][0] == tokenizer->end_of_text();
    const std::vector<int32_t> text(g.tokens[b].begin() + (leading_end ? 1 : 0), g.tokens[b].end());
    out << tokenizer->decode(text) << "\n";
  }
  out << std::flush;
  if (g.out_of_context)
    err << "stopped at the model's context (max_seq_len " << config.max_seq_len
        << "): a sample there had room for no further token\n";
  char line[160];
  std::snprintf(line, sizeof line, "generated %lld tokens in %.3f s: %.1f tokens/s (%d sample%s, %s backend)",
                static_cast<long long>(g.new_tokens), g.seconds, g.seconds > 0 ? g.new_tokens / g.seconds : 0.0,
                o.num_samples, o.num_samples == 1 ? "" : "s", backend.name().c_str());
  err << line << std::endl;
}

}  // namespace tt
