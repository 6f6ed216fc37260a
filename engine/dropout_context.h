// What the dropout masks of one forward/backward depend on besides the layer and the site: the
// model's and the LoRA adapters' masks alike (engine/model.h, engine/lora.h).
#pragma once
#include <cstdint>

namespace tt {

// What the dropout masks of one forward/backward depend on besides layer and site.
struct DropoutContext {
  uint64_t seed;
  const uint32_t* step;  // the training step, in backend memory (see DropoutMask)
  int first_row = 0;     // this micro-batch's first sequence in the full batch: its masks are
                         // the ones those rows have when the whole batch runs at once
  bool training = true;  // false: evaluation, every dropout is the identity (PyTorch's eval())
};

}  // namespace tt
