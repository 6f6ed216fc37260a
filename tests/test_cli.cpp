// End-to-end tests of the tinytrain command line, run as a separate process the way a user
// runs it. Every bad input (a config flag, an unknown flag, a broken or inconsistent
// reference file) must end in: a non-zero exit status, no crash, no hang, and exactly one
// line on stderr, "error: ...", that names the problem. Good inputs must work: verify passes
// on every committed reference, train logs in its documented format, deterministically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/flops.h"
#include "engine/profile/peaks.h"
#include "tests/cli_test_util.h"

namespace tt::test {
namespace {

const std::string kBin = TINYTRAIN_BIN;
const std::string kSourceDir = TINYTRAIN_SOURCE_DIR;
const std::string kSeedSmall = kSourceDir + "/tests/data/seed_small.safetensors";

// A small model so the train cases run in milliseconds. Each flag appears once on the
// command line (CLI11 rejects a repeated flag), so a case overrides entries of this map.
using Flags = std::vector<std::pair<std::string, std::string>>;
const Flags kSmallModel = {{"--vocab-size", "64"}, {"--d-model", "32"}, {"--n-head", "4"},   {"--d-ff", "64"},
                           {"--seq", "16"},        {"--batch", "2"},    {"--max-seq-len", "16"},
                           {"--steps", "2"},       {"--backend", "cpu"}, {"--threads", "1"}};

// kSmallModel with the overrides replacing (or adding to) its entries, as argv for `train`.
std::vector<std::string> train_args(const Flags& overrides) {
  Flags flags = kSmallModel;
  for (const auto& [flag, value] : overrides) {
    const std::string& name = flag;  // C++17 lambdas cannot capture a structured binding (clang refuses)
    auto it = std::find_if(flags.begin(), flags.end(), [&](const auto& f) { return f.first == name; });
    if (it != flags.end())
      it->second = value;
    else
      flags.emplace_back(flag, value);
  }
  std::vector<std::string> argv = {kBin, "train"};
  for (const auto& [flag, value] : flags) {
    argv.push_back(flag);
    argv.push_back(value);
  }
  return argv;
}

std::vector<std::string> verify_args(const std::string& reference) {
  return {kBin, "verify", reference, "--backend", "cpu", "--threads", "1"};
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A train error found by validation: reported before anything runs, so stdout stays empty.
void expect_train_config_error(const Flags& overrides, std::initializer_list<std::string> phrases) {
  ScratchDir dir;
  const CliResult r = run_command(train_args(overrides), dir.path());
  if (expect_user_error(r, phrases)) {
    EXPECT_EQ(r.out, "") << "nothing may run before the config is validated\n" << r.describe();
  }
}

// The harness itself: a crash, a hang and a clean exit are told apart, stdout and stderr are
// kept apart. Otherwise every test below could pass for the wrong reason.
TEST(CliHarness, SeesExitStatusSignalsAndTimeouts) {
  ScratchDir dir;
  const CliResult ok = run_command({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, dir.path());
  EXPECT_TRUE(ok.exited && !ok.signaled && !ok.timed_out);
  EXPECT_EQ(ok.exit_code, 3);
  EXPECT_EQ(ok.out, "out\n");
  EXPECT_EQ(ok.err, "err\n");
  const CliResult crash = run_command({"/bin/sh", "-c", "kill -SEGV $$"}, dir.path());
  EXPECT_TRUE(crash.signaled && !crash.exited) << crash.describe();
  EXPECT_EQ(crash.signal, SIGSEGV);
  const CliResult hang = run_command({"/bin/sh", "-c", "sleep 30"}, dir.path(), 0.3);
  EXPECT_TRUE(hang.timed_out && !hang.signaled && !hang.exited) << hang.describe();
}

// ============================================================================================
// train: invalid configs and bad flags
// ============================================================================================

TEST(CliTrainConfig, NHeadDoesNotDivideDModel) {
  expect_train_config_error({{"--d-model", "128"}, {"--n-head", "3"}}, {"n_head", "d_model"});
}

TEST(CliTrainConfig, ZeroDModel) { expect_train_config_error({{"--d-model", "0"}}, {"d_model", "positive"}); }
TEST(CliTrainConfig, NegativeNLayer) { expect_train_config_error({{"--n-layer", "-1"}}, {"n_layer"}); }
TEST(CliTrainConfig, ZeroBatch) { expect_train_config_error({{"--batch", "0"}}, {"batch"}); }
TEST(CliTrainConfig, NegativeBatch) { expect_train_config_error({{"--batch", "-3"}}, {"batch"}); }
TEST(CliTrainConfig, ZeroSeq) { expect_train_config_error({{"--seq", "0"}}, {"seq"}); }
TEST(CliTrainConfig, ZeroVocabSize) { expect_train_config_error({{"--vocab-size", "0"}}, {"vocab_size"}); }
TEST(CliTrainConfig, ZeroDFf) { expect_train_config_error({{"--d-ff", "0"}}, {"d_ff"}); }
TEST(CliTrainConfig, ZeroNHead) { expect_train_config_error({{"--n-head", "0"}}, {"n_head"}); }
TEST(CliTrainConfig, NegativeSteps) { expect_train_config_error({{"--steps", "-1"}}, {"steps"}); }
TEST(CliTrainConfig, DropoutOne) { expect_train_config_error({{"--dropout", "1"}}, {"dropout"}); }
TEST(CliTrainConfig, DropoutNegative) { expect_train_config_error({{"--dropout", "-0.1"}}, {"dropout"}); }
TEST(CliTrainConfig, DropoutNaN) { expect_train_config_error({{"--dropout", "nan"}}, {"dropout"}); }
TEST(CliTrainConfig, UnknownActivation) { expect_train_config_error({{"--activation", "swish"}}, {"activation", "swish"}); }
TEST(CliTrainConfig, UnknownPosEmbedding) {
  expect_train_config_error({{"--pos-embedding", "rotary"}}, {"pos_embedding|pos-embedding", "rotary"});
}
TEST(CliTrainConfig, SeqExceedsMaxSeqLen) {
  expect_train_config_error({{"--seq", "100"}, {"--max-seq-len", "64"}}, {"seq", "max_seq_len"});
}
TEST(CliTrainConfig, LayerNormEpsZero) { expect_train_config_error({{"--layer-norm-eps", "0"}}, {"layer_norm_eps"}); }
TEST(CliTrainConfig, NegativeLr) { expect_train_config_error({{"--lr", "-1"}}, {"lr"}); }
TEST(CliTrainConfig, InfiniteLr) { expect_train_config_error({{"--lr", "inf"}}, {"lr"}); }
TEST(CliTrainConfig, Beta1One) { expect_train_config_error({{"--beta1", "1"}}, {"beta1"}); }
TEST(CliTrainConfig, Beta2One) { expect_train_config_error({{"--beta2", "1"}}, {"beta2"}); }
TEST(CliTrainConfig, EpsZero) { expect_train_config_error({{"--eps", "0"}}, {"eps"}); }
TEST(CliTrainConfig, NegativeWeightDecay) { expect_train_config_error({{"--weight-decay", "-1"}}, {"weight_decay"}); }
TEST(CliTrainConfig, UnknownFlag) { expect_train_config_error({{"--frobnicate", "1"}}, {"--frobnicate"}); }
TEST(CliTrainConfig, NonNumericValue) { expect_train_config_error({{"--batch", "abc"}}, {"--batch", "abc"}); }
TEST(CliTrainConfig, NonBooleanValue) { expect_train_config_error({{"--causal", "maybe"}}, {"--causal", "maybe"}); }
TEST(CliTrainConfig, UnknownBackend) { expect_train_config_error({{"--backend", "tpu"}}, {"backend", "tpu"}); }

// --seed is unsigned 64-bit: a negative value or one past 2^64 - 1 is a typo, not a seed.
TEST(CliTrainConfig, NegativeSeed) { expect_train_config_error({{"--seed", "-1"}}, {"seed"}); }
TEST(CliTrainConfig, SeedOutOfRange) {
  expect_train_config_error({{"--seed", "18446744073709551616"}}, {"seed"});
}
TEST(CliTrainConfig, IntOutOfRange) { expect_train_config_error({{"--batch", "99999999999"}}, {"--batch"}); }
// Issue 10: integer flags take decimal integers only; nothing is truncated or wrapped.
TEST(CliTrainConfig, NonIntegerValuesAreRefusedNamingTheFlag) {
  expect_train_config_error({{"--d-model", "64.9"}}, {"--d-model", "must be an integer", "64.9"});
  expect_train_config_error({{"--steps", "1e2"}}, {"--steps", "must be an integer", "1e2"});
  expect_train_config_error({{"--batch", "0x10"}}, {"--batch", "must be an integer", "0x10"});
  expect_train_config_error({{"--d-model", "4294967328"}}, {"--d-model", "must be an integer", "4294967328"});
}
TEST(CliTrainConfig, NegativeThreads) { expect_train_config_error({{"--threads", "-1"}}, {"--threads", "[0, 65536]"}); }

// Precision, memory and loss-scaler flags: a bad value is one line naming the flag.
TEST(CliTrainConfig, UnknownPrecision) { expect_train_config_error({{"--precision", "fp8"}}, {"precision", "fp8"}); }

TEST(CliTrainConfig, UnknownRecomputeMode) {
  expect_train_config_error({{"--recompute", "some"}}, {"recompute", "some"});
}

TEST(CliTrainConfig, GradAccumMustDivideTheBatch) {
  expect_train_config_error({{"--grad-accum", "3"}}, {"--grad-accum", "divide"});
  expect_train_config_error({{"--grad-accum", "0"}}, {"--grad-accum"});
}

TEST(CliTrainConfig, LossScaleFlagsOutOfRange) {
  expect_train_config_error({{"--loss-scale-init", "0"}}, {"--loss-scale-init"});
  expect_train_config_error({{"--loss-scale-backoff", "1.5"}}, {"--loss-scale-backoff"});
  expect_train_config_error({{"--loss-scale-growth", "1"}}, {"--loss-scale-growth"});
  expect_train_config_error({{"--loss-scale-interval", "0"}}, {"--loss-scale-interval"});
}

TEST(CliTrainConfig, MalformedDeviceMemory) {
  expect_train_config_error({{"--device-memory", "lots"}}, {"--device-memory", "lots"});
}

TEST(CliTrainConfig, ZeroLogEvery) {
  // The message must name the flag, say what is allowed, and be short enough to read on one
  // terminal line (a range printed as 0.000000 to DBL_MAX in 309 digits is neither).
  ScratchDir dir;
  const CliResult r = run_command(train_args({{"--log-every", "0"}}), dir.path());
  expect_user_error(r, {"--log-every", "positive|at least 1|>= 1|> 0"});
  EXPECT_LT(r.err.size(), 200u) << "an unreadably long error line: " << r.err;
}

TEST(CliTrainConfig, RepeatedFlagNamesTheFlag) {
  ScratchDir dir;
  std::vector<std::string> argv = train_args({});
  argv.push_back("--batch");
  argv.push_back("4");
  expect_user_error(run_command(argv, dir.path()), {"--batch"});
}

TEST(CliCommand, NoSubcommand) {
  ScratchDir dir;
  expect_user_error(run_command({kBin}, dir.path()), {"subcommand"});
}

TEST(CliCommand, UnknownSubcommand) {
  ScratchDir dir;
  expect_user_error(run_command({kBin, "frobnicate"}, dir.path()), {"frobnicate"});
}

TEST(CliCommand, VerifyWithoutReference) {
  ScratchDir dir;
  expect_user_error(run_command({kBin, "verify", "--backend", "cpu"}, dir.path()), {"reference"});
}

// Every command takes only the flags it uses: a flag it does not use is refused, naming the
// flag and the command, before anything runs (`verify --recompute bogus` was once accepted and
// ignored).
TEST(CliCommand, AFlagTheCommandDoesNotUseIsRefused) {
  ScratchDir dir;
  struct Case {
    std::vector<std::string> args;  // after the binary
    std::string flag;               // the flag the command does not use
  };
  const std::vector<Case> cases = {
      {{"verify", kSeedSmall, "--recompute", "bogus"}, "--recompute"},
      {{"verify", kSeedSmall, "--steps", "3"}, "--steps"},
      {{"plan", "--threads", "2"}, "--threads"},
      {{"plan", "--tf32"}, "--tf32"},
      {{"plan", "--attention", "cudnn"}, "--attention"},
      {{"plan", "--save-dir", "runs"}, "--save-dir"},
      {{"profile", "--zero", "1"}, "--zero"},
      {{"profile", "--log-every", "1"}, "--log-every"},
      {{"sample", "--checkpoint", "runs", "--tf32"}, "--tf32"},
      {{"doctor", "--precision", "bf16"}, "--precision"},
      {{"ops", "check", "--recompute", "ffn"}, "--recompute"},
      {{"prepare", "--input", "in.txt", "--out", "out", "--backend", "cpu"}, "--backend"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {kBin};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const CliResult r = run_command(argv, dir.path());
    if (expect_user_error(r, {c.args[0], c.flag})) {
      EXPECT_EQ(r.exit_code, 2) << "a flag error\n" << r.describe();
      EXPECT_EQ(r.out, "") << "nothing may run\n" << r.describe();
    }
  }
}

// --backend is parsed as it is read: an unknown one is one line naming it and the four choices.
TEST(CliCommand, UnknownBackendIsNamedByEveryCommandThatTakesOne) {
  ScratchDir dir;
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{{"train"},
                                                                           {"plan"},
                                                                           {"profile"},
                                                                           {"verify", kSeedSmall},
                                                                           {"sample", "--checkpoint", "runs"},
                                                                           {"doctor"},
                                                                           {"ops", "check"}}) {
    std::vector<std::string> argv = {kBin};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--backend", "tpu"});
    const CliResult r = run_command(argv, dir.path());
    if (expect_user_error(r, {"unknown backend 'tpu'", "auto, cpu, cuda or cuda-emu"}))
      EXPECT_EQ(r.out, "") << r.describe();
  }
}

// ============================================================================================
// verify: bad files
// ============================================================================================

class CliVerifyBadFile : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kSeedSmall)) << kSeedSmall;
    seed_bytes_ = read_whole_file(kSeedSmall);
    seed_ = RawSafetensors::load(kSeedSmall);
  }

