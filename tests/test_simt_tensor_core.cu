// The tensor-core instructions on the emulator (kernels/cuda/mma.cuh over simt/tensor_core.h),
// against CPU references written here from the PTX ISA's words, not from the emulator's code:
// each lane's fragment of mma.sync (m16n8k16 bf16 and fp16, m16n8k8 tf32), ldmatrix (.x1, .x2,
// .x4, with and without .trans) and cp.async (sizes, zero fill, groups, the wait), and the
// faults the hardware's rules call for. CUDA, built for the emulator like tests/test_simt.cu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/cuda/mma.cuh"
#include "tests/simt_fixture.h"

namespace {

using tt::bf16;
using tt::f16;

std::string here(int line) { return "test_simt_tensor_core.cu:" + std::to_string(line); }

// ---- the PTX ISA's fragment layouts, written out for the tests ("Matrix Fragments for
// ---- mma.m16n8k16 with floating point type", "... for mma.m16n8k8", .tf32) ----

struct Pos {
  int row, col;
};
// Element i (0..7) of a lane's A fragment, m16n8k16: row g for i in {0,1,4,5}, else g + 8;
// column 2t + (i & 1), plus 8 for i >= 4.
Pos a16(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  const bool top = i < 2 || (i >= 4 && i < 6);
  return {top ? g : g + 8, t * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
}
// Element i (0..3) of B, m16n8k16: row (k) 2t + (i & 1), plus 8 for i >= 2; column g.
Pos b16(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {t * 2 + (i & 1) + (i >= 2 ? 8 : 0), g};
}
// Element i (0..3) of C/D: row g for i < 2, else g + 8; column 2t + (i & 1).
Pos c16(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {i < 2 ? g : g + 8, t * 2 + (i & 1)};
}
// tf32, m16n8k8: A's a0..a3 at rows g, g+8, g, g+8 and columns t, t, t+4, t+4; B's b0, b1 at
// rows t, t+4 of column g.
Pos a8(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {i % 2 == 0 ? g : g + 8, i < 2 ? t : t + 4};
}
Pos b8(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {i == 0 ? t : t + 4, g};
}

// ---- mma.sync ----

// One warp: each lane gathers its fragments from row-major A (16 x K), B (K x 8) and C (16 x 8)
// as the layout above says, runs the instruction, and scatters D back.
template <typename T>
__global__ void mma16_kernel(float* d, const T* a, const T* b, const float* c) {
  const int lane = threadIdx.x;
  uint32_t ra[4], rb[2];
  float rc[4], rd[4];
  for (int r = 0; r < 4; ++r) {
    const Pos lo = a16(lane, 2 * r), hi = a16(lane, 2 * r + 1);
    ra[r] = tt::pack2(a[lo.row * 16 + lo.col], a[hi.row * 16 + hi.col]);
  }
  for (int r = 0; r < 2; ++r) {
    const Pos lo = b16(lane, 2 * r), hi = b16(lane, 2 * r + 1);
    rb[r] = tt::pack2(b[lo.row * 8 + lo.col], b[hi.row * 8 + hi.col]);
  }
  for (int i = 0; i < 4; ++i) rc[i] = c[c16(lane, i).row * 8 + c16(lane, i).col];
  tt::mma_m16n8k16<T>(rd, ra, rb, rc);
  for (int i = 0; i < 4; ++i) d[c16(lane, i).row * 8 + c16(lane, i).col] = rd[i];
}

__global__ void mma8_tf32_kernel(float* d, const float* a, const float* b, const float* c, bool convert) {
  const int lane = threadIdx.x;
  uint32_t ra[4], rb[2];
  float rc[4], rd[4];
  auto operand = [convert](float x) { return convert ? tt::to_tf32(x) : tt::float_bits(x); };
  for (int i = 0; i < 4; ++i) ra[i] = operand(a[a8(lane, i).row * 8 + a8(lane, i).col]);
  for (int i = 0; i < 2; ++i) rb[i] = operand(b[b8(lane, i).row * 8 + b8(lane, i).col]);
  for (int i = 0; i < 4; ++i) rc[i] = c[c16(lane, i).row * 8 + c16(lane, i).col];
  tt::mma_m16n8k8_tf32(rd, ra, rb, rc);
  for (int i = 0; i < 4; ++i) d[c16(lane, i).row * 8 + c16(lane, i).col] = rd[i];
}

// D = A B + C, the products added to C in k order in fp32 (simt/tensor_core.h's model).
std::vector<float> reference(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c,
                             int K) {
  std::vector<float> d(16 * 8);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float acc = c[i * 8 + j];
      for (int k = 0; k < K; ++k) acc += a[i * K + k] * b[k * 8 + j];
      d[i * 8 + j] = acc;
    }
  return d;
}

template <typename T>
std::vector<T> narrow(const std::vector<float>& v) {
  std::vector<T> out;
  for (float x : v) out.push_back(tt::from_float<T>(x));
  return out;
}

// Every element of A names its position (A[i][k] = 16 i + k, exact in bf16 and fp16), B picks
// one column of A per output (B[k][j] = 1 when k = perm(j)) and C adds 1000 j: a fragment
// element in the wrong place changes the output element that shows it.
template <typename T>
void check_fragments_by_position(Simt& s, int shift) {
  std::vector<float> a(16 * 16), b(16 * 8, 0.0f), c(16 * 8);
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) a[i * 16 + k] = static_cast<float>(16 * i + k);
  for (int j = 0; j < 8; ++j) b[((j + shift) % 16) * 8 + j] = 1.0f;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) c[i * 8 + j] = static_cast<float>(1000 * j);
  float* d = s.device<float>(16 * 8);
  mma16_kernel<T><<<1, 32>>>(d, s.device<T>(256, narrow<T>(a)), s.device<T>(128, narrow<T>(b)), s.device<float>(128, c));
  const std::vector<float> got = s.host(d, 16 * 8);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ(got[i * 8 + j], 16 * i + (j + shift) % 16 + 1000 * j) << "D[" << i << "][" << j << "]";
}

