// The tinytrain command line: `train` (the seed workload by default), `plan`, `verify` and
// `prepare` (text files to token shards, data/prepare.h), `sample` (text from a checkpoint,
// cli/sampler.h), `profile` (every op of a few steps timed, engine/profile/profile_run.h), `ops`
// (every backend op checked against the CPU backend or timed, engine/ops/ops_run.h).
// Every user error ends as one line on stderr and exit code 1 (2 for bad flags).
#include <CLI/CLI.hpp>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>

#include "data/prepare.h"
#include "engine/backend_select.h"
#include "engine/io/checkpoint.h"
#include "base/checked_input.h"
#include "engine/config.h"
#include "engine/doctor/doctor.h"
#include "engine/memory_plan.h"
#include "engine/profile/mfu.h"
#include "engine/ops/ops_run.h"
#include "engine/profile/profile_run.h"
#include "cli/rank_agreement.h"
#include "cli/sampler.h"
#include "cli/train_loop.h"
#include "engine/io/token_dataset.h"
#include "cli/verify.h"
#include "kernels/device_query.h"
#include "parallel/communicator.h"
#include "parallel/rank_launch.h"

namespace {

using namespace tt;

// Flags named after every config and training field, with the seed workload as defaults.
// Integer flags go through the engine's one integer parser (base/checked_input.h) before
// CLI11 converts them: "64.9", "1e2", "0x10" and values beyond the type are refused naming
// the flag, never truncated or wrapped. Positivity and consistency are left to the configs'
// validate(), which names the field.
CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) {
        try {
          parse_integer(text, lo, hi, "value");
          return std::string();
        } catch (const InputError& e) {
          return std::string(e.what());
        }
      },
      "INT");
}

CLI::Option* add_int_option(CLI::App* cmd, const std::string& name, int& value, const std::string& help,
                            int64_t lo = INT_MIN, int64_t hi = INT_MAX) {
  return cmd->add_option(name, value, help)->check(integer_in(lo, hi))->capture_default_str();
}

void validate_loss_scaler(const LossScalerConfig& s) {
  if (!(std::isfinite(s.init_scale) && s.init_scale > 0))
    throw InputError("invalid config: --loss-scale-init must be positive and finite");
  if (!(std::isfinite(s.growth_factor) && s.growth_factor > 1))
    throw InputError("invalid config: --loss-scale-growth must be above 1");
  if (!(s.backoff_factor > 0 && s.backoff_factor < 1))
    throw InputError("invalid config: --loss-scale-backoff must be in (0, 1)");
  if (s.growth_interval <= 0) throw InputError("invalid config: --loss-scale-interval must be positive");
}

