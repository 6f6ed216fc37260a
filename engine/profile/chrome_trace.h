// Profiled steps (engine/profile/profiler.h) as a Chrome trace: the JSON "Trace Event Format" that
// Perfetto (ui.perfetto.dev) and chrome://tracing open. Every step, scope and op is one complete
// event ("ph": "X", times in microseconds) on one track, so a viewer nests them by time:
//
//   step 1
//   |- fill_zero   (the gradients zeroed)
//   |- forward     embedding_forward, layer 0 {linear_forward, attention_forward, ...}, layer 1, ..., linear_forward
//   |- loss        cross_entropy
//   |- backward    linear_backward, layer L-1 {...}, ..., layer 0 {...}, embedding_backward
//   '- optimizer   grad_norm_check, adamw_step, loss_scaler_update (and cast, in bf16/fp16)
//
// Each event's args carry "id" and "parent" (the id of the enclosing step or scope), and op
// events their "flops" and "bytes" (engine/profile/op_cost.h), so a script can walk the tree.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/profile/profiler.h"

namespace tt {

// steps[k] is training step first_step + k; `device` names the track ("cpu", "cuda", ...).
nlohmann::json chrome_trace(const std::vector<StepProfile>& steps, int first_step, const std::string& device);

// Writes the trace to `path`; throws InputError naming the path when it cannot.
void write_chrome_trace(const nlohmann::json& trace, const std::string& path);

}  // namespace tt