  // Runs verify on the given bytes and checks the error contract.
  CliResult verify_bytes(const std::string& bytes, std::initializer_list<std::string> phrases) {
    const std::string path = dir_.write("bad.safetensors", bytes);
    CliResult r = run_command(verify_args(path), dir_.path());
    expect_user_error(r, phrases);
    return r;
  }
  CliResult verify_file(const RawSafetensors& st, std::initializer_list<std::string> phrases) {
    return verify_bytes(st.serialize(), phrases);
  }

  ScratchDir dir_;
  std::string seed_bytes_;
  RawSafetensors seed_;
};

TEST_F(CliVerifyBadFile, RewrittenSeedSmallStillPasses) {
  // The raw writer used by the cases below, applied with no change, gives a valid reference:
  // so each case's error is due to its one change.
  const std::string path = dir_.write("same.safetensors", seed_.serialize());
  const CliResult r = run_command(verify_args(path), dir_.path());
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  EXPECT_TRUE(contains(r.out, " 0 failed")) << r.describe();
}

TEST_F(CliVerifyBadFile, NonexistentPath) {
  const CliResult r = run_command(verify_args(dir_.file("no_such.safetensors")), dir_.path());
  expect_user_error(r, {"no_such.safetensors", "No such file|not found|does not exist"});
}

