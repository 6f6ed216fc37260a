// Tests for the operation counters (simt/op_counts.h) and the GCC plugin that increments them
// (simt/op_count_plugin.cpp): each probe of tests/op_counts_probe.cpp, compiled with the plugin,
// must add exactly the operations its source code does, counted per lane where GCC vectorized
// it, and only for the code that ran. This file is compiled without the plugin, so nothing here
// counts. Every expected value is derived from the probe's code, in the comment beside it.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "simt/op_counts.h"

// tests/op_counts_probe.cpp: declared here, its only user.
namespace op_counts_probe {
float dot(const float* a, const float* b, int n);
void exp_scaled(const float* x, float scale, float* out, int n);
double dot_plus_half(const double* a, const double* b, int n);
float branchy(float x, bool heavy);
void multiply_add_one(const float* a, const float* b, float* c, int n);
float recurrence(float x, float a, float b, int n);
void roots(const float* x, float* out, int n);
float sin_times_cos(float x);
double gelu(double x);
float uncounted(float x, float lo, float hi);
float contracted(float a, float b, float c);
void fill_fragment(float (&fragment)[4], float x);
float fragment_sum(float x);
float fragment_element(float x, int i);
}  // namespace op_counts_probe

namespace {

namespace probe = op_counts_probe;

// What `work` added to the counters.
template <typename Work>
simt::OpCounts counted(Work&& work) {
  simt::OpCounts before = simt::read_op_counts();
  work();
  simt::OpCounts after = simt::read_op_counts();
  simt::OpCounts added;
  added.fp32 = after.fp32 - before.fp32;
  added.fp64 = after.fp64 - before.fp64;
  added.special = after.special - before.special;
  added.statements = after.statements - before.statements;
  return added;
}

// Small integers: every sum and product below is exact in float, so results can be compared
// exactly, whatever order the vectorized code adds them in.
std::vector<float> counting_up(int n) {
  std::vector<float> values(n);
  for (int i = 0; i < n; ++i) values[i] = static_cast<float>(i % 7);
  return values;
}

TEST(OpCounts, AvailableInThisBuild) { EXPECT_TRUE(simt::op_counts_available()); }

TEST(OpCounts, DotProductIsTwoFloatOpsPerElement) {
  // 1000 = 125 iterations of the 8-wide loop; 13 = one 8-wide, one 4-wide, one scalar.
  for (int n : {1000, 13}) {
    std::vector<float> a = counting_up(n), b = counting_up(n);
    float sum = 0.0f;
    simt::OpCounts added = counted([&] { sum = probe::dot(a.data(), b.data(), n); });
    float expected = 0.0f;
    for (int i = 0; i < n; ++i) expected += a[i] * b[i];
    EXPECT_EQ(sum, expected) << "n=" << n;
    EXPECT_EQ(added.fp32, 2u * n) << "n=" << n;  // a[i] * b[i], sum + it
    EXPECT_EQ(added.fp64, 0u);
    EXPECT_EQ(added.special, 0u);
  }
}

TEST(OpCounts, ExpIsOneSpecialOpPerCall) {
  const int n = 100;
  std::vector<float> x(n, 0.25f), out(n);
  simt::OpCounts added = counted([&] { probe::exp_scaled(x.data(), 2.0f, out.data(), n); });
  EXPECT_EQ(added.special, 1u * n);  // expf(x[i])
  EXPECT_EQ(added.fp32, 1u * n);     // * scale
  EXPECT_EQ(added.fp64, 0u);
}

TEST(OpCounts, DoubleArithmeticCountsAsFp64Only) {
  const int n = 100;
  std::vector<double> a(n, 1.5), b(n, 2.0);
  simt::OpCounts added = counted([&] { probe::dot_plus_half(a.data(), b.data(), n); });
  EXPECT_EQ(added.fp64, 3u * n);  // a[i] * b[i], + 0.5, sum + it
  EXPECT_EQ(added.fp32, 0u);
  EXPECT_EQ(added.special, 0u);
}

TEST(OpCounts, OnlyTheTakenBranchCounts) {
  EXPECT_EQ(counted([] { probe::branchy(2.0f, false); }).fp32, 1u);  // x - 3
  EXPECT_EQ(counted([] { probe::branchy(2.0f, true); }).fp32, 16u);  // 8 x (y * x, + constant)
}

TEST(OpCounts, VectorizedCodeCountsEveryLane) {
  // Runs as 8-wide AVX2 code: 1000 = 125 vector iterations; 1003 adds 3 scalar ones.
  for (int n : {1000, 1003}) {
    std::vector<float> a = counting_up(n), b = counting_up(n), c(n);
    simt::OpCounts added = counted([&] { probe::multiply_add_one(a.data(), b.data(), c.data(), n); });
    EXPECT_EQ(added.fp32, 2u * n) << "n=" << n;  // a[i] * b[i], + 1
    EXPECT_EQ(added.fp64, 0u);
    // Per element at least: two loads, the multiply, the add, the store.
    EXPECT_GE(added.statements, 5u * n) << "n=" << n;
    for (int i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] * b[i] + 1.0f) << "i=" << i;
  }
}

