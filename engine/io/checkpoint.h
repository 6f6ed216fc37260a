// Checkpoints: the whole training state in one safetensors file, so that `tinytrain train
// --resume` continues a run bit for bit (docs/toy-lm.md, "Checkpoints and resume").
//
// A training step reads the parameters, AdamW's moments and step count, the loss scaler, and
// a batch and dropout masks that are pure functions of (seed, step). So saving the first four
// after step s, and starting again at step s+1 with the same seed, replays exactly the steps
// the uninterrupted run takes. The file holds:
//   <name>                          F32, the parameters under their PyTorch state_dict names
//   optimizer.exp_avg.<name>        F32, AdamW's first moment, same shape
//   optimizer.exp_avg_sq.<name>     F32, AdamW's second moment
//   state.adamw_step                I32 [1]
//   state.loss_scale                F32 [1]   (1 without dynamic loss scaling)
//   state.growth_tracker, state.skipped_steps, state.first_skipped_step   I32 [1]
// and __metadata__: format "tinytrain-checkpoint", version "1", config (the model, JSON as in
// a reference), optimizer (JSON), precision, run (JSON: seed, batch, seq: what the data and
// the masks depend on), loss_scaler (JSON), step (the steps completed), the caller's extra
// entries (the data's identity: "data" -> "random"), and a checksum of all of the above and
// the tensors' bytes.
// Nothing in it depends on when, where or on how many ranks it was written, so a resumed run
// writes the same bytes as the uninterrupted one.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/trainer.h"

namespace tt {

// DIR/ckpt_<step, 8 digits>.safetensors
std::string checkpoint_path(const std::string& dir, int step);

// The checkpoints of `dir` (files named ckpt_<8+ digits>.safetensors; nothing else, so the
// temporary files of an interrupted save never count), sorted by step.
struct CheckpointFile {
  int step;
  std::string path;
};
std::vector<CheckpointFile> list_checkpoints(const std::string& dir);

// --resume: a directory names its latest checkpoint, anything else is the file itself. Throws
// InputError for a directory without checkpoints.
std::string find_resume_checkpoint(const std::string& dir_or_file);

// Throws InputError for --save-every / --keep without --save-dir, or negative values.
void check_checkpoint_options(const CheckpointOptions& options);
// Creates the directory (and its parents) where it is missing; throws InputError when it cannot.
// The train loop calls it before the first step, so a bad --save-dir costs no training.
void create_checkpoint_dir(const std::string& dir);

// Saves `trainer`'s state after `step` completed steps to `path`. Collective: every rank calls
// it (ZeRO-1 gathers the moments' shards); rank 0 alone writes. The file appears whole or not
// at all: written as <path>.tmp.<pid>, flushed to disk, renamed to `path`, then the directory
// flushed, so a crash or kill at any moment leaves the previous checkpoint as it was.
// `extra`: metadata entries of the run (the data's identity), compared again on load; they
// must not reuse the names above. `notes`: metadata entries for readers of the file (the
// tokenizer directory under "tokenizer", which `tinytrain sample` reads), covered by the
// checksum but never compared on load; they must not reuse the names above or those of
// `extra`. Throws InputError when the file cannot be written.
void save_checkpoint(const std::string& path, Trainer& trainer, int step, const TrainOptions& options,
                     const std::map<std::string, std::string>& extra,
                     const std::map<std::string, std::string>& notes = {});

// Loads the checkpoint at `path` into `trainer` (built from `options`) and returns its step:
// the next step to train. Everything is checked before the trainer is touched, and each
// problem ends as one InputError naming the file: not a safetensors file, not a tinytrain
// checkpoint of version 1; truncated; a tensor missing, unknown, or of another dtype or
// shape; corrupted (the checksum covers every value); a model, optimizer, precision, seed,
// batch, seq, loss-scaling setting or `extra` entry that differs from the run (the first
// differing field: "... was saved with d_model 128, this run has 64"); a value out of range
// (a non-finite parameter, a negative second moment, step counts that do not add up). The
// backend, the number of ranks, --zero, --grad-accum and --recompute may differ from the
// run that saved: they change at most the rounding, as they would in an uninterrupted run.
int load_checkpoint(const std::string& path, Trainer& trainer, const TrainOptions& options,
                    const std::map<std::string, std::string>& extra = {});

// A checkpoint's model alone, for inference (`tinytrain sample`): no Trainer, no run to
// compare with. The file gets load_checkpoint's whole-file checks (a tinytrain checkpoint of
// version 1; every tensor of the model it describes, parameters and AdamW's moments, with its
// dtype and shape and nothing else; the checksum; a valid step; finite parameters), each
// problem one InputError "<path>: ...". `metadata` is every entry of the file (notes too).
struct CheckpointModel {
  ModelConfig config;
  LoraConfig lora;            // read_checkpoint_adapters: the adapters' config (rank 0 otherwise)
  std::vector<float> params;  // ParamLayout(config) order; read_checkpoint_adapters: lora_layout order
  std::map<std::string, std::string> metadata;
  int step = 0;
};
CheckpointModel read_checkpoint_model(const std::string& path);
// The same for a LoRA run's checkpoint: its model config (the base's), its LoRA config and the
// adapters (`tinytrain export --format peft`, `tinytrain merge`). Throws InputError for a
// checkpoint of a run without LoRA.
CheckpointModel read_checkpoint_adapters(const std::string& path);

// `train --init-from FILE`: the initial parameters from a plain safetensors file (a PyTorch
// state_dict, tools/torch_interop.py export) holding every parameter of `config` under its
// PyTorch name (engine/param_layout.h) as F32 with its shape, and nothing else. Returns them
// in ParamLayout order. Each problem is one InputError "<path>: ...": a file that is not
// safetensors or is truncated, a missing parameter, another dtype or shape, an unknown tensor
// (the first, in name order), a non-finite value.
std::vector<float> read_state_dict(const std::string& path, const ModelConfig& config);

// Deletes all but the newest `keep` checkpoints of `dir` (keep 0: none is deleted).
void prune_checkpoints(const std::string& dir, int keep);

}  // namespace tt
