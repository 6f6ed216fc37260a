// Checkpoints and resume (engine/io/checkpoint.h), on the CPU backend:
//  1. a run saved after step k and continued in a fresh trainer takes the uninterrupted run's
//     steps bit for bit: every later loss, the final parameters, AdamW's moments and step
//     count, and the loss scaler (fp32 with dropout, bf16, fp16 with loss scaling that skips
//     and grows across the save point); the `train` loop logs the same lines and writes
//     byte-identical checkpoints after a resume;
//  2. the file is trusted in nothing: a leftover temporary file is ignored by --resume DIR; a
//     truncated file, any bit flipped in the header, a flipped data byte, another run's
//     settings, values out of range are each refused in one line, before the trainer is touched;
//  3. --keep K keeps the K newest checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>

#include "engine/io/checkpoint.h"
#include "engine/init.h"
#include "engine/io/safetensors.h"
#include "cli/train_loop.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/cli_test_util.h"
#include "tests/memory_checks.h"

namespace tt {
namespace {

using namespace test;

// ---- small runs through the library ----------------------------------------------------------

TrainOptions options_for(const MemoryCase& mc, Precision precision, int steps) {
  TrainOptions o;
  o.model = mc.config;
  o.optimizer.lr = 1e-3;
  o.run.batch = 4;
  o.run.seq = mc.T;
  o.run.steps = steps;
  o.run.seed = 21;
  o.precision = precision;
  o.log_every = 1;
  return o;
}

std::unique_ptr<Trainer> make_trainer(Backend& backend, const TrainOptions& o, Recompute recompute = Recompute::None,
                                      int grad_accum = 1) {
  TrainOptions with = o;
  with.recompute = recompute;
  with.grad_accum = grad_accum;
  return std::make_unique<Trainer>(backend, with);
}

// Steps [first, last) as run_training takes them; the loss of each appended to `losses`.
void train(Trainer& trainer, const TrainOptions& o, int first, int last, std::vector<double>& losses) {
  std::vector<int32_t> x(static_cast<size_t>(o.run.batch) * o.run.seq), y(x.size());
  for (int s = first; s < last; ++s) {
    random_batch(o.run.seed, static_cast<uint32_t>(s), o.run.batch, o.run.seq, o.model.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), y.data(), static_cast<uint32_t>(s));
    trainer.train_step(false);
    losses.push_back(trainer.read_loss());
  }
}

std::unique_ptr<Trainer> fresh_run(Backend& backend, const TrainOptions& o, int steps, std::vector<double>& losses) {
  auto trainer = make_trainer(backend, o);
  trainer->load_params(init_params(trainer->model().layout(), o.run.seed).data());
  train(*trainer, o, 0, steps, losses);
  return trainer;
}

const std::map<std::string, std::string> kData = {{"data", "random"}};

void expect_same_state(const ParamLayout& layout, const TrainingState& a, const TrainingState& b) {
  EXPECT_SAME_BITS(layout, a.params, b.params, "parameters");
  EXPECT_SAME_BITS(layout, a.exp_avg, b.exp_avg, "exp_avg");
  EXPECT_SAME_BITS(layout, a.exp_avg_sq, b.exp_avg_sq, "exp_avg_sq");
  EXPECT_EQ(a.adamw_step, b.adamw_step);
  EXPECT_EQ(a.loss_scale, b.loss_scale);
  EXPECT_EQ(a.growth_tracker, b.growth_tracker);
  EXPECT_EQ(a.skipped_steps, b.skipped_steps);
  EXPECT_EQ(a.first_skipped_step, b.first_skipped_step);
}

// 8 steps straight, against 3 steps, a checkpoint, and 5 more steps in a fresh trainer (with
// `recompute` there: it replays the same ops, so it may differ from the saving run's).
void check_resume(const MemoryCase& mc, const TrainOptions& o, Recompute recompute = Recompute::None) {
  const int k = 3, steps = 8;
  auto cpu = make_cpu_backend();
  ScratchDir dir;
  std::vector<double> straight_losses, first_losses, resumed_losses;
  auto straight = fresh_run(*cpu, o, steps, straight_losses);
  auto first = fresh_run(*cpu, o, k, first_losses);
  const std::string path = checkpoint_path(dir.path(), k);
  save_checkpoint(path, *first, k, o, kData);
  const TrainingState at_save = first->read_state();
  first.reset();

  auto resumed = make_trainer(*cpu, o, recompute);
  ASSERT_EQ(load_checkpoint(path, *resumed, o, kData), k);
  expect_same_state(resumed->model().layout(), resumed->read_state(), at_save);
  train(*resumed, o, k, steps, resumed_losses);

  const std::vector<double> after_k(straight_losses.begin() + k, straight_losses.end());
  EXPECT_EQ(resumed_losses, after_k);  // exact: bit for bit
  expect_same_state(resumed->model().layout(), resumed->read_state(), straight->read_state());
  const TrainingState end = straight->read_state();
  std::printf("[ resume   ] %s, %s, recompute %s: steps %d..%d compared; at the save: adamw_step %d, scale %g, "
              "skipped %d (first at %d), growth_tracker %d; at the end: scale %g, skipped %d\n",
              mc.name, precision_name(o.precision), recompute_name(recompute), k, steps - 1, at_save.adamw_step,
              at_save.loss_scale, at_save.skipped_steps, at_save.first_skipped_step, at_save.growth_tracker,
              end.loss_scale, end.skipped_steps);
  EXPECT_EQ(end.adamw_step + end.skipped_steps, steps);
}

TEST(Checkpoint, Fp32WithDropoutResumesBitForBit) {
  for (const MemoryCase& mc : memory_cases()) {  // dropout 0.1 in each
    SCOPED_TRACE(mc.name);
    check_resume(mc, options_for(mc, Precision::FP32, 8));
  }
}

TEST(Checkpoint, ResumingWithRecomputeIsBitForBitToo) {
  const MemoryCase mc = memory_cases()[1];
  check_resume(mc, options_for(mc, Precision::FP32, 8), Recompute::Layer);
}

TEST(Checkpoint, Bf16ResumesBitForBit) {
  const MemoryCase mc = memory_cases()[0];
  check_resume(mc, options_for(mc, Precision::BF16, 8));
}

// The scaler's whole state crosses the save point: an initial scale of 2^23 overflows fp16's
// gradients at step 0 (skipped, scale halved); steps 1 and 2 are clean, so the growth tracker
// is at 2 of the growth interval 3 at the save, and the resumed run must grow the scale after
// its first clean step, as the straight run does.
TEST(Checkpoint, Fp16WithLossScalingResumesBitForBit) {
  const MemoryCase mc = memory_cases()[0];
  TrainOptions o = options_for(mc, Precision::FP16, 8);
  o.loss_scaler.init_scale = std::ldexp(1.0f, 23);
  o.loss_scaler.growth_interval = 3;
  check_resume(mc, o);
  // (the claim above, checked)
  auto cpu = make_cpu_backend();
  std::vector<double> losses;
  const TrainingState at_save = fresh_run(*cpu, o, 3, losses)->read_state();
  EXPECT_EQ(at_save.skipped_steps, 1);
  EXPECT_EQ(at_save.first_skipped_step, 0);
  EXPECT_EQ(at_save.growth_tracker, 2);
  EXPECT_EQ(at_save.loss_scale, std::ldexp(1.0f, 22));
}

// Another grad_accum on resume is allowed: it changes the order of float sums only, so the
// continued run is within accumulation's tolerance of the straight one, not bitwise.
TEST(Checkpoint, ResumeWithAnotherGradAccumIsAccepted) {
  const MemoryCase mc = memory_cases()[0];
  const TrainOptions o = options_for(mc, Precision::FP32, 6);
  auto cpu = make_cpu_backend();
  ScratchDir dir;
  std::vector<double> straight_losses, losses;
  auto straight = fresh_run(*cpu, o, 6, straight_losses);
  save_checkpoint(dir.file("c.safetensors"), *fresh_run(*cpu, o, 3, losses), 3, o, kData);
  auto resumed = make_trainer(*cpu, o, Recompute::None, /*grad_accum=*/2);
  ASSERT_EQ(load_checkpoint(dir.file("c.safetensors"), *resumed, o, kData), 3);
  losses.clear();
  train(*resumed, o, 3, 6, losses);
  const AccumulationTolerances tol = accumulation_tolerances(Precision::FP32, o.run.batch * o.run.seq, 1e-3, 6);
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(losses[i], straight_losses[3 + i], tol.loss_rel * straight_losses[3 + i]);
  EXPECT_LE(max_abs_difference(resumed->read_state().params, straight->read_state().params), tol.param_abs);
}

// ---- the train loop: logs, files and --keep --------------------------------------------------

TrainOptions loop_options(const std::string& save_dir, int steps, int save_every) {
  TrainOptions o = options_for(memory_cases()[0], Precision::FP32, steps);
  o.checkpoint.save_dir = save_dir;
  o.checkpoint.save_every = save_every;
  return o;
}

// The log lines that start with `prefix`, without the speed fields of step lines (timings,
// which differ from run to run).
std::vector<std::string> lines_starting(const std::string& log, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& line : CliResult::split_lines(log))
    if (line.rfind(prefix, 0) == 0) out.push_back(without_speed_fields(line));
  return out;
}

