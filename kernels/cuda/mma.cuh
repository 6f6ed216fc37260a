// The tensor-core instructions our kernels use, in one place, each with two bodies: the inline
// PTX nvcc compiles (sm_80 and later), and under the SIMT emulator (TINYTRAIN_SIMT_EMULATOR) a
// C++ model of the instruction (simt/tensor_core.h) that moves each lane's fragment as the PTX
// ISA lays it out and faults where the hardware's rules are broken. A kernel calls only these,
// so the same kernel runs on a GPU and, slowly but checked, on any CPU (docs/emulation.md,
// "Tensor cores"; docs/gemm.md uses them).
//
//   mma_m16n8k16<bf16|f16>   d (16x8 fp32) = a (16x16) b (16x8) + c, for one warp
//   mma_m16n8k8_tf32         d (16x8 fp32) = a (16x8) b (8x8) + c, tf32 inputs
//   ldmatrix<N, Trans>       N 8x8 matrices of 16-bit elements, shared memory -> registers
//   cp_async<Bytes>          Bytes (4, 8, 16) global -> shared, asynchronously (.ca; cp_async_cg:
//                            16 bytes, .cg: cached in L2 only); zero-filled past src_bytes
//   cp_async_commit_group, cp_async_wait_group<N>
//   pack_rn<bf16|f16>        two fp32 values rounded into one register: an A operand from accumulators
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"): with
// g = lane / 4 and t = lane % 4, a lane's A registers hold A[g][2t..2t+1], A[g+8][2t..2t+1],
// A[g][2t+8..2t+9], A[g+8][2t+8..2t+9]; its B registers B[2t..2t+1][g] and B[2t+8..2t+9][g]; its
// accumulators C[g][2t..2t+1] and C[g+8][2t..2t+1]. The lower half of a register is the element
// with the lower index. ldmatrix gives lane l, of each 8x8 matrix, row l/4, columns 2(l%4) and
// 2(l%4)+1 (with .trans: that of the transposed matrix), exactly an A or B register.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/common/half.h"

#ifdef TINYTRAIN_SIMT_EMULATOR
// Each call site's file and line, for the emulator's reports (a warp whose lanes reach the
// instruction at different lines has diverged).
#define TT_CALL_SITE , const char *file = __builtin_FILE(), int line = __builtin_LINE()
#else
#define TT_CALL_SITE
#endif

namespace tt {

// Two 16-bit elements in one register: `lo` is the one with the lower index.
template <typename T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) {
  return static_cast<uint32_t>(lo.bits) | (static_cast<uint32_t>(hi.bits) << 16);
}

// lo and hi rounded to nearest even to 16-bit T (bf16 or f16), in one register, lo in the lower
// half: cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32, one instruction (sm_80), where pack2(from_float(lo),
// from_float(hi)) would be two conversions and the packing. The same bits as from_float<T>.
template <typename T>
__device__ __forceinline__ uint32_t pack_rn(float lo, float hi) {
  static_assert(std::is_same<T, bf16>::value || std::is_same<T, f16>::value, "packs bf16 or f16");
#ifdef TINYTRAIN_SIMT_EMULATOR
  return ::simt::cvt_pack(std::is_same<T, bf16>::value ? ::simt::MmaInput::BF16 : ::simt::MmaInput::FP16, lo, hi);
#else
  uint32_t r;
  if constexpr (std::is_same<T, bf16>::value)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // the first source goes high
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

// An fp32 value as a tf32 operand: rounded to nearest, ties away from zero, to 10 mantissa
// bits (cvt.rna.tf32.f32); the low 13 bits are then zero.
__device__ __forceinline__ uint32_t to_tf32(float x) {
#ifdef TINYTRAIN_SIMT_EMULATOR
  const uint32_t u = float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;  // inf and NaN stay as they are
  return (u + 0x1000u) & 0xffffe000u;
#else
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
#endif
}

// d = a b + c for one warp, m16n8k16, 16-bit inputs T (bf16 or f16), fp32 accumulators. d may be c.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                             const float (&c)[4] TT_CALL_SITE) {
#ifdef TINYTRAIN_SIMT_EMULATOR
  static_assert(std::is_same<T, bf16>::value || std::is_same<T, f16>::value, "mma inputs are bf16 or f16");
  constexpr auto input = std::is_same<T, bf16>::value ? ::simt::MmaInput::BF16 : ::simt::MmaInput::FP16;
  ::simt::mma_sync(input, d, a, b, c, file, line);
#else
  static_assert(std::is_same<T, bf16>::value || std::is_same<T, f16>::value, "mma inputs are bf16 or f16");
  if constexpr (std::is_same<T, bf16>::value)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
#endif
}

