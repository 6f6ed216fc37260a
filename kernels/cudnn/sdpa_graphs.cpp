// cuDNN's fused attention graphs, forward and backward (sdpa_graphs.h).
//
// Per (batch, head), with S = q k^T * scale (T,T), softmax over each query row, dropout mask
// M (0 or 1) and factor 1/(1-p):
//   forward   P = softmax(S [masked]),  O = (P * M / (1-p)) V,  stats = max + log(sum exp)
//   backward  P = exp(S - stats)  (recomputed from the stats, never stored)
//             dV = (P * M / (1-p))^T dO
//             dP = dO V^T,  Dsum = rowsum(dO * O)
//             dS = P * (dP * M / (1-p) - Dsum) * scale   (written as cuDNN's graphs write it)
//             dQ = dS K,  dK = dS^T Q
// Every (T,T) tensor is "virtual": it lives in registers and shared memory of the fused
// kernel. Intermediates are fp32, except the operands of the value-side matmuls (P before
// P V, P^T and dS^T before dV and dK), which cuDNN takes in the io dtype.
//
// Layouts: cuDNN views every operand as [B, NH, rows, HS] through strides, so the packed
// (B,T,3C) qkv is used in place: q at offset 0, k at C, v at 2C, each with row stride 3C and
// head stride HS. Matmuls take their right operand already transposed, so k (and, in the
// backward, v) is described as its transpose [B, NH, HS, T] by swapping the last two strides.
#include "kernels/cudnn/sdpa_graphs.h"

#include <cmath>
#include <limits>
#include <string>

namespace tt {

namespace {

// q, k or v [B,NH,T,HS] over the packed qkv (or dqkv) layout.
Dims4 packed_qkv_strides(const SdpaCase& c) {
  const int64_t C = static_cast<int64_t>(c.NH) * c.HS;
  return {c.T * 3 * C, c.HS, 3 * C, 1};
}
Dims4 rows_dims(const SdpaCase& c) { return {c.B, c.NH, c.T, c.HS}; }
Dims4 transposed(const Dims4& d) { return {d[0], d[1], d[3], d[2]}; }
// The merged-heads (B,T,C) layout of o and dO.
Dims4 merged_strides(const SdpaCase& c) {
  const int64_t C = static_cast<int64_t>(c.NH) * c.HS;
  return {c.T * C, c.HS, C, 1};
}
// The frontend's strides for the virtual dO * O product (describe_sdpa_backward).
Dims4 dout_times_out_strides(const SdpaCase& c) {
  const int64_t C = static_cast<int64_t>(c.NH) * c.HS;
  return {c.T * C, static_cast<int64_t>(c.T) * c.HS, C, 1};
}
Dims4 scores_dims(const SdpaCase& c) { return {c.B, c.NH, c.T, c.T}; }
Dims4 row_stat_dims(const SdpaCase& c) { return {c.B, c.NH, c.T, 1}; }

// One of q, k, v (or their gradients) in memory, and its transpose [B,NH,HS,T].
int64_t qkv_input(CudnnGraph& g, const SdpaCase& c) {
  return g.tensor(c.io, rows_dims(c), packed_qkv_strides(c), false);
}
int64_t qkv_input_transposed(CudnnGraph& g, const SdpaCase& c) {
  return g.tensor(c.io, transposed(rows_dims(c)), transposed(packed_qkv_strides(c)), false);
}

// The dropout mask (B,NH,T,T), 1 kept / 0 dropped, from cuDNN's Philox keyed by the seed
// and offset device scalars. Forward and backward draw the same mask from the same values.
int64_t dropout_mask(CudnnGraph& g, const SdpaCase& c, int64_t& seed, int64_t& offset) {
  const Dims4 one = {1, 1, 1, 1};
  seed = g.tensor(CUDNN_DATA_INT64, one, one, false);
  offset = g.tensor(CUDNN_DATA_INT64, one, one, false);
  const int64_t mask = g.intermediate(CUDNN_DATA_FLOAT, scores_dims(c));
  g.bernoulli(mask, seed, offset, 1.0 - static_cast<double>(c.dropout_p));
  return mask;
}

// scores (B,NH,T,T) with keys after the query set to -inf (top-left causal mask): the row
// (query) index is compared with the column (key) index, and BINARY_SELECT keeps the score
// where row >= col.
int64_t causal_masked(CudnnGraph& g, const SdpaCase& c, int64_t scores) {
  const int64_t row = g.intermediate(CUDNN_DATA_INT32, scores_dims(c));
  const int64_t col = g.intermediate(CUDNN_DATA_INT32, scores_dims(c));
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, row, 0, 0, CUDNN_DATA_FLOAT, /*axis=*/2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, col, 0, 0, CUDNN_DATA_FLOAT, /*axis=*/3);
  const int64_t keep = g.intermediate(CUDNN_DATA_BOOLEAN, scores_dims(c));
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, 0, CUDNN_DATA_BOOLEAN);
  const int64_t masked = g.intermediate(CUDNN_DATA_FLOAT, scores_dims(c));
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, masked, g.scalar(-std::numeric_limits<float>::infinity()),
              keep);
  return masked;
}

