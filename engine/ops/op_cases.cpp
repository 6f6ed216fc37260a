// The table of op cases (see op_cases.h). Each op family is one function that turns a workload
// into the tensors of one call; the tolerances follow engine/ops/op_tolerance.h, each with the
// reduction lengths that justify it.
#include "engine/ops/op_cases.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "engine/config.h"
#include "engine/nf4_weight.h"
#include "engine/ops/op_tolerance.h"
#include "engine/rng.h"

namespace tt {

namespace {

// The seed of every input; RngStream::Data with the tensor's index in its case as the id, so
// a case's inputs are the same run after run, on every machine.
constexpr uint64_t kInputSeed = 1337;
// The seed of every dropout mask (the masks are shared Philox math: kernels/common/philox.h).
constexpr uint64_t kDropoutSeed = 0x5eed;

// One model and batch: the sizes the model's ops run at.
struct Workload {
  ModelConfig model;
  int B, T;

  int N() const { return B * T; }
  int C() const { return model.d_model; }
  int F() const { return model.d_ff; }
  int V() const { return model.vocab_size; }
  int NH() const { return model.n_head; }
  int HS() const { return model.head_dim(); }
};

// The seed workload: the defaults of ModelConfig and RunConfig.
Workload seed_workload() {
  const RunConfig run;
  return {ModelConfig{}, run.batch, run.seq};
}

// Sizes that are multiples of nothing a kernel tiles by (13, 37, 52, 99), a head size of 13,
// and learned positions, which the seed workload does not use.
Workload odd_workload() {
  ModelConfig m;
  m.vocab_size = 37;
  m.d_model = 52;
  m.n_head = 4;
  m.n_layer = 1;
  m.d_ff = 99;
  m.pos_embedding = PosEmbedding::Learned;
  m.max_seq_len = 13;
  return {m, 3, 13};
}

std::string num(double x) {  // 0.1 -> "0.1"
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

// Builds the tensors of one case with activations in `act`: input, output and scratch make
// `act` tensors (values rounded to it); grad and the *_f32 ones are F32 whatever the storage
// (parameter gradients, statistics, losses, optimizer and scaler state).
class CaseBuilder {
 public:
  explicit CaseBuilder(DType act) : act_(act) {}
  DType act() const { return act_; }  // the activations' storage dtype

  // A random input in [lo, hi), not compared.
  int input(const std::string& name, Shape shape, float lo = -1.0f, float hi = 1.0f) {
    return add(name, act_, shape, uniform(shape.numel(), lo, hi), -1.0);
  }
  // A random tensor the op writes part of, compared after it: what it must leave alone is
  // checked along with what it writes.
  int updated(const std::string& name, Shape shape, double tol) {
    return add(name, act_, shape, uniform(shape.numel(), -1.0f, 1.0f), tol);
  }
  // A random F32 tensor in [lo, hi), compared with tol after the op when tol >= 0.
  int random_f32(const std::string& name, Shape shape, float lo, float hi, double tol) {
    return add(name, DType::F32, shape, uniform(shape.numel(), lo, hi), tol);
  }
  int input_f32(const std::string& name, Shape shape, float lo = -1.0f, float hi = 1.0f) {
    return random_f32(name, shape, lo, hi, -1.0);
  }
  // An output the op must overwrite entirely: NaN before the op, so a skipped element shows.
  int output(const std::string& name, Shape shape, double tol) { return add(name, act_, shape, nans(shape), tol); }
  int output_f32(const std::string& name, Shape shape, double tol) {
    return add(name, DType::F32, shape, nans(shape), tol);
  }
  // Scratch the op may use, or an input `prepare` computes: NaN before, not compared.
  int scratch(const std::string& name, Shape shape) { return output(name, shape, -1.0); }
  int scratch_f32(const std::string& name, Shape shape) { return output_f32(name, shape, -1.0); }
  // A parameter gradient the op accumulates into (+=): random nonzero values before, so the
  // accumulation is checked, not only the sum.
  int grad(const std::string& name, Shape shape, double tol) { return random_f32(name, shape, -1.0f, 1.0f, tol); }
  // An F32 tensor with given contents, read and possibly written (the loss scaler's state).
  int state_f32(const std::string& name, Shape shape, std::vector<float> values, double tol) {
    return add(name, DType::F32, shape, std::move(values), tol);
  }
  // Random int32 ids in [0, n), not compared.
  int ids(const std::string& name, Shape shape, int n) {
    CaseTensor t = blank(name, DType::I32, shape);
    const uint32_t id = next_id();
    for (int64_t i = 0; i < shape.numel(); ++i) t.ids.push_back(rng_below(kInputSeed, RngStream::Data, id, i, n));
    return push(std::move(t));
  }
  // One int32 in backend memory (a step, a flag); compare: exactly.
  int scalar_i32(const std::string& name, int32_t value, bool compare) {
    CaseTensor t = blank(name, DType::I32, Shape{1});
    t.ids = {value};
    t.tol = compare ? 0.0 : -1.0;
    return push(std::move(t));
  }
  // A U8 tensor with given contents, not compared (an NF4 weight's codes).
  int bytes(const std::string& name, Shape shape, const std::vector<uint8_t>& values) {
    CaseTensor t = blank(name, DType::U8, shape);
    t.ids.assign(values.begin(), values.end());
    return push(std::move(t));
  }
  // n random values in [lo, hi) that are no tensor of the case (what an input is made from).
  std::vector<float> random_values(int64_t n, float lo, float hi) { return uniform(n, lo, hi); }
  // An absent optional tensor: null data.
  int absent(const std::string& name) {
    CaseTensor t = blank(name, DType::F32, Shape{});
    t.absent = true;
    return push(std::move(t));
  }

  // A loss scaler in the case's tensors: scale 1, no inf found.
  struct Scaler {
    int scale, growth_tracker, found_inf, skipped_steps, first_skipped_step, grad_norm_sq;
  };
  Scaler unit_scaler() {
    return Scaler{state_f32("loss scale", {1}, {1.0f}, -1.0), scalar_i32("growth tracker", 0, false),
                  scalar_i32("found_inf", 0, true),            scalar_i32("skipped steps", 0, false),
                  scalar_i32("first skipped step", -1, false), state_f32("grad norm^2", {1}, {0.0f}, -1.0)};
  }

  // Compares the (N,V) tensor `tensor` at each row's target and elsewhere apart (ids `targets`).
  void compare_by_target(int tensor, int targets) { tensors_[tensor].targets = targets; }

  std::vector<CaseTensor>& tensors() { return tensors_; }

 private:
  int add(const std::string& name, DType dtype, Shape shape, std::vector<float> values, double tol) {
    CaseTensor t = blank(name, dtype, shape);
    t.values = std::move(values);
    t.tol = tol;
    // 16-bit tensors hold values of the type: both backends then read the same, exact inputs
    if (dtype == DType::BF16)
      for (float& x : t.values) x = to_float(float_to_bf16(x));
    if (dtype == DType::F16)
      for (float& x : t.values) x = to_float(float_to_f16(x));
    return push(std::move(t));
  }
  static CaseTensor blank(const std::string& name, DType dtype, Shape shape) {
    CaseTensor t;
    t.name = name;
    t.dtype = dtype;
    t.shape = shape;
    return t;
  }
  int push(CaseTensor t) {
    tensors_.push_back(std::move(t));
    return static_cast<int>(tensors_.size()) - 1;
  }
  uint32_t next_id() { return static_cast<uint32_t>(tensors_.size()); }
  std::vector<float> uniform(int64_t n, float lo, float hi) {
    const uint32_t id = next_id();
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng_uniform(kInputSeed, RngStream::Data, id, i);
    return v;
  }
  static std::vector<float> nans(Shape shape) {
    return std::vector<float>(shape.numel(), std::numeric_limits<float>::quiet_NaN());
  }

  DType act_;
  std::vector<CaseTensor> tensors_;
};

LossScalerState scaler_at(const CaseViews& v, const CaseBuilder::Scaler& s) {
  return LossScalerState{v[s.scale],         v[s.growth_tracker],     v[s.found_inf],
                         v[s.skipped_steps], v[s.first_skipped_step], v[s.grad_norm_sq]};
}

// A dropout mask whose step lives in the case's int32 tensor `step` (backend memory, where
// the kernels read it).
DropoutMask mask_at(const CaseViews& v, int step, float p, DropoutSite site) {
  return DropoutMask{p, kDropoutSeed, static_cast<const uint32_t*>(v[step].data), 0, site};
}

// How a case's parameter gradients are written, for its shape column.
std::string grads_label(ParamGrads grads) { return grads == ParamGrads::Write ? ", grads written" : ""; }

// Collects the specs of one dtype.
class Table {
 public:
  explicit Table(DType dtype) : dtype_(dtype) {}
  // `build` fills a CaseBuilder and returns the case's prepare, run and cost.
  void add(const std::string& op, const std::string& shape, std::function<void(CaseBuilder&, OpCase&)> build) {
    const DType act = dtype_;
    specs_.push_back({op, shape, act, [act, build] {
                        CaseBuilder b(act);
                        OpCase c;
                        build(b, c);
                        c.tensors = std::move(b.tensors());
                        return c;
                      }});
  }
  DType dtype() const { return dtype_; }
  std::vector<OpCaseSpec>& specs() { return specs_; }

 private:
  DType dtype_;
  std::vector<OpCaseSpec> specs_;
};

// ---- embedding: tokens (B,T), wte (V,C), wpe (T,C) or none -> out (B,T,C); backward dwte, dwpe ----
void embedding_cases(Table& t, const Workload& w) {
  const bool pos = w.model.pos_embedding == PosEmbedding::Learned;
  const std::string shape = "B" + std::to_string(w.B) + " T" + std::to_string(w.T) + " C" + std::to_string(w.C()) +
                            " V" + std::to_string(w.V()) + (pos ? " pos" : "");
  t.add("embedding_forward", shape, [w, pos](CaseBuilder& b, OpCase& c) {
    const int tokens = b.ids("tokens", {w.B, w.T}, w.V());
    const int wte = b.input("wte", {w.V(), w.C()});
    const int wpe = pos ? b.input("wpe", {w.T, w.C()}) : b.absent("wpe");
    const int out = b.output("out", {w.B, w.T, w.C()}, kElementwiseTol);  // one add per element
    c.run = [=](Backend& be, const CaseViews& v) { be.embedding_forward(v[out], v[tokens], v[wte], v[wpe]); };
    c.cost = [=](const CaseViews& v) { return embedding_forward_cost(v[out], v[tokens], v[wte], v[wpe]); };
  });
  // Gradients added to their start values (a later micro-batch), and written over them (the
  // first: the start values must not show).
  for (ParamGrads grads : {ParamGrads::Add, ParamGrads::Write}) {
    t.add("embedding_backward", shape + grads_label(grads), [w, pos, grads](CaseBuilder& b, OpCase& c) {
      const int tokens = b.ids("tokens", {w.B, w.T}, w.V());
      const int dout = b.input("dout", {w.B, w.T, w.C()});
      // a dwte row sums the rows of up to N tokens onto its start value; a dwpe row those of B
      const int dwte = b.grad("dwte", {w.V(), w.C()}, reduction_tol(w.N() + 1));
      const int dwpe = pos ? b.grad("dwpe", {w.T, w.C()}, reduction_tol(w.B + 1)) : b.absent("dwpe");
      c.run = [=](Backend& be, const CaseViews& v) {
        be.embedding_backward(v[dwte], v[dwpe], v[dout], v[tokens], grads);
      };
      c.cost = [=](const CaseViews& v) {
        return embedding_backward_cost(v[dwte], v[dwpe], v[dout], v[tokens], grads);
      };
    });
  }
}

// ---- linear, the FFN's first layer: inp (N,C), weight (F,C), bias (F) -> out (N,F) ----
void linear_cases_at(Table& t, int N, int I, int O) {
  const DType act = t.dtype();
  const std::string shape = "N" + std::to_string(N) + " I" + std::to_string(I) + " O" + std::to_string(O) + " bias";
  t.add("linear_forward", shape, [=](CaseBuilder& b, OpCase& c) {
    const int x = b.input("inp", {N, I});
    const int weight = b.input("weight", {O, I});
    const int bias = b.input("bias", {O});
    const int out = b.output("out", {N, O}, gemm_reduction_tol(I + 1, act));  // I products and the bias
    c.run = [=](Backend& be, const CaseViews& v) { be.linear_forward(v[out], v[x], v[weight], v[bias]); };
    c.cost = [=](const CaseViews& v) { return linear_forward_cost(v[out], v[x], v[weight], v[bias]); };
  });
  // The parameter gradients added (a later micro-batch) with the input gradient written, and
  // the parameter gradients written (the first) with the input gradient added to a residual's.
  for (const auto& mode : {std::pair{ParamGrads::Add, InputGrad::Write}, std::pair{ParamGrads::Write, InputGrad::Add}}) {
    const ParamGrads grads = mode.first;  // (named copies: a lambda cannot capture a structured binding in C++17)
    const InputGrad input = mode.second;
    const std::string modes = grads_label(grads) + (input == InputGrad::Add ? ", input added" : "");
    t.add("linear_backward", shape + modes, [=](CaseBuilder& b, OpCase& c) {
      const int x = b.input("inp", {N, I});
      const int weight = b.input("weight", {O, I});
      const int dout = b.input("dout", {N, O});
      // O products (onto the start value when added)
      const int dx = input == InputGrad::Add ? b.updated("dinp", {N, I}, gemm_reduction_tol(O + 1, act))
                                             : b.output("dinp", {N, I}, gemm_reduction_tol(O, act));
      // N products onto the start value; the bias's column sums are an fp32 kernel, not a GEMM
      const int dw = b.grad("dweight", {O, I}, gemm_reduction_tol(N + 1, act));
      const int db = b.grad("dbias", {O}, reduction_tol(N + 1));
      c.run = [=](Backend& be, const CaseViews& v) {
        be.linear_backward(v[dx], v[dw], v[db], v[dout], v[x], v[weight], grads, input);
      };
      c.cost = [=](const CaseViews& v) {
        return linear_backward_cost(v[dx], v[dw], v[db], v[dout], v[x], v[weight], grads, input);
      };
    });
  }
}

void linear_cases(Table& t, const Workload& w) { linear_cases_at(t, w.N(), w.C(), w.F()); }

// ---- a frozen linear (LoRA's base): the input gradient only, added to a residual's ----
void frozen_linear_cases(Table& t, const Workload& w) {
  const DType act = t.dtype();
  const int N = w.N(), I = w.C(), O = w.F();
  const std::string shape = "N" + std::to_string(N) + " I" + std::to_string(I) + " O" + std::to_string(O);
  t.add("linear_backward", shape + " frozen weight, input added", [=](CaseBuilder& b, OpCase& c) {
    const int x = b.input("inp", {N, I});
    const int weight = b.input("weight", {O, I});
    const int dout = b.input("dout", {N, O});
    const int dx = b.updated("dinp", {N, I}, gemm_reduction_tol(O + 1, act));  // O products onto the start value
    const int dw = b.absent("dweight");
    const int db = b.absent("dbias");
    c.run = [=](Backend& be, const CaseViews& v) {
      be.linear_backward(v[dx], v[dw], v[db], v[dout], v[x], v[weight], ParamGrads::Add, InputGrad::Add);
    };
    c.cost = [=](const CaseViews& v) {
      return linear_backward_cost(v[dx], v[dw], v[db], v[dout], v[x], v[weight], ParamGrads::Add, InputGrad::Add);
    };
  });
}

// ---- column windows (LoRA's adapters on part of a fused projection): a window of (N, 3C) from
// column C, as k_proj's of in_proj; the scale rounded into each element, then the add ----
void column_window_cases(Table& t, const Workload& w) {
  const int N = w.N(), C = w.C(), O = 3 * w.C(), W = w.C() / 2;
  const float scale = 2.5f;
  const std::string shape = "N" + std::to_string(N) + " O" + std::to_string(O) + " window [" + std::to_string(C) +
                            ", " + std::to_string(C + W) + ") scale " + num(scale);
  t.add("add_scaled_columns", shape, [=](CaseBuilder& b, OpCase& c) {
    const int delta = b.input("delta", {N, W});
    const int out = b.updated("out", {N, O}, kElementwiseTol);
    c.run = [=](Backend& be, const CaseViews& v) { be.add_scaled_columns(v[out], C, v[delta], scale); };
    c.cost = [=](const CaseViews& v) { return elementwise_cost({v[delta], v[delta]}, v[delta]); };
  });
  t.add("copy_scaled_columns", shape, [=](CaseBuilder& b, OpCase& c) {
    const int inp = b.input("inp", {N, O});
    const int out = b.output("out", {N, W}, kElementwiseTol);
    c.run = [=](Backend& be, const CaseViews& v) { be.copy_scaled_columns(v[out], v[inp], C, scale); };
    c.cost = [=](const CaseViews& v) { return elementwise_cost({v[out]}, v[out]); };
  });
}

// ---- attention: qkv (B,T,W) -> out (B,T,C), lse (B,NH,T); backward dqkv ----
struct AttentionCase {
  int B, T, NH, HS;
  bool causal;
  float p;                     // dropout on the weights
  bool offer_library = false;  // each call first offers the case to use_library_attention
  int KVH = 0;                 // key/value heads (grouped-query attention); 0: NH
};
void attention_case(Table& t, const AttentionCase& k) {
  const AttentionShape s{k.B, k.T, k.NH, k.HS, k.causal, k.KVH};
  const float p = k.p;
  const int B = k.B, T = k.T, NH = k.NH, C = k.NH * k.HS;
  const int W = static_cast<int>(s.layout().width());  // 3C, less with grouped key/value heads
  const std::string shape = "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" + std::to_string(NH) +
                            (s.kv_heads() != NH ? " KVH" + std::to_string(s.kv_heads()) : std::string()) + " HS" +
                            std::to_string(s.HS) + (k.causal ? " causal" : " full") + " p" + num(p);
  // Scores are HS-term dot products, the softmax sums T exps, each output sums T weighted
  // values (+1: the dropout scale). A flash kernel also rescales its running sums once per
  // tile of 32 keys and divides once at the end: T/32 + 2 more roundings. lse = max + log(sum)
  // carries the sum's T-term error, absolute, within the same budget.
  const double fwd_tol = reduction_tol(s.HS + 2 * T + T / 32 + 3);
  t.add("attention_forward", shape, [=](CaseBuilder& b, OpCase& c) {
    const int step = b.scalar_i32("dropout step", 7, false);
    const int qkv = b.input("qkv", {B, T, W}, -1.5f, 1.5f);
    // 16-bit on tensor cores (flash_attention_mma.cu): each weight P is rounded to the storage
    // type before its product with v, a relative u_16 per term: one more storage_tol
    const double weights = b.act() != DType::F32 ? storage_tol(b.act()) : 0.0;
    const int out = b.output("out", {B, T, C}, fwd_tol + weights);
    const int lse = b.output_f32("lse", {B, NH, T}, fwd_tol);
    c.run = [=](Backend& be, const CaseViews& v) {
      if (k.offer_library) be.use_library_attention(s, v[qkv].dtype, p);
      be.attention_forward(v[out], v[lse], v[qkv], s, mask_at(v, step, p, DropoutSite::AttentionWeights));
    };
    c.cost = [=](const CaseViews& v) { return attention_forward_cost(v[out], v[lse], v[qkv], s); };
  });
  t.add("attention_backward", shape, [=](CaseBuilder& b, OpCase& c) {
    const int step = b.scalar_i32("dropout step", 7, false);
    const int qkv = b.input("qkv", {B, T, W}, -1.5f, 1.5f);
    const int out = b.scratch("out", {B, T, C});
    const int lse = b.scratch_f32("lse", {B, NH, T});
    const int dout = b.input("dout", {B, T, C});
    // The backward's own sums over HS (dout . v, the recomputed scores) and over T (D, dq,
    // dk, dv) on top of the forward's lse and out: twice the forward's budget, and a shared key
    // or value head sums its group's NH/KVH heads' gradients (their T-term sums, end to end).
    // 16-bit on tensor cores: P and dS rounded before their products, one storage_tol each.
    const double weights = b.act() != DType::F32 ? storage_tol(b.act()) : 0.0;
    const int dqkv = b.output("dqkv", {B, T, W}, s.layout().group() * (2.0 * fwd_tol + 2.0 * weights));
    const int dout_dot_out = b.scratch_f32("dout_dot_out", {B, NH, T});
    c.prepare = [=](Backend& be, const CaseViews& v) {  // the out and lse the backward reads
      be.attention_forward(v[out], v[lse], v[qkv], s, mask_at(v, step, p, DropoutSite::AttentionWeights));
    };
    c.run = [=](Backend& be, const CaseViews& v) {
      if (k.offer_library) be.use_library_attention(s, v[qkv].dtype, p);
      be.attention_backward(v[dqkv], v[dout_dot_out], v[dout], v[qkv], v[out], v[lse], s,
                            mask_at(v, step, p, DropoutSite::AttentionWeights));
    };
    c.cost = [=](const CaseViews& v) {
      return attention_backward_cost(v[dqkv], v[dout_dot_out], v[dout], v[qkv], v[out], v[lse], s);
    };
  });
}

// The workload's shape, causal and not, with its dropout on the weights.
void attention_cases(Table& t, const Workload& w) {
  for (bool causal : {true, false}) attention_case(t, {w.B, w.T, w.NH(), w.HS(), causal, w.model.dropout});
}

// Where tiled kernels go wrong: T = 1, T not a multiple of the 32- or 64-row tile (37, 70, 130),
// head sizes 8, 40, 64 and 128, causal and not, dropout 0 and 0.1; grouped key/value heads: 4
// query heads on 2 (grouped-query) and on 1 (multi-query); and GPT-2's T = 1024 at a head of 64
// (the 16-bit ones of head size 64 and 128 run on tensor cores).
void attention_odd_cases(Table& t) {
  for (const AttentionCase& k : {AttentionCase{2, 1, 2, 8, true, 0.0f}, AttentionCase{2, 1, 2, 8, false, 0.1f},
                                 AttentionCase{2, 37, 2, 40, true, 0.1f}, AttentionCase{2, 37, 2, 40, false, 0.0f},
                                 AttentionCase{1, 70, 2, 8, true, 0.0f}, AttentionCase{1, 70, 1, 64, false, 0.1f},
                                 AttentionCase{1, 37, 2, 64, true, 0.1f}, AttentionCase{2, 37, 4, 16, true, 0.1f, false, 2},
                                 AttentionCase{1, 70, 4, 8, false, 0.0f, false, 1}, AttentionCase{2, 1, 2, 64, false, 0.1f},
                                 AttentionCase{1, 130, 2, 128, true, 0.1f}, AttentionCase{2, 70, 4, 64, true, 0.1f, false, 2},
                                 AttentionCase{1, 1024, 1, 64, true, 0.1f}})
    attention_case(t, k);
}

// ---- incremental decoding: one new token per sequence against a KV cache (B,maxT,KC) ----
// At the workload's B and T, the new token three quarters in: a long attention, and positions
// after it, NaN in the caches, that attention_decode must never read. Once with a key/value
// head per query head (KC = C), once with the query heads sharing one (multi-query, KC = HS).
void decode_cases(Table& t, const Workload& w) {
  const int B = w.B, maxT = w.T, C = w.C(), NH = w.NH(), HS = w.HS();
  const int pos = 3 * w.T / 4;
  for (int KVH : {NH, 1}) {
    const int KC = KVH * HS, W = C + 2 * KC;
    const std::string shape = "B" + std::to_string(B) + " maxT" + std::to_string(maxT) + " C" + std::to_string(C) +
                              (KVH != NH ? " KC" + std::to_string(KC) : std::string()) + " pos" + std::to_string(pos);
    // a copy of stored values: both caches, the written row and the rest, bit for bit
    t.add("kv_cache_append", shape, [=](CaseBuilder& b, OpCase& c) {
      const int qkv = b.input("qkv", {B, W});
      const int k_cache = b.updated("k_cache", {B, maxT, KC}, 0.0);
      const int v_cache = b.updated("v_cache", {B, maxT, KC}, 0.0);
      c.run = [=](Backend& be, const CaseViews& v) { be.kv_cache_append(v[k_cache], v[v_cache], v[qkv], pos); };
      c.cost = [=](const CaseViews& v) { return kv_cache_append_cost(v[k_cache], v[qkv]); };
    });
    t.add("attention_decode", shape + " NH" + std::to_string(NH), [=](CaseBuilder& b, OpCase& c) {
      const int qkv = b.input("qkv", {B, W}, -1.5f, 1.5f);
      const int k_cache = b.input("k_cache", {B, maxT, KC}, -1.5f, 1.5f);
      const int v_cache = b.input("v_cache", {B, maxT, KC});
      for (int cache : {k_cache, v_cache})  // positions after pos: never read
        for (int bt = 0; bt < B * maxT; ++bt)
          if (bt % maxT > pos)
            std::fill_n(b.tensors()[cache].values.begin() + static_cast<int64_t>(bt) * KC, KC,
                        std::numeric_limits<float>::quiet_NaN());
      // as the full attention's row: HS-term scores, a (pos+1)-term softmax sum, (pos+1)-term outputs
      const int out = b.output("out", {B, C}, reduction_tol(HS + 2 * (pos + 1) + 1));
      c.run = [=](Backend& be, const CaseViews& v) {
        be.attention_decode(v[out], v[qkv], v[k_cache], v[v_cache], pos, NH);
      };
      c.cost = [=](const CaseViews& v) {
        return attention_decode_cost(v[out], v[qkv], v[k_cache], v[v_cache], pos, NH);
      };
    });
  }
}

// ---- layernorm over C: inp (N,C), weight, bias (C) -> out (N,C), mean, rstd (N); backward ----
void layernorm_cases(Table& t, const Workload& w) {
  const int N = w.N(), C = w.C();
  const float eps = w.model.layer_norm_eps;
  // LayerNorm, and RMSNorm (Llama's: no mean, no bias; kernels/backend.h: mean and bias absent)
  for (bool rms : {false, true}) {
  const std::string shape = "N" + std::to_string(N) + " C" + std::to_string(C) + (rms ? " rmsnorm" : "");
  // inputs away from zero mean, weights away from zero: a wrong statistic shows
  t.add("layernorm_forward", shape, [=](CaseBuilder& b, OpCase& c) {
    const int x = b.input("inp", {N, C}, -2.0f, 3.0f);
    const int weight = b.input("weight", {C}, 0.5f, 1.5f);
    const int bias = rms ? b.absent("bias") : b.input("bias", {C});
    // mean: a C-term sum; the variance another over the centred values, then rstd and the scale
    const int out = b.output("out", {N, C}, reduction_tol(C + 4));
    const int mean = rms ? b.absent("mean") : b.output_f32("mean", {N}, reduction_tol(C));
    const int rstd = b.output_f32("rstd", {N}, reduction_tol(C + 4));
    c.run = [=](Backend& be, const CaseViews& v) {
      be.layernorm_forward(v[out], v[mean], v[rstd], v[x], v[weight], v[bias], eps);
    };
    c.cost = [=](const CaseViews& v) {
      return layernorm_forward_cost(v[out], v[mean], v[rstd], v[x], v[weight], v[bias]);
    };
  });
  for (ParamGrads grads : {ParamGrads::Add, ParamGrads::Write}) {
  t.add("layernorm_backward", shape + grads_label(grads), [=](CaseBuilder& b, OpCase& c) {
    const int x = b.input("inp", {N, C}, -2.0f, 3.0f);
    const int weight = b.input("weight", {C}, 0.5f, 1.5f);
    const int bias = rms ? b.absent("bias") : b.input("bias", {C});
    const int out = b.scratch("out", {N, C});
    const int mean = rms ? b.absent("mean") : b.scratch_f32("mean", {N});
    const int rstd = b.scratch_f32("rstd", {N});
    const int dout = b.input("dout", {N, C});
    // dinp: two C-term sums and the combination (3C); dweight: N rows onto the start value, each
    // from the normalised input (C); dbias: N rows
    const int dx = b.output("dinp", {N, C}, reduction_tol(3 * C));
    const int dw = b.grad("dweight", {C}, reduction_tol(N + C + 1));
    const int db = rms ? b.absent("dbias") : b.grad("dbias", {C}, reduction_tol(N + 1));
    c.prepare = [=](Backend& be, const CaseViews& v) {  // the statistics the backward reads
      be.layernorm_forward(v[out], v[mean], v[rstd], v[x], v[weight], v[bias], eps);
    };
    c.run = [=](Backend& be, const CaseViews& v) {
      be.layernorm_backward(v[dx], v[dw], v[db], v[dout], v[x], v[weight], v[mean], v[rstd], grads);
    };
    c.cost = [=](const CaseViews& v) {
      return layernorm_backward_cost(v[dx], v[dw], v[db], v[dout], v[x], v[weight], v[mean], v[rstd], grads);
    };
  });
  }
  }
}

// ---- the residual stream around a norm, fused: dropout + residual add + LayerNorm, and back ----
// Both arrangements: post-norm (the norm after the add; backward: two gradients meet at the
// norm's input) and pre-norm (forward: the add alone, or the add and the next norm; backward:
// the residual's gradient added after the norm's), each with the workload's dropout.
void residual_norm_cases(Table& t, const Workload& w) {
  const int N = w.N(), C = w.C();
  const float p = w.model.dropout;
  const float eps = w.model.layer_norm_eps;
  const std::string nc = "N" + std::to_string(N) + " C" + std::to_string(C) + " p" + num(p);
  // with the norm (LayerNorm, and RMSNorm: no mean, no bias), and without (pre-norm's second add)
  struct Form {
    bool norm, rms;
  };
  for (const Form f : {Form{true, false}, Form{true, true}, Form{false, false}}) {
    const bool norm = f.norm, rms = f.rms;
    t.add("dropout_residual_layernorm_forward", nc + (norm ? (rms ? ", rmsnorm" : "") : ", no norm"),
          [=](CaseBuilder& b, OpCase& c) {
      const int step = b.scalar_i32("dropout step", 11, false);
      const int residual = b.input("residual", {N, C}, -2.0f, 2.0f);
      const int branch = b.input("branch", {N, C}, -2.0f, 2.0f);
      const int weight = b.input("weight", {C}, 0.5f, 1.5f);
      const int bias = rms ? b.absent("bias") : b.input("bias", {C});
      const int res_out = b.output("res_out", {N, C}, kElementwiseTol);  // a scaled add
      // as layernorm_forward: C-term mean and variance, then one scale per element
      const int out = norm ? b.output("ln_out", {N, C}, reduction_tol(2 * C)) : b.absent("ln_out");
      const int mean = norm && !rms ? b.output_f32("mean", {N}, reduction_tol(C)) : b.absent("mean");
      const int rstd = norm ? b.output_f32("rstd", {N}, reduction_tol(2 * C)) : b.absent("rstd");
      c.run = [=](Backend& be, const CaseViews& v) {
        be.dropout_residual_layernorm_forward(v[res_out], v[out], v[mean], v[rstd], v[residual], v[branch], v[weight],
                                              v[bias], eps, mask_at(v, step, p, DropoutSite::AttentionOutput));
      };
      c.cost = [=](const CaseViews& v) {
        return dropout_residual_layernorm_forward_cost(v[res_out], v[out], v[mean], v[rstd], v[residual], v[branch],
                                                       v[weight], v[bias]);
      };
    });
  }
  // post-norm: g = dout + dout2, dbranch; pre-norm: dskip added after the norm, with and without dbranch
  struct Arrangement {
    const char* label;
    bool dout2, dskip, dbranch, rms;
  };
  for (const Arrangement& a :
       {Arrangement{"post-norm", true, false, true, false}, Arrangement{"pre-norm", false, true, true, false},
        Arrangement{"pre-norm, no branch", false, true, false, false},
        Arrangement{"pre-norm, rmsnorm", false, true, true, true}}) {
    for (ParamGrads grads : {ParamGrads::Add, ParamGrads::Write}) {
      t.add("layernorm_residual_dropout_backward", nc + " " + a.label + grads_label(grads),
            [=](CaseBuilder& b, OpCase& c) {
              const int step = b.scalar_i32("dropout step", 11, false);
              const int x = b.input("inp", {N, C}, -2.0f, 3.0f);
              const int weight = b.input("weight", {C}, 0.5f, 1.5f);
              const int bias = a.rms ? b.absent("bias") : b.input("bias", {C});
              const int out = b.scratch("out", {N, C});
              const int mean = a.rms ? b.absent("mean") : b.scratch_f32("mean", {N});
              const int rstd = b.scratch_f32("rstd", {N});
              const int dout = b.input("dout", {N, C});
              const int dout2 = a.dout2 ? b.input("dout2", {N, C}) : b.absent("dout2");
              const int dskip = a.dskip ? b.input("dskip", {N, C}) : b.absent("dskip");
              // as layernorm_backward, plus one add before (dout2) or after (dskip) the norm's
              // 3C-term combination, and one scale (dbranch)
              const int dx = b.output("dinp", {N, C}, reduction_tol(3 * C + 1));
              const int dbranch = a.dbranch ? b.output("dbranch", {N, C}, reduction_tol(3 * C + 1)) : b.absent("dbranch");
              const int dw = b.grad("dweight", {C}, reduction_tol(N + C + 2));
              const int db = a.rms ? b.absent("dbias") : b.grad("dbias", {C}, reduction_tol(N + 2));
              c.prepare = [=](Backend& be, const CaseViews& v) {  // the statistics the backward reads
                be.layernorm_forward(v[out], v[mean], v[rstd], v[x], v[weight], v[bias], eps);
              };
              c.run = [=](Backend& be, const CaseViews& v) {
                be.layernorm_residual_dropout_backward(v[dx], v[dbranch], v[dw], v[db], v[dout], v[dout2], v[dskip],
                                                       v[x], v[weight], v[mean], v[rstd],
                                                       mask_at(v, step, p, DropoutSite::AttentionOutput), grads);
              };
              c.cost = [=](const CaseViews& v) {
                return layernorm_residual_dropout_backward_cost(v[dx], v[dbranch], v[dw], v[db], v[dout], v[dout2],
                                                                v[dskip], v[x], v[weight], v[mean], v[rstd], grads);
              };
            });
    }
  }
}

// ---- activation on the FFN's hidden layer: inp (N,F) -> out (N,F); backward dinp ----
// (SwiGLU: inp (N,2F) [gate | up] -> out (N,F), dinp (N,2F))
void activation_cases(Table& t, const Workload& w) {
  const int N = w.N(), F = w.F();
  for (Activation act : {Activation::Relu, Activation::Gelu, Activation::Swiglu}) {
    const int Fin = act == Activation::Swiglu ? 2 * F : F;  // the pre-activation's width
    const std::string shape = "N" + std::to_string(N) + " F" + std::to_string(F) + " " + activation_name(act);
    t.add("activation_forward", shape, [=](CaseBuilder& b, OpCase& c) {
      const int x = b.input("inp", {N, Fin}, -3.0f, 3.0f);
      const int out = b.output("out", {N, F}, kElementwiseTol);
      c.run = [=](Backend& be, const CaseViews& v) { be.activation_forward(v[out], v[x], act); };
      c.cost = [=](const CaseViews& v) { return elementwise_cost({v[x]}, v[out]); };
    });
    t.add("activation_backward", shape, [=](CaseBuilder& b, OpCase& c) {
      const int x = b.input("inp", {N, Fin}, -3.0f, 3.0f);
      const int dout = b.input("dout", {N, F});
      const int dx = b.output("dinp", {N, Fin}, kElementwiseTol);
      c.run = [=](Backend& be, const CaseViews& v) { be.activation_backward(v[dx], v[dout], v[x], act); };
      c.cost = [=](const CaseViews& v) { return elementwise_cost({v[dout], v[x]}, v[dx]); };
    });
    // the fused pair the model runs, with the workload's dropout on the hidden layer
    const float p = w.model.dropout;
    t.add("activation_dropout_forward", shape + " p" + num(p), [=](CaseBuilder& b, OpCase& c) {
      const int step = b.scalar_i32("dropout step", 11, false);
      const int x = b.input("inp", {N, Fin}, -3.0f, 3.0f);
      const int out = b.output("out", {N, F}, kElementwiseTol);
      c.run = [=](Backend& be, const CaseViews& v) {
        be.activation_dropout_forward(v[out], v[x], act, mask_at(v, step, p, DropoutSite::FfnHidden));
      };
      c.cost = [=](const CaseViews& v) { return elementwise_cost({v[x]}, v[out]); };
    });
    t.add("activation_dropout_backward", shape + " p" + num(p), [=](CaseBuilder& b, OpCase& c) {
      const int step = b.scalar_i32("dropout step", 11, false);
      const int x = b.input("inp", {N, Fin}, -3.0f, 3.0f);
      const int dout = b.input("dout", {N, F});
      const int dx = b.output("dinp", {N, Fin}, kElementwiseTol);
      c.run = [=](Backend& be, const CaseViews& v) {
        be.activation_dropout_backward(v[dx], v[dout], v[x], act, mask_at(v, step, p, DropoutSite::FfnHidden));
      };
      c.cost = [=](const CaseViews& v) { return elementwise_cost({v[dout], v[x]}, v[dx]); };
    });
  }
}

// ---- dropout, residual (N,C): elementwise; a mask mismatch is an O(1) error ----
void elementwise_cases(Table& t, const Workload& w) {
  const int N = w.N(), C = w.C();
  const float p = w.model.dropout;
  const std::string nc = "N" + std::to_string(N) + " C" + std::to_string(C);
  t.add("dropout_forward", nc + " p" + num(p), [=](CaseBuilder& b, OpCase& c) {
    const int step = b.scalar_i32("dropout step", 11, false);
    const int x = b.input("inp", {N, C});
    const int out = b.output("out", {N, C}, kElementwiseTol);
    c.run = [=](Backend& be, const CaseViews& v) {
      be.dropout_forward(v[out], v[x], mask_at(v, step, p, DropoutSite::FfnOutput));
    };
    c.cost = [=](const CaseViews& v) {
      return dropout_cost(v[out], v[x], mask_at(v, step, p, DropoutSite::FfnOutput));
    };
  });
  t.add("dropout_backward", nc + " p" + num(p), [=](CaseBuilder& b, OpCase& c) {
    const int step = b.scalar_i32("dropout step", 11, false);
    const int dout = b.input("dout", {N, C});
    const int dx = b.output("dinp", {N, C}, kElementwiseTol);
    c.run = [=](Backend& be, const CaseViews& v) {
      be.dropout_backward(v[dx], v[dout], mask_at(v, step, p, DropoutSite::FfnOutput));
    };
    c.cost = [=](const CaseViews& v) {
      return dropout_cost(v[dx], v[dout], mask_at(v, step, p, DropoutSite::FfnOutput));
    };
  });
  t.add("residual_forward", nc, [=](CaseBuilder& b, OpCase& c) {
    const int a = b.input("a", {N, C});
    const int x = b.input("b", {N, C});
    const int out = b.output("out", {N, C}, kElementwiseTol);
    c.run = [=](Backend& be, const CaseViews& v) { be.residual_forward(v[out], v[a], v[x]); };
    c.cost = [=](const CaseViews& v) { return elementwise_cost({v[a], v[x]}, v[out]); };
  });
}

// ---- rotary position embedding: qkv (B,T,3C), q and k turned in place; backward turns back ----
// At the workload's B and T with an even head size (its NH, or fewer heads when its head size is
// odd), and one token at position 37 (what the decoder turns).
void rope_cases(Table& t, const Workload& w) {
  const int C = w.C();
  const int NH = w.HS() % 2 == 0 ? w.NH() : 2;  // (the odd workload: C 52, 2 heads of 26)
  struct Case {
    int B, T, first_pos, KVH;
  };
  // and the query heads sharing one key/value head (grouped: only NH + 1 heads turn)
  for (const Case k : {Case{w.B, w.T, 0, NH}, Case{w.B, 1, 37, NH}, Case{w.B, w.T, 0, 1}}) {
    const int W = C + 2 * k.KVH * (C / NH);
    const std::string shape = "B" + std::to_string(k.B) + " T" + std::to_string(k.T) + " C" + std::to_string(C) +
                              " NH" + std::to_string(NH) +
                              (k.KVH != NH ? " KVH" + std::to_string(k.KVH) : std::string()) + " pos" +
                              std::to_string(k.first_pos);
    const float theta = 10000.0f;
    for (bool backward : {false, true}) {
      t.add(backward ? "rope_backward" : "rope_forward", shape, [=](CaseBuilder& b, OpCase& c) {
        // two products and a sum per value, with the same cos and sin on both backends
        const int qkv = b.updated(backward ? "dqkv" : "qkv", {k.B, k.T, W}, kElementwiseTol);
        c.run = [=](Backend& be, const CaseViews& v) {
          if (backward)
            be.rope_backward(v[qkv], NH, k.KVH, k.first_pos, theta);
          else
            be.rope_forward(v[qkv], NH, k.KVH, k.first_pos, theta);
        };
        c.cost = [=](const CaseViews& v) { return rope_cost(v[qkv], NH, k.KVH); };
      });
    }
  }
}

// ---- cross-entropy on the head's logits (N,V), targets (N) -> losses (N), dlogits (N,V) ----
void cross_entropy_cases(Table& t, const Workload& w) {
  const int N = w.N(), V = w.V();
  t.add("cross_entropy_forward_backward", "N" + std::to_string(N) + " V" + std::to_string(V),
        [=](CaseBuilder& b, OpCase& c) {
          // The V-term sum of exps, and roundings at the logits' magnitude (4) in
          // "log sum + max - z[target]": V + 8 terms' worth. dlogits = (softmax - onehot) s / N:
          // each p_j = exp(z_j - max) / sum carries the sum's relative error, so the non-target
          // entries p_j s / N keep that tolerance on their own scale, which at V = 50257 is
          // ~1e-4 of the targets' (p - 1) s / N: they are compared apart (compare_by_target).
          const double tol = reduction_tol(V + 8);
          const int logits = b.input("logits", {N, V}, -4.0f, 4.0f);
          const int targets = b.ids("targets", {N}, V);
          const int losses = b.output_f32("losses", {N}, tol);
          const int dlogits = b.output("dlogits", {N, V}, tol);
          b.compare_by_target(dlogits, targets);
          const int scale = b.state_f32("dloss_scale", {1}, {1.0f}, -1.0);
          c.run = [=](Backend& be, const CaseViews& v) {
            be.cross_entropy_forward_backward(v[losses], v[dlogits], v[logits], v[targets], v[scale], N);
          };
          c.cost = [=](const CaseViews& v) {
            return cross_entropy_cost(v[losses], v[dlogits], v[logits], v[targets], v[scale]);
          };
        });
}

// ---- cast: the fp32 master of the largest weight (F,C) -> its working copy in the storage
// dtype (a copy in fp32). The shared rounding (kernels/common/half.h): bit for bit. ----
void cast_cases(Table& t, const Workload& w) {
  const int64_t n = static_cast<int64_t>(w.F()) * w.C();
  t.add("cast", "n" + std::to_string(n) + " from fp32", [=](CaseBuilder& b, OpCase& c) {
    const int src = b.input_f32("src", {n}, -2.0f, 2.0f);
    const int dst = b.output("dst", {n}, 0.0);
    c.run = [=](Backend& be, const CaseViews& v) { be.cast(v[dst], v[src]); };
    c.cost = [=](const CaseViews& v) { return elementwise_cost({v[src]}, v[dst]); };
  });
}

// ---- the optimizer step over every parameter of the model (F32 in every precision) ----
void optimizer_cases(Table& t, const Workload& w) {
  const int64_t n = static_cast<int64_t>(w.model.parameter_count());
  const std::string shape = "n" + std::to_string(n);
  t.add("grad_norm_check", shape, [=](CaseBuilder& b, OpCase& c) {
    const int grads = b.input_f32("grads", {n}, -2.0f, 2.0f);
    const CaseBuilder::Scaler s = b.unit_scaler();
    // found_inf starts set, so a kernel that never writes it fails; the sum of squares is
    // summed in double on both backends and rounded once: they agree to an fp32 ulp.
    b.tensors()[s.found_inf].ids = {1};
    b.tensors()[s.grad_norm_sq].tol = reduction_tol(1);
    c.run = [=](Backend& be, const CaseViews& v) { be.grad_norm_check(v[grads], scaler_at(v, s)); };
    c.cost = [=](const CaseViews& v) { return grad_norm_check_cost(v[grads], scaler_at(v, s)); };
  });
  // The optimizer's tensors: resumed state, nonzero moments at step 5; the update is
  // elementwise (the shared kernels/common/adamw_update.h), the step count must come out exact.
  struct AdamWViews {
    int params, grads, m, v, count, train_step;
    CaseBuilder::Scaler scaler;
  };
  auto adamw_views = [n](CaseBuilder& b) {
    AdamWViews a;
    a.params = b.random_f32("params", {n}, -1.0f, 1.0f, kElementwiseTol);
    a.grads = b.input_f32("grads", {n});
    a.m = b.random_f32("exp_avg", {n}, -0.1f, 0.1f, kElementwiseTol);
    a.v = b.random_f32("exp_avg_sq", {n}, 0.0f, 0.01f, kElementwiseTol);
    a.count = b.scalar_i32("step_count", 5, true);
    a.train_step = b.scalar_i32("train step", 5, false);
    a.scaler = b.unit_scaler();
    return a;
  };
  AdamWHyper hyper;
  hyper.lr = 1e-2;  // updates large enough to be seen against the parameters
  hyper.weight_decay = 0.1;
  t.add("adamw_step", shape, [=](CaseBuilder& b, OpCase& c) {
    const AdamWViews a = adamw_views(b);
    c.run = [=](Backend& be, const CaseViews& v) {
      be.adamw_step(v[a.params], v[a.grads], v[a.m], v[a.v], v[a.count], v[a.train_step], hyper,
                    scaler_at(v, a.scaler));
    };
    c.cost = [=](const CaseViews& v) {
      return adamw_step_cost(v[a.params], v[a.grads], v[a.m], v[a.v], v[a.count], v[a.train_step],
                             scaler_at(v, a.scaler));
    };
  });
  // The update and the loss scaler's, one op: dynamic scaling at the step that completes the
  // growth interval (the scale doubles after the update has read it).
  t.add("adamw_step_and_scaler_update", shape + " dynamic, interval: growth", [=](CaseBuilder& b, OpCase& c) {
    const AdamWViews a = adamw_views(b);
    LossScalerConfig config;
    config.dynamic = true;
    std::vector<CaseTensor>& tensors = b.tensors();
    tensors[a.scaler.scale].values = {1024.0f};
    tensors[a.scaler.scale].tol = 0.0;
    tensors[a.scaler.growth_tracker].ids = {config.growth_interval - 1};
    for (int compared : {a.scaler.growth_tracker, a.scaler.skipped_steps, a.scaler.first_skipped_step})
      tensors[compared].tol = 0.0;
    c.run = [=](Backend& be, const CaseViews& v) {
      be.adamw_step_and_scaler_update(v[a.params], v[a.grads], v[a.m], v[a.v], v[a.count], v[a.train_step], hyper,
                                      scaler_at(v, a.scaler), config);
    };
    c.cost = [=](const CaseViews& v) {
      return adamw_step_and_scaler_update_cost(v[a.params], v[a.grads], v[a.m], v[a.v], v[a.count], v[a.train_step],
                                               scaler_at(v, a.scaler));
    };
  });
}

// ---- the loss scaler's update after the optimizer (F32 and int32 state, every precision) ----
// fp16's dynamic scaling at its two turns: a clean step that completes the growth interval
// (the scale doubles) and a step whose gradients held an inf (the scale halves, the step is
// counted as skipped). The state is plain arithmetic on both sides: bit for bit.
void loss_scaler_cases(Table& t) {
  LossScalerConfig config;
  config.dynamic = true;
  for (bool found_inf : {false, true}) {
    const std::string shape = found_inf ? "dynamic, inf: backoff" : "dynamic, interval: growth";
    t.add("loss_scaler_update", shape, [=](CaseBuilder& b, OpCase& c) {
      const CaseBuilder::Scaler s = b.unit_scaler();
      std::vector<CaseTensor>& tensors = b.tensors();
      tensors[s.scale].values = {1024.0f};
      tensors[s.scale].tol = 0.0;
      tensors[s.growth_tracker].ids = {found_inf ? 17 : config.growth_interval - 1};
      tensors[s.found_inf].ids = {found_inf ? 1 : 0};
      tensors[s.skipped_steps].ids = {found_inf ? 2 : 0};
      for (int compared : {s.growth_tracker, s.skipped_steps, s.first_skipped_step}) tensors[compared].tol = 0.0;
      const int step = b.scalar_i32("step", 41, false);
      c.run = [=](Backend& be, const CaseViews& v) { be.loss_scaler_update(scaler_at(v, s), config, v[step]); };
      c.cost = [=](const CaseViews& v) { return loss_scaler_update_cost(scaler_at(v, s), v[step]); };
    });
  }
}

// ---- fill_zero: the gradients of every parameter (F32), zeroed before each step ----
void fill_zero_cases(Table& t, const Workload& w) {
  const int64_t n = static_cast<int64_t>(w.model.parameter_count());
  t.add("fill_zero", "n" + std::to_string(n), [=](CaseBuilder& b, OpCase& c) {
    const int grads = b.random_f32("grads", {n}, -1.0f, 1.0f, 0.0);  // every element to +0, bit for bit
    c.run = [=](Backend& be, const CaseViews& v) { be.fill_zero(v[grads]); };
    c.cost = [=](const CaseViews& v) { return fill_zero_cost(v[grads]); };
  });
}

// ---- nf4_dequantize: a frozen weight in NF4 (kernels/common/nf4.h) -> out (n) in the storage dtype ----
// The workload's largest weight (F,C): 64-weight blocks and groups of 256 absmax codes, full at
// the seed's sizes, partial at the odd one's.
void nf4_cases(Table& t, const Workload& w) {
  const int64_t n = static_cast<int64_t>(w.F()) * w.C();
  t.specs().push_back(nf4_dequantize_case(t.dtype(), n, "(F,C)"));
}

}  // namespace

OpCaseSpec nf4_dequantize_case(DType dtype, int64_t n, const std::string& what) {
  Table table(dtype);
  table.add("nf4_dequantize", "n" + std::to_string(n) + " " + what, [n](CaseBuilder& b, OpCase& c) {
    // weights of a model's size, quantised on the host: what the backends decode
    const std::vector<float> weights = b.random_values(n, -0.05f, 0.05f);
    const Nf4Weight q = quantize_nf4(weights.data(), n);
    const int codes = b.bytes("codes", {n / 2}, q.codes);
    const int absmax_codes = b.bytes("absmax codes", {static_cast<int64_t>(q.absmax_codes.size())}, q.absmax_codes);
    const int absmax2 =
        b.state_f32("absmax2", {static_cast<int64_t>(q.absmax2.size())}, q.absmax2, -1.0);
    const int offset = b.state_f32("offset", {1}, {q.offset}, -1.0);
    // bit for bit: both backends do nf4.h's fp32 operations in its order, then round once to the type
    const int out = b.output("out", {n}, 0.0);
    auto nf4_at = [=](const CaseViews& v) { return Nf4Tensor{v[codes], v[absmax_codes], v[absmax2], v[offset]}; };
    c.run = [=](Backend& be, const CaseViews& v) { be.nf4_dequantize(v[out], nf4_at(v)); };
    c.cost = [=](const CaseViews& v) {
      return elementwise_cost({v[codes], v[absmax_codes], v[absmax2], v[offset]}, v[out]);
    };
  });
  return table.specs().front();
}

std::vector<std::string> op_names() {
  return {"embedding_forward",  "embedding_backward",  "linear_forward",    "linear_backward",
          "attention_forward",  "attention_backward",  "kv_cache_append",   "attention_decode",
          "rope_forward",       "rope_backward",
          "layernorm_forward",  "layernorm_backward",  "dropout_residual_layernorm_forward",
          "layernorm_residual_dropout_backward", "activation_forward", "activation_backward",
          "activation_dropout_forward", "activation_dropout_backward",
          "dropout_forward",    "dropout_backward",    "residual_forward",  "add_scaled_columns",
          "copy_scaled_columns", "cross_entropy_forward_backward",
          "cast",               "fill_zero",           "grad_norm_check",   "adamw_step",
          "adamw_step_and_scaler_update", "loss_scaler_update", "nf4_dequantize"};
}

std::vector<AttentionShape> attention_sweep_shapes() {
  std::vector<AttentionShape> shapes;
  for (int T : {256, 512, 1024, 2048, 4096}) shapes.push_back({4, T, 12, 64, true});
  return shapes;
}

std::vector<OpCaseSpec> attention_sweep_cases(DType dtype) {
  Table table(dtype);
  for (const AttentionShape& s : attention_sweep_shapes())
    attention_case(table, {s.B, s.T, s.NH, s.HS, s.causal, 0.0f, /*offer_library=*/true});
  return table.specs();
}

std::vector<OpCaseSpec> gpt2_gemm_cases(DType dtype) {
  Table table(dtype);
  const int tokens = 8 * 1024, C = 768;
  for (const auto& [in, out] : {std::pair{C, 3 * C}, std::pair{C, C}, std::pair{C, 4 * C}, std::pair{4 * C, C}})
    linear_cases_at(table, tokens, in, out);
  return table.specs();
}

std::vector<OpCaseSpec> op_cases(DType dtype) {
  Table table(dtype);
  for (const Workload& w : {seed_workload(), odd_workload()}) {
    embedding_cases(table, w);
    linear_cases(table, w);
    frozen_linear_cases(table, w);
    column_window_cases(table, w);
    attention_cases(table, w);
    decode_cases(table, w);
    rope_cases(table, w);
    layernorm_cases(table, w);
    residual_norm_cases(table, w);
    activation_cases(table, w);
    elementwise_cases(table, w);
    cross_entropy_cases(table, w);
    cast_cases(table, w);
    nf4_cases(table, w);
    if (dtype == DType::F32) {
      fill_zero_cases(table, w);
      optimizer_cases(table, w);
    }
  }
  attention_odd_cases(table);                          // their own sizes: one set of cases
  // two full groups of 256 absmax codes and a partial one of 38, whose last block has 30 weights
  table.specs().push_back(nf4_dequantize_case(dtype, int64_t{64} * (2 * 256 + 37) + 30, "partial group"));
  if (dtype == DType::F32) loss_scaler_cases(table);  // no sizes: one set of cases
  // in table order (op_names), each op's workloads together
  std::vector<OpCaseSpec> ordered;
  for (const std::string& op : op_names())
    for (const OpCaseSpec& spec : table.specs())
      if (spec.op == op) ordered.push_back(spec);
  return ordered;
}

}  // namespace tt