TEST_F(Simt, MmaBf16FragmentsLandWhereThePtxIsaPutsThem) {
  for (int shift : {0, 3, 8, 13}) check_fragments_by_position<bf16>(*this, shift);
}

TEST_F(Simt, MmaFp16FragmentsLandWhereThePtxIsaPutsThem) {
  for (int shift : {0, 5, 8, 11}) check_fragments_by_position<f16>(*this, shift);
}

// Random operands: every product is exact in fp32 (8-bit by 8-bit significands, 11 by 11 for
// fp16), so the emulator and the reference add the same values in the same order: equal bits.
template <typename T>
void check_random_mma(Simt& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(256), b(128), c(128);
  for (float& x : a) x = tt::to_float(tt::from_float<T>(normal(rng)));
  for (float& x : b) x = tt::to_float(tt::from_float<T>(normal(rng)));
  for (float& x : c) x = normal(rng);
  float* d = s.device<float>(128);
  mma16_kernel<T><<<1, 32>>>(d, s.device<T>(256, narrow<T>(a)), s.device<T>(128, narrow<T>(b)), s.device<float>(128, c));
  const std::vector<float> want = reference(a, b, c, 16), got = s.host(d, 128);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(got[i], want[i]) << i;
}

TEST_F(Simt, MmaMatchesTheReferenceBitForBitOnRandomOperands) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    check_random_mma<bf16>(*this, seed);
    check_random_mma<f16>(*this, seed);
  }
}

// The model's order made visible: C = 1 and sixteen products of 2^-24: added one at a time in
// fp32, each sum rounds back to 1 (a tie, to even); the exact sum is 1 + 2^-20.
TEST_F(Simt, MmaAddsTheProductsToCOneAtATimeInFp32) {
  std::vector<float> a(256, 0.0f), b(128, 0.0f), c(128, 1.0f);
  for (int k = 0; k < 16; ++k) {
    a[k] = std::ldexp(1.0f, -12);  // row 0
    b[k * 8] = std::ldexp(1.0f, -12);  // column 0
  }
  float* d = device<float>(128);
  mma16_kernel<bf16><<<1, 32>>>(d, device<bf16>(256, narrow<bf16>(a)), device<bf16>(128, narrow<bf16>(b)),
                                device<float>(128, c));
  EXPECT_EQ(host(d, 128)[0], 1.0f);
  EXPECT_EQ(reference(a, b, c, 16)[0], 1.0f);
}

TEST_F(Simt, MmaTf32FragmentsAndTheOperandsLow13BitsIgnored) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<float> a(128), b(64), c(128);
  for (float& x : a) x = static_cast<float>(small(rng));
  for (float& x : b) x = static_cast<float>(small(rng));
  for (float& x : c) x = static_cast<float>(small(rng));
  // A value between two tf32 values (tf32 keeps 10 mantissa bits: steps of 2^-10 near 1),
  // exactly halfway: passed as raw fp32 bits, the tensor core reads 1 + 2^-10 (it ignores the
  // register's low 13 bits); cvt.rna.tf32 rounds the tie away from zero, to 1 + 2^-9.
  const float fine = 1.0f + std::ldexp(1.0f, -10) + std::ldexp(1.0f, -11);
  a[0] = fine;
  for (bool convert : {false, true}) {
    std::vector<float> used_a = a;
    used_a[0] = convert ? 1.0f + std::ldexp(1.0f, -9) : 1.0f + std::ldexp(1.0f, -10);
    float* d = device<float>(128);
    mma8_tf32_kernel<<<1, 32>>>(d, device<float>(128, a), device<float>(64, b), device<float>(128, c), convert);
    const std::vector<float> want = reference(used_a, b, c, 8), got = host(d, 128);
    for (int i = 0; i < 128; ++i) EXPECT_EQ(got[i], want[i]) << (convert ? "cvt.rna, " : "raw bits, ") << i;
  }
}