TEST_F(CliVerifyBadFile, Directory) {
  const CliResult r = run_command(verify_args(dir_.path()), dir_.path());
  expect_user_error(r, {"directory"});
}

TEST_F(CliVerifyBadFile, EmptyFile) { verify_bytes("", {"truncated|empty"}); }

TEST_F(CliVerifyBadFile, FirstHundredBytes) {
  verify_bytes(seed_bytes_.substr(0, 100), {"truncated|beyond the end of the file"});
}

TEST_F(CliVerifyBadFile, AllButLastTenBytes) {
  verify_bytes(seed_bytes_.substr(0, seed_bytes_.size() - 10), {"truncated|out of range|beyond the end"});
}

TEST_F(CliVerifyBadFile, HeaderLengthLargerThanFile) {
  std::string bytes = seed_bytes_;
  const uint64_t len = bytes.size();  // 8 + len is past the end
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  verify_bytes(bytes, {"header length|header"});
}

TEST_F(CliVerifyBadFile, HeaderLengthHuge) {
  // 2^64 - 1: 8 + N wraps around if computed naively.
  std::string bytes = seed_bytes_;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(0xff);
  verify_bytes(bytes, {"header"});
}

TEST_F(CliVerifyBadFile, HeaderNotJson) { verify_bytes(raw_safetensors("{\"x\": not json at all}"), {"JSON"}); }

TEST_F(CliVerifyBadFile, HeaderNotAnObject) { verify_bytes(raw_safetensors("[1, 2, 3]"), {"JSON|object"}); }

TEST_F(CliVerifyBadFile, OverlappingTensors) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  verify_bytes(raw_safetensors(header, std::string(16, '\0')), {"overlap"});
}

TEST_F(CliVerifyBadFile, OverlappingTensorsInReference) {
  // The same problem inside an otherwise valid reference: loss moved onto y's bytes.
  // Only a header edit, so the data section is untouched.
  const uint64_t n = header_length(seed_bytes_);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(seed_bytes_.substr(8, n));
  const std::string data = seed_bytes_.substr(8 + n);
  const uint64_t y_begin = header["y"]["data_offsets"][0].get<uint64_t>();
  header["loss"]["data_offsets"] = {y_begin, y_begin + 20};  // F32 [5]: 20 bytes inside y
  verify_bytes(raw_safetensors(header.dump(), data), {"overlap"});
}

TEST_F(CliVerifyBadFile, DataOffsetsBeyondFile) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}})";
  verify_bytes(raw_safetensors(header, std::string(16, '\0')), {"out of range"});
}

TEST_F(CliVerifyBadFile, DataOffsetsBeginAfterEnd) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})";
  verify_bytes(raw_safetensors(header, std::string(16, '\0')), {"data_offsets"});
}

TEST_F(CliVerifyBadFile, SizeDoesNotMatchShape) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  verify_bytes(raw_safetensors(header, std::string(8, '\0')), {"shape"});
}

TEST_F(CliVerifyBadFile, UnknownDtype) {
  const std::string header = R"({"a":{"dtype":"F8_E9M9","shape":[2],"data_offsets":[0,8]}})";
  verify_bytes(raw_safetensors(header, std::string(8, '\0')), {"dtype", "F8_E9M9"});
}

TEST_F(CliVerifyBadFile, WrongDtype) {
  seed_.find("x")->dtype = "F32";  // same element size, so only the dtype is wrong
  verify_file(seed_, {"'x'|\"x\"|tensor x", "dtype", "I32"});
}

TEST_F(CliVerifyBadFile, WrongShapeSameSize) {
  RawTensor* logits = seed_.find("logits0");  // [4, 16, 64]
  ASSERT_EQ(logits->shape, (std::vector<int64_t>{4, 16, 64}));
  logits->shape = {4, 32, 32};  // same byte count: only the shape is wrong
  verify_file(seed_, {"logits0", "shape"});
}

