// Evaluates a CudnnGraph (kernels/cudnn/cudnn_graph.h) on the host, in double, with the
// semantics of cuDNN's backend ops, so that tests can check what a described graph computes
// without a GPU:
//   - every tensor is a [d0,d1,d2,d3] array; a size-1 dimension broadcasts against a larger one;
//   - a tensor in memory is read from (or written to) a host buffer through its strides, at
//     the base offset it is bound to, as cuDNN reads device memory through a tensor descriptor;
//   - matmul: y[a,b,m,n] = sum_k x[a,b,m,k] * b[a,b,k,n];
//   - pointwise: MUL ADD SUB DIV (x op b), EXP LOG (of x), GEN_INDEX (the index along `axis`
//     of each element of y), CMP_GE (x >= b), BINARY_SELECT (t ? x : b);
//   - reduction: MAX or ADD over the dimensions where y has size 1;
//   - reshape: y is x's memory image read through y's strides (a transpose when the strides
//     are permuted): x is laid out with its own strides, then y reads that layout;
//   - Bernoulli: the samples come from a function the test supplies.
// Storage dtypes are ignored: everything is double, so the result is the graph's exact math.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cudnn/cudnn_graph.h"

namespace tt::test {

class GraphEvaluator {
 public:
  using Sampler = std::function<double(int64_t, int64_t, int64_t, int64_t)>;

  explicit GraphEvaluator(const CudnnGraph& graph) : graph_(graph) {
    for (const GraphTensor& t : graph.tensor_list()) tensors_[t.id] = t;
  }

  // Element (i0..i3) of tensor `id` lives at memory[base + sum i_k stride_k].
  void bind(int64_t id, std::vector<double>& memory, size_t base) { bindings_[id] = Binding{&memory, base}; }
  // The Bernoulli samples (0 or 1) by element index.
  void set_bernoulli(Sampler sample) { bernoulli_ = std::move(sample); }

  // Evaluates every op in order; outputs bound to memory are written there.
  void run() {
    for (const GraphOp& op : graph_.op_list()) {
      const GraphTensor& y = tensor(op.y);
      std::vector<double> out(static_cast<size_t>(numel(y.dims)));
      for_each_index(y.dims, [&](const Idx& i, size_t n) { out[n] = evaluate(op, y, i); });
      values_[op.y] = std::move(out);
      if (bindings_.count(op.y)) {
        const Binding& bind = bindings_.at(op.y);
        for_each_index(y.dims, [&](const Idx& i, size_t n) { (*bind.memory)[bind.base + offset(y.strides, i)] = values_[op.y][n]; });
      }
    }
  }

 private:
  using Idx = std::array<int64_t, 4>;
  struct Binding {
    std::vector<double>* memory;
    size_t base;
  };

  static int64_t numel(const Dims4& d) { return d[0] * d[1] * d[2] * d[3]; }
  static size_t offset(const Dims4& strides, const Idx& i) {
    int64_t o = 0;
    for (int k = 0; k < 4; ++k) o += i[k] * strides[k];
    return static_cast<size_t>(o);
  }
  template <typename F>
  static void for_each_index(const Dims4& d, F f) {
    size_t n = 0;
    for (int64_t a = 0; a < d[0]; ++a)
      for (int64_t b = 0; b < d[1]; ++b)
        for (int64_t c = 0; c < d[2]; ++c)
          for (int64_t e = 0; e < d[3]; ++e) f(Idx{a, b, c, e}, n++);
  }

  const GraphTensor& tensor(int64_t id) const {
    const auto it = tensors_.find(id);
    if (it == tensors_.end()) throw std::logic_error("graph evaluator: no tensor " + std::to_string(id));
    return it->second;
  }

  // Element i of tensor id, broadcasting its size-1 dimensions.
  double at(int64_t id, const Idx& i) const {
    const GraphTensor& t = tensor(id);
    if (t.by_value) return t.value;
    Idx j = i;
    for (int k = 0; k < 4; ++k)
      if (t.dims[k] == 1) j[k] = 0;
    const auto computed = values_.find(id);
    if (computed != values_.end()) {
      const size_t n = static_cast<size_t>(((j[0] * t.dims[1] + j[1]) * t.dims[2] + j[2]) * t.dims[3] + j[3]);
      return computed->second[n];
    }
    const auto bound = bindings_.find(id);
    if (bound == bindings_.end()) throw std::logic_error("graph evaluator: tensor " + std::to_string(id) + " has no value");
    return (*bound->second.memory)[bound->second.base + offset(t.strides, j)];
  }