// The model, run and optimizer flags: what `train`, `plan` and `profile` share.
void add_train_flags(CLI::App* cmd, TrainOptions& o, std::string& activation, std::string& pos_embedding,
                     std::string& seed) {
  ModelConfig& m = o.model;
  add_int_option(cmd, "--vocab-size", m.vocab_size, "vocabulary size");
  add_int_option(cmd, "--d-model", m.d_model, "model width");
  add_int_option(cmd, "--n-head", m.n_head, "attention heads (must divide d-model)");
  add_int_option(cmd, "--n-layer", m.n_layer, "encoder layers");
  add_int_option(cmd, "--d-ff", m.d_ff, "feed-forward width");
  cmd->add_option("--activation", activation, "relu | gelu (exact erf)")->capture_default_str();
  cmd->add_option("--norm-first", m.norm_first, "pre-norm (true, adds encoder.norm) or post-norm (false)")
      ->capture_default_str();
  cmd->add_option("--causal", m.causal, "causal attention mask")->capture_default_str();
  cmd->add_option("--pos-embedding", pos_embedding, "none | learned")->capture_default_str();
  add_int_option(cmd, "--max-seq-len", m.max_seq_len, "rows of the positional table; seq must not exceed it");
  cmd->add_option("--layer-norm-eps", m.layer_norm_eps, "LayerNorm epsilon")->capture_default_str();
  cmd->add_option("--dropout", m.dropout, "dropout probability in [0, 1)")->capture_default_str();
  RunConfig& r = o.run;
  add_int_option(cmd, "--batch", r.batch, "sequences per step");
  add_int_option(cmd, "--seq", r.seq, "tokens per sequence");
  add_int_option(cmd, "--steps", r.steps, "optimizer steps");
  seed = std::to_string(r.seed);
  cmd->add_option("--seed", seed, "seed for initialisation, data and dropout, in [0, 2^63)")->capture_default_str();
  AdamWConfig& a = o.optimizer;
  cmd->add_option("--lr", a.lr, "AdamW learning rate")->capture_default_str();
  cmd->add_option("--beta1", a.beta1, "AdamW beta1")->capture_default_str();
  cmd->add_option("--beta2", a.beta2, "AdamW beta2")->capture_default_str();
  cmd->add_option("--eps", a.eps, "AdamW epsilon")->capture_default_str();
  cmd->add_option("--weight-decay", a.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  // The lr schedule and clipping (kernels/common/lr_schedule.h, adamw_update.h): evaluated on
  // the backend from the training step and the gradient norm, so one CUDA graph serves every step.
  cmd->add_option("--warmup-steps", a.schedule.warmup_steps,
                  "lr warmup: steps 0..N-1 take lr x (step + 1) / N, then the schedule")
      ->check(integer_in(0, INT_MAX))
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--lr-schedule", [&a](const std::string& name) { a.schedule.kind = parse_lr_schedule(name); },
         "lr after the warmup: constant | cosine (to --min-lr at --steps) | linear (to --min-lr at --steps)")
      ->check(CLI::Validator(
          [](std::string& name) {
            try {
              parse_lr_schedule(name);
              return std::string();
            } catch (const InputError& e) {
              return std::string(e.what());
            }
          },
          "NAME"))
      ->default_str(lr_schedule_name(a.schedule.kind));
  cmd->add_option("--min-lr", a.schedule.min_lr, "the lr cosine and linear decay to, in [0, lr]")
      ->capture_default_str();
  cmd->add_option("--grad-clip", a.grad_clip,
                  "clip the unscaled gradients to this global L2 norm (clip_grad_norm_; 0: off)")
      ->capture_default_str();
  add_int_option(cmd, "--grad-accum", o.grad_accum, "micro-batches per optimizer step (must divide --batch)");
  LossScalerConfig& s = o.loss_scaler;
  cmd->add_option("--loss-scale-init", s.init_scale, "fp16: initial loss scale")->capture_default_str();
  cmd->add_option("--loss-scale-growth", s.growth_factor, "fp16: scale growth factor")->capture_default_str();
  cmd->add_option("--loss-scale-backoff", s.backoff_factor, "fp16: scale backoff factor on inf/NaN")
      ->capture_default_str();
  add_int_option(cmd, "--loss-scale-interval", s.growth_interval, "fp16: clean steps before the scale grows");
}

// The data-parallel flags of `train` and `plan` (`profile` runs one process).
void add_data_parallel_flags(CLI::App* cmd, DataParallelOptions& dp) {
  add_int_option(cmd, "--zero", dp.zero_stage, "several ranks: 1 shards AdamW's state across them (ZeRO-1), 0 does not",
                 0, 1);
  cmd->add_option("--bucket-mb", dp.bucket_mib,
                  "several ranks: all-reduce the gradients in buckets of this many MiB during the backward (0: once, "
                  "after it)")
      ->capture_default_str();
}

// Every flag of a command with its value as given (or its default): what the ranks compare.
Settings settings_of(const CLI::App& cmd) {
  Settings settings;
  for (const CLI::Option* opt : cmd.get_options()) {
    if (opt->get_lnames().empty()) continue;  // --help
    std::string value = opt->count() ? "" : opt->get_default_str();
    for (const std::string& given : opt->results()) value += (value.empty() ? "" : ",") + given;
    settings.emplace_back("--" + opt->get_lnames().front(), value);
  }
  return settings;
}

