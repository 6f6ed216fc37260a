// Multi-head scaled dot-product attention core, as nn.MultiheadAttention computes it between
// in_proj and out_proj: per head, softmax(q k^T / sqrt(HS) [+ causal mask]) with dropout on
// the weights, times v. Forward and backward (CPU). Each (batch, head) pair is independent,
// so OpenMP splits over them and every thread writes its own slices: deterministic.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/cpu/dropout_mask.h"

namespace tt {

namespace {

// Where head h of token t of batch b keeps its q, k and v in the packed (B,T,3C) tensor.
struct PackedQkv {
  int T, C, HS;
  int64_t q(int b, int t, int h) const { return (static_cast<int64_t>(b) * T + t) * 3 * C + h * HS; }
  int64_t k(int b, int t, int h) const { return q(b, t, h) + C; }
  int64_t v(int b, int t, int h) const { return q(b, t, h) + 2 * C; }
};

// One head's keys (or values) transposed: out[d * T + t] = x[offset(b, t, h) + d], (HS,T).
// A dot product over d is a sequential sum the compiler may not reorder, so it runs one add at
// a time; with this layout, the dot products of a query with every key run side by side,
// one vector lane per key, each still summed over d = 0..HS-1 in order (the same result).
template <typename Offset>
void transpose_head(const float* x, int T, int HS, Offset offset, float* out) {
  for (int t = 0; t < T; ++t) {
    const float* row = x + offset(t);
    for (int d = 0; d < HS; ++d) out[static_cast<int64_t>(d) * T + t] = row[d];
  }
}

// dots[t2] = sum over d of a[d] * bT[d * T + t2], for t2 < count (summed over d in order).
void dots_with_transposed(const float* a, const float* bT, int T, int HS, int count, float* dots) {
  for (int t2 = 0; t2 < count; ++t2) dots[t2] = 0.0f;
  for (int d = 0; d < HS; ++d) {
    const float ad = a[d];
    const float* column = bT + static_cast<int64_t>(d) * T;
    for (int t2 = 0; t2 < count; ++t2) dots[t2] += ad * column[t2];
  }
}

}  // namespace

// qkv (B,T,3C) -> out (B,T,C), probs (B,NH,T,T) (softmax weights, before dropout)
void CpuBackend::attention_forward(Tensor out, Tensor probs, Tensor qkv, const AttentionShape& s,
                                   const DropoutMask& dropout) {
  Fp32Scope fp32({&out, &probs, &qkv});  // bf16/fp16 storage: see storage.h
  const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, C = NH * HS;
  const PackedQkv at{T, C, HS};
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float p = dropout.p;
  const DropoutKey key = dropout.key();
  const float* x = qkv.f32();
  float* o = out.f32();
  float* P = probs.f32();
#pragma omp parallel for collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      std::vector<float> mask(T, 1.0f);  // dropout factors of one row of weights
      std::vector<float> kT(static_cast<size_t>(HS) * T), q_scaled(HS);
      transpose_head(x, T, HS, [&](int t) { return at.k(b, t, h); }, kT.data());
      for (int t = 0; t < T; ++t) {
        const int64_t row = ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
        float* prow = P + row;
        const int visible = s.causal ? t + 1 : T;  // keys a query may attend to
        const float* q = x + at.q(b, t, h);
        for (int d = 0; d < HS; ++d) q_scaled[d] = q[d] * scale;
        dots_with_transposed(q_scaled.data(), kT.data(), T, HS, visible, prow);  // scores (q scale) . k
        float max_score = -INFINITY;
        for (int t2 = 0; t2 < visible; ++t2) max_score = std::fmax(max_score, prow[t2]);
        float sum = 0.0f;
        for (int t2 = 0; t2 < visible; ++t2) {
          prow[t2] = std::exp(prow[t2] - max_score);
          sum += prow[t2];
        }
        const float inv_sum = 1.0f / sum;
        for (int t2 = 0; t2 < visible; ++t2) prow[t2] *= inv_sum;
        for (int t2 = visible; t2 < T; ++t2) prow[t2] = 0.0f;

        float* orow = o + (static_cast<int64_t>(b) * T + t) * C + h * HS;
        for (int d = 0; d < HS; ++d) orow[d] = 0.0f;
        if (p > 0.0f) dropout_scales(key, dropout.index_offset + row, visible, p, mask.data());
        for (int t2 = 0; t2 < visible; ++t2) {
          const float w = prow[t2] * mask[t2];
          const float* v = x + at.v(b, t2, h);
          for (int d = 0; d < HS; ++d) orow[d] += w * v[d];
        }
      }
    }
  }
}

