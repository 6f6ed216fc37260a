// `train --data` (engine/io/token_dataset.h, cli/train_loop.h): the training windows are a pure
// function of (seed, step, row) and cover the shard; the validation windows are fixed and spread
// over val.bin; evaluation is the training forward without dropout; a tiny causal model learns
// byte-level text; the metrics file holds one record per logged step and reads as one run
// across a resume; and every bad combination of flags is one line.
#include <gtest/gtest.h>

#include <filesystem>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "engine/init.h"
#include "engine/io/token_dataset.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/common/lr_schedule.h"
#include "tests/cli_test_util.h"
#include "tests/test_models.h"

namespace tt::test {
namespace {

const std::string kBin = TINYTRAIN_BIN;

// A prepared byte-level data directory (what `tinytrain prepare --tokenizer byte` writes), from
// text that repeats with small variations: a model can learn it within a few dozen steps.
std::string write_byte_data(const ScratchDir& scratch, const std::string& name, int train_lines = 400,
                            int val_lines = 40) {
  auto text = [](int lines, int salt) {
    std::vector<int32_t> ids;
    const char* words[] = {"the cat sat on the mat. ", "a dog ran in the park. ", "we like green tea. "};
    for (int i = 0; i < lines; ++i)
      for (char c : std::string(words[(i * 7 + salt) % 3])) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  };
  const std::string dir = scratch.file(name);
  fs::create_directories(dir);
  write_token_shard(dir + "/train.bin", text(train_lines, 0));
  write_token_shard(dir + "/val.bin", text(val_lines, 1));
  scratch.write(name + "/tokenizer.json", tokenizer_json(ByteTokenizer()));
  return dir;
}

// A tiny causal model's flags (the vocabulary comes from the data's tokenizer: 256).
std::vector<std::string> tiny_lm_flags() {
  return {"--backend", "cpu", "--threads", "1", "--causal", "true", "--norm-first", "true", "--activation", "gelu",
          "--pos-embedding", "learned", "--d-model", "32", "--n-head", "2", "--n-layer", "1", "--d-ff", "64",
          "--seq", "16", "--max-seq-len", "16", "--batch", "8"};
}

std::vector<std::string> train_args(const std::string& data, std::initializer_list<std::string> more) {
  std::vector<std::string> args = {kBin, "train", "--data", data};
  for (const std::string& f : tiny_lm_flags()) args.push_back(f);
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> records;
  for (const std::string& line : CliResult::split_lines(read_whole_file(path))) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST(TokenDataset, TrainingWindowsArePureFunctionsOfSeedStepAndRowAndCoverTheShard) {
  ScratchDir scratch;
  const std::string dir = write_byte_data(scratch, "data");
  const TokenDataset data = TokenDataset::open(dir, 256, 16);
  const TokenShard train = TokenShard::open(dir + "/train.bin", 256);
  const std::vector<uint16_t>& tokens = train.tokens();
  const int B = 8, T = 16;
  std::vector<int32_t> x(B * T), y(B * T), x2(B * T), y2(B * T), x_other(B * T), y_other(B * T);
  int64_t lowest = INT64_MAX;
  std::set<int64_t> starts;
  for (uint32_t step = 0; step < 200; ++step) {
    data.train_batch(7, step, B, T, x.data(), y.data());
    data.train_batch(7, step, B, T, x2.data(), y2.data());
    ASSERT_EQ(x, x2) << "step " << step << ": the same (seed, step) gave other windows";
    ASSERT_EQ(y, y2);
    for (int r = 0; r < B; ++r) {
      // Find the window in the shard: x is tokens[o, o+T) and y the same shifted by one.
      const int32_t* xr = x.data() + r * T;
      const int32_t* yr = y.data() + r * T;
      for (int t = 0; t + 1 < T; ++t) ASSERT_EQ(yr[t], xr[t + 1]) << "y is not x shifted by one";
      bool found = false;
      for (int64_t o = 0; o + T < static_cast<int64_t>(tokens.size()) && !found; ++o) {
        bool match = yr[T - 1] == tokens[o + T];
        for (int t = 0; t < T && match; ++t) match = xr[t] == tokens[o + t];
        if (match) {
          found = true;
          lowest = std::min(lowest, o);
          starts.insert(o);
        }
      }
      ASSERT_TRUE(found) << "step " << step << " row " << r << " is not a window of train.bin";
    }
  }
  // The text repeats every few lines, so a window is found at its first occurrence, within the
  // first repeat period: the check is that the start of the shard is reached and many starts differ.
  EXPECT_LE(lowest, 2);
  EXPECT_GT(starts.size(), 40u);
  // Another seed draws other windows.
  data.train_batch(8, 0, B, T, x_other.data(), y_other.data());
  data.train_batch(7, 0, B, T, x.data(), y.data());
  EXPECT_NE(x, x_other);
}

TEST(TokenDataset, ValidationWindowsAreFixedAndSpanValBin) {
  ScratchDir scratch;
  const std::string dir = write_byte_data(scratch, "data");
  const TokenDataset data = TokenDataset::open(dir, 256, 16);
  const TokenShard val = TokenShard::open(dir + "/val.bin", 256);
  const int B = 4, T = 16, batches = 3;
  const int64_t last_start = static_cast<int64_t>(val.tokens().size()) - T - 1;
  std::vector<int32_t> x(B * T), y(B * T);
  for (int k = 0; k < batches; ++k) {
    data.val_batch(k, batches, B, T, x.data(), y.data());
    for (int r = 0; r < B; ++r) {
      const int64_t j = k * B + r;
      const int64_t start = j * last_start / (batches * B - 1);  // the documented formula
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(x[r * T + t], val.tokens()[start + t]) << "window " << j;
        ASSERT_EQ(y[r * T + t], val.tokens()[start + t + 1]) << "window " << j;
      }
    }
  }
  // The last window ends exactly at the end of val.bin.
  data.val_batch(batches - 1, batches, B, T, x.data(), y.data());
  EXPECT_EQ(y[(B - 1) * T + T - 1], val.tokens().back());
}

TEST(TokenDataset, RefusesDataTheModelCannotUse) {
  ScratchDir scratch;
  const std::string dir = write_byte_data(scratch, "data", 400, 1);  // val.bin: 20-odd tokens
  try {
    TokenDataset::open(dir, 256, 64);
    ADD_FAILURE() << "a val.bin shorter than one window was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("val.bin: holds"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs at least 65"), std::string::npos) << e.what();
  }
  try {
    TokenDataset::open(dir, 128, 8);
    ADD_FAILURE() << "a vocabulary below the tokenizer's was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer has 256 ids"), std::string::npos) << e.what();
  }
}

