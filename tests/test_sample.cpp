// `tinytrain sample` (cli/sampler.h), through the binary on checkpoints it trained itself
// (tiny models, a few steps on random tokens) with a byte tokenizer, and the draw itself:
//  - the same seed gives the same text, another seed another; --num-samples N gives N samples;
//  - greedy (--temperature 0) is deterministic, equals --top-k 1, and each of its tokens is the
//    argmax of Model::forward's logits over the whole sequence (and an end-of-text it stopped
//    at too); the same greedy text on the CPU backend and on the CUDA backend's code (SIMT
//    emulator, --backend cuda-emu);
//  - --dump-logits writes tokens and the logits at every position, Model::forward's;
//  - a sample stops at max_seq_len and says so; the tokenizer comes from the checkpoint's
//    metadata when train --data wrote it there;
//  - refused in one line: a bidirectional model, a tokenizer of another vocabulary, no
//    tokenizer, bad flags, a prompt longer than the context;
//  - draw_token: top-k, temperature and the frequencies of the draws.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "engine/io/checkpoint.h"
#include "engine/model.h"
#include "engine/io/safetensors.h"
#include "cli/sampler.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/cli_test_util.h"

namespace tt {
namespace {

using namespace test;

using Flags = std::vector<std::pair<std::string, std::string>>;

// The checkpoints and the byte tokenizer, made once for the suite.
class Sample : public ::testing::Test {
 protected:
  // (ctest runs each test in a process of its own: each checkpoint is trained when first used)
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    dir_->write("tokenizer.json", R"({"kind": "byte", "vocab_size": 256})");
  }
  static const std::string& causal() {
    if (causal_.empty()) causal_ = train("causal", {{"--vocab-size", "256"}, {"--causal", "true"}});
    return causal_;
  }
  static const std::string& bidirectional() {
    if (bidirectional_.empty())
      bidirectional_ = train("bidirectional", {{"--vocab-size", "256"}, {"--causal", "false"}});
    return bidirectional_;
  }
  static const std::string& small_vocab() {
    if (small_vocab_.empty()) small_vocab_ = train("small_vocab", {{"--vocab-size", "32"}, {"--causal", "true"}});
    return small_vocab_;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
    causal_.clear();
    bidirectional_.clear();
    small_vocab_.clear();
  }

  // 3 steps of `tinytrain train` at lr 1e-2 (enough to leave the uniform distribution), saved.
  static std::string train(const std::string& name, const Flags& flags) {
    std::vector<std::string> argv = {TINYTRAIN_BIN, "train", "--backend", "cpu", "--threads", "1", "--d-model", "32",
                                     "--n-head", "4", "--n-layer", "2", "--d-ff", "64", "--seq", "16", "--max-seq-len",
                                     "32", "--batch", "4", "--steps", "3", "--lr", "1e-2", "--pos-embedding", "learned",
                                     "--norm-first", "true", "--save-dir", dir_->file(name)};
    for (const auto& [flag, value] : flags) argv.insert(argv.end(), {flag, value});
    const CliResult r = run_command(argv, dir_->path(), 120.0);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return checkpoint_path(dir_->file(name), 3);
  }

  static CliResult sample(const Flags& flags, const std::string& checkpoint = "", bool tokenizer = true) {
    std::vector<std::string> argv = {TINYTRAIN_BIN, "sample", "--checkpoint", checkpoint.empty() ? causal() : checkpoint};
    bool backend = false;
    for (const auto& [flag, value] : flags) {
      argv.insert(argv.end(), {flag, value});
      backend = backend || flag == "--backend";
    }
    if (!backend) argv.insert(argv.end(), {"--backend", "cpu", "--threads", "1"});
    if (tokenizer) argv.insert(argv.end(), {"--tokenizer", dir_->path()});
    return run_command(argv, dir_->path(), 300.0);
  }

