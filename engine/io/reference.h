// A PyTorch reference run (docs/reference-format.md): the file `tinytrain verify` replays.
// Opening one checks the whole file before anything is sized from its numbers: a hostile
// file costs what its own bytes cost, never what its metadata claims.
#pragma once
#include <string>

#include "engine/config.h"
#include "engine/io/safetensors.h"

namespace tt {

struct Reference {
  SafetensorsFile file;
  ModelConfig config;
  AdamWConfig optimizer;
  RunConfig run;  // batch, seq and steps (the seed is not part of a reference)

  // Opens path and checks, in this order, so that nothing is built from an unchecked number:
  //   1. metadata: format and version; config and optimizer (type, range and consistency of
  //      every field, base/checked_input.h); batch, seq and steps (integers in range);
  //      dropout 0 (PyTorch's dropout masks cannot be replayed);
  //   2. the model's parameter count against the file's bytes: each of the four parameter
  //      groups (params., grads., step1., final.) holds it in F32;
  //   3. every tensor verify reads, present with its dtype and shape: the parameter groups
  //      against the config, x and y [steps, batch, seq] I32, logits0 [batch, seq, vocab] and
  //      loss [steps] F32, and grad_norm [steps] F32 when the file holds it (it is optional).
  // After it returns, each tensor verify allocates is one the file holds. Throws InputError
  // "<path>: <problem>".
  static Reference open(const std::string& path);
  // The same checks on a file already parsed (the fuzzer's entry point).
  static Reference check(SafetensorsFile file);
};

}  // namespace tt
