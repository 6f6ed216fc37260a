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
  AdamWStepScalars s;
  s.lr = config_.lr;
  s.beta1 = config_.beta1;
  s.beta2 = config_.beta2;
  s.eps = config_.eps;
  s.weight_decay = config_.weight_decay;
  // PyTorch computes the corrections in double (Python floats) and rounds when they meet tensors.
  s.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(config_.beta1), static_cast<double>(t_)));
  s.bias_correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(t_))));
  backend_.adamw_step(params, grads, state_.get("exp_avg"), state_.get("exp_avg_sq"), s);
}

}  // namespace tt
