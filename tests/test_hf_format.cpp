// Hugging Face directories without Hugging Face (tools/hf_interop.py checks them against
// transformers itself): `tinytrain export --format hf` writes the files and names transformers
// reads, GPT-2's Conv1D weights transposed; reading the export back gives the checkpoint's
// logits bit for bit; what no class holds is refused; and every bad directory given to
// `train --init-from` or `sample --checkpoint` is one error line.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/cli_test_util.h"

namespace tt::test {
namespace {

const std::vector<std::string> kShape = {"--vocab-size", "256", "--d-model", "32", "--n-head", "4", "--n-layer", "2",
                                         "--d-ff", "48", "--max-seq-len", "32"};

// A checkpoint of one step of `arch_flags` in DIR/run, made by the binary.
std::string train_checkpoint(const ScratchDir& scratch, const std::vector<std::string>& arch_flags) {
  std::vector<std::string> argv = {TINYTRAIN_BIN, "train", "--backend", "cpu", "--threads", "1", "--batch", "2",
                                   "--seq", "16", "--steps", "1", "--save-dir", scratch.file("run")};
  argv.insert(argv.end(), kShape.begin(), kShape.end());
  argv.insert(argv.end(), arch_flags.begin(), arch_flags.end());
  const CliResult r = run_command(argv, scratch.path());
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  return scratch.file("run/ckpt_00000001.safetensors");
}

CliResult export_hf(const ScratchDir& scratch, const std::string& checkpoint, const std::string& out) {
  return run_command({TINYTRAIN_BIN, "export", "--checkpoint", checkpoint, "--format", "hf", "--out", out},
                     scratch.path());
}

// The prompt's logits as `sample --dump-logits` writes them, from a checkpoint or a directory.
std::string dumped_logits(const ScratchDir& scratch, const std::string& model, const std::string& name) {
  const std::string dump = scratch.file(name + ".logits.safetensors");
  const CliResult r = run_command({TINYTRAIN_BIN, "sample", "--backend", "cpu", "--checkpoint", model, "--prompt-ids",
                                   "5,17,3,60,9,0,41", "--tokenizer", scratch.path(), "--dump-logits", dump},
                                  scratch.path());
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  RawSafetensors st = RawSafetensors::load(dump);
  const RawTensor* logits = st.find("logits");
  return logits ? logits->bytes : "";
}

// The byte tokenizer, which `sample` needs beside --prompt-ids (models it samples have 256 ids).
void write_byte_tokenizer(const ScratchDir& scratch) {
  scratch.write("tokenizer.json", R"({"kind": "byte", "vocab_size": 256})");
}

TEST(HfExport, LlamaWritesTransformersNamesAndReadsBackToTheSameLogits) {
  ScratchDir scratch;
  write_byte_tokenizer(scratch);
  const std::vector<std::string> llama = {"--arch", "llama", "--n-kv-head", "2"};
  const std::string ckpt = train_checkpoint(scratch, llama);
  const CliResult r = export_hf(scratch, ckpt, scratch.file("hf"));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "LlamaForCausalLM")) << r.out;
  const nlohmann::json config = nlohmann::json::parse(read_whole_file(scratch.file("hf/config.json")));
  EXPECT_EQ(config.at("model_type"), "llama");
  EXPECT_EQ(config.at("architectures")[0], "LlamaForCausalLM");
  EXPECT_EQ(config.at("hidden_size"), 32);
  EXPECT_EQ(config.at("num_key_value_heads"), 2);
  EXPECT_EQ(config.at("intermediate_size"), 48);
  EXPECT_EQ(config.at("tie_word_embeddings"), false);
  EXPECT_EQ(config.at("rope_parameters").at("rope_theta"), 10000.0);
  EXPECT_TRUE(fs::exists(scratch.file("hf/generation_config.json")));
  RawSafetensors st = RawSafetensors::load(scratch.file("hf/model.safetensors"));
  EXPECT_EQ(st.metadata.value("format", ""), "pt") << "transformers refuses a safetensors file without format pt";
  ASSERT_NE(st.find("model.layers.1.self_attn.k_proj.weight"), nullptr);
  EXPECT_EQ(st.find("model.layers.1.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{16, 32}));
  EXPECT_NE(st.find("lm_head.weight"), nullptr);
  // read back by sample: the very logits of the checkpoint (the same parameters, bit for bit)
  const std::string from_checkpoint = dumped_logits(scratch, ckpt, "ckpt");
  EXPECT_FALSE(from_checkpoint.empty());
  EXPECT_EQ(dumped_logits(scratch, scratch.file("hf"), "hf"), from_checkpoint);
}

TEST(HfExport, Gpt2TransposesConv1DWeightsAndOmitsTheTiedHead) {
  ScratchDir scratch;
  write_byte_tokenizer(scratch);
  const std::string ckpt = train_checkpoint(scratch, {"--arch", "gpt2"});
  ASSERT_EQ(export_hf(scratch, ckpt, scratch.file("hf")).exit_code, 0);
  const nlohmann::json config = nlohmann::json::parse(read_whole_file(scratch.file("hf/config.json")));
  EXPECT_EQ(config.at("model_type"), "gpt2");
  EXPECT_EQ(config.at("activation_function"), "gelu") << "ours is the exact erf GELU";
  EXPECT_EQ(config.at("n_inner"), 48);
  RawSafetensors hf = RawSafetensors::load(scratch.file("hf/model.safetensors"));
  RawSafetensors ours = RawSafetensors::load(ckpt);
  EXPECT_FALSE(hf.erase("lm_head.weight")) << "a tied head is the embedding: GPT2LMHeadModel saves no lm_head.weight";
  // c_fc.weight (C, F) holds linear1.weight (F, C) transposed
  const RawTensor* fc = hf.find("transformer.h.1.mlp.c_fc.weight");
  const RawTensor* linear1 = ours.find("encoder.layers.1.linear1.weight");
  ASSERT_TRUE(fc && linear1);
  ASSERT_EQ(fc->shape, (std::vector<int64_t>{32, 48}));
  for (int i = 0; i < 32; ++i)
    for (int o = 0; o < 48; ++o)
      ASSERT_EQ(std::memcmp(&fc->bytes[4 * (i * 48 + o)], &linear1->bytes[4 * (o * 32 + i)], 4), 0) << i << "," << o;
  EXPECT_EQ(hf.find("transformer.wpe.weight")->bytes, ours.find("pos_embed.weight")->bytes);
  EXPECT_EQ(dumped_logits(scratch, scratch.file("hf"), "hf"), dumped_logits(scratch, ckpt, "ckpt"));
}

TEST(HfExport, WhatNoClassHoldsIsRefusedInOneLine) {
  ScratchDir scratch;
  const std::string seed = train_checkpoint(scratch, {});
  expect_user_error(export_hf(scratch, seed, scratch.file("hf")), {"cannot export to Hugging Face", "post-norm"});
  EXPECT_FALSE(fs::exists(scratch.file("hf"))) << "a refused export writes nothing";
  ScratchDir other;
  const std::string biased_head = train_checkpoint(other, {"--arch", "gpt2", "--head-bias", "true"});
  expect_user_error(export_hf(other, biased_head, other.file("hf")), {"head_bias", "GPT2LMHeadModel"});
}

// A valid exported Llama directory in scratch/hf, to break one piece at a time.
class HfImport : public ::testing::Test {
 protected:
  void SetUp() override {
    write_byte_tokenizer(scratch_);
    const std::string ckpt =
        train_checkpoint(scratch_, {"--arch", "llama", "--tie-embeddings", "true"});
    ASSERT_EQ(export_hf(scratch_, ckpt, dir()).exit_code, 0);
    config_ = nlohmann::json::parse(read_whole_file(dir() + "/config.json"));
  }
  std::string dir() const { return scratch_.file("hf"); }
  void write_config(const nlohmann::json& config) const { scratch_.write("hf/config.json", config.dump()); }
  CliResult init_from(std::vector<std::string> extra = {}) const {
    std::vector<std::string> argv = {TINYTRAIN_BIN, "train", "--backend", "cpu", "--threads", "1", "--batch", "2",
                                     "--seq", "16", "--steps", "1", "--init-from", dir()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv, scratch_.path());
  }
  CliResult sample() const {
    return run_command({TINYTRAIN_BIN, "sample", "--backend", "cpu", "--checkpoint", dir(), "--tokenizer",
                        scratch_.path(), "--prompt-ids", "1,2,3", "--max-new-tokens", "2"},
                       scratch_.path());
  }
  // config.json with `key` set to `value`, then one error line from train and from sample
  void expect_refused(const std::string& key, const nlohmann::json& value, std::initializer_list<std::string> phrases) {
    nlohmann::json c = config_;
    c[key] = value;
    write_config(c);
    SCOPED_TRACE(key);
    expect_user_error(init_from(), phrases);
    expect_user_error(sample(), phrases);
  }

  ScratchDir scratch_;
  nlohmann::json config_;
};

TEST_F(HfImport, TrainsAndSamplesFromTheDirectory) {
  const CliResult train = init_from();
  EXPECT_EQ(train.exit_code, 0) << train.describe();
  EXPECT_TRUE(contains(train.out + train.err, "(Hugging Face)")) << train.describe();
  EXPECT_EQ(sample().exit_code, 0);
}

TEST_F(HfImport, UnsupportedOptionsAreOneLine) {
  expect_refused("rope_parameters", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 10000.0}},
                 {"rope_parameters", "unscaled RoPE"});
  expect_refused("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}, {"rope_scaling"});
  expect_refused("sliding_window", 16, {"sliding_window"});
  expect_refused("attention_bias", true, {"attention_bias", "no biases"});
  expect_refused("hidden_act", "gelu", {"hidden_act", "silu"});
  expect_refused("model_type", "mistral", {"model_type", "llama"});
  expect_refused("architectures", {"LlamaModel"}, {"architectures", "LlamaForCausalLM"});
  expect_refused("head_dim", 16, {"head_dim"});
  expect_refused("num_key_value_heads", 3, {"config.json", "n_kv_head|n-kv-head"});
  expect_refused("hidden_size", "32", {"hidden_size"});
}

TEST_F(HfImport, BadDirectoriesAreOneLine) {
  // the shapes config.json implies differ from the file's
  nlohmann::json c = config_;
  c["intermediate_size"] = 40;
  write_config(c);
  expect_user_error(init_from(), {"mlp.gate_proj.weight", "shape"});
  write_config(config_);
  // a model flag beside the directory: its config.json sets the model
  expect_user_error(init_from({"--d-model", "32"}), {"--d-model", "config.json"});
  // config.json not JSON
  scratch_.write("hf/config.json", "{\"model_type\": ");
  expect_user_error(init_from(), {"config.json"});
  write_config(config_);
  // a tensor the model does not have
  RawSafetensors st = RawSafetensors::load(dir() + "/model.safetensors");
  RawSafetensors extra = st;
  extra.tensors.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {32}, std::string(128, '\0')});
  scratch_.write("hf/model.safetensors", extra.serialize());
  expect_user_error(init_from(), {"unexpected tensor", "q_proj.bias"});
  // a missing tensor
  RawSafetensors fewer = st;
  fewer.erase("model.norm.weight");
  scratch_.write("hf/model.safetensors", fewer.serialize());
  expect_user_error(sample(), {"missing tensor", "model.norm.weight"});
  // shards: an index naming a file that is not there
  fs::remove(dir() + "/model.safetensors");
  expect_user_error(init_from(), {"model.safetensors.index.json|no model.safetensors"});
  scratch_.write("hf/model.safetensors.index.json",
                 R"({"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}})");
  expect_user_error(init_from(), {"model-00002-of-00002.safetensors", "missing"});
  scratch_.write("hf/model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": "../x.safetensors"}})");
  expect_user_error(sample(), {"not a file of this directory"});
  // no config.json at all: not a Hugging Face directory (nor a checkpoint)
  fs::remove(dir() + "/config.json");
  expect_user_error(init_from(), {dir()});
}

}  // namespace
}  // namespace tt::test