// Evaluation is the training forward without dropout: with dropout 0 its loss is the training
// loss of the same batch bit for bit; with dropout it is deterministic and differs from it.
TEST(Evaluate, IsTheTrainingForwardWithoutDropout) {
  CpuBackend backend;
  ModelConfig model = small_model(/*max_seq_len=*/8, /*dropout=*/0.0f);
  model.vocab_size = 64;
  model.causal = true;
  const int B = 4, T = 8;
  std::vector<int32_t> x(B * T), y(B * T);
  for (int i = 0; i < B * T; ++i) {
    x[i] = (i * 13 + 5) % 64;
    y[i] = (i * 29 + 3) % 64;
  }
  AdamWConfig adamw;
  for (float dropout : {0.0f, 0.3f}) {
    model.dropout = dropout;
    for (int grad_accum : {1, 2}) {
      TrainOptions o = test::trainer_options(model, adamw, B, T, 11);
      o.grad_accum = grad_accum;
      Trainer trainer(backend, o);
      trainer.load_params(init_params(trainer.model().layout(), 11).data());
      const double eval1 = trainer.evaluate(x.data(), y.data());
      const double eval2 = trainer.evaluate(x.data(), y.data());
      EXPECT_EQ(eval1, eval2) << "evaluation is not deterministic";
      trainer.load_batch(x.data(), y.data(), 3);
      trainer.forward_backward();
      const double train_loss = trainer.read_loss();
      if (dropout == 0.0f)
        EXPECT_EQ(eval1, train_loss) << "grad_accum " << grad_accum;
      else
        EXPECT_GT(std::fabs(eval1 - train_loss), 1e-4) << "dropout was applied in evaluation, or not in training";
      EXPECT_GT(eval1, 3.5);  // near ln(64) = 4.16 for an untrained model
      EXPECT_LT(eval1, 5.0);
    }
  }
}