// run_training straight to step 10 (saving every 4 and at the end), against run_training to
// step 6 and a second run_training resumed from its step-4 checkpoint: the step lines from
// step 4 on are the same text, and the checkpoints of steps 8 and 10 the same bytes.
TEST(Checkpoint, TrainLoopResumesWithTheSameLogAndTheSameFiles) {
  auto cpu = make_cpu_backend();
  ScratchDir a, b;
  std::ostringstream straight_log, first_log, resumed_log;
  run_training(*cpu, loop_options(a.path(), 10, 4), straight_log);
  run_training(*cpu, loop_options(b.path(), 6, 4), first_log);
  TrainOptions resumed = loop_options(b.path(), 10, 4);
  resumed.checkpoint.resume = checkpoint_path(b.path(), 4);
  run_training(*cpu, resumed, resumed_log);

  const std::vector<std::string> straight = lines_starting(straight_log.str(), "step");
  const std::vector<std::string> tail(straight.begin() + 4, straight.end());
  EXPECT_EQ(lines_starting(resumed_log.str(), "step"), tail) << resumed_log.str();
  for (int step : {8, 10})
    EXPECT_EQ(read_whole_file(checkpoint_path(a.path(), step)), read_whole_file(checkpoint_path(b.path(), step)))
        << "checkpoint of step " << step;
  // One line per save and per resume: "checkpoint: DIR/ckpt_00000008.safetensors (0.1 MB, 3 ms)".
  const std::string saved = "checkpoint: .*/ckpt_000000(04|08|10)\\.safetensors \\([0-9.]+ MB, [0-9]+ ms\\)";
  const std::vector<std::string> saves = lines_starting(straight_log.str(), "checkpoint:");
  ASSERT_EQ(saves.size(), 3u) << straight_log.str();
  for (const std::string& line : saves) EXPECT_TRUE(regex_match_groups(line, saved).has_value()) << line;
  const std::string resumed_line =
      "checkpoint: resumed from .*/ckpt_00000004\\.safetensors at step 4 \\([0-9.]+ MB, [0-9]+ ms\\)";
  const std::vector<std::string> resumes = lines_starting(resumed_log.str(), "checkpoint: resumed");
  ASSERT_EQ(resumes.size(), 1u) << resumed_log.str();
  EXPECT_TRUE(regex_match_groups(resumes[0], resumed_line).has_value()) << resumes[0];
  EXPECT_NE(resumed_log.str().find("done: 6 steps"), std::string::npos) << resumed_log.str();
}