TEST_F(CliVerifyBadFile, WrongShapeAndSize) {
  RawTensor* logits = seed_.find("logits0");
  logits->shape = {4, 16, 63};
  logits->bytes.resize(4 * 16 * 63 * 4);
  verify_file(seed_, {"logits0", "shape"});
}

TEST_F(CliVerifyBadFile, MissingTensor) {
  ASSERT_TRUE(seed_.erase("grads.lm_head.bias"));
  verify_file(seed_, {"missing tensor", "grads.lm_head.bias"});
}

TEST_F(CliVerifyBadFile, MissingMetadataConfig) {
  seed_.metadata.erase("config");
  verify_file(seed_, {"missing metadata", "config"});
}

TEST_F(CliVerifyBadFile, NoMetadataAtAll) {
  seed_.metadata = nlohmann::ordered_json::object();
  verify_file(seed_, {"metadata"});
}

TEST_F(CliVerifyBadFile, ConfigNotJson) {
  seed_.metadata["config"] = "{vocab_size: 64";
  verify_file(seed_, {"config"});
}

TEST_F(CliVerifyBadFile, ConfigMissingField) {
  nlohmann::ordered_json c = seed_.config();
  c.erase("d_ff");
  seed_.set_config(c);
  verify_file(seed_, {"d_ff"});
}

TEST_F(CliVerifyBadFile, ConfigNHeadDoesNotDivideDModel) {
  nlohmann::ordered_json c = seed_.config();
  c["n_head"] = 5;  // d_model 32
  seed_.set_config(c);
  verify_file(seed_, {"n_head", "d_model"});
}

TEST_F(CliVerifyBadFile, ConfigUnknownActivation) {
  nlohmann::ordered_json c = seed_.config();
  c["activation"] = "swish";
  seed_.set_config(c);
  verify_file(seed_, {"activation", "swish"});
}

TEST_F(CliVerifyBadFile, WrongFormat) {
  seed_.metadata["format"] = "pytorch-checkpoint";
  verify_file(seed_, {"format", "tinytrain-reference"});
}

TEST_F(CliVerifyBadFile, WrongVersion) {
  seed_.metadata["version"] = "2";
  verify_file(seed_, {"version"});
}

TEST_F(CliVerifyBadFile, BatchNotAnInteger) {
  seed_.metadata["batch"] = "four";
  verify_file(seed_, {"batch"});
}

TEST_F(CliVerifyBadFile, SeqExceedsMaxSeqLen) {
  nlohmann::ordered_json c = seed_.config();
  c["max_seq_len"] = 8;  // seq 16
  seed_.set_config(c);
  verify_file(seed_, {"seq", "max_seq_len"});
}

TEST_F(CliVerifyBadFile, OptimizerBeta1One) {
  nlohmann::ordered_json o = nlohmann::ordered_json::parse(seed_.metadata.at("optimizer").get<std::string>());
  o["beta1"] = 1.0;
  seed_.metadata["optimizer"] = o.dump();
  verify_file(seed_, {"beta1"});
}

TEST_F(CliVerifyBadFile, TokenIdEqualToVocabSizeInX) {
  const int vocab = seed_.config().at("vocab_size").get<int>();
  RawTensor* x = seed_.find("x");
  x->set_i32(5, vocab);
  verify_file(seed_, {"token id", std::to_string(vocab)});
}

TEST_F(CliVerifyBadFile, NegativeTokenIdInYAtLastStep) {
  // At the last element of the last step, so the check cannot be one on step 0 only.
  RawTensor* y = seed_.find("y");
  y->set_i32(y->bytes.size() / 4 - 1, -1);
  verify_file(seed_, {"token id", "-1"});
}

TEST_F(CliVerifyBadFile, DropoutInConfig) {
  nlohmann::ordered_json c = seed_.config();
  c["dropout"] = 0.1;
  seed_.set_config(c);
  verify_file(seed_, {"dropout"});
}

// ============================================================================================
// good inputs
// ============================================================================================

std::vector<std::string> committed_references() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kSourceDir + "/tests/data", ec))
    if (entry.path().extension() == ".safetensors") names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CliVerifyGood, ThereAreReferences) {
  const std::vector<std::string> refs = committed_references();
  EXPECT_GE(refs.size(), 3u);
  EXPECT_NE(std::find(refs.begin(), refs.end(), "seed_small.safetensors"), refs.end());
}

class CliVerifyReference : public ::testing::TestWithParam<std::string> {};

TEST_P(CliVerifyReference, Passes) {
  ScratchDir dir;
  const CliResult r = run_command(verify_args(kSourceDir + "/tests/data/" + GetParam()), dir.path(), 120);
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
  const std::vector<std::string> lines = r.out_lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(contains(lines.back(), " 0 failed")) << "last line: " << lines.back();
  for (const std::string& line : lines) EXPECT_FALSE(contains(line, "FAIL") && !contains(line, "failed")) << line;
}