  static ScratchDir* dir_;
  static std::string causal_, bidirectional_, small_vocab_;
};
ScratchDir* Sample::dir_ = nullptr;
std::string Sample::causal_, Sample::bidirectional_, Sample::small_vocab_;

// What a successful run printed: on stdout each sample's text and nothing else; on stderr the
// tokens/s line last, after a note when a sample stopped at the context (and, on the emulator,
// the backend's line first). The texts are raw bytes (a barely trained byte model), so they
// are cut at the separator lines "\n---\n" rather than line by line.
struct Printed {
  std::vector<std::string> texts;
  bool out_of_context = false;
  std::string rate;
};

Printed parse(const CliResult& r) {
  Printed p;
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  const std::vector<std::string> err = r.err_lines();
  if (err.empty()) {
    ADD_FAILURE() << "no statistics line on stderr\n" << r.describe();
    return p;
  }
  p.rate = err.back();
  EXPECT_EQ(p.rate.rfind("generated ", 0), 0u) << p.rate;
  EXPECT_TRUE(contains(p.rate, " tokens/s")) << p.rate;
  for (size_t i = 0; i + 1 < err.size(); ++i) {
    const bool stop = err[i].rfind("stopped at the model's context", 0) == 0;
    p.out_of_context = p.out_of_context || stop;
    EXPECT_TRUE(stop || err[i].rfind("backend cuda-emu: ", 0) == 0) << "unexpected stderr line: " << err[i];
  }
  std::string body = r.out;
  if (body.empty() || body.back() != '\n') {
    ADD_FAILURE() << "output does not end with a line\n" << r.describe();
    return p;
  }
  body.pop_back();
  for (size_t start = 0;;) {
    const size_t sep = body.find("\n---\n", start);
    p.texts.push_back(body.substr(start, sep == std::string::npos ? std::string::npos : sep - start));
    if (sep == std::string::npos) break;
    start = sep + 5;
  }
  return p;
}

// Model::forward's logits (T,V) for one sequence, dropout off, on the CPU backend.
std::vector<float> full_forward_logits(const CheckpointModel& m, const std::vector<int32_t>& tokens) {
  auto cpu = make_cpu_backend();
  ModelConfig config = m.config;
  config.dropout = 0.0f;
  const int T = static_cast<int>(tokens.size());
  Model model(*cpu, config, 1, T);
  cpu->copy_to_device(model.params().data, m.params.data(), model.params().bytes());
  model.refresh_working_weights();
  void* tokens_d = cpu->allocate(tokens.size() * sizeof(int32_t));
  void* step_d = cpu->allocate(sizeof(uint32_t));
  cpu->copy_to_device(tokens_d, tokens.data(), tokens.size() * sizeof(int32_t));
  model.forward(Tensor{tokens_d, DType::I32, Shape{1, T}}, DropoutContext{1, static_cast<const uint32_t*>(step_d)});
  std::vector<float> logits(static_cast<size_t>(T) * config.vocab_size);
  cpu->copy_to_host(logits.data(), model.logits().data, logits.size() * sizeof(float));
  cpu->release(tokens_d);
  cpu->release(step_d);
  return logits;
}

int argmax(const float* row, int V) {
  int best = 0;
  for (int v = 1; v < V; ++v)
    if (row[v] > row[best]) best = v;
  return best;
}

std::vector<int32_t> bytes_of(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

TEST_F(Sample, SameSeedSameTextAnotherSeedAnotherText) {
  const Flags flags = {{"--prompt", "Once"}, {"--max-new-tokens", "24"}, {"--num-samples", "2"}};
  auto with_seed = [&](const std::string& seed) {
    Flags f = flags;
    f.emplace_back("--seed", seed);
    return parse(sample(f));
  };
  const Printed a = with_seed("5"), again = with_seed("5"), other = with_seed("6");
  // `sample > out.txt` holds the samples alone: two runs with one seed write the same bytes
  Flags five = flags;
  five.emplace_back("--seed", "5");
  const CliResult first = sample(five), second = sample(five);
  EXPECT_EQ(first.out, second.out);
  EXPECT_FALSE(contains(first.out, "tokens/s")) << first.out;
  ASSERT_EQ(a.texts.size(), 2u);
  EXPECT_EQ(a.texts, again.texts);
  EXPECT_NE(a.texts, other.texts);
  EXPECT_NE(a.texts[0], a.texts[1]) << "the samples of one run draw from streams of their own";
  for (const std::string& t : a.texts) {
    EXPECT_EQ(t.rfind("Once", 0), 0u) << "each sample shows its prompt";
    EXPECT_LE(t.size(), 4u + 24u);
  }
  EXPECT_TRUE(contains(a.rate, "(2 samples, cpu backend)")) << a.rate;
}

TEST_F(Sample, NumSamplesThreeGivesThree) {
  const Printed p = parse(sample({{"--num-samples", "3"}, {"--max-new-tokens", "8"}, {"--prompt", "x"}}));
  EXPECT_EQ(p.texts.size(), 3u);
}

// Greedy is deterministic, the same as --top-k 1, and each token it drew is the argmax of the
// full forward's logits at the position before it.
TEST_F(Sample, GreedyIsTheArgmaxOfTheFullForward) {
  const Flags greedy = {{"--prompt", "ab"}, {"--temperature", "0"}, {"--max-new-tokens", "20"}};
  const Printed a = parse(sample(greedy)), b = parse(sample(greedy));
  ASSERT_EQ(a.texts.size(), 1u);
  EXPECT_EQ(a.texts, b.texts);
  Flags top1 = {{"--prompt", "ab"}, {"--top-k", "1"}, {"--max-new-tokens", "20"}, {"--seed", "9"}};
  EXPECT_EQ(parse(sample(top1)).texts, a.texts);

  const CheckpointModel m = read_checkpoint_model(causal());
  std::vector<int32_t> tokens = {0};  // end-of-text, then the text's bytes
  for (int32_t id : bytes_of(a.texts[0])) tokens.push_back(id);
  const int V = m.config.vocab_size, L = 3, T = static_cast<int>(tokens.size());
  ASSERT_GT(T, L) << "greedy drew nothing";
  const std::vector<float> logits = full_forward_logits(m, tokens);
  for (int t = L; t < T; ++t) EXPECT_EQ(argmax(&logits[static_cast<size_t>(t - 1) * V], V), tokens[t]) << "position " << t;
  if (T - L < 20) {  // it stopped early: at end-of-text, the argmax of the last position
    EXPECT_FALSE(a.out_of_context);
    EXPECT_EQ(argmax(&logits[static_cast<size_t>(T - 1) * V], V), 0);
  }
  std::printf("[ greedy   ] %d tokens drawn, each the full forward's argmax\n", T - L);
}

// The CUDA backend's code (on the SIMT emulator here, the GPU where there is one) writes the
// CPU backend's greedy text.
TEST_F(Sample, GreedyTextIsTheSameOnCudaEmu) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (-DTINYTRAIN_SIMT=OFF)";
#endif
  const Flags greedy = {{"--prompt", "The"}, {"--temperature", "0"}, {"--max-new-tokens", "12"}, {"--num-samples", "2"}};
  Flags emulated = greedy;
  emulated.emplace_back("--backend", "cuda-emu");
  const CliResult emu = sample(emulated);
  EXPECT_EQ(emu.err.rfind("backend cuda-emu: ", 0), 0u) << emu.err;
  const Printed e = parse(emu), c = parse(sample(greedy));
  ASSERT_EQ(e.texts.size(), 2u);
  EXPECT_EQ(e.texts, c.texts);
  EXPECT_EQ(e.texts[0], e.texts[1]) << "greedy: every sample the same";
}

// --dump-logits: the prompt's tokens (end-of-text first) and the logits at every position.
TEST_F(Sample, DumpLogitsWritesTheFullForwardsLogits) {
  const std::string file = dir_->file("dump.safetensors");
  const CliResult r = sample({{"--prompt", "dump me"}, {"--dump-logits", file}});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, "logits: wrote " + file)) << r.err;
  EXPECT_EQ(r.out, "") << "no text was sampled";
  const SafetensorsFile f = SafetensorsFile::open(file);
  const std::vector<int32_t> want_tokens = {0, 'd', 'u', 'm', 'p', ' ', 'm', 'e'};
  const int64_t T = 8, V = 256;
  std::vector<int32_t> tokens(T);
  std::vector<float> logits(T * V);
  f.read("tokens", DType::I32, Shape{T}, tokens.data());
  f.read("logits", DType::F32, Shape{T, V}, logits.data());
  EXPECT_EQ(f.names(), (std::vector<std::string>{"logits", "tokens"}));
  EXPECT_EQ(tokens, want_tokens);
  const std::vector<float> full = full_forward_logits(read_checkpoint_model(causal()), tokens);
  double worst = 0;
  for (size_t i = 0; i < full.size(); ++i) worst = std::max(worst, std::fabs(double(full[i]) - logits[i]));
  EXPECT_LE(worst, 1e-5);
  std::printf("[ dump     ] decoder vs full forward: max abs difference %.3g\n", worst);
}

