// The per-kernel cost model (engine/profile/kernel_model.h) on launch records written here:
// each pipe turns its count into time at the H200's rates (NVIDIA's H200 datasheet: HBM3e 4.8
// TB/s, fp32 66.9 TFLOP/s, bf16 989.4 dense; the H100 whitepaper's SM: 132 SMs, 4 schedulers,
// 32 banks, 16 special-function units; 1.98 GHz), the slowest pipe bounds the launch, a grid
// smaller than the GPU uses part of it, and occupancy follows threads and shared memory. The
// expected times are the arithmetic of those figures, written out here.
#include <gtest/gtest.h>

#include "engine/profile/device_model.h"
#include "engine/profile/kernel_model.h"

namespace tt::test {
namespace {

const DeviceModel& h200() {
  static const DeviceModel d = *find_device_model("h200");
  return d;
}

simt::LaunchRecord launch(uint64_t blocks, unsigned threads) {
  simt::LaunchRecord r;
  r.kernel = "k";
  r.counters.blocks = blocks;
  r.counters.threads_per_block = threads;
  return r;
}

constexpr double kLatencyUs = 1.5;  // the model's node latency

TEST(KernelModel, UncoalescedLoadsCostTheirSectors) {
  // a million warp loads of 32 floats: consecutive (4 sectors each) or 128 bytes apart (32)
  simt::LaunchRecord coalesced = launch(264, 256), strided = launch(264, 256);
  coalesced.counters.global_load_sectors = 4'000'000;
  strided.counters.global_load_sectors = 32'000'000;
  const LaunchModel a = model_launch(coalesced, h200()), b = model_launch(strided, h200());
  EXPECT_DOUBLE_EQ(a.pipe_us[kDram], 4e6 * 32 / 4.8e12 * 1e6);  // 26.7 us at 4.8 TB/s
  EXPECT_DOUBLE_EQ(b.pipe_us[kDram], 8 * a.pipe_us[kDram]);
  EXPECT_EQ(b.bound, kDram);
  EXPECT_DOUBLE_EQ(b.modelled_us, b.pipe_us[kDram] + kLatencyUs);
}

TEST(KernelModel, TheSlowestPipeBoundsTheLaunch) {
  // 264 blocks: two on every SM, so the busiest SM does 1/132 of the work
  simt::LaunchRecord r = launch(264, 256);
  r.counters.fp32_ops = 66'900'000'000;          // 1 ms at 66.9 TFLOP/s
  r.counters.global_load_sectors = 15'000'000;   // 0.1 ms at 4.8 TB/s
  r.counters.shared_load_wavefronts = 132'000'000;  // 1e6 per SM at one a clock: 0.505 ms
  const LaunchModel m = model_launch(r, h200());
  EXPECT_NEAR(m.pipe_us[kFp32], 1000.0, 1e-6);
  EXPECT_NEAR(m.pipe_us[kDram], 100.0, 1e-6);
  EXPECT_NEAR(m.pipe_us[kShared], 1e6 / 1.98e9 * 1e6, 1e-6);
  EXPECT_EQ(m.bound, kFp32);
  EXPECT_NEAR(m.modelled_us, 1000.0 + kLatencyUs, 1e-6);
  EXPECT_EQ(m.active_sms, 132);
}

TEST(KernelModel, AGridOfFewerBlocksThanSmsUsesPartOfTheGpu) {
  simt::LaunchRecord one = launch(1, 256), full = launch(132, 256);
  for (simt::LaunchRecord* r : {&one, &full}) {
    r->counters.fp32_ops = 1'000'000'000;
    r->counters.global_load_sectors = 1'000'000;
  }
  const LaunchModel a = model_launch(one, h200()), b = model_launch(full, h200());
  // one SM does all of it: 132 times the time of the whole GPU, and draws 1/132 of the bandwidth
  EXPECT_NEAR(a.pipe_us[kFp32], 132 * b.pipe_us[kFp32], 1e-9);
  EXPECT_NEAR(a.pipe_us[kDram], 132 * b.pipe_us[kDram], 1e-9);
  EXPECT_EQ(a.active_sms, 1);
  // 133 blocks: the busiest SM runs two, the others one
  simt::LaunchRecord uneven = launch(133, 256);
  uneven.counters.fp32_ops = 133'000'000'000;
  EXPECT_NEAR(model_launch(uneven, h200()).pipe_us[kFp32], 2e9 / (66.9e12 / 132) * 1e6, 1e-6);
}

TEST(KernelModel, TensorCoresAtMmaSyncsShareOfThePeak) {
  simt::LaunchRecord r = launch(132 * 4, 128);
  r.counters.mma_bf16 = 1'000'000;  // 4096 FLOPs each
  r.counters.mma_tf32 = 1'000'000;  // 2048 FLOPs each
  const LaunchModel m = model_launch(r, h200());
  EXPECT_NEAR(m.pipe_us[kTensor], (4.096e9 / (989.4e12 * 0.625) + 2.048e9 / (494.7e12 * 0.625)) * 1e6, 1e-9);
  EXPECT_EQ(m.bound, kTensor);
}

TEST(KernelModel, IssueAndSpecialFunctionRates) {
  simt::LaunchRecord r = launch(132, 256);
  r.counters.statements = 32 * 132 * 4'000'000ull;  // 4e6 warp instructions per SM at 4 a clock
  r.counters.special_ops = 132 * 16'000'000ull;    // 16e6 per SM at 16 a clock
  const LaunchModel m = model_launch(r, h200());
  EXPECT_NEAR(m.pipe_us[kIssue], 1e6 / 1.98e9 * 1e6, 1e-6);
  EXPECT_NEAR(m.pipe_us[kSpecial], 1e6 / 1.98e9 * 1e6, 1e-6);
}

TEST(KernelModel, OccupancyFollowsThreadsAndSharedMemory) {
  EXPECT_EQ(model_launch(launch(1000, 1024), h200()).blocks_per_sm, 2);  // 2048 threads an SM
  EXPECT_EQ(model_launch(launch(1000, 32), h200()).blocks_per_sm, 32);   // the block limit
  simt::LaunchRecord shared = launch(1000, 128);
  shared.counters.shared_bytes_per_block = 100 * 1024;  // + 1 KiB each: two fit in 228 KiB
  EXPECT_EQ(model_launch(shared, h200()).blocks_per_sm, 2);
  EXPECT_EQ(model_launch(shared, h200()).waves, 4);  // 1000 blocks, 264 at a time
}

TEST(KernelModel, ALibraryCallIsItsIdealBound) {
  simt::LaunchRecord gemm;
  gemm.kernel = "cublasLtMatmul";
  gemm.library = true;
  gemm.library_flops = 2.0 * 8192 * 3072 * 768;
  gemm.library_bytes = 2ull * (8192 * 768 + 3072 * 768 + 8192 * 3072);
  gemm.library_precision = "bf16";
  const LaunchModel m = model_launch(gemm, h200());
  EXPECT_NEAR(m.pipe_us[kTensor], gemm.library_flops / 989.4e12 * 1e6, 1e-9);
  EXPECT_NEAR(m.pipe_us[kDram], gemm.library_bytes / 4.8e12 * 1e6, 1e-9);
  EXPECT_EQ(m.bound, kTensor);
}

}  // namespace
}  // namespace tt::test
