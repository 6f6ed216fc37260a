// The flags of a training run (cli/train_flags.h).
#include "cli/train_flags.h"

#include <cmath>

#include "base/checked_input.h"
#include "cli/command.h"
#include "engine/io/hf_config.h"
#include "engine/io/peft_adapter.h"
#include "engine/memory_plan.h"
#include "engine/trainer.h"

namespace tt {

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return parts;
    start = comma + 1;
  }
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

}  // namespace

TrainFlags::TrainFlags() { options.optimizer.lr = 1e-4; }

void TrainFlags::add_to(CLI::App& cmd) {
  ModelConfig& m = options.model;
  add_int_option(cmd, "--vocab-size", m.vocab_size, "vocabulary size");
  add_int_option(cmd, "--d-model", m.d_model, "model width");
  add_int_option(cmd, "--n-head", m.n_head, "attention heads (must divide d-model)");
  add_int_option(cmd, "--n-layer", m.n_layer, "encoder layers");
  add_int_option(cmd, "--d-ff", m.d_ff, "feed-forward width");
  add_int_option(cmd, "--n-kv-head", m.n_kv_head,
                 "key/value heads, dividing --n-head (grouped-query attention; 1: multi-query; 0: --n-head)", 0);
  cmd.add_option("--arch", arch,
                 "a preset block: seed (the default), gpt2 (pre-norm, gelu, learned positions, causal, tied head) "
                 "or llama (pre-norm, rmsnorm, rope, swiglu, no bias, causal); flags given beside it win");
  cmd.add_option("--model-size", model_size,
                 "a published Llama's dimensions on the Llama block: 1b, 3b (Llama 3.2), 7b, 13b (Llama 2), 8b, 70b "
                 "(Llama 3.1); sources in engine/config.cpp");
  cmd.add_option("--init", init,
                 "initial parameters from --seed: pytorch (each module's PyTorch default) or hf (transformers': "
                 "N(0, 0.02) weights, GPT-2's residual projections scaled); default hf with --arch gpt2 or llama, "
                 "else pytorch");
  block_flags = {
      cmd.add_option("--activation", activation, "relu | gelu (exact erf) | swiglu (silu(gate) x up; --d-ff is the "
                                                 "width of each, so linear1 has 2 x d-ff outputs)")
          ->capture_default_str(),
      cmd.add_option("--norm-first", m.norm_first, "pre-norm (true, adds encoder.norm) or post-norm (false)")
          ->capture_default_str(),
      cmd.add_option("--causal", m.causal, "causal attention mask")->capture_default_str(),
      cmd.add_option("--pos-embedding", pos_embedding, "none | learned | rope (rotary, on q and k)")
          ->capture_default_str(),
      cmd.add_option("--norm", norm, "layernorm | rmsnorm (Llama's: no mean subtracted, no bias)")
          ->capture_default_str(),
      cmd.add_option("--bias", m.bias, "biases in every linear and LayerNorm (false: none)")->capture_default_str(),
      cmd.add_option("--head-bias", m.head_bias, "with --bias: the head's bias too (GPT-2's head has none)")
          ->capture_default_str(),
      cmd.add_option("--tie-embeddings", m.tie_embeddings,
                     "the head's weight is the embedding's transpose (one parameter; its gradient sums both uses)")
          ->capture_default_str()};
  cmd.add_option("--rope-theta", m.rope_theta, "RoPE's base (--pos-embedding rope)")->capture_default_str();
  add_int_option(cmd, "--max-seq-len", m.max_seq_len, "rows of the positional table; seq must not exceed it");
  cmd.add_option("--layer-norm-eps", m.layer_norm_eps, "the norms' epsilon")->capture_default_str();
  cmd.add_option("--dropout", m.dropout, "dropout probability in [0, 1)")->capture_default_str();
  RunConfig& r = options.run;
  add_int_option(cmd, "--batch", r.batch, "sequences per step");
  add_int_option(cmd, "--seq", r.seq, "tokens per sequence");
  add_int_option(cmd, "--steps", r.steps, "optimizer steps");
  add_seed_option(cmd, seed, r.seed, "seed for initialisation, data and dropout, in [0, 2^63)");
  AdamWConfig& a = options.optimizer;
  cmd.add_option("--lr", a.lr, "AdamW learning rate")->capture_default_str();
  cmd.add_option("--beta1", a.beta1, "AdamW beta1")->capture_default_str();
  cmd.add_option("--beta2", a.beta2, "AdamW beta2")->capture_default_str();
  cmd.add_option("--eps", a.eps, "AdamW epsilon")->capture_default_str();
  cmd.add_option("--weight-decay", a.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  // The lr schedule and clipping (kernels/common/lr_schedule.h, adamw_update.h): evaluated on
  // the backend from the training step and the gradient norm, so one CUDA graph serves every step.
  cmd.add_option("--warmup-steps", a.schedule.warmup_steps,
                 "lr warmup: steps 0..N-1 take lr x (step + 1) / N, then the schedule")
      ->check(integer_in(0, INT_MAX))
      ->capture_default_str();
  cmd.add_option_function<std::string>(
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
  cmd.add_option("--min-lr", a.schedule.min_lr, "the lr cosine and linear decay to, in [0, lr]")->capture_default_str();
  cmd.add_option("--grad-clip", a.grad_clip, "clip the unscaled gradients to this global L2 norm (clip_grad_norm_; 0: off)")
      ->capture_default_str();
  add_int_option(cmd, "--grad-accum", options.grad_accum, "micro-batches per optimizer step (must divide --batch)");
  cmd.add_option("--recompute", recompute, "none | ffn | layer: activations backward recomputes")->capture_default_str();
  add_precision_option(cmd, precision);
  LossScalerConfig& s = options.loss_scaler;
  cmd.add_option("--loss-scale-init", s.init_scale, "fp16: initial loss scale")->capture_default_str();
  cmd.add_option("--loss-scale-growth", s.growth_factor, "fp16: scale growth factor")->capture_default_str();
  cmd.add_option("--loss-scale-backoff", s.backoff_factor, "fp16: scale backoff factor on inf/NaN")
      ->capture_default_str();
  add_int_option(cmd, "--loss-scale-interval", s.growth_interval, "fp16: clean steps before the scale grows");
  // LoRA (engine/lora.h): adapters trained on a frozen base
  LoraConfig& lora = options.lora;
  add_int_option(cmd, "--lora-rank", lora.rank,
                 "LoRA: train rank-r adapters beside the frozen model (with --init-from BASE); 0: train every parameter",
                 0);
  cmd.add_option("--lora-alpha", lora.alpha, "LoRA: the adapters' output is scaled by alpha / rank")
      ->capture_default_str();
  cmd.add_option("--lora-dropout", lora.dropout, "LoRA: dropout on each adapter's input, in [0, 1)")
      ->capture_default_str();
  cmd.add_option("--lora-targets", lora_target_list,
                 "LoRA: the modules to adapt, comma-separated: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj "
                 "(the Llama block) or in_proj,out_proj,linear1,linear2; default q_proj,v_proj or in_proj (PEFT's)");
  cmd.add_option("--base-quant", base_quant,
                 "LoRA: the frozen base's linear weights stored as none (the working dtype) or nf4 (QLoRA: 4-bit "
                 "NormalFloat, blocks of 64, double-quantised absmax)")
      ->capture_default_str();
  add_backend_option(cmd, backend);
  for (const char* flag : {"--vocab-size", "--d-model", "--n-head", "--n-layer", "--d-ff", "--n-kv-head", "--arch",
                           "--activation", "--norm-first", "--causal", "--pos-embedding", "--norm", "--bias",
                           "--head-bias", "--tie-embeddings", "--rope-theta", "--max-seq-len", "--layer-norm-eps"})
    model_flags.push_back(cmd.get_option(flag));
  dropout_flag = cmd.get_option("--dropout");
}

void TrainFlags::take_model_from_hf_dir() {
  TrainOptions& o = options;
  for (const CLI::Option* flag : model_flags)
    if (flag->count() > 0)
      throw InputError("invalid config: " + flag->get_name() + " beside --init-from " + o.init_from +
                       ": the Hugging Face directory's config.json sets the model; leave " + flag->get_name() + " out");
  std::optional<float> dropout;
  if (dropout_flag->count() > 0) dropout = o.model.dropout;
  o.model = read_hf_config(o.init_from, dropout).model;
}

void TrainFlags::add_data_parallel_to(CLI::App& cmd) {
  DataParallelOptions& dp = options.data_parallel;
  add_int_option(cmd, "--zero", dp.zero_stage, "several ranks: 1 shards AdamW's state across them (ZeRO-1), 0 does not",
                 0, 1);
  cmd.add_option("--bucket-mb", dp.bucket_mib,
                 "several ranks: all-reduce the gradients in buckets of this many MiB during the backward (0: once, "
                 "after it)")
      ->capture_default_str();
}

void TrainFlags::finish() {
  TrainOptions& o = options;
  o.run.seed = parse_seed(seed, "invalid config: --seed");
  o.model.activation = parse_activation(activation);
  o.model.pos_embedding = parse_pos_embedding(pos_embedding);
  o.model.norm = parse_norm(norm);
  if (!model_size.empty()) {  // the whole model: no other model flag may say otherwise
    for (const CLI::Option* flag : model_flags)
      if (flag->count() > 0)
        throw InputError("invalid config: " + flag->get_name() + " beside --model-size " + model_size +
                         ", which sets the whole model: leave " + flag->get_name() + " out");
    const float dropout = o.model.dropout;
    o.model = llama_size_preset(model_size);
    if (dropout_flag->count() > 0) o.model.dropout = dropout;
  }
  if (!arch.empty()) {
    // the preset's value for each block flag not given on the command line
    const ModelConfig preset = arch_preset(arch);
    std::vector<std::string> given;
    for (const CLI::Option* flag : block_flags)
      if (flag->count() > 0) given.push_back(flag->get_name());
    apply_block_preset(preset, given, o.model);
  }
  // The families' own initialisation: a language model's head on N(0,1) embeddings starts its
  // loss far above ln V (engine/init.h); the seed workload keeps PyTorch's.
  if (!init.empty() && (!o.init_from.empty() || !o.checkpoint.resume.empty()))
    throw InputError(std::string("invalid config: --init draws the initial parameters, which ") +
                     (o.init_from.empty() ? "--resume" : "--init-from") + " already sets: give one");
  if (!init.empty())
    o.init = parse_init_scheme(init);
  else
    o.init = (arch == "gpt2" || arch == "llama" || !model_size.empty()) ? InitScheme::HuggingFace : InitScheme::PyTorch;
  if (!o.init_from.empty() && is_hf_model_dir(o.init_from)) take_model_from_hf_dir();
  o.model.validate();
  if (!lora_target_list.empty()) o.lora.targets = split_list(lora_target_list);
  const bool lora_flags = o.lora.alpha != LoraConfig{}.alpha || o.lora.dropout != 0.0f || !lora_target_list.empty();
  if (!o.lora_from.empty()) {  // the adapter directory's config is the run's
    if (lora_flags || o.lora.rank != 0)  // (--base-quant may be given: how the base is stored)
      throw InputError("invalid config: --lora-from " + o.lora_from + " sets rank, alpha, dropout and targets " +
                       "from its adapter_config.json: leave the --lora-* flags out");
    o.lora = read_peft_adapter(o.lora_from, o.model).lora;
    o.lora.nf4_base = base_quant == "nf4";
  }
  if (base_quant != "none" && base_quant != "nf4")
    throw InputError("invalid config: unknown --base-quant '" + printable(base_quant) + "' (expected none or nf4)");
  o.lora.nf4_base = base_quant == "nf4";
  if (o.lora.rank == 0 && o.lora_from.empty() && (lora_flags || o.lora.nf4_base))
    throw InputError("invalid config: --lora-alpha, --lora-dropout, --lora-targets and --base-quant need --lora-rank");
  if (o.lora.enabled()) lora_targets(o.model, o.lora);  // checks rank, alpha, dropout and the targets
  // The decaying schedules end at --steps; the constant one needs no end (0: resumable with any --steps).
  if (o.optimizer.schedule.kind != LrScheduleKind::Constant) o.optimizer.schedule.total_steps = o.run.steps;
  o.optimizer.validate();
  o.run.validate(o.model);
  o.precision = parse_precision(precision);
  o.recompute = parse_recompute(recompute);
  validate_loss_scaler(o.loss_scaler);
  check_data_parallel(o.data_parallel);
}

void TrainFlags::set_ranks(int ranks) {
  check_world_size(options.run.batch, ranks);
  check_grad_accum(options.run.batch / ranks, options.grad_accum);
  options.ranks = ranks;
}

void TrainFlags::check_fits(const Placement& where) const {
  if (plan_training(options, where.kind).device_bytes() > where.available)
    throw InputError(out_of_memory_message(options, where.kind, where.available, ""));
}

}  // namespace tt
