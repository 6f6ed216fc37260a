// Probe functions for tests/test_op_counts.cpp: code of known arithmetic, compiled with the
// operation-counting plugin (simt/op_count_plugin.cpp) and the emulated kernels' flags (-O3
// -march=x86-64-v3) but for contraction, off here (the kernels have -ffp-contract=fast) so that
// each probe's operations are those its source writes, and on in contracted() alone; the test
// can then check the counters' deltas exactly.
// Inputs come through parameters and the functions are noinline: nothing folds at compile
// time, and each call runs exactly the code below. The counts each one must add are derived in
// the test, next to its declarations.
#include <cmath>

#define PROBE __attribute__((noinline))

namespace op_counts_probe {

// GCC vectorizes this with 8-wide multiplies whose products it then adds one lane at a time,
// in order (the sum's rounding is kept): still one multiply and one add per element.
PROBE float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

PROBE void exp_scaled(const float* x, float scale, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = std::exp(x[i]) * scale;
}

PROBE double dot_plus_half(const double* a, const double* b, int n) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += a[i] * b[i] + 0.5;
  return sum;
}

// The heavy side: a degree-8 Horner polynomial, 8 multiplies and 8 adds. The light side: 1 op.
PROBE float branchy(float x, bool heavy) {
  if (!heavy) return x - 3.0f;
  float y = 0.5f;
  y = y * x + 1.0f;
  y = y * x + 2.0f;
  y = y * x + 3.0f;
  y = y * x + 4.0f;
  y = y * x + 5.0f;
  y = y * x + 6.0f;
  y = y * x + 7.0f;
  y = y * x + 8.0f;
  return y;
}

// __restrict: no aliasing check, so GCC vectorizes it unconditionally (8 lanes of 32-byte AVX2
// vectors, then a scalar epilogue for n % 8 elements).
PROBE void multiply_add_one(const float* __restrict a, const float* __restrict b, float* __restrict c, int n) {
  for (int i = 0; i < n; ++i) c[i] = a[i] * b[i] + 1.0f;
}

// A chain each step of which needs the one before: neither vectorized nor reordered.
PROBE float recurrence(float x, float a, float b, int n) {
  for (int i = 0; i < n; ++i) x = x * a + b;
  return x;
}

// GCC makes sqrtf an inline .SQRT with a call of sqrtf (for errno) only for negative inputs.
PROBE void roots(const float* x, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = std::sqrt(x[i]);
}

// GCC merges the two calls into one computing both (cexpif, then sincosf).
PROBE float sin_times_cos(float x) { return std::sin(x) * std::cos(x); }

// Exact GELU in double: x * 0.7071..., erf, 1 + erf, 0.5 * x, and their product.
PROBE double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x * 0.7071067811865476)); }

// Min, max, a comparison, abs and negation: none of them counted.
PROBE float uncounted(float x, float lo, float hi) {
  float clamped = std::fmin(std::fmax(x, lo), hi);
  return x < 0.0f ? -std::fabs(clamped) : clamped;
}

// Contraction allowed here only: a * b + c becomes one fused multiply-add (.FMA).
__attribute__((optimize("fp-contract=fast"))) PROBE float contracted(float a, float b, float c) { return a * b + c; }

// A fragment as the emulated kernels hold one: a local array whose address goes to a function
// (as a fragment's goes to the C++ model of mma.sync), so it lives in memory here. Its
// elements at constant positions are registers on a GPU: reading them costs no statement.
PROBE void fill_fragment(float (&fragment)[4], float x) {
  for (int i = 0; i < 4; ++i) fragment[i] = x + static_cast<float>(i);
}
PROBE float fragment_sum(float x) {
  float fragment[4];
  fill_fragment(fragment, x);
  return (fragment[0] + fragment[1]) + (fragment[2] + fragment[3]);
}
// The same fragment read at a position known only at run time: local memory on a GPU, counted.
PROBE float fragment_element(float x, int i) {
  float fragment[4];
  fill_fragment(fragment, x);
  return fragment[i & 3];
}

}  // namespace op_counts_probe
