// AdamW step: one backend launch; the step count lives in backend memory with the moments.
#include "optim/adamw.h"

namespace tt {

ArenaPlan AdamW::plan_state(int64_t n) {
  ArenaPlan plan;
  plan.add("exp_avg", DType::F32, {n});
  plan.add("exp_avg_sq", DType::F32, {n});
  plan.add("step_count", DType::I32, {1});
  return plan;
}

AdamW::AdamW(Backend& backend, const AdamWHyper& hyper, int64_t num_params)
    : backend_(backend), hyper_(hyper), state_(backend, plan_state(num_params)) {}

void AdamW::step(Tensor params, Tensor grads, Tensor train_step, const LossScalerState& scaler) {
  backend_.adamw_step(params, grads, state_.get("exp_avg"), state_.get("exp_avg_sq"), state_.get("step_count"),
                      train_step, hyper_, scaler);
}

void AdamW::step_and_update_scaler(Tensor params, Tensor grads, Tensor train_step, const LossScalerState& scaler,
                                   const LossScalerConfig& config) {
  backend_.adamw_step_and_scaler_update(params, grads, state_.get("exp_avg"), state_.get("exp_avg_sq"),
                                        state_.get("step_count"), train_step, hyper_, scaler, config);
}

}  // namespace tt
