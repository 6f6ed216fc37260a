// The `train` command's loop: batches in, steps, evaluation, log lines, metrics, checkpoints.
#include "cli/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/io/checkpoint.h"
#include "engine/io/checksum.h"
#include "engine/io/hf_config.h"
#include "engine/io/peft_adapter.h"
#include "engine/io/hf_weights.h"
#include "engine/token_batch.h"
#include "engine/flops.h"
#include "engine/init.h"
#include "engine/lora.h"
#include "engine/memory_plan.h"
#include "engine/io/metrics_log.h"
#include "engine/io/token_dataset.h"
#include "engine/profile/mfu.h"
#include "kernels/common/lr_schedule.h"

namespace tt {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

// Step time: the median over the windows between log points (each log reads the loss and so
// waits for the backend). The first window (ending at the first step trained) is not timed, so
// one-time costs (first touch of memory, GEMM plans, graph capture) stay out of the median as
// long as there are a few windows. Time spent evaluating or saving checkpoints is taken out of
// its window.
class StepTimer {
 public:
  explicit StepTimer(int first_step) : window_first_step_(first_step) {}
  // Ends the window at `next_step` (the steps before it are done); its ms per step, or nothing
  // for the first window.
  std::optional<double> close_window(int next_step) {
    std::optional<double> ms;
    if (!first_window_ && next_step > window_first_step_) {
      ms = (ms_since(window_start_) - excluded_ms_) / (next_step - window_first_step_);
      windows_.push_back(*ms);
    }
    first_window_ = false;
    window_start_ = Clock::now();
    window_first_step_ = next_step;
    excluded_ms_ = 0;
    return ms;
  }
  void exclude(double ms) { excluded_ms_ += ms; }
  int window_first_step() const { return window_first_step_; }
  // The median of the windows so far; nothing before the first timed window.
  std::optional<double> median_ms() const {
    if (windows_.empty()) return std::nullopt;
    std::vector<double> sorted = windows_;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  }

 private:
  std::vector<double> windows_;
  Clock::time_point window_start_ = Clock::now();
  int window_first_step_;
  bool first_window_ = true;
  double excluded_ms_ = 0;
};

// " (15.1 MB, 45 ms)": a checkpoint's size (MiB, like the alloc) and the time it took.
std::string size_and_time(const std::string& path, double ms) {
  std::error_code ec;
  const double mib = static_cast<double>(std::filesystem::file_size(path, ec)) / (1024.0 * 1024.0);
  char text[64];
  std::snprintf(text, sizeof(text), " (%.1f MB, %.0f ms)", ec ? 0.0 : mib, ms);
  return text;
}

// "3m12s", "1h05m", "42s"
std::string duration_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof(text), "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60)
    std::snprintf(text, sizeof(text), "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof(text), "%lds", s);
  return text;
}

// A metrics value: JSON null when not measured (NaN) or not finite.
nlohmann::json or_null(double value) { return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr); }

// The captured step's graph nodes by kind, with their total; null before a step was captured
// (the eager first step, or no CUDA graphs).
nlohmann::json graph_nodes_json(const std::optional<GraphNodeCount>& nodes) {
  if (!nodes) return nullptr;
  return {{"total", nodes->total()},
          {"gemm", nodes->gemm},
          {"attention", nodes->attention},
          {"elementwise", nodes->elementwise},
          {"reduction", nodes->reduction},
          {"optimizer", nodes->optimizer},
          {"memset_copy", nodes->memset_copy},
          {"other", nodes->other}};
}

}  // namespace

