// The options of a training run, as plain values: what `train`, `plan` and `profile` are given
// on the command line (cli/train_command.cpp), checked there, then handed down whole. The
// Trainer (engine/trainer.h) reads the first group; the train command's loop (cli/train_loop.h)
// and the memory plan (engine/memory_plan.h) read the rest too.
#pragma once
#include <string>

#include "engine/config.h"
#include "engine/init.h"
#include "engine/lora.h"

namespace tt {

// How several ranks share a step (docs/parallel.md). Ignored with one rank.
struct DataParallelOptions {
  // --zero: 0, every rank holds all of AdamW's state and updates every parameter; 1 (ZeRO-1),
  // rank r holds the state of its 1/W shard of the flat parameters: the gradients are
  // reduce-scattered (each rank gets the sum of its shard), each rank updates its shard, and
  // the parameters are all-gathered.
  int zero_stage = 0;
  // --bucket-mb (zero 0): the gradients are all-reduced in buckets of at least this many MiB
  // as the backward finishes them, overlapping the rest of the backward on NCCL; 0: one
  // all-reduce of the whole buffer after the backward.
  double bucket_mib = 1.0;
};

// `train --save-dir DIR --save-every N --keep K --resume DIR|FILE` (engine/io/checkpoint.h).
struct CheckpointOptions {
  std::string save_dir;  // "": no checkpoints; else DIR/ckpt_<step, 8 digits>.safetensors
  int save_every = 0;    // save after every N-th step; the last step is always saved; 0: the last only
  int keep = 0;          // keep the newest K checkpoints of save_dir, delete older ones; 0: keep all
  std::string resume;    // "": start at step 0; a directory: its latest checkpoint; a file: that one
};

// `train --data DIR --eval-every N --eval-batches K` (engine/io/token_dataset.h).
struct DataOptions {
  std::string dir;       // "": the seed workload's random tokens
  int eval_every = 0;    // validation loss before every N-th step and after the last; 0: never
  int eval_batches = 8;  // batches of --batch fixed windows of val.bin per evaluation
};

// The measured peak the training log's MFU is against (engine/profile/mfu.h looks it up).
struct MfuReference {
  double peak_tflops = 0;  // 0: no measured peak, so no MFU
  std::string note;        // which peak is used, or why there is none (one phrase, for the log)
};

struct TrainOptions {
  // ---- what the Trainer reads ----
  ModelConfig model;
  AdamWConfig optimizer;
  RunConfig run;  // batch (the global batch of one optimizer step), seq, seed; steps is the loop's
  Precision precision = Precision::FP32;
  // fp16's dynamic loss scaling; .dynamic follows the precision (loss_scaler_for: fp16 only).
  LossScalerConfig loss_scaler;
  Recompute recompute = Recompute::None;
  int grad_accum = 1;  // micro-batches per optimizer step
  LoraConfig lora;     // --lora-*: adapters on a frozen base (engine/lora.h); rank 0: none
  DataParallelOptions data_parallel;

  // ---- what the train command's loop and the memory plan read too ----
  int log_every = 10;
  bool cuda_graph = true;  // replay each step as one CUDA graph where the backend has graphs
  // The ranks the memory plan is for (`plan --ranks`); `train` sets it from its launch.
  int ranks = 1;
  CheckpointOptions checkpoint;
  DataOptions data;
  std::string metrics_path;  // --metrics FILE.jsonl (engine/io/metrics_log.h); "": none
  std::string lora_from;     // --lora-from DIR: the initial adapters (and their config) from a PEFT adapter directory
  std::string init_from;     // --init-from FILE|DIR: initial parameters from a state_dict safetensors, or a Hugging Face directory
  // --init: how the initial parameters are drawn from --seed when neither --init-from nor --resume
  // gives them; the flag's default follows --arch (cli/train_flags.cpp).
  InitScheme init = InitScheme::PyTorch;
  MfuReference mfu;          // none: the log prints no MFU
};

}  // namespace tt