// Which kind of backend a run would use, and how much memory it may plan for.
struct Placement {
  std::string kind;  // "cpu" or "cuda" (also for cuda-emu: the CUDA backend's own allocations)
  size_t available;  // bytes
  bool measured;     // the free memory measured; false: --device-memory
};

// --device-memory when given, else the free memory of the device the run would use. Without a
// usable GPU there is nothing to measure: `train --backend cuda` then stops in select_backend
// with the reason; `plan --backend cuda` (must_measure) needs --device-memory. The emulated
// device (cuda-emu) allocates what the CUDA backend does, in host memory.
Placement place(const std::string& backend_choice, const std::string& device_memory, bool must_measure,
                int device) {
  if (backend_choice != "auto" && backend_choice != "cpu" && backend_choice != "cuda" && backend_choice != "cuda-emu")
    throw InputError("unknown backend '" + backend_choice + "' (expected auto, cpu, cuda or cuda-emu)");
  const bool emulated = backend_choice == "cuda-emu";
  const bool gpu_usable = query_cuda_device(device).usable;
  const std::string kind = emulated ? "cuda" : backend_choice == "auto" ? (gpu_usable ? "cuda" : "cpu") : backend_choice;
  if (!device_memory.empty()) return {kind, parse_bytes(device_memory), false};
  const bool measurable = kind == "cpu" || emulated || gpu_usable;
  if (must_measure && !measurable)
    throw InputError("plan --backend cuda: no usable CUDA GPU to measure; give --device-memory");
  return {kind, measurable ? available_memory(emulated ? "cpu" : kind, device) : SIZE_MAX, true};
}

// --attention cudnn on a backend without cuDNN: one line, and its own attention runs.
void note_attention_without_cuda(const Backend& backend, const std::string& attention, std::ostream& out) {
  if (attention == "cudnn" && backend.name() != "cuda")
    out << "attention: the " << backend.name() << " backend has no cuDNN; tinytrain's attention kernel runs"
              << std::endl;
}

