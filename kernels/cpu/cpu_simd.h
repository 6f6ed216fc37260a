// The widest vector instructions the CPU backend's hand-written loops may use. The build targets
// x86-64-v3 (AVX2 and FMA); AVX-512F code is compiled per function and runs only where the CPU
// has it, chosen at run time. Every width computes the same bits: the vector code keeps each
// sum's order and does IEEE float operations lane by lane, so a width only changes the speed.
// Tests pin each width the machine has and compare them.
//
// TINYTRAIN_CPU_SIMD=scalar|avx2|avx512 caps the width (as PyTorch's ATEN_CPU_CAPABILITY and
// OpenBLAS's OPENBLAS_CORETYPE do theirs), so an AVX-512 machine can measure what an AVX2-only
// one runs; tools/bench_cpu.py --isa avx2 sets all three.
#pragma once

namespace tt {

enum class CpuSimd { Scalar, Avx2, Avx512 };

// The widest this CPU and this build can run, whatever the cap.
CpuSimd detected_cpu_simd();

// The widest the loops use: detected_cpu_simd() capped by TINYTRAIN_CPU_SIMD. Throws InputError
// (one line) when that variable holds anything but scalar, avx2 or avx512.
CpuSimd best_cpu_simd();

const char* cpu_simd_name(CpuSimd simd);  // "scalar", "avx2", "avx512"

}  // namespace tt
