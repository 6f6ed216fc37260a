// A frozen weight stored in NF4 (kernels/common/nf4.h, docs/nf4.md) in backend memory: views of
// its four parts, which Backend::nf4_dequantize decodes. For n weights (n even):
//   codes         U8  [n / 2]            two 4-bit codes a byte, element 2i in the high nibble
//   absmax_codes  U8  [ceil(n / 64)]     each 64-weight block's absmax, a code of the dynamic map
//   absmax2       F32 [ceil(n / 16384)]  the scale of each 256 absmax codes
//   offset        F32 [1]                the mean absmax, added back after decoding them
// engine/nf4_weight.h makes the host image these views are uploaded from.
#pragma once
#include <stdexcept>
#include <string>

#include "kernels/common/nf4.h"
#include "kernels/tensor.h"

namespace tt {

struct Nf4Tensor {
  Tensor codes;
  Tensor absmax_codes;
  Tensor absmax2;
  Tensor offset;

  int64_t numel() const { return 2 * codes.numel(); }  // the weights it holds
};

// The views of an op that decodes `w` into `out` (a float view of w.numel() elements), checked
// by every backend before it touches memory. Throws std::invalid_argument naming the op.
inline void check_nf4_views(const char* op, const Tensor& out, const Nf4Tensor& w) {
  const int64_t n = w.numel();
  if (!is_float(out.dtype) || out.numel() != n || w.codes.dtype != DType::U8 || w.absmax_codes.dtype != DType::U8 ||
      w.absmax_codes.numel() != nf4::absmax_count(n) || w.absmax2.dtype != DType::F32 ||
      w.absmax2.numel() != nf4::absmax2_count(n) || w.offset.dtype != DType::F32 || w.offset.numel() != 1)
    throw std::invalid_argument(std::string(op) + ": out " + dtype_name(out.dtype) + " " + out.shape.str() +
                                " and NF4 codes " + dtype_name(w.codes.dtype) + " " + w.codes.shape.str() +
                                ", absmax codes " + dtype_name(w.absmax_codes.dtype) + " " +
                                w.absmax_codes.shape.str() + ", absmax2 " + dtype_name(w.absmax2.dtype) + " " +
                                w.absmax2.shape.str() + ", offset " + dtype_name(w.offset.dtype) + " " +
                                w.offset.shape.str() +
                                " do not fit (out float (n), codes U8 (n/2), absmax codes U8 (ceil(n/64)), "
                                "absmax2 F32 (ceil(n/16384)), offset F32 (1))");
}

}  // namespace tt