// --keep 2: the two newest stay (the last step's among them); other files are not touched.
TEST(Checkpoint, KeepTwoKeepsTheTwoNewest) {
  auto cpu = make_cpu_backend();
  ScratchDir dir;
  dir.write("notes.txt", "mine");
  dir.write("ckpt_00000001.safetensors.tmp.4242", "an interrupted save");
  TrainOptions o = loop_options(dir.path(), 9, 2);
  o.checkpoint.keep = 2;
  std::ostringstream log;
  run_training(*cpu, o, log);
  std::vector<int> steps;
  for (const CheckpointFile& f : list_checkpoints(dir.path())) steps.push_back(f.step);
  EXPECT_EQ(steps, (std::vector<int>{8, 9}));
  EXPECT_TRUE(fs::exists(dir.file("notes.txt")));
  EXPECT_TRUE(fs::exists(dir.file("ckpt_00000001.safetensors.tmp.4242")));
  // keep 0 (the default) keeps them all
  ScratchDir all;
  run_training(*cpu, loop_options(all.path(), 9, 2), log);
  EXPECT_EQ(list_checkpoints(all.path()).size(), 5u);  // 2, 4, 6, 8 and the last, 9
}

// ---- files from outside: the command line's one-line errors ----------------------------------

// `tinytrain train` on a small model; `flags` (name, value) replace the model's defaults of
// the same name (CLI11 refuses a repeated flag).
CliResult train_cli(const ScratchDir& scratch, const std::vector<std::pair<std::string, std::string>>& flags) {
  const std::vector<std::pair<std::string, std::string>> model = {
      {"--backend", "cpu"}, {"--threads", "1"},      {"--vocab-size", "32"}, {"--d-model", "32"},
      {"--n-head", "4"},    {"--d-ff", "64"},         {"--seq", "8"},         {"--max-seq-len", "8"},
      {"--batch", "4"},     {"--log-every", "1"}};
  std::vector<std::string> argv = {TINYTRAIN_BIN, "train"};
  auto given = [&](const std::string& name) {
    return std::any_of(flags.begin(), flags.end(), [&](const auto& f) { return f.first == name; });
  };
  for (const auto& [name, value] : model)
    if (!given(name)) argv.insert(argv.end(), {name, value});
  for (const auto& [name, value] : flags) argv.insert(argv.end(), {name, value});
  return run_command(argv, scratch.path());
}

