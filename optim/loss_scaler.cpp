// Loss scaler state: planned, initialised once, read at log points.
#include "optim/loss_scaler.h"

#include <cmath>

namespace tt {

ArenaPlan LossScaler::plan_state() {
  ArenaPlan plan;
  plan.add("scale", DType::F32, {1});
  plan.add("growth_tracker", DType::I32, {1});
  plan.add("found_inf", DType::I32, {1});
  plan.add("skipped_steps", DType::I32, {1});
  plan.add("first_skipped_step", DType::I32, {1});
  plan.add("grad_norm_sq", DType::F32, {1});
  return plan;
}

LossScaler::LossScaler(Backend& backend, const LossScalerConfig& config)
    : backend_(backend), config_(config), arena_(backend, plan_state()) {
  state_ = LossScalerState{arena_.get("scale"),         arena_.get("growth_tracker"),
                           arena_.get("found_inf"),     arena_.get("skipped_steps"),
                           arena_.get("first_skipped_step"), arena_.get("grad_norm_sq")};
  const float scale = config.dynamic ? config.init_scale : 1.0f;
  const int32_t none = -1;
  backend_.copy_to_device(state_.scale.data, &scale, sizeof(scale));
  backend_.copy_to_device(state_.first_skipped_step.data, &none, sizeof(none));
}

LossScalerStatus LossScaler::read() const {
  LossScalerStatus s;
  float norm_sq = 0.0f;
  backend_.copy_to_host(&s.scale, state_.scale.data, sizeof(float));
  backend_.copy_to_host(&s.growth_tracker, state_.growth_tracker.data, sizeof(int32_t));
  backend_.copy_to_host(&s.skipped_steps, state_.skipped_steps.data, sizeof(int32_t));
  backend_.copy_to_host(&s.first_skipped_step, state_.first_skipped_step.data, sizeof(int32_t));
  backend_.copy_to_host(&norm_sq, state_.grad_norm_sq.data, sizeof(float));
  s.grad_norm = std::sqrt(norm_sq);
  return s;
}

}  // namespace tt
