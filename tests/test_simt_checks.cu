// The emulator's memory checks and counters (simt/memory_watch.h, simt/launch_counters.h) on
// kernels written here to break one rule each: racecheck (shared-memory hazards between
// barriers), initcheck (reads of device memory nothing wrote), the fence check (a block reading
// what another block of the launch wrote without release and acquire), blocks running
// interleaved, and the per-launch counts the cost model reads (sectors, wavefronts, warp
// instructions, arithmetic). Expected values follow from the kernels and the hardware's
// documented rules, worked out in the comments. CUDA, built for the emulator like test_simt.cu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "simt/op_counts.h"
#include "tests/simt_fixture.h"

namespace {

std::string here(int line) { return "test_simt_checks.cu:" + std::to_string(line); }

const simt::Schedule kForward{simt::Order::Forward, 1}, kReverse{simt::Order::Reverse, 1}, kRandom{simt::Order::Random, 7};

class Checks : public Simt {
 protected:
  void SetUp() override {
    if (!simt::detail::memory_watch_available())
      GTEST_SKIP() << "this build does not watch the emulated kernels' accesses (the sanitizer build)";
  }
};

// ---- racecheck ----

// Each thread writes its slot, then reads its neighbour's, with or without a barrier between.
constexpr int kRaceWriteLine = __LINE__ + 4;
constexpr int kRaceReadLine = __LINE__ + 5;
__global__ void neighbour_kernel(int* out, bool barrier) {
  __shared__ int slot[64];
  slot[threadIdx.x] = static_cast<int>(threadIdx.x);
  if (barrier) __syncthreads();
  out[threadIdx.x] = slot[(threadIdx.x + 1) % 64];
}

TEST_F(Checks, RacecheckReportsAnUnorderedReadAfterWriteInEverySchedule) {
  for (const simt::Schedule& schedule : {kForward, kReverse, kRandom}) {
    simt::set_schedule(schedule);
    neighbour_kernel<<<1, 64>>>(device<int>(64), false);
    const std::string f = fault();
    SCOPED_TRACE(simt::schedule_name(schedule));
    EXPECT_NE(f.find("shared-memory race (racecheck"), std::string::npos) << f;
    EXPECT_NE(f.find(here(kRaceWriteLine)), std::string::npos) << f;
    EXPECT_NE(f.find(here(kRaceReadLine)), std::string::npos) << f;
    cudaDeviceReset();
  }
}

TEST_F(Checks, RacecheckAcceptsTheBarrier) {
  int* out = device<int>(64);
  neighbour_kernel<<<1, 64>>>(out, true);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int> got = host(out, 64);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(got[t], (t + 1) % 64);
}

// Lanes read the slot of lane t ^ 1 (always in the same warp), or of t + 32 (the other warp).
__global__ void warp_neighbour_kernel(int* out, bool other_warp) {
  __shared__ int slot[64];
  slot[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncwarp();
  out[threadIdx.x] = slot[other_warp ? (threadIdx.x + 32) % 64 : threadIdx.x ^ 1u];
}

TEST_F(Checks, ASyncwarpOrdersItsOwnWarpOnly) {
  int* out = device<int>(64);
  warp_neighbour_kernel<<<1, 64>>>(out, false);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int> got = host(out, 64);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(got[t], t ^ 1);
  warp_neighbour_kernel<<<1, 64>>>(out, true);
  const std::string f = fault();
  EXPECT_NE(f.find("racecheck"), std::string::npos) << f;
}

// Every thread reads a flag, then thread 0 overwrites it with no barrier between.
constexpr int kWarWriteLine = __LINE__ + 6;
__global__ void write_after_read_kernel(int* out) {
  __shared__ int flag;
  if (threadIdx.x == 0) flag = 1;
  __syncthreads();
  out[threadIdx.x] = flag;
  if (threadIdx.x == 0) flag = 2;
}

TEST_F(Checks, RacecheckReportsAWriteAfterOtherThreadsRead) {
  for (const simt::Schedule& schedule : {kForward, kReverse, kRandom}) {
    simt::set_schedule(schedule);
    write_after_read_kernel<<<1, 64>>>(device<int>(64));
    const std::string f = fault();
    SCOPED_TRACE(simt::schedule_name(schedule));
    EXPECT_NE(f.find("racecheck"), std::string::npos) << f;
    // In forward order thread 0 writes before the others read (a read after write); in the
    // others a reader comes first (a write after read). Either way the write's line is named.
    EXPECT_NE(f.find(here(kWarWriteLine)), std::string::npos) << f;
    cudaDeviceReset();
  }
}

// 16-bit elements written by neighbouring threads share a 4-byte word, but not a byte: no race.
// Atomics on one shared counter: no race either.
__global__ void halves_and_atomics_kernel(uint16_t* out, int* total) {
  __shared__ uint16_t halves[64];
  __shared__ int counter;
  if (threadIdx.x == 0) counter = 0;
  __syncthreads();
  halves[threadIdx.x] = static_cast<uint16_t>(threadIdx.x);
  atomicAdd(&counter, 1);
  __syncthreads();
  out[threadIdx.x] = halves[63 - threadIdx.x];
  if (threadIdx.x == 0) *total = counter;
}

TEST_F(Checks, NeighbouringHalvesOfAWordAndAtomicsAreNotRaces) {
  uint16_t* out = device<uint16_t>(64);
  int* total = device<int>(1);
  halves_and_atomics_kernel<<<1, 64>>>(out, total);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(host(total, 1)[0], 64);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(host(out, 64)[t], 63 - t);
}

// ---- initcheck ----

constexpr int kUnwrittenReadLine = __LINE__ + 2;
__global__ void copy_kernel(float* out, const float* in, int n) {
  if (static_cast<int>(threadIdx.x) < n) out[threadIdx.x] = in[threadIdx.x] + 1.0f;
}

TEST_F(Checks, InitcheckReportsAReadOfMemoryNothingWrote) {
  float* in = device<float>(64);
  float* out = device<float>(64);
  // the first 48 elements copied in, the rest never written
  const std::vector<float> values(48, 2.0f);
  ASSERT_EQ(cudaMemcpy(in, values.data(), 48 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  copy_kernel<<<1, 64>>>(out, in, 48);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  copy_kernel<<<1, 64>>>(out, in, 64);
  const std::string f = fault();
  EXPECT_NE(f.find("uninitialized device memory (initcheck)"), std::string::npos) << f;
  EXPECT_NE(f.find("offset 192 of a 256-byte device allocation"), std::string::npos) << f;  // element 48
  EXPECT_NE(f.find(here(kUnwrittenReadLine)), std::string::npos) << f;
  cudaDeviceReset();
  // a memset counts as written, and so does a kernel's store
  in = device<float>(64);
  out = device<float>(64);
  ASSERT_EQ(cudaMemset(in, 0, 64 * sizeof(float)), cudaSuccess);
  copy_kernel<<<1, 64>>>(out, in, 64);
  copy_kernel<<<1, 64>>>(in, out, 64);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---- the fence check: a last-block reduction ----

// Each block stores its partial sum; the last block to take a ticket adds the partials. `release`:
// thread 0 fences after its store, before its ticket (the writers' side); `acquire`: the last
// block fences after its ticket, before it reads the partials (the reader's side).
__global__ void last_block_sum_kernel(const int* in, int* partials, unsigned* tickets, int* total, bool release,
                                      bool acquire) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += in[blockIdx.x * 32 + i];
    partials[blockIdx.x] = sum;
    if (release) __threadfence();
    last = atomicAdd(tickets, 1u) == gridDim.x - 1;
    if (last && acquire) __threadfence();
  }
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  int sum = 0;
  for (unsigned b = 0; b < gridDim.x; ++b) sum += partials[b];
  *total = sum;
  *tickets = 0;
}

void run_last_block_sum(Simt& s, bool release, bool acquire) {
  std::vector<int> in(8 * 32);
  for (int i = 0; i < 8 * 32; ++i) in[i] = i;
  int* total = s.device<int>(1);
  last_block_sum_kernel<<<8, 32>>>(s.device<int>(8 * 32, in), s.device<int>(8), s.device<unsigned>(1, {0u}), total,
                                   release, acquire);
  if (release && acquire) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(s.host(total, 1)[0], 8 * 32 * (8 * 32 - 1) / 2);
  }
}

TEST_F(Checks, ALastBlockReductionNeedsAFenceOnEachSide) {
  for (const simt::Schedule& schedule : {kForward, kReverse, kRandom}) {
    SCOPED_TRACE(simt::schedule_name(schedule));
    simt::set_schedule(schedule);
    run_last_block_sum(*this, true, true);
    run_last_block_sum(*this, false, true);
    std::string f = fault();
    EXPECT_NE(f.find("stale read across blocks (fence check)"), std::string::npos) << f;
    EXPECT_NE(f.find("no __threadfence between that write and an atomic"), std::string::npos) << f;
    cudaDeviceReset();
    run_last_block_sum(*this, true, false);
    f = fault();
    EXPECT_NE(f.find("this block has no __threadfence between an atomic after that release and this read"),
              std::string::npos)
        << f;
    cudaDeviceReset();
  }
}

// ---- blocks run interleaved ----

// Each block takes a ticket before and after a barrier: with blocks run one after another,
// block 0 would take tickets 0 and 1, block 1 tickets 2 and 3. Interleaved, block 1 takes its
// first ticket while block 0 waits at the barrier.
__global__ void two_phase_kernel(unsigned* order, unsigned* tickets) {
  if (threadIdx.x == 0) order[blockIdx.x * 2] = atomicAdd(tickets, 1u);
  __syncthreads();
  if (threadIdx.x == 0) order[blockIdx.x * 2 + 1] = atomicAdd(tickets, 1u);
}

TEST_F(Simt, BlocksRunInterleavedHandingOverAtBarriers) {
  for (const simt::Schedule& schedule : {kForward, kReverse}) {
    simt::set_schedule(schedule);
    unsigned* order = device<unsigned>(8);
    two_phase_kernel<<<4, 64>>>(order, device<unsigned>(1, {0u}));
    const std::vector<unsigned> got = host(order, 8);
    // forward: blocks 0 and 1 resident; each hands over at its barrier: 0a 1a 0b 1b, then 2 and 3
    const bool forward = schedule.order == simt::Order::Forward;
    const unsigned first = forward ? 0 : 3, second = forward ? 1 : 2;
    EXPECT_EQ(got[first * 2], 0u) << simt::schedule_name(schedule);
    EXPECT_EQ(got[second * 2], 1u);
    EXPECT_EQ(got[first * 2 + 1], 2u);
    EXPECT_EQ(got[second * 2 + 1], 3u);
  }
}

// ---- the counts ----

// Warp-wide loads: consecutive floats (4 sectors per warp), a stride of 32 floats (32 sectors),
// and shared memory with a stride of 1 word (1 wavefront) or 32 words (all 32 lanes on bank 0:
// 32 wavefronts); then one shuffle, one barrier and one multiply-add per thread.
__global__ void counted_kernel(float* out, const float* in, int stride) {
  __shared__ float tile[32 * 32];
  const int lane = threadIdx.x;
  const float v = in[lane * stride];
  tile[lane * stride] = v;
  __syncthreads();
  const float w = tile[lane * stride];
  const float shuffled = __shfl_xor_sync(0xffffffffu, w, 1);
  out[lane] = shuffled * v + w;
}

TEST_F(Checks, CountsShowCoalescingAndBankConflicts) {
  simt::set_counting(true);
  float* in = device<float>(32 * 32, std::vector<float>(32 * 32, 1.0f));
  float* out = device<float>(32);
  counted_kernel<<<1, 32>>>(out, in, 1);
  counted_kernel<<<1, 32>>>(out, in, 32);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<simt::LaunchRecord> r = simt::take_launch_records();
  ASSERT_EQ(r.size(), 2u);
  const simt::LaunchCounters &unit = r[0].counters, &strided = r[1].counters;
  EXPECT_EQ(r[0].kernel, "counted_kernel");
  // one load request each: 32 x 4 bytes, in 128 contiguous bytes (4 sectors) or 32 sectors
  EXPECT_EQ(unit.global_load_requests, 1u);
  EXPECT_EQ(unit.global_load_bytes, 128u);
  EXPECT_EQ(unit.global_load_sectors, 4u);
  EXPECT_EQ(strided.global_load_sectors, 32u);
  EXPECT_EQ(unit.global_store_sectors, 4u);  // out[lane]
  // shared: one store and one load, 1 wavefront each, or 32 with every lane on bank 0
  EXPECT_EQ(unit.shared_store_wavefronts, 1u);
  EXPECT_EQ(unit.shared_load_wavefronts, 1u);
  EXPECT_EQ(strided.shared_store_wavefronts, 32u);
  EXPECT_EQ(strided.shared_load_wavefronts, 32u);
  EXPECT_EQ(unit.shuffles, 1u);  // one warp-wide shuffle
  EXPECT_EQ(unit.barriers, 1u);
  EXPECT_EQ(unit.blocks, 1u);
  EXPECT_EQ(unit.threads_per_block, 32u);
  EXPECT_EQ(unit.shared_bytes_per_block, 32u * 32 * 4);
  if (simt::op_counts_available()) EXPECT_EQ(unit.fp32_ops, 32u * 2);  // a multiply and an add per thread
}

// Block sampling (profile --sample-blocks): a launch runs a sample of its blocks and scales its
// counts to the grid. Blocks that do the same work give the same counts as the whole grid.
__global__ void copy_rows_kernel(float* out, const float* in) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i] * 2.0f;
}

TEST_F(Checks, ASampledLaunchScalesItsCountsToTheGrid) {
  float* in = device<float>(64 * 32, std::vector<float>(64 * 32, 1.0f));
  float* out = device<float>(64 * 32);
  simt::set_counting(true);
  copy_rows_kernel<<<64, 32>>>(out, in);
  simt::set_block_sampling(8);
  copy_rows_kernel<<<64, 32>>>(out, in);
  simt::set_block_sampling(0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<simt::LaunchRecord> r = simt::take_launch_records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].blocks_run, 64u);
  EXPECT_EQ(r[1].blocks_run, 8u);
  const simt::LaunchCounters &whole = r[0].counters, &sampled = r[1].counters;
  EXPECT_EQ(sampled.blocks, whole.blocks);
  EXPECT_EQ(whole.global_load_sectors, 64u * 4);  // a warp's 32 floats: 4 sectors, once per block
  EXPECT_EQ(sampled.global_load_sectors, whole.global_load_sectors);
  EXPECT_EQ(sampled.global_store_bytes, whole.global_store_bytes);
  EXPECT_EQ(sampled.fp32_ops, whole.fp32_ops);
  EXPECT_EQ(sampled.statements, whole.statements);
}

}  // namespace
