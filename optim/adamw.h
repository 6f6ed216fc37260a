// AdamW (torch.optim.AdamW semantics) over the flat parameter buffer: it owns the two
// moment buffers and the step count, and runs one backend launch per step.
#pragma once
#include <cstdint>

#include "kernels/arena.h"
#include "kernels/backend.h"

namespace tt {

// Views of AdamW's state in backend memory: what a checkpoint saves and restores.
struct AdamWState {
  Tensor exp_avg;     // F32 (n): first moment
  Tensor exp_avg_sq;  // F32 (n): second moment
  Tensor step_count;  // I32 [1]: steps taken (skipped steps do not count); sets the bias corrections
};

class AdamW {
 public:
  // hyper: validated by the caller (AdamWConfig::validate in engine/config.h).
  AdamW(Backend& backend, const AdamWHyper& hyper, int64_t num_params);
  static ArenaPlan plan_state(int64_t num_params);  // exp_avg, exp_avg_sq, step_count

  // params (P), grads (P) scaled by the loss scaler's scale: one update, or none when the
  // scaler found an inf or NaN in the gradients. train_step (I32 [1], backend memory): the
  // 0-based training step, which sets the lr of the schedule; clipping (hyper.grad_clip) uses
  // scaler.grad_norm_sq, so grad_norm_check must have run on these gradients.
  void step(Tensor params, Tensor grads, Tensor train_step, const LossScalerState& scaler);
  // step, then the loss scaler's update (its config), as one backend op: what a single rank
  // runs (ZeRO-1 gathers the parameters between the two, and calls them apart).
  void step_and_update_scaler(Tensor params, Tensor grads, Tensor train_step, const LossScalerState& scaler,
                              const LossScalerConfig& config);
  size_t bytes() const { return state_.bytes(); }
  AdamWState state() const {
    return AdamWState{state_.get("exp_avg"), state_.get("exp_avg_sq"), state_.get("step_count")};
  }

 private:
  Backend& backend_;
  AdamWHyper hyper_;
  Arena state_;  // exp_avg (P), exp_avg_sq (P), step_count (1): all in backend memory
};

}  // namespace tt