INSTANTIATE_TEST_SUITE_P(Committed, CliVerifyReference, ::testing::ValuesIn(committed_references()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(0, info.param.find('.'));
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

// Lines of `out` that start with "step ".
std::vector<std::string> step_lines(const CliResult& r) {
  std::vector<std::string> steps;
  for (const std::string& line : r.out_lines())
    if (line.rfind("step ", 0) == 0) steps.push_back(line);
  return steps;
}

// The step lines without their speed fields: what a run computed.
std::vector<std::string> step_results(const CliResult& r) {
  std::vector<std::string> results;
  for (const std::string& line : step_lines(r)) results.push_back(without_speed_fields(line));
  return results;
}

TEST(CliTrainGood, LogsEveryStepInTheDocumentedFormat) {
  ScratchDir dir;
  const CliResult r = run_command(train_args({{"--steps", "3"}, {"--log-every", "1"}}), dir.path());
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
  const std::vector<std::string> lines = r.out_lines();
  ASSERT_EQ(lines.size(), 4u) << "three step lines and the done line, nothing else";
  // Then the speed: achieved TFLOP/s ("?" before the first timed window) and, when this machine
  // has a measured peak (`tinytrain doctor`), MFU (LogShowsTflopsAndMfuAgainstTheMeasuredPeak).
  const char* step_re =
      R"((step +(\d+) \| loss (-?\d+\.\d{4}) \| alloc (\d+\.\d) MB)( \| (\?|\d+\.\d{3}) TFLOP/s( \| MFU (\?|\d+\.\d%))?))";
  for (int s = 0; s < 3; ++s) {
    const auto match = regex_match_groups(lines[s], step_re);
    ASSERT_TRUE(match) << "line " << s << ": '" << lines[s] << "'";
    const std::vector<std::string>& m = *match;
    EXPECT_EQ(std::stoi(m[2]), s);
    EXPECT_EQ(m[6] == "?", s == 0) << "the first window is not timed";
    // Formatting the parsed numbers with the documented format gives the line back exactly.
    char expect[128];
    std::snprintf(expect, sizeof expect, "step %3d | loss %.4f | alloc %.1f MB", s, std::stod(m[3]), std::stod(m[4]));
    EXPECT_EQ(m[1], expect);
    const double loss = std::stod(m[3]);
    EXPECT_GT(loss, 0.0);
    EXPECT_LT(loss, 10.0) << "vocab 64: the initial loss is about ln 64 = 4.16";
  }
  EXPECT_EQ(lines[0].rfind("step   0 | loss ", 0), 0u);
  EXPECT_EQ(lines[1].rfind("step   1 | loss ", 0), 0u);
  EXPECT_EQ(lines[2].rfind("step   2 | loss ", 0), 0u);
  EXPECT_EQ(lines[3].rfind("done: 3 steps", 0), 0u) << lines[3];
}

// The speed in the log: achieved TFLOP/s is the step's model FLOPs (engine/flops.h) over the
// step time, MFU that over the peak `tinytrain doctor` saved for this CPU at these threads
// (engine/profile/peaks.h); without a saved peak the done line says there is no MFU and how to get one.
TEST(CliTrainGood, LogShowsTflopsAndMfuAgainstTheMeasuredPeak) {
  ScratchDir dir;
  const std::string cache = dir.path() + "/cache";
  setenv("TINYTRAIN_CACHE_DIR", cache.c_str(), 1);  // (this test's own process: ctest runs each test alone)
  const Flags run = {{"--steps", "30"}, {"--log-every", "10"}, {"--d-model", "64"}, {"--d-ff", "256"},
                     {"--seq", "32"},   {"--max-seq-len", "32"}, {"--batch", "4"}};
  ModelConfig model;  // the same model: kSmallModel with run's overrides
  model.vocab_size = 64;
  model.d_model = 64;
  model.d_ff = 256;
  model.max_seq_len = 32;
  const double step_flops = training_step_flops(model, 4, 32, Recompute::None).model();
  const char* done_re = R"(done: 30 steps \| [\d.]+ tokens/s \| ([\d.]+) ms/step \| (\d+\.\d{3}) TFLOP/s(.*))";

  const CliResult without = run_command(train_args(run), dir.path());
  ASSERT_EQ(without.exit_code, 0) << without.describe();
  const std::string done_without = without.out_lines().back();
  std::optional<std::vector<std::string>> m = regex_match_groups(done_without, done_re);
  ASSERT_TRUE(m) << done_without;
  // TFLOP/s printed to 3 decimals: half a unit of the last one; and the ms/step it is checked
  // against printed to 2: half a unit of that, relative to a step of a few ms, moves the
  // recomputed TFLOP/s by that fraction of itself.
  const double ms_without = std::stod((*m)[1]);
  const double tflops_exact = step_flops / (ms_without * 1e-3) / 1e12;
  EXPECT_NEAR(std::stod((*m)[2]), tflops_exact, 0.0005 + tflops_exact * 0.005 / ms_without + 1e-6);
  EXPECT_EQ((*m)[3], " (no MFU: no measured fp32 peak for '" + cpu_device_key(1) + "' in " + cache +
                            "/peaks.json (run `tinytrain doctor` to measure it))");
  for (const std::string& line : step_lines(without)) EXPECT_FALSE(contains(line, "MFU")) << line;

  // A peak three times what this model reached, so that MFU is tens of percent and its digits
  // mean something (at the peak itself, a faster second run would read above 100%: stale).
  const double peak = std::max(0.001, 3 * std::stod((*m)[2]));
  save_peaks(Peaks{cpu_device_key(1), {{"fp32", peak}}, 1.0, "2026-12-01T00:00:00Z"});
  const CliResult with = run_command(train_args(run), dir.path());
  ASSERT_EQ(with.exit_code, 0) << with.describe();
  const std::vector<std::string> steps = step_lines(with);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_TRUE(contains(steps[0], "| ? TFLOP/s | MFU ?")) << steps[0];
  const char* mfu_re = R"(.* \| (\d+\.\d{3}) TFLOP/s \| MFU (\d+\.\d)%)";
  for (size_t i = 1; i < steps.size(); ++i) {
    m = regex_match_groups(steps[i], mfu_re);
    ASSERT_TRUE(m) << steps[i];
    // (MFU to 1 decimal of a percent, from TFLOP/s known to half a unit of its 3rd decimal)
    EXPECT_NEAR(std::stod((*m)[2]), 100 * std::stod((*m)[1]) / peak, 0.05 + 100 * 0.0005 / peak) << steps[i];
  }
  const std::string done_with = with.out_lines().back();
  m = regex_match_groups(done_with, done_re);
  ASSERT_TRUE(m) << done_with;
  const std::string tail = (*m)[3];
  const auto t = regex_match_groups(
      tail, R"( \| MFU (\d+\.\d)% \(MFU against the fp32 peak ([\d.]+) TFLOP/s measured by `tinytrain doctor` on 2026-12-01\))");
  ASSERT_TRUE(t) << done_with;
  // MFU from the done line's own ms/step, which is printed to 2 decimals: half a unit of the
  // last one, relative to a step of a few ms, plus the MFU's own rounding to 0.1%.
  const double ms = std::stod((*m)[1]);
  const double mfu_exact = 100 * step_flops / (ms * 1e-3) / 1e12 / peak;
  EXPECT_NEAR(std::stod((*t)[1]), mfu_exact, 0.05 + mfu_exact * 0.005 / ms) << done_with;
  unsetenv("TINYTRAIN_CACHE_DIR");
}

TEST(CliTrainGood, LogEveryLogsOnlyThoseSteps) {
  ScratchDir dir;
  const CliResult r = run_command(train_args({{"--steps", "5"}, {"--log-every", "2"}}), dir.path());
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited && r.exit_code == 0);
  const std::vector<std::string> steps = step_lines(r);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].rfind("step   0 |", 0), 0u);
  EXPECT_EQ(steps[1].rfind("step   2 |", 0), 0u);
  EXPECT_EQ(steps[2].rfind("step   4 |", 0), 0u);
  EXPECT_EQ(r.out_lines().back().rfind("done: 5 steps", 0), 0u);
}

