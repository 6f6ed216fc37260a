// Conversion between float storage types (CPU): the working weights are the fp32 masters
// rounded to bf16 or fp16 after every optimizer step.
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"

namespace tt {

// src (n) -> dst (n)
void CpuBackend::cast(Tensor dst, Tensor src) {
  const int64_t n = src.numel();
  dispatch_storage(src.dtype, [&](auto src_type) {
    using S = decltype(src_type);
    dispatch_storage(dst.dtype, [&](auto dst_type) {
      using D = decltype(dst_type);
      const S* x = src.as<S>();
      D* y = dst.as<D>();
#pragma omp parallel for
      for (int64_t i = 0; i < n; ++i) y[i] = from_float<D>(to_float(x[i]));
    });
  });
}

}  // namespace tt
