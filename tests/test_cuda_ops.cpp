// The CUDA backend against the CPU backend, in the style of ggml's test-backend-ops: ONE
// generic harness runs each op on both backends from the same random inputs and compares
// every output and every gradient. Each op family contributes a table of cases (awkward
// shapes: one token, sequences of 13 and 67, head sizes 8 to 128, vocabularies of 37, 509
// and 50257, d_ff 52, misaligned pointers, aliasing, dropout). Parameter gradients start
// from the same nonzero values on both backends, so accumulation (+=) is checked; outputs
// the op must overwrite start as NaN, so a skipped element shows up. Without a usable GPU
// every test reports SKIPPED (never a silent pass); without CUDA in the build, one test says so.
//
// Tolerances (max |cuda - cpu| / max |cpu|). Neither backend is exact: the CPU op tests bound
// each op against double at kEps32 * K, K the length of the longest fp32 reduction feeding
// an output (a K-term fp32 sum is off by at most ~K/2 eps of its terms' scale), and measure
// errors one to two decades under that. Two results each within K/2 eps of the truth are
// within K eps of each other, so reductions get kEps32 * K: the GPU sums in other orders
// (tiles, trees, split-K, chunked partial sums) but not less accurately. Short sums get a
// floor of 16 eps, where one rounding of an intermediate larger than the result dominates.
// Elementwise ops get 1e-6 (about 8 eps): the same formula on both sides, up to the few-ulp
// differences between the device's and glibc's erff/expf/pow. Most of them (ReLU, dropout,
// residual, embedding, AdamW) should match bit for bit. A wrong index, mask or missing term
// shows up as an error of order 1e-2 or more, far above every tolerance here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/device_query.h"
#include "tests/op_test_util.h"

#ifdef TINYTRAIN_HAVE_CUDA
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#endif

namespace tt {
namespace {

#ifndef TINYTRAIN_HAVE_CUDA

TEST(CudaOps, SkippedBecauseTheBuildHasNoCuda) {
  GTEST_SKIP() << "this build has no CUDA backend (CMake found no CUDA toolkit)";
}

#else

using test::kEps32;

// Tolerance of an output fed by fp32 reductions of at most K terms (see the file comment).
double reduction_tol(double K) { return kEps32 * std::max(K, 16.0); }
constexpr double kElementwiseTol = 1e-6;

// ============================== the harness ==============================

// One tensor of a case: its contents before the op and whether (how tightly) it is compared after.
struct CaseTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<float> f32;      // contents before the op (F32)
  std::vector<int32_t> i32;    // contents before the op (I32)
  double tol = -1.0;           // < 0: not compared; F32: max relative error; I32: compared exactly
  bool absent = false;         // an optional tensor passed with null data
  int offset_floats = 0;       // the view starts this many elements into its allocation (misalignment)
};

using RunFn = std::function<void(Backend&, const std::vector<Tensor>&)>;

// The tensors of one case (indices into `tensors` are what `run` uses) and the ops to run.
struct OpCase {
  std::vector<CaseTensor> tensors;
  RunFn run;