TEST(TrainData, ATinyCausalModelLearnsTextWithEvaluationScheduleAndMetrics) {
  ScratchDir scratch;
  const std::string data = write_byte_data(scratch, "data");
  const std::string metrics = scratch.file("metrics.jsonl");
  const CliResult r = run_command(train_args(data, {"--steps", "60", "--dropout", "0", "--lr", "3e-3", "--warmup-steps", "5",
                                                    "--lr-schedule", "cosine", "--min-lr", "3e-4", "--grad-clip", "1",
                                                    "--eval-every", "20", "--eval-batches", "2", "--log-every", "10",
                                                    "--metrics", metrics}),
                                  scratch.path(), 300);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  // The progress line: step/total, loss, val, lr, tokens/s, ETA, alloc, TFLOP/s (MFU with a measured peak).
  const char* progress =
      R"(^step (\d+)/60 \| loss (\d+\.\d{4}) \| val (-|\d+\.\d{4}) \| lr (\d\.\d{3}e[-+]\d+) \| (\d+|\?) tokens/s \| ETA ([0-9hms]+|\?) \| alloc \d+\.\d MB \| (\?|\d+\.\d{3}) TFLOP/s( \| MFU (\?|\d+\.\d%))?$)";
  std::vector<double> losses;
  for (const std::string& line : r.out_lines()) {
    if (line.rfind("step ", 0) != 0) continue;
    const auto m = regex_match_groups(line, progress);
    ASSERT_TRUE(m) << line;
    losses.push_back(std::stod((*m)[2]));
  }
  ASSERT_EQ(losses.size(), 6u) << r.describe();
  EXPECT_GT(losses.front(), 5.0) << "an untrained byte model starts near ln(256) = 5.55";
  EXPECT_LT(losses.back(), 3.5) << "the model did not learn the text";
  const auto final_line = regex_search_groups(r.out, R"(final val loss (\d+\.\d{4}) \(after step 60)");
  ASSERT_TRUE(final_line) << r.out;
  const double final_val = std::stod((*final_line)[1]);
  EXPECT_LT(final_val, 3.5);

  // The metrics: one record per logged step plus validation-only ones (step 0, 20, 40 are both
  // logged and evaluated; 60 is the final evaluation). The lr is the schedule's at each step.
  const std::vector<nlohmann::json> records = read_metrics(metrics);
  std::map<int, nlohmann::json> by_step;
  for (const nlohmann::json& rec : records) by_step[rec["step"].get<int>()] = rec;
  ASSERT_EQ(records.size(), 7u) << read_whole_file(metrics);
  LrSchedule schedule;
  schedule.kind = LrScheduleKind::Cosine;
  schedule.warmup_steps = 5;
  schedule.total_steps = 60;
  schedule.min_lr = 3e-4;
  for (int step = 0; step < 60; step += 10) {
    ASSERT_TRUE(by_step.count(step)) << step;
    const nlohmann::json& rec = by_step[step];
    for (const char* key : {"step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "ms_per_step",
                            "loss_scale", "alloc_mb", "tflops", "mfu"})
      EXPECT_TRUE(rec.contains(key)) << key;
    EXPECT_DOUBLE_EQ(rec["lr"].get<double>(), scheduled_lr(3e-3, schedule, step)) << step;
    EXPECT_GT(rec["grad_norm"].get<double>(), 0.0);
    EXPECT_EQ(rec["val_loss"].is_number(), step % 20 == 0) << step;
    EXPECT_EQ(rec["tokens_per_s"].is_number(), step > 0) << "the first window is not timed";
    EXPECT_EQ(rec["tflops"].is_number(), step > 0);
  }
  EXPECT_TRUE(by_step[60]["loss"].is_null());
  EXPECT_NEAR(by_step[60]["val_loss"].get<double>(), final_val, 5e-5);
  EXPECT_LT(by_step[40]["val_loss"].get<double>(), by_step[0]["val_loss"].get<double>());
}

