// Dynamic loss scaling (torch.cuda.amp.GradScaler semantics) with its state in backend memory.
// fp16 keeps small gradients from flushing to zero by scaling the loss gradient up (it enters
// in the fused cross-entropy backward), checks every step's gradients for inf/NaN (fused into
// the global gradient norm), skips the optimizer step when it finds one and backs off the
// scale, and grows the scale again after a run of clean steps. All of it runs on the backend,
// so on the GPU the skip decision needs no host sync and the step stays one CUDA graph.
// fp32 and bf16 use the same machinery with the scale fixed at 1: a skipped step there means
// the loss went non-finite, which no scale can fix.
#pragma once
#include <cstdint>

#include "kernels/arena.h"
#include "kernels/backend.h"

namespace tt {

struct LossScalerStatus {  // what the host reads at log points
  float scale;
  int32_t growth_tracker;
  int32_t skipped_steps;
  int32_t first_skipped_step;  // -1: none
  float grad_norm;             // global norm of the last step's (scaled) gradients
};

class LossScaler {
 public:
  LossScaler(Backend& backend, const LossScalerConfig& config);
  static ArenaPlan plan_state();

  const LossScalerState& state() const { return state_; }
  const LossScalerConfig& config() const { return config_; }
  Tensor scale() const { return state_.scale; }
  LossScalerStatus read() const;  // waits for the backend
  size_t bytes() const { return arena_.bytes(); }

 private:
  Backend& backend_;
  LossScalerConfig config_;
  Arena arena_;
  LossScalerState state_;
};

}  // namespace tt
