// The CUDA backend against the CPU backend, in the style of ggml's test-backend-ops: ONE
// generic harness runs each op on both backends from the same random inputs and compares
// every output and every gradient. Each op family contributes a table of cases (awkward
// shapes: one token, sequences of 13 and 67, head sizes 8 to 128, vocabularies of 37, 509
// and 50257, d_ff 52, misaligned pointers, aliasing, dropout). Parameter gradients start
// from the same nonzero values on both backends, so accumulation (+=) is checked; outputs
// the op must overwrite start as NaN, so a skipped element shows up. Without a usable GPU the
// CUDA backend runs on the SIMT emulator (tests/cuda_test_util.h); a build with neither has
// one test that says so.
//
// Tolerances (max |cuda - cpu| / max |cpu|). Neither backend is exact: the CPU op tests bound
// each op against double at kEps32 * K, K the length of the longest fp32 reduction feeding
// an output (a K-term fp32 sum is off by at most ~K/2 eps of its terms' scale), and measure
// errors one to two decades under that. Two results each within K/2 eps of the truth are
// within K eps of each other, so reductions get kEps32 * K: the GPU sums in other orders
// (tiles, trees, split-K, chunked partial sums) but not less accurately. Short sums get a
// floor of 16 eps, where one rounding of an intermediate larger than the result dominates.
// Elementwise ops get 1e-6 (about 8 eps): the same formula on both sides, up to the few-ulp
// differences between the device's and glibc's erff/expf/pow, and a multiply-add the GPU build
// fuses (nvcc contracts; the CPU backend rounds each operation). AdamW, whose shared formula
// rounds as written on both, is compared bit for bit. A wrong index, mask or missing term
// shows up as an error of order 1e-2 or more, far above every tolerance here.
//
// bf16 and fp16 storage. Every op family also runs with its activation views (inputs, outputs,
// activation gradients, working weights) in bf16 and in fp16: the case's values are drawn in
// fp32 and rounded to the type (kernels/common/half.h) before either backend sees them, so both
// backends read the SAME 16-bit inputs, widen them exactly to fp32, compute in fp32 and round
// what they store with the same shared rounding. Tolerances, with u the unit roundoff of the
// type (2^-8 bf16, 2^-11 fp16; adjacent values of the type are at most 2u apart, relatively):
//  - 16-bit outputs: the fp32 tolerance of the op + 2u. The two fp32 results differ by the fp32
//    reduction error d (bounded by the fp32 tolerance); rounded, they are equal unless a rounding
//    boundary lies between them, and then they are neighbours: at most 2u|x| + d apart. The
//    harness adds the 2u (storage_tol) to every compared 16-bit tensor.
//  - F32 outputs (parameter gradients, LayerNorm mean/rstd, losses): the fp32 tolerances as they
//    are. Their inputs are the same 16-bit values on both backends, exact in fp32, and the
//    products of two 16-bit values are exact in fp32 (8+8 and 11+11 significant bits <= 24), so
//    the backends differ only by fp32 summation order, as in the fp32 cases. Input rounding
//    would widen a comparison with the exact fp32 result, not this one. The exception is a
//    16-bit value one backend computed and stored earlier in the same case, which may sit on
//    the other side of a rounding boundary: only attention chains that way (the flash backward
//    reads the out the forward stored, for D = rowsum(dout * out)), and its dqkv gets another
//    2u for it.
//  - GEMMs with 16-bit inputs run on tensor cores, which add aligned products with truncation
//    rather than round to nearest (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of
//    NVIDIA tensor cores", PeerJ CS 2021): up to K eps for a K-term sum instead of K/2, so
//    K/2 + K between the backends; the linear cases double their fp32 reduction tolerances there.
// Conversions (cast) and the optimizer's bookkeeping (found_inf, skipped steps, the loss scale)
// must match exactly (tol 0: compared bit for bit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/ops/op_harness.h"
#include "engine/ops/op_tolerance.h"
#include "kernels/backend.h"
#include "kernels/device_query.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/cuda_test_util.h"
#include "tests/mixed_precision_util.h"
#include "tests/op_test_util.h"

namespace tt {
namespace {

#ifndef TINYTRAIN_HAVE_CUDA_BACKEND

TEST(CudaOps, SkippedBecauseTheBuildHasNoCudaBackend) {
  GTEST_SKIP() << "this build has no CUDA backend: no CUDA toolkit and no SIMT emulator";
}

#else

// The tolerances of the file comment (reduction_tol, kElementwiseTol, storage_tol) live in
// engine/ops/op_tolerance.h, shared with `tinytrain ops check`.

// The values a tensor of `dtype` holds for `values`: each rounded to the type (exact for F32).
std::vector<float> round_to(DType dtype, std::vector<float> values) {
  return dtype == DType::F32 ? values : test::rounded(dtype, std::move(values));
}

// "_bf16" / "_f16" for test names; nothing for fp32, whose cases keep their names.
std::string dtype_suffix(DType dtype) {
  return dtype == DType::BF16 ? "_bf16" : dtype == DType::F16 ? "_f16" : "";
}

// ============================== the harness ==============================

// One tensor of a case: its contents before the op and whether (how tightly) it is compared after.
struct CaseTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<float> f32;      // contents before the op (F32, BF16, F16: values of the type)
  std::vector<int32_t> i32;    // contents before the op (I32)
  double tol = -1.0;           // < 0: not compared; 0: bit for bit; float: max relative error
                               // (plus storage_tol for 16-bit tensors); I32: compared exactly
  bool absent = false;         // an optional tensor passed with null data
  int offset_floats = 0;       // the view starts this many elements into its allocation (misalignment)
  bool expect_unchanged = false;  // compared also with its contents before the op, bit for bit
  int targets = -1;            // >= 0: (N,V) compared at each row's target and elsewhere apart, each
                               // on its own scale, with the I32 tensor at this index as the targets
};

using RunFn = std::function<void(Backend&, const std::vector<Tensor>&)>;

// The tensors of one case (indices into `tensors` are what `run` uses) and the ops to run.
// input, output, scratch and inout make activation tensors, in the case's storage dtype `act`
// (their values rounded to it); grad and the *_f32 helpers make tensors that are F32 whatever
// the storage (parameter gradients, statistics, losses, optimizer and scaler state).
struct OpCase {
  DType act = DType::F32;
  std::vector<CaseTensor> tensors;
  RunFn run;

  OpCase() = default;
  explicit OpCase(DType activations) : act(activations) {}