// A checkpoint of 4 steps in DIR/ckpt_00000004.safetensors, made by the binary.
std::string cli_checkpoint(const ScratchDir& scratch) {
  const CliResult r = train_cli(scratch, {{"--steps", "4"}, {"--save-dir", scratch.path()}});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  return checkpoint_path(scratch.path(), 4);
}

TEST(Checkpoint, ResumeDirIgnoresLeftoverTemporaryFiles) {
  ScratchDir scratch;
  const std::string good = cli_checkpoint(scratch);
  const std::string bytes = read_whole_file(good);
  // what a save killed before its rename leaves: a newer step's partial file, under both
  // temporary names (ours and write_safetensors' own)
  scratch.write("ckpt_00000008.safetensors.tmp.4242", bytes.substr(0, bytes.size() / 2));
  scratch.write("ckpt_00000009.safetensors.tmp.77.tmp", bytes.substr(0, 100));
  EXPECT_EQ(find_resume_checkpoint(scratch.path()), good);
  const CliResult r = train_cli(scratch, {{"--steps", "6"}, {"--resume", scratch.path()}});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(lines_starting(r.out, "checkpoint: resumed").size(), 1u) << r.out;
  EXPECT_NE(r.out.find("at step 4"), std::string::npos) << r.out;
  EXPECT_EQ(lines_starting(r.out, "step").size(), 2u) << r.out;  // steps 4 and 5

  ScratchDir empty;
  expect_user_error(train_cli(empty, {{"--steps", "6"}, {"--resume", empty.path()}}), {"no checkpoint", empty.path()});
}

TEST(Checkpoint, TruncatedCheckpointIsRefusedInOneLine) {
  ScratchDir scratch;
  const std::string bytes = read_whole_file(cli_checkpoint(scratch));
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{100}, size_t{5}}) {
    SCOPED_TRACE("first " + std::to_string(keep) + " bytes");
    const std::string cut = scratch.write("cut.safetensors", bytes.substr(0, keep));
    expect_user_error(train_cli(scratch, {{"--steps", "6"}, {"--resume", cut}}),
                      {"cut.safetensors", "truncated|beyond the end|out of range"});
  }
}

