// The tensor-core instructions on the emulator: the bodies kernels/cuda/mma.cuh uses in place of
// its inline PTX. Each moves every lane's fragment as the PTX ISA lays it out (section "Warp
// Level Matrix Multiply-Accumulate Instructions": "Matrix Fragments for mma.m16n8k16 with
// floating point type", "Matrix Fragments for mma.m16n8k8" (.tf32), and ldmatrix's "Warp-level
// matrix load instruction"), and faults where the hardware's rules are broken:
//   - mma.sync and ldmatrix are .sync.aligned: all 32 lanes of the warp, at one instruction;
//   - ldmatrix reads shared memory only, each row address 16-byte aligned;
//   - cp.async copies global to shared memory, both addresses aligned to the copy's size
//     (.cg: 16 bytes only), and its data lands only at cp.async.wait_group: until then the
//     destination holds 0xff bytes, so a kernel that reads before it waits reads garbage.
// The accumulation model (docs/emulation.md, "Tensor cores"): each product of two inputs is
// exact in fp32 (bf16 x bf16, fp16 x fp16 and tf32 x tf32 all fit 24 bits), and the products are
// added to C one at a time in k order, each sum rounded to nearest in fp32. A GPU adds groups of
// products with its own alignment and truncation, so the bits may differ by a few ulps of the
// largest term: results are compared with tolerances, never bit for bit against hardware.
#pragma once
#include <cstdint>

#include "simt/memory_watch.h"

namespace simt {

enum class MmaInput : uint8_t { BF16, FP16, TF32 };

// d (16x8 fp32) = a b + c for a warp: m16n8k16 for bf16/fp16 (a: 4 registers of 2 elements, b:
// 2 of 2), m16n8k8 for tf32 (a: 4 registers, b: 2, one element each). d may be c.
void mma_sync(MmaInput input, float* d, const uint32_t* a, const uint32_t* b, const float* c, const char* file,
              int line);

// cvt.rn.{bf16x2,f16x2}.f32: lo and hi rounded to nearest even, packed (lo in the low half). One
// instruction on the GPU, so one statement in the emulated kernels' counts.
uint32_t cvt_pack(MmaInput type, float lo, float hi);

// ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: lanes 8j..8j+7 give the row addresses
// of matrix j; each lane receives one register of each matrix.
void ldmatrix(int count, bool trans, uint32_t* regs, const void* row, const char* file, int line);

// cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes: the first src_bytes come from
// src, the rest of `bytes` are zero; commit_group closes the thread's batch of copies into a
// group; wait_group(n) lands every group but the n most recent.
void cp_async(void* dst, const void* src, int bytes, int src_bytes, bool cache_global, const char* file, int line);
void cp_async_commit_group();
void cp_async_wait_group(int n);

namespace detail {
// A thread that exits with copies in flight: they land (as the hardware completes them).
void cp_async_thread_exit(BlockWatch& block, unsigned thread);
// A block that ends (or is abandoned by a fault): its threads' queues are dropped.
void cp_async_block_end(BlockWatch& block);
}  // namespace detail

}  // namespace simt