void check_data_options(const TrainOptions& o) {
  const DataOptions& d = o.data;
  if (d.eval_every < 0) throw InputError("invalid config: --eval-every must be 0 (never) or more");
  if (d.eval_batches <= 0) throw InputError("invalid config: --eval-batches must be positive");
  if (d.dir.empty() && d.eval_every > 0)
    throw InputError("invalid config: --eval-every evaluates on DIR/val.bin: it needs --data DIR");
  if (!d.dir.empty() && !o.model.causal)
    throw InputError("invalid config: --data trains a language model, which needs --causal true (a bidirectional "
                     "model sees the very token it is asked to predict)");
  std::error_code ec;
  if (!o.init_from.empty() && std::filesystem::is_directory(o.init_from, ec) && !is_hf_model_dir(o.init_from))
    throw InputError(o.init_from + ": a directory without config.json: --init-from takes a state_dict safetensors "
                     "file or a Hugging Face model directory");
  // LoRA trains adapters on a frozen base, which only --init-from gives (also when resuming:
  // checkpoints hold the adapters)
  if (o.lora.enabled() && o.init_from.empty())
    throw InputError("invalid config: --lora-rank trains adapters on a frozen model: give it with --init-from BASE");
  if (!o.lora.enabled() && !o.init_from.empty() && !o.checkpoint.resume.empty())
    throw InputError("invalid config: --init-from and --resume both set the parameters: give one");
}

