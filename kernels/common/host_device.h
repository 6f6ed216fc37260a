// TT_HD marks functions compiled for both the host and the GPU, so the CPU and CUDA
// backends share one definition of the math they must agree on bit for bit.
//
// mul_rn, add_rn and sub_rn: one product, sum or difference rounded to nearest as written, never
// fused with its neighbour into a multiply-add. a * b + c rounds twice as written and once as an
// FMA, so a compiler that contracts (nvcc does by default: --fmad=true) gives other bits than one
// that does not. The shared formulas that must round alike everywhere (AdamW and its scalars,
// the lr schedule, GELU, SiLU, RoPE's turn) write each product that meets a sum with these; all
// other device code is left to contract, which is faster and at least as accurate.
//  - nvcc's device code: the intrinsics __fmul_rn, __fadd_rn, __fsub_rn (and __d*_rn), which
//    the CUDA C++ Programming Guide ("Intrinsic Functions") says are never merged into an FMA.
//  - the SIMT emulator's kernels (simt/prelude.h defines TINYTRAIN_SIMT_KERNEL_CODE), which are
//    compiled with -ffp-contract=fast to stand in for nvcc's contraction: the value goes through
//    an empty asm statement that the compiler must assume changed it, so the multiply's rounded
//    result is what the add sees.
//  - everything else on the host, compiled with -ffp-contract=off (CMakeLists.txt): the plain
//    operators, which then round as written (an asm would stop the CPU loops' vectorization).
// Every variant rounds the same, so which inline copy the linker keeps does not matter.
#pragma once
#if defined(__CUDACC__)
#define TT_HD __host__ __device__ __forceinline__
#else
#define TT_HD inline
#endif

namespace tt {

#if defined(TINYTRAIN_SIMT_KERNEL_CODE) && !defined(__CUDA_ARCH__)
inline float held_rounded(float x) {
  asm("" : "+x"(x));
  return x;
}
inline double held_rounded(double x) {
  asm("" : "+x"(x));
  return x;
}
#else
TT_HD float held_rounded(float x) { return x; }
TT_HD double held_rounded(double x) { return x; }
#endif

// The device intrinsic on the GPU, the held plain operation everywhere else.
#if defined(__CUDA_ARCH__)
#define TT_ROUNDED(intrinsic, plain) (intrinsic)
#else
#define TT_ROUNDED(intrinsic, plain) held_rounded(plain)
#endif
TT_HD float mul_rn(float a, float b) { return TT_ROUNDED(__fmul_rn(a, b), a * b); }
TT_HD float add_rn(float a, float b) { return TT_ROUNDED(__fadd_rn(a, b), a + b); }
TT_HD float sub_rn(float a, float b) { return TT_ROUNDED(__fsub_rn(a, b), a - b); }
TT_HD double mul_rn(double a, double b) { return TT_ROUNDED(__dmul_rn(a, b), a * b); }
TT_HD double add_rn(double a, double b) { return TT_ROUNDED(__dadd_rn(a, b), a + b); }
TT_HD double sub_rn(double a, double b) { return TT_ROUNDED(__dsub_rn(a, b), a - b); }
#undef TT_ROUNDED

}  // namespace tt
