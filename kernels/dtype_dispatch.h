// Runs code templated on the storage type of a float tensor, on either backend: fn receives a
// value of the storage type (float, bf16 or f16, kernels/common/half.h) only to carry the type:
//   dispatch_storage(t.dtype, [&](auto s) { using S = decltype(s); ... t.as<S>() ... });
#pragma once
#include <stdexcept>
#include <string>

#include "kernels/tensor.h"
#include "kernels/common/half.h"

namespace tt {

template <typename Fn>
void dispatch_storage(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32: fn(float{}); return;
    case DType::BF16: fn(bf16{}); return;
    case DType::F16: fn(f16{}); return;
    default: throw std::invalid_argument(std::string("expected a float tensor, got ") + dtype_name(dtype));
  }
}

}  // namespace tt
