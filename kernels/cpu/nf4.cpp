// NF4 dequantisation (CPU): a frozen weight stored in 4 bits (kernels/common/nf4.h) decoded into
// a float view, QLoRA's base weight made ready for a GEMM.
#include <algorithm>

#include "kernels/common/nf4.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dtype_dispatch.h"

namespace tt {

// w (n) NF4 -> out (n). OpenMP over the 64-weight blocks: each decodes its absmax once, then
// its bytes, two weights each (a block starts on an even weight, and n is even). The fp32
// operations are nf4.h's, so the bits are the CUDA kernel's.
void CpuBackend::nf4_dequantize(Tensor out, const Nf4Tensor& w) {
  check_nf4_views("nf4_dequantize", out, w);
  const int64_t n = out.numel(), blocks = nf4::absmax_count(n);
  const uint8_t* codes = w.codes.u8();
  const uint8_t* absmax_codes = w.absmax_codes.u8();
  const float* absmax2 = w.absmax2.f32();
  const float offset = *w.offset.f32();
  float levels[nf4::kLevels], dynamic_map[nf4::kDynamicCodes];
  for (int c = 0; c < nf4::kLevels; ++c) levels[c] = nf4::level(c);
  for (int c = 0; c < nf4::kDynamicCodes; ++c) dynamic_map[c] = nf4::dynamic_map_value(c);
  dispatch_storage(out.dtype, [&](auto storage) {
    using S = decltype(storage);
    S* o = out.as<S>();
#pragma omp parallel for
    for (int64_t b = 0; b < blocks; ++b) {
      const float absmax =
          nf4::block_absmax(dynamic_map[absmax_codes[b]], absmax2[b / nf4::kAbsmaxBlockSize], offset);
      const int64_t end = std::min(n, (b + 1) * nf4::kBlockSize);
      for (int64_t i = b * nf4::kBlockSize; i < end; i += 2) {
        const uint8_t byte = codes[i / 2];  // element i in the high nibble, i + 1 in the low one
        o[i] = from_float<S>(nf4::dequantize(levels[byte >> 4], absmax));
        o[i + 1] = from_float<S>(nf4::dequantize(levels[byte & 0x0F], absmax));
      }
    }
  });
}

}  // namespace tt
