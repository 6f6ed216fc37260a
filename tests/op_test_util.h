// Shared helpers for the CPU op tests (test_cpu_ops, test_dropout, test_adamw_update):
// tensor views over host vectors, seeded random fills, error measures and central finite
// differences in double. The CPU backend's memory is host memory, so a std::vector's
// storage can be handed to its ops directly.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <deque>
#include <string>
#include <vector>

#include "engine/ops/op_tolerance.h"
#include "kernels/tensor.h"
#include "kernels/backend.h"
#include "kernels/common/philox.h"
#include "kernels/cpu/cpu_simd.h"

namespace tt::test {

// Every vector width the CPU kernels can run on this machine (kernels/cpu/cpu_simd.h), the
// narrowest first: tests pin each one, since they must all give the same bits.
inline std::vector<CpuSimd> simd_widths() {
  std::vector<CpuSimd> widths = {CpuSimd::Scalar};
  if (best_cpu_simd() != CpuSimd::Scalar) widths.push_back(CpuSimd::Avx2);
  if (best_cpu_simd() == CpuSimd::Avx512) widths.push_back(CpuSimd::Avx512);
  return widths;
}

// fp32 machine epsilon, 2^-23 (one rounding is at most half of it, relative). Every tolerance
// in these tests is a multiple of it, sized by the length of the longest fp32 reduction.
using ::tt::kEps32;  // engine/ops/op_tolerance.h

// ---- tensor views over host vectors ----
inline Tensor f32_view(std::vector<float>& v, Shape shape) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), shape.numel()) << "view " << shape.str();
  return Tensor{v.data(), DType::F32, shape};
}
inline Tensor i32_view(std::vector<int32_t>& v, Shape shape) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), shape.numel()) << "view " << shape.str();
  return Tensor{v.data(), DType::I32, shape};
}
// An absent optional tensor (bias, wpe, dinp, dlogits): null data.
inline Tensor null_f32() { return Tensor{nullptr, DType::F32, Shape{}}; }

// A one-element F32 tensor holding `value` (e.g. a loss scale), in storage that outlives the call.
inline Tensor scalar_f32(float value) {
  static std::deque<float> values;
  values.push_back(value);
  return Tensor{&values.back(), DType::F32, Shape{1}};
}

// A loss scaler state with scale 1 and no inf found: an optimizer step that is not skipped.
inline LossScalerState unit_scaler() {
  static float scale = 1.0f, norm_sq = 0.0f;
  static int32_t tracker = 0, found_inf = 0, skipped = 0, first_skipped = -1;
  scale = 1.0f, found_inf = 0;
  return LossScalerState{Tensor{&scale, DType::F32, Shape{1}},         Tensor{&tracker, DType::I32, Shape{1}},
                         Tensor{&found_inf, DType::I32, Shape{1}},     Tensor{&skipped, DType::I32, Shape{1}},
                         Tensor{&first_skipped, DType::I32, Shape{1}}, Tensor{&norm_sq, DType::F32, Shape{1}}};
}

// An op-level DropoutMask for `key`: ops read the step through a pointer (into backend memory;
// here host memory, which is the CPU backend's), so the step is kept in storage that outlives
// the call (a deque never moves its elements).
inline DropoutMask mask_of(const DropoutKey& key, float p) {
  static std::deque<uint32_t> steps;
  steps.push_back(key.step);
  return DropoutMask{p, key.seed, &steps.back(), key.layer, key.site};
}