TEST(Checkpoint, FlippedBytesAreRefusedInOneLine) {
  ScratchDir scratch;
  const std::string bytes = read_whole_file(cli_checkpoint(scratch));
  const uint64_t header = header_length(bytes);
  auto flipped = [&](size_t at) {
    std::string b = bytes;
    b[at] = static_cast<char>(b[at] ^ 0x01);
    return scratch.write("flipped.safetensors", b);
  };
  // in the header: the JSON's first brace, a digit of the metadata 'step', a letter of a
  // tensor name; in the data: one byte of the last tensor
  const size_t step_digit = bytes.find("\"step\":\"4\"") + 8;
  const size_t name_letter = bytes.find("optimizer.exp_avg_sq.lm_head.bias") + 3;
  ASSERT_LT(name_letter, 8 + header);
  for (size_t at : {size_t{8}, step_digit, name_letter, bytes.size() - 3}) {
    SCOPED_TRACE("byte " + std::to_string(at) + " of " + std::to_string(bytes.size()));
    expect_user_error(train_cli(scratch, {{"--steps", "6"}, {"--resume", flipped(at)}}),
                      {"flipped.safetensors", "not valid JSON|checksum|missing tensor"});
  }
}

TEST(Checkpoint, AnotherRunsCheckpointIsRefusedNamingTheField) {
  ScratchDir scratch;
  const std::string path = cli_checkpoint(scratch);
  struct Change {
    std::vector<std::string> flags;
    std::string says;
  };
  for (const Change& c : std::vector<Change>{
           {{"--d-model", "64"}, "was saved with d_model 32, this run has 64"},
           {{"--lr", "3e-4"}, "was saved with lr 0.0001, this run has 0.0003"},
           {{"--precision", "bf16"}, "was saved with precision fp32, this run has bf16"},
           {{"--seed", "7"}, "was saved with seed 1337, this run has 7"},
           {{"--batch", "8"}, "was saved with batch 4, this run has 8"},
           // the other block: a field the checkpoint's config leaves out at its default
           {{"--norm", "rmsnorm"}, "was saved with norm at its default, this run has rmsnorm"},
           {{"--tie-embeddings", "true"}, "was saved with tie_embeddings at its default, this run has true"},
       }) {
    SCOPED_TRACE(c.says);
    expect_user_error(train_cli(scratch, {{"--steps", "6"}, {"--resume", path}, {c.flags[0], c.flags[1]}}),
                      {"checkpoint " + path + " " + c.says});
  }
}

// ---- files from outside: every header byte, through the library -----------------------------

// A tiny model, so that its checkpoint's header is short enough to change every byte of.
TrainOptions tiny_options() {
  MemoryCase mc{"tiny", small_model(4, 0.1f), 4};
  mc.config.n_layer = 1;
  mc.config.d_model = 8;
  mc.config.n_head = 2;
  mc.config.d_ff = 8;
  mc.config.vocab_size = 8;
  return options_for(mc, Precision::FP32, 4);
}

// Any bit flipped in the header (the length, the JSON: structure, names, shapes, offsets,
// every metadata value) or in a sample of the data is refused with an InputError, and the
// trainer keeps its state.
TEST(Checkpoint, EveryHeaderBitFlipIsRefused) {
  auto cpu = make_cpu_backend();
  ScratchDir dir;
  const TrainOptions o = tiny_options();
  std::vector<double> losses;
  const std::string path = dir.file("c.safetensors");
  save_checkpoint(path, *fresh_run(*cpu, o, 2, losses), 2, o, kData);
  const std::string bytes = read_whole_file(path);
  const size_t header_end = 8 + header_length(bytes);
  auto trainer = make_trainer(*cpu, o);
  const TrainingState before = trainer->read_state();
  std::vector<size_t> positions;
  for (size_t at = 0; at < header_end; ++at) positions.push_back(at);
  for (size_t at = header_end; at < bytes.size(); at += 97) positions.push_back(at);
  int refused = 0;
  for (size_t at : positions)
    for (unsigned char bit : {0x01, 0x10, 0x80}) {
      std::string b = bytes;
      b[at] = static_cast<char>(b[at] ^ bit);
      // (a new name each time: ext4 flushes a file rewritten in place to disk on close)
      const std::string bad = dir.write("bad" + std::to_string(refused) + ".safetensors", b);
      try {
        load_checkpoint(bad, *trainer, o, kData);
        ADD_FAILURE() << "byte " << at << " ^ " << int(bit) << " was accepted";
      } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        ++refused;
      }
      fs::remove(bad);
    }
  expect_same_state(trainer->model().layout(), trainer->read_state(), before);
  std::printf("[ corrupt  ] %d of %zu flipped bits refused (all %zu header bytes x 3 bits, every 97th data byte)\n",
              refused, 3 * positions.size(), header_end);
}