TEST(CliTrainGood, EveryModelOption) {
  // The other branches of the family (pre-norm, GELU, causal, learned positions, dropout)
  // through the CLI, with an odd head count.
  ScratchDir dir;
  const CliResult r = run_command(train_args({{"--d-model", "24"}, {"--n-head", "3"}, {"--activation", "gelu"},
                                              {"--norm-first", "true"}, {"--causal", "true"},
                                              {"--pos-embedding", "learned"}, {"--dropout", "0.1"},
                                              {"--steps", "2"}, {"--log-every", "1"}}),
                                  dir.path());
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(step_lines(r).size(), 2u);
}

// Each --arch preset trains: gpt2 (a tied head with biases: lm_head.bias initialised from the
// embedding's width), llama with grouped key/value heads, and llama with a flag beside it.
TEST(CliTrainGood, ArchPresetsTrain) {
  for (const Flags& arch : {Flags{{"--arch", "gpt2"}}, Flags{{"--arch", "llama"}, {"--n-kv-head", "2"}},
                            Flags{{"--arch", "llama"}, {"--norm", "layernorm"}}, Flags{{"--arch", "seed"}}}) {
    ScratchDir dir;
    Flags flags = arch;
    flags.push_back({"--log-every", "1"});
    const CliResult r = run_command(train_args(flags), dir.path());
    SCOPED_TRACE(r.describe());
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(step_lines(r).size(), 2u);
  }
}

TEST(CliTrainGood, HelpMentionsEveryFlag) {
  ScratchDir dir;
  const CliResult r = run_command({kBin, "train", "--help"}, dir.path());
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--vocab-size", "--d-model", "--n-head", "--n-layer", "--d-ff", "--activation",
                           "--norm-first", "--causal", "--pos-embedding", "--max-seq-len", "--layer-norm-eps",
                           "--dropout", "--batch", "--seq", "--steps", "--lr", "--beta1", "--beta2", "--eps",
                           "--weight-decay", "--seed", "--backend", "--threads", "--log-every"})
    EXPECT_TRUE(regex_search_groups(r.out, std::string(flag) + "[ =,\\[]").has_value()) << "help lacks " << flag;
}

TEST(CliTrainGood, TopLevelHelp) {
  ScratchDir dir;
  const CliResult r = run_command({kBin, "--help"}, dir.path());
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "train"));
  EXPECT_TRUE(contains(r.out, "verify"));
}

// Whether this machine has an NVIDIA GPU the driver exposes.
bool machine_has_gpu() { return fs::exists("/dev/nvidiactl") || fs::exists("/dev/nvidia0"); }

TEST(CliTrainGood, BackendAutoWithoutGpuSaysCpuOnce) {
  if (machine_has_gpu()) GTEST_SKIP() << "this machine has a GPU: --backend auto may use it";
  ScratchDir dir;
  const CliResult r =
      run_command(train_args({{"--backend", "auto"}, {"--steps", "2"}, {"--log-every", "1"}}), dir.path());
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
  const std::vector<std::string> lines = r.out_lines();
  ASSERT_EQ(lines.size(), 4u) << "one backend line, two step lines, the done line";
  EXPECT_TRUE(contains(lower(lines[0]), "cpu")) << "the first line must say it runs on the CPU: " << lines[0];
  EXPECT_EQ(lines[1].rfind("step   0 | loss ", 0), 0u);
  EXPECT_EQ(lines[2].rfind("step   1 | loss ", 0), 0u);
  EXPECT_EQ(lines[3].rfind("done: 2 steps", 0), 0u);
}

TEST(CliTrainGood, BackendCpuPrintsNoBackendLine) {
  ScratchDir dir;
  const CliResult r = run_command(train_args({{"--steps", "1"}, {"--log-every", "1"}}), dir.path());
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited && r.exit_code == 0);
  const std::vector<std::string> lines = r.out_lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("step   0 | loss ", 0), 0u);
}

// --attention cudnn on the CPU backend: one line saying our kernel runs, then normal training.
TEST(CliTrainGood, AttentionCudnnOnTheCpuSaysOurKernelRuns) {
  ScratchDir dir;
  const CliResult r =
      run_command(train_args({{"--attention", "cudnn"}, {"--steps", "1"}, {"--log-every", "1"}}), dir.path());
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited && r.exit_code == 0);
  const std::vector<std::string> lines = r.out_lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "attention: the cpu backend has no cuDNN; tinytrain's attention kernel runs");
  EXPECT_EQ(lines[1].rfind("step   0 | loss ", 0), 0u);
}

// An emulated run's log against the CPU backend's: `steps` step lines each, the same losses up
// to fp32 rounding (same dropout masks), far below the printed 4 decimals' resolution except at
// a rounding boundary: 1e-3 allows that.
void expect_the_cpus_losses(const CliResult& emu, const CliResult& cpu, size_t steps) {
  const std::vector<std::string> se = step_lines(emu), sc = step_lines(cpu);
  ASSERT_EQ(se.size(), steps);
  ASSERT_EQ(sc.size(), steps);
  const char* step_re = R"(step +(\d+) \| loss (-?\d+\.\d{4}) \| alloc (\d+\.\d) MB \| .* TFLOP/s.*)";
  for (size_t s = 0; s < steps; ++s) {
    const auto me = regex_match_groups(se[s], step_re);
    const auto mc = regex_match_groups(sc[s], step_re);
    ASSERT_TRUE(me) << se[s];
    ASSERT_TRUE(mc) << sc[s];
    EXPECT_NEAR(std::stod((*me)[2]), std::stod((*mc)[2]), 1e-3) << se[s] << " vs " << sc[s];
  }
}

// --backend cuda-emu: the CUDA backend's own code on the SIMT emulator. One line says so, then
// the seed log, with the CPU backend's losses.
TEST(CliTrainGood, BackendCudaEmuSaysSoAndLogsTheCpusLosses) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (-DTINYTRAIN_SIMT=OFF)";
#endif
  ScratchDir dir;
  const Flags flags = {{"--steps", "3"}, {"--log-every", "1"}};
  Flags emulated = flags;
  emulated.emplace_back("--backend", "cuda-emu");
  const CliResult emu = run_command(train_args(emulated), dir.path(), 120.0);
  const CliResult cpu = run_command(train_args(flags), dir.path());
  SCOPED_TRACE(emu.describe());
  ASSERT_TRUE(emu.exited && emu.exit_code == 0);
  ASSERT_TRUE(cpu.exited && cpu.exit_code == 0) << cpu.describe();
  EXPECT_EQ(emu.err, "");
  const std::vector<std::string> lines = emu.out_lines();
  ASSERT_EQ(lines.size(), 5u) << "the backend line, three step lines, the done line";
  EXPECT_EQ(lines[0].rfind("backend cuda-emu: ", 0), 0u) << lines[0];
  EXPECT_TRUE(contains(lines[0], "SIMT emulator") && contains(lines[0], "slow")) << lines[0];
  expect_the_cpus_losses(emu, cpu, 3);
}

