// Multi-head scaled dot-product attention core, as nn.MultiheadAttention computes it between
// in_proj and out_proj: per head, softmax(q k^T / sqrt(HS) [+ causal mask]) with dropout on
// the weights, times v. Forward and backward (CPU). Each (batch, head) pair is independent,
// so OpenMP splits over them and every thread writes its own slices: deterministic.
//
// Nothing (T,T) outlives an op: the forward keeps each row's log-sum-exp (B,NH,T) for the
// contract (kernels/backend.h), and the backward recomputes the weights with the forward's own
// code. Per head the work is seven small matrix products (two forward, five backward with the
// recomputed scores), (T,HS)x(HS,T) or (T,T)x(T,HS), plus the softmax. They run through ordered_matmul below, which keeps every sum
// in its natural order (one add at a time over the inner index) while computing many outputs
// side by side.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/rows_in_turn.h"
#include "kernels/cpu/vector_exp.h"

namespace tt {

namespace {

// Where query head h of token t of batch b finds its q, k and v in the packed (B,T,W) tensor
// (the key and value heads it shares with its group: kernels/common/qkv_layout.h), and its
// output row in (B,T,C).
struct PackedQkv {
  int T;
  QkvLayout layout;
  int64_t row(int b, int t) const { return (static_cast<int64_t>(b) * T + t) * layout.width(); }
  int64_t q(int b, int t, int h) const { return row(b, t) + layout.q(h); }
  int64_t k(int b, int t, int h) const { return row(b, t) + layout.k(h); }
  int64_t v(int b, int t, int h) const { return row(b, t) + layout.v(h); }
  int64_t head_row(int b, int t, int h) const {  // in (B,T,C)
    return (static_cast<int64_t>(b) * T + t) * layout.q_width() + layout.q(h);
  }
};

// A matrix read through strides: element (i, j) at data[i * row_stride + j * col_stride], so
// a transposed operand is the same memory with the strides swapped.
struct Strided {
  const float* data;
  int64_t row_stride, col_stride;
  float at(int i, int j) const { return data[i * row_stride + j * col_stride]; }
};

// Which inner indices j output row i sums over: all of them, or the causal band (j <= i for a
// query's keys, j >= i for a key's queries).
enum class Band { All, UpToRow, FromRow };

int band_begin(Band band, int i) { return band == Band::FromRow ? i : 0; }
int band_end(Band band, int i, int inner) { return band == Band::UpToRow ? std::min(i + 1, inner) : inner; }

// Float vectors through GCC's vector extension: the arithmetic is elementwise IEEE float (with
// -ffp-contract=off, a * b + c stays a rounded multiply, then a rounded add). 8 lanes fill an
// AVX2 register, 16 an AVX-512 one.
using Vec8 = float __attribute__((vector_size(32)));
using Vec16 = float __attribute__((vector_size(64)));
constexpr int kLanes = 16;  // output columns per block, held in registers across the j loop

// (into a reference, not returned: a returned 64-byte vector would change the ABI of code built
// without AVX-512, and GCC warns even though this is always inlined)
template <typename Vec>
__attribute__((always_inline)) inline void load_vec(Vec& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

// out[i * ldo + n] = sum over j in the band of row i of a(i, j) * b[j * ldb + n], for i < rows
// and n < cols. Every sum starts from +0 and adds a(i,j) * b(j,n), rounded, one j at a time in
// increasing order, exactly as the scalar loop would: the same bits. The speed comes from doing
// kRows x kLanes of those sums at once, with the accumulators in registers, instead of
// loading and storing an output row for every j. (Inlined into one caller per vector width,
// so that each is compiled for its instruction set.)
template <int kRows, typename Vec>
__attribute__((always_inline)) inline void ordered_matmul_blocks(int rows, int cols, int inner, Strided a,
                                                                 const float* b, int64_t ldb, float* out,
                                                                 int64_t ldo, Band band) {
  constexpr int kVecs = kLanes / (sizeof(Vec) / sizeof(float));  // vectors per row of a block
  for (int i0 = 0; i0 < rows; i0 += kRows) {
    const int block_rows = std::min(kRows, rows - i0);
    auto in_band = [&](int r, int j) { return j >= band_begin(band, i0 + r) && j < band_end(band, i0 + r, inner); };
    // the j range of the whole block, and the part of it that every row of the block sums over
    int j_begin = inner, j_end = 0, all_begin = 0, all_end = inner;
    for (int r = 0; r < block_rows; ++r) {
      j_begin = std::min(j_begin, band_begin(band, i0 + r));
      j_end = std::max(j_end, band_end(band, i0 + r, inner));
      all_begin = std::max(all_begin, band_begin(band, i0 + r));
      all_end = std::min(all_end, band_end(band, i0 + r, inner));
    }
    all_end = std::max(all_end, all_begin);
    for (int n0 = 0; n0 < cols; n0 += kLanes) {
      const int width = std::min(kLanes, cols - n0);
      if (block_rows == kRows && width == kLanes) {
        Vec acc[kRows][kVecs] = {};
        auto add_row_of_b = [&](int j, bool every_row) {
          Vec bj[kVecs];
          for (int v = 0; v < kVecs; ++v) load_vec(bj[v], b + j * ldb + n0 + v * (kLanes / kVecs));
          for (int r = 0; r < kRows; ++r) {
            if (!every_row && !in_band(r, j)) continue;
            const float coef = a.at(i0 + r, j);
            for (int v = 0; v < kVecs; ++v) acc[r][v] += coef * bj[v];
          }
        };
        for (int j = j_begin; j < all_begin; ++j) add_row_of_b(j, false);  // the band's leading edge
        for (int j = all_begin; j < all_end; ++j) add_row_of_b(j, true);   // the hot loop
        for (int j = all_end; j < j_end; ++j) add_row_of_b(j, false);      // its trailing edge
        for (int r = 0; r < kRows; ++r) std::memcpy(out + (i0 + r) * ldo + n0, acc[r], sizeof acc[r]);
        continue;
      }
      float acc[kRows][kLanes] = {};  // partial blocks: the same sums, one lane at a time
      for (int j = j_begin; j < j_end; ++j)
        for (int r = 0; r < block_rows; ++r) {
          if (!in_band(r, j)) continue;
          const float coef = a.at(i0 + r, j);
          for (int n = 0; n < width; ++n) acc[r][n] += coef * b[j * ldb + n0 + n];
        }
      for (int r = 0; r < block_rows; ++r) std::copy(acc[r], acc[r] + width, out + (i0 + r) * ldo + n0);
    }
  }
}

// The AVX-512 width: 8 rows of 16 lanes, one register each (the AVX2 one: 4 rows of two).
// (GCC 12's avx512fintrin.h trips -Wuninitialized when inlined, GCC bug 105593.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
__attribute__((target("avx512f"))) void ordered_matmul_avx512(int rows, int cols, int inner, Strided a,
                                                              const float* b, int64_t ldb, float* out,
                                                              int64_t ldo, Band band) {
  ordered_matmul_blocks<8, Vec16>(rows, cols, inner, a, b, ldb, out, ldo, band);
}
#pragma GCC diagnostic pop

void ordered_matmul(CpuSimd simd, int rows, int cols, int inner, Strided a, const float* b, int64_t ldb, float* out,
                    int64_t ldo, Band band) {
  if (simd == CpuSimd::Avx512)
    ordered_matmul_avx512(rows, cols, inner, a, b, ldb, out, ldo, band);
  else if (simd == CpuSimd::Avx2)
    ordered_matmul_blocks<4, Vec8>(rows, cols, inner, a, b, ldb, out, ldo, band);
  else
    ordered_matmul_blocks<1, float>(rows, cols, inner, a, b, ldb, out, ldo, band);  // one lane: the plain loop
}

// One head's keys (or values) transposed: out[d * T + t] = x[offset(t) + d], (HS,T), so that
// the scores of a query with every key are a product with contiguous rows.
template <typename Offset>
void transpose_head(const float* x, int T, int HS, Offset offset, float* out) {
  for (int t = 0; t < T; ++t) {
    const float* row = x + offset(t);
    for (int d = 0; d < HS; ++d) out[static_cast<int64_t>(d) * T + t] = row[d];
  }
}

// The dropout factors of one head's (T,T) block of weights, which starts at element `head` of
// the (B,NH,T,T) mask: drawn in one call, so the vector Philox runs on whole blocks rather
// than on rows of T (causal rows use only their first t + 1). All ones when p is 0.
void head_dropout_masks(const DropoutMask& dropout, const DropoutKey& key, int64_t head, int T, float* masks,
                        CpuSimd simd) {
  const int64_t n = static_cast<int64_t>(T) * T;
  if (dropout.p > 0.0f)
    dropout_scales(key, dropout.index_offset + head, n, dropout.p, masks, simd);
  else
    std::fill(masks, masks + n, 1.0f);
}

// The softmax of rows t0 .. t0 + kRows - 1 of a head's (T,T) scores, in place: each over the keys
// it sees (all T, or t + 1 when causal), the rest set to 0. Max, exp(x - max), sum in key
// order, times 1/sum: the plain loop's operations, the rows' chains interleaved (rows_in_turn.h).
// lse_h (T), when not null, gets each row's log-sum-exp, max + log(sum).
template <int kRows>
void softmax_rows(float* Ph, float* lse_h, int t0, int T, bool causal, CpuSimd simd) {
  auto row = [&](int r) { return Ph + static_cast<int64_t>(t0 + r) * T; };
  auto visible = [&](int r) { return causal ? t0 + r + 1 : T; };
  float max_score[kRows], sum[kRows];
  for (int r = 0; r < kRows; ++r) max_score[r] = -INFINITY, sum[r] = 0.0f;
  // the max as std::fmax takes it (NaNs skipped), inline: std::fmax is a libm call. (Where fmax
  // might pick the other zero of +0 and -0, exp(x - max) is the same: exp(+-0) = 1.)
  rows_in_turn<kRows>(visible, [&](int r, int j) {
    const float score = row(r)[j];
    max_score[r] = score > max_score[r] ? score : max_score[r];
  });
  for (int r = 0; r < kRows; ++r) exp_shifted(row(r), max_score[r], visible(r), row(r), simd);
  rows_in_turn<kRows>(visible, [&](int r, int j) { sum[r] += row(r)[j]; });
  for (int r = 0; r < kRows; ++r) {
    if (lse_h) lse_h[t0 + r] = max_score[r] + std::log(sum[r]);
    const float inv_sum = 1.0f / sum[r];
    float* prow = row(r);
    for (int t2 = 0; t2 < visible(r); ++t2) prow[t2] *= inv_sum;
    for (int t2 = visible(r); t2 < T; ++t2) prow[t2] = 0.0f;
  }
}

// The softmax's backward for rows t0 .. t0 + kRows - 1, in place over dP (dS): dscore = P (dP -
// sum P dP) over the keys each row sees, 0 elsewhere; the sums in key order, rows interleaved.
template <int kRows>
void softmax_backward_rows(const float* Ph, float* dSh, int t0, int T, bool causal) {
  auto offset = [&](int r) { return static_cast<int64_t>(t0 + r) * T; };
  auto visible = [&](int r) { return causal ? t0 + r + 1 : T; };
  float dot_pdp[kRows];  // sum_t2 P[t2] dP[t2]
  for (int r = 0; r < kRows; ++r) dot_pdp[r] = 0.0f;
  rows_in_turn<kRows>(visible, [&](int r, int j) { dot_pdp[r] += Ph[offset(r) + j] * dSh[offset(r) + j]; });
  for (int r = 0; r < kRows; ++r) {
    const float* prow = Ph + offset(r);
    float* dsrow = dSh + offset(r);
    for (int t2 = 0; t2 < visible(r); ++t2) dsrow[t2] = prow[t2] * (dsrow[t2] - dot_pdp[r]);
    for (int t2 = visible(r); t2 < T; ++t2) dsrow[t2] = 0.0f;  // masked scores get no gradient
  }
}

// One head's softmax weights Ph (T,T) (0 where masked) from its scaled queries (T,HS) and keys
// transposed (HS,T); lse_h (T) gets each row's log-sum-exp when not null. The forward and the
// backward (which recomputes the weights) both call it: the same bits.
void head_weights(float* Ph, float* lse_h, const float* q_scaled, const float* kT, int T, int HS, bool causal,
                  CpuSimd simd) {
  // scores (T,T) = (q scale) k^T, every key (the causal rows ignore the ones they cannot see)
  ordered_matmul(simd, T, T, HS, Strided{q_scaled, HS, 1}, kT, T, Ph, T, Band::All);
  for (int t0 = 0; t0 < T; t0 += kRowsInTurn) {  // the softmax of each row, over the keys it sees
    if (t0 + kRowsInTurn <= T)
      softmax_rows<kRowsInTurn>(Ph, lse_h, t0, T, causal, simd);
    else
      for (int t = t0; t < T; ++t) softmax_rows<1>(Ph, lse_h, t, T, causal, simd);
  }
}

// One head's queries times scale (T,HS) and keys transposed (HS,T), from the packed qkv.
void head_queries_and_keys(const float* x, const PackedQkv& at, int b, int h, int T, int HS, float scale,
                           float* q_scaled, float* kT) {
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < HS; ++d) q_scaled[static_cast<size_t>(t) * HS + d] = x[at.q(b, t, h) + d] * scale;
  transpose_head(x, T, HS, [&](int t) { return at.k(b, t, h); }, kT);
}

}  // namespace

// qkv (B,T,W) -> out (B,T,C), lse (B,NH,T). The weights of a head live in per-thread scratch
// (T,T) only while it is computed.
void CpuBackend::attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                                   const DropoutMask& dropout) {
  Fp32Scope fp32({&out, &qkv});  // bf16/fp16 storage: see storage.h (lse is fp32)
  const int B = s.B, T = s.T, NH = s.NH, HS = s.HS;
  const PackedQkv at{T, s.layout()};
  const int64_t W = s.layout().width(), C = s.layout().q_width();
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const DropoutKey key = dropout.key();
  const float* x = qkv.f32();
  float* o = out.f32();
  float* L = lse.f32();
#pragma omp parallel
  {
    // per-thread scratch: the head's scaled queries (T,HS), keys transposed (HS,T), weights
    // (T,T), dropout factors (T,T) and dropped-out weights (T,T)
    std::vector<float> q_scaled(static_cast<size_t>(T) * HS), kT(static_cast<size_t>(HS) * T);
    std::vector<float> P(static_cast<size_t>(T) * T), masks(static_cast<size_t>(T) * T),
        weights(static_cast<size_t>(T) * T);
#pragma omp for collapse(2)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const int64_t head = (static_cast<int64_t>(b) * NH + h) * T * T;  // this head's (T,T) block of the mask
        head_dropout_masks(dropout, key, head, T, masks.data(), simd_);
        head_queries_and_keys(x, at, b, h, T, HS, scale, q_scaled.data(), kT.data());
        head_weights(P.data(), L + (static_cast<int64_t>(b) * NH + h) * T, q_scaled.data(), kT.data(), T, HS,
                     s.causal, simd_);
        for (int64_t i = 0; i < static_cast<int64_t>(T) * T; ++i) weights[i] = P[i] * masks[i];
        // out (T,HS) = dropped-out weights (T,T) x v (T,HS), over the keys each query sees
        ordered_matmul(simd_, T, HS, T, Strided{weights.data(), T, 1}, x + at.v(b, 0, h), W, o + at.head_row(b, 0, h), C,
                       s.causal ? Band::UpToRow : Band::All);
      }
    }
  }
}

