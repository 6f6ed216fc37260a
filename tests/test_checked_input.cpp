// Tests for base/checked_input (typed, range-checked reading of untrusted numbers and JSON)
// and for the config readers built on it: every way a number can be wrong in type or range
// is refused with one InputError naming where, the field and the value, never truncated,
// wrapped or cast.
#include "base/checked_input.h"

#include <gtest/gtest.h>

#include <climits>
#include <functional>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/param_layout.h"
#include "tests/test_models.h"

namespace tt {
namespace {

bool contains_text(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using nlohmann::json;

// Runs fn, expects an InputError containing every phrase, on one line; returns the message.
std::string expect_input_error(const std::function<void()>& fn, std::initializer_list<std::string> phrases) {
  try {
    fn();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const std::string& phrase : phrases)
      EXPECT_NE(msg.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    return msg;
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

// ---------------------------------------------------------------- parse_json

TEST(ParseJson, NumberBeyondDoubleIsInputErrorNotOutOfRange) {
  expect_input_error([] { parse_json("{\"a\":1E400}", "f.json"); },
                     {"f.json is not valid JSON", "number overflow parsing '1E400'"});
  expect_input_error([] { parse_json("-1e999", "f.json"); }, {"f.json is not valid JSON"});
}

TEST(ParseJson, SyntaxErrorsAndBadUtf8AreInputErrors) {
  expect_input_error([] { parse_json("{\"a\": ", "w"); }, {"w is not valid JSON"});
  expect_input_error([] { parse_json("", "w"); }, {"w is not valid JSON"});
  expect_input_error([] { parse_json("\"\xff\"", "w"); }, {"w is not valid JSON"});
}

TEST(ParseJson, ReasonIsPrintableAndBounded) {
  // A long invalid literal full of control characters: the message quotes it, bounded and
  // with the control characters replaced.
  const std::string junk = "[" + std::string(5000, '\x01') + "]";
  const std::string msg = expect_input_error([&] { parse_json(junk, "w"); }, {"w is not valid JSON"});
  EXPECT_LT(msg.size(), 400u) << msg;
  for (char c : msg) EXPECT_TRUE(c >= 0x20 && c <= 0x7e) << "unprintable byte in: " << msg;
}

TEST(ParseJson, ValidTextParses) { EXPECT_EQ(parse_json("{\"a\": [1, 2.5]}", "w")["a"][1].get<double>(), 2.5); }

// ---------------------------------------------------------------- parse_integer

TEST(ParseInteger, DecimalDigitsInRange) {
  EXPECT_EQ(parse_integer("16", 1, 100, "w"), 16);
  EXPECT_EQ(parse_integer("-7", -10, 10, "w"), -7);
  EXPECT_EQ(parse_integer("0", 0, 0, "w"), 0);
  EXPECT_EQ(parse_integer("9223372036854775807", 0, INT64_MAX, "w"), INT64_MAX);
}

TEST(ParseInteger, RefusesEverythingElse) {
  for (const char* text : {"", "-", "1e2", "16.0", " 16", "16 ", "+16", "0x10", "abc", "1_000", "9223372036854775808",
                           "99999999999999999999", "18446744073709551616"})
    expect_input_error([&] { parse_integer(text, INT64_MIN, INT64_MAX, "meta 'steps'"); },
                       {"meta 'steps' must be an integer in", std::string("got '") + text + "'"});
}

TEST(ParseInteger, RefusesOutOfRangeNamingTheRange) {
  expect_input_error([] { parse_integer("0", 1, 2147483647, "meta 'batch'"); },
                     {"meta 'batch' must be an integer in [1, 2147483647], got '0'"});
  expect_input_error([] { parse_integer("4294967328", 1, INT_MAX, "meta 'seq'"); }, {"got '4294967328'"});
}

TEST(ParseInteger, QuotesHostileTextPrintably) {
  const std::string msg = expect_input_error([] { parse_integer("1\n2" + std::string(500, 'x'), 0, 9, "w"); }, {"got '1?2x"});
  EXPECT_LT(msg.size(), 200u) << msg;
}

// ---------------------------------------------------------------- JsonFields

TEST(JsonFields, IntegerFieldRefusesNonIntegers) {
  // 64.9 would truncate, 1e300 is undefined as an int, 64.0 is still a float in JSON,
  // 2^64 is beyond 64 bits (nlohmann keeps it as a float), "64" and true are not numbers.
  for (const char* text : {"64.9", "1e300", "64.0", "18446744073709551616", "\"64\"", "true", "null", "[64]"}) {
    JsonFields f(parse_json(std::string("{\"d_model\": ") + text + "}", "w"), "ref: metadata 'config'");
    expect_input_error([&] { f.positive_int("d_model"); },
                       {"ref: metadata 'config': field 'd_model' must be an integer in [1, 2147483647], got "});
  }
}

TEST(JsonFields, IntegerFieldRefusesOutOfRange) {
  for (const char* text : {"0", "-1", "2147483648", "4294967328", "9223372036854775807"}) {
    JsonFields f(parse_json(std::string("{\"n\": ") + text + "}", "w"), "cfg");
    expect_input_error([&] { f.positive_int("n"); }, {"field 'n' must be an integer", std::string("got ") + text});
  }
  JsonFields f(parse_json("{\"n\": 2147483647}", "w"), "cfg");
  EXPECT_EQ(f.positive_int("n"), INT_MAX);
}

TEST(JsonFields, FloatFieldRefusesWhatAFloatCannotHold) {
  JsonFields f(parse_json("{\"eps\": 1e39, \"tiny\": 1e-50, \"s\": \"1\"}", "w"), "cfg");
  expect_input_error([&] { f.number_f32("eps"); }, {"field 'eps' is beyond the range of a 32-bit float", "1e+39"});
  EXPECT_EQ(f.number_f32("tiny"), 0.0f);  // underflow to zero is defined; validate() judges it
  expect_input_error([&] { f.number("s"); }, {"field 's' must be a number"});
}

TEST(JsonFields, MissingWrongTypeAndUnknownFields) {
  JsonFields f(parse_json("{\"a\": 1, \"b\": \"x\", \"typo\": 2}", "w"), "cfg");
  expect_input_error([&] { f.boolean("c"); }, {"cfg: missing field 'c'"});
  expect_input_error([&] { f.boolean("a"); }, {"field 'a' must be true or false, got 1"});
  expect_input_error([&] { f.string("a"); }, {"field 'a' must be a string"});
  EXPECT_EQ(f.string("b"), "x");
  expect_input_error([&] { f.finish(); }, {"cfg: unknown field 'typo'"});
  expect_input_error([] { JsonFields(json::array(), "cfg"); }, {"cfg: not a JSON object"});
}

// ---------------------------------------------------------------- the config readers

// Issue 10, D: the config's integer fields went through nlohmann's get<int>.
TEST(ConfigFromJson, IntegerFieldsAreCheckedNotCast) {
  const ModelConfig seed;
  json base = json::parse(model_config_to_json(seed));
  struct Case {
    const char* field;
    json value;
  };
  for (const Case& c : {Case{"d_model", 1e300}, Case{"d_model", 4294967328.0}, Case{"d_model", json(4294967328ull)},
                        Case{"vocab_size", 64.9}, Case{"n_layer", -2}, Case{"n_head", "4"}, Case{"d_ff", 0}}) {
    json j = base;
    j[c.field] = c.value;
    expect_input_error([&] { model_config_from_json(j.dump(), "ref: metadata 'config'"); },
                       {"ref: metadata 'config': field '" + std::string(c.field) + "' must be an integer"});
  }
}

TEST(ConfigFromJson, RoundTripsAndNamesWhereOnValidationErrors) {
  ModelConfig c;
  c.d_model = 96;
  c.n_head = 3;
  c.norm_first = true;
  const ModelConfig back = model_config_from_json(model_config_to_json(c));
  EXPECT_EQ(back.d_model, 96);
  EXPECT_EQ(back.n_head, 3);
  EXPECT_TRUE(back.norm_first);
  json j = json::parse(model_config_to_json(c));
  j["n_head"] = 5;
  expect_input_error([&] { model_config_from_json(j.dump(), "ref: metadata 'config'"); },
                     {"ref: metadata 'config': invalid config: n_head (5) must divide d_model (96)"});
  j = json::parse(model_config_to_json(c));
  j["layer_norm_eps"] = 1e300;
  expect_input_error([&] { model_config_from_json(j.dump(), "cfg"); }, {"field 'layer_norm_eps' is beyond"});
  j = json::parse(model_config_to_json(c));
  j["dmodel"] = 8;
  expect_input_error([&] { model_config_from_json(j.dump(), "cfg"); }, {"cfg: unknown field 'dmodel'"});
  // the Llama block's fields: written only when not the default, read back, checked
  ModelConfig llama = arch_preset("llama");
  llama.n_kv_head = 2;
  const std::string text = model_config_to_json(llama);
  const ModelConfig llama_back = model_config_from_json(text);
  EXPECT_EQ(model_config_to_json(llama_back), text);
  EXPECT_EQ(llama_back.n_kv_head, 2);
  EXPECT_EQ(llama_back.activation, Activation::Swiglu);
  EXPECT_FALSE(contains_text(model_config_to_json(c), "n_kv_head")) << "a field at its default is left out";
  j = json::parse(text);
  j["n_kv_head"] = 3;
  expect_input_error([&] { model_config_from_json(j.dump(), "cfg"); },
                     {"cfg: invalid config: n_kv_head (3) must divide n_head (4)"});
  j["n_kv_head"] = 0;
  expect_input_error([&] { model_config_from_json(j.dump(), "cfg"); }, {"cfg: field 'n_kv_head'"});
  j["n_kv_head"] = 2;
  j["activation"] = "swish";
  expect_input_error([&] { model_config_from_json(j.dump(), "cfg"); }, {"unknown activation 'swish'"});
}

TEST(ConfigFromJson, OptimizerFieldsAreNumbers) {
  const AdamWConfig a = adamw_config_from_json(adamw_config_to_json(AdamWConfig{}), "opt");
  EXPECT_EQ(a.beta2, AdamWConfig{}.beta2);
  json j = json::parse(adamw_config_to_json(AdamWConfig{}));
  j["lr"] = "0.1";
  expect_input_error([&] { adamw_config_from_json(j.dump(), "ref: metadata 'optimizer'"); },
                     {"ref: metadata 'optimizer': field 'lr' must be a number"});
  j["lr"] = -1;
  expect_input_error([&] { adamw_config_from_json(j.dump(), "opt"); }, {"opt: invalid config: lr"});
}

// parameter_count() bounds what a reference's config may claim against the file's size
// (engine/io/reference.cpp), so it must be exactly ParamLayout's total, in every variant.
TEST(ConfigParameterCount, EqualsTheLayoutTotal) {
  for (bool norm_first : {false, true})
    for (PosEmbedding pos : {PosEmbedding::None, PosEmbedding::Learned})
      for (int n_layer : {1, 3}) {
        ModelConfig c = test::small_model(/*max_seq_len=*/13, /*dropout=*/0.0f);
        c.n_layer = n_layer;
        c.norm_first = norm_first;
        c.pos_embedding = pos;
        EXPECT_EQ(c.parameter_count(), static_cast<double>(ParamLayout(c).total()))
            << "norm_first " << norm_first << " pos " << pos_embedding_name(pos) << " n_layer " << n_layer;
      }
  // the Llama block's options: SwiGLU's 2F linear1, grouped key/value heads, no biases, tied,
  // and the Llama block itself under Hugging Face's names
  for (const char* arch : {"seed", "gpt2", "llama"})
    for (int n_kv_head : {0, 2, 1})
      for (Activation act : {Activation::Relu, Activation::Swiglu})
        for (bool bias : {true, false}) {
          ModelConfig c = arch_preset(arch);
          c.vocab_size = 37;
          c.d_model = 24;
          c.n_head = 4;
          c.d_ff = 20;
          c.n_kv_head = n_kv_head;
          c.activation = act;
          c.bias = bias;
          EXPECT_EQ(c.parameter_count(), static_cast<double>(ParamLayout(c).total()))
              << arch << " n_kv_head " << n_kv_head << " " << activation_name(act) << " bias " << bias;
        }
}

// --arch: the preset's block, except the fields whose flags were given beside it.
TEST(ConfigArchPreset, SetsTheBlockAndGivenFlagsWin) {
  const ModelConfig llama = arch_preset("llama");
  EXPECT_TRUE(llama.norm_first && llama.causal && llama.norm == Norm::RmsNorm &&
              llama.pos_embedding == PosEmbedding::Rope && llama.activation == Activation::Swiglu && !llama.bias);
  EXPECT_TRUE(llama.llama_block());
  const ModelConfig gpt2 = arch_preset("gpt2");
  EXPECT_TRUE(gpt2.norm_first && gpt2.causal && gpt2.activation == Activation::Gelu &&
              gpt2.pos_embedding == PosEmbedding::Learned && gpt2.tie_embeddings && gpt2.bias);
  EXPECT_FALSE(gpt2.llama_block());
  ModelConfig m;
  m.d_model = 64;  // not a block field: the preset leaves it
  apply_block_preset(llama, {"--norm", "--bias"}, m);
  EXPECT_EQ(m.norm, Norm::LayerNorm) << "--norm was given: it wins";
  EXPECT_TRUE(m.bias) << "--bias was given: it wins";
  EXPECT_EQ(m.activation, Activation::Swiglu);
  EXPECT_EQ(m.pos_embedding, PosEmbedding::Rope);
  EXPECT_EQ(m.d_model, 64);
  expect_input_error([] { arch_preset("mistral"); }, {"--arch", "mistral", "seed, gpt2 or llama"});
}

// The Llama block's parameters: Hugging Face's names in its state_dict order, and the q, k, v
// (gate, up) tensors side by side, so in_proj (linear1) is one view over them.
TEST(ParamLayout, LlamaBlockTakesHuggingFaceNames) {
  ModelConfig c = arch_preset("llama");
  c.vocab_size = 10;
  c.d_model = 8;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_layer = 1;
  c.d_ff = 6;
  const ParamLayout layout(c);
  std::vector<std::string> names;
  for (const ParamInfo& p : layout.params()) names.push_back(p.name);
  const std::vector<std::string> want = {
      "model.embed_tokens.weight",           "model.layers.0.self_attn.q_proj.weight",
      "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
      "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
      "model.layers.0.mlp.up_proj.weight",   "model.layers.0.mlp.down_proj.weight",
      "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
      "model.norm.weight",                   "lm_head.weight"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(layout.find("model.layers.0.self_attn.k_proj.weight").shape, (Shape{4, 8}));  // 2 heads of 2
  std::vector<float> flat(static_cast<size_t>(layout.total()));
  const ModelParams m = bind_params(layout, c, flat.data(), DType::F32);
  EXPECT_EQ(m.layers[0].in_proj_weight.shape, (Shape{16, 8}));  // q 8 + k 4 + v 4 rows
  EXPECT_EQ(m.layers[0].linear1_weight.shape, (Shape{12, 8}));   // gate 6 + up 6 rows
  EXPECT_EQ(m.layers[0].in_proj_bias.data, nullptr);
}

}  // namespace
}  // namespace tt