constexpr int kPartialWarpMmaLine = __LINE__ + 4;
__global__ void mma_on_partial_warp_kernel(float* d) {
  uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float c[4] = {0, 0, 0, 0}, out[4];
  tt::mma_m16n8k16<bf16>(out, a, b, c);
  d[threadIdx.x] = out[0];
}

TEST_F(Simt, MmaWithoutEveryLaneOfTheWarpIsReported) {
  float* d = device<float>(16);
  mma_on_partial_warp_kernel<<<1, 16>>>(d);
  const std::string f = fault();
  EXPECT_NE(f.find("mma.sync"), std::string::npos) << f;
  EXPECT_NE(f.find("every lane of the warp"), std::string::npos) << f;
  EXPECT_NE(f.find(here(kPartialWarpMmaLine)), std::string::npos) << f;
}

// ---- ldmatrix ----

// A shared tile of 4 matrices of 8 x 8 16-bit values, element (m, r, c) = 1000 m + 10 r + c,
// its rows stored in a scrambled order: lane l (8 per matrix) points at row l % 8 of matrix
// l / 8, which sits at slot perm(l) of the tile. Each lane writes out its N registers.
template <int N, bool Trans>
__global__ void ldmatrix_kernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[32][8];
  const int lane = threadIdx.x;
  const int slot = (lane * 13 + 5) % 32;  // a permutation of 0..31
  const int m = lane / 8, r = lane % 8;
  for (int c = 0; c < 8; ++c) tile[slot][c] = static_cast<uint16_t>(1000 * m + 10 * r + c);
  __syncthreads();
  uint32_t regs[N];
  tt::ldmatrix<N, Trans>(regs, &tile[slot][0]);
  for (int j = 0; j < N; ++j) out[lane * N + j] = regs[j];
}

template <int N, bool Trans>
void check_ldmatrix(Simt& s) {
  uint32_t* out = s.device<uint32_t>(32 * N);
  ldmatrix_kernel<N, Trans><<<1, 32>>>(out);
  const std::vector<uint32_t> got = s.host(out, 32 * N);
  // PTX ISA, ldmatrix: lane l receives, of matrix j, row l / 4 and columns 2 (l % 4), +1; with
  // .trans, of the transposed matrix: elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4).
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < N; ++j) {
      const int r = lane / 4, c = 2 * (lane % 4);
      const uint32_t lo = Trans ? 1000 * j + 10 * c + r : 1000 * j + 10 * r + c;
      const uint32_t hi = Trans ? 1000 * j + 10 * (c + 1) + r : 1000 * j + 10 * r + c + 1;
      EXPECT_EQ(got[lane * N + j], lo | (hi << 16)) << "x" << N << (Trans ? ".trans" : "") << " lane " << lane
                                                     << " matrix " << j;
    }
}

TEST_F(Simt, LdmatrixGivesEachLaneItsRowAndColumns) {
  check_ldmatrix<1, false>(*this);
  check_ldmatrix<2, false>(*this);
  check_ldmatrix<4, false>(*this);
  check_ldmatrix<1, true>(*this);
  check_ldmatrix<2, true>(*this);
  check_ldmatrix<4, true>(*this);
}

__global__ void ldmatrix_misaligned_kernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[9][8];
  tile[threadIdx.x / 4][threadIdx.x % 4 * 2] = 0;
  tile[threadIdx.x / 4][threadIdx.x % 4 * 2 + 1] = 0;
  __syncthreads();
  uint32_t regs[1];
  const char* row = reinterpret_cast<const char*>(&tile[threadIdx.x % 8][0]) + (threadIdx.x == 3 ? 8 : 0);
  tt::ldmatrix<1>(regs, row);
  out[threadIdx.x] = regs[0];
}

__global__ void ldmatrix_from_global_kernel(uint32_t* out, const uint16_t* global) {
  uint32_t regs[1];
  tt::ldmatrix<1>(regs, global + 8 * (threadIdx.x % 8));
  out[threadIdx.x] = regs[0];
}

