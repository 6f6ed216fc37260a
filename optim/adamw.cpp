// AdamW step: the host computes this step's scalars, the backend updates every element.
#include "optim/adamw.h"

#include <cmath>

namespace tt {

namespace {

ArenaPlan plan_state(int64_t n) {
  ArenaPlan plan;
  plan.add("exp_avg", DType::F32, {n});
  plan.add("exp_avg_sq", DType::F32, {n});
  return plan;
}

}  // namespace

AdamW::AdamW(Backend& backend, const AdamWConfig& config, int64_t num_params)
    : backend_(backend), config_(config), state_(backend, plan_state(num_params)) {}

void AdamW::step(Tensor params, Tensor grads) {
  ++t_;
  backend_.adamw_step(params, grads, state_.get("exp_avg"), state_.get("exp_avg_sq"), adamw_step_scalars(config_, t_));
}

AdamWStepScalars adamw_step_scalars(const AdamWConfig& c, int64_t t) {
  const double steps = static_cast<double>(t);
  AdamWStepScalars s;
  s.decay = static_cast<float>(1.0 - c.lr * c.weight_decay);
  s.beta1 = static_cast<float>(c.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
  s.beta2 = static_cast<float>(c.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
  s.step_size = static_cast<float>(c.lr / (1.0 - std::pow(c.beta1, steps)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(c.beta2, steps)));
  s.eps = static_cast<float>(c.eps);
  return s;
}

}  // namespace tt