TEST(OpCounts, StatementsGrowWithTheWork) {
  // The loop runs the same body each iteration, so its statements are fixed + per_iteration * n:
  // each further n iterations add the same number, at least the 2 float ops per iteration.
  const int n = 1000;
  uint64_t statements[3];
  for (int k = 1; k <= 3; ++k) {
    simt::OpCounts added = counted([&] { probe::recurrence(1.0f, 0.5f, 0.25f, k * n); });
    EXPECT_EQ(added.fp32, 2u * k * n);  // x * a, + b
    statements[k - 1] = added.statements;
  }
  EXPECT_EQ(statements[1] - statements[0], statements[2] - statements[1]);
  EXPECT_GE(statements[1] - statements[0], 2u * n);
  // The fixed part (entry, exit, loop setup) is a few statements against >= 2000 per n: twice
  // the iterations, about twice the statements.
  EXPECT_GE(statements[1], 2 * statements[0] - 20);
}

TEST(OpCounts, SqrtCountsOnceOnEitherPath) {
  // Non-negative inputs take the inline .SQRT, a negative one the call of sqrtf: one each.
  const int n = 64;
  std::vector<float> x(n, 4.0f), out(n);
  x[5] = -1.0f;
  simt::OpCounts added = counted([&] { probe::roots(x.data(), out.data(), n); });
  EXPECT_EQ(added.special, 1u * n);
  EXPECT_EQ(added.fp32, 0u);
  EXPECT_EQ(out[0], 2.0f);
}

TEST(OpCounts, SinAndCosOfOneArgumentCountTwo) {
  simt::OpCounts added = counted([] { probe::sin_times_cos(0.5f); });
  EXPECT_EQ(added.special, 2u);  // sin, cos
  EXPECT_EQ(added.fp32, 1u);     // their product
}

TEST(OpCounts, DoubleSpecialFunctions) {
  simt::OpCounts added = counted([] { probe::gelu(0.5); });
  EXPECT_EQ(added.special, 1u);  // erf
  EXPECT_EQ(added.fp64, 4u);     // x * 0.7071..., 1 + erf, 0.5 * x, the product
  EXPECT_EQ(added.fp32, 0u);
}

TEST(OpCounts, MinMaxComparisonAbsAndNegationAreNotCounted) {
  simt::OpCounts added = counted([] { probe::uncounted(-2.0f, -1.0f, 1.0f); });
  EXPECT_EQ(added.fp32, 0u);
  EXPECT_EQ(added.special, 0u);
  EXPECT_GT(added.statements, 0u);
}

TEST(OpCounts, FusedMultiplyAddCountsTwo) {
  simt::OpCounts added = counted([] { probe::contracted(2.0f, 3.0f, 1.0f); });
  EXPECT_EQ(added.fp32, 2u);        // the multiply and the add...
  EXPECT_EQ(added.statements, 2u);  // ...in one statement, .FMA, and the return
}

TEST(OpCounts, FragmentElementsAtConstantPositionsAreRegisters) {
  simt::OpCounts fill = counted([] {
    float f[4];
    probe::fill_fragment(f, 1.0f);
  });
  simt::OpCounts sum = counted([] { EXPECT_EQ(probe::fragment_sum(1.0f), 10.0f); });
  EXPECT_EQ(sum.fp32, fill.fp32 + 3u);  // fill_fragment's and the three adds
  // fragment_sum: the call of fill_fragment, the three adds and the return; its four loads of
  // fragment[0..3] are register reads and count nothing.
  EXPECT_EQ(sum.statements, fill.statements + 5u);
  // fragment_element: the call, the index's mask and the return, plus the load
  // at a run-time position, which counts.
  const uint64_t element = counted([] { EXPECT_EQ(probe::fragment_element(1.0f, 2), 3.0f); }).statements;
  EXPECT_GT(element, fill.statements + 3u);
}

}  // namespace