// y = x * scalar, an fp32 intermediate of x's shape (or `out` when given).
int64_t times(CudnnGraph& g, const Dims4& dims, int64_t x, int64_t scalar_or_tensor, int64_t out = 0,
              cudnnDataType_t dtype = CUDNN_DATA_FLOAT) {
  const int64_t y = out != 0 ? out : g.intermediate(dtype, dims);
  g.pointwise(CUDNN_POINTWISE_MUL, x, y, scalar_or_tensor);
  return y;
}

float attention_scale(const SdpaCase& c) { return 1.0f / std::sqrt(static_cast<float>(c.HS)); }

}  // namespace

void describe_sdpa_forward(CudnnGraph& g, const SdpaCase& c, SdpaForwardIds& ids) {
  const Dims4 sd = scores_dims(c), rd = row_stat_dims(c);
  ids.q = qkv_input(g, c);
  ids.k = qkv_input_transposed(g, c);
  ids.v = qkv_input(g, c);
  ids.o = g.tensor(c.io, rows_dims(c), merged_strides(c), false);
  ids.stats = g.tensor(CUDNN_DATA_FLOAT, rd, packed_strides(rd), false);
  ids.seed = ids.offset = 0;

  // scores = q k^T * scale [masked]
  const int64_t raw = g.intermediate(CUDNN_DATA_FLOAT, sd);
  g.matmul(ids.q, ids.k, raw);
  int64_t scores = times(g, sd, raw, g.scalar(attention_scale(c)));
  if (c.causal) scores = causal_masked(g, c, scores);

  // softmax with its statistics: stats = max + log(sum exp(scores - max))
  const int64_t row_max = g.intermediate(CUDNN_DATA_FLOAT, rd);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, scores, row_max);
  const int64_t shifted = g.intermediate(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_SUB, scores, shifted, row_max);
  const int64_t exps = g.intermediate(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, exps);
  const int64_t row_sum = g.intermediate(CUDNN_DATA_FLOAT, rd);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, exps, row_sum);
  const int64_t log_sum = g.intermediate(CUDNN_DATA_FLOAT, rd);
  g.pointwise(CUDNN_POINTWISE_LOG, row_sum, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, row_max, ids.stats, log_sum);

  // P = exps / sum, dropped out; the last P feeds the P V matmul in the io dtype
  const bool dropout = c.dropout_p > 0.0f;
  const int64_t probs = g.intermediate(dropout ? CUDNN_DATA_FLOAT : c.io, sd);
  g.pointwise(CUDNN_POINTWISE_DIV, exps, probs, row_sum);
  int64_t weights = probs;
  if (dropout) {
    const int64_t mask = dropout_mask(g, c, ids.seed, ids.offset);
    const int64_t masked = times(g, sd, probs, mask);
    weights = times(g, sd, masked, g.scalar(1.0f / (1.0f - c.dropout_p)), 0, c.io);
  }
  g.matmul(weights, ids.v, ids.o);
}