  double evaluate(const GraphOp& op, const GraphTensor& y, const Idx& i) const {
    switch (op.kind) {
      case GraphOpKind::Matmul: {
        const int64_t K = tensor(op.x).dims[3];
        double sum = 0.0;
        for (int64_t k = 0; k < K; ++k) sum += at(op.x, Idx{i[0], i[1], i[2], k}) * at(op.b, Idx{i[0], i[1], k, i[3]});
        return sum;
      }
      case GraphOpKind::Pointwise: return pointwise(op, i);
      case GraphOpKind::Reduction: {
        const GraphTensor& x = tensor(op.x);
        bool first = true;
        double acc = 0.0;
        for_each_index(x.dims, [&](const Idx& j, size_t) {
          for (int k = 0; k < 4; ++k)
            if (y.dims[k] != 1 && j[k] != i[k]) return;
          const double v = at(op.x, j);
          acc = op.reduce_op == CUDNN_REDUCE_TENSOR_MAX ? (first ? v : std::max(acc, v)) : acc + v;
          first = false;
        });
        if (op.reduce_op != CUDNN_REDUCE_TENSOR_MAX && op.reduce_op != CUDNN_REDUCE_TENSOR_ADD)
          throw std::logic_error("graph evaluator: reduction not modelled");
        return acc;
      }
      case GraphOpKind::Reshape: return reshaped(op, y, i);
      case GraphOpKind::Bernoulli:
        if (!bernoulli_) throw std::logic_error("graph evaluator: no Bernoulli sampler set");
        return bernoulli_(i[0], i[1], i[2], i[3]);
    }
    throw std::logic_error("graph evaluator: unknown op");
  }

  double pointwise(const GraphOp& op, const Idx& i) const {
    switch (op.pointwise_mode) {
      case CUDNN_POINTWISE_MUL: return at(op.x, i) * at(op.b, i);
      case CUDNN_POINTWISE_ADD: return at(op.x, i) + at(op.b, i);
      case CUDNN_POINTWISE_SUB: return at(op.x, i) - at(op.b, i);
      case CUDNN_POINTWISE_DIV: return at(op.x, i) / at(op.b, i);
      case CUDNN_POINTWISE_EXP: return std::exp(at(op.x, i));
      case CUDNN_POINTWISE_LOG: return std::log(at(op.x, i));
      case CUDNN_POINTWISE_GEN_INDEX: return static_cast<double>(i[op.axis]);
      case CUDNN_POINTWISE_CMP_GE: return at(op.x, i) >= at(op.b, i) ? 1.0 : 0.0;
      case CUDNN_POINTWISE_BINARY_SELECT: return at(op.t, i) != 0.0 ? at(op.x, i) : at(op.b, i);
      default: throw std::logic_error("graph evaluator: pointwise mode " + std::to_string(op.pointwise_mode));
    }
  }

  // y's element i: lay x out in memory with x's strides (or use x's own memory when x is
  // bound), then read that memory through y's strides.
  double reshaped(const GraphOp& op, const GraphTensor& y, const Idx& i) const {
    const GraphTensor& x = tensor(op.x);
    const auto bound = bindings_.find(op.x);
    if (values_.count(op.x) == 0 && bound != bindings_.end())
      return (*bound->second.memory)[bound->second.base + offset(y.strides, i)];
    auto& image = images_[op.x];
    if (image.empty()) {
      int64_t extent = 1;
      for (int k = 0; k < 4; ++k) extent += (x.dims[k] - 1) * x.strides[k];
      image.assign(static_cast<size_t>(extent), 0.0);
      for_each_index(x.dims, [&](const Idx& j, size_t) { image[offset(x.strides, j)] = at(op.x, j); });
    }
    return image[offset(y.strides, i)];
  }

  const CudnnGraph& graph_;
  std::map<int64_t, GraphTensor> tensors_;
  std::map<int64_t, Binding> bindings_;
  std::map<int64_t, std::vector<double>> values_;
  mutable std::map<int64_t, std::vector<double>> images_;  // reshape inputs laid out in memory
  Sampler bernoulli_;
};

}  // namespace tt::test