// Prompt of max_seq_len - 2 bytes: with end-of-text that fills all but one position, so two
// tokens can be drawn (the second conditioned on the whole context), then the line says why
// it stopped. A prompt of max_seq_len bytes is refused.
TEST_F(Sample, StopsAtMaxSeqLenAndSaysSo) {
  const std::string prompt(30, 'a');
  const Printed p = parse(sample({{"--prompt", prompt}, {"--max-new-tokens", "50"}, {"--num-samples", "4"}}));
  ASSERT_EQ(p.texts.size(), 4u);
  bool full = false;
  for (const std::string& t : p.texts) {
    EXPECT_LE(t.size(), 32u);
    full = full || t.size() == 32u;
  }
  EXPECT_EQ(p.out_of_context, full);
  expect_user_error(sample({{"--prompt", std::string(32, 'a')}}), {"the prompt is 33 ids", "max_seq_len 32"});
  const Printed one = parse(sample({{"--prompt", std::string(31, 'a')}, {"--temperature", "0"}}));
  EXPECT_LE(one.texts[0].size(), 32u);
}

TEST_F(Sample, Refusals) {
  expect_user_error(sample({}, bidirectional()), {"sampling needs a causal model", "attends both ways"});
  expect_user_error(sample({}, small_vocab()), {"tokenizer has 256 ids", "vocab_size 32"});
  expect_user_error(sample({}, causal(), /*tokenizer=*/false), {"names no tokenizer", "--tokenizer"});
  expect_user_error(sample({{"--tokenizer", dir_->file("nowhere")}}, causal(), false), {"nowhere"});
  expect_user_error(sample({}, dir_->file("missing.safetensors")), {"missing.safetensors"});
  for (const auto& [flag, value, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--temperature", "-0.5", "--temperature"},
           {"--temperature", "nan", "--temperature"},
           {"--top-k", "-1", "--top-k"},
           {"--max-new-tokens", "0", "--max-new-tokens"},
           {"--num-samples", "0", "--num-samples"},
           {"--seed", "-3", "--seed"},
           {"--max-new-tokens", "1.5", "--max-new-tokens"},
           {"--backend", "tpu", "backend"},
       }) {
    SCOPED_TRACE(flag + " " + value);
    expect_user_error(sample({{flag, value}}), {says});
  }
}