// dout (B,T,C) -> dqkv (B,T,3C); dprobs (B,NH,T,T) scratch for the score gradients
void CpuBackend::attention_backward(Tensor dqkv, Tensor dprobs, Tensor dout, Tensor qkv, Tensor /*out*/, Tensor probs,
                                    const AttentionShape& s, const DropoutMask& dropout) {
  Fp32Scope fp32({&dqkv, &dprobs, &dout, &qkv, &probs});  // bf16/fp16 storage: see storage.h
  const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, C = NH * HS;
  const PackedQkv at{T, C, HS};
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float p = dropout.p;
  const DropoutKey key = dropout.key();
  const float* x = qkv.f32();
  const float* dO = dout.f32();
  const float* P = probs.f32();
  float* dS = dprobs.f32();
  float* dx = dqkv.f32();
#pragma omp parallel for collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      std::vector<float> mask(T, 1.0f);
      std::vector<float> vT(static_cast<size_t>(HS) * T);
      transpose_head(x, T, HS, [&](int t) { return at.v(b, t, h); }, vT.data());
      for (int t = 0; t < T; ++t) {
        std::memset(dx + at.q(b, t, h), 0, sizeof(float) * HS);
        std::memset(dx + at.k(b, t, h), 0, sizeof(float) * HS);
        std::memset(dx + at.v(b, t, h), 0, sizeof(float) * HS);
      }
      for (int t = 0; t < T; ++t) {
        const int64_t row = ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
        const int visible = s.causal ? t + 1 : T;
        const float* prow = P + row;
        float* dsrow = dS + row;
        const float* drow = dO + (static_cast<int64_t>(b) * T + t) * C + h * HS;
        // out_t = sum_t2 m[t2] P[t2] v_t2, with m the dropout scale:
        // dv_t2 += m P dout_t, and dP[t2] = m (dout_t . v_t2)
        float dot_pdp = 0.0f;  // sum_t2 P[t2] dP[t2], for the softmax backward
        if (p > 0.0f) dropout_scales(key, dropout.index_offset + row, visible, p, mask.data());
        dots_with_transposed(drow, vT.data(), T, HS, visible, dsrow);  // dout_t . v_t2
        for (int t2 = 0; t2 < visible; ++t2) {
          const float m = mask[t2];
          float* dv = dx + at.v(b, t2, h);
          const float w = m * prow[t2];
          for (int d = 0; d < HS; ++d) dv[d] += w * drow[d];
          dsrow[t2] = m * dsrow[t2];
          dot_pdp += prow[t2] * dsrow[t2];
        }
        // softmax backward: dscore = P (dP - sum P dP); masked scores get no gradient
        for (int t2 = 0; t2 < visible; ++t2) dsrow[t2] = prow[t2] * (dsrow[t2] - dot_pdp);
        for (int t2 = visible; t2 < T; ++t2) dsrow[t2] = 0.0f;
        // score = (q scale) . k: dq_t += scale dscore k_t2, dk_t2 += scale dscore q_t
        const float* q = x + at.q(b, t, h);
        float* dq = dx + at.q(b, t, h);
        for (int t2 = 0; t2 < visible; ++t2) {
          const float g = dsrow[t2] * scale;
          const float* k = x + at.k(b, t2, h);
          float* dk = dx + at.k(b, t2, h);
          for (int d = 0; d < HS; ++d) {
            dq[d] += g * k[d];
            dk[d] += g * q[d];
          }
        }
      }
    }
  }
}

}  // namespace tt
