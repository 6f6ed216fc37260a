// How far two backends' results of one op may be apart: the tolerances `tinytrain ops check`
// (engine/ops/op_cases.h) and the CUDA op tests (tests/test_cuda_ops.cpp) compare the CUDA backend
// with the CPU backend by, as max |got - want| / max |want| (the error on the scale of the
// result).
//
// Neither backend is exact. A K-term fp32 sum is off by at most ~K/2 eps of its terms' scale
// (eps = 2^-23); two results each that close to the truth are within K eps of each other, so
// an output fed by fp32 reductions of at most K terms gets kEps32 * K: the GPU sums in other
// orders (tiles, trees, split-K) but not less accurately. Short sums get a floor of 16 eps,
// where one rounding of an intermediate larger than the result dominates. Elementwise ops get
// 1e-6 (about 8 eps): the same formula on both sides, up to the few-ulp differences between the
// device's and glibc's erff/expf/pow. A wrong index, mask or missing term shows as an error of
// order 1e-2 or more, far above all of these.
//
// 16-bit storage: both backends read the same 16-bit inputs, compute in fp32 and round what
// they store. Two fp32 results within the fp32 tolerance round to the same value or to
// neighbours, at most 2u apart relatively (u the type's unit roundoff): storage_tol is what a
// 16-bit output adds to its fp32 tolerance. F32 outputs of 16-bit inputs (parameter gradients,
// statistics, losses) keep the fp32 tolerance: the products of two 16-bit values are exact in
// fp32, so only the summation order differs.
#pragma once
#include <algorithm>

#include "kernels/tensor.h"

namespace tt {

// fp32 machine epsilon, 2^-23.
constexpr double kEps32 = 1.1920928955078125e-7;

// An output fed by fp32 reductions of at most K terms.
inline double reduction_tol(double K) { return kEps32 * std::max(K, 16.0); }

// An output computed elementwise by the same formula on both sides.
constexpr double kElementwiseTol = 1e-6;

// The unit roundoff of a storage type: 2^-8 for bf16 (8 significant bits), 2^-11 for fp16;
// 0 for fp32, whose rounding the fp32 tolerances already hold.
inline double unit_roundoff(DType dtype) {
  return dtype == DType::BF16 ? 0.00390625 : dtype == DType::F16 ? 0.00048828125 : 0.0;
}

// What storing in `dtype` adds to a comparison of two backends: neighbouring values, 2u apart.
inline double storage_tol(DType dtype) { return 2.0 * unit_roundoff(dtype); }

// What storing in `dtype` adds in absolute terms: fp16 holds values below 2^-14 as subnormals,
// 2^-24 apart whatever their size, so two results rounded to neighbouring subnormals differ by
// 2^-24, which no relative bound on a group of tiny values covers (cross-entropy's non-target
// gradients p / N at N = 1024 are ~1e-5; compared on their own scale, compare_by_target).
// bf16 has fp32's exponent range: its values this small are normal.
inline double storage_abs_tol(DType dtype) { return dtype == DType::F16 ? 5.9604644775390625e-08 : 0.0; }

// A GEMM output of K-term sums with `act` inputs. 16-bit GEMMs run on tensor cores, which add
// aligned products with truncation rather than round to nearest (Fasi, Higham, Mikaitis,
// Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021): up to K eps for a
// K-term sum instead of K/2, so twice the fp32 budget between the backends.
inline double gemm_reduction_tol(double K, DType act) { return (act == DType::F32 ? 1.0 : 2.0) * reduction_tol(K); }

}  // namespace tt
