// AdamW (torch.optim.AdamW semantics) over the flat parameter buffer: it owns the two
// moment buffers and the step count, and runs one backend launch per step.
#pragma once
#include <cstdint>

#include "engine/arena.h"
#include "engine/config.h"
#include "kernels/backend.h"

namespace tt {

// torch.optim.AdamW's host arithmetic for step t (t >= 1): Python floats (double), each
// rounded to fp32 where it meets an fp32 tensor.
AdamWStepScalars adamw_step_scalars(const AdamWConfig& config, int64_t t);

class AdamW {
 public:
  AdamW(Backend& backend, const AdamWConfig& config, int64_t num_params);

  // params (P), grads (P): one update; the step count t starts at 1 for the first call.
  void step(Tensor params, Tensor grads);
  int64_t steps_taken() const { return t_; }
  size_t bytes() const { return state_.bytes(); }
  const AdamWConfig& config() const { return config_; }

 private:
  Backend& backend_;
  AdamWConfig config_;
  Arena state_;  // exp_avg (P), exp_avg_sq (P)
  int64_t t_ = 0;
};

}  // namespace tt