// --debug-sync on the emulated CUDA backend: one line says that every op is waited for and CUDA
// graphs are off, and the run computes what it computes without the flag, to the last printed
// digit: the same kernels on the same inputs in the same order (a replayed graph runs the
// launches the eager step made), so the same bits. TINYTRAIN_DEBUG_SYNC=1 does the same.
TEST(CliTrainGood, DebugSyncOnTheEmulatorKeepsEveryLoss) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (-DTINYTRAIN_SIMT=OFF)";
#endif
  ScratchDir dir;
  const std::vector<std::string> argv = train_args({{"--backend", "cuda-emu"}, {"--steps", "3"}, {"--log-every", "1"}});
  std::vector<std::string> with_flag = argv;
  with_flag.push_back("--debug-sync");
  const CliResult plain = run_command(argv, dir.path(), 120.0);
  const CliResult flagged = run_command(with_flag, dir.path(), 120.0);
  setenv("TINYTRAIN_DEBUG_SYNC", "1", 1);
  const CliResult from_env = run_command(argv, dir.path(), 120.0);
  unsetenv("TINYTRAIN_DEBUG_SYNC");
  ASSERT_TRUE(plain.exited && plain.exit_code == 0) << plain.describe();
  ASSERT_EQ(step_results(plain).size(), 3u) << plain.describe();
  for (const CliResult* r : {&flagged, &from_env}) {
    SCOPED_TRACE(r->describe());
    ASSERT_TRUE(r->exited && r->exit_code == 0);
    const std::vector<std::string> lines = r->out_lines();
    ASSERT_GE(lines.size(), 2u);
    EXPECT_EQ(lines[1].rfind("debug-sync: the cuda-emu backend waits after every op", 0), 0u) << lines[1];
    EXPECT_TRUE(contains(lines[1], "CUDA graphs off")) << lines[1];
    EXPECT_EQ(step_results(*r), step_results(plain));
  }
}

// --gemm naive|tiled|regblock|mma: every GEMM on a rung of tinytrain's GEMM ladder
// (kernels/cuda/gemm/), on the emulator CUDA code; the log follows the CPU's as above. Nothing goes
// to stderr (no cuBLASLt plan, so no fallback line), except on the mma rung, whose fp32 GEMMs run
// on the regblock rung without --tf32: one line per distinct GEMM, however often it runs. A name
// it does not know is refused in one line.
TEST(CliTrainGood, GemmLadderOnTheEmulatorLogsTheCpusLosses) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (-DTINYTRAIN_SIMT=OFF)";
#endif
  ScratchDir dir;
  const Flags flags = {{"--steps", "2"}, {"--log-every", "1"}};
  const CliResult cpu = run_command(train_args(flags), dir.path());
  ASSERT_TRUE(cpu.exited && cpu.exit_code == 0) << cpu.describe();
  for (const char* rung : {"naive", "tiled", "regblock", "mma"}) {
    Flags on_rung = flags;
    on_rung.emplace_back("--backend", "cuda-emu");
    on_rung.emplace_back("--gemm", rung);
    const CliResult emu = run_command(train_args(on_rung), dir.path(), 300.0);
    SCOPED_TRACE(emu.describe());
    ASSERT_TRUE(emu.exited && emu.exit_code == 0);
    expect_the_cpus_losses(emu, cpu, 2);
    const std::string done = emu.out_lines().back();
    if (std::string(rung) != "mma") {
      EXPECT_EQ(emu.err, "");
      EXPECT_FALSE(contains(done, "GEMM fallbacks")) << done;
      continue;
    }
    std::istringstream said(emu.err);
    std::set<std::string> lines;
    for (std::string line; std::getline(said, line);) {
      EXPECT_EQ(line.rfind("tinytrain: the mma GEMM multiplies fp32 only as TF32 (--tf32); the regblock GEMM runs m=", 0),
                0u)
          << line;
      EXPECT_TRUE(lines.insert(line).second) << "said twice: " << line;
    }
    EXPECT_FALSE(lines.empty());
    // ...and the summary counts them: one per GEMM said on stderr
    EXPECT_TRUE(contains(done, " | GEMM fallbacks: " + std::to_string(lines.size()) + " mma -> regblock")) << done;
  }
  // cuBLASLt without an algorithm for any GEMM (the emulated heuristic told to find none): the
  // tiled rung runs each, said once on stderr and counted in the summary.
  {
    Flags on_cublaslt = flags;
    on_cublaslt.emplace_back("--backend", "cuda-emu");
    setenv("TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM", "1", 1);
    const CliResult emu = run_command(train_args(on_cublaslt), dir.path(), 300.0);
    unsetenv("TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM");
    SCOPED_TRACE(emu.describe());
    ASSERT_TRUE(emu.exited && emu.exit_code == 0);
    expect_the_cpus_losses(emu, cpu, 2);
    std::istringstream said(emu.err);
    int tiled = 0;
    for (std::string line; std::getline(said, line);)
      tiled += line.rfind("tinytrain: cuBLASLt has no algorithm for the GEMM ", 0) == 0;
    EXPECT_GT(tiled, 0) << emu.err;
    const std::string done = emu.out_lines().back();
    EXPECT_TRUE(contains(done, " | GEMM fallbacks: " + std::to_string(tiled) + " cuBLASLt -> tiled")) << done;
  }
  const CliResult bad = run_command(train_args({{"--gemm", "cublas"}}), dir.path());
  expect_user_error(bad, {"--gemm", "cublas"});
}

TEST(CliVerifyGood, BackendCudaEmuPassesAReference) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (-DTINYTRAIN_SIMT=OFF)";
#endif
  ScratchDir dir;
  const CliResult r = run_command({kBin, "verify", kSeedSmall, "--backend", "cuda-emu", "--precision", "bf16"},
                                  dir.path(), 120.0);
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_FALSE(r.out_lines().empty());
  EXPECT_TRUE(contains(r.out_lines().back(), " 0 failed (PASS)")) << r.out_lines().back();
}