// d = a b + c for one warp, m16n8k8, tf32 inputs (to_tf32), fp32 accumulators. With
// g = lane / 4, t = lane % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32): a holds
// A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]; b holds B[t][g], B[t+4][g]; c and d as above.
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                 const float (&c)[4] TT_CALL_SITE) {
#ifdef TINYTRAIN_SIMT_EMULATOR
  ::simt::mma_sync(::simt::MmaInput::TF32, d, a, b, c, file, line);
#else
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%10,%11,%12,%13};"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                 "f"(c[3]));
#endif
}

// N (1, 2 or 4) 8x8 matrices of 16-bit elements from shared memory: lanes 8j..8j+7 give the
// addresses of matrix j's rows (16 bytes each, 16-byte aligned); regs[j] is this lane's
// register of matrix j. Trans: the matrices transposed on the way (a row-major B for mma).
template <int N, bool Trans = false>
__device__ __forceinline__ void ldmatrix(uint32_t (&regs)[N], const void* row TT_CALL_SITE) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#ifdef TINYTRAIN_SIMT_EMULATOR
  ::simt::ldmatrix(N, Trans, regs, row, file, line);
#else
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (N == 1 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(regs[0]) : "r"(address));
  if constexpr (N == 1 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(regs[0]) : "r"(address));
  if constexpr (N == 2 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(regs[0]), "=r"(regs[1])
                 : "r"(address));
  if constexpr (N == 2 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(regs[0]), "=r"(regs[1])
                 : "r"(address));
  if constexpr (N == 4 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
                 : "r"(address));
  if constexpr (N == 4 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
                 : "r"(address));
#endif
}

// Bytes (4, 8 or 16) from global `src` to shared `dst`, both aligned to Bytes, without passing
// through registers (.ca: cached in L1 too); bytes past src_bytes are zero (src_bytes = 0 reads
// nothing: a tile's edge). The data lands by cp_async_wait_group.
template <int Bytes>
__device__ __forceinline__ void cp_async(void* dst, const void* src, int src_bytes = Bytes TT_CALL_SITE) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
#ifdef TINYTRAIN_SIMT_EMULATOR
  ::simt::cp_async(dst, src, Bytes, src_bytes, false, file, line);
#else
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(address), "l"(src), "n"(Bytes), "r"(src_bytes));
#endif
}

// 16 bytes, .cg: cached in L2 only (data used once by this SM, as a GEMM's tiles are).
__device__ __forceinline__ void cp_async_cg(void* dst, const void* src, int src_bytes = 16 TT_CALL_SITE) {
#ifdef TINYTRAIN_SIMT_EMULATOR
  ::simt::cp_async(dst, src, 16, src_bytes, true, file, line);
#else
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(address), "l"(src), "r"(src_bytes));
#endif
}

// Closes this thread's copies issued since the last commit into a group.
__device__ __forceinline__ void cp_async_commit_group() {
#ifdef TINYTRAIN_SIMT_EMULATOR
  ::simt::cp_async_commit_group();
#else
  asm volatile("cp.async.commit_group;");
#endif
}

// Waits until at most N of this thread's groups are in flight (their data then in shared
// memory for this thread; other threads see it after a __syncthreads).
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
#ifdef TINYTRAIN_SIMT_EMULATOR
  ::simt::cp_async_wait_group(N);
#else
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
#endif
}

}  // namespace tt

#undef TT_CALL_SITE
