// The widest vector instructions the CPU backend's hand-written loops may use. The build targets
// x86-64-v3 (AVX2 and FMA); AVX-512F code is compiled per function and runs only where the CPU
// has it, chosen at run time. Every width computes the same bits: the vector code keeps each
// sum's order and does IEEE float operations lane by lane, so a width only changes the speed.
// Tests pin each width the machine has and compare them.
#pragma once

namespace tt {

enum class CpuSimd { Scalar, Avx2, Avx512 };

// The widest this CPU (and this build) runs.
CpuSimd best_cpu_simd();

}  // namespace tt