  int add(CaseTensor t) {
    tensors.push_back(std::move(t));
    return static_cast<int>(tensors.size()) - 1;
  }
  // A random input in [lo, hi), not compared.
  int input(const std::string& name, Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    return add({name, DType::F32, shape, test::random_floats(shape.numel(), seed, lo, hi), {}, -1.0});
  }
  // An output the op must overwrite entirely: NaN before the op.
  int output(const std::string& name, Shape shape, double tol) {
    return add({name, DType::F32, shape, std::vector<float>(shape.numel(), std::numeric_limits<float>::quiet_NaN()),
                {}, tol});
  }
  // Scratch the op may use: NaN before, not compared.
  int scratch(const std::string& name, Shape shape) { return output(name, shape, -1.0); }
  // A parameter gradient the op accumulates into: random nonzero values before, compared after.
  int grad(const std::string& name, Shape shape, uint32_t seed, double tol) {
    return add({name, DType::F32, shape, test::random_floats(shape.numel(), seed, -1.0f, 1.0f), {}, tol});
  }
  // A tensor read and written in place (an aliased buffer, optimizer state): given contents, compared after.
  int inout(const std::string& name, Shape shape, std::vector<float> values, double tol) {
    return add({name, DType::F32, shape, std::move(values), {}, tol});
  }
  // Random int32 ids in [lo, hi), not compared.
  int ids(const std::string& name, Shape shape, uint32_t seed, int lo, int hi) {
    return add({name, DType::I32, shape, {}, test::random_ints(shape.numel(), seed, lo, hi), -1.0});
  }
  // One int32 in backend memory (a dropout step, the AdamW step count), compared exactly if asked.
  int scalar_i32(const std::string& name, int32_t value, bool compare) {
    return add({name, DType::I32, Shape{1}, {}, {value}, compare ? 0.0 : -1.0});
  }
  // An absent optional tensor (bias, wpe, dinp, dlogits): null data.
  int absent(const std::string& name) { return add({name, DType::F32, Shape{}, {}, {}, -1.0, true}); }
};

// A loss scaler held in a case's tensors (backend memory): scale 1, nothing found, not compared
// except found_inf, which the optimizer step must leave as it was.
struct ScalerSlots {
  int scale, growth_tracker, found_inf, skipped_steps, first_skipped_step, grad_norm_sq;
};

ScalerSlots unit_scaler_in(OpCase& c) {
  return ScalerSlots{c.inout("loss scale", {1}, {1.0f}, -1.0),      c.scalar_i32("growth tracker", 0, false),
                     c.scalar_i32("found_inf", 0, true),            c.scalar_i32("skipped steps", 0, false),
                     c.scalar_i32("first skipped step", -1, false), c.inout("grad norm^2", {1}, {0.0f}, -1.0)};
}

LossScalerState scaler_at(const std::vector<Tensor>& v, const ScalerSlots& s) {
  return LossScalerState{v[s.scale],         v[s.growth_tracker],     v[s.found_inf],
                         v[s.skipped_steps], v[s.first_skipped_step], v[s.grad_norm_sq]};
}

// A dropout mask whose step lives in the case's int32 tensor `step` (backend memory).
DropoutMask mask_at(const std::vector<Tensor>& v, int step, float p, uint64_t seed, uint32_t layer,
                    DropoutSite site) {
  return DropoutMask{p, seed, static_cast<const uint32_t*>(v[step].data), layer, site};
}

// Backend allocations of one run, released when it ends (also when an op throws).
class Allocations {
 public:
  explicit Allocations(Backend& backend) : backend_(backend) {}
  Allocations(const Allocations&) = delete;
  Allocations& operator=(const Allocations&) = delete;
  ~Allocations() {
    for (void* ptr : ptrs_) backend_.release(ptr);
  }
  void* allocate(size_t bytes) {
    void* ptr = backend_.allocate(bytes);
    ptrs_.push_back(ptr);
    return ptr;
  }

 private:
  Backend& backend_;
  std::vector<void*> ptrs_;
};

// What a run leaves in the compared tensors.
struct CaseResult {
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<int32_t>> i32;
};

// Copies the case's tensors to `backend`, runs its ops there, and copies the compared tensors back.
CaseResult run_on(Backend& backend, const OpCase& c) {
  Allocations memory(backend);
  std::vector<Tensor> views;
  for (const CaseTensor& t : c.tensors) {
    Tensor view{nullptr, t.dtype, t.shape};
    if (!t.absent) {
      const size_t offset = static_cast<size_t>(t.offset_floats) * dtype_size(t.dtype);
      view.data = static_cast<char*>(memory.allocate(view.bytes() + offset)) + offset;
      const void* src = t.dtype == DType::F32 ? static_cast<const void*>(t.f32.data())
                                              : static_cast<const void*>(t.i32.data());
      backend.copy_to_device(view.data, src, view.bytes());
    }
    views.push_back(view);
  }
  c.run(backend, views);
  CaseResult result;
  result.f32.resize(c.tensors.size());
  result.i32.resize(c.tensors.size());
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const CaseTensor& t = c.tensors[i];
    if (t.tol < 0.0 || t.absent) continue;
    if (t.dtype == DType::F32) {
      result.f32[i].resize(t.shape.numel());
      backend.copy_to_host(result.f32[i].data(), views[i].data, views[i].bytes());
    } else {
      result.i32[i].resize(t.shape.numel());
      backend.copy_to_host(result.i32[i].data(), views[i].data, views[i].bytes());
    }
  }
  return result;
}

// Compares every compared tensor; tol_override >= 0 replaces the case's tolerances.
void compare(const std::string& case_name, const OpCase& c, const CaseResult& cpu, const CaseResult& cuda,
             double tol_override = -1.0) {
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const CaseTensor& t = c.tensors[i];
    if (t.tol < 0.0 || t.absent) continue;
    const std::string what = case_name + " " + t.name;
    if (t.dtype == DType::I32) {
      EXPECT_EQ(cuda.i32[i], cpu.i32[i]) << what;
      continue;
    }
    // The CPU result is the reference: a non-finite one means the case itself is broken.
    const bool cpu_finite =
        std::all_of(cpu.f32[i].begin(), cpu.f32[i].end(), [](float x) { return std::isfinite(x); });
    EXPECT_TRUE(cpu_finite) << what << ": the CPU backend's result is not finite";
    test::expect_rel_close(what, cuda.f32[i], test::to_double(cpu.f32[i]), tol_override >= 0.0 ? tol_override : t.tol);
  }
}

