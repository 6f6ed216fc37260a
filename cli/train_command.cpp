// `tinytrain train`: the seed workload by default, any member of the model family with flags;
// on random tokens or on `prepare`d shards (--data), on one process or several ranks, with
// checkpoints. The loop itself is cli/train_loop.h.
#include <cmath>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/rank_agreement.h"
#include "cli/train_flags.h"
#include "cli/train_loop.h"
#include "engine/io/checkpoint.h"
#include "engine/io/token_dataset.h"
#include "engine/profile/mfu.h"
#include "parallel/communicator.h"
#include "parallel/rank_launch.h"

namespace tt {

namespace {

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

class TrainCommand final : public Command {
 public:
  const char* name() const override { return "train"; }
  const char* summary() const override { return "train on random tokens (no flags: the seed workload)"; }

  void add_flags(CLI::App& cmd) override {
    cmd_ = &cmd;
    TrainOptions& o = flags_.options;
    flags_.add_to(cmd);
    flags_.add_data_parallel_to(cmd);
    add_threads_option(cmd, threads_);
    gpu_.add_to(cmd);
    add_int_option(cmd, "--log-every", o.log_every, "log every N steps");
    cmd.add_option("--cuda-graph", cuda_graph_, "CUDA: replay each step as one graph (on) or run eagerly (off)")
        ->capture_default_str()
        ->check(CLI::IsMember({"on", "off"}));
    cmd.add_option("--comm-timeout", comm_timeout_,
                   "several ranks: seconds a collective may wait for the others before this rank stops (a rank "
                   "died or hangs)")
        ->capture_default_str();
    // Checkpoints (engine/io/checkpoint.h).
    CheckpointOptions& ckpt = o.checkpoint;
    cmd.add_option("--save-dir", ckpt.save_dir,
                   "save checkpoints as DIR/ckpt_<step>.safetensors (after the last step at least)");
    add_int_option(cmd, "--save-every", ckpt.save_every,
                   "with --save-dir: save after every N steps too (0: the last only)", 0, INT_MAX);
    add_int_option(cmd, "--keep", ckpt.keep, "with --save-dir: keep the newest K checkpoints, delete older (0: all)",
                   0, INT_MAX);
    // Training on a prepared data directory (docs/toy-lm.md).
    DataOptions& data = o.data;
    cmd.add_option("--data", data.dir,
                   "train a causal language model on DIR/train.bin (from `tinytrain prepare`); --vocab-size "
                   "defaults to its tokenizer's");
    add_int_option(cmd, "--eval-every", data.eval_every,
                   "with --data: validation loss on DIR/val.bin before every N-th step and after the last (0: never)",
                   0, INT_MAX);
    add_int_option(cmd, "--eval-batches", data.eval_batches,
                   "with --data: batches of fixed val.bin windows per evaluation", 1, INT_MAX);
    cmd.add_option("--metrics", o.metrics_path, "write one JSON line per logged step to FILE.jsonl");
    cmd.add_option("--init-from", o.init_from,
                   "initial parameters from a safetensors state_dict (PyTorch names, tools/torch_interop.py), or "
                   "a Hugging Face directory of a LlamaForCausalLM or GPT2LMHeadModel, whose config.json then sets "
                   "the model");
    cmd.add_option("--lora-from", o.lora_from,
                   "LoRA: the initial adapters from a PEFT adapter directory (adapter_config.json sets rank, alpha, "
                   "dropout and targets), on the base --init-from gives");
    cmd.add_option("--resume", ckpt.resume,
                   "continue from a checkpoint: a file, or a directory's latest (same model, optimizer, precision, "
                   "seed, batch, seq)");
    cmd.add_option("--device-memory", device_memory_,
                   "memory to plan for, e.g. 80GiB (default: the device's free memory; on the CPU MemAvailable)");
  }

  int run() override {
    set_cpu_threads(threads_);
    TrainOptions& o = flags_.options;
    // --data: the vocabulary is the tokenizer's unless given.
    if (!o.data.dir.empty() && cmd_->get_option("--vocab-size")->count() == 0)
      o.model.vocab_size = TokenDataset::tokenizer_vocab_size(o.data.dir);
    flags_.finish();
    o.cuda_graph = cuda_graph_ == "on";
    check_checkpoint_options(o.checkpoint);
    check_data_options(o);
    if (o.log_every <= 0)
      throw InputError("invalid config: --log-every must be positive, got " + std::to_string(o.log_every));
    if (!(std::isfinite(comm_timeout_) && comm_timeout_ > 0))
      throw InputError("invalid config: --comm-timeout must be a positive number of seconds");
    // The launch (mpirun or torchrun-style variables) before the backend: each rank takes its
    // rows of the batch, the GPU its LOCAL_RANK names, and only rank 0 prints.
    const Launch launch = detect_launch();
    flags_.set_ranks(launch.world_size);
    // The plan is checked before the backend exists, against the memory free right now.
    flags_.check_fits(place_run(flags_.backend, device_memory_, /*must_measure=*/false, launch.local_rank));
    std::ostream null_out(nullptr);
    std::ostream& out = launch.rank == 0 ? std::cout : null_out;
    GpuOptions gpu = gpu_.options();
    gpu.device = launch.local_rank;
    // (comm is declared before the backend so that it outlives it: NCCL's shutdown waits for
    // the CUDA graph holding its calls, which the backend owns, to be destroyed first)
    std::unique_ptr<Communicator> comm;
    auto backend = select_backend(flags_.backend, gpu, out);
    gpu_.note_attention(*backend, out);
    comm = make_communicator(launch, running_backend_name(flags_.backend, *backend), backend->native_stream(),
                             comm_timeout_);
    flags_.set_ranks(comm->world_size());  // (an MPI launch may name its size only now)
    check_same_settings(*comm, *backend, settings_of(*cmd_));
    o.mfu = mfu_reference(flags_.backend, backend->name(), o.precision, gpu.tf32, launch.local_rank);
    run_training(*backend, o, out, comm.get());
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;  // for the flags as given: --vocab-size's count, the ranks' settings
  TrainFlags flags_;
  int threads_ = 0;
  GpuFlags gpu_;
  std::string cuda_graph_ = "on";
  double comm_timeout_ = 300;
  std::string device_memory_;
};

}  // namespace

std::unique_ptr<Command> make_train_command() { return std::make_unique<TrainCommand>(); }

}  // namespace tt
