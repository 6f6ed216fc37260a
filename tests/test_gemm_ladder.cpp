// The GEMM ladder (kernels/cuda/gemm/): every rung, called directly with a GemmArgs, against a
// double-precision product computed here from the same inputs. Each rung runs, in fp32, bf16
// and fp16 (and the mma rung in TF32), the three layouts the linear ops give it (forward:
// op(A) = A^T; the input gradient: no transposes; the weight gradient: op(B) = B^T, into fp32),
// at odd shapes (k = 8, smaller than one mma's k; m, n, k past a tile's edge; rows whose length
// is not a multiple of 16 bytes; k over several tiles; every pointer one element off an aligned
// address) with each epilogue: the bias, beta = 1 (C = D in place), the bias gradient written
// and added. Every buffer is followed by NaN guard elements, so a read past a matrix's end
// shows in a result, and a write past it in the guard. On a GPU the real rungs run; without
// one, the emulated build's (simt/), in the schedule TINYTRAIN_SIMT_SCHEDULE names.
//
// Tolerances, per element of D, from the precision and k. Let S = sum_p |a_ip b_pj| + |beta
// C_ij| + |bias_i| over the rounded inputs, u = 2^-24 (fp32's unit roundoff), eps = 2u.
//  - The products: exact in fp32 for 16-bit and TF32 operands, rounded once (<= u) for fp32.
//  - The k-term fp32 sum: each of its additions errs by at most u of a partial sum <= S, so
//    (k - 1) u S in all; the emulator's tensor-core model adds in k order, rounding each sum
//    (simt/tensor_core.h). A GPU's tensor cores align one mma's products to the largest and
//    truncate (Fasi, Higham, Mikaitis, Pranesh, PeerJ CS 2021): up to eps instead of u per term.
//  - beta C and the bias: two more roundings.
//    Together: |D - D_exact| <= (k + 2) eps S, which covers the truncating hardware.
//  - TF32 (the mma rung with allow_tf32): each fp32 operand rounded to 10 mantissa bits first,
//    a relative error <= 2^-11 each, so <= 2^-10 + 2^-22 per product: + (2^-10 + 2^-22) sum|ab|.
//  - A 16-bit D: one rounding to nearest, <= u_D of the value (u_D = 2^-8 bf16, 2^-11 fp16),
//    and 2^-25 absolute for fp16's subnormals.
// A wrong fragment, index or edge moves an element by the size of its terms, ~S / sqrt(k) at
// least, decades above these bounds. The bias gradient is compared bit for bit with the fp32
// sum of op(B)'s column in order p = 0..k-1 (then stored, or added to the start value), which
// every rung promises (gemm.h): the CPU backend's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/common/half.h"
#include "kernels/cuda_options.h"
#include "tests/cuda_test_util.h"
#include "tests/mixed_precision_util.h"
#include "tests/op_test_util.h"
#ifdef TINYTRAIN_HAVE_CUDA
#include "kernels/cuda/gemm/gemm.h"
#endif

#ifdef TINYTRAIN_HAVE_SIMT
// The rungs of the emulated build: kernels/cuda/gemm/gemm.h in tt::emu, whose cudaStream_t is
// simt::cuda_api::Stream* (simt/cuda_api.h, which cannot share a file with the toolkit's headers).
namespace simt::cuda_api {
struct Stream;
}
namespace tt::emu {
void gemm_naive(const GemmArgs& args, simt::cuda_api::Stream* stream);
void gemm_tiled(const GemmArgs& args, simt::cuda_api::Stream* stream);
void gemm_regblock(const GemmArgs& args, simt::cuda_api::Stream* stream);
void gemm_mma(const GemmArgs& args, simt::cuda_api::Stream* stream);
}  // namespace tt::emu
#endif