  int add(CaseTensor t) {
    t.f32 = round_to(t.dtype, std::move(t.f32));
    tensors.push_back(std::move(t));
    return static_cast<int>(tensors.size()) - 1;
  }
  // A tensor of any float dtype with the given contents (rounded to the dtype).
  int tensor(const std::string& name, DType dtype, Shape shape, std::vector<float> values, double tol) {
    return add({name, dtype, shape, std::move(values), {}, tol});
  }
  // A random input in [lo, hi), not compared.
  int input(const std::string& name, Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    return tensor(name, act, shape, test::random_floats(shape.numel(), seed, lo, hi), -1.0);
  }
  // An output the op must overwrite entirely: NaN before the op.
  int output(const std::string& name, Shape shape, double tol) {
    return tensor(name, act, shape, std::vector<float>(shape.numel(), std::numeric_limits<float>::quiet_NaN()), tol);
  }
  // Scratch the op may use: NaN before, not compared.
  int scratch(const std::string& name, Shape shape) { return output(name, shape, -1.0); }
  // A tensor read and written in place (an aliased buffer): given contents, compared after.
  int inout(const std::string& name, Shape shape, std::vector<float> values, double tol) {
    return tensor(name, act, shape, std::move(values), tol);
  }
  // A parameter gradient the op accumulates into (F32): random nonzero values before, compared after.
  int grad(const std::string& name, Shape shape, uint32_t seed, double tol) {
    return tensor(name, DType::F32, shape, test::random_floats(shape.numel(), seed, -1.0f, 1.0f), tol);
  }
  // F32 whatever the storage: a random input; an output (NaN before); an in-place tensor.
  int input_f32(const std::string& name, Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    return tensor(name, DType::F32, shape, test::random_floats(shape.numel(), seed, lo, hi), -1.0);
  }
  int output_f32(const std::string& name, Shape shape, double tol) {
    return tensor(name, DType::F32, shape, std::vector<float>(shape.numel(), std::numeric_limits<float>::quiet_NaN()),
                  tol);
  }
  int inout_f32(const std::string& name, Shape shape, std::vector<float> values, double tol) {
    return tensor(name, DType::F32, shape, std::move(values), tol);
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
  return ScalerSlots{c.inout_f32("loss scale", {1}, {1.0f}, -1.0),  c.scalar_i32("growth tracker", 0, false),
                     c.scalar_i32("found_inf", 0, true),            c.scalar_i32("skipped steps", 0, false),
                     c.scalar_i32("first skipped step", -1, false), c.inout_f32("grad norm^2", {1}, {0.0f}, -1.0)};
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

bool is_16bit(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

// Copies the case's tensors to `backend`, runs its ops there, and copies the compared tensors
// back (16-bit ones widened to fp32).
CaseResult run_on(Backend& backend, const OpCase& c) {
  Allocations memory(backend);
  std::vector<Tensor> views;
  for (const CaseTensor& t : c.tensors) {
    Tensor view{nullptr, t.dtype, t.shape};
    if (!t.absent) {
      const size_t offset = static_cast<size_t>(t.offset_floats) * dtype_size(t.dtype);
      view.data = static_cast<char*>(memory.allocate(view.bytes() + offset)) + offset;
      if (is_16bit(t.dtype)) {
        // the bits of values already of the type (exact); copy_to_device copies them before returning
        const test::HalfBuffer stored = test::half_of(t.dtype, t.f32);
        backend.copy_to_device(view.data, stored.bits.data(), view.bytes());
      } else {
        const void* src = t.dtype == DType::F32 ? static_cast<const void*>(t.f32.data())
                                                : static_cast<const void*>(t.i32.data());
        backend.copy_to_device(view.data, src, view.bytes());
      }
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
    if (t.dtype == DType::I32) {
      result.i32[i].resize(t.shape.numel());
      backend.copy_to_host(result.i32[i].data(), views[i].data, views[i].bytes());
    } else if (is_16bit(t.dtype)) {
      test::HalfBuffer stored{t.dtype, std::vector<uint16_t>(t.shape.numel())};
      backend.copy_to_host(stored.bits.data(), views[i].data, views[i].bytes());
      result.f32[i] = stored.values();
    } else {
      result.f32[i].resize(t.shape.numel());
      backend.copy_to_host(result.f32[i].data(), views[i].data, views[i].bytes());
    }
  }
  return result;
}

// Compares every compared tensor; tol_override >= 0 replaces the case's tolerances (to which
// the harness still adds storage_tol for 16-bit tensors: see the file comment).
void compare(const std::string& case_name, const OpCase& c, const CaseResult& cpu, const CaseResult& cuda,
             double tol_override = -1.0) {
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const CaseTensor& t = c.tensors[i];
    if (t.tol < 0.0 || t.absent) continue;
    const std::string what = case_name + " " + t.name;
    if (t.dtype == DType::I32) {
      EXPECT_EQ(cuda.i32[i], cpu.i32[i]) << what;
      if (t.expect_unchanged) {
        EXPECT_EQ(cuda.i32[i], t.i32) << what << " changed";
      }
      continue;
    }
    if (t.expect_unchanged) test::expect_bitwise_equal(what + " (unchanged)", cuda.f32[i], t.f32);
    if (t.tol == 0.0) {  // exact: bit for bit (16-bit values widen one to one), inf and NaN included
      test::expect_bitwise_equal(what, cuda.f32[i], cpu.f32[i]);
      continue;
    }
    // The CPU result is the reference: a non-finite one means the case itself is broken.
    const bool cpu_finite =
        std::all_of(cpu.f32[i].begin(), cpu.f32[i].end(), [](float x) { return std::isfinite(x); });
    EXPECT_TRUE(cpu_finite) << what << ": the CPU backend's result is not finite";
    const double tol = (tol_override >= 0.0 ? tol_override : t.tol) + storage_tol(t.dtype);
    if (t.targets >= 0) {  // cross-entropy's dlogits (engine/ops/op_harness.h, compare_by_target)
      const TensorCheck r = compare_by_target(what, test::to_double(cuda.f32[i]), test::to_double(cpu.f32[i]),
                                              c.tensors[t.targets].i32, tol, storage_abs_tol(t.dtype));
      std::printf("[ rel err  ] %-40s %.3e  (tol %.1e)\n", r.tensor.c_str(), r.max_rel, r.tol);
      EXPECT_TRUE(r.ok) << r.tensor << ": max |got - want| / max |want| = " << r.max_rel;
      continue;
    }
    test::expect_rel_close(what, cuda.f32[i], test::to_double(cpu.f32[i]), tol);
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
std::vector<CaseSpec> embedding_cases(DType act = DType::F32) {
  struct P {
    int B, T, C, V, maxT;
    bool pos;
  };
  std::vector<CaseSpec> specs;
  // V < B*T everywhere but the 509 case, so ids repeat within windows of 8 tokens and across the
  // batch; T = 1 makes consecutive tokens share a position.
  const std::vector<P> shapes =
      act == DType::F32
          ? std::vector<P>{P{2, 13, 32, 7, 16, true},    P{2, 13, 32, 7, 16, false}, P{1, 1, 8, 37, 4, true},
                           P{8, 1, 16, 5, 1, true},      P{3, 67, 52, 509, 80, true}, P{4, 67, 96, 37, 67, false},
                           P{2, 200, 768, 50, 256, true}}
          : std::vector<P>{P{2, 13, 32, 7, 16, true}, P{1, 1, 8, 37, 4, true}, P{3, 67, 52, 509, 80, true},
                           P{4, 67, 96, 37, 67, false}};
  for (P p : shapes) {
    const std::string name = "embedding_B" + std::to_string(p.B) + "_T" + std::to_string(p.T) + "_C" +
                             std::to_string(p.C) + "_V" + std::to_string(p.V) + (p.pos ? "_pos" : "_nopos");
    specs.push_back({name + dtype_suffix(act), [p, act] {
                       OpCase c(act);
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
                         be.embedding_backward(v[dwte], v[dwpe], v[dout], v[tokens], ParamGrads::Add);
                       };
                       return c;
                     }});
  }
  return specs;
}

// The factor of the fp32 reduction tolerance a GEMM output of the linear ops gets: 2 where the
// GEMM runs on tensor cores, which add aligned products with truncation (file comment): cuBLASLt
// and the mma rung with 16-bit operands (the mma rung hands fp32 GEMMs to the regblock rung, and
// with --tf32 the TF32 tests give their own tolerance); 1 on the other rungs of the GEMM ladder
// (kernels/cuda/gemm/), which add each output's K products in order into one fp32 accumulator,
// products exact (16-bit operands) or rounded once (fp32): off by at most ~(K-1) u of the terms'
// scale (u = 2^-24 = eps/2, the classic bound for a recursive sum), as OpenBLAS's blocked sum
// is, so within reduction_tol(K) = K eps of each other in every storage type.
double tensor_core_factor(DType act, GemmKernel gemm) {
  const bool tensor_cores = gemm == GemmKernel::CublasLt || gemm == GemmKernel::Mma;
  return act != DType::F32 && tensor_cores ? 2.0 : 1.0;
}

// ---- linear: inp (N,I), weight (O,I), bias (O) -> out (N,O); backward dinp, dweight, dbias ----
// `gemm` is the kernel the CUDA backend under test runs them with (CudaOptions::gemm): it sets
// the tolerance of the GEMM outputs (tensor_core_factor).
std::vector<CaseSpec> linear_gemm_cases(DType act, GemmKernel gemm) {
  struct P {
    int N, I, O;
    bool bias, dinp, misaligned;
  };
  std::vector<CaseSpec> specs;
  const std::vector<P> shapes =
      act == DType::F32
          ? std::vector<P>{P{1, 8, 8, true, true, false},       P{9, 17, 11, true, true, false},
                           P{9, 17, 11, true, true, true},       P{13, 32, 52, true, true, false},
                           P{26, 52, 32, false, true, false},    P{67, 64, 192, true, false, false},
                           P{134, 128, 509, true, true, false},  P{64, 300, 70, false, false, false},
                           P{40, 2048, 24, true, true, false},   P{2048, 64, 37, true, true, false},
                           P{3, 5, 1, true, true, true},         P{5, 1, 3, true, true, false}}
          // 16-bit: the bias epilogue in the storage type (O = 192, 509), the broadcast fallback
          // (O = 1, misaligned, and wherever cuBLASLt declines), odd leading dimensions, 2-byte
          // aligned views, and a long dweight sum (N = 2048)
          : std::vector<P>{P{1, 8, 8, true, true, false},      P{9, 17, 11, true, true, false},
                           P{9, 17, 11, true, true, true},      P{67, 64, 192, true, false, false},
                           P{134, 128, 509, true, true, false}, P{64, 300, 70, false, false, false},
                           P{2048, 64, 37, true, true, false},  P{3, 5, 1, true, true, true},
                           P{5, 1, 3, true, true, false}};
  for (P p : shapes) {
    const std::string name = "linear_N" + std::to_string(p.N) + "_I" + std::to_string(p.I) + "_O" +
                             std::to_string(p.O) + (p.bias ? "_bias" : "_nobias") + (p.dinp ? "" : "_nodinp") +
                             (p.misaligned ? "_misaligned" : "");
    specs.push_back({name + dtype_suffix(act), [p, act, gemm] {
                       OpCase c(act);
                       const int x = c.input("inp", {p.N, p.I}, 11);
                       const int w = c.input("weight", {p.O, p.I}, 12);
                       const int b = p.bias ? c.input("bias", {p.O}, 13) : c.absent("bias");
                       const int dout = c.input("dout", {p.N, p.O}, 14);
                       // tensor cores truncate: twice the fp32 budget there (tensor_core_factor).
                       // The bias gradient is an fp32 sum in token order on every path.
                       const double tc = tensor_core_factor(act, gemm);
                       const int out = c.output("out", {p.N, p.O}, tc * reduction_tol(p.I + 1));
                       const int dx =
                           p.dinp ? c.output("dinp", {p.N, p.I}, tc * reduction_tol(p.O)) : c.absent("dinp");
                       // two backward calls: start value + 2 sums of N rows
                       const int dw = c.grad("dweight", {p.O, p.I}, 15, tc * reduction_tol(2 * p.N + 1));
                       const int db = p.bias ? c.grad("dbias", {p.O}, 16, reduction_tol(2 * p.N + 1)) : c.absent("dbias");
                       // element-aligned views (4 bytes in fp32, 2 in 16-bit): cuBLASLt must pick
                       // algorithms that allow it
                       if (p.misaligned)
                         for (CaseTensor& t : c.tensors) t.offset_floats = 1;
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.linear_forward(v[out], v[x], v[w], v[b]);
                         // twice: parameter gradients accumulate, dinp is overwritten; the second
                         // call also reuses the cached GEMM plans
                         be.linear_backward(v[dx], v[dw], v[db], v[dout], v[x], v[w], ParamGrads::Add, InputGrad::Write);
                         be.linear_backward(v[dx], v[dw], v[db], v[dout], v[x], v[w], ParamGrads::Add, InputGrad::Write);
                       };
                       return c;
                     }});
  }
  return specs;
}

std::vector<CaseSpec> linear_cases(DType act = DType::F32) { return linear_gemm_cases(act, GemmKernel::CublasLt); }

// ---- a frozen linear (LoRA's base): dinp only, added to what it holds; no weight gradient ----
std::vector<CaseSpec> frozen_linear_cases(DType act = DType::F32) {
  std::vector<CaseSpec> specs;
  struct P {
    int N, I, O;
  };
  for (const P p : {P{67, 17, 11}, P{256, 64, 192}}) {
    const int N = p.N, I = p.I, O = p.O;  // (named copies: a lambda cannot capture a structured binding in C++17)
    specs.push_back({"linear_backward_frozen_N" + std::to_string(N) + "_I" + std::to_string(I) + "_O" +
                         std::to_string(O) + dtype_suffix(act),
                     [=] {
                       OpCase c(act);
                       const int x = c.input("inp", {N, I}, 91);
                       const int weight = c.input("weight", {O, I}, 92);
                       const int dout = c.input("dout", {N, O}, 93);
                       // O products onto the start value
                       const int dx = c.inout("dinp", {N, I}, test::random_floats(int64_t{N} * I, 94),
                                              gemm_reduction_tol(O + 1, act));
                       const int dw = c.absent("dweight"), db = c.absent("dbias");
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.linear_backward(v[dx], v[dw], v[db], v[dout], v[x], v[weight], ParamGrads::Add,
                                            InputGrad::Add);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- column windows (LoRA's adapters on part of a fused projection): out (N,O) columns
// [first, first + W) += scale * delta (N,W); out (N,W) = scale * inp (N,O)'s window. One row,
// windows at the start, the middle and the end, and a grid-stride lap past 65536 x 256 ----
std::vector<CaseSpec> column_window_cases(DType act = DType::F32) {
  struct P {
    int64_t N, O, first, W;
  };
  std::vector<CaseSpec> specs;
  std::vector<P> shapes = {P{1, 48, 0, 16}, P{37, 96, 32, 16}, P{300, 160, 96, 64}};
  if (act == DType::F32) shapes.push_back(P{65536 * 2 + 3, 256, 1, 130});
  const float scale = 2.5f;  // alpha / r of 20 / 8
  for (P p : shapes) {
    const std::string shape = "_N" + std::to_string(p.N) + "_O" + std::to_string(p.O) + "_first" +
                              std::to_string(p.first) + "_W" + std::to_string(p.W) + dtype_suffix(act);
    specs.push_back({"add_scaled_columns" + shape, [=] {
                       OpCase c(act);
                       const int delta = c.input("delta", {p.N, p.W}, 95);
                       const int out = c.inout("out", {p.N, p.O}, test::random_floats(p.N * p.O, 96), kElementwiseTol);
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.add_scaled_columns(v[out], p.first, v[delta], scale);
                       };
                       return c;
                     }});
    specs.push_back({"copy_scaled_columns" + shape, [=] {
                       OpCase c(act);
                       const int inp = c.input("inp", {p.N, p.O}, 97);
                       const int out = c.output("out", {p.N, p.W}, kElementwiseTol);
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.copy_scaled_columns(v[out], v[inp], p.first, scale);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- attention: qkv (B,T,3C) -> out (B,T,C), lse (B,NH,T); backward dqkv ----
// Run by the default CUDA backend (flash attention: on tensor cores for the 16-bit cases of head
// size 64 and 128, flash_attention_mma.cu) in AllOps, by one with --attention simt in
// SimtAttention and by one with --attention naive in NaiveAttention below. T not a multiple of
// the 32- or 64-row tile (13, 37, 67, 130), T = 1, head sizes 8 to 128 (and 16), causal and not,
// dropout 0 to 0.5, grouped key/value heads.
struct AttentionParams {
  int B, T, NH, HS;
  bool causal;
  float p;
  int KVH = 0;  // grouped key/value heads; 0: NH
};

CaseSpec attention_case(AttentionParams p, DType act) {
  const std::string name = "attention_B" + std::to_string(p.B) + "_T" + std::to_string(p.T) + "_NH" +
                           std::to_string(p.NH) + (p.KVH ? "_KVH" + std::to_string(p.KVH) : std::string()) +
                           "_HS" + std::to_string(p.HS) + (p.causal ? "_causal" : "_full") + "_p" + num(p.p);
  return {name + dtype_suffix(act), [p, act] {
           OpCase c(act);
           const AttentionShape s{p.B, p.T, p.NH, p.HS, p.causal, p.KVH};
           const int C = p.NH * p.HS, W = static_cast<int>(s.layout().width());
           // Scores are HS-term dot products, the softmax sums T exps, each output sums T
           // weighted values (+1 for the dropout scale), and the flash kernel rescales its
           // running sums once per 32-key tile and divides once (T/32 + 2); lse carries
           // the sum's error, absolute. The backward runs its own HS- and T-term sums on
           // top of the forward's lse and out: twice the budget (as the CPU tests).
           const double fwd = reduction_tol(p.HS + 2 * p.T + p.T / 32 + 3);
           const int step = c.scalar_i32("step", 7, false);
           const int qkv = c.input("qkv", {p.B, p.T, W}, 31, -1.5f, 1.5f);
           const int dout = c.input("dout", {p.B, p.T, C}, 32);
           // 16-bit on tensor cores: each weight P is rounded to the storage type before its
           // product with v (relative error u_16), so out is off by at most u_16 sum|P v|
           // against max|out|: one more storage_tol (0 for fp32, where the rung does not run).
           const double weights = act == DType::F32 ? 0.0 : storage_tol(act);
           const int out = c.output("out", {p.B, p.T, C}, fwd + weights);
           const int lse = c.output_f32("lse", {p.B, p.NH, p.T}, fwd);
           // 16-bit: another 2u for the out the flash backward reads, which each backend
           // rounded from its own fp32 result (file comment), and on tensor cores the rounded P
           // and dS of the backward's products, one u_16 each. A shared key or value head sums
           // its group's heads' gradients: their budgets add up.
           const int dqkv = c.output("dqkv", {p.B, p.T, W},
                                     s.layout().group() * (2.0 * fwd + storage_tol(act) + 2.0 * weights));
           const int dout_dot_out = c.output_f32("dout_dot_out", {p.B, p.NH, p.T}, -1.0);
           const float drop = p.p;
           c.run = [=](Backend& be, const std::vector<Tensor>& v) {
             const DropoutMask mask =
                 mask_at(v, step, drop, 0x1234abcd5678ull, 2, DropoutSite::AttentionWeights);
             be.attention_forward(v[out], v[lse], v[qkv], s, mask);
             be.attention_backward(v[dqkv], v[dout_dot_out], v[dout], v[qkv], v[out], v[lse], s, mask);
           };
           return c;
         }};
}

std::vector<CaseSpec> attention_cases(DType act = DType::F32) {
  using P = AttentionParams;
  std::vector<CaseSpec> specs;
  const std::vector<P> shapes =
      act == DType::F32
          ? std::vector<P>{P{1, 1, 1, 8, true, 0.0f},     P{1, 1, 1, 8, false, 0.1f},   P{2, 13, 2, 8, true, 0.0f},
                           P{2, 13, 2, 32, false, 0.0f},  P{2, 13, 4, 32, true, 0.1f},  P{1, 67, 2, 64, true, 0.2f},
                           P{2, 67, 1, 128, false, 0.0f}, P{1, 67, 2, 128, true, 0.1f}, P{2, 32, 2, 64, false, 0.1f},
                           P{1, 256, 2, 64, true, 0.0f},  P{1, 130, 3, 16, false, 0.5f},
                           P{2, 37, 4, 16, true, 0.1f, 2}, P{1, 67, 4, 64, false, 0.0f, 1}}
          : std::vector<P>{P{1, 1, 1, 8, true, 0.0f},    P{2, 13, 2, 8, true, 0.0f},
                           P{2, 13, 4, 32, true, 0.1f},  P{1, 67, 2, 64, true, 0.2f},
                           P{2, 67, 1, 128, false, 0.0f}, P{1, 130, 3, 16, false, 0.5f},
                           P{2, 37, 4, 16, true, 0.1f, 2},
                           // the tensor-core rung's: one key, tiles of 64 and their edges, the
                           // causal skip, dropout, grouped heads
                           P{2, 1, 2, 64, false, 0.1f},  P{1, 37, 2, 64, false, 0.0f},
                           P{1, 200, 2, 64, true, 0.1f}, P{1, 130, 1, 128, true, 0.1f},
                           P{2, 70, 4, 64, true, 0.1f, 2}, P{1, 67, 4, 128, false, 0.0f, 1}};
  for (P p : shapes) specs.push_back(attention_case(p, act));
  return specs;
}

// ---- layernorm: inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N); backward ----
std::vector<CaseSpec> layernorm_cases(DType act = DType::F32) {
  struct P {
    int N, C;
    bool alias;          // dinp aliases dout
    bool tiny = false;   // inputs in [-0.005, 0.005]: variance 8e-6, below eps = 1e-5, so eps matters
    bool rms = false;    // RMSNorm: mean and bias absent (kernels/backend.h)
  };
  std::vector<CaseSpec> specs;
  const std::vector<P> shapes =
      act == DType::F32 ? std::vector<P>{P{1, 8, false},   P{13, 52, false}, P{67, 32, false}, P{26, 768, false},
                                         P{8, 2048, false}, P{3, 37, true},   P{67, 768, true}, P{13, 52, false, true},
                                         P{13, 52, false, false, true}, P{67, 768, true, false, true},
                                         P{2113, 24, true}}
                        : std::vector<P>{P{1, 8, false}, P{13, 52, false}, P{26, 768, false}, P{3, 37, true},
                                         P{67, 768, true}, P{13, 52, false, false, true}, P{2113, 24, false}};
  // (N = 2113: 67 blocks of 32 rows, so the backward's parameter gradients take both levels of
  // its fixed-order sums: groups of 32, 32 and 3 blocks, then the 3 groups)
  for (P p : shapes) {
    const std::string name = "layernorm_N" + std::to_string(p.N) + "_C" + std::to_string(p.C) +
                             (p.alias ? "_dinp_aliases_dout" : "") + (p.tiny ? "_variance_below_eps" : "") +
                             (p.rms ? "_rmsnorm" : "");
    specs.push_back({name + dtype_suffix(act), [p, act] {
                       OpCase c(act);
                       // Bounds as the CPU tests: out and rstd (C+4), mean C, dinp 3C, dweight N+C,
                       // dbias N, plus one for the accumulation onto the start value.
                       // [-2, 3]: the mean away from 0. The tiny rows scale every value and error
                       // alike (the tolerances are relative) except eps: with var + eps = 1.8e-5
                       // instead of var = 8e-6, an rstd that leaves eps out is 1.5x too large.
                       const int x = p.tiny ? c.input("inp", {p.N, p.C}, 41, -0.005f, 0.005f)
                                            : c.input("inp", {p.N, p.C}, 41, -2.0f, 3.0f);
                       const int w = c.input("weight", {p.C}, 42, 0.5f, 1.5f);
                       const int b = p.rms ? c.absent("bias") : c.input("bias", {p.C}, 43);
                       const int out = c.output("out", {p.N, p.C}, reduction_tol(p.C + 4));
                       const int mean = p.rms ? c.absent("mean") : c.output_f32("mean", {p.N}, reduction_tol(p.C));
                       const int rstd = c.output_f32("rstd", {p.N}, reduction_tol(p.C + 4));
                       const double dinp_tol = reduction_tol(3 * p.C);
                       const int dout = p.alias ? c.inout("dout (= dinp)", {p.N, p.C},
                                                          test::random_floats(p.N * p.C, 44), dinp_tol)
                                                : c.input("dout", {p.N, p.C}, 44);
                       const int dx = p.alias ? dout : c.output("dinp", {p.N, p.C}, dinp_tol);
                       const int dw = c.grad("dweight", {p.C}, 45, reduction_tol(p.N + p.C + 1));
                       const int db = p.rms ? c.absent("dbias") : c.grad("dbias", {p.C}, 46, reduction_tol(p.N + 1));
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.layernorm_forward(v[out], v[mean], v[rstd], v[x], v[w], v[b], 1e-5f);
                         be.layernorm_backward(v[dx], v[dw], v[db], v[dout], v[x], v[w], v[mean], v[rstd], ParamGrads::Add);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- cross-entropy: logits (N,V), targets (N) -> losses (N), dlogits (N,V) ----
std::vector<CaseSpec> cross_entropy_cases(DType act = DType::F32) {
  enum class Grad { Separate, None, AliasesLogits };
  struct P {
    int N, V;
    float offset, dloss_scale;
    Grad grad;
  };
  std::vector<CaseSpec> specs;
  // offset 100: exp overflows without the max subtraction; scales 0.37 and 2.5: not powers of 2
  const std::vector<P> shapes =
      act == DType::F32
          ? std::vector<P>{P{1, 37, 0.0f, 1.0f, Grad::Separate},          P{13, 509, 0.0f, 1.0f, Grad::Separate},
                           P{13, 509, 0.0f, 1.0f, Grad::None},            P{13, 509, 0.0f, 0.37f, Grad::AliasesLogits},
                           P{7, 19, 100.0f, 1024.0f, Grad::AliasesLogits}, P{4, 50257, 0.0f, 1.0f, Grad::Separate},
                           P{67, 37, 0.0f, 1.0f, Grad::AliasesLogits},    P{3, 50257, 0.0f, 2.5f, Grad::AliasesLogits},
                           P{130, 1000, 0.0f, 1.0f, Grad::Separate}}
          // 16-bit: fp16's subnormals hold the small gradients of V = 50257 (1/(4 V) ~ 5e-6)
          : std::vector<P>{P{1, 37, 0.0f, 1.0f, Grad::Separate},
                           P{13, 509, 0.0f, 1.0f, Grad::None},
                           P{13, 509, 0.0f, 0.37f, Grad::AliasesLogits},
                           P{7, 19, 100.0f, 1024.0f, Grad::AliasesLogits},
                           P{4, 50257, 0.0f, 1.0f, Grad::Separate},
                           P{67, 37, 0.0f, 1.0f, Grad::AliasesLogits}};
  for (P p : shapes) {
    const char* mode = p.grad == Grad::Separate ? "_dlogits" : p.grad == Grad::None ? "_lossonly" : "_inplace";
    const std::string name = "cross_entropy_N" + std::to_string(p.N) + "_V" + std::to_string(p.V) + "_offset" +
                             num(p.offset) + "_scale" + num(p.dloss_scale) + mode;
    specs.push_back({name + dtype_suffix(act), [p, act] {
                       OpCase c(act);
                       // As the CPU tests: the V-term sum of exps (V eps in its log) and roundings at
                       // the logits' magnitude (|offset| + 4) in "log sum + max - z[target]".
                       // dlogits: the targets and the others each on their own scale (at V = 50257
                       // the others are ~1e-4 of the targets: see compare_by_target).
                       const double tol = reduction_tol(p.V + 2.0 * (std::fabs(p.offset) + 4.0));
                       std::vector<float> z = test::random_floats(p.N * p.V, 51, p.offset - 4.0f, p.offset + 4.0f);
                       const int targets = c.ids("targets", {p.N}, 52, 0, p.V);
                       const int logits = p.grad == Grad::AliasesLogits
                                              ? c.inout("logits (= dlogits)", {p.N, p.V}, z, tol)
                                              : c.inout("logits", {p.N, p.V}, z, -1.0);
                       const int losses = c.output_f32("losses", {p.N}, tol);
                       const int dlogits = p.grad == Grad::Separate     ? c.output("dlogits", {p.N, p.V}, tol)
                                           : p.grad == Grad::None       ? c.absent("dlogits")
                                                                        : logits;
                       if (p.grad != Grad::None) c.tensors[dlogits].targets = targets;
                       const int scale = c.inout_f32("dloss_scale", {1}, {p.dloss_scale}, -1.0);
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.cross_entropy_forward_backward(v[losses], v[dlogits], v[logits], v[targets], v[scale], p.N);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- activation: inp (n) -> out (n); backward dinp (n), possibly aliasing dout ----
std::vector<CaseSpec> activation_cases(DType act = DType::F32) {
  struct P {
    int64_t n;
    Activation act;
    bool alias;
  };
  std::vector<CaseSpec> specs;
  const std::vector<P> shapes =
      act == DType::F32
          ? std::vector<P>{P{1, Activation::Relu, false},           P{37, Activation::Relu, true},
                           P{4099, Activation::Relu, false},        P{1, Activation::Gelu, false},
                           P{37, Activation::Gelu, false},          P{4099, Activation::Gelu, true},
                           P{67 * 52 * 3, Activation::Gelu, false}, P{67 * 52 * 3, Activation::Relu, true}}
          : std::vector<P>{P{1, Activation::Relu, false},           P{37, Activation::Relu, true},
                           P{4099, Activation::Gelu, true},         P{67 * 52 * 3, Activation::Gelu, false},
                           P{4099, Activation::Relu, false}};
  for (P p : shapes) {
    const std::string name = std::string(p.act == Activation::Relu ? "relu" : "gelu") + "_n" +
                             std::to_string(p.n) + (p.alias ? "_dinp_aliases_dout" : "");
    specs.push_back({name + dtype_suffix(act), [p, act] {
                       OpCase c(act);
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
std::vector<CaseSpec> dropout_cases(DType act = DType::F32) {
  struct P {
    int64_t n;
    float p;
    bool in_place;
  };
  std::vector<CaseSpec> specs;
  // sizes 1, 3, 5: partial Philox groups; 4099: a partial last group; p = 0: the identity
  const std::vector<P> shapes =
      act == DType::F32
          ? std::vector<P>{P{1, 0.1f, false},    P{3, 0.5f, false},      P{4, 0.1f, true},
                           P{5, 0.1f, false},    P{37, 0.2f, false},     P{4099, 0.1f, true},
                           P{100003, 0.5f, false}, P{4099, 0.0f, false}, P{4099, 0.0f, true}}
          : std::vector<P>{P{1, 0.1f, false}, P{5, 0.1f, false}, P{4099, 0.1f, true}, P{100003, 0.5f, false},
                           P{4099, 0.0f, false}};
  for (P p : shapes) {
    const std::string name = "dropout_n" + std::to_string(p.n) + "_p" + num(p.p) + (p.in_place ? "_inplace" : "");
    specs.push_back({name + dtype_suffix(act), [p, act] {
                       OpCase c(act);
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
// ---- rotary position embedding: qkv (B,T,3C) q and k turned in place, then turned back ----
// Odd B and T, head sizes 2, 26 and 64, a start position past 0 (the decoder's), a large
// theta; forward and backward in one case (their composition is the identity, and each step is
// compared on its own output: the forward's is the backward's input).
std::vector<CaseSpec> rope_cases(DType act = DType::F32) {
  struct P {
    int B, T, NH, HS, first_pos;
    float theta;
    int KVH;  // key/value heads: the k heads turned after the NH q heads
  };
  std::vector<CaseSpec> specs;
  for (P p : {P{1, 1, 1, 2, 0, 10000.0f, 1}, P{3, 13, 2, 26, 0, 10000.0f, 2}, P{2, 5, 3, 64, 37, 500000.0f, 3},
              P{2, 7, 4, 16, 5, 10000.0f, 1}}) {
    const std::string name = "rope_B" + std::to_string(p.B) + "_T" + std::to_string(p.T) + "_NH" +
                             std::to_string(p.NH) + (p.KVH != p.NH ? "_KVH" + std::to_string(p.KVH) : std::string()) +
                             "_HS" + std::to_string(p.HS) + "_pos" + std::to_string(p.first_pos);
    specs.push_back({name + dtype_suffix(act), [p, act] {
                       OpCase c(act);
                       const int W = (p.NH + 2 * p.KVH) * p.HS;
                       // two products and a sum per value, the same cos and sin on both backends
                       const int turned = c.inout("qkv (turned)", {p.B, p.T, W},
                                                  test::random_floats(p.B * p.T * W, 61), kElementwiseTol);
                       const int back = c.inout("dqkv (turned back)", {p.B, p.T, W},
                                                test::random_floats(p.B * p.T * W, 62), kElementwiseTol);
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.rope_forward(v[turned], p.NH, p.KVH, p.first_pos, p.theta);
                         be.rope_backward(v[back], p.NH, p.KVH, p.first_pos, p.theta);
                       };
                       return c;
                     }});
  }
  return specs;
}

std::vector<CaseSpec> residual_cases(DType act = DType::F32) {
  enum class Alias { None, A, B };
  struct P {
    int64_t n;
    Alias alias;
  };
  std::vector<CaseSpec> specs;
  std::vector<P> shapes = {P{1, Alias::None}, P{37, Alias::A}, P{4099, Alias::B}, P{100003, Alias::None}};
  // Past the grid-stride cap (grid_stride_blocks: 65536 blocks of 256 threads), so the threads
  // of the capped grid go round their loop a second time.
  if (act == DType::F32) shapes.push_back(P{int64_t{65536} * 256 + 1029, Alias::None});
  for (P p : shapes) {
    const char* mode = p.alias == Alias::None ? "" : p.alias == Alias::A ? "_out_aliases_a" : "_out_aliases_b";
    specs.push_back({"residual_n" + std::to_string(p.n) + mode + dtype_suffix(act), [p, act] {
                       OpCase c(act);
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
// Compared bit for bit (tol 0): both backends run adamw_update (kernels/common/adamw_update.h),
// whose every product that meets a sum is rounded as written (mul_rn/add_rn; the GPU build fuses
// multiply-adds elsewhere, tests/check_rounded_formulas.py shows it fuses none of these), and
// sqrtf and / are correctly rounded on both. The step's scalars come from pow in double, whose
// device version may differ from glibc's in the last double bit: rounded to fp32 they still agree
// unless that bit straddles an fp32 rounding boundary (odds about 2^-29 a scalar).
constexpr double kAdamWBitwise = 0.0;

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
                       const int params =
                           c.inout_f32("params", {p.n}, test::random_floats(p.n, 91), kAdamWBitwise);
                       const int grads = c.input_f32("grads", {p.n}, 92);
                       const int m = c.inout_f32(
                           "exp_avg", {p.n},
                           fresh ? std::vector<float>(p.n, 0.0f) : test::random_floats(p.n, 93, -0.1f, 0.1f),
                           kAdamWBitwise);
                       const int v2 = c.inout_f32(
                           "exp_avg_sq", {p.n},
                           fresh ? std::vector<float>(p.n, 0.0f) : test::random_floats(p.n, 94, 0.0f, 0.01f),
                           kAdamWBitwise);
                       const int count = c.scalar_i32("step_count", p.start_step, /*compare=*/true);
                       const int train_step = c.scalar_i32("train step", p.start_step, /*compare=*/false);
                       AdamWHyper hyper;
                       hyper.lr = 1e-2;
                       hyper.weight_decay = 0.1;
                       const int steps = p.steps;
                       const ScalerSlots scaler = unit_scaler_in(c);
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         for (int s = 0; s < steps; ++s)
                           be.adamw_step(v[params], v[grads], v[m], v[v2], v[count], v[train_step], hyper,
                                         scaler_at(v, scaler));
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- a skipped optimizer step: found_inf set, so nothing may change, bit for bit ----
std::vector<CaseSpec> adamw_skip_cases() {
  std::vector<CaseSpec> specs;
  for (int64_t n : {int64_t{1}, int64_t{4099}, int64_t{100003}}) {
    specs.push_back({"adamw_n" + std::to_string(n) + "_skipped_when_found_inf", [n] {
                       OpCase c;
                       auto unchanged = [&](int slot) {
                         c.tensors[slot].expect_unchanged = true;
                         return slot;
                       };
                       // tol 0 and expect_unchanged: the same bits as before, on both backends
                       const int params = unchanged(c.inout_f32("params", {n}, test::random_floats(n, 95), 0.0));
                       const int grads = c.input_f32("grads", {n}, 96);
                       const int m =
                           unchanged(c.inout_f32("exp_avg", {n}, test::random_floats(n, 97, -0.1f, 0.1f), 0.0));
                       const int v2 =
                           unchanged(c.inout_f32("exp_avg_sq", {n}, test::random_floats(n, 98, 0.0f, 0.01f), 0.0));
                       const int count = unchanged(c.scalar_i32("step_count", 41, /*compare=*/true));
                       const int train_step = c.scalar_i32("train step", 41, /*compare=*/false);
                       ScalerSlots scaler = unit_scaler_in(c);
                       c.tensors[scaler.found_inf].i32 = {1};
                       c.tensors[scaler.found_inf].expect_unchanged = true;
                       c.tensors[scaler.scale].f32 = {65536.0f};
                       AdamWHyper hyper;
                       hyper.lr = 1e-2;
                       hyper.weight_decay = 0.1;
                       // a schedule and clipping change nothing about a skipped step
                       hyper.schedule.kind = LrScheduleKind::Cosine;
                       hyper.schedule.warmup_steps = 3;
                       hyper.schedule.total_steps = 50;
                       hyper.grad_clip = 0.5;
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         for (int s = 0; s < 2; ++s)
                           be.adamw_step(v[params], v[grads], v[m], v[v2], v[count], v[train_step], hyper,
                                         scaler_at(v, scaler));
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- AdamW with an lr schedule and gradient clipping: grad_norm_check then adamw_step, as the
// trainer runs them, over steps that cross the warmup, with the training step written into
// backend memory before each (as load_batch does) and a loss scale of 1024 (unscaled here).
// Both backends clip with the norm their own grad_norm_check computed; the two sums agree to
// an fp32 ulp (see grad_norm_check_cases), so the clip factors do too: kElementwiseTol. ----
std::vector<CaseSpec> adamw_schedule_clip_cases() {
  struct P {
    int64_t n;
    LrScheduleKind kind;
    double clip;  // 0: off; 1e9: above every norm (coefficient 1)
    const char* what;
  };
  std::vector<CaseSpec> specs;
  for (P p : {P{37, LrScheduleKind::Cosine, 0.5, "cosine_clip_half"},
              P{4099, LrScheduleKind::Linear, 2.0, "linear_clip2"},
              P{100003, LrScheduleKind::Cosine, 1.0, "cosine_clip1"},
              P{4099, LrScheduleKind::Constant, 1e9, "constant_clip_above_norm"},
              P{4099, LrScheduleKind::Cosine, 0.0, "cosine_no_clip"}}) {
    const std::string name = "adamw_schedule_n" + std::to_string(p.n) + "_" + p.what;
    specs.push_back({name, [p] {
                       OpCase c;
                       const int params =
                           c.inout_f32("params", {p.n}, test::random_floats(p.n, 191), kElementwiseTol);
                       // gradients x 1024 (the loss scale); norm ~ 1024 sqrt(n / 3)
                       std::vector<float> g = test::random_floats(p.n, 192);
                       for (float& x : g) x *= 1024.0f;
                       const int grads = c.inout_f32("grads", {p.n}, g, -1.0);
                       const int m = c.inout_f32("exp_avg", {p.n}, std::vector<float>(p.n, 0.0f), kElementwiseTol);
                       const int v2 =
                           c.inout_f32("exp_avg_sq", {p.n}, std::vector<float>(p.n, 0.0f), kElementwiseTol);
                       const int count = c.scalar_i32("step_count", 0, /*compare=*/true);
                       const int train_step = c.scalar_i32("train step", 0, /*compare=*/false);
                       ScalerSlots scaler = unit_scaler_in(c);
                       c.tensors[scaler.scale].f32 = {1024.0f};
                       AdamWHyper hyper;
                       hyper.lr = 1e-2;
                       hyper.eps = 1e-2;  // the update depends on the gradients' size, so on the clip
                       hyper.weight_decay = 0.1;
                       hyper.schedule.kind = p.kind;
                       hyper.schedule.warmup_steps = 2;
                       hyper.schedule.total_steps = 5;
                       hyper.schedule.min_lr = 1e-4;
                       hyper.grad_clip = p.clip;
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         for (int32_t s = 0; s < 5; ++s) {
                           be.copy_to_device(v[train_step].data, &s, sizeof s);
                           be.grad_norm_check(v[grads], scaler_at(v, scaler));
                           be.adamw_step(v[params], v[grads], v[m], v[v2], v[count], v[train_step], hyper,
                                         scaler_at(v, scaler));
                         }
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- the gradient check: grads (n) F32 -> grad_norm_sq (sum of squares), found_inf ----
std::vector<CaseSpec> grad_norm_check_cases() {
  enum class Plant { None, Inf, NaN };
  struct P {
    int64_t n;
    Plant plant;
  };
  std::vector<CaseSpec> specs;
  // 100003 > 256 blocks x 256 threads: every thread of the GPU's partial sums takes several elements
  for (P p : {P{1, Plant::None}, P{4099, Plant::None}, P{100003, Plant::None}, P{4099, Plant::Inf},
              P{100003, Plant::NaN}, P{1, Plant::NaN}}) {
    const char* what = p.plant == Plant::None ? "_finite" : p.plant == Plant::Inf ? "_with_inf" : "_with_nan";
    specs.push_back({"grad_norm_check_n" + std::to_string(p.n) + what, [p] {
                       OpCase c;
                       std::vector<float> g = test::random_floats(p.n, 99, -2.0f, 2.0f);
                       // an inf in the middle; a NaN last (the tail of the last block)
                       if (p.plant == Plant::Inf) g[p.n / 2] = -std::numeric_limits<float>::infinity();
                       if (p.plant == Plant::NaN) g[p.n - 1] = std::numeric_limits<float>::quiet_NaN();
                       const int grads = c.inout_f32("grads", {p.n}, g, -1.0);
                       ScalerSlots scaler = unit_scaler_in(c);
                       // found_inf starts opposite to the answer, so it must be written either way
                       c.tensors[scaler.found_inf].i32 = {p.plant == Plant::None ? 1 : 0};
                       // sum of squares: both backends sum in double (n eps64 << eps32) and round
                       // once to fp32, so they agree to an fp32 ulp: the 16 eps floor is ample. inf
                       // or NaN when one is planted, which only found_inf reports.
                       if (p.plant == Plant::None) c.tensors[scaler.grad_norm_sq].tol = reduction_tol(1);
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.grad_norm_check(v[grads], scaler_at(v, scaler));
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- the loss scaler's update (kernels/common/loss_scaler.h): every field exact ----
std::vector<CaseSpec> loss_scaler_cases() {
  struct P {
    const char* name;
    bool dynamic;
    float scale;
    int32_t tracker, found_inf, skipped, first_skipped;
  };
  std::vector<CaseSpec> specs;
  // growth interval 5 below; step 17
  for (P p : {P{"dynamic_clean_step_counts", true, 65536.0f, 2, 0, 0, -1},
              P{"dynamic_clean_interval_grows", true, 65536.0f, 4, 0, 0, -1},
              P{"dynamic_never_grows_into_inf", true, 3.0e38f, 4, 0, 0, -1},
              P{"dynamic_inf_backs_off_first_skip", true, 65536.0f, 3, 1, 0, -1},
              P{"dynamic_inf_backs_off_later_skip", true, 1024.0f, 0, 1, 2, 9},
              P{"static_inf_counts_skip", false, 1.0f, 0, 1, 0, -1},
              P{"static_clean_no_change", false, 1.0f, 0, 0, 3, 5}}) {
    specs.push_back({std::string("loss_scaler_update_") + p.name, [p] {
                       OpCase c;
                       const ScalerSlots s{c.inout_f32("loss scale", {1}, {p.scale}, 0.0),
                                           c.scalar_i32("growth tracker", p.tracker, true),
                                           c.scalar_i32("found_inf", p.found_inf, true),
                                           c.scalar_i32("skipped steps", p.skipped, true),
                                           c.scalar_i32("first skipped step", p.first_skipped, true),
                                           c.inout_f32("grad norm^2", {1}, {3.0f}, -1.0)};
                       const int step = c.scalar_i32("step", 17, false);
                       LossScalerConfig config;
                       config.dynamic = p.dynamic;
                       config.growth_interval = 5;
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.loss_scaler_update(scaler_at(v, s), config, v[step]);
                       };
                       return c;
                     }});
  }
  return specs;
}

// ---- cast: src (n) -> dst (n) between float storage types, exact (the shared rounding) ----
std::vector<CaseSpec> cast_cases() {
  struct P {
    DType src, dst;
    int64_t n;
  };
  std::vector<CaseSpec> specs;
  for (P p : {P{DType::F32, DType::BF16, 4099}, P{DType::F32, DType::F16, 4099}, P{DType::BF16, DType::F32, 4099},
              P{DType::F16, DType::BF16, 1037}, P{DType::F32, DType::BF16, 1}, P{DType::F32, DType::F16, 100003}}) {
    const std::string name = std::string("cast_") + dtype_name(p.src) + "_to_" + dtype_name(p.dst) + "_n" +
                             std::to_string(p.n);
    specs.push_back({name, [p] {
                       OpCase c;
                       // Magnitudes from 1e-7 to 1e5: fp16 subnormals (below 6.1e-5) and overflow to
                       // infinity (above 65504), bf16's 8-bit rounding at every scale, plus exact
                       // ties between neighbouring 16-bit values.
                       std::vector<float> x = test::random_floats(p.n, 111, -1.0f, 1.0f);
                       for (int64_t i = 0; i < p.n; ++i) x[i] *= std::pow(10.0f, static_cast<float>(i % 13) - 7.0f);
                       if (p.n > 8) {
                         x[1] = 1.0f + 1.0f / 256.0f;    // a bf16 tie: rounds to even (1)
                         x[2] = 1.0f + 3.0f / 256.0f;    // a bf16 tie: rounds to even (1 + 2^-6)
                         x[3] = 1.0f + 1.0f / 2048.0f;   // an fp16 tie
                         x[4] = 65520.0f;                // fp16: rounds to infinity
                         x[5] = -0.0f;
                       }
                       const int src = c.tensor("src", p.src, {p.n}, x, -1.0);
                       const int dst = c.tensor("dst", p.dst, {p.n},
                                                std::vector<float>(p.n, std::numeric_limits<float>::quiet_NaN()), 0.0);
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) { be.cast(v[dst], v[src]); };
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
                 be.linear_backward(Tensor{nullptr, DType::F32, Shape{}}, v[dw], v[db], v[out], v[x], v[w], ParamGrads::Add, InputGrad::Write);
                 be.adamw_step(v[w], v[dw], v[m], v[v2], v[count], v[step], hyper, scaler_at(v, scaler));
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
  auto append = [&all](const std::vector<CaseSpec>& specs) { all.insert(all.end(), specs.begin(), specs.end()); };
  // the ops on activations: with fp32, bf16 and fp16 storage
  for (DType act : {DType::F32, DType::BF16, DType::F16})
    for (auto family : {embedding_cases, linear_cases, frozen_linear_cases, column_window_cases, attention_cases,
                        layernorm_cases, cross_entropy_cases, activation_cases, dropout_cases, residual_cases,
                        rope_cases})
      append(family(act));
  // precision and the optimizer step: fixed dtypes (casts name theirs; the rest is F32 and I32)
  for (auto family : {cast_cases, grad_norm_check_cases, adamw_cases, adamw_skip_cases, adamw_schedule_clip_cases,
                      loss_scaler_cases, graph_cases})
    append(family());
  return all;
}

// ============================== the tests ==============================

// Gives each test a CPU and a CUDA backend (on the GPU, else emulated).
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    cuda = test::cuda_backend_or_skip(why);
    if (!cuda) GTEST_SKIP() << why;
    cpu = make_cpu_backend();
  }
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<Backend> cuda;
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

// The linear cases with every GEMM on a rung of tinytrain's GEMM ladder (--gemm naive|tiled|
// regblock|mma, kernels/cuda/gemm/): on the emulator this is CUDA code, so these compare GEMM
// arithmetic with the CPU's OpenBLAS, where the emulated cuBLASLt is OpenBLAS itself. fp32, bf16
// and fp16 (the mma rung's fp32 GEMMs run on the regblock rung: no --tf32); bias always fused.
struct GemmRungCase {
  GemmKernel gemm;
  CaseSpec spec;
};
void PrintTo(const GemmRungCase& c, std::ostream* os) { *os << c.spec.name; }

class CudaOpsGemm : public CudaTest, public ::testing::WithParamInterface<GemmRungCase> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (!cuda) return;
    CudaOptions options;
    options.gemm = GetParam().gemm;
    std::string why;
    cuda = test::cuda_backend_or_skip(why, options);
  }
};

TEST_P(CudaOpsGemm, MatchesCpuBackend) {
  const OpCase c = GetParam().spec.make();
  compare(GetParam().spec.name, c, run_on(*cpu, c), run_on(*cuda, c));
}

std::vector<GemmRungCase> on_rung(GemmKernel gemm, const std::vector<CaseSpec>& specs) {
  std::vector<GemmRungCase> cases;
  for (const CaseSpec& spec : specs) cases.push_back({gemm, spec});
  return cases;
}

std::vector<GemmRungCase> rung_linear_cases(GemmKernel gemm) {
  std::vector<CaseSpec> all;
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    const std::vector<CaseSpec> specs = linear_gemm_cases(act, gemm);
    all.insert(all.end(), specs.begin(), specs.end());
  }
  return on_rung(gemm, all);
}

std::string rung_case_name(const ::testing::TestParamInfo<GemmRungCase>& info) { return info.param.spec.name; }

INSTANTIATE_TEST_SUITE_P(NaiveGemm, CudaOpsGemm, ::testing::ValuesIn(rung_linear_cases(GemmKernel::Naive)), rung_case_name);
INSTANTIATE_TEST_SUITE_P(TiledGemm, CudaOpsGemm, ::testing::ValuesIn(rung_linear_cases(GemmKernel::Tiled)), rung_case_name);
INSTANTIATE_TEST_SUITE_P(RegBlockGemm, CudaOpsGemm, ::testing::ValuesIn(rung_linear_cases(GemmKernel::RegBlock)),
                         rung_case_name);
INSTANTIATE_TEST_SUITE_P(MmaGemm, CudaOpsGemm, ::testing::ValuesIn(rung_linear_cases(GemmKernel::Mma)), rung_case_name);

// The attention cases on the ladder's first rung (--attention naive, naive_attention.cu: the
// (T,T) weights in the work buffer), fp32, bf16 and fp16; AllOps runs them on flash attention.
class CudaOpsNaiveAttention : public CudaTest, public ::testing::WithParamInterface<CaseSpec> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (!cuda) return;
    CudaOptions naive;
    naive.attention = AttentionKernel::Naive;
    std::string why;
    cuda = test::cuda_backend_or_skip(why, naive);
  }
};

TEST_P(CudaOpsNaiveAttention, MatchesCpuBackend) {
  const OpCase c = GetParam().make();
  compare(GetParam().name, c, run_on(*cpu, c), run_on(*cuda, c));
}

std::vector<CaseSpec> attention_cases_all_dtypes() {
  std::vector<CaseSpec> all;
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    const std::vector<CaseSpec> specs = attention_cases(act);
    all.insert(all.end(), specs.begin(), specs.end());
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(NaiveAttention, CudaOpsNaiveAttention, ::testing::ValuesIn(attention_cases_all_dtypes()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return info.param.name; });

// The 16-bit cases on --attention simt (flash_attention.cu, the CUDA cores), which the default
// hands them to the tensor cores otherwise; AllOps runs the fp32 ones there.
class CudaOpsSimtAttention : public CudaTest, public ::testing::WithParamInterface<CaseSpec> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (!cuda) return;
    CudaOptions simt;
    simt.attention = AttentionKernel::Simt;
    std::string why;
    cuda = test::cuda_backend_or_skip(why, simt);
  }
};

TEST_P(CudaOpsSimtAttention, MatchesCpuBackend) {
  const OpCase c = GetParam().make();
  compare(GetParam().name, c, run_on(*cpu, c), run_on(*cuda, c));
}

std::vector<CaseSpec> attention_cases_16_bit() {
  std::vector<CaseSpec> all = attention_cases(DType::BF16);
  const std::vector<CaseSpec> f16 = attention_cases(DType::F16);
  all.insert(all.end(), f16.begin(), f16.end());
  return all;
}

INSTANTIATE_TEST_SUITE_P(SimtAttention, CudaOpsSimtAttention, ::testing::ValuesIn(attention_cases_16_bit()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return info.param.name; });

// Flash against naive, the two CUDA rungs, directly: within each case's tolerance (which covers
// both against the CPU); and the flash backward bit for bit the same when run again (no atomics,
// fixed-order sums).
class CudaFlashAttention : public CudaOpsNaiveAttention {};

TEST_P(CudaFlashAttention, AgreesWithNaiveAndRepeatsBitForBit) {
  const OpCase c = GetParam().make();
  std::string why;
  std::unique_ptr<Backend> flash = test::cuda_backend_or_skip(why);
  ASSERT_TRUE(flash) << why;
  const CaseResult first = run_on(*flash, c);
  compare(GetParam().name + " (naive as the reference)", c, run_on(*cuda, c), first);
  const CaseResult again = run_on(*flash, c);
  for (size_t i = 0; i < c.tensors.size(); ++i)
    test::expect_bitwise_equal(GetParam().name + " " + c.tensors[i].name + " run again", again.f32[i], first.f32[i]);
}

INSTANTIATE_TEST_SUITE_P(FlashAttention, CudaFlashAttention, ::testing::ValuesIn(attention_cases()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return info.param.name; });
// ... and on tensor cores (the 16-bit cases of head size 64 and 128 run there)
INSTANTIATE_TEST_SUITE_P(FlashAttention16, CudaFlashAttention, ::testing::ValuesIn(attention_cases_16_bit()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return info.param.name; });

// A softmax row with one key (T = 1, and a causal sequence's first query) has weight 1 whatever
// its score, so that row's score gradient is exactly zero, and with it the query's dq (and, at
// T = 1, every key's dk). The flash backward's D = dout . out and dP = dout . v are one sum in two
// orders whose difference is rounding noise, which AdamW would turn into lr-sized moves of the q
// and k weights: every rung must give the exact zero (flash at head size 64 in bf16: on tensor
// cores), with dropout, in fp32 and bf16.
TEST_F(CudaTest, ASingleKeyRowHasAnExactlyZeroScoreGradientOnEveryRung) {
  CudaOptions naive_options;
  naive_options.attention = AttentionKernel::Naive;
  std::string why;
  const std::unique_ptr<Backend> naive = test::cuda_backend_or_skip(why, naive_options);
  ASSERT_TRUE(naive) << why;
  CudaOptions simt_options;
  simt_options.attention = AttentionKernel::Simt;
  const std::unique_ptr<Backend> simt = test::cuda_backend_or_skip(why, simt_options);
  ASSERT_TRUE(simt) << why;
  const std::vector<std::pair<std::string, Backend*>> rungs = {
      {"cpu", cpu.get()}, {"flash", cuda.get()}, {"simt", simt.get()}, {"naive", naive.get()}};
  // head size 64 in bf16: flash on tensor cores
  for (const auto& [HS, act] : {std::pair{16, DType::F32}, std::pair{16, DType::BF16}, std::pair{64, DType::BF16}}) {
    const AttentionParams one_token{2, 1, 2, HS, false, 0.1f}, causal{2, 37, 2, HS, true, 0.1f};
    for (const AttentionParams p : {one_token, causal}) {
      const CaseSpec spec = attention_case(p, act);
      const OpCase c = spec.make();
      size_t dqkv = 0;
      while (c.tensors[dqkv].name != "dqkv") ++dqkv;
      const int64_t C = p.NH * p.HS, W = 3 * C;  // q, k, v parts of each token's row
      const int64_t zero_width = p.T == 1 ? 2 * C : C;  // dq of token 0; at T = 1 its dk too
      for (const auto& [rung, backend] : rungs) {
        const std::vector<float> g = run_on(*backend, c).f32[dqkv];
        int nonzero_elsewhere = 0;  // the gradient is not zero everywhere: dv, and the other rows
        for (int64_t b = 0; b < p.B; ++b) {
          for (int64_t t = 0; t < p.T; ++t) {
            for (int64_t i = 0; i < W; ++i) {
              const float value = g[(b * p.T + t) * W + i];
              if (t == 0 && i < zero_width)
                ASSERT_EQ(value, 0.0f) << spec.name << " on " << rung << ": sequence " << b << " element " << i;
              else
                nonzero_elsewhere += value != 0.0f;
            }
          }
        }
        EXPECT_GT(nonzero_elsewhere, 0) << spec.name << " on " << rung;
      }
    }
  }
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// When cuBLASLt has no algorithm (forced here: the emulated heuristic finds none with
// TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM=1), the linear ops still run: the bias goes unfused and
// every plain GEMM falls back to the tiled kernel, with one line per distinct GEMM naming it,
// however often it runs; the results are the CPU's within the tiled GEMM's tolerance.
TEST_F(CudaTest, NoCublasLtAlgorithmFallsBackToTheTiledGemmSayingSoOncePerGemm) {
  if (!test::cuda_is_emulated()) GTEST_SKIP() << "the forced 'no algorithm' is the emulated cuBLASLt's";
  ScopedEnv none("TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM", "1");
  std::string why;
  cuda = test::cuda_backend_or_skip(why);  // a fresh backend: no plans yet
  int compared = 0;
  for (DType act : {DType::F32, DType::BF16})
    for (const CaseSpec& spec : linear_gemm_cases(act, GemmKernel::Tiled)) {
      if (spec.name.rfind("linear_N9_I17_O11_bias", 0) != 0 || spec.name.find("misaligned") != std::string::npos)
        continue;
      const OpCase c = spec.make();
      const CaseResult want = run_on(*cpu, c);
      testing::internal::CaptureStderr();
      const CaseResult first = run_on(*cuda, c), again = run_on(*cuda, c);  // the second run: no new lines
      const std::string said = testing::internal::GetCapturedStderr();
      compare(spec.name + " (fallback)", c, want, first);
      compare(spec.name + " (fallback, again)", c, want, again);
      // forward out^T = W op_T inp^T (m=O n=N k=I), dinp^T (m=I n=N k=O), dW^T (m=I n=O k=N transb)
      const std::string type = act == DType::F32 ? "CUDA_R_32F" : "CUDA_R_16BF";
      const std::vector<std::string> gemms = {
          "m=11 n=9 k=17 transa=1 transb=0 alignment=256 A/B " + type + " C/D " + type,
          "m=17 n=9 k=11 transa=0 transb=0 alignment=256 A/B " + type + " C/D " + type,
          "m=17 n=11 k=9 transa=0 transb=1 alignment=256 A/B " + type + " C/D CUDA_R_32F"};
      std::vector<std::string> lines;
      std::istringstream in(said);
      for (std::string line; std::getline(in, line);) lines.push_back(line);
      ASSERT_EQ(lines.size(), gemms.size()) << said;
      for (size_t i = 0; i < gemms.size(); ++i)
        EXPECT_EQ(lines[i], "tinytrain: cuBLASLt has no algorithm for the GEMM " + gemms[i] +
                                " compute 32F; tinytrain's tiled GEMM runs it");
      ++compared;
    }
  EXPECT_EQ(compared, 2) << "the case named here no longer exists";
}

// A GEMM's cuBLASLt plan is made in the eager step; a shape first seen inside a graph capture
// is refused with its name rather than a heuristic call during the capture.
TEST_F(CudaTest, GemmFirstSeenDuringCaptureIsALogicErrorNamingIt) {
  const std::vector<float> ones(3 * 5, 1.0f);
  void* x = cuda->allocate(3 * 5 * sizeof(float));  // inp (3,5)
  void* w = cuda->allocate(7 * 5 * sizeof(float));  // weight (7,5)
  void* y = cuda->allocate(3 * 7 * sizeof(float));  // out (3,7)
  cuda->copy_to_device(x, ones.data(), 3 * 5 * sizeof(float));
  const Tensor inp{x, DType::F32, Shape{3, 5}}, weight{w, DType::F32, Shape{7, 5}}, out{y, DType::F32, Shape{3, 7}};
  const Tensor no_bias{nullptr, DType::F32, Shape{}};
  cuda->begin_capture();
  try {
    cuda->linear_forward(out, inp, weight, no_bias);
    ADD_FAILURE() << "a GEMM planned during capture";
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("m=7 n=3 k=5"), std::string::npos) << what;
    EXPECT_NE(what.find("during CUDA graph capture"), std::string::npos) << what;
  }
  cuda->end_capture();
  // planned eagerly, the same GEMM is then captured and replayed
  cuda->linear_forward(out, inp, weight, no_bias);
  cuda->begin_capture();
  cuda->linear_forward(out, inp, weight, no_bias);
  cuda->end_capture();
  cuda->replay_graph();
  std::vector<float> back(3 * 7, 1.0f);
  cuda->copy_to_host(back.data(), y, back.size() * sizeof(float));
  for (float v : back) EXPECT_EQ(v, 0.0f);  // the weights are zero
  for (void* p : {x, w, y}) cuda->release(p);
}

TEST_F(CudaTest, Tf32LinearMatchesCpuWithinTf32Rounding) {
  // TF32 rounds both GEMM operands to 10 mantissa bits: each product is off by up to 2^-10
  // relatively, with random signs, so a K-term sum is off by ~2^-10 sqrt(K) rms(term) against a
  // result of ~sqrt(K) rms(term): about 1e-3 of the result scale; 4e-3 leaves a factor 4.
  std::string why;
  CudaOptions tf32;
  tf32.tf32 = true;
  cuda = test::cuda_backend_or_skip(why, tf32);
  int compared = 0;
  for (const CaseSpec& spec : linear_cases()) {
    if (spec.name != "linear_N134_I128_O509_bias" && spec.name != "linear_N64_I300_O70_nobias_nodinp") continue;
    const OpCase c = spec.make();
    compare(spec.name + " tf32", c, run_on(*cpu, c), run_on(*cuda, c), 4e-3);
    ++compared;
  }
  EXPECT_EQ(compared, 2) << "a case named here no longer exists";
}

// --gemm mma --tf32: the linear ops' fp32 GEMMs run on the tensor cores as TF32 (m16n8k8), within
// TF32's tolerance of the CPU (the argument above), and visibly TF32: the forward's output is
// further from the CPU's than an fp32 GEMM's may be (reduction_tol(I + 1), which the regblock
// rung, where the mma rung sends fp32 GEMMs without --tf32, meets: NaiveGemm/RegBlockGemm cases),
// by the operands' rounding to 10 mantissa bits (~1e-4 of the result scale here), and no GEMM is
// handed to the regblock rung (nothing said on stderr). The arithmetic against a double product is
// GemmLadder's (test_gemm_ladder.cpp, mma_tf32).
TEST_F(CudaTest, MmaGemmWithTf32RunsTheFp32GemmsAsTf32OnTensorCores) {
  std::string why;
  CudaOptions options;
  options.gemm = GemmKernel::Mma;
  options.tf32 = true;
  cuda = test::cuda_backend_or_skip(why, options);
  int compared = 0;
  for (const CaseSpec& spec : linear_cases()) {
    if (spec.name != "linear_N134_I128_O509_bias" && spec.name != "linear_N64_I300_O70_nobias_nodinp") continue;
    const OpCase c = spec.make();
    const CaseResult want = run_on(*cpu, c);
    testing::internal::CaptureStderr();
    const CaseResult got = run_on(*cuda, c);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "a GEMM did not run on the tensor cores";
    compare(spec.name + " mma tf32", c, want, got, 4e-3);
    double in_features = 0.0;
    for (const CaseTensor& t : c.tensors)
      if (t.name == "inp") in_features = static_cast<double>(t.shape[1]);
    for (size_t i = 0; i < c.tensors.size(); ++i) {
      if (c.tensors[i].name != "out") continue;
      const double rel = test::max_rel_diff(got.f32[i], test::to_double(want.f32[i]));
      const double fp32_tol = reduction_tol(in_features + 1);
      std::printf("[ rel err  ] %s out: %.3e, fp32's tolerance %.1e\n", spec.name.c_str(), rel, fp32_tol);
      EXPECT_GT(rel, fp32_tol) << spec.name << ": the forward GEMM's products were not rounded to TF32";
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2) << "a case named here no longer exists";
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

// ============ the bias gradient from the dW GEMM: cuBLASLt's BGRADB epilogue ============
// linear_backward with ParamGrads::Write lets the dW GEMM also write dbias (the BGRADB epilogue:
// dout summed over the GEMM's k dimension, the tokens); with ParamGrads::Add, with no cuBLASLt
// algorithm, or for a dbias not 16-byte aligned, ONE column-sum launch writes or adds it
// (kernels/cuda/linear.cu); a rung of the GEMM ladder (--gemm naive|tiled|regblock|mma) makes it
// in its dW GEMM, written or added. The rungs and the emulator's BGRADB epilogue sum each column
// of dout over n = 0..N-1 in order in fp32 from zero (16-bit values widen exactly), then store
// the sum or add it to the start value once: exactly what the CPU backend does, so there dbias
// is compared bit for bit (tol 0) in every storage type. The column-sum launch sums 32 strided
// runs of rows and adds them in a tree (parallel, deterministic, another order), and a GPU's
// cuBLASLt sums in its own order: those get the N + 1 term sum's reduction_tol. The GEMM
// outputs get the linear cases' tolerances (tc: tensor cores).
// Shapes: many tokens (N = 256, so the old chunked column sums had 8 chunks), an odd one, and
// the odd one with every view one element off (dbias 4 bytes aligned: no epilogue asked for).

// no_cublaslt_algorithm: the emulated cuBLASLt told to find none, so the column sums make every dbias.
std::vector<CaseSpec> linear_bias_grad_cases(GemmKernel gemm, bool no_cublaslt_algorithm = false) {
  struct P {
    int N, I, O;
    bool misaligned;
  };
  std::vector<CaseSpec> specs;
  for (DType act : {DType::F32, DType::BF16, DType::F16})
    for (ParamGrads grads : {ParamGrads::Write, ParamGrads::Add})
      for (InputGrad input : {InputGrad::Write, InputGrad::Add})
        for (P p : {P{256, 64, 192, false}, P{67, 17, 11, false}, P{67, 17, 11, true}}) {
          const std::string name = "linear_backward_N" + std::to_string(p.N) + "_I" + std::to_string(p.I) + "_O" +
                                   std::to_string(p.O) + (grads == ParamGrads::Write ? "_grads_written" : "_grads_added") +
                                   (input == InputGrad::Add ? "_dinp_added" : "_dinp_written") +
                                   (p.misaligned ? "_misaligned" : "") + dtype_suffix(act);
          specs.push_back({name, [p, act, gemm, grads, input, no_cublaslt_algorithm] {
                             OpCase c(act);
                             const int x = c.input("inp", {p.N, p.I}, 21);
                             const int w = c.input("weight", {p.O, p.I}, 22);
                             const int dout = c.input("dout", {p.N, p.O}, 23);
                             const double tc = tensor_core_factor(act, gemm);
                             // O products, onto dinp's start value when added
                             const int dx = input == InputGrad::Add
                                                ? c.inout("dinp", {p.N, p.I}, test::random_floats(p.N * p.I, 24),
                                                          tc * reduction_tol(p.O + 1))
                                                : c.output("dinp", {p.N, p.I}, tc * reduction_tol(p.O));
                             const int dw = c.grad("dweight", {p.O, p.I}, 25, tc * reduction_tol(p.N + 1));
                             // bit for bit where the GEMM makes it on the emulator (above)
                             const bool column_sums =
                                 no_cublaslt_algorithm ||
                                 (gemm == GemmKernel::CublasLt && (grads == ParamGrads::Add || p.misaligned));
                             const int db = c.grad("dbias", {p.O}, 26,
                                                   test::cuda_is_emulated() && !column_sums ? 0.0 : reduction_tol(p.N + 1));
                             if (p.misaligned)
                               for (CaseTensor& t : c.tensors) t.offset_floats = 1;
                             c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                               be.linear_backward(v[dx], v[dw], v[db], v[dout], v[x], v[w], grads, input);
                             };
                             return c;
                           }});
        }
  return specs;
}

class CudaOpsLinearBiasGrad : public CudaTest, public ::testing::WithParamInterface<CaseSpec> {};

TEST_P(CudaOpsLinearBiasGrad, MatchesCpuBackend) {
  const OpCase c = GetParam().make();
  compare(GetParam().name, c, run_on(*cpu, c), run_on(*cuda, c));
}

INSTANTIATE_TEST_SUITE_P(LinearBiasGrad, CudaOpsLinearBiasGrad,
                         ::testing::ValuesIn(linear_bias_grad_cases(GemmKernel::CublasLt)),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return info.param.name; });

// The same with every GEMM on a rung of the GEMM ladder: the bias gradient from the dW GEMM.
INSTANTIATE_TEST_SUITE_P(NaiveLinearBiasGrad, CudaOpsGemm,
                         ::testing::ValuesIn(on_rung(GemmKernel::Naive, linear_bias_grad_cases(GemmKernel::Naive))),
                         rung_case_name);
INSTANTIATE_TEST_SUITE_P(TiledLinearBiasGrad, CudaOpsGemm,
                         ::testing::ValuesIn(on_rung(GemmKernel::Tiled, linear_bias_grad_cases(GemmKernel::Tiled))),
                         rung_case_name);
INSTANTIATE_TEST_SUITE_P(RegBlockLinearBiasGrad, CudaOpsGemm,
                         ::testing::ValuesIn(on_rung(GemmKernel::RegBlock, linear_bias_grad_cases(GemmKernel::RegBlock))),
                         rung_case_name);
INSTANTIATE_TEST_SUITE_P(MmaLinearBiasGrad, CudaOpsGemm,
                         ::testing::ValuesIn(on_rung(GemmKernel::Mma, linear_bias_grad_cases(GemmKernel::Mma))),
                         rung_case_name);

// With no cuBLASLt algorithm for any GEMM (forced), the BGRADB epilogue is declined silently
// (an optimisation), the plain GEMMs run on the tiled kernel and the column sums make dbias:
// the same results (dbias to the column sums' rounding).
TEST_F(CudaTest, LinearBiasGradWithoutCublasLtAlgorithmMatchesCpuBackend) {
  if (!test::cuda_is_emulated()) GTEST_SKIP() << "the forced 'no algorithm' is the emulated cuBLASLt's";
  ScopedEnv none("TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM", "1");
  std::string why;
  cuda = test::cuda_backend_or_skip(why);  // a fresh backend: no plans yet
  int compared = 0;
  for (const CaseSpec& spec : linear_bias_grad_cases(GemmKernel::Tiled, /*no_cublaslt_algorithm=*/true)) {
    if (spec.name.find("_f16") != std::string::npos) continue;  // fp32 and bf16 suffice here
    const OpCase c = spec.make();
    testing::internal::CaptureStderr();  // the fallback's one line per GEMM (tested above)
    const CaseResult got = run_on(*cuda, c);
    testing::internal::GetCapturedStderr();
    compare(spec.name + " (no cuBLASLt algorithm)", c, run_on(*cpu, c), got);
    ++compared;
  }
  EXPECT_EQ(compared, 24);
}

#ifdef TINYTRAIN_HAVE_SIMT
}  // namespace
}  // namespace tt
namespace simt {
uint64_t work_items_enqueued();  // simt/runtime.cpp: a test-only count of the work enqueued on any stream
}  // namespace simt
namespace tt {
namespace {

// The work one linear_backward with a bias enqueues, counted on the emulator after a first call
// has made the GEMM plans: with ParamGrads::Write the dinp GEMM and the dW GEMM, whose BGRADB
// epilogue writes dbias (2; 1 without dinp); with ParamGrads::Add one column-sum launch more
// (3); where the epilogue is not available (no cuBLASLt algorithm) also 3 in Write. On every rung
// of the GEMM ladder the dW GEMM makes dbias, written or added: 2. The results of these calls are
// checked by the cases above; here only the count.
uint64_t work_of_linear_backward(Backend& be, DType act, bool with_dinp, ParamGrads grads, InputGrad input) {
  const int N = 256, I = 64, O = 192;
  OpCase c(act);
  const int x = c.input("inp", {N, I}, 31);
  const int w = c.input("weight", {O, I}, 32);
  const int dout = c.input("dout", {N, O}, 33);
  const int dx = with_dinp ? c.inout("dinp", {N, I}, test::random_floats(N * I, 34), -1.0) : c.absent("dinp");
  const int dw = c.grad("dweight", {O, I}, 35, -1.0);
  const int db = c.grad("dbias", {O}, 36, -1.0);
  auto work = std::make_shared<uint64_t>(0);
  c.run = [=](Backend& b, const std::vector<Tensor>& v) {
    b.linear_backward(v[dx], v[dw], v[db], v[dout], v[x], v[w], grads, input);  // makes the plans
    b.synchronize();
    const uint64_t before = simt::work_items_enqueued();
    b.linear_backward(v[dx], v[dw], v[db], v[dout], v[x], v[w], grads, input);
    *work = simt::work_items_enqueued() - before;
    b.synchronize();
  };
  run_on(be, c);
  return *work;
}

TEST_F(CudaTest, LinearBackwardWritingGradientsEnqueuesOnlyItsTwoGemms) {
  if (!test::cuda_is_emulated()) GTEST_SKIP() << "counted by the emulator's runtime";
  for (DType act : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(act));
    EXPECT_EQ(work_of_linear_backward(*cuda, act, true, ParamGrads::Write, InputGrad::Write), 2u);
    EXPECT_EQ(work_of_linear_backward(*cuda, act, true, ParamGrads::Write, InputGrad::Add), 2u);
    EXPECT_EQ(work_of_linear_backward(*cuda, act, false, ParamGrads::Write, InputGrad::Write), 1u);
    EXPECT_EQ(work_of_linear_backward(*cuda, act, true, ParamGrads::Add, InputGrad::Write), 3u);
  }
  std::string why;
  for (GemmKernel rung : {GemmKernel::Naive, GemmKernel::Tiled, GemmKernel::RegBlock, GemmKernel::Mma}) {
    CudaOptions options;
    options.gemm = rung;
    auto on_rung = test::cuda_backend_or_skip(why, options);
    for (DType act : {DType::F32, DType::BF16})
      for (ParamGrads grads : {ParamGrads::Write, ParamGrads::Add}) {
        SCOPED_TRACE(std::string("rung ") + std::to_string(static_cast<int>(rung)) + " " + dtype_name(act) +
                     (grads == ParamGrads::Write ? " written" : " added"));
        testing::internal::CaptureStderr();  // the mma rung's fp32 GEMMs run on the regblock rung, said once
        EXPECT_EQ(work_of_linear_backward(*on_rung, act, true, grads, InputGrad::Write), 2u);
        testing::internal::GetCapturedStderr();
      }
  }
  ScopedEnv none("TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM", "1");
  auto fallback = test::cuda_backend_or_skip(why);  // a fresh backend: no plans yet
  testing::internal::CaptureStderr();
  EXPECT_EQ(work_of_linear_backward(*fallback, DType::F32, true, ParamGrads::Write, InputGrad::Write), 3u);
  testing::internal::GetCapturedStderr();
}
#endif  // TINYTRAIN_HAVE_SIMT

// ============================== the fused kernels of the training step ==============================
// dropout + residual + LayerNorm (forward), the LayerNorm backward with the gradients that meet
// at the norm (one launch, the last block reducing the parameter gradients), activation +
// dropout (forward and backward). `tinytrain ops check` compares them with the CPU at the
// workload's shapes; here: the aliasing the contract allows, a grid of many blocks, a replay
// (the last-block counter resets), and bitwise equality with the unfused CUDA ops they replace.

// ---- against the CPU backend ----
std::vector<CaseSpec> fused_cases(DType act) {
  std::vector<CaseSpec> specs;
  // forward: res_out (N,C) = residual + dropout(branch), ln_out = layernorm(res_out)
  struct Forward {
    int N, C;
    float p;
    bool res_out_aliases_branch, norm;
  };
  for (Forward f : {Forward{67, 52, 0.1f, true, true}, Forward{300, 128, 0.1f, false, true},
                    Forward{13, 37, 0.0f, true, false}, Forward{13, 37, 0.5f, false, false}}) {
    const std::string name = "fused_dropout_residual_layernorm_N" + std::to_string(f.N) + "_C" + std::to_string(f.C) +
                             "_p" + num(f.p) + (f.res_out_aliases_branch ? "_res_out_aliases_branch" : "") +
                             (f.norm ? "" : "_no_norm");
    specs.push_back({name + dtype_suffix(act), [f, act] {
                       OpCase c(act);
                       const int step = c.scalar_i32("step", 11, false);
                       const int residual = c.input("residual", {f.N, f.C}, 51, -2.0f, 2.0f);
                       // a dropped, scaled add: the same two roundings on both backends
                       const int branch = f.res_out_aliases_branch
                                              ? c.inout("branch (= res_out)", {f.N, f.C},
                                                        test::random_floats(f.N * f.C, 52, -2.0f, 2.0f), kElementwiseTol)
                                              : c.input("branch", {f.N, f.C}, 52, -2.0f, 2.0f);
                       const int res_out = f.res_out_aliases_branch ? branch : c.output("res_out", {f.N, f.C}, kElementwiseTol);
                       const int w = c.input("weight", {f.C}, 53, 0.5f, 1.5f);
                       const int b = c.input("bias", {f.C}, 54);
                       // as layernorm_forward: C-term mean and variance, then one scale per element
                       const int out = f.norm ? c.output("ln_out", {f.N, f.C}, reduction_tol(2 * f.C)) : c.absent("ln_out");
                       const int mean = f.norm ? c.output_f32("mean", {f.N}, reduction_tol(f.C)) : c.absent("mean");
                       const int rstd = f.norm ? c.output_f32("rstd", {f.N}, reduction_tol(2 * f.C)) : c.absent("rstd");
                       const float drop = f.p;
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         DropoutMask mask = mask_at(v, step, drop, 0x5eedull, 1, DropoutSite::AttentionOutput);
                         mask.index_offset = 6;  // a micro-batch's rows: groups of four straddle the rows
                         be.dropout_residual_layernorm_forward(v[res_out], v[out], v[mean], v[rstd], v[residual], v[branch],
                                                               v[w], v[b], 1e-5f, mask);
                       };
                       return c;
                     }});
  }
  // backward: dinp = layernorm_backward(dout + dout2) + dskip, dbranch = dropout(dinp)
  enum class Alias { None, Dout, Dout2 };
  struct Backward {
    int N, C;
    bool dout2, dskip, dbranch;
    Alias alias;
    ParamGrads grads;
  };
  // N = 300: 10 blocks of 32 rows, so the last block adds 10 partials
  for (Backward k : {Backward{67, 52, true, false, true, Alias::Dout, ParamGrads::Add},
                     Backward{67, 52, true, false, true, Alias::Dout2, ParamGrads::Write},
                     Backward{300, 128, true, false, true, Alias::None, ParamGrads::Write},
                     Backward{300, 128, false, true, true, Alias::Dout, ParamGrads::Add},
                     Backward{3, 37, false, true, false, Alias::None, ParamGrads::Write}}) {
    const char* alias = k.alias == Alias::Dout ? "_dinp_aliases_dout" : k.alias == Alias::Dout2 ? "_dinp_aliases_dout2" : "";
    const std::string name = "fused_layernorm_residual_dropout_backward_N" + std::to_string(k.N) + "_C" +
                             std::to_string(k.C) + (k.dout2 ? "_dout2" : "") + (k.dskip ? "_dskip" : "") +
                             (k.dbranch ? "_dbranch" : "") + alias +
                             (k.grads == ParamGrads::Add ? "_add" : "_write");
    specs.push_back({name + dtype_suffix(act), [k, act] {
                       OpCase c(act);
                       const int step = c.scalar_i32("step", 11, false);
                       const int x = c.input("inp", {k.N, k.C}, 61, -2.0f, 3.0f);
                       const int w = c.input("weight", {k.C}, 62, 0.5f, 1.5f);
                       const int b = c.input("bias", {k.C}, 63);
                       const int out = c.scratch("out", {k.N, k.C});
                       const int mean = c.output_f32("mean", {k.N}, -1.0);
                       const int rstd = c.output_f32("rstd", {k.N}, -1.0);
                       // as layernorm_backward, plus one add before (dout2) or after (dskip) the
                       // norm's 3C-term combination, and one scale (dbranch)
                       const double dinp_tol = reduction_tol(3 * k.C + 1);
                       const int dout = k.alias == Alias::Dout
                                            ? c.inout("dout (= dinp)", {k.N, k.C}, test::random_floats(k.N * k.C, 64), dinp_tol)
                                            : c.input("dout", {k.N, k.C}, 64);
                       const int dout2 = !k.dout2 ? c.absent("dout2")
                                         : k.alias == Alias::Dout2
                                             ? c.inout("dout2 (= dinp)", {k.N, k.C}, test::random_floats(k.N * k.C, 65), dinp_tol)
                                             : c.input("dout2", {k.N, k.C}, 65);
                       const int dskip = k.dskip ? c.input("dskip", {k.N, k.C}, 66) : c.absent("dskip");
                       const int dx = k.alias == Alias::Dout    ? dout
                                      : k.alias == Alias::Dout2 ? dout2
                                                                : c.output("dinp", {k.N, k.C}, dinp_tol);
                       const int dbranch = k.dbranch ? c.output("dbranch", {k.N, k.C}, dinp_tol) : c.absent("dbranch");
                       const int dw = c.grad("dweight", {k.C}, 67, reduction_tol(k.N + k.C + 2));
                       const int db = c.grad("dbias", {k.C}, 68, reduction_tol(k.N + 2));
                       const ParamGrads grads = k.grads;
                       c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                         be.layernorm_forward(v[out], v[mean], v[rstd], v[x], v[w], v[b], 1e-5f);
                         DropoutMask mask = mask_at(v, step, 0.1f, 0x5eedull, 1, DropoutSite::FfnOutput);
                         mask.index_offset = 6;
                         be.layernorm_residual_dropout_backward(v[dx], v[dbranch], v[dw], v[db], v[dout], v[dout2], v[dskip],
                                                                v[x], v[w], v[mean], v[rstd], mask, grads);
                       };
                       return c;
                     }});
  }
  // SwiGLU + dropout: out (N,F) = dropout(silu(gate) up) from inp (N,2F) [gate | up]; its
  // backward in place over inp (the model's use: the pre-activation buffer takes its gradient)
  for (float drop : {0.0f, 0.1f}) {
    for (const auto& [N, F] : {std::pair<int, int>{1, 1}, std::pair<int, int>{13, 37}, std::pair<int, int>{67, 128}}) {
      const std::string name = "fused_swiglu_dropout_N" + std::to_string(N) + "_F" + std::to_string(F) + "_p" +
                               num(drop) + "_dinp_over_inp";
      specs.push_back({name + dtype_suffix(act), [N = N, F = F, drop, act] {
                         OpCase c(act);
                         const int step = c.scalar_i32("step", 11, false);
                         // silu (expf ulps), a product and the dropout scale, each output rounded once
                         const int out = c.output("out", {N, F}, kElementwiseTol);
                         const int x = c.inout("inp (= dinp)", {N, 2 * F}, test::random_floats(2 * N * F, 73, -3.0f, 3.0f),
                                               kElementwiseTol);
                         const int dout = c.input("dout", {N, F}, 74);
                         c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                           DropoutMask mask = mask_at(v, step, drop, 0x5eedull, 1, DropoutSite::FfnHidden);
                           mask.index_offset = 3;
                           be.activation_dropout_forward(v[out], v[x], Activation::Swiglu, mask);
                           be.activation_dropout_backward(v[x], v[dout], v[x], Activation::Swiglu, mask);
                         };
                         return c;
                       }});
    }
  }
  // activation + dropout: out = dropout(act(inp)) in place; dinp = act'(inp) dropout(dout) in place
  for (Activation a : {Activation::Relu, Activation::Gelu}) {
    for (int64_t n : {int64_t{5}, int64_t{4099}}) {
      const std::string name = std::string("fused_") + (a == Activation::Relu ? "relu" : "gelu") + "_dropout_n" +
                               std::to_string(n) + "_in_place";
      specs.push_back({name + dtype_suffix(act), [a, n, act] {
                         OpCase c(act);
                         const int step = c.scalar_i32("step", 11, false);
                         const int pre = c.input("pre-activation", {n}, 71, -3.0f, 3.0f);
                         // act, one rounding, one scale: elementwise (erff/expf ulps for GELU)
                         const int x = c.inout("inp (= out)", {n}, test::random_floats(n, 71, -3.0f, 3.0f), kElementwiseTol);
                         const int dout = c.inout("dout (= dinp)", {n}, test::random_floats(n, 72), kElementwiseTol);
                         c.run = [=](Backend& be, const std::vector<Tensor>& v) {
                           DropoutMask mask = mask_at(v, step, 0.1f, 0x5eedull, 1, DropoutSite::FfnHidden);
                           mask.index_offset = 3;
                           be.activation_dropout_forward(v[x], v[x], a, mask);
                           be.activation_dropout_backward(v[dout], v[dout], v[pre], a, mask);
                         };
                         return c;
                       }});
    }
  }
  return specs;
}

std::vector<CaseSpec> all_fused_cases() {
  std::vector<CaseSpec> all;
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    const std::vector<CaseSpec> specs = fused_cases(act);
    all.insert(all.end(), specs.begin(), specs.end());
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(FusedOps, CudaOps, ::testing::ValuesIn(all_fused_cases()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return info.param.name; });

// ---- against the unfused CUDA ops, bit for bit ----

// Device tensors for the bitwise tests: uploaded values (rounded to the dtype), read back
// widened to fp32; freed with the object.
class DeviceTensors {
 public:
  explicit DeviceTensors(Backend& backend) : backend_(backend), memory_(backend) {}
  Tensor upload(DType dtype, Shape shape, const std::vector<float>& values) {
    Tensor t{memory_.allocate(Tensor{nullptr, dtype, shape}.bytes()), dtype, shape};
    write(t, values);
    return t;
  }
  Tensor random(DType dtype, Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    return upload(dtype, shape, test::random_floats(shape.numel(), seed, lo, hi));
  }
  Tensor nan(DType dtype, Shape shape) {
    return upload(dtype, shape, std::vector<float>(shape.numel(), std::numeric_limits<float>::quiet_NaN()));
  }
  Tensor step(int32_t value) {
    Tensor t{memory_.allocate(sizeof(int32_t)), DType::I32, Shape{1}};
    backend_.copy_to_device(t.data, &value, sizeof(int32_t));
    return t;
  }
  void write(Tensor t, const std::vector<float>& values) {
    if (is_16bit(t.dtype)) {
      const test::HalfBuffer stored = test::half_of(t.dtype, values);
      backend_.copy_to_device(t.data, stored.bits.data(), t.bytes());
    } else {
      backend_.copy_to_device(t.data, values.data(), t.bytes());
    }
  }
  std::vector<float> read(Tensor t) {
    if (is_16bit(t.dtype)) {
      test::HalfBuffer stored{t.dtype, std::vector<uint16_t>(t.numel())};
      backend_.copy_to_host(stored.bits.data(), t.data, t.bytes());
      return stored.values();
    }
    std::vector<float> v(t.numel());
    backend_.copy_to_host(v.data(), t.data, t.bytes());
    return v;
  }

 private:
  Backend& backend_;
  Allocations memory_;
};

DropoutMask mask_with_step(const Tensor& step, float p, DropoutSite site) {
  DropoutMask mask{p, 0x5eedull, static_cast<const uint32_t*>(step.data), 1, site};
  mask.index_offset = 6;
  return mask;
}

// N = 67 rows of C = 52: a partial last block and a partial last lap of every row.
TEST_F(CudaTest, FusedDropoutResidualLayernormIsBitwiseTheUnfusedOps) {
  const int N = 67, C = 52;
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    const std::string what = std::string("fused forward ") + dtype_name(act) + " ";
    DeviceTensors t(*cuda);
    const DropoutMask mask = mask_with_step(t.step(11), 0.1f, DropoutSite::AttentionOutput);
    const Tensor residual = t.random(act, {N, C}, 1, -2.0f, 2.0f), branch = t.random(act, {N, C}, 2, -2.0f, 2.0f);
    const Tensor w = t.random(act, {C}, 3, 0.5f, 1.5f), b = t.random(act, {C}, 4);
    Tensor res[2], ln[2], mean[2], rstd[2];
    for (int i = 0; i < 2; ++i) {
      res[i] = t.nan(act, {N, C});
      ln[i] = t.nan(act, {N, C});
      mean[i] = t.nan(DType::F32, {N});
      rstd[i] = t.nan(DType::F32, {N});
    }
    cuda->dropout_residual_layernorm_forward(res[0], ln[0], mean[0], rstd[0], residual, branch, w, b, 1e-5f, mask);
    cuda->dropout_forward(res[1], branch, mask);
    cuda->residual_forward(res[1], residual, res[1]);
    cuda->layernorm_forward(ln[1], mean[1], rstd[1], res[1], w, b, 1e-5f);
    test::expect_bitwise_equal(what + "res_out", t.read(res[0]), t.read(res[1]));
    test::expect_bitwise_equal(what + "ln_out", t.read(ln[0]), t.read(ln[1]));
    test::expect_bitwise_equal(what + "mean", t.read(mean[0]), t.read(mean[1]));
    test::expect_bitwise_equal(what + "rstd", t.read(rstd[0]), t.read(rstd[1]));
  }
}

// The fused backward against the default's sequence of CUDA ops (residual_forward,
// layernorm_backward, residual_forward, dropout_backward), post-norm and pre-norm. The plain
// layernorm_backward runs the same kernel, so the parameter gradients agree bit for bit too.
TEST_F(CudaTest, FusedLayernormResidualDropoutBackwardIsBitwiseTheUnfusedOps) {
  const int N = 300, C = 52;
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    for (bool post_norm : {true, false}) {
      const std::string what = std::string("fused backward ") + dtype_name(act) + (post_norm ? " post-norm " : " pre-norm ");
      DeviceTensors t(*cuda);
      const DropoutMask mask = mask_with_step(t.step(11), 0.1f, DropoutSite::FfnOutput);
      const Tensor x = t.random(act, {N, C}, 1, -2.0f, 3.0f), w = t.random(act, {C}, 2, 0.5f, 1.5f),
                   b = t.random(act, {C}, 3), out = t.nan(act, {N, C});
      const Tensor mean = t.nan(DType::F32, {N}), rstd = t.nan(DType::F32, {N});
      cuda->layernorm_forward(out, mean, rstd, x, w, b, 1e-5f);
      const Tensor dout = t.random(act, {N, C}, 4);
      const Tensor dout2 = post_norm ? t.random(act, {N, C}, 5) : Tensor{};
      const Tensor dskip = post_norm ? Tensor{} : t.random(act, {N, C}, 6);
      Tensor dinp[2], dbranch[2], dw[2], db[2];
      for (int i = 0; i < 2; ++i) {
        dinp[i] = t.nan(act, {N, C});
        dbranch[i] = t.nan(act, {N, C});
        dw[i] = t.random(DType::F32, {C}, 7);  // ParamGrads::Add onto the same start
        db[i] = t.random(DType::F32, {C}, 8);
      }
      cuda->layernorm_residual_dropout_backward(dinp[0], dbranch[0], dw[0], db[0], dout, dout2, dskip, x, w, mean, rstd,
                                                mask, ParamGrads::Add);
      cuda->Backend::layernorm_residual_dropout_backward(dinp[1], dbranch[1], dw[1], db[1], dout, dout2, dskip, x, w,
                                                         mean, rstd, mask, ParamGrads::Add);
      test::expect_bitwise_equal(what + "dinp", t.read(dinp[0]), t.read(dinp[1]));
      test::expect_bitwise_equal(what + "dbranch", t.read(dbranch[0]), t.read(dbranch[1]));
      test::expect_bitwise_equal(what + "dweight", t.read(dw[0]), t.read(dw[1]));
      test::expect_bitwise_equal(what + "dbias", t.read(db[0]), t.read(db[1]));
    }
  }
}

TEST_F(CudaTest, FusedActivationDropoutIsBitwiseTheUnfusedOps) {
  const int64_t n = 4099;
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    for (Activation a : {Activation::Relu, Activation::Gelu}) {
      const std::string what = std::string("activation dropout ") + dtype_name(act) + (a == Activation::Relu ? " relu " : " gelu ");
      DeviceTensors t(*cuda);
      const DropoutMask mask = mask_with_step(t.step(11), 0.1f, DropoutSite::FfnHidden);
      const Tensor pre = t.random(act, {n}, 1, -3.0f, 3.0f), dout = t.random(act, {n}, 2);
      Tensor out[2], dinp[2];
      for (int i = 0; i < 2; ++i) {
        out[i] = t.nan(act, {n});
        dinp[i] = t.nan(act, {n});
      }
      cuda->activation_dropout_forward(out[0], pre, a, mask);
      cuda->activation_dropout_backward(dinp[0], dout, pre, a, mask);
      cuda->Backend::activation_dropout_forward(out[1], pre, a, mask);
      cuda->Backend::activation_dropout_backward(dinp[1], dout, pre, a, mask);
      test::expect_bitwise_equal(what + "out", t.read(out[0]), t.read(out[1]));
      test::expect_bitwise_equal(what + "dinp", t.read(dinp[0]), t.read(dinp[1]));
    }
  }
}

// ---- the last-block reduction: many blocks, run eagerly, then as a graph replayed twice ----
// N = 1000 rows: 32 blocks of 32 rows (as the seed workload's 1024), each adding its partials.
// The outputs are reset to NaN before each run, so a counter left unreset (no block would see
// itself last, nothing would write dweight/dbias) shows as NaN in the second replay.
TEST_F(CudaTest, FusedLayernormBackwardReplayedTwiceGivesTheSameBits) {
  const int N = 1000, C = 128;
  for (DType act : {DType::F32, DType::BF16}) {
    const std::string what = std::string("replayed backward ") + dtype_name(act) + " ";
    DeviceTensors t(*cuda);
    const DropoutMask mask = mask_with_step(t.step(11), 0.1f, DropoutSite::FfnOutput);
    const Tensor x = t.random(act, {N, C}, 1, -2.0f, 3.0f), w = t.random(act, {C}, 2, 0.5f, 1.5f),
                 b = t.random(act, {C}, 3), out = t.nan(act, {N, C});
    const Tensor mean = t.nan(DType::F32, {N}), rstd = t.nan(DType::F32, {N});
    cuda->layernorm_forward(out, mean, rstd, x, w, b, 1e-5f);
    const Tensor dout = t.random(act, {N, C}, 4), dout2 = t.random(act, {N, C}, 5);
    const Tensor dinp = t.nan(act, {N, C}), dbranch = t.nan(act, {N, C});
    const Tensor dw = t.nan(DType::F32, {C}), db = t.nan(DType::F32, {C});
    auto backward = [&] {
      cuda->layernorm_residual_dropout_backward(dinp, dbranch, dw, db, dout, dout2, Tensor{}, x, w, mean, rstd, mask,
                                                ParamGrads::Write);
    };
    auto reset = [&] {
      for (const Tensor& o : {dinp, dbranch, dw, db})
        t.write(o, std::vector<float>(o.numel(), std::numeric_limits<float>::quiet_NaN()));
    };
    std::vector<std::vector<float>> runs[3];
    backward();
    runs[0] = {t.read(dinp), t.read(dbranch), t.read(dw), t.read(db)};
    cuda->begin_capture();
    backward();
    cuda->end_capture();
    for (int replay = 1; replay <= 2; ++replay) {
      reset();
      cuda->replay_graph();
      runs[replay] = {t.read(dinp), t.read(dbranch), t.read(dw), t.read(db)};
    }
    const char* names[] = {"dinp", "dbranch", "dweight", "dbias"};
    for (int replay = 1; replay <= 2; ++replay)
      for (int k = 0; k < 4; ++k)
        test::expect_bitwise_equal(what + names[k] + " replay " + std::to_string(replay), runs[replay][k], runs[0][k]);
    const bool finite = std::all_of(runs[0][2].begin(), runs[0][2].end(), [](float v) { return std::isfinite(v); });
    EXPECT_TRUE(finite) << what << "dweight was not written";
  }
}

// ============================== one-launch reductions and the fused optimizer ==============================
// The kernels that finish a reduction in their last block (grad_norm_check; AdamW with the step
// count and the loss scaler), and the embedding backward that owns its output rows. The op
// cases above run them once at modest sizes; these add what they cannot see: many blocks
// contributing, a second launch (the block counter must be back at zero), a non-finite value
// in any block, Write over garbage, and the fused optimizer against the two ops it replaces.

// A device copy of `values` (F32 or I32 by T), released with `memory`.
template <typename T>
Tensor device_copy(Backend& be, Allocations& memory, const std::vector<T>& values, DType dtype, Shape shape) {
  Tensor t{memory.allocate(values.size() * sizeof(T)), dtype, shape};
  be.copy_to_device(t.data, values.data(), values.size() * sizeof(T));
  return t;
}
Tensor device_f32(Backend& be, Allocations& memory, const std::vector<float>& values) {
  return device_copy(be, memory, values, DType::F32, Shape{static_cast<int64_t>(values.size())});
}
Tensor device_i32(Backend& be, Allocations& memory, const std::vector<int32_t>& values) {
  return device_copy(be, memory, values, DType::I32, Shape{static_cast<int64_t>(values.size())});
}
std::vector<float> host_f32(Backend& be, Tensor t) {
  std::vector<float> v(t.numel());
  be.copy_to_host(v.data(), t.data, v.size() * sizeof(float));
  return v;
}
std::vector<int32_t> host_i32(Backend& be, Tensor t) {
  std::vector<int32_t> v(t.numel());
  be.copy_to_host(v.data(), t.data, v.size() * sizeof(int32_t));
  return v;
}

// ---- embedding backward: many token windows, ids repeated across them, rows no token uses ----

struct EmbeddingGrads {
  std::vector<float> dwte, dwpe;
};

// embedding_backward on `be`: tokens (B,T) ids, dout (B,T,C) values of `act` (rounded to it),
// dwte (V,C) and dwpe (maxT,C; none when maxT = 0) starting from the given values.
EmbeddingGrads run_embedding_backward(Backend& be, int B, int T, int C, const std::vector<int32_t>& ids,
                                      const std::vector<float>& dout, DType act, const EmbeddingGrads& start,
                                      ParamGrads grads) {
  Allocations memory(be);
  const int V = static_cast<int>(start.dwte.size()) / C, maxT = static_cast<int>(start.dwpe.size()) / C;
  const Tensor tokens = device_copy(be, memory, ids, DType::I32, Shape{B, T});
  Tensor d{memory.allocate(static_cast<size_t>(B) * T * C * dtype_size(act)), act, Shape{B, T, C}};
  if (act == DType::F32) {
    be.copy_to_device(d.data, dout.data(), d.bytes());
  } else {
    const test::HalfBuffer bits = test::half_of(act, dout);
    be.copy_to_device(d.data, bits.bits.data(), d.bytes());
  }
  Tensor dwte = device_copy(be, memory, start.dwte, DType::F32, Shape{V, C});
  Tensor dwpe{nullptr, DType::F32, Shape{}};
  if (maxT > 0) dwpe = device_copy(be, memory, start.dwpe, DType::F32, Shape{maxT, C});
  be.embedding_backward(dwte, dwpe, d, tokens, grads);
  return EmbeddingGrads{host_f32(be, dwte), maxT > 0 ? host_f32(be, dwpe) : std::vector<float>{}};
}

// Same bits as the CPU backend: both add each element's terms in token order onto 0 (Write) or
// the old value (Add), so no tolerance (embedding.cu, embedding_backward_kernel). Shapes: 800
// tokens (25 ballot windows of 32) with id 7 in every 50th token on top of random ids, so one
// row gathers terms from across the whole batch; ids below V - 3, so the last 3 rows get none
// (Write must still store 0 there over the NaN it starts from); C = 160 (two channel slices,
// the second 32 wide of 128) and maxT > T (dwpe rows no position reaches); and every token of a
// batch the same id in a vocabulary of 1000 (62.5 row blocks: the last partial). Then GPT-2's
// vocabulary (50,257) over 2,048 tokens, random ids and all one id: the sorted path (the token
// ids sorted by CUB's radix sort, each row's tokens one run of them; three launches), with its
// zeroed rows between runs, before the first and after the last.
TEST_F(CudaTest, EmbeddingBackwardManyTokensWritesOrAddsEveryElementWithTheCpuBits) {
  struct P {
    int B, T, C, V, maxT;
    bool one_id;
    bool sorted;  // the large-vocabulary path (embedding.cu, kMaxScanIdReads)
  };
  for (DType act : {DType::F32, DType::BF16}) {
    for (P p : {P{8, 100, 160, 40, 128, false, false}, P{4, 64, 40, 1000, 0, true, false},
                P{4, 512, 40, 50257, 0, false, true}, P{2, 1024, 40, 50257, 1024, true, true}}) {
      const int N = p.B * p.T;
      std::vector<int32_t> ids = test::random_ints(N, 31, 0, p.V - 3);
      for (int n = 0; n < N; ++n) {
        if (p.one_id) ids[n] = p.V - 4;
        else if (n % 50 == 0) ids[n] = 7;
      }
      const std::vector<float> dout = round_to(act, test::random_floats(static_cast<size_t>(N) * p.C, 32));
      const size_t wte_n = static_cast<size_t>(p.V) * p.C, wpe_n = static_cast<size_t>(p.maxT) * p.C;
      const float nan = std::numeric_limits<float>::quiet_NaN();
      const EmbeddingGrads garbage{std::vector<float>(wte_n, nan), std::vector<float>(wpe_n, nan)};
      const EmbeddingGrads before{test::random_floats(wte_n, 33), test::random_floats(wpe_n, 34)};
      const std::string what = "B" + std::to_string(p.B) + " T" + std::to_string(p.T) + " C" + std::to_string(p.C) +
                               " V" + std::to_string(p.V) + dtype_suffix(act);
      for (ParamGrads mode : {ParamGrads::Write, ParamGrads::Add}) {
        const EmbeddingGrads& start = mode == ParamGrads::Write ? garbage : before;
        const std::string how = what + (mode == ParamGrads::Write ? " written" : " added");
        const EmbeddingGrads want = run_embedding_backward(*cpu, p.B, p.T, p.C, ids, dout, act, start, mode);
        #ifdef TINYTRAIN_HAVE_SIMT
        const uint64_t enqueued = simt::work_items_enqueued();
#endif
        const EmbeddingGrads got = run_embedding_backward(*cuda, p.B, p.T, p.C, ids, dout, act, start, mode);
#ifdef TINYTRAIN_HAVE_SIMT
        // each device tensor (ids, dout, dwte and dwpe when present) a zero-filling memset and an
        // upload, the launches (1 scanning, 3 sorted), a read-back of each table
        const uint64_t tensors = p.maxT > 0 ? 4 : 3, tables = tensors - 2;
        if (test::cuda_is_emulated())
          EXPECT_EQ(simt::work_items_enqueued() - enqueued, 2 * tensors + (p.sorted ? 3 : 1) + tables) << how;
#endif
        test::expect_bitwise_equal(how + " dwte", got.dwte, want.dwte);
        test::expect_bitwise_equal(how + " dwpe", got.dwpe, want.dwpe);
        // the rows no token uses: 0 when written, their old values when added
        for (int v = p.V - 3; v < p.V; ++v)
          for (int c = 0; c < p.C; ++c) {
            const size_t i = static_cast<size_t>(v) * p.C + c;
            const float expected = mode == ParamGrads::Write ? 0.0f : before.dwte[i];
            ASSERT_EQ(got.dwte[i], expected) << how << " unused row " << v << " channel " << c;
          }
        for (size_t i = static_cast<size_t>(p.T) * p.C; i < wpe_n; ++i)
          ASSERT_EQ(got.dwpe[i], mode == ParamGrads::Write ? 0.0f : before.dwpe[i]) << how << " dwpe past T, " << i;
      }
    }
  }
}

// ---- grad_norm_check: one launch whose last block reduces 256 partials ----

struct NormResult {
  float norm_sq;
  int32_t found_inf;
};

// grad_norm_check on each of `grads_per_launch` in turn on one backend (one block counter),
// the outputs reset to garbage (NaN, found_inf 7) before each launch.
std::vector<NormResult> run_grad_norm_checks(Backend& be, const std::vector<std::vector<float>>& grads_per_launch) {
  Allocations memory(be);
  const LossScalerState s{device_f32(be, memory, {1.0f}), device_i32(be, memory, {0}),
                          device_i32(be, memory, {0}),    device_i32(be, memory, {0}),
                          device_i32(be, memory, {-1}),   device_f32(be, memory, {0.0f})};
  std::vector<NormResult> results;
  for (const std::vector<float>& g : grads_per_launch) {
    const Tensor grads = device_f32(be, memory, g);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const int32_t garbage = 7;
    be.copy_to_device(s.grad_norm_sq.data, &nan, sizeof nan);
    be.copy_to_device(s.found_inf.data, &garbage, sizeof garbage);
    be.grad_norm_check(grads, s);
    results.push_back({host_f32(be, s.grad_norm_sq)[0], host_i32(be, s.found_inf)[0]});
  }
  return results;
}

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Three launches on one backend: A, B, A. The counter must be back at 0 after each, or the
// second launch has no last block and leaves its garbage; A twice gives the same bits; B
// (other values) another norm, each within an fp32 ulp of the CPU's (grad_norm_check_cases).
// n = 196613: three laps of the 256 x 256 threads, every block a contributor.
TEST_F(CudaTest, GradNormCheckRelaunchedGivesTheSameBitsEachTime) {
  const int64_t n = 3 * 256 * 256 + 5;
  const std::vector<float> a = test::random_floats(n, 41, -2.0f, 2.0f), b = test::random_floats(n, 42, -3.0f, 3.0f);
  const std::vector<NormResult> got = run_grad_norm_checks(*cuda, {a, b, a});
  const std::vector<NormResult> want = run_grad_norm_checks(*cpu, {a, b});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(bits_of(got[0].norm_sq), bits_of(got[2].norm_sq)) << got[0].norm_sq << " then " << got[2].norm_sq;
  for (int i = 0; i < 3; ++i) {
    const NormResult& cpu_result = want[i == 1 ? 1 : 0];
    EXPECT_EQ(got[i].found_inf, 0) << "launch " << i;
    EXPECT_NEAR(got[i].norm_sq, cpu_result.norm_sq, reduction_tol(1) * cpu_result.norm_sq) << "launch " << i;
  }
  EXPECT_NE(got[0].norm_sq, got[1].norm_sq);
}

// One non-finite gradient anywhere sets found_inf, whichever block holds it: block 0 (the last
// to finish in the reverse schedule), block 255 (the last in the forward one), block 17 on the
// second lap, the very last element; and a clean buffer clears a found_inf left set.
TEST_F(CudaTest, GradNormCheckFindsOneNonFiniteValueInAnyBlock) {
  const int64_t n = 3 * 256 * 256 + 5;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Plant {
    int64_t index;
    float value;
  };
  const std::vector<float> clean = test::random_floats(n, 43, -2.0f, 2.0f);
  std::vector<std::vector<float>> launches;
  for (Plant p : {Plant{0, inf}, Plant{255 * 256 + 3, nan}, Plant{256 * 256 + 17 * 256 + 200, -inf},
                  Plant{n - 1, nan}}) {
    launches.push_back(clean);
    launches.back()[p.index] = p.value;
  }
  launches.push_back(clean);
  const std::vector<NormResult> got = run_grad_norm_checks(*cuda, launches);
  const std::vector<NormResult> want = run_grad_norm_checks(*cpu, launches);
  for (size_t i = 0; i < launches.size(); ++i) {
    EXPECT_EQ(got[i].found_inf, want[i].found_inf) << "launch " << i;
    EXPECT_EQ(got[i].found_inf, i + 1 < launches.size() ? 1 : 0) << "launch " << i;
  }
}

// ---- adamw_step_and_scaler_update: one launch equal to adamw_step + loss_scaler_update ----

struct OptimizerState {
  std::vector<float> params, exp_avg, exp_avg_sq, scale;
  std::vector<int32_t> step_count, growth_tracker, skipped_steps, first_skipped_step;
};

// Three training steps on `be` of grad_norm_check, then the optimizer and the scaler: fused
// (adamw_step_and_scaler_update) or as the two ops; the training step written before each as
// load_batch does. grads (n) are the same every step; `scale` and `tracker` start the scaler.
OptimizerState run_optimizer_steps(Backend& be, bool fused, const std::vector<float>& grads, float scale,
                                   int32_t tracker, const LossScalerConfig& config) {
  Allocations memory(be);
  const int64_t n = static_cast<int64_t>(grads.size());
  const Tensor params = device_f32(be, memory, test::random_floats(n, 51));
  const Tensor g = device_f32(be, memory, grads);
  const Tensor m = device_f32(be, memory, test::random_floats(n, 52, -0.1f, 0.1f));
  const Tensor v2 = device_f32(be, memory, test::random_floats(n, 53, 0.0f, 0.01f));
  const Tensor count = device_i32(be, memory, {10});
  const Tensor train_step = device_i32(be, memory, {0});
  const LossScalerState s{device_f32(be, memory, {scale}), device_i32(be, memory, {tracker}),
                          device_i32(be, memory, {0}),     device_i32(be, memory, {0}),
                          device_i32(be, memory, {-1}),    device_f32(be, memory, {0.0f})};
  AdamWHyper hyper;
  hyper.lr = 1e-2;
  hyper.weight_decay = 0.1;
  hyper.grad_clip = 1.0;  // the clip reads grad_norm_sq and the scale: both must be this step's
  hyper.schedule.kind = LrScheduleKind::Cosine;
  hyper.schedule.warmup_steps = 1;
  hyper.schedule.total_steps = 10;
  for (int32_t step = 3; step < 6; ++step) {
    be.copy_to_device(train_step.data, &step, sizeof step);
    be.grad_norm_check(g, s);
    if (fused) {
      be.adamw_step_and_scaler_update(params, g, m, v2, count, train_step, hyper, s, config);
    } else {
      be.adamw_step(params, g, m, v2, count, train_step, hyper, s);
      be.loss_scaler_update(s, config, train_step);
    }
  }
  return OptimizerState{host_f32(be, params),         host_f32(be, m),
                        host_f32(be, v2),             host_f32(be, s.scale),
                        host_i32(be, count),          host_i32(be, s.growth_tracker),
                        host_i32(be, s.skipped_steps), host_i32(be, s.first_skipped_step)};
}

void expect_same_state(const std::string& what, const OptimizerState& got, const OptimizerState& want) {
  test::expect_bitwise_equal(what + " params", got.params, want.params);
  test::expect_bitwise_equal(what + " exp_avg", got.exp_avg, want.exp_avg);
  test::expect_bitwise_equal(what + " exp_avg_sq", got.exp_avg_sq, want.exp_avg_sq);
  test::expect_bitwise_equal(what + " loss scale", got.scale, want.scale);
  EXPECT_EQ(got.step_count, want.step_count) << what << " step count";
  EXPECT_EQ(got.growth_tracker, want.growth_tracker) << what << " growth tracker";
  EXPECT_EQ(got.skipped_steps, want.skipped_steps) << what << " skipped steps";
  EXPECT_EQ(got.first_skipped_step, want.first_skipped_step) << what << " first skipped step";
}

// The fused kernel against the two ops on the CUDA backend, bit for bit, over 3 steps of 100003
// parameters (391 blocks): the scale grows at the first and third step (interval 2, tracker 1:
// every block must unscale with the scale from before the growth), only counts (interval 5),
// backs off every step (an inf in the gradients: a skipped step, the step count unchanged), or
// stays (static). The scaler state and step count also exactly as the CPU backend's.
TEST_F(CudaTest, FusedAdamWAndScalerUpdateEqualsTheTwoOpsBitwise) {
  struct P {
    const char* name;
    bool dynamic;
    int32_t interval, tracker;
    bool inf;
    int32_t want_steps;  // step count after the 3 steps, from 10
  };
  const int64_t n = 100003;
  for (P p : {P{"growth", true, 2, 1, false, 13}, P{"count", true, 5, 0, false, 13},
              P{"backoff", true, 2, 1, true, 10}, P{"static", false, 2000, 0, false, 13}}) {
    std::vector<float> grads = test::random_floats(n, 54);
    for (float& g : grads) g *= 1024.0f;
    if (p.inf) grads[n / 3] = std::numeric_limits<float>::infinity();
    LossScalerConfig config;
    config.dynamic = p.dynamic;
    config.growth_interval = p.interval;
    const float scale = p.dynamic ? 1024.0f : 1.0f;
    const OptimizerState fused = run_optimizer_steps(*cuda, true, grads, scale, p.tracker, config);
    const OptimizerState split = run_optimizer_steps(*cuda, false, grads, scale, p.tracker, config);
    const OptimizerState reference = run_optimizer_steps(*cpu, false, grads, scale, p.tracker, config);
    expect_same_state(std::string(p.name) + " fused vs two ops", fused, split);
    EXPECT_EQ(fused.step_count, std::vector<int32_t>{p.want_steps}) << p.name;
    EXPECT_EQ(fused.growth_tracker, reference.growth_tracker) << p.name;
    EXPECT_EQ(fused.skipped_steps, reference.skipped_steps) << p.name;
    EXPECT_EQ(fused.first_skipped_step, reference.first_skipped_step) << p.name;
    test::expect_bitwise_equal(std::string(p.name) + " loss scale vs cpu", fused.scale, reference.scale);
    test::expect_rel_close(std::string(p.name) + " params vs cpu", fused.params, test::to_double(reference.params),
                           kElementwiseTol);
  }
}

// ---- NF4: nf4_dequantize, a frozen weight decoded from 4 bits (kernels/common/nf4.h) ----
// The cases of `tinytrain ops check` (engine/ops/op_cases.cpp: full and partial 64-weight
// blocks and groups of 256 absmax codes, four blocks a thread block) in each storage dtype, and
// one past the grid-stride cap (65536 blocks of 256 threads, one weight a thread) in fp32, run by
// the ops harness (engine/ops/op_harness.h), bit for bit: both backends do nf4.h's fp32
// operations in one order, then round once to the storage type.
struct Nf4Case {
  std::string name;  // "n35166_partial_group_bf16": the shape column's words, then the dtype
  OpCaseSpec spec;
};

void PrintTo(const Nf4Case& c, std::ostream* os) { *os << c.name; }

Nf4Case nf4_case(const OpCaseSpec& spec) {
  std::string name;
  for (char ch : spec.shape + " " + dtype_name(spec.dtype)) {
    if (std::isalnum(static_cast<unsigned char>(ch)))
      name += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    else if (!name.empty() && name.back() != '_')
      name += '_';
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  return {name, spec};
}

std::vector<Nf4Case> nf4_cases() {
  std::vector<Nf4Case> cases;
  for (DType act : {DType::F32, DType::BF16, DType::F16})
    for (const OpCaseSpec& spec : op_cases(act))
      if (spec.op == "nf4_dequantize") cases.push_back(nf4_case(spec));
  cases.push_back(nf4_case(nf4_dequantize_case(DType::F32, int64_t{65536} * 256 + 1058, "past the grid-stride cap")));
  return cases;
}

class CudaNf4 : public CudaTest, public ::testing::WithParamInterface<Nf4Case> {};

TEST_P(CudaNf4, MatchesCpuBackendBitForBit) {
  const tt::OpCase c = prepared(GetParam().spec.make(), *cpu);
  const TensorCheck r = check_case(c, *cuda, *cpu);
  EXPECT_TRUE(r.ok) << r.tensor << ": max |cuda - cpu| " << r.max_abs << " (max_rel " << r.max_rel << ")";
}

INSTANTIATE_TEST_SUITE_P(Nf4, CudaNf4, ::testing::ValuesIn(nf4_cases()),
                         [](const ::testing::TestParamInfo<Nf4Case>& info) { return info.param.name; });

#endif  // TINYTRAIN_HAVE_CUDA_BACKEND

}  // namespace
}  // namespace tt