// `tinytrain plan`: the table, the largest batch per recompute mode, and the answer: whether this
// run fits in the memory given (--device-memory) or free, and if not, which computed remedies
// would (exit 1). Allocates nothing.
int run_plan(const TrainOptions& train, const Placement& where) {
  const MemoryPlan plan = plan_training(train, where.kind);
  print_plan(plan, train, where.kind, std::cout);
  std::cout << "largest batch that fits in " << where.available / 1048576 << " MiB (grad-accum 1):";
  for (Recompute r : {Recompute::None, Recompute::Ffn, Recompute::Layer})
    std::cout << " recompute " << recompute_name(r) << ": " << largest_micro_batch(train, r, where.available, where.kind)
              << (r == Recompute::Layer ? "" : ",");
  std::cout << std::endl;
  const size_t need = plan.device_bytes();
  if (need > where.available) {
    std::cout << "does not fit: " << out_of_memory_message(train, where.kind, where.available, "") << std::endl;
    return 1;
  }
  char line[160];
  std::snprintf(line, sizeof(line), "fits: the plan needs %.1f MiB of the %.1f MiB %s (%.1f MiB to spare)",
                need / 1048576.0, where.available / 1048576.0, where.measured ? "free" : "given",
                (where.available - need) / 1048576.0);
  std::cout << line << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tinytrain: a from-scratch Transformer training engine (CPU and CUDA)"};
  app.require_subcommand(1);
  std::string backend_choice = "auto", attention = "ours", precision = "fp32", recompute = "none";
  int threads = 0;
  GpuOptions gpu;
  auto add_common = [&](CLI::App* cmd) {
    cmd->add_option("--backend", backend_choice, "auto | cpu | cuda | cuda-emu (the CUDA kernels on the CPU: slow)")->capture_default_str();
    add_int_option(cmd, "--threads", threads, "CPU threads for the CPU backend (0: all cores)", 0, 65536);
    cmd->add_flag("--tf32", gpu.tf32, "CUDA: allow TF32 tensor-core GEMMs (off: exact fp32)");
    cmd->add_option("--recompute", recompute, "none | ffn | layer: activations backward recomputes")
        ->capture_default_str();
    cmd->add_option("--precision", precision, "fp32 | bf16 | fp16: storage of activations and working weights")
        ->capture_default_str();
    cmd->add_option("--attention", attention, "CUDA attention: ours | cudnn (cuDNN fused, where it supports the case)")
        ->capture_default_str()
        ->check(CLI::IsMember({"ours", "cudnn"}));
  };

  TrainOptions train;
  train.optimizer.lr = 1e-4;  // the seed workload's learning rate
  std::string activation = "relu", pos_embedding = "none", seed;
  CLI::App* train_cmd = app.add_subcommand("train", "train on random tokens (no flags: the seed workload)");
  add_train_flags(train_cmd, train, activation, pos_embedding, seed);
  add_data_parallel_flags(train_cmd, train.data_parallel);
  add_common(train_cmd);
  add_int_option(train_cmd, "--log-every", train.log_every, "log every N steps");
  std::string cuda_graph = "on";
  train_cmd->add_option("--cuda-graph", cuda_graph, "CUDA: replay each step as one graph (on) or run eagerly (off)")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));

  double comm_timeout = 300;
  train_cmd->add_option("--comm-timeout", comm_timeout,
                        "several ranks: seconds a collective may wait for the others before this rank stops (a rank "
                        "died or hangs)")
      ->capture_default_str();
  // Checkpoints (engine/io/checkpoint.h): train-only flags, so `plan` takes the same model flags.
  CheckpointOptions& ckpt = train.checkpoint;
  train_cmd->add_option("--save-dir", ckpt.save_dir,
                        "save checkpoints as DIR/ckpt_<step>.safetensors (after the last step at least)");
  add_int_option(train_cmd, "--save-every", ckpt.save_every,
                 "with --save-dir: save after every N steps too (0: the last only)", 0, INT_MAX);
  add_int_option(train_cmd, "--keep", ckpt.keep, "with --save-dir: keep the newest K checkpoints, delete older (0: all)",
                 0, INT_MAX);
  // Training on a prepared data directory (docs/toy-lm.md): train-only flags too.
  DataOptions& data = train.data;
  train_cmd->add_option("--data", data.dir,
                        "train a causal language model on DIR/train.bin (from `tinytrain prepare`); --vocab-size "
                        "defaults to its tokenizer's");
  add_int_option(train_cmd, "--eval-every", data.eval_every,
                 "with --data: validation loss on DIR/val.bin before every N-th step and after the last (0: never)",
                 0, INT_MAX);
  add_int_option(train_cmd, "--eval-batches", data.eval_batches, "with --data: batches of fixed val.bin windows per evaluation",
                 1, INT_MAX);
  train_cmd->add_option("--metrics", train.metrics_path, "write one JSON line per logged step to FILE.jsonl");
  train_cmd->add_option("--init-from", train.init_from,
                        "initial parameters from a safetensors state_dict (PyTorch names, tools/torch_interop.py)");
  train_cmd->add_option("--resume", ckpt.resume,
                        "continue from a checkpoint: a file, or a directory's latest (same model, optimizer, precision, "
                        "seed, batch, seq)");

  CLI::App* plan_cmd = app.add_subcommand(
      "plan", "print the memory plan of `train` with the same flags, allocating nothing, and whether it fits (exit 1: no)");
  add_train_flags(plan_cmd, train, activation, pos_embedding, seed);
  add_data_parallel_flags(plan_cmd, train.data_parallel);
  add_common(plan_cmd);
  int plan_ranks = 0;
  add_int_option(plan_cmd, "--ranks", plan_ranks, "plan per rank for this many data-parallel ranks (0: the launch's)",
                 0, 65536);
  std::string device_memory;
  for (CLI::App* cmd : {train_cmd, plan_cmd})
    cmd->add_option("--device-memory", device_memory,
                    "memory to plan for, e.g. 80GiB (default: the device's free memory; on the CPU MemAvailable)");

  // `profile` (engine/profile/profile_run.h): `train`'s model, run and optimizer flags, a few steps in
  // one process, every op timed; no log, no ranks.
  ProfileOptions profile;
  CLI::App* profile_cmd = app.add_subcommand(
      "profile", "time every op of a few training steps (train's model, run and optimizer flags): per-op table, roofline, "
      "Chrome trace");
  add_train_flags(profile_cmd, train, activation, pos_embedding, seed);
  add_common(profile_cmd);
  profile_cmd->get_option("--steps")->description("steps to run; the first is a warm-up, not counted")->default_str("3");
  profile_cmd->add_option("--trace", profile.trace_path,
                          "write a Chrome trace of the counted steps to FILE.json (ui.perfetto.dev, chrome://tracing)");

  std::string reference;
  CLI::App* verify_cmd = app.add_subcommand("verify", "replay a PyTorch reference and compare, one row per tensor");
  verify_cmd->add_option("reference", reference, "reference .safetensors written by tools/make_reference.py")
      ->required();
  add_common(verify_cmd);

  PrepareOptions prepare;
  std::string prepare_seed = std::to_string(prepare.seed);
  CLI::App* prepare_cmd = app.add_subcommand("prepare", "text files to token shards and a tokenizer (docs/toy-lm.md)");
  prepare_cmd->add_option("--input", prepare.inputs, "text files and directories (walked recursively)")->required();
  prepare_cmd->add_option("--out", prepare.out_dir, "output directory: train.bin, val.bin, tokenizer.json")->required();
  prepare_cmd->add_option("--tokenizer", prepare.tokenizer, "bpe (SentencePiece, trained here) | byte")
      ->capture_default_str();
  add_int_option(prepare_cmd, "--vocab-size", prepare.vocab_size, "bpe vocabulary size (0: 4096)");
  prepare_cmd->add_option("--val-fraction", prepare.val_fraction, "share of documents held out for val, in (0, 0.5]")
      ->capture_default_str();
  prepare_cmd->add_option("--seed", prepare_seed, "seed of the train/val split and the tokenizer, in [0, 2^63)")
      ->capture_default_str();

  // `sample` (cli/sampler.h): text from a checkpoint of a causal model.
  SampleOptions sample;
  std::string sample_seed = std::to_string(sample.seed);
  CLI::App* sample_cmd = app.add_subcommand("sample", "generate text from a checkpoint of a causal model");
  sample_cmd->add_option("--checkpoint", sample.checkpoint, "a checkpoint written by train --save-dir, or that directory (its latest)")->required();
  sample_cmd->add_option("--prompt", sample.prompt, "text the samples continue (after the end-of-text id)");
  add_int_option(sample_cmd, "--max-new-tokens", sample.max_new_tokens, "tokens to draw per sample, at most");
  sample_cmd->add_option("--temperature", sample.temperature, "divides the logits; 0: greedy")->capture_default_str();
  add_int_option(sample_cmd, "--top-k", sample.top_k, "draw from the k likeliest ids only (0: all)");
  sample_cmd->add_option("--seed", sample_seed, "seed of the draws, in [0, 2^63)")->capture_default_str();
  add_int_option(sample_cmd, "--num-samples", sample.num_samples, "samples, generated side by side");
  sample_cmd->add_option("--tokenizer", sample.tokenizer_dir,
                         "directory with tokenizer.json (default: the one the checkpoint names)");
  sample_cmd->add_option("--dump-logits", sample.dump_logits,
                         "instead of sampling, write the prompt's logits at every position to this safetensors file");
  sample_cmd->add_option("--backend", backend_choice, "auto | cpu | cuda | cuda-emu")->capture_default_str();
  add_int_option(sample_cmd, "--threads", threads, "CPU threads for the CPU backend (0: all cores)", 0, 65536);

  // `doctor` (engine/doctor/doctor.h): the hardware/software chain probed link by link, peaks measured.
  DoctorOptions doctor;
  CLI::App* doctor_cmd = app.add_subcommand(
      "doctor", "probe the CPU, GPU, driver and libraries, measure their peaks (exit 1: a link training needs is broken)");
  doctor_cmd->add_flag("--json", doctor.json, "one JSON document with every probe instead of lines");
  doctor_cmd->add_option("--backend", doctor.backend, "the backend training would use: auto | cpu | cuda | cuda-emu")
      ->capture_default_str();
  add_int_option(doctor_cmd, "--threads", threads, "CPU threads for the CPU probes and backend (0: all cores)", 0, 65536);

  // `ops` (engine/ops/ops_run.h): every backend op against the CPU backend (check), or timed (perf).
  OpsOptions ops;
  CLI::App* ops_cmd = app.add_subcommand(
      "ops", "check every backend op against the CPU backend (exit 1: one is beyond tolerance), or time each one");
  ops_cmd->add_option("mode", ops.mode, "check | perf")->required()->check(CLI::IsMember({"check", "perf"}));
  ops_cmd->add_option("--op", ops.op, "only this op, or the ops whose names contain it (e.g. linear)");
  ops_cmd->add_option("--backend", backend_choice, "auto | cpu | cuda | cuda-emu")->capture_default_str();
  ops_cmd->add_option("--dtype", ops.dtype, "only this storage dtype: fp32 | bf16 | fp16 (default: all three)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  add_int_option(ops_cmd, "--threads", threads, "CPU threads for the CPU backend (0: all cores)", 0, 65536);

  // CLI11 would call an unknown command "no subcommand"; name it instead.
  std::string names;  // every command, for that message
  bool known = false;
  for (const CLI::App* cmd : app.get_subcommands([](const CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + cmd->get_name();
    known = known || (argc > 1 && cmd->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::cerr << "error: unknown command '" << argv[1] << "' (expected one of " << names << "; see --help)" << std::endl;
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << " (see --help)" << std::endl;
    return 2;
  }

  try {
    if (*prepare_cmd) {
      prepare.seed = parse_integer(prepare_seed, 0, INT64_MAX, "invalid config: --seed");
      run_prepare(prepare, std::cout);
      return 0;
    }
    set_cpu_threads(threads);
    if (*ops_cmd) {
      ops.backend_choice = backend_choice;
      return run_ops(ops, std::cout);
    }
    if (*doctor_cmd) return run_doctor(doctor, std::cout);
    if (*sample_cmd) {
      sample.seed = parse_integer(sample_seed, 0, INT64_MAX, "invalid option: --seed");
      auto backend = select_backend(backend_choice, gpu, std::cout);
      run_sample(*backend, sample, std::cout);
      return 0;
    }
    // --attention cudnn: the CUDA backend says, once its model is planned, whether cuDNN
    // serves the attention (a line "attention: ..."); other backends have no cuDNN.
    gpu.cudnn_attention = attention == "cudnn";
    train.cuda_graph = cuda_graph == "on";
    const Precision chosen_precision = parse_precision(precision);
    if (*train_cmd || *plan_cmd || *profile_cmd) {
      if (*profile_cmd && profile_cmd->get_option("--steps")->count() == 0) train.run.steps = 3;
      train.run.seed = parse_integer(seed, 0, INT64_MAX, "invalid config: --seed");
      // --data: the vocabulary is the tokenizer's unless given.
      if (*train_cmd && !train.data.dir.empty() && train_cmd->get_option("--vocab-size")->count() == 0)
        train.model.vocab_size = TokenDataset::tokenizer_vocab_size(train.data.dir);
      train.model.activation = parse_activation(activation);
      train.model.pos_embedding = parse_pos_embedding(pos_embedding);
      train.model.validate();
      // The decaying schedules end at --steps; the constant one needs no end (0: resumable with any --steps).
      if (train.optimizer.schedule.kind != LrScheduleKind::Constant)
        train.optimizer.schedule.total_steps = train.run.steps;
      train.optimizer.validate();
      train.run.validate(train.model);
      train.precision = chosen_precision;
      train.recompute = parse_recompute(recompute);
      validate_loss_scaler(train.loss_scaler);
      check_data_parallel(train.data_parallel);
      check_checkpoint_options(train.checkpoint);
      check_data_options(train);
      if (train.log_every <= 0)
        throw InputError("invalid config: --log-every must be positive, got " + std::to_string(train.log_every));
      if (!(std::isfinite(comm_timeout) && comm_timeout > 0))
        throw InputError("invalid config: --comm-timeout must be a positive number of seconds");
      // The launch (mpirun or torchrun-style variables) before the backend: each rank takes
      // its rows of the batch, the GPU its LOCAL_RANK names, and only rank 0 prints.
      const Launch launch = detect_launch();
      train.ranks = *plan_cmd && plan_ranks > 0 ? plan_ranks : launch.world_size;
      if (*profile_cmd && train.ranks > 1)
        throw InputError("profile runs in one process: start it without mpirun or torchrun's variables");
      check_world_size(train.run.batch, train.ranks);
      check_grad_accum(train.run.batch / train.ranks, train.grad_accum);
      const Placement where =
          place(backend_choice, device_memory, /*must_measure=*/static_cast<bool>(*plan_cmd), launch.local_rank);
      if (*plan_cmd) return run_plan(train, where);
      // The plan is checked before the backend exists, against the memory free right now.
      if (plan_training(train, where.kind).device_bytes() > where.available)
        throw InputError(out_of_memory_message(train, where.kind, where.available, ""));
      if (*profile_cmd) {
        profile.train = train;
        profile.backend_choice = backend_choice;
        profile.tf32 = gpu.tf32;
        check_profile_options(profile);
        auto backend = select_backend(backend_choice, gpu, std::cout);
        note_attention_without_cuda(*backend, attention, std::cout);
        run_profile(*backend, profile, std::cout);
        return 0;
      }
      std::ostream null_out(nullptr);
      std::ostream& out = launch.rank == 0 ? std::cout : null_out;
      gpu.device = launch.local_rank;
      // (comm is declared before the backend so that it outlives it: NCCL's shutdown waits for
      // the CUDA graph holding its calls, which the backend owns, to be destroyed first)
      std::unique_ptr<Communicator> comm;
      auto backend = select_backend(backend_choice, gpu, out);
      note_attention_without_cuda(*backend, attention, out);
      // (the emulated CUDA backend is named "cuda" too, but its stream is no GPU's: no NCCL)
      const std::string transport_for = backend_choice == "cuda-emu" ? "cuda-emu" : backend->name();
      comm = make_communicator(launch, transport_for, backend->native_stream(), comm_timeout);
      check_world_size(train.run.batch, comm->world_size());  // (an MPI launch may name its size only now)
      check_grad_accum(train.run.batch / comm->world_size(), train.grad_accum);
      train.ranks = comm->world_size();
      check_same_settings(*comm, *backend, settings_of(*train_cmd));
      train.mfu = mfu_reference(backend_choice, backend->name(), train.precision, gpu.tf32, launch.local_rank);
      run_training(*backend, train, out, comm.get());
      return 0;
    }
    auto backend = select_backend(backend_choice, gpu, std::cout);
    note_attention_without_cuda(*backend, attention, std::cout);
    return run_verify(*backend, reference, std::cout, chosen_precision) ? 0 : 1;
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << std::endl;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of host memory" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
  }
  return 1;
}
