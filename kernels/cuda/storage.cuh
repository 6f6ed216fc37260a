// Storage types in the CUDA backend. Every float view carries its dtype (F32, BF16 or F16); the
// kernels are templated on the storage type S (float, bf16 or f16, kernels/common/half.h) of
// the views they read and write as activations, and do as kernels/cpu/storage.h describes:
// load with to_float(x[i]), compute in fp32, store with from_float<S>(value) (round to nearest
// even). The launch site picks S from the views:
//
//   const DType dtype = shared_storage_dtype("residual_forward", {out, a, b});
//   dispatch_storage(dtype, [&](auto s) {
//     using S = decltype(s);
//     residual_forward_kernel<S><<<...>>>(out.as<S>(), a.as<S>(), b.as<S>(), n);
//   });
//
// Parameter gradients, LayerNorm statistics, losses and optimizer state are always F32: those
// views are read with .f32(), which throws for any other dtype.
#pragma once
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/tensor.h"
#include "kernels/dtype_dispatch.h"  // dispatch_storage
#include "kernels/common/half.h"

namespace tt {

// 16 bytes of elements of T, loaded or stored as one (ld/st .v4 on the GPU when aligned so):
// the GEMM ladder's tiles, the cross-entropy's logit rows.
template <typename T>
struct alignas(16) Chunk {
  T v[16 / sizeof(T)];
};

// The storage dtype an op's activation views share (the contract: activations, activation
// gradients and working weights have one storage dtype). Views without data (absent optional
// tensors) are ignored. Throws std::invalid_argument when two views disagree or the dtype is
// not a float type; an op with no view present gets F32.
inline DType shared_storage_dtype(const char* op, std::initializer_list<Tensor> views) {
  bool found = false;
  DType dtype = DType::F32;
  for (const Tensor& t : views) {
    if (!t.data) continue;
    if (!is_float(t.dtype))
      throw std::invalid_argument(std::string(op) + ": expected a float tensor, got " + dtype_name(t.dtype));
    if (found && t.dtype != dtype)
      throw std::invalid_argument(std::string(op) + ": activation views must share one storage dtype, got " +
                                  dtype_name(dtype) + " and " + dtype_name(t.dtype));
    dtype = t.dtype;
    found = true;
  }
  return dtype;
}

// S's pointer into a view, or null for a view without data (an absent optional tensor).
template <typename S>
S* data_or_null(const Tensor& t) {
  return t.data ? t.as<S>() : nullptr;
}

}  // namespace tt