// train --data writes where its tokenizer is into the checkpoint: sample finds it there.
TEST_F(Sample, TokenizerFromTheCheckpoint) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the cat sat on the mat. ";
  fs::create_directories(dir_->file("corpus"));
  for (int d = 0; d < 8; ++d) dir_->write("corpus/doc" + std::to_string(d) + ".txt", text);
  const std::string data = dir_->file("prepared");
  CliResult r = run_command({TINYTRAIN_BIN, "prepare", "--input", dir_->file("corpus"), "--out", data, "--tokenizer",
                             "byte"},
                            dir_->path(), 120.0);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  r = run_command({TINYTRAIN_BIN, "train", "--backend", "cpu", "--threads", "1", "--data", data, "--d-model", "32",
                   "--n-head", "4", "--n-layer", "1", "--d-ff", "64", "--seq", "16", "--max-seq-len", "32", "--batch",
                   "4", "--steps", "2", "--causal", "true", "--save-dir", dir_->file("with_data")},
                  dir_->path(), 120.0);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string ckpt = checkpoint_path(dir_->file("with_data"), 2);
  EXPECT_EQ(read_checkpoint_model(ckpt).metadata.count("tokenizer"), 1u);
  const Printed p = parse(sample({{"--prompt", "the cat"}, {"--max-new-tokens", "5"}}, ckpt, /*tokenizer=*/false));
  ASSERT_EQ(p.texts.size(), 1u);
  EXPECT_EQ(p.texts[0].rfind("the cat", 0), 0u);
}

// ---- the draw ----

TEST(SampleDraw, TopKTemperatureAndFrequencies) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const int N = 40000;
  std::vector<int> count(4, 0), count_k2(4, 0), count_cold(4, 0);
  for (int i = 0; i < N; ++i) {
    ++count[draw_token(logits.data(), 4, 1.0, 0, 7, 0, i)];
    ++count_k2[draw_token(logits.data(), 4, 1.0, 2, 7, 1, i)];
    ++count_cold[draw_token(logits.data(), 4, 0.5, 0, 7, 2, i)];
  }
  const double p[4] = {0.5, 0.3, 0.15, 0.05};
  double cold_total = 0;
  for (double q : p) cold_total += q * q;
  for (int v = 0; v < 4; ++v) {
    EXPECT_NEAR(count[v] / double(N), p[v], 0.01) << "id " << v;
    EXPECT_NEAR(count_cold[v] / double(N), p[v] * p[v] / cold_total, 0.01) << "id " << v;  // T 0.5 squares p
  }
  EXPECT_NEAR(count_k2[0] / double(N), 0.5 / 0.8, 0.01);
  EXPECT_EQ(count_k2[2] + count_k2[3], 0) << "top-k 2 draws only the two likeliest";
  // greedy and top-k 1: the argmax, the lower id on a tie; the same key, the same draw
  const std::vector<float> tie = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(draw_token(tie.data(), 4, 0.0, 0, 1, 0, 0), 1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(draw_token(tie.data(), 4, 2.0, 1, 1, 0, i), 1);
  EXPECT_EQ(draw_token(logits.data(), 4, 1.0, 0, 3, 5, 11), draw_token(logits.data(), 4, 1.0, 0, 3, 5, 11));
  const std::vector<float> bad = {0.0f, NAN};
  EXPECT_THROW(draw_token(bad.data(), 2, 1.0, 0, 1, 0, 0), InputError);
}

}  // namespace
}  // namespace tt