namespace tt {
namespace {

#ifndef TINYTRAIN_HAVE_CUDA_BACKEND

TEST(GemmLadder, SkippedBecauseTheBuildHasNoCudaBackend) {
  GTEST_SKIP() << "this build has no CUDA backend: no CUDA toolkit and no SIMT emulator";
}

#else

enum class Rung { Naive, Tiled, RegBlock, Mma };
const char* rung_name(Rung r) {
  switch (r) {
    case Rung::Naive: return "naive";
    case Rung::Tiled: return "tiled";
    case Rung::RegBlock: return "regblock";
    case Rung::Mma: return "mma";
  }
  return "?";
}

// Runs `rung` on the backend's stream: the GPU build's, or the emulated build's.
void run_rung(Rung rung, const GemmArgs& args, void* stream) {
#ifdef TINYTRAIN_HAVE_CUDA
  if (!test::cuda_is_emulated()) {
    void (*const rungs[])(const GemmArgs&, cudaStream_t) = {gemm_naive, gemm_tiled, gemm_regblock, gemm_mma};
    rungs[static_cast<int>(rung)](args, static_cast<cudaStream_t>(stream));
    return;
  }
#endif
#ifdef TINYTRAIN_HAVE_SIMT
  void (*const rungs[])(const GemmArgs&, simt::cuda_api::Stream*) = {emu::gemm_naive, emu::gemm_tiled,
                                                                      emu::gemm_regblock, emu::gemm_mma};
  rungs[static_cast<int>(rung)](args, static_cast<simt::cuda_api::Stream*>(stream));
#endif
}

// Elements of NaN after every buffer: a read past its end turns a result into NaN.
constexpr int kGuard = 16;

// A device buffer of `values` (already values of `dtype`) between `offset` leading elements and
// kGuard NaN elements, all written (the emulator's initcheck).
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& be, DType dtype, const std::vector<float>& values, int offset)
      : be_(be), dtype_(dtype), n_(values.size()), offset_(offset) {
    std::vector<float> all(offset + n_ + kGuard, std::nanf(""));
    std::copy(values.begin(), values.end(), all.begin() + offset);
    const std::vector<uint8_t> bytes = encode(all);
    base_ = be_.allocate(bytes.size());
    be_.copy_to_device(base_, bytes.data(), bytes.size());
  }
  ~DeviceBuffer() { be_.release(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return static_cast<char*>(base_) + offset_ * dtype_size(dtype_); }
  // The values, and whether the guard still holds NaN everywhere.
  std::vector<float> values(bool* guard_intact) const {
    std::vector<uint8_t> bytes((offset_ + n_ + kGuard) * dtype_size(dtype_));
    be_.copy_to_host(bytes.data(), base_, bytes.size());
    const std::vector<float> all = decode(bytes);
    *guard_intact = true;
    for (size_t i = offset_ + n_; i < all.size(); ++i) *guard_intact = *guard_intact && std::isnan(all[i]);
    return std::vector<float>(all.begin() + offset_, all.begin() + offset_ + n_);
  }

 private:
  std::vector<uint8_t> encode(const std::vector<float>& v) const {
    std::vector<uint8_t> bytes(v.size() * dtype_size(dtype_));
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype_ == DType::F32) {
        std::memcpy(&bytes[4 * i], &v[i], 4);
      } else {
        const uint16_t bits = test::half_bits(dtype_, v[i]);
        std::memcpy(&bytes[2 * i], &bits, 2);
      }
    }
    return bytes;
  }
  std::vector<float> decode(const std::vector<uint8_t>& bytes) const {
    std::vector<float> v(bytes.size() / dtype_size(dtype_));
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype_ == DType::F32) {
        std::memcpy(&v[i], &bytes[4 * i], 4);
      } else {
        uint16_t bits;
        std::memcpy(&bits, &bytes[2 * i], 2);
        v[i] = test::half_value(dtype_, bits);
      }
    }
    return v;
  }

  Backend& be_;
  DType dtype_;
  size_t n_;
  int offset_;
  void* base_ = nullptr;
};

// Random values of `dtype` (uniform in [-1, 1), rounded to the type).
std::vector<float> values_of(DType dtype, size_t n, uint32_t seed) {
  std::vector<float> v = test::random_floats(n, seed);
  return dtype == DType::F32 ? v : test::rounded(dtype, v);
}

double storage_roundoff(DType dtype) {
  return dtype == DType::BF16 ? std::ldexp(1.0, -8) : dtype == DType::F16 ? std::ldexp(1.0, -11) : 0.0;
}

struct GemmShape {
  int m, n, k;
  bool misaligned;  // every pointer one element past an aligned address
};
// k = 8 (below one mma's k of 16); m, n, k past the tiles' edges, rows of 45 elements (not a
// multiple of 16 bytes); one k step; whole tiles of every rung; k over several tiles; misaligned;
// k = 1.
const GemmShape kShapes[] = {{37, 29, 8, false},    {130, 67, 45, false}, {64, 64, 16, false}, {128, 128, 64, false},
                             {40, 24, 200, false}, {9, 17, 11, true},    {3, 70, 1, false}};

// The layouts of the linear ops' three GEMMs (kernels/cuda/linear.cu), with D's type there.
struct Layout {
  const char* gemm;
  bool transa, transb;
  bool d_fp32;  // the weight gradient accumulates into fp32
};
const Layout kLayouts[] = {
    {"forward", true, false, false}, {"dinp", false, false, false}, {"dweight", false, true, true}};