// A run stopped after a checkpoint and resumed is the uninterrupted run, with --data as with
// random tokens: the same logged losses and val losses, and the metrics file of the resumed
// run reads as one run (the killed run's records past the checkpoint are replaced).
TEST(TrainData, ResumeContinuesTheRunAndItsMetrics) {
  ScratchDir scratch;
  const std::string data = write_byte_data(scratch, "data");
  auto run = [&](const std::string& name, std::initializer_list<std::string> more) {
    std::vector<std::string> args = train_args(data, {"--steps", "12", "--lr", "2e-3", "--eval-every", "4",
                                                      "--eval-batches", "2", "--log-every", "2", "--dropout", "0.1",
                                                      "--metrics", scratch.file(name + ".jsonl")});
    args.insert(args.end(), more.begin(), more.end());
    return run_command(args, scratch.path(), 300);
  };
  const CliResult whole = run("whole", {});
  ASSERT_EQ(whole.exit_code, 0) << whole.describe();
  // The interrupted run: checkpoints every 6 steps, and it "died" after logging all 12 steps but
  // before its last checkpoint landed (removed here): its metrics hold records past step 6,
  // which the resumed run replaces.
  const CliResult first = run("parts", {"--save-dir", scratch.file("ckpt"), "--save-every", "6"});
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  fs::remove(scratch.file("ckpt/ckpt_00000012.safetensors"));
  const CliResult resumed = run("parts", {"--resume", scratch.file("ckpt")});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  EXPECT_NE(resumed.out.find("at step 6"), std::string::npos) << resumed.out;

  auto strip_speed = [](nlohmann::json rec) {
    rec.erase("tokens_per_s");
    rec.erase("ms_per_step");
    rec.erase("tflops");
    rec.erase("mfu");
    return rec;
  };
  const std::vector<nlohmann::json> want = read_metrics(scratch.file("whole.jsonl"));
  const std::vector<nlohmann::json> got = read_metrics(scratch.file("parts.jsonl"));
  ASSERT_EQ(got.size(), want.size()) << read_whole_file(scratch.file("parts.jsonl"));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(strip_speed(got[i]), strip_speed(want[i])) << "record " << i;

  // Other data: refused in one line.
  const std::string other = write_byte_data(scratch, "other", 300, 40);
  std::vector<std::string> args = train_args(other, {"--steps", "12", "--lr", "2e-3", "--resume", scratch.file("ckpt")});
  expect_user_error(run_command(args, scratch.path()), {"was saved with data"});
}

TEST(TrainData, BadFlagsAreOneLine) {
  ScratchDir scratch;
  const std::string data = write_byte_data(scratch, "data");
  expect_user_error(run_command({kBin, "train", "--backend", "cpu", "--steps", "2", "--eval-every", "5"}, scratch.path()),
                    {"--eval-every", "needs --data"});
  std::vector<std::string> bidirectional = train_args(data, {"--steps", "2"});
  bidirectional[std::find(bidirectional.begin(), bidirectional.end(), "--causal") - bidirectional.begin() + 1] = "false";
  expect_user_error(run_command(bidirectional, scratch.path()), {"--data", "--causal true"});
  expect_user_error(run_command(train_args(scratch.file("missing"), {"--steps", "2"}), scratch.path()),
                    {"--data", "missing", "cannot list the directory"});
  // a directory with neither tokenizer.json nor llm.c's shards says what it looked for
  std::filesystem::create_directories(scratch.file("empty"));
  expect_user_error(run_command(train_args(scratch.file("empty"), {"--steps", "2"}), scratch.path()),
                    {"no tokenizer.json", "no llm.c train shard"});
  expect_user_error(run_command(train_args(data, {"--steps", "2", "--vocab-size", "100"}), scratch.path()),
                    {"tokenizer has 256 ids"});
  expect_user_error(run_command(train_args(data, {"--steps", "2", "--eval-batches", "0"}), scratch.path()),
                    {"--eval-batches"});
  expect_user_error(run_command(train_args(data, {"--steps", "2", "--metrics", scratch.file("no/such/dir/m.jsonl")}),
                                scratch.path()),
                    {"--metrics", "cannot write"});
  expect_user_error(
      run_command(train_args(data, {"--steps", "2", "--init-from", "x.safetensors", "--resume", "y"}), scratch.path()),
      {"--init-from", "--resume"});
}

}  // namespace
}  // namespace tt::test