// On the emulated device, --attention cudnn says in one line that there is no cuDNN.
TEST(CliTrainGood, AttentionCudnnOnTheEmulatorSaysOurKernelRuns) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (-DTINYTRAIN_SIMT=OFF)";
#endif
  ScratchDir dir;
  const CliResult r = run_command(train_args({{"--backend", "cuda-emu"}, {"--attention", "cudnn"},
                                              {"--precision", "bf16"}, {"--steps", "1"}, {"--log-every", "1"}}),
                                  dir.path(), 120.0);
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited && r.exit_code == 0);
  const std::vector<std::string> lines = r.out_lines();
  ASSERT_EQ(lines.size(), 3u) << "the backend line, the attention line, one step line";
  EXPECT_EQ(lines[1], "attention: the emulated CUDA device has no cuDNN; tinytrain's attention kernel runs");
}

TEST(CliTrainBad, UnknownAttention) {
  expect_train_config_error({{"--attention", "ours"}}, {"--attention", "ours"});
}

// The Llama-style block's flags: each bad value is one line naming it.
TEST(CliTrainBad, LlamaBlockOptions) {
  expect_train_config_error({{"--norm", "batchnorm"}}, {"norm", "batchnorm", "rmsnorm"});
  expect_train_config_error({{"--pos-embedding", "alibi"}}, {"pos_embedding", "alibi", "rope"});
  // train_args' d_model 32 in 32 heads: head size 1, and RoPE turns pairs
  expect_train_config_error({{"--pos-embedding", "rope"}, {"--n-head", "32"}}, {"rope", "head size", "even"});
  expect_train_config_error({{"--pos-embedding", "rope"}, {"--rope-theta", "0.5"}}, {"rope_theta"});
  expect_train_config_error({{"--bias", "maybe"}}, {"--bias"});
  expect_train_config_error({{"--tie-embeddings", "maybe"}}, {"--tie-embeddings"});
  expect_train_config_error({{"--activation", "swish"}}, {"activation", "swish", "swiglu"});
  // train_args' 4 heads: 3 key/value heads cannot share them out
  expect_train_config_error({{"--n-kv-head", "3"}}, {"n_kv_head", "3", "divide", "n_head"});
  expect_train_config_error({{"--n-kv-head", "-1"}}, {"--n-kv-head"});
  expect_train_config_error({{"--arch", "mistral"}}, {"--arch", "mistral", "llama"});
  // a preset still meets the checks: llama's rope on head size 1
  expect_train_config_error({{"--arch", "llama"}, {"--n-head", "32"}}, {"rope", "head size", "even"});
}

// A bad instruction-set cap stops every command before any work, in one line naming it; a cap
// of the CPU's own width or above changes nothing and trains.
TEST(CliTrainBad, BadCpuSimdCap) {
  ScratchDir dir;
  setenv("TINYTRAIN_CPU_SIMD", "avx3", 1);
  const CliResult train = run_command(train_args({}), dir.path());
  const CliResult doctor = run_command({kBin, "doctor", "--backend", "cpu"}, dir.path());
  setenv("TINYTRAIN_CPU_SIMD", "avx512", 1);
  const CliResult widest = run_command(train_args({}), dir.path());
  unsetenv("TINYTRAIN_CPU_SIMD");
  for (const CliResult* r : {&train, &doctor}) {
    expect_user_error(*r, {"TINYTRAIN_CPU_SIMD", "avx3", "scalar, avx2 or avx512"});
    EXPECT_EQ(r->out, "") << r->describe();
  }
  EXPECT_TRUE(widest.exited && widest.exit_code == 0) << widest.describe();
}

TEST(CliTrainBad, BackendCudaWithoutGpu) {
  if (machine_has_gpu()) GTEST_SKIP() << "this machine has a GPU";
  ScratchDir dir;
  const CliResult r = run_command(train_args({{"--backend", "cuda"}}), dir.path());
  expect_user_error(r, {"cuda|CUDA", "GPU|CUDA support|device"});
  EXPECT_EQ(step_lines(r).size(), 0u) << r.describe();
}

TEST(CliTrainBad, VerifyBackendCudaWithoutGpu) {
  if (machine_has_gpu()) GTEST_SKIP() << "this machine has a GPU";
  ScratchDir dir;
  std::vector<std::string> argv = {kBin, "verify", kSeedSmall, "--backend", "cuda"};
  expect_user_error(run_command(argv, dir.path()), {"cuda|CUDA", "GPU|CUDA support|device"});
}

// Two runs of the same command, byte-identical step lines. `train_args` leaves dropout at
// its default (0.1), so the dropout masks are part of what must repeat.
void expect_deterministic(const Flags& overrides) {
  ScratchDir dir;
  const std::vector<std::string> argv = train_args(overrides);
  const CliResult a = run_command(argv, dir.path());
  const CliResult b = run_command(argv, dir.path());
  ASSERT_TRUE(a.exited && a.exit_code == 0) << a.describe();
  ASSERT_TRUE(b.exited && b.exit_code == 0) << b.describe();
  const std::vector<std::string> sa = step_results(a), sb = step_results(b);
  ASSERT_EQ(sa.size(), 5u) << a.describe();
  EXPECT_EQ(sa, sb) << "run 1:\n" << a.out << "run 2:\n" << b.out;
}

TEST(CliTrainGood, DeterministicAcrossRuns) {
  expect_deterministic({{"--steps", "5"}, {"--log-every", "1"}, {"--threads", "2"}});
}

TEST(CliTrainGood, DeterministicWithoutDropout) {
  expect_deterministic({{"--steps", "5"}, {"--log-every", "1"}, {"--threads", "2"}, {"--dropout", "0"}});
}

TEST(CliTrainGood, SeedChangesTheRun) {
  ScratchDir dir;
  const CliResult a = run_command(train_args({{"--steps", "1"}, {"--log-every", "1"}, {"--seed", "1"}}), dir.path());
  const CliResult b = run_command(train_args({{"--steps", "1"}, {"--log-every", "1"}, {"--seed", "2"}}), dir.path());
  ASSERT_TRUE(a.exited && a.exit_code == 0) << a.describe();
  ASSERT_TRUE(b.exited && b.exit_code == 0) << b.describe();
  EXPECT_NE(step_results(a), step_results(b)) << "different seeds gave the same loss";
}

}  // namespace
}  // namespace tt::test
