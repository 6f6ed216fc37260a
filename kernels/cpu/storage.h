// How the CPU backend runs ops on bf16/fp16 storage (Fp32Scope). Code templated on the
// storage type dispatches with kernels/dtype_dispatch.h.
#pragma once
#include <initializer_list>
#include <vector>

#include "kernels/tensor.h"
#include "kernels/dtype_dispatch.h"

namespace tt {

// How the CPU backend runs an op on bf16/fp16 storage: for the op's duration every such
// tensor argument is replaced by an fp32 copy (exact: each 16-bit value is an fp32 value),
// the fp32 op runs, and every copy is rounded back into its 16-bit storage (round to nearest
// even, the GPU's rounding). Inputs come back unchanged (they round-trip exactly), outputs
// are rounded once: "load 16-bit, compute in fp32, store rounded", which is what the CUDA
// kernels do. Arguments that alias (dinp over dout) share one copy.
class Fp32Scope {
 public:
  Fp32Scope(std::initializer_list<Tensor*> tensors);
  ~Fp32Scope();
  Fp32Scope(const Fp32Scope&) = delete;
  Fp32Scope& operator=(const Fp32Scope&) = delete;

 private:
  struct Copy {
    void* storage;
    DType dtype;
    std::vector<float> values;
  };
  std::vector<Copy> copies_;
};

}  // namespace tt
