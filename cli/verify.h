// `tinytrain verify REF.safetensors`: replays a PyTorch reference (docs/reference-format.md)
// on a backend and compares logits, losses, gradients and parameters, one row per tensor.
#pragma once
#include <ostream>
#include <string>

#include "engine/config.h"
#include "kernels/backend.h"

namespace tt {

// Returns true when every row is within its tolerance for `precision` (docs/numerics.md).
// Throws InputError for a bad file.
bool run_verify(Backend& backend, const std::string& path, std::ostream& out, Precision precision = Precision::FP32);

}  // namespace tt