// ---- seeded random fills (std::mt19937, fixed seeds: every run sees the same numbers) ----
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}
// uniform integers in [lo, hi)
inline std::vector<int32_t> random_ints(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// An output buffer the op must overwrite entirely: NaN everywhere, so a skipped element shows.
inline std::vector<float> nan_filled(size_t n) { return std::vector<float>(n, std::nanf("")); }

// One fp32 attention forward + backward of `backend` on host buffers (the CPU backend):
// qkv (B,T,3C), dout (B,T,C) -> out, lse (B,NH,T), dqkv. Outputs and the dout_dot_out scratch
// start as NaN, so nothing unwritten or read-before-written goes unnoticed.
struct AttentionF32 {
  std::vector<float> out, lse, dqkv;
};
inline AttentionF32 attention_f32(Backend& backend, const AttentionShape& s, std::vector<float> qkv,
                                  std::vector<float> dout, const DropoutMask& mask) {
  const int64_t C = static_cast<int64_t>(s.NH) * s.HS;
  const Shape qkv_shape{s.B, s.T, 3 * C}, out_shape{s.B, s.T, C}, rows_shape{s.B, s.NH, s.T};
  AttentionF32 r{nan_filled(out_shape.numel()), nan_filled(rows_shape.numel()), nan_filled(qkv_shape.numel())};
  std::vector<float> dout_dot_out = nan_filled(rows_shape.numel());
  backend.attention_forward(f32_view(r.out, out_shape), f32_view(r.lse, rows_shape), f32_view(qkv, qkv_shape), s,
                            mask);
  backend.attention_backward(f32_view(r.dqkv, qkv_shape), f32_view(dout_dot_out, rows_shape),
                             f32_view(dout, out_shape), f32_view(qkv, qkv_shape), f32_view(r.out, out_shape),
                             f32_view(r.lse, rows_shape), s, mask);
  return r;
}

// ---- error measures ----
inline double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}
inline double max_abs_diff(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double m = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    m = std::max(m, std::isnan(d) ? INFINITY : d);  // a NaN is an infinite error, never a pass
  }
  return m;
}
// max |got - want| over max |want|: the error on the scale of the result
inline double max_rel_diff(const std::vector<float>& got, const std::vector<double>& want) {
  return max_abs_diff(got, want) / std::max(max_abs(want), 1e-300);
}

// Checks max_rel_diff <= tol and prints the measured error, so the margin is visible in logs.
inline void expect_rel_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                             double tol) {
  const double rel = max_rel_diff(got, want);
  std::printf("[ rel err  ] %-40s %.3e  (tol %.1e)\n", what.c_str(), rel, tol);
  EXPECT_LE(rel, tol) << what << ": max |got - want| / max |want| = " << rel;
}

// Checks max |got - want| <= tol, for results whose natural scale is absolute (losses, GELU).
inline void expect_abs_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                             double tol) {
  const double err = max_abs_diff(got, want);
  std::printf("[ abs err  ] %-40s %.3e  (tol %.1e)\n", what.c_str(), err, tol);
  EXPECT_LE(err, tol) << what << ": max |got - want| = " << err;
}

// Bitwise equality of two fp32 buffers (determinism, aliasing, exact accumulation checks).
inline void expect_bitwise_equal(const std::string& what, const std::vector<float>& got,
                                 const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && mismatches++ == 0) first = i;
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << got.size() << " differ, first at " << first
                            << " (" << got[first] << " vs " << want[first] << ")";
}

// sum_i a_i b_i: the scalar loss L = sum(out * R) of the backward tests
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// dL/dx by central differences in double: (L(x + h e_i) - L(x - h e_i)) / 2h. For O(1)
// inputs with h = 1e-6 the truncation error is ~h^2 |L'''| ~ 1e-12 and the cancellation
// error ~1e-16 sum|terms of L| / h ~ 1e-10 per term summed (a few 1e-9 for the sizes in
// these tests): both far below the fp32 errors being measured (1e-7 and up).
inline std::vector<double> central_diff(const std::function<double(const std::vector<double>&)>& loss,
                                        std::vector<double> x, double h = 1e-6) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = loss(x);
    x[i] = x0 - h;
    const double down = loss(x);
    x[i] = x0;
    grad[i] = (up - down) / (2.0 * h);
  }
  return grad;
}

}  // namespace tt::test
