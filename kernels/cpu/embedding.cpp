// Token and learned positional embedding, forward and backward (CPU).
#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"

namespace tt {

// tokens (B,T) int32, wte (V,C), wpe (maxT,C) or null -> out (B,T,C)
// Token ids are checked on the host before they reach a backend (engine/token_batch).
void CpuBackend::embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) {
  Fp32Scope fp32({&out, &wte, &wpe});  // bf16/fp16 storage: see storage.h
  const int B = tokens.shape[0], T = tokens.shape[1], C = wte.shape[1];
  const int32_t* ids = tokens.i32();
  const float* table = wte.f32();
  const float* pos = wpe.data ? wpe.f32() : nullptr;
  float* o = out.f32();
#pragma omp parallel for
  for (int bt = 0; bt < B * T; ++bt) {
    const float* row = table + static_cast<int64_t>(ids[bt]) * C;
    const float* prow = pos ? pos + static_cast<int64_t>(bt % T) * C : nullptr;
    float* orow = o + static_cast<int64_t>(bt) * C;
    for (int c = 0; c < C; ++c) orow[c] = prow ? row[c] + prow[c] : row[c];
  }
}

// dout (B,T,C) -> dwte (V,C), dwpe (maxT,C): written (zeroed, then summed into) or added
// Several tokens may share an id, so rows are accumulated in a fixed (b,t) order per
// channel block: threads split the channels, never the tokens, which keeps it deterministic.
// Within a block, each token's row span is added at once (contiguous: vector adds), and every
// element still receives its tokens' gradients in (b,t) order.
void CpuBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) {
  Fp32Scope fp32({&dout});  // bf16/fp16 storage: see storage.h
  const int B = tokens.shape[0], T = tokens.shape[1], C = dwte.shape[1];
  const int32_t* ids = tokens.i32();
  const float* d = dout.f32();
  float* dtable = dwte.f32();
  float* dpos = dwpe.data ? dwpe.f32() : nullptr;
  if (grads == ParamGrads::Write) {
    std::fill(dtable, dtable + dwte.numel(), 0.0f);
    if (dpos) std::fill(dpos, dpos + dwpe.numel(), 0.0f);
  }
  constexpr int kChannels = 64;
#pragma omp parallel for
  for (int c0 = 0; c0 < C; c0 += kChannels) {
    const int width = C - c0 < kChannels ? C - c0 : kChannels;
    for (int bt = 0; bt < B * T; ++bt) {
      const float* g = d + static_cast<int64_t>(bt) * C + c0;
      float* dt = dtable + static_cast<int64_t>(ids[bt]) * C + c0;
      for (int c = 0; c < width; ++c) dt[c] += g[c];
      if (dpos) {
        float* dp = dpos + static_cast<int64_t>(bt % T) * C + c0;
        for (int c = 0; c < width; ++c) dp[c] += g[c];
      }
    }
  }
}

}  // namespace tt