// A named case of the table; built lazily, so listing the tests touches neither backend.
struct CaseSpec {
  std::string name;
  std::function<OpCase()> make;
};
void PrintTo(const CaseSpec& spec, std::ostream* os) { *os << spec.name; }

std::string num(double x) {  // 0.1 -> "0p1": test names allow only [A-Za-z0-9_]
  std::string s = std::to_string(x);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  std::replace(s.begin(), s.end(), '.', 'p');
  std::replace(s.begin(), s.end(), '-', 'm');
  return s;
}

// ============================== the case tables ==============================

// ---- embedding: tokens (B,T), wte (V,C), wpe (maxT,C) -> out (B,T,C); backward dwte, dwpe ----
std::vector<CaseSpec> embedding_cases() {
  struct P {
    int B, T, C, V, maxT;
    bool pos;
  };
  std::vector<CaseSpec> specs;
  // V < B*T everywhere but the 509 case, so ids repeat within windows of 8 tokens and across the
  // batch; T = 1 makes consecutive tokens share a position.
  for (P p : {P{2, 13, 32, 7, 16, true}, P{2, 13, 32, 7, 16, false}, P{1, 1, 8, 37, 4, true}, P{8, 1, 16, 5, 1, true},
              P{3, 67, 52, 509, 80, true}, P{4, 67, 96, 37, 67, false}, P{2, 200, 768, 50, 256, true}}) {
    const std::string name = "embedding_B" + std::to_string(p.B) + "_T" + std::to_string(p.T) + "_C" +
                             std::to_string(p.C) + "_V" + std::to_string(p.V) + (p.pos ? "_pos" : "_nopos");
    specs.push_back({name, [p] {
                       OpCase c;
                       const int N = p.B * p.T;
                       const int tokens = c.ids("tokens", {p.B, p.T}, 1, 0, p.V);
                       const int wte = c.input("wte", {p.V, p.C}, 2);
                       const int wpe = p.pos ? c.input("wpe", {p.maxT, p.C}, 3) : c.absent("wpe");
                       const int dout = c.input("dout", {p.B, p.T, p.C}, 4);
                       const int out = c.output("out", {p.B, p.T, p.C}, kElementwiseTol);  // one add
                       // a dwte element sums up to N token rows, a dwpe element B, onto its start value
                       const int dwte = c.grad("dwte", {p.V, p.C}, 5, reduction_tol(N + 1));
                       const int dwpe = p.pos ? c.grad("dwpe", {p.maxT, p.C}, 6, reduction_tol(p.B + 1))
                                              : c.absent("dwpe");
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.embedding_forward(v[out], v[tokens], v[wte], v[wpe]);
                         be.embedding_backward(v[dwte], v[dwpe], v[dout], v[tokens]);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- linear: inp (N,I), weight (O,I), bias (O) -> out (N,O); backward dinp, dweight, dbias ----
std::vector<CaseSpec> linear_cases() {
  struct P {
    int N, I, O;
    bool bias, dinp, misaligned;
  };
  std::vector<CaseSpec> specs;
  for (P p : {P{1, 8, 8, true, true, false}, P{9, 17, 11, true, true, false}, P{9, 17, 11, true, true, true},
              P{13, 32, 52, true, true, false}, P{26, 52, 32, false, true, false}, P{67, 64, 192, true, false, false},
              P{134, 128, 509, true, true, false}, P{64, 300, 70, false, false, false},
              P{40, 2048, 24, true, true, false}, P{2048, 64, 37, true, true, false},
              P{3, 5, 1, true, true, true}, P{5, 1, 3, true, true, false}}) {
    const std::string name = "linear_N" + std::to_string(p.N) + "_I" + std::to_string(p.I) + "_O" +
                             std::to_string(p.O) + (p.bias ? "_bias" : "_nobias") + (p.dinp ? "" : "_nodinp") +
                             (p.misaligned ? "_misaligned" : "");
    specs.push_back({name, [p] {
                       OpCase c;
                       const int x = c.input("inp", {p.N, p.I}, 11);
                       const int w = c.input("weight", {p.O, p.I}, 12);
                       const int b = p.bias ? c.input("bias", {p.O}, 13) : c.absent("bias");
                       const int dout = c.input("dout", {p.N, p.O}, 14);
                       const int out = c.output("out", {p.N, p.O}, reduction_tol(p.I + 1));
                       const int dx = p.dinp ? c.output("dinp", {p.N, p.I}, reduction_tol(p.O)) : c.absent("dinp");
                       // two backward calls: start value + 2 sums of N rows
                       const int dw = c.grad("dweight", {p.O, p.I}, 15, reduction_tol(2 * p.N + 1));
                       const int db = p.bias ? c.grad("dbias", {p.O}, 16, reduction_tol(2 * p.N + 1)) : c.absent("dbias");
                       if (p.misaligned)  // 4-byte aligned views: cuBLASLt must pick algorithms that allow it
                         for (CaseTensor& t : c.tensors) t.offset_floats = 1;
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.linear_forward(v[out], v[x], v[w], v[b]);
                         // twice: parameter gradients accumulate, dinp is overwritten; the second
                         // call also reuses the cached GEMM plans
                         be.linear_backward(v[dx], v[dw], v[db], v[dout], v[x], v[w]);
                         be.linear_backward(v[dx], v[dw], v[db], v[dout], v[x], v[w]);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- attention: qkv (B,T,3C) -> out (B,T,C), probs (B,NH,T,T); backward dqkv ----
std::vector<CaseSpec> attention_cases() {
  struct P {
    int B, T, NH, HS;
    bool causal;
    float p;
  };
  std::vector<CaseSpec> specs;
  for (P p : {P{1, 1, 1, 8, true, 0.0f}, P{1, 1, 1, 8, false, 0.1f}, P{2, 13, 2, 8, true, 0.0f},
              P{2, 13, 2, 32, false, 0.0f}, P{2, 13, 4, 32, true, 0.1f}, P{1, 67, 2, 64, true, 0.2f},
              P{2, 67, 1, 128, false, 0.0f}, P{1, 67, 2, 128, true, 0.1f}, P{2, 32, 2, 64, false, 0.1f},
              P{1, 256, 2, 64, true, 0.0f}, P{1, 130, 3, 16, false, 0.5f}}) {
    const std::string name = "attention_B" + std::to_string(p.B) + "_T" + std::to_string(p.T) + "_NH" +
                             std::to_string(p.NH) + "_HS" + std::to_string(p.HS) +
                             (p.causal ? "_causal" : "_full") + "_p" + num(p.p);
    specs.push_back({name, [p] {
                       OpCase c;
                       const AttentionShape s{p.B, p.T, p.NH, p.HS, p.causal};
                       const int C = p.NH * p.HS;
                       // Scores are HS-term dot products, the softmax sums T exps, each output sums T
                       // weighted values (+1 for the dropout scale); the backward runs its own HS- and
                       // T-term sums on top of the forward's probs: twice the budget (as the CPU tests).
                       const double fwd = reduction_tol(p.HS + 2 * p.T + 1);
                       const int step = c.scalar_i32("step", 7, false);
                       const int qkv = c.input("qkv", {p.B, p.T, 3 * C}, 31, -1.5f, 1.5f);
                       const int dout = c.input("dout", {p.B, p.T, C}, 32);
                       const int out = c.output("out", {p.B, p.T, C}, fwd);
                       const int probs = c.output("probs", {p.B, p.NH, p.T, p.T}, fwd);
                       const int dqkv = c.output("dqkv", {p.B, p.T, 3 * C}, 2.0 * fwd);
                       const int dprobs = c.scratch("dprobs", {p.B, p.NH, p.T, p.T});
                       const float drop = p.p;
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         const DropoutMask mask =
                             mask_at(v, step, drop, 0x1234abcd5678ull, 2, DropoutSite::AttentionWeights);
                         be.attention_forward(v[out], v[probs], v[qkv], s, mask);
                         be.attention_backward(v[dqkv], v[dprobs], v[dout], v[qkv], v[probs], s, mask);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- layernorm: inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N); backward ----
std::vector<CaseSpec> layernorm_cases() {
  struct P {
    int N, C;
    bool alias;  // dinp aliases dout
  };
  std::vector<CaseSpec> specs;
  for (P p : {P{1, 8, false}, P{13, 52, false}, P{67, 32, false}, P{26, 768, false}, P{8, 2048, false},
              P{3, 37, true}, P{67, 768, true}}) {
    const std::string name = "layernorm_N" + std::to_string(p.N) + "_C" + std::to_string(p.C) +
                             (p.alias ? "_dinp_aliases_dout" : "");
    specs.push_back({name, [p] {
                       OpCase c;
                       // Bounds as the CPU tests: out and rstd (C+4), mean C, dinp 3C, dweight N+C,
                       // dbias N, plus one for the accumulation onto the start value.
                       const int x = c.input("inp", {p.N, p.C}, 41, -2.0f, 3.0f);  // mean away from 0
                       const int w = c.input("weight", {p.C}, 42, 0.5f, 1.5f);
                       const int b = c.input("bias", {p.C}, 43);
                       const int out = c.output("out", {p.N, p.C}, reduction_tol(p.C + 4));
                       const int mean = c.output("mean", {p.N}, reduction_tol(p.C));
                       const int rstd = c.output("rstd", {p.N}, reduction_tol(p.C + 4));
                       const double dinp_tol = reduction_tol(3 * p.C);
                       const int dout = p.alias ? c.inout("dout (= dinp)", {p.N, p.C},
                                                          test::random_floats(p.N * p.C, 44), dinp_tol)
                                                : c.input("dout", {p.N, p.C}, 44);
                       const int dx = p.alias ? dout : c.output("dinp", {p.N, p.C}, dinp_tol);
                       const int dw = c.grad("dweight", {p.C}, 45, reduction_tol(p.N + p.C + 1));
                       const int db = c.grad("dbias", {p.C}, 46, reduction_tol(p.N + 1));
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.layernorm_forward(v[out], v[mean], v[rstd], v[x], v[w], v[b], 1e-5f);
                         be.layernorm_backward(v[dx], v[dw], v[db], v[dout], v[x], v[w], v[mean], v[rstd]);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- cross-entropy: logits (N,V), targets (N) -> losses (N), dlogits (N,V) ----
std::vector<CaseSpec> cross_entropy_cases() {
  enum class Grad { Separate, None, AliasesLogits };
  struct P {
    int N, V;
    float offset, dloss_scale;
    Grad grad;
  };
  std::vector<CaseSpec> specs;
  // offset 100: exp overflows without the max subtraction; scales 0.37 and 2.5: not powers of 2
  for (P p : {P{1, 37, 0.0f, 1.0f, Grad::Separate}, P{13, 509, 0.0f, 1.0f, Grad::Separate},
              P{13, 509, 0.0f, 1.0f, Grad::None}, P{13, 509, 0.0f, 0.37f, Grad::AliasesLogits},
              P{7, 19, 100.0f, 1024.0f, Grad::AliasesLogits}, P{4, 50257, 0.0f, 1.0f, Grad::Separate},
              P{67, 37, 0.0f, 1.0f, Grad::AliasesLogits}, P{3, 50257, 0.0f, 2.5f, Grad::AliasesLogits},
              P{130, 1000, 0.0f, 1.0f, Grad::Separate}}) {
    const char* mode = p.grad == Grad::Separate ? "_dlogits" : p.grad == Grad::None ? "_lossonly" : "_inplace";
    const std::string name = "cross_entropy_N" + std::to_string(p.N) + "_V" + std::to_string(p.V) + "_offset" +
                             num(p.offset) + "_scale" + num(p.dloss_scale) + mode;
    specs.push_back({name, [p] {
                       OpCase c;
                       // As the CPU tests: the V-term sum of exps (V eps in its log) and roundings at
                       // the logits' magnitude (|offset| + 4) in "log sum + max - z[target]".
                       const double tol = reduction_tol(p.V + 2.0 * (std::fabs(p.offset) + 4.0));
                       std::vector<float> z = test::random_floats(p.N * p.V, 51, p.offset - 4.0f, p.offset + 4.0f);
                       const int targets = c.ids("targets", {p.N}, 52, 0, p.V);
                       const int logits = p.grad == Grad::AliasesLogits
                                              ? c.inout("logits (= dlogits)", {p.N, p.V}, z, tol)
                                              : c.inout("logits", {p.N, p.V}, z, -1.0);
                       const int losses = c.output("losses", {p.N}, tol);
                       const int dlogits = p.grad == Grad::Separate     ? c.output("dlogits", {p.N, p.V}, tol)
                                           : p.grad == Grad::None       ? c.absent("dlogits")
                                                                        : logits;
                       const int scale = c.inout("dloss_scale", {1}, {p.dloss_scale}, -1.0);
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.cross_entropy_forward_backward(v[losses], v[dlogits], v[logits], v[targets], v[scale]);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- activation: inp (n) -> out (n); backward dinp (n), possibly aliasing dout ----
std::vector<CaseSpec> activation_cases() {
  struct P {
    int64_t n;
    Activation act;
    bool alias;
  };
  std::vector<CaseSpec> specs;
  for (P p : {P{1, Activation::Relu, false}, P{37, Activation::Relu, true}, P{4099, Activation::Relu, false},
              P{1, Activation::Gelu, false}, P{37, Activation::Gelu, false}, P{4099, Activation::Gelu, true},
              P{67 * 52 * 3, Activation::Gelu, false}, P{67 * 52 * 3, Activation::Relu, true}}) {
    const std::string name = std::string(p.act == Activation::Relu ? "relu" : "gelu") + "_n" +
                             std::to_string(p.n) + (p.alias ? "_dinp_aliases_dout" : "");
    specs.push_back({name, [p] {
                       OpCase c;
                       const int x = c.input("inp", {p.n}, 61, -3.0f, 3.0f);
                       const int out = c.output("out", {p.n}, kElementwiseTol);
                       const int dout = p.alias ? c.inout("dout (= dinp)", {p.n}, test::random_floats(p.n, 62),
                                                          kElementwiseTol)
                                                : c.input("dout", {p.n}, 62);
                       const int dx = p.alias ? dout : c.output("dinp", {p.n}, kElementwiseTol);
                       const Activation act = p.act;
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.activation_forward(v[out], v[x], act);
                         be.activation_backward(v[dx], v[dout], v[x], act);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- dropout: inp (n) -> out (n), possibly in place; backward dinp (n) with the same mask ----
std::vector<CaseSpec> dropout_cases() {
  struct P {
    int64_t n;
    float p;
    bool in_place;
  };
  std::vector<CaseSpec> specs;
  // sizes 1, 3, 5: partial Philox groups; 4099: a partial last group; p = 0: the identity
  for (P p : {P{1, 0.1f, false}, P{3, 0.5f, false}, P{4, 0.1f, true}, P{5, 0.1f, false}, P{37, 0.2f, false},
              P{4099, 0.1f, true}, P{100003, 0.5f, false}, P{4099, 0.0f, false}, P{4099, 0.0f, true}}) {
    const std::string name = "dropout_n" + std::to_string(p.n) + "_p" + num(p.p) + (p.in_place ? "_inplace" : "");
    specs.push_back({name, [p] {
                       OpCase c;
                       // A mask mismatch zeroes an element on one side only: an O(1) error.
                       const int step = c.scalar_i32("step", 11, false);
                       const int x = p.in_place ? c.inout("inp (= out)", {p.n}, test::random_floats(p.n, 71),
                                                          kElementwiseTol)
                                                : c.input("inp", {p.n}, 71);
                       const int out = p.in_place ? x : c.output("out", {p.n}, kElementwiseTol);
                       const int dout = p.in_place ? c.inout("dout (= dinp)", {p.n}, test::random_floats(p.n, 72),
                                                             kElementwiseTol)
                                                   : c.input("dout", {p.n}, 72);
                       const int dx = p.in_place ? dout : c.output("dinp", {p.n}, kElementwiseTol);
                       const float drop = p.p;
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         const DropoutMask mask = mask_at(v, step, drop, 0xfeedbeef01ull, 3, DropoutSite::FfnHidden);
                         be.dropout_forward(v[out], v[x], mask);
                         be.dropout_backward(v[dx], v[dout], mask);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- residual: a (n), b (n) -> out (n) = a + b, out possibly aliasing a or b ----
std::vector<CaseSpec> residual_cases() {
  enum class Alias { None, A, B };
  struct P {
    int64_t n;
    Alias alias;
  };
  std::vector<CaseSpec> specs;
  for (P p : {P{1, Alias::None}, P{37, Alias::A}, P{4099, Alias::B}, P{100003, Alias::None}}) {
    const char* mode = p.alias == Alias::None ? "" : p.alias == Alias::A ? "_out_aliases_a" : "_out_aliases_b";
    specs.push_back({"residual_n" + std::to_string(p.n) + mode, [p] {
                       OpCase c;
                       const int a = p.alias == Alias::A
                                         ? c.inout("a (= out)", {p.n}, test::random_floats(p.n, 81), kElementwiseTol)
                                         : c.input("a", {p.n}, 81);
                       const int b = p.alias == Alias::B
                                         ? c.inout("b (= out)", {p.n}, test::random_floats(p.n, 82), kElementwiseTol)
                                         : c.input("b", {p.n}, 82);
                       const int out = p.alias == Alias::A   ? a
                                       : p.alias == Alias::B ? b
                                                             : c.output("out", {p.n}, kElementwiseTol);
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) { be.residual_forward(v[out], v[a], v[b]); };
                       return c;
                     }});
  }
  return specs;
}

// ---- AdamW: params, grads, exp_avg, exp_avg_sq (n), step_count (1), several steps ----
std::vector<CaseSpec> adamw_cases() {
  struct P {
    int64_t n;
    int32_t start_step;
    int steps;
  };
  std::vector<CaseSpec> specs;
  // start_step > 0: resuming with nonzero moments, as after a checkpoint
  for (P p : {P{1, 0, 3}, P{37, 0, 3}, P{4099, 5, 2}, P{100003, 0, 4}}) {
    const std::string name = "adamw_n" + std::to_string(p.n) + "_from_step" + std::to_string(p.start_step) + "_" +
                             std::to_string(p.steps) + "steps";
    specs.push_back({name, [p] {
                       OpCase c;
                       const bool fresh = p.start_step == 0;
                       // lr 1e-2: the updates are large enough to be seen against the parameters
                       const int params = c.inout("params", {p.n}, test::random_floats(p.n, 91), kElementwiseTol);
                       const int grads = c.input("grads", {p.n}, 92);
                       const int m = c.inout("exp_avg", {p.n},
                                             fresh ? std::vector<float>(p.n, 0.0f) : test::random_floats(p.n, 93, -0.1f, 0.1f),
                                             kElementwiseTol);
                       const int v2 = c.inout("exp_avg_sq", {p.n},
                                              fresh ? std::vector<float>(p.n, 0.0f) : test::random_floats(p.n, 94, 0.0f, 0.01f),
                                              kElementwiseTol);
                       const int count = c.scalar_i32("step_count", p.start_step, /*compare=*/true);
                       AdamWHyper hyper;
                       hyper.lr = 1e-2;
                       hyper.weight_decay = 0.1;
                       const int steps = p.steps;
                       const ScalerSlots scaler = unit_scaler_in(c);
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         for (int s = 0; s < steps; ++s)
                           be.adamw_step(v[params], v[grads], v[m], v[v2], v[count], hyper, scaler_at(v, scaler));
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- a miniature training step, run eagerly on the CPU and as a replayed CUDA graph ----
// x (N,I), W (O,I), b (O): out = dropout(x W^T + b) (dropout step read from backend memory);
// dW, db zeroed then += from a backward with out as its own gradient; AdamW on W. Four steps:
// the CUDA backend runs step 1 eagerly (GEMM plans are made there, as in the trainer),
// captures step 2, and replays the graph for steps 2-4 with the step written in between.
std::vector<CaseSpec> graph_cases() {
  return {{"graph_replay_of_a_training_step", [] {
             OpCase c;
             const int N = 24, I = 40, O = 36, kSteps = 4;
             // 4 steps of reductions over at most N + I terms each
             const double tol = reduction_tol(kSteps * (N + I + 1));
             const int step = c.scalar_i32("dropout step", 0, false);
             const int x = c.input("x", {N, I}, 101);
             const int w = c.inout("W", {O, I}, test::random_floats(O * I, 102), tol);
             const int b = c.input("b", {O}, 103);
             const int out = c.output("out", {N, O}, tol);
             const int dw = c.grad("dW", {O, I}, 104, tol);
             const int db = c.grad("db", {O}, 105, tol);
             const int m = c.inout("exp_avg", {O, I}, std::vector<float>(O * I, 0.0f), tol);
             const int v2 = c.inout("exp_avg_sq", {O, I}, std::vector<float>(O * I, 0.0f), tol);
             const int count = c.scalar_i32("step_count", 0, /*compare=*/true);
             AdamWHyper hyper;
             hyper.lr = 1e-2;
             // eps = 1 (gradients here are O(1)): keeps the update a smooth function of the
             // gradient, so rounding-level gradient differences cannot flip a near-zero
             // gradient's step from +lr to -lr.
             hyper.eps = 1.0;
             const ScalerSlots scaler = unit_scaler_in(c);
             c.run = [=](Backend& be, const std::vector<Tensor>& v) {
               const DropoutMask mask = mask_at(v, step, 0.25f, 77, 0, DropoutSite::FfnOutput);
               auto training_step = [&] {
                 be.fill_zero(v[dw]);
                 be.fill_zero(v[db]);
                 be.linear_forward(v[out], v[x], v[w], v[b]);
                 be.dropout_forward(v[out], v[out], mask);
                 be.linear_backward(Tensor{nullptr, DType::F32, Shape{}}, v[dw], v[db], v[out], v[x], v[w]);
                 be.adamw_step(v[w], v[dw], v[m], v[v2], v[count], hyper, scaler_at(v, scaler));
               };
               for (uint32_t s = 1; s <= static_cast<uint32_t>(kSteps); ++s) {
                 be.copy_to_device(v[step].data, &s, sizeof s);
                 if (!be.supports_graphs() || s == 1) {
                   training_step();
                   continue;
                 }
                 if (s == 2) {
                   be.begin_capture();
                   training_step();
                   be.end_capture();
                 }
                 be.replay_graph();
               }
             };
             return c;
           }}};
}

std::vector<CaseSpec> all_cases() {
  std::vector<CaseSpec> all;
  for (auto family : {embedding_cases, linear_cases, attention_cases, layernorm_cases, cross_entropy_cases,
                      activation_cases, dropout_cases, residual_cases, adamw_cases, graph_cases}) {
    std::vector<CaseSpec> specs = family();
    all.insert(all.end(), specs.begin(), specs.end());
  }
  return all;
}

// ============================== the tests ==============================

// Skips (never passes) without a usable GPU, and gives each test a CPU and a CUDA backend.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaDeviceInfo gpu = query_cuda_device();
    if (!gpu.usable) GTEST_SKIP() << gpu.reason;  // one line, e.g. "no CUDA GPU found"
    cpu = make_cpu_backend();
    cuda = std::make_unique<CudaBackend>(CudaOptions{});
  }
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<CudaBackend> cuda;
};

class CudaOps : public CudaTest, public ::testing::WithParamInterface<CaseSpec> {};

TEST_P(CudaOps, MatchesCpuBackend) {
  const OpCase c = GetParam().make();
  const CaseResult want = run_on(*cpu, c);
  const CaseResult got = run_on(*cuda, c);
  compare(GetParam().name, c, want, got);
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaOps, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return info.param.name; });

TEST_F(CudaTest, Tf32LinearMatchesCpuWithinTf32Rounding) {
  // TF32 rounds both GEMM operands to 10 mantissa bits: each product is off by up to 2^-10
  // relatively, with random signs, so a K-term sum is off by ~2^-10 sqrt(K) rms(term) against a
  // result of ~sqrt(K) rms(term): about 1e-3 of the result scale; 4e-3 leaves a factor 4.
  cuda = std::make_unique<CudaBackend>(CudaOptions{/*tf32=*/true});
  for (const CaseSpec& spec : linear_cases()) {
    if (spec.name != "linear_N134_I128_O509_bias" && spec.name != "linear_N64_I300_O70_nobias_nodinp") continue;
    const OpCase c = spec.make();
    compare(spec.name + " tf32", c, run_on(*cpu, c), run_on(*cuda, c), 4e-3);
  }
}

TEST_F(CudaTest, AllocatingAnAbsurdSizeThrowsOutOfMemory) {
  const size_t one_pib = size_t{1} << 50;
  try {
    void* ptr = cuda->allocate(one_pib);
    cuda->release(ptr);
    FAIL() << "allocating 1 PiB succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
    std::printf("[ message  ] %s\n", e.what());
  }
  // the backend still works afterwards
  void* ptr = cuda->allocate(1024);
  EXPECT_NE(ptr, nullptr);
  cuda->release(ptr);
}

TEST_F(CudaTest, CopyRoundTripLargerThanTheStagingBuffer) {
  // 65 MiB + 12 bytes: more than the 64 MiB pinned staging buffer, so copy_to_device goes in
  // chunks. The source is overwritten right after the call returns, which the contract allows.
  const size_t bytes = (size_t{65} << 20) + 12;
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  const std::vector<uint8_t> original = host;
  void* dev = cuda->allocate(bytes);
  cuda->copy_to_device(dev, host.data(), bytes);
  std::fill(host.begin(), host.end(), uint8_t{0});
  std::vector<uint8_t> back(bytes, 1);
  cuda->copy_to_host(back.data(), dev, bytes);
  cuda->release(dev);
  EXPECT_TRUE(back == original) << "the round trip changed the bytes";
}

TEST_F(CudaTest, CopyToDeviceDuringCaptureIsALogicError) {
  std::vector<float> host(16, 1.0f);
  void* dev = cuda->allocate(host.size() * sizeof(float));
  cuda->begin_capture();
  cuda->fill_zero(Tensor{dev, DType::F32, Shape{16}});
  EXPECT_THROW(cuda->copy_to_device(dev, host.data(), host.size() * sizeof(float)), std::logic_error);
  EXPECT_THROW(cuda->synchronize(), std::logic_error);
  cuda->end_capture();  // the capture survives the refused calls
  cuda->copy_to_device(dev, host.data(), host.size() * sizeof(float));
  cuda->replay_graph();  // zeroes the buffer again
  std::vector<float> back(16, 5.0f);
  cuda->copy_to_host(back.data(), dev, back.size() * sizeof(float));
  for (float x : back) EXPECT_EQ(x, 0.0f);
  cuda->release(dev);
}

#endif  // TINYTRAIN_HAVE_CUDA

}  // namespace
}  // namespace tt