// The values, in a file whose checksum is right (written by save_checkpoint from a trainer
// given a bad state): a NaN parameter, a negative second moment, step counts that do not add up.
TEST(Checkpoint, ValuesOutOfRangeAreRefused) {
  auto cpu = make_cpu_backend();
  ScratchDir dir;
  const TrainOptions o = tiny_options();
  std::vector<double> losses;
  auto source = fresh_run(*cpu, o, 2, losses);
  const TrainingState good = source->read_state();
  struct Bad {
    const char* says;
    void (*spoil)(TrainingState&);
  };
  for (const Bad& bad : std::vector<Bad>{
           {"tensor 'embed.weight' element 3 is nan: parameters must be finite",
            [](TrainingState& s) { s.params[3] = NAN; }},
           {"optimizer.exp_avg_sq.embed.weight' element 1 is -1.0", [](TrainingState& s) { s.exp_avg_sq[1] = -1.0f; }},
           {"state.adamw_step (3) and state.skipped_steps (0) must add up to the step (2)",
            [](TrainingState& s) { s.adamw_step = 3; }},
           {"state.loss_scale 2.0", [](TrainingState& s) { s.loss_scale = 2.0f; }},
       }) {
    SCOPED_TRACE(bad.says);
    TrainingState state = good;
    bad.spoil(state);
    source->load_state(state);
    save_checkpoint(dir.file("bad.safetensors"), *source, 2, o, kData);
    auto trainer = make_trainer(*cpu, o);
    try {
      load_checkpoint(dir.file("bad.safetensors"), *trainer, o, kData);
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(bad.says), std::string::npos) << e.what();
    }
  }
}