TEST_F(Simt, LdmatrixRowsMustBeAlignedSharedMemory) {
  uint32_t* out = device<uint32_t>(32);
  ldmatrix_misaligned_kernel<<<1, 32>>>(out);
  std::string f = fault();
  EXPECT_NE(f.find("ldmatrix"), std::string::npos) << f;
  EXPECT_NE(f.find("lane 3"), std::string::npos) << f;
  EXPECT_NE(f.find("16-byte"), std::string::npos) << f;
  cudaDeviceReset();
  out = device<uint32_t>(32);
  ldmatrix_from_global_kernel<<<1, 32>>>(out, device<uint16_t>(64, std::vector<uint16_t>(64, 1)));
  f = fault();
  EXPECT_NE(f.find("not 16 bytes inside the block's shared memory"), std::string::npos) << f;
}

// ---- cp.async ----

// Thread t copies 16 bytes (4 floats) of `in` into its slot of a shared tile in two groups
// (the tile's halves), waits as `wait` says, and writes what it then sees of its own slot.
// src_bytes: how many of the 16 come from `in` (the rest is zero).
template <int Wait>
__global__ void cp_async_kernel(float* out, const float* in, int src_bytes) {
  __shared__ __align__(16) float tile[2][32][4];
  const int t = threadIdx.x;
  tt::cp_async<16>(&tile[0][t][0], in + 4 * t, src_bytes);
  tt::cp_async_commit_group();
  tt::cp_async<16>(&tile[1][t][0], in + 128 + 4 * t, src_bytes);
  tt::cp_async_commit_group();
  tt::cp_async_wait_group<Wait>();
  for (int i = 0; i < 4; ++i) {
    out[t * 8 + i] = tile[0][t][i];
    out[t * 8 + 4 + i] = tile[1][t][i];
  }
}

TEST_F(Simt, CpAsyncLandsAGroupAtItsWaitAndZeroFillsPastTheSource) {
  std::vector<float> in(256);
  for (int i = 0; i < 256; ++i) in[i] = static_cast<float>(i + 1);
  const float* d_in = device<float>(256, in);
  for (int src_bytes : {16, 8, 0}) {
    float* out = device<float>(256);
    cp_async_kernel<0><<<1, 32>>>(out, d_in, src_bytes);
    const std::vector<float> got = host(out, 256);
    for (int t = 0; t < 32; ++t)
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(got[t * 8 + i], i * 4 < src_bytes ? in[4 * t + i] : 0.0f) << src_bytes << " " << t << " " << i;
        EXPECT_EQ(got[t * 8 + 4 + i], i * 4 < src_bytes ? in[128 + 4 * t + i] : 0.0f);
      }
  }
  // wait_group 1: the older group has landed, the newer one may not have: its bytes are 0xff
  // here (NaN as floats), the emulator's way of showing a read that came too early.
  float* out = device<float>(256);
  cp_async_kernel<1><<<1, 32>>>(out, d_in, 16);
  const std::vector<float> got = host(out, 256);
  for (int t = 0; t < 32; ++t)
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got[t * 8 + i], in[4 * t + i]);
      uint32_t bits;
      std::memcpy(&bits, &got[t * 8 + 4 + i], 4);
      EXPECT_EQ(bits, 0xffffffffu) << t << " " << i;
    }
}

__global__ void cp_async_cg_8_bytes_kernel(const float* in) {
  __shared__ __align__(16) float tile[4];
  ::simt::cp_async(tile, in, 8, 8, /*cache_global=*/true, __FILE__, __LINE__);
}

__global__ void cp_async_misaligned_kernel(const float* in) {
  __shared__ __align__(16) float tile[8];
  tt::cp_async<16>(tile, in + 1);
}

__global__ void cp_async_to_global_kernel(float* out, const float* in) { tt::cp_async<16>(out, in); }

TEST_F(Simt, CpAsyncIsRefusedWhereTheHardwareRefusesIt) {
  const float* in = device<float>(16, std::vector<float>(16, 1.0f));
  cp_async_cg_8_bytes_kernel<<<1, 1>>>(in);
  std::string f = fault();
  EXPECT_NE(f.find(".cg copies 16 bytes only"), std::string::npos) << f;
  cudaDeviceReset();
  in = device<float>(16, std::vector<float>(16, 1.0f));
  cp_async_misaligned_kernel<<<1, 1>>>(in);
  f = fault();
  EXPECT_NE(f.find("aligned to the copy's 16 bytes"), std::string::npos) << f;
  cudaDeviceReset();
  in = device<float>(16, std::vector<float>(16, 1.0f));
  cp_async_to_global_kernel<<<1, 1>>>(device<float>(16), in);
  f = fault();
  EXPECT_NE(f.find("destination is not 16 bytes of the block's shared memory"), std::string::npos) << f;
}