// The epilogues, each on every layout and shape: the bias (beta 0, D starts as NaN); beta 1 with
// the bias gradient added; the bias gradient written (its start NaN).
enum class Epilogue { Bias, AccumulateAndAddBiasGrad, WriteBiasGrad };
const Epilogue kEpilogues[] = {Epilogue::Bias, Epilogue::AccumulateAndAddBiasGrad, Epilogue::WriteBiasGrad};
const char* epilogue_name(Epilogue e) {
  return e == Epilogue::Bias                       ? "bias"
         : e == Epilogue::AccumulateAndAddBiasGrad ? "beta 1, bias grad added"
                                                   : "bias grad written";
}

struct LadderParam {
  Rung rung;
  DType ab;
  bool tf32;
};
void PrintTo(const LadderParam& p, std::ostream* os) { *os << rung_name(p.rung) << " " << dtype_name(p.ab); }

class GemmLadder : public ::testing::TestWithParam<LadderParam> {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = test::cuda_backend_or_skip(why);
    if (!backend_) GTEST_SKIP() << why;
  }

  // One GEMM on the rung against the double-precision product; returns the elements compared.
  void check(const Layout& layout, const GemmShape& s, Epilogue epilogue, uint32_t seed);

  std::unique_ptr<Backend> backend_;
};

void GemmLadder::check(const Layout& layout, const GemmShape& s, Epilogue epilogue, uint32_t seed) {
  const LadderParam p = GetParam();
  const DType d_type = layout.d_fp32 ? DType::F32 : p.ab;
  const int m = s.m, n = s.n, k = s.k, offset = s.misaligned ? 1 : 0;
  const bool with_bias = epilogue == Epilogue::Bias, accumulate = epilogue == Epilogue::AccumulateAndAddBiasGrad;
  const bool with_bias_grad = epilogue != Epilogue::Bias;
  const std::vector<float> a = values_of(p.ab, static_cast<size_t>(m) * k, seed);
  const std::vector<float> b = values_of(p.ab, static_cast<size_t>(k) * n, seed + 1);
  const std::vector<float> bias = values_of(d_type, m, seed + 2);
  const std::vector<float> d_start = accumulate ? values_of(d_type, static_cast<size_t>(m) * n, seed + 3)
                                                : test::nan_filled(static_cast<size_t>(m) * n);
  const std::vector<float> grad_start = accumulate ? test::random_floats(n, seed + 4) : test::nan_filled(n);
  // op(A)[i][p] and op(B)[p][j] of the stored column-major matrices
  auto op_a = [&](size_t i, size_t q) { return double(layout.transa ? a[i * k + q] : a[q * m + i]); };
  auto op_b = [&](size_t q, size_t j) { return double(layout.transb ? b[q * n + j] : b[j * k + q]); };

  DeviceBuffer dev_a(*backend_, p.ab, a, offset), dev_b(*backend_, p.ab, b, offset);
  DeviceBuffer dev_bias(*backend_, d_type, bias, offset), dev_d(*backend_, d_type, d_start, offset);
  DeviceBuffer dev_grad(*backend_, DType::F32, grad_start, offset);
  GemmArgs args;
  args.m = m, args.n = n, args.k = k, args.transa = layout.transa, args.transb = layout.transb;
  args.A = dev_a.data(), args.B = dev_b.data(), args.ab_type = p.ab, args.D = dev_d.data(), args.d_type = d_type;
  args.bias = with_bias ? dev_bias.data() : nullptr;
  args.beta = accumulate ? 1.0f : 0.0f;
  args.bias_grad = with_bias_grad ? static_cast<float*>(dev_grad.data()) : nullptr;
  args.add_bias_grad = accumulate;
  args.allow_tf32 = p.tf32;
  run_rung(p.rung, args, backend_->native_stream());
  bool d_guard = false, grad_guard = false;
  const std::vector<float> d = dev_d.values(&d_guard);
  const std::vector<float> grad = dev_grad.values(&grad_guard);
  EXPECT_TRUE(d_guard) << "a write past the end of D";
  EXPECT_TRUE(grad_guard) << "a write past the end of the bias gradient";

  const double eps = std::ldexp(1.0, -23), tf32_rel = p.tf32 ? std::ldexp(1.0, -10) + std::ldexp(1.0, -22) : 0.0;
  const double u_d = storage_roundoff(d_type), subnormal = d_type == DType::F16 ? std::ldexp(1.0, -25) : 0.0;
  int reported = 0;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double exact = 0.0, products = 0.0;
      for (int q = 0; q < k; ++q) {
        exact += op_a(i, q) * op_b(q, j);
        products += std::fabs(op_a(i, q) * op_b(q, j));
      }
      double scale = products;
      if (accumulate) {
        exact += d_start[static_cast<size_t>(j) * m + i];
        scale += std::fabs(d_start[static_cast<size_t>(j) * m + i]);
      }
      if (with_bias) {
        exact += bias[i];
        scale += std::fabs(bias[i]);
      }
      const double sum_error = (k + 2) * eps * scale + tf32_rel * products;
      const double tol = sum_error + u_d * (std::fabs(exact) + sum_error) + subnormal;
      const double got = d[static_cast<size_t>(j) * m + i];
      if (!(std::fabs(got - exact) <= tol) && reported++ < 5)
        ADD_FAILURE() << "D[" << i << "][" << j << "] = " << got << ", exact " << exact << ", tolerance " << tol;
    }
  EXPECT_EQ(reported, 0) << "elements of D outside the tolerance";
  if (with_bias_grad)
    for (int j = 0; j < n; ++j) {
      float column_sum = 0.0f;  // the promised order: p = 0, 1, ..., k-1 in fp32 from zero
      for (int q = 0; q < k; ++q) column_sum += static_cast<float>(op_b(q, j));
      const float want = accumulate ? grad_start[j] + column_sum : column_sum;
      if (std::memcmp(&grad[j], &want, 4) != 0 && reported++ < 5)
        ADD_FAILURE() << "bias_grad[" << j << "] = " << grad[j] << ", the fp32 column sum gives " << want;
    }
  EXPECT_EQ(reported, 0);
}