// dout (B,T,C) -> dqkv (B,T,W). The weights are recomputed exactly as the forward computed
// them (the same code, so the same bits as a kept copy would have; the CPU has no use for lse
// or dout_dot_out, which the GPU's kernels need). A key/value head shared by a group of query
// heads gets the sum of their gradients, added in head order: the work is split over (b, key/
// value head), so one thread owns each of those sums.
void CpuBackend::attention_backward(Tensor dqkv, Tensor /*dout_dot_out*/, Tensor dout, Tensor qkv, Tensor /*out*/,
                                    Tensor /*lse*/, const AttentionShape& s, const DropoutMask& dropout) {
  Fp32Scope fp32({&dqkv, &dout, &qkv});  // bf16/fp16 storage: see storage.h
  const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, KVH = s.kv_heads(), group = s.layout().group();
  const PackedQkv at{T, s.layout()};
  const int64_t W = s.layout().width(), C = s.layout().q_width();
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const DropoutKey key = dropout.key();
  const float* x = qkv.f32();
  const float* dO = dout.f32();
  float* dx = dqkv.f32();
#pragma omp parallel
  {
    // per-thread scratch: scaled queries (T,HS), keys and values transposed (HS,T), the
    // recomputed weights, score gradients, dropout factors, dropped-out weights and scaled
    // score gradients (T,T each); a later head of a group's dk and dv (T,HS each)
    std::vector<float> q_scaled(static_cast<size_t>(T) * HS), kT(static_cast<size_t>(HS) * T),
        vT(static_cast<size_t>(HS) * T);
    std::vector<float> P(static_cast<size_t>(T) * T), dS(static_cast<size_t>(T) * T),
        masks(static_cast<size_t>(T) * T);
    std::vector<float> weights(static_cast<size_t>(T) * T), g(static_cast<size_t>(T) * T);
    std::vector<float> dk_h(group > 1 ? static_cast<size_t>(T) * HS : 0), dv_h(dk_h.size());
#pragma omp for collapse(2)
    for (int b = 0; b < B; ++b) {
      for (int kv = 0; kv < KVH; ++kv) {
        for (int h = kv * group; h < (kv + 1) * group; ++h) {
          const int64_t head = (static_cast<int64_t>(b) * NH + h) * T * T;
          const float* Ph = P.data();
          float* dSh = dS.data();
          const float* dOh = dO + at.head_row(b, 0, h);  // this head's dout rows, stride C
          head_queries_and_keys(x, at, b, h, T, HS, scale, q_scaled.data(), kT.data());
          head_weights(P.data(), nullptr, q_scaled.data(), kT.data(), T, HS, s.causal, simd_);
          head_dropout_masks(dropout, key, head, T, masks.data(), simd_);
          transpose_head(x, T, HS, [&](int t) { return at.v(b, t, h); }, vT.data());
          // out_t = sum_t2 m[t2] P[t2] v_t2, with m the dropout factor:
          // dP[t2] = m (dout_t . v_t2), and dv_t2 = sum_t m P dout_t
          ordered_matmul(simd_, T, T, HS, Strided{dOh, C, 1}, vT.data(), T, dSh, T, Band::All);  // dout_t . v_t2
          for (int t = 0; t < T; ++t) {  // dP = m (dout . v) and the dropped-out weights m P
            const int visible = s.causal ? t + 1 : T;
            const float* prow = Ph + static_cast<int64_t>(t) * T;
            const float* mask = masks.data() + static_cast<int64_t>(t) * T;
            float* dsrow = dSh + static_cast<int64_t>(t) * T;
            float* wrow = weights.data() + static_cast<int64_t>(t) * T;
            for (int t2 = 0; t2 < visible; ++t2) {
              wrow[t2] = mask[t2] * prow[t2];
              dsrow[t2] = mask[t2] * dsrow[t2];
            }
            for (int t2 = visible; t2 < T; ++t2) wrow[t2] = 0.0f;
          }
          for (int t0 = 0; t0 < T; t0 += kRowsInTurn) {  // dP -> dscore, row by row
            if (t0 + kRowsInTurn <= T)
              softmax_backward_rows<kRowsInTurn>(Ph, dSh, t0, T, s.causal);
            else
              for (int t = t0; t < T; ++t) softmax_backward_rows<1>(Ph, dSh, t, T, s.causal);
          }
          for (int64_t i = 0; i < static_cast<int64_t>(T) * T; ++i) g[i] = dSh[i] * scale;  // score = (q scale) . k
          const Band queries_of_key = s.causal ? Band::FromRow : Band::All;  // a key is seen by queries t >= t2
          // dv (T,HS) = weights^T (T,T) x dout (T,HS); the group's first head writes dk and dv,
          // the others add theirs in head order
          const bool first = h == kv * group;
          float* dv = first ? dx + at.v(b, 0, h) : dv_h.data();
          float* dk = first ? dx + at.k(b, 0, h) : dk_h.data();
          const int64_t ld = first ? W : HS;
          ordered_matmul(simd_, T, HS, T, Strided{weights.data(), 1, T}, dOh, C, dv, ld, queries_of_key);
          // dq_t = sum_t2 g[t][t2] k_t2 and dk_t2 = sum_t g[t][t2] q_t, with g = scale dscore
          ordered_matmul(simd_, T, HS, T, Strided{g.data(), T, 1}, x + at.k(b, 0, h), W, dx + at.q(b, 0, h), W,
                         s.causal ? Band::UpToRow : Band::All);
          ordered_matmul(simd_, T, HS, T, Strided{g.data(), 1, T}, x + at.q(b, 0, h), W, dk, ld, queries_of_key);
          if (!first)
            for (int t = 0; t < T; ++t)
              for (int d = 0; d < HS; ++d) {
                dx[at.k(b, t, h) + d] += dk_h[static_cast<size_t>(t) * HS + d];
                dx[at.v(b, t, h) + d] += dv_h[static_cast<size_t>(t) * HS + d];
              }
        }
      }
    }
  }
}

}  // namespace tt