template <typename T>
__global__ void pack_rn_kernel(uint32_t* out, const float* in, int n) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < n) out[i] = tt::pack_rn<T>(in[2 * i], in[2 * i + 1]);
}

// pack_rn (cvt.rn.bf16x2.f32 / .f16x2) rounds as from_float does, lo in the low half: values
// halfway between two 16-bit neighbours (ties to even), past fp16's range, subnormal in fp16.
template <typename T>
void check_pack_rn(Simt& simt) {
  std::vector<float> in = {1.0f, -2.5f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 70000.0f, -1e-6f, 3.14159f, 1e-30f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
  while (in.size() < 64) in.push_back(uniform(rng));
  const int n = static_cast<int>(in.size()) / 2;
  uint32_t* out = simt.device<uint32_t>(n);
  pack_rn_kernel<T><<<1, 32>>>(out, simt.device<float>(in.size(), in), n);
  const std::vector<uint32_t> got = simt.host(out, n);
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(got[i], tt::pack2(tt::from_float<T>(in[2 * i]), tt::from_float<T>(in[2 * i + 1])))
        << in[2 * i] << ", " << in[2 * i + 1];
}

TEST_F(Simt, PackRnRoundsTwoFloatsAsFromFloatDoes) {
  check_pack_rn<bf16>(*this);
  check_pack_rn<f16>(*this);
}

// A thread reads another thread's slot after its own wait but without a barrier: the other
// thread's copy may not have landed. racecheck names it (the copy is that thread's write).
__global__ void cp_async_without_barrier_kernel(float* out, const float* in) {
  __shared__ __align__(16) float tile[32][4];
  const int t = threadIdx.x;
  tt::cp_async<16>(&tile[t][0], in + 4 * t);
  tt::cp_async_commit_group();
  tt::cp_async_wait_group<0>();
  out[t] = tile[(t + 1) % 32][0];
}

TEST_F(Simt, ReadingAnotherThreadsCopyWithoutABarrierIsARace) {
  if (!simt::detail::memory_watch_available()) GTEST_SKIP() << "this build does not watch the kernels' accesses";
  float* out = device<float>(32);
  cp_async_without_barrier_kernel<<<1, 32>>>(out, device<float>(128, std::vector<float>(128, 2.0f)));
  const std::string f = fault();
  EXPECT_NE(f.find("racecheck"), std::string::npos) << f;
}

// ---- counted in counting mode ----

TEST_F(Simt, TensorCoreInstructionsAreCounted) {
  simt::set_counting(true);
  float* d = device<float>(128);
  mma16_kernel<bf16><<<1, 32>>>(d, device<bf16>(256, std::vector<bf16>(256, bf16{0})),
                                device<bf16>(128, std::vector<bf16>(128, bf16{0})),
                                device<float>(128, std::vector<float>(128, 0.0f)));
  uint32_t* out = device<uint32_t>(32 * 4);
  ldmatrix_kernel<4, false><<<1, 32>>>(out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<simt::LaunchRecord> records = simt::take_launch_records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].counters.mma_bf16, 1u);
  EXPECT_EQ(records[0].counters.mma_flops(), 2u * 16 * 8 * 16);
  EXPECT_EQ(records[1].counters.ldmatrix, 1u);
  if (simt::detail::memory_watch_available()) {
    // The x4 reads 32 rows of 16 bytes in 4 passes of 8 rows (lanes 8p..8p+7). Row slot s starts
    // at byte 16 s of the 128-byte-aligned tile: banks 4 (s % 8) .. 4 (s % 8) + 3. Rows of one
    // pass that share s % 8 conflict, so a pass takes the most rows any s % 8 has.
    uint64_t wavefronts = 0;
    for (int pass = 0; pass < 4; ++pass) {
      int rows_on[8] = {};
      int most = 0;
      for (int lane = 8 * pass; lane < 8 * pass + 8; ++lane) most = std::max(most, ++rows_on[(lane * 13 + 5) % 32 % 8]);
      wavefronts += static_cast<uint64_t>(most);
    }
    EXPECT_EQ(records[1].counters.shared_load_wavefronts, wavefronts);
    EXPECT_EQ(records[1].counters.shared_load_bytes, 512u);  // the kernel's only shared loads
    EXPECT_EQ(records[1].counters.shared_load_requests, 1u);
  }
}

}  // namespace