TEST_P(GemmLadder, MatchesTheExactProductInEveryLayoutShapeAndEpilogue) {
  uint32_t seed = 1;
  for (const Layout& layout : kLayouts)
    for (const GemmShape& s : kShapes)
      for (Epilogue e : kEpilogues) {
        SCOPED_TRACE(std::string(layout.gemm) + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                     " k=" + std::to_string(s.k) + (s.misaligned ? " misaligned" : "") + ", " + epilogue_name(e));
        check(layout, s, e, seed);
        seed += 10;
      }
}

std::vector<LadderParam> ladder_params() {
  std::vector<LadderParam> params;
  for (Rung r : {Rung::Naive, Rung::Tiled, Rung::RegBlock, Rung::Mma})
    for (DType ab : {DType::F32, DType::BF16, DType::F16})
      params.push_back({r, ab, r == Rung::Mma && ab == DType::F32});  // the mma rung takes fp32 only as TF32
  return params;
}

INSTANTIATE_TEST_SUITE_P(Rungs, GemmLadder, ::testing::ValuesIn(ladder_params()),
                         [](const ::testing::TestParamInfo<LadderParam>& info) {
                           return std::string(rung_name(info.param.rung)) + "_" +
                                  (info.param.tf32 ? "tf32" : dtype_name(info.param.ab));
                         });

// What a rung cannot do is one line naming the rung and the GEMM, before anything is enqueued:
// D of neither A/B's type nor fp32, on every rung; fp32 operands on the mma rung without TF32.
TEST(GemmLadderBadInput, ARungRefusesWhatItCannotDoInOneLine) {
  std::string why;
  auto backend = test::cuda_backend_or_skip(why);
  if (!backend) GTEST_SKIP() << why;
  GemmArgs args;
  args.m = 8, args.n = 8, args.k = 8, args.ab_type = DType::BF16, args.d_type = DType::F16;
  auto expect_refusal = [&](Rung rung, const std::string& words) {
    try {
      run_rung(rung, args, backend->native_stream());
      ADD_FAILURE() << rung_name(rung) << " ran a GEMM it cannot do";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_EQ(what.rfind(std::string(rung_name(rung)) + " GEMM m=8 n=8 k=8", 0), 0u) << what;
      EXPECT_NE(what.find(words), std::string::npos) << what;
    }
  };
  for (Rung r : {Rung::Naive, Rung::Tiled, Rung::RegBlock, Rung::Mma}) expect_refusal(r, "D must be A/B's type or F32");
  args.ab_type = DType::F32, args.d_type = DType::F32;
  expect_refusal(Rung::Mma, "only as TF32");
}

#endif  // TINYTRAIN_HAVE_CUDA_BACKEND

}  // namespace
}  // namespace tt
