// The SIMT emulator's operation counters, for the per-kernel cost model: how much arithmetic
// the emulated kernel code executed. Only code compiled with the GCC plugin
// simt/op_count_plugin.cpp (simt/op_count_plugin.cmake: simt_count_ops) increments them; the
// plugin adds, at the start of each basic block of that code, the block's counts, worked out
// at compile time from the optimized code. Everything else (the scheduler, cuBLASLt's stand-in)
// adds nothing. A statement on a vector counts once per lane, so the counts do not depend on
// how the host compiler vectorized the kernel.
//   simt_fp32_ops     float additions, subtractions, multiplications and divisions; a fused
//                     multiply-add counts 2. Negation, abs, comparisons, min/max and
//                     conversions are not counted.
//   simt_fp64_ops     the same on double.
//   simt_special_ops  calls of exp, exp2, expm1, log, log2, log10, log1p, sqrt, sin, cos, tan,
//                     tanh, erf, erfc and pow, float or double: what a GPU sends to its
//                     special-function unit or runs as an instruction sequence (sin and cos
//                     of one argument, merged by GCC into one call, count 2).
//   simt_statements   executed GIMPLE statements (loads, stores, arithmetic, branches, calls),
//                     a stand-in for an instruction count; the memory watch's sanitizer
//                     checks are not the kernel's and are left out.
// They are plain globals, not atomics: the emulator runs every CUDA thread on one OS thread.
#pragma once
#include <cstdint>

// extern "C": the plugin refers to them by these unmangled names.
extern "C" {
extern uint64_t simt_fp32_ops;
extern uint64_t simt_fp64_ops;
extern uint64_t simt_special_ops;
extern uint64_t simt_statements;
}

namespace simt {

struct OpCounts {
  uint64_t fp32 = 0, fp64 = 0, special = 0, statements = 0;
};

// The four counters now; the work of a piece of code is the difference of two snapshots.
OpCounts read_op_counts();

// Whether this build instruments the emulated kernels (the plugin was found): without it every
// count stays 0.
bool op_counts_available();

}  // namespace simt