void describe_sdpa_backward(CudnnGraph& g, const SdpaCase& c, SdpaBackwardIds& ids) {
  const Dims4 sd = scores_dims(c), rd = row_stat_dims(c);
  ids.q = qkv_input(g, c);
  ids.k = qkv_input_transposed(g, c);
  ids.v = qkv_input_transposed(g, c);
  ids.o = g.tensor(c.io, rows_dims(c), merged_strides(c), false);
  ids.dout = g.tensor(c.io, rows_dims(c), merged_strides(c), false);
  ids.stats = g.tensor(CUDNN_DATA_FLOAT, rd, packed_strides(rd), false);
  ids.softmax_sum = g.tensor(CUDNN_DATA_FLOAT, rd, packed_strides(rd), false);
  ids.dq = qkv_input(g, c);
  ids.dk = qkv_input(g, c);
  ids.dv = qkv_input(g, c);
  ids.seed = ids.offset = 0;
  const bool dropout = c.dropout_p > 0.0f;
  // The frontend's dropout scalars (Dropout_scale, Dropout_scale_inv in
  // node/scaled_dot_product_flash_attention.h, commit 3929da2), one by-value tensor each:
  // 1/(1-p), used twice, and (1-p) computed as such (1/(1/(1-p)) differs in the last bit for
  // some p, 0.01 for one); 1 for the row sums when there is no dropout.
  const int64_t keep_scale = dropout ? g.scalar(1.0f / (1.0f - c.dropout_p)) : 0;
  const int64_t keep_fraction = g.scalar(dropout ? 1.0f - c.dropout_p : 1.0f);
  const int64_t mask = dropout ? dropout_mask(g, c, ids.seed, ids.offset) : 0;
  const int64_t scale = g.scalar(attention_scale(c));

  // softmax_sum = rowsum(dO * O) * (1-p): the dropout factor of O taken back out. The product
  // is declared with cudnn-frontend's strides for it, {NH*T*HS, T*HS, NH*HS, 1}: a head stride
  // of the [B,NH,T,HS] layout with the row stride of dO's (B,T,C) layout ("mul_dO_O" in
  // include/cudnn_frontend/node/scaled_dot_product_flash_attention.h, commit 3929da2). It is
  // virtual, never laid out in memory: the strides only describe it, as the frontend does.
  const int64_t d_o_o = g.tensor(CUDNN_DATA_FLOAT, rows_dims(c), dout_times_out_strides(c), true);
  g.pointwise(CUDNN_POINTWISE_MUL, ids.dout, d_o_o, ids.o);
  const int64_t d_sum = g.intermediate(CUDNN_DATA_FLOAT, rd);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_o_o, d_sum);
  times(g, rd, d_sum, keep_fraction, ids.softmax_sum);

  // P = exp(q k^T * scale [masked] - stats), recomputed
  const int64_t raw = g.intermediate(CUDNN_DATA_FLOAT, sd);
  g.matmul(ids.q, ids.k, raw);
  const int64_t scores = times(g, sd, raw, scale);
  int64_t shifted = g.intermediate(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_SUB, scores, shifted, ids.stats);
  if (c.causal) shifted = causal_masked(g, c, shifted);
  const int64_t probs = g.intermediate(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, probs);
  int64_t weights = probs;
  if (dropout) weights = times(g, sd, times(g, sd, probs, mask), keep_scale);

  // dV = weights^T dO: the transpose is a strided view, in the io dtype
  const Dims4 t_strides = transposed(packed_strides(sd));  // (T_k, T_q) over the (T_q, T_k) layout
  const int64_t weights_t = g.tensor(c.io, transposed(sd), t_strides, true);
  g.reshape(weights, weights_t);
  g.matmul(weights_t, ids.dout, ids.dv);

  // dS = P * (dP [* mask] - softmax_sum) [* 1/(1-p)] * scale, with dP = dO v^T
  int64_t d_probs = g.intermediate(CUDNN_DATA_FLOAT, sd);
  g.matmul(ids.dout, ids.v, d_probs);
  if (dropout) d_probs = times(g, sd, d_probs, mask);
  const int64_t centered = g.intermediate(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_SUB, d_probs, centered, ids.softmax_sum);
  int64_t d_scores = times(g, sd, centered, probs);
  if (dropout) d_scores = times(g, sd, d_scores, keep_scale);
  d_scores = times(g, sd, d_scores, scale);

  // dK = dS^T q (transposed view in the io dtype); dQ = dS k, written directly (no fp32
  // atomic accumulation buffer: the frontend's deterministic form). k, held as its transpose,
  // is viewed back as [B,NH,T,HS] by a reshape whose virtual output is declared fp32: the
  // frontend leaves that tensor's type unset, so it takes the graph's intermediate type
  // (ReshapeNode::infer_properties_node fills virtual tensors from the context first;
  // include/cudnn_frontend/node/reshape.h, commit 3929da2). dS enters this matmul in fp32 too.
  const int64_t d_scores_t = g.tensor(c.io, transposed(sd), t_strides, true);
  g.reshape(d_scores, d_scores_t);
  g.matmul(d_scores_t, ids.q, ids.dk);
  const int64_t k_rows = g.tensor(CUDNN_DATA_FLOAT, rows_dims(c), packed_qkv_strides(c), true);
  g.reshape(ids.k, k_rows);
  g.matmul(d_scores, k_rows, ids.dq);
}

std::string sdpa_misaligned_operand(const SdpaCase& c) {
  const int64_t element_bytes = 2;  // bf16 or fp16
  const int64_t part_bytes = static_cast<int64_t>(c.NH) * c.HS * element_bytes;
  if (part_bytes % kCudnnByteAlignment == 0) return "";
  return "k and v start " + std::to_string(part_bytes) + " bytes into each packed qkv row, not a multiple of the " +
         std::to_string(kCudnnByteAlignment) + "-byte alignment cuDNN is told";
}

}  // namespace tt