void run_training(Backend& backend, const TrainOptions& o, std::ostream& rank0_log, Communicator* comm) {
  const int B = o.run.batch, T = o.run.seq;
  std::ostream null_log(nullptr);  // discards: ranks other than 0 train silently
  std::ostream& log = comm == nullptr || comm->rank() == 0 ? rank0_log : null_log;
  const bool rank0 = comm == nullptr || comm->rank() == 0;
  const LossScalerConfig scaler = loss_scaler_for(o.precision, o.loss_scaler);
  // The data first: a bad directory costs no allocation.
  std::unique_ptr<TokenDataset> dataset;
  if (!o.data.dir.empty()) dataset = std::make_unique<TokenDataset>(TokenDataset::open(o.data.dir, o.model.vocab_size, T));
  // The plan was checked against the free memory before; an allocation can still fail (other
  // processes, fragmentation): say so with the plan's numbers, before the first step.
  std::unique_ptr<Trainer> owned;
  try {
    owned = std::make_unique<Trainer>(backend, o, comm);
  } catch (const std::runtime_error& e) {
    throw InputError(out_of_memory_message(o, backend.name(), available_memory(backend.name()), e.what()));
  }
  Trainer& trainer = *owned;
  if (!trainer.model().attention_note().empty()) log << "attention: " << trainer.model().attention_note() << std::endl;
  if (dataset)
    log << "data: " << dataset->dir() << ": train " << dataset->train_tokens() << " tokens, val "
        << dataset->val_tokens() << " tokens, vocab " << o.model.vocab_size << std::endl;
  // What the batches are, compared on resume: a checkpoint of one data source never resumes
  // on another. Where the tokenizer is, for `sample` (written, not compared: data may move).
  std::map<std::string, std::string> data_identity = {{"data", dataset ? dataset->identity() : "random"}};
  // LoRA: the frozen base, from --init-from; its fingerprint joins what a resume compares, so
  // adapters never resume on another base
  if (o.lora.enabled()) {
    const std::vector<float> base = is_hf_model_dir(o.init_from)
                                        ? read_hf_params(o.init_from, read_hf_config(o.init_from, o.model.dropout))
                                        : read_state_dict(o.init_from, o.model);
    trainer.model().load_base(base.data());
    Checksum fingerprint;
    fingerprint.add(base.data(), base.size() * sizeof(float));
    data_identity["lora_base"] = fingerprint.hex();
    log << "lora: rank " << o.lora.rank << ", alpha " << o.lora.alpha << ", dropout " << o.lora.dropout << " on "
        << lora_targets_text(o.model, o.lora) << ": " << trainer.model().layout().total() << " trainable of "
        << trainer.model().base_layout().total() << " frozen parameters (base " << o.init_from
        << (o.lora.nf4_base ? ", its linear weights in NF4" : "") << ")" << std::endl;
  }
  std::map<std::string, std::string> notes;
  if (dataset && dataset->has_tokenizer()) notes["tokenizer"] = dataset->dir();  // (llm.c shards have none)
  const CheckpointOptions& ckpt = o.checkpoint;
  // The first step to train: 0, or the steps a checkpoint has completed. Loading happens before
  // the first step, so graph capture and everything after it are those of a fresh run.
  int start = 0;
  if (!ckpt.resume.empty()) {
    const Clock::time_point load_start = Clock::now();
    const std::string path = find_resume_checkpoint(ckpt.resume);
    start = load_checkpoint(path, trainer, o, data_identity);
    backend.synchronize();
    log << "checkpoint: resumed from " << path << " at step " << start << size_and_time(path, ms_since(load_start))
        << std::endl;
    if (start >= o.run.steps) {
      log << "checkpoint: step " << start << " is at or past --steps " << o.run.steps << ": nothing to train"
          << std::endl;
      return;
    }
  } else if (!o.lora_from.empty()) {
    trainer.load_params(read_peft_adapter(o.lora_from, o.model).adapters.data());
    log << "init: adapters from " << o.lora_from << " (PEFT)" << std::endl;
  } else if (o.lora.enabled()) {
    trainer.load_params(lora_init(trainer.model().layout(), o.run.seed).data());
  } else if (!o.init_from.empty() && is_hf_model_dir(o.init_from)) {  // (its config.json set o.model)
    trainer.load_params(read_hf_params(o.init_from, read_hf_config(o.init_from, o.model.dropout)).data());
    log << "init: parameters from " << o.init_from << " (Hugging Face)" << std::endl;
  } else if (!o.init_from.empty()) {
    trainer.load_params(read_state_dict(o.init_from, o.model).data());
    log << "init: parameters from " << o.init_from << std::endl;
  } else {
    trainer.load_params(init_params(trainer.model().layout(), o.model, o.run.seed, o.init).data());
  }
  if (!ckpt.save_dir.empty() && trainer.rank() == 0) create_checkpoint_dir(ckpt.save_dir);
  MetricsLog metrics(rank0 ? o.metrics_path : "", start);
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  const double alloc_mb = static_cast<double>(trainer.bytes()) / (1024.0 * 1024.0);
  StepTimer timer(start);
  // Achieved TFLOP/s: the step's model FLOPs (engine/flops.h) over its time, all ranks together;
  // MFU: one rank's share of them over its device's measured peak (engine/profile/mfu.h).
  const double step_flops = training_step_flops(o.model, B, T, o.recompute, o.lora).model();
  auto tflops_at = [&](double ms_per_step) { return step_flops / (ms_per_step * 1e-3) / 1e12; };
  auto mfu_at = [&](double ms_per_step) { return mfu(tflops_at(ms_per_step) / trainer.world_size(), o.mfu); };
  // " | 0.066 TFLOP/s | MFU 56.4%": what every step line ends with ("?" before the first timing;
  // no MFU field without a measured peak; no number above 100%, where the peak is stale: mfu_text).
  auto speed_fields = [&](const std::optional<double>& ms) {
    if (!ms) return std::string(" | ? TFLOP/s") + (o.mfu.peak_tflops > 0 ? " | MFU ?" : "");
    char text[64];
    std::snprintf(text, sizeof(text), " | %.3f TFLOP/s", tflops_at(*ms));
    return std::string(text) + (o.mfu.peak_tflops > 0 ? " | " + mfu_text(mfu_at(*ms)) : "");
  };

  // Without dynamic scaling a skipped step means the gradients (and so the loss) went
  // non-finite: stop rather than train on garbage. fp16 skips and recovers by design.
  auto stop_if_diverged = [&](const LossScalerStatus& status) {
    if (!scaler.dynamic && status.first_skipped_step >= 0)
      throw InputError("training diverged: the loss became non-finite at step " +
                       std::to_string(status.first_skipped_step) + " (" + precision_name(o.precision) +
                       " has no loss scaling to recover; try a lower --lr)");
  };
  // The validation loss with the parameters after `done` steps (every rank takes part).
  std::optional<double> last_val;
  auto evaluate = [&](int done) {
    const HostWait guard(comm, "an evaluation");
    const Clock::time_point eval_start = Clock::now();
    double sum = 0;
    for (int k = 0; k < o.data.eval_batches; ++k) {
      dataset->val_batch(k, o.data.eval_batches, B, T, x.data(), y.data());
      sum += trainer.evaluate(x.data(), y.data());
    }
    last_val = sum / o.data.eval_batches;
    timer.exclude(ms_since(eval_start));
    if (!std::isfinite(*last_val))
      throw InputError("training diverged: the validation loss is not finite after step " + std::to_string(done));
    return *last_val;
  };
  auto eval_due = [&](int step) { return dataset && o.data.eval_every > 0 && step % o.data.eval_every == 0; };
  // A checkpoint after `done` completed steps (every --save-every, and the last): every rank
  // takes part (ZeRO-1 gathers the moments), rank 0 writes, then deletes beyond --keep.
  auto save_after = [&](int done) {
    const bool due = done == o.run.steps || (ckpt.save_every > 0 && done % ckpt.save_every == 0);
    if (ckpt.save_dir.empty() || !due) return;
    const HostWait guard(comm, "a checkpoint save");
    backend.synchronize();  // (the steps before it are not the save's time)
    const Clock::time_point save_start = Clock::now();
    const std::string path = checkpoint_path(ckpt.save_dir, done);
    save_checkpoint(path, trainer, done, o, data_identity, notes);
    if (trainer.rank() != 0) return;
    prune_checkpoints(ckpt.save_dir, ckpt.keep);
    const double ms = ms_since(save_start);
    timer.exclude(ms);
    log << "checkpoint: " << path << size_and_time(path, ms) << std::endl;
  };
  // One log line, and its metrics record: the loss of this step's forward, before its update.
  auto log_step = [&](int step, const std::optional<double>& val) {
    const double loss = trainer.read_loss();
    const LossScalerStatus status = trainer.scaler().read();
    const std::optional<double> ms = timer.close_window(step + 1);
    stop_if_diverged(status);
    const double lr = scheduled_lr(o.optimizer.lr, o.optimizer.schedule, step);
    const double ms_per_step = ms ? *ms : NAN, tokens_per_s = 1e3 * B * T / ms_per_step;
    char line[320];
    if (dataset) {  // the progress line of a long run
      const std::optional<double> median = timer.median_ms();
      const std::string eta = median ? duration_text(*median * (o.run.steps - step - 1) / 1e3) : "?";
      const std::string speed = ms ? std::to_string(std::lround(tokens_per_s)) : "?";
      char val_text[32] = "-";
      if (last_val) std::snprintf(val_text, sizeof(val_text), "%.4f", *last_val);
      std::snprintf(line, sizeof(line), "step %d/%d | loss %.4f | val %s | lr %.3e | %s tokens/s | ETA %s | alloc %.1f MB",
                    step, o.run.steps, loss, val_text, lr, speed.c_str(), eta.c_str(), alloc_mb);
    } else if (scaler.dynamic) {
      std::snprintf(line, sizeof(line), "step %3d | loss %.4f | scale %g | skipped %d | alloc %.1f MB", step, loss,
                    status.scale, status.skipped_steps, alloc_mb);
    } else {
      std::snprintf(line, sizeof(line), "step %3d | loss %.4f | alloc %.1f MB", step, loss, alloc_mb);
    }
    log << line << speed_fields(ms) << std::endl;
    metrics.write({{"step", step},
                   {"loss", or_null(loss)},
                   {"val_loss", or_null(val.value_or(NAN))},
                   {"lr", lr},
                   {"grad_norm", or_null(status.grad_norm / status.scale)},
                   {"tokens_per_s", or_null(tokens_per_s)},
                   {"ms_per_step", or_null(ms_per_step)},
                   {"loss_scale", status.scale},
                   {"alloc_mb", alloc_mb},
                   {"tflops", or_null(ms ? tflops_at(*ms) : NAN)},
                   {"mfu", or_null(ms && mfu_at(*ms) <= kMfuBeyondPeak ? mfu_at(*ms) : NAN)},
                   {"graph_nodes", graph_nodes_json(trainer.graph_nodes())}});
  };
  // A validation-only record (an evaluation at a step that is not logged, or after the last).
  auto log_val_only = [&](int step, double val) {
    metrics.write({{"step", step}, {"loss", nullptr}, {"val_loss", val}, {"lr", nullptr}, {"grad_norm", nullptr},
                   {"tokens_per_s", nullptr}, {"ms_per_step", nullptr}, {"loss_scale", nullptr},
                   {"alloc_mb", alloc_mb}, {"tflops", nullptr}, {"mfu", nullptr}, {"graph_nodes", nullptr}});
  };

  for (int step = start; step < o.run.steps; ++step) {
    // The validation loss before this step: the parameters after `step` updates.
    std::optional<double> val;
    if (eval_due(step)) val = evaluate(step);
    {
      // (several ranks: a step that waits on its collectives longer than --comm-timeout ends the run)
      const HostWait guard(comm, "a training step");
      if (dataset)
        dataset->train_batch(o.run.seed, static_cast<uint32_t>(step), B, T, x.data(), y.data());
      else
        random_batch(o.run.seed, static_cast<uint32_t>(step), B, T, o.model.vocab_size, x.data(), y.data());
      trainer.load_batch(x.data(), y.data(), static_cast<uint32_t>(step));
      trainer.train_step(o.cuda_graph);
      if (step % o.log_every == 0)
        log_step(step, val);
      else if (val)
        log_val_only(step, *val);
    }
    save_after(step + 1);  // the state after this step's update: step + 1 steps completed
  }
  {
    const HostWait guard(comm, "the last step");
    backend.synchronize();
  }
  if (timer.window_first_step() < o.run.steps) timer.close_window(o.run.steps);
  stop_if_diverged(trainer.scaler().read());  // steps after the last log point count too
  if (dataset && o.data.eval_every > 0) {
    const double val = evaluate(o.run.steps);
    log_val_only(o.run.steps, val);
    char line[96];
    std::snprintf(line, sizeof(line), "final val loss %.4f (after step %d, %d x %d windows of val.bin)", val,
                  o.run.steps, o.data.eval_batches, B);
    log << line << std::endl;
  }
  const int trained = o.run.steps - start;  // by this process
  if (const std::optional<double> ms = timer.median_ms()) {
    // Several ranks: the world size, and with a host transport the mean time a step spent in
    // collectives (NCCL's run on the stream, overlapped: not measurable from the host).
    std::string ranks;
    if (trainer.world_size() > 1) {
      ranks = " | " + std::to_string(trainer.world_size()) + " ranks";
      if (trainer.host_comm_seconds() > 0) {
        char comm_text[64];
        std::snprintf(comm_text, sizeof(comm_text), " | comm %.2f ms/step", 1e3 * trainer.host_comm_seconds() / trained);
        ranks += comm_text;
      }
    }
    // At the median step time; and which peak the MFU is against, or why there is none.
    char line[256];
    std::snprintf(line, sizeof(line), "done: %d steps | %.1f tokens/s | %.2f ms/step", trained, 1e3 * B * T / *ms, *ms);
    // With CUDA graphs: how many of this process's steps replayed the captured step.
    const std::string graphs =
        trainer.graph_replays() > 0 ? " | " + std::to_string(trainer.graph_replays()) + " steps replayed a CUDA graph" : "";
    const std::optional<GraphNodeCount> nodes = trainer.graph_nodes();
    const std::string graph_nodes = nodes ? " | " + graph_nodes_text(*nodes) : "";
    // GEMMs that ran on a slower kernel than asked (said once each on stderr as they happened)
    const std::string fallbacks = backend.gemm_fallbacks().empty() ? "" : " | " + backend.gemm_fallbacks();
    log << line << speed_fields(ms) << ranks << graphs << graph_nodes << fallbacks
        << (o.mfu.note.empty() ? "" : " (" + o.mfu.note + ")") << std::endl;
  }
}

}  // namespace tt