// The run's extra metadata (the data's identity) must match; reserved names cannot be used.
TEST(Checkpoint, AnotherDataSourceIsRefused) {
  auto cpu = make_cpu_backend();
  ScratchDir dir;
  const TrainOptions o = tiny_options();
  std::vector<double> losses;
  auto source = fresh_run(*cpu, o, 2, losses);
  save_checkpoint(dir.file("c.safetensors"), *source, 2, o, kData);
  auto trainer = make_trainer(*cpu, o);
  try {
    load_checkpoint(dir.file("c.safetensors"), *trainer, o, {{"data", "shards:train_*.bin"}});
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("was saved with data random, this run has shards:train_*.bin"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(save_checkpoint(dir.file("d.safetensors"), *source, 2, o, {{"step", "9"}}), std::invalid_argument);
  // and a safetensors file that is no checkpoint (a PyTorch reference)
  const std::string reference = std::string(TINYTRAIN_SOURCE_DIR) + "/tests/fuzz/seeds/tiny_reference.safetensors";
  try {
    load_checkpoint(reference, *trainer, o, kData);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not a tinytrain checkpoint"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tt

namespace tt {
namespace {

using namespace test;

// ---- readers without a Trainer: read_checkpoint_model (sample), read_state_dict (--init-from) ----

// The error of `read`, expected to be one InputError line holding each of `phrases`.
template <typename Read>
void expect_refused(Read read, std::initializer_list<std::string> phrases) {
  try {
    read();
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const std::string& p : phrases) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
}

// Notes are written and covered by the checksum, but never compared on load; the model reader
// gives the saved config, parameters, metadata and step without a Trainer.
TEST(Checkpoint, NotesAndTheModelReader) {
  auto cpu = make_cpu_backend();
  ScratchDir dir;
  const TrainOptions o = tiny_options();
  std::vector<double> losses;
  auto source = fresh_run(*cpu, o, 2, losses);
  const std::string path = dir.file("c.safetensors");
  save_checkpoint(path, *source, 2, o, kData, {{"tokenizer", "/data/prepared"}});
  auto trainer = make_trainer(*cpu, o);
  EXPECT_EQ(load_checkpoint(path, *trainer, o, kData), 2);  // (the note is not compared)

  const CheckpointModel m = read_checkpoint_model(path);
  EXPECT_EQ(model_config_to_json(m.config), model_config_to_json(o.model));
  EXPECT_EQ(m.params, source->read_state().params);
  EXPECT_EQ(m.step, 2);
  EXPECT_EQ(m.metadata.at("tokenizer"), "/data/prepared");
  EXPECT_EQ(m.metadata.at("data"), "random");

  // a note changed by hand (same length, so only the checksum can tell) is refused by both readers
  std::string bytes = read_whole_file(path);
  const size_t at = bytes.find("/data/prepared");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = 'D';
  const std::string edited = dir.write("edited.safetensors", bytes);
  expect_refused([&] { read_checkpoint_model(edited); }, {"edited.safetensors", "checksum"});
  expect_refused([&] { load_checkpoint(edited, *trainer, o, kData); }, {"edited.safetensors", "checksum"});
  // notes may not reuse a checkpoint field or an extra entry
  EXPECT_THROW(save_checkpoint(dir.file("d.safetensors"), *source, 2, o, kData, {{"config", "{}"}}),
               std::invalid_argument);
  EXPECT_THROW(save_checkpoint(dir.file("d.safetensors"), *source, 2, o, kData, {{"data", "x"}}),
               std::invalid_argument);
}

// The model reader runs load_checkpoint's whole-file checks: truncated, a tensor missing, an
// unknown tensor, another shape, not a checkpoint, a non-finite parameter.
TEST(Checkpoint, TheModelReaderChecksTheWholeFile) {
  auto cpu = make_cpu_backend();
  ScratchDir dir;
  const TrainOptions o = tiny_options();
  std::vector<double> losses;
  auto source = fresh_run(*cpu, o, 2, losses);
  const std::string path = dir.file("c.safetensors");
  save_checkpoint(path, *source, 2, o, kData);
  const std::string bytes = read_whole_file(path);
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{5}}) {
    const std::string cut = dir.write("cut.safetensors", bytes.substr(0, keep));
    expect_refused([&] { read_checkpoint_model(cut); }, {"cut.safetensors"});
  }
  {
    RawSafetensors st = RawSafetensors::load(path);
    ASSERT_TRUE(st.erase("optimizer.exp_avg_sq.lm_head.bias"));
    const std::string p = dir.write("missing.safetensors", st.serialize());
    expect_refused([&] { read_checkpoint_model(p); }, {"missing.safetensors", "missing tensor 'optimizer.exp_avg_sq.lm_head.bias'"});
  }
  {
    RawSafetensors st = RawSafetensors::load(path);
    st.tensors.push_back({"extra", "F32", {1}, std::string(4, '\0')});
    const std::string p = dir.write("extra.safetensors", st.serialize());
    expect_refused([&] { read_checkpoint_model(p); }, {"extra.safetensors", "unexpected tensor 'extra'"});
  }
  {
    RawSafetensors st = RawSafetensors::load(path);
    RawTensor* t = st.find("lm_head.bias");
    ASSERT_NE(t, nullptr);
    t->shape = {2, t->shape[0] / 2};
    const std::string p = dir.write("shape.safetensors", st.serialize());
    expect_refused([&] { read_checkpoint_model(p); }, {"shape.safetensors", "'lm_head.bias' has shape"});
  }
  const std::string reference = std::string(TINYTRAIN_SOURCE_DIR) + "/tests/fuzz/seeds/tiny_reference.safetensors";
  expect_refused([&] { read_checkpoint_model(reference); }, {"not a tinytrain checkpoint"});
  TrainingState state = source->read_state();
  state.params[5] = INFINITY;
  source->load_state(state);
  save_checkpoint(dir.file("inf.safetensors"), *source, 2, o, kData);
  expect_refused([&] { read_checkpoint_model(dir.file("inf.safetensors")); },
                 {"inf.safetensors", "tensor 'embed.weight' element 5 is inf: parameters must be finite"});
}

// A plain state_dict file: every parameter under its PyTorch name, F32, its shape, nothing else.
TEST(Checkpoint, StateDictForInitFrom) {
  ScratchDir dir;
  const ModelConfig config = tiny_options().model;
  const ParamLayout layout(config);
  const std::vector<float> params = init_params(layout, 99);
  auto write = [&](const std::string& name, std::vector<SafetensorsTensorRef> tensors) {
    write_safetensors(dir.file(name), {}, tensors);
    return dir.file(name);
  };
  std::vector<SafetensorsTensorRef> all;
  for (const ParamInfo& p : layout.params()) all.push_back({p.name, DType::F32, p.shape, params.data() + p.offset});
  EXPECT_EQ(read_state_dict(write("good.safetensors", all), config), params);

  std::vector<SafetensorsTensorRef> missing(all.begin(), all.end() - 1);
  const std::string last = all.back().name;
  expect_refused([&] { read_state_dict(write("missing.safetensors", missing), config); },
                 {"missing.safetensors", "missing tensor '" + last + "'"});
  std::vector<SafetensorsTensorRef> extra = all;
  const float one = 1.0f;
  extra.push_back({"encoder.layers.7.linear1.weight", DType::F32, Shape{1}, &one});
  expect_refused([&] { read_state_dict(write("extra.safetensors", extra), config); },
                 {"extra.safetensors", "unexpected tensor 'encoder.layers.7.linear1.weight'"});
  std::vector<SafetensorsTensorRef> reshaped = all;
  reshaped[0].shape = Shape{reshaped[0].shape.numel()};
  expect_refused([&] { read_state_dict(write("shape.safetensors", reshaped), config); },
                 {"shape.safetensors", "'" + all[0].name + "' has shape"});
  std::vector<SafetensorsTensorRef> as_int = all;
  as_int[1].dtype = DType::I32;
  expect_refused([&] { read_state_dict(write("dtype.safetensors", as_int), config); },
                 {"dtype.safetensors", "'" + all[1].name + "' has dtype I32, expected F32"});
  std::vector<float> spoiled = params;
  spoiled[layout.find("lm_head.bias").offset + 2] = NAN;
  std::vector<SafetensorsTensorRef> with_nan;
  for (const ParamInfo& p : layout.params()) with_nan.push_back({p.name, DType::F32, p.shape, spoiled.data() + p.offset});
  expect_refused([&] { read_state_dict(write("nan.safetensors", with_nan), config); },
                 {"nan.safetensors", "tensor 'lm_head.bias' element 2 is nan"});
  const std::string bytes = read_whole_file(dir.file("good.safetensors"));
  const std::string cut = dir.write("cut.safetensors", bytes.substr(0, bytes.size() - 3));
  expect_refused([&] { read_state_dict(cut, config); }, {"cut.safetensors"});
  // another model's state_dict (wider) and a checkpoint (its optimizer tensors) are refused too
  ModelConfig wider = config;
  wider.d_model = 16;
  expect_refused([&] { read_state_dict(dir.file("good.safetensors"), wider); }, {"good.safetensors", "has shape"});
  auto cpu = make_cpu_backend();
  std::vector<double> losses;
  const TrainOptions o = tiny_options();
  save_checkpoint(dir.file("ckpt.safetensors"), *fresh_run(*cpu, o, 1, losses), 1, o, kData);
  expect_refused([&] { read_state_dict(dir.file("ckpt.safetensors"), config); },
                 {"ckpt.safetensors", "unexpected tensor 'optimizer.exp_avg."});
  // the other block's state_dicts: an untied head for a tied run (its own vocabulary table), a
  // tied file for an untied run, and GPT-style names for the Llama block
  ModelConfig tied = config;
  tied.tie_embeddings = true;
  expect_refused([&] { read_state_dict(dir.file("good.safetensors"), tied); },
                 {"good.safetensors", "unexpected tensor 'lm_head.weight'"});
  const ParamLayout tied_layout(tied);
  const std::vector<float> tied_params = init_params(tied_layout, 99);
  std::vector<SafetensorsTensorRef> tied_tensors;
  for (const ParamInfo& p : tied_layout.params())
    tied_tensors.push_back({p.name, DType::F32, p.shape, tied_params.data() + p.offset});
  expect_refused([&] { read_state_dict(write("tied.safetensors", tied_tensors), config); },
                 {"tied.safetensors", "missing tensor 'lm_head.weight'"});
  ModelConfig llama = arch_preset("llama");
  llama.vocab_size = config.vocab_size;
  llama.d_model = config.d_model;
  llama.n_head = config.n_head;
  llama.n_layer = config.n_layer;
  llama.d_ff = config.d_ff;
  llama.max_seq_len = config.max_seq_len;
  expect_refused([&] { read_state_dict(dir.file("good.safetensors"), llama); },
                 {"good.safetensors", "missing tensor 'model.embed_tokens.weight'"});
}

}  // namespace
}  // namespace tt
