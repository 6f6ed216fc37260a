// The SIMT emulator itself (simt/), on kernels written for it here: this file is CUDA, built
// like kernels/cuda/ for the emulator (simt/rewrite_cu.py, then g++ with simt/simt.h). It checks
// what the emulator promises (docs/emulation.md): warp operations and barriers with CUDA's
// meaning, block-shared memory and atomics; launch configurations refused as the hardware
// refuses them; a divergent barrier, a bad warp mask and a deadlock reported with the file and
// line instead of a hang or garbage; graph capture refusing what real capture refuses; the
// emulated cuBLASLt refusing what the library refuses; and why one schedule is not enough.
// Expected values come from CUDA's documented rules, written out here independently.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cub/device/device_radix_sort.cuh>  // the emulated one (simt/cub_api.h)

#include "simt/schedule.h"
#include "tests/simt_fixture.h"

namespace {

std::string here(int line) { return "test_simt.cu:" + std::to_string(line); }

// ---- warp operations, as the CUDA programming guide defines them ----

__global__ void shuffles_kernel(int* out, int width, int xor_mask) {
  const int lane = threadIdx.x;
  const int v = 100 + lane;
  out[0 * 32 + lane] = __shfl_sync(0xffffffffu, v, lane + 3, width);
  out[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, v, 2, width);
  out[2 * 32 + lane] = __shfl_down_sync(0xffffffffu, v, 2, width);
  out[3 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, xor_mask, width);
  out[4 * 32 + lane] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  out[5 * 32 + lane] = __any_sync(0xffffffffu, lane == 7);
  out[6 * 32 + lane] = __all_sync(0xffffffffu, lane < 31);
  out[7 * 32 + lane] = __all_sync(0xffffffffu, lane < 32);
}

TEST_F(Simt, ShufflesAndVotesFollowCudasDefinitions) {
  for (int width : {32, 8}) {
    const int xor_mask = width == 32 ? 5 : 9;  // 9 crosses groups of 8: later groups are not read
    int* out = device<int>(8 * 32);
    shuffles_kernel<<<1, 32>>>(out, width, xor_mask);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const std::vector<int> got = host(out, 8 * 32);
    unsigned ballot = 0;
    for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
    for (int lane = 0; lane < 32; ++lane) {
      const int group = lane / width * width;  // first lane of the lane's group of `width`
      const int idx = group + (lane + 3) % width;
      const int up = lane - group >= 2 ? lane - 2 : lane;
      const int down = lane - group + 2 < width ? lane + 2 : lane;
      const int x = lane ^ xor_mask;
      const int xr = x / width > lane / width ? lane : x;  // a later group's lane: own value
      SCOPED_TRACE("width " + std::to_string(width) + " lane " + std::to_string(lane));
      EXPECT_EQ(got[0 * 32 + lane], 100 + idx);
      EXPECT_EQ(got[1 * 32 + lane], 100 + up);
      EXPECT_EQ(got[2 * 32 + lane], 100 + down);
      EXPECT_EQ(got[3 * 32 + lane], 100 + xr);
      EXPECT_EQ(static_cast<unsigned>(got[4 * 32 + lane]), ballot);
      EXPECT_EQ(got[5 * 32 + lane], 1);
      EXPECT_EQ(got[6 * 32 + lane], 0);
      EXPECT_EQ(got[7 * 32 + lane], 1);
    }
  }
}

// Two groups of 16 lanes, each shuffling within its own half-warp mask: legal, and the halves
// do not wait for each other.
__global__ void half_warp_kernel(int* out) {
  const unsigned lane = threadIdx.x;
  const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  out[lane] = __shfl_xor_sync(mask, static_cast<int>(lane), 1);
}

TEST_F(Simt, DisjointMasksAreIndependentGroups) {
  int* out = device<int>(32);
  half_warp_kernel<<<1, 32>>>(out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> got = host(out, 32);
  for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(got[lane], lane ^ 1);
}

// ---- barriers, shared memory, atomics ----

// A 2D block sums its thread ids through static shared memory, then counts with the
// _count/_and/_or barriers; blocks add their sums atomically.
__global__ void block_sum_kernel(int* sums, int* counts, float* fsum, unsigned* max_id, int* cas) {
  __shared__ int partial[8][32];
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  partial[threadIdx.y][threadIdx.x] = tid;
  __syncthreads();
  if (tid == 0) {
    int s = 0;
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 32; ++x) s += partial[y][x];
    atomicAdd(sums, s);
  }
  const int n = __syncthreads_count(tid % 4 == 0);
  const int all = __syncthreads_and(tid < 1000);
  const int any = __syncthreads_or(tid == 255);
  if (tid == 0) atomicAdd(counts, n * 100 + all * 10 + any);
  atomicAdd(fsum, 0.5f);
  atomicMax(max_id, static_cast<unsigned>(blockIdx.x * 1000 + tid));
  atomicCAS(cas, 0, static_cast<int>(blockIdx.x) + 1);  // only the first block to come sets it
}

TEST_F(Simt, BarriersSharedMemoryAndAtomics) {
  int* sums = device<int>(1, {0});
  int* counts = device<int>(1, {0});
  float* fsum = device<float>(1, {0.0f});
  unsigned* max_id = device<unsigned>(1, {0u});
  int* cas = device<int>(1, {0});
  block_sum_kernel<<<3, dim3(32, 8)>>>(sums, counts, fsum, max_id, cas);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host(sums, 1)[0], 3 * (255 * 256 / 2));
  EXPECT_EQ(host(counts, 1)[0], 3 * (64 * 100 + 10 + 1));
  EXPECT_EQ(host(fsum, 1)[0], 3 * 256 * 0.5f);
  EXPECT_EQ(host(max_id, 1)[0], 2u * 1000 + 255);
  const int first = host(cas, 1)[0];
  EXPECT_TRUE(first >= 1 && first <= 3) << first;
}

// Dynamic shared memory (extern __shared__), sized at the launch; a grid-stride loop.
__global__ void reverse_in_blocks_kernel(float* out, const float* in, int n) {
  extern __shared__ float tile[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  const int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - threadIdx.x);
  if (j < n) out[j] = tile[threadIdx.x];
}

TEST_F(Simt, DynamicSharedMemory) {
  const int n = 1000, threads = 128;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  float* d_in = device<float>(n, in);
  float* d_out = device<float>(n);
  const int blocks = (n + threads - 1) / threads;
  reverse_in_blocks_kernel<<<blocks, threads, threads * sizeof(float)>>>(d_out, d_in, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> got = host(d_out, n);
  for (int j = 0; j < n; ++j) {
    const int block = j / threads, i = block * threads + (threads - 1 - j % threads);
    if (i < n) EXPECT_EQ(got[j], in[i]) << j;
  }
}

// ---- schedules: a missing barrier shows in some orders only ----

// Each thread writes its slot, then (no barrier) reads its neighbour's: a race.
__global__ void missing_barrier_kernel(int* out, int offset) {
  __shared__ int slot[64];
  const int t = threadIdx.x;
  slot[t] = t;
  const int neighbour = t + offset;
  out[t] = neighbour >= 0 && neighbour < 64 ? slot[neighbour] : neighbour;
}

// Does the race give a wrong result under this schedule? (racecheck off: it would report the
// race in every schedule, tests/test_simt_checks.cu; this shows what the schedules alone see.)
bool race_shows(int offset, simt::Schedule schedule) {
  simt::set_schedule(schedule);
  simt::set_checks(false);
  int* out = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&out), 64 * sizeof(int));
  missing_barrier_kernel<<<1, 64>>>(out, offset);
  std::vector<int> got(64);
  cudaMemcpy(got.data(), out, 64 * sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(out);
  for (int t = 0; t < 64; ++t)
    if (got[t] != t + offset) return true;
  return false;
}

TEST_F(Simt, EachOrderCatchesWhatAnotherMisses) {
  const simt::Schedule forward{simt::Order::Forward, 1}, reverse{simt::Order::Reverse, 1},
      random{simt::Order::Random, 7};
  // reading a later thread's slot: it has not run yet in forward order, it has in reverse
  EXPECT_TRUE(race_shows(+1, forward));
  EXPECT_FALSE(race_shows(+1, reverse));
  // reading an earlier thread's slot: the other way round
  EXPECT_FALSE(race_shows(-1, forward));
  EXPECT_TRUE(race_shows(-1, reverse));
  // a random order catches both
  EXPECT_TRUE(race_shows(+1, random));
  EXPECT_TRUE(race_shows(-1, random));
}

// ---- undefined behaviour, reported with the source line ----

constexpr int kBarrierLineA = __LINE__ + 3;
__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16)
    __syncthreads();
  else
    __syncthreads();
  out[threadIdx.x] = 1;
}

TEST_F(Simt, DivergentBarrierIsReportedWithBothLines) {
  int* out = device<int>(32);
  divergent_barrier_kernel<<<1, 32>>>(out);
  const std::string f = fault();
  EXPECT_NE(f.find("divergent barrier"), std::string::npos) << f;
  EXPECT_NE(f.find(here(kBarrierLineA)), std::string::npos) << f;
  EXPECT_NE(f.find(here(kBarrierLineA + 2)), std::string::npos) << f;
  EXPECT_NE(f.find("divergent_barrier_kernel"), std::string::npos) << f;
  // the fault is sticky, as a real device fault: every call reports it until a reset
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  cudaDeviceReset();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// As on a GPU, the host hears of a fault when it next waits for the device, not at the launch:
// the launch and the calls after it succeed (so a fault is blamed on whatever waits next; hence
// --debug-sync, which waits after every op), the work enqueued after the fault never runs, and
// the wait returns the fault, sticky from then on.
TEST_F(Simt, FaultIsReportedAtTheNextWaitNotAtTheLaunch) {
  int* out = device<int>(32);
  int* later = device<int>(1, {0});
  divergent_barrier_kernel<<<1, 32>>>(out);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(later, 0x7f, sizeof(int)), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(*later, 0) << "work enqueued after a fault ran";  // (device memory is host memory here)
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaMemsetAsync(later, 0, sizeof(int)), cudaErrorLaunchFailure);
}

constexpr int kEarlyExitBarrierLine = __LINE__ + 4;
__global__ void barrier_after_early_exit_kernel(int* out) {
  if (threadIdx.x >= 48) return;
  out[threadIdx.x] = 1;
  __syncthreads();
}

TEST_F(Simt, BarrierThatExitedThreadsSkipIsReported) {
  int* out = device<int>(64);
  barrier_after_early_exit_kernel<<<1, 64>>>(out);
  const std::string f = fault();
  EXPECT_NE(f.find("divergent barrier"), std::string::npos) << f;
  EXPECT_NE(f.find("exited"), std::string::npos) << f;
  EXPECT_NE(f.find(here(kEarlyExitBarrierLine)), std::string::npos) << f;
}

constexpr int kExitedLaneShuffleLine = __LINE__ + 3;
__global__ void shuffle_with_exited_lane_kernel(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), 0);
}

TEST_F(Simt, MaskNamingAnExitedLaneIsReported) {
  int* out = device<int>(32);
  shuffle_with_exited_lane_kernel<<<1, 32>>>(out);
  const std::string f = fault();
  EXPECT_NE(f.find("lane 5"), std::string::npos) << f;
  EXPECT_NE(f.find("exited"), std::string::npos) << f;
  EXPECT_NE(f.find(here(kExitedLaneShuffleLine)), std::string::npos) << f;
}

constexpr int kAbsentLaneLine = __LINE__ + 2;
__global__ void full_mask_on_partial_warp_kernel(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

TEST_F(Simt, MaskNamingAbsentLanesIsReported) {
  int* out = device<int>(40);
  full_mask_on_partial_warp_kernel<<<1, 40>>>(out);  // warp 1 has 8 lanes
  const std::string f = fault();
  EXPECT_NE(f.find("do not exist"), std::string::npos) << f;
  EXPECT_NE(f.find(here(kAbsentLaneLine)), std::string::npos) << f;
}

__global__ void read_outside_mask_kernel(int* out) {
  out[threadIdx.x] = __shfl_sync(0x0000ffffu, static_cast<int>(threadIdx.x), 20);
}

TEST_F(Simt, ReadingALaneOutsideTheMaskIsReported) {
  int* out = device<int>(32);
  read_outside_mask_kernel<<<1, 16>>>(out);
  const std::string f = fault();
  EXPECT_NE(f.find("not in the mask"), std::string::npos) << f;
}

constexpr int kDeadlockWarpLine = __LINE__ + 4;
__global__ void deadlock_kernel(int* out) {
  // lanes 0-15 wait for lanes 16-31 at a warp barrier; those wait for them at a block barrier
  if (threadIdx.x < 16)
    __syncwarp();
  else
    __syncthreads();
  out[threadIdx.x] = 1;
}

TEST_F(Simt, DeadlockIsReportedWithEveryThreadsState) {
  int* out = device<int>(32);
  deadlock_kernel<<<1, 32>>>(out);
  const std::string f = fault();
  EXPECT_NE(f.find("deadlock"), std::string::npos) << f;
  EXPECT_NE(f.find("__syncwarp " + here(kDeadlockWarpLine)), std::string::npos) << f;
  EXPECT_NE(f.find("__syncthreads " + here(kDeadlockWarpLine + 2)), std::string::npos) << f;
  EXPECT_NE(f.find("thread (0,0,0) .. (15,0,0)"), std::string::npos) << f;
}

__global__ void big_static_shared_kernel(float* out) {
  __shared__ float big[12 * 1024 + 1];  // 48 KiB + 4 bytes
  big[threadIdx.x] = 1.0f;
  out[threadIdx.x] = big[threadIdx.x];
}

TEST_F(Simt, StaticSharedMemoryOver48KiBIsReported) {
  float* out = device<float>(32);
  big_static_shared_kernel<<<1, 32>>>(out);
  const std::string f = fault();
  EXPECT_NE(f.find("48 KiB"), std::string::npos) << f;
}

// ---- launch configurations the hardware refuses ----

__global__ void write_one_kernel(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1; }

__global__ void dynamic_shared_kernel(float* out) {
  extern __shared__ float tile[];
  tile[threadIdx.x] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}

TEST_F(Simt, LaunchConfigurationErrorsAreTheHardwares) {
  int* out = device<int>(2048);
  write_one_kernel<<<1, 1025>>>(out);  // more than 1024 threads
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  write_one_kernel<<<1, dim3(1, 1, 65)>>>(out);  // block z over 64
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  write_one_kernel<<<dim3(1, 65536), 1>>>(out);  // grid y over 65535
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  write_one_kernel<<<0, 32>>>(out);  // an empty grid
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // a configuration error is not sticky: the next launch runs
  write_one_kernel<<<2, 1024>>>(out);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host(out, 2048)[2047], 1);

  float* f = device<float>(32);
  const size_t over_default = 48 * 1024 + 4;
  dynamic_shared_kernel<<<1, 32, over_default>>>(f);  // more than 48 KiB without opting in
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 232448 + 4),
            cudaErrorInvalidValue);  // more than the 227 KiB a block may opt in to
  cudaGetLastError();
  ASSERT_EQ(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  dynamic_shared_kernel<<<1, 32, over_default>>>(f);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host(f, 32)[31], 2.0f);
}

// ---- memory and graphs ----

TEST_F(Simt, CopiesCheckTheDeviceSide) {
  std::vector<int> h(16, 3);
  int not_device[16];
  EXPECT_EQ(cudaMemcpy(not_device, h.data(), sizeof not_device, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  int* d = device<int>(16);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 17 * sizeof(int), cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // past the end
  EXPECT_EQ(cudaMemcpy(d, h.data(), 16 * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, total + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(p, nullptr);
}

__global__ void add_kernel(int* x, int amount) { x[threadIdx.x] += amount; }

TEST_F(Simt, GraphsRecordAndReplayAndRefuseWhatCaptureForbids) {
  int* x = device<int>(4, {0, 0, 0, 0});
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  int amount = 5;
  add_kernel<<<1, 4, 0, stream>>>(x, amount);  // recorded, not run; the argument is taken now
  amount = 100;
  ASSERT_EQ(cudaMemsetAsync(x + 3, 0, sizeof(int), stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(host(x, 4), (std::vector<int>{0, 0, 0, 0}));
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  EXPECT_EQ(host(x, 4), (std::vector<int>{10, 10, 10, 0}));

  // a synchronous copy (or an allocation, or a synchronisation) during capture fails and
  // invalidates the capture; cudaStreamIsCapturing says so at each point
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  std::vector<int> h(4);
  EXPECT_EQ(cudaMemcpy(h.data(), x, sizeof(int) * 4, cudaMemcpyDeviceToHost), cudaErrorStreamCaptureUnsupported);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorStreamCaptureUnsupported);
  ASSERT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  cudaGraph_t broken = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &broken), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(broken, nullptr);
  ASSERT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  cudaGetLastError();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- the emulated cuBLASLt ----

struct Gemm {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Gemm(int m, int n, int k, bool ta, bool tb, cudaDataType_t ab, cudaDataType_t cd) {
    cublasLtCreate(&lt);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    cublasLtMatrixLayoutCreate(&a, ab, ta ? k : m, ta ? m : k, ta ? k : m);
    cublasLtMatrixLayoutCreate(&b, ab, tb ? n : k, tb ? k : n, tb ? n : k);
    cublasLtMatrixLayoutCreate(&c, cd, m, n, m);
    cublasLtMatmulPreferenceCreate(&pref);
  }
  ~Gemm() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(lt);
  }
  cublasStatus_t heuristic(cublasLtMatmulAlgo_t* algo) {
    cublasLtMatmulHeuristicResult_t r{};
    int returned = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 1, &r, &returned);
    *algo = r.algo;
    return s == CUBLAS_STATUS_SUCCESS && returned == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : s;
  }
  cublasStatus_t run(const void* A, const void* B, void* D, float beta, const cublasLtMatmulAlgo_t* algo) {
    const float alpha = 1.0f;
    return cublasLtMatmul(lt, desc, &alpha, A, a, B, b, &beta, D, c, D, c, algo, nullptr, 0, nullptr);
  }
};

TEST_F(Simt, CublasLtComputesEveryTransposeAgainstADoubleReference) {
  const int m = 13, n = 7, k = 29;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> A(m * k), B(k * n), D(m * n);
      for (float& v : A) v = dist(gen);
      for (float& v : B) v = dist(gen);
      for (float& v : D) v = dist(gen);
      // column-major op(A)(i,p) and op(B)(p,j), as cuBLASLt reads them
      auto opA = [&](int i, int p) { return ta ? A[i * k + p] : A[p * m + i]; };
      auto opB = [&](int p, int j) { return tb ? B[p * n + j] : B[j * k + p]; };
      Gemm g(m, n, k, ta, tb, CUDA_R_32F, CUDA_R_32F);
      cublasLtMatmulAlgo_t algo;
      ASSERT_EQ(g.heuristic(&algo), CUBLAS_STATUS_SUCCESS);
      float* dA = device<float>(A.size(), A);
      float* dB = device<float>(B.size(), B);
      float* dD = device<float>(D.size(), D);
      ASSERT_EQ(g.run(dA, dB, dD, 0.5f, &algo), CUBLAS_STATUS_SUCCESS);
      const std::vector<float> got = host(dD, D.size());
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double want = 0.5 * D[j * m + i], magnitude = std::fabs(want);
          for (int p = 0; p < k; ++p) {
            want += static_cast<double>(opA(i, p)) * opB(p, j);
            magnitude += std::fabs(static_cast<double>(opA(i, p)) * opB(p, j));
          }
          // an fp32 sum of k + 1 terms is within (k + 1) eps32 of the sum of their magnitudes
          // (each addition rounds by at most half an eps of the partial sum)
          EXPECT_NEAR(got[j * m + i], want, (k + 1) * 1.1920929e-7 * magnitude) << ta << tb << " " << i << "," << j;
        }
    }
}

// What a captured graph holds, asked as on a GPU: a node per kernel launch, memset, copy and
// cuBLASLt matmul (a kernel node of the library's GEMM kernel), none for an event record;
// each node's type, a kernel node's kernel and launch shape, the kernel's name.
TEST_F(Simt, GraphNodesSayWhatTheyAre) {
  int* x = device<int>(4, {0, 0, 0, 0});
  float* m = device<float>(64);
  Gemm g(8, 8, 8, false, false, CUDA_R_32F, CUDA_R_32F);
  cublasLtMatmulAlgo_t algo;
  ASSERT_EQ(g.heuristic(&algo), CUBLAS_STATUS_SUCCESS);
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  add_kernel<<<2, 4, 16, stream>>>(x, 1);
  ASSERT_EQ(cudaEventRecord(event, stream), cudaSuccess);  // no node
  ASSERT_EQ(cudaMemsetAsync(x, 0, sizeof(int), stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(x + 1, x, sizeof(int), cudaMemcpyDeviceToDevice, stream), cudaSuccess);
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasLtMatmul(g.lt, g.desc, &one, m, g.a, m, g.b, &zero, m, g.c, m, g.c, &algo, nullptr, 0, stream),
            CUBLAS_STATUS_SUCCESS);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);

  size_t count = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &count), cudaSuccess);
  ASSERT_EQ(count, 4u);
  std::vector<cudaGraphNode_t> nodes(6, reinterpret_cast<cudaGraphNode_t>(&count));  // 2 more than it holds
  count = nodes.size();
  ASSERT_EQ(cudaGraphGetNodes(graph, nodes.data(), &count), cudaSuccess);
  EXPECT_EQ(count, 4u);
  EXPECT_EQ(nodes[4], nullptr);  // the rest nulled
  EXPECT_EQ(nodes[5], nullptr);
  const cudaGraphNodeType want[] = {cudaGraphNodeTypeKernel, cudaGraphNodeTypeMemset, cudaGraphNodeTypeMemcpy,
                                    cudaGraphNodeTypeKernel};
  for (int i = 0; i < 4; ++i) {
    cudaGraphNodeType type;
    ASSERT_EQ(cudaGraphNodeGetType(nodes[i], &type), cudaSuccess);
    EXPECT_EQ(type, want[i]) << "node " << i;
  }
  cudaKernelNodeParams params{};
  ASSERT_EQ(cudaGraphKernelNodeGetParams(nodes[0], &params), cudaSuccess);
  EXPECT_EQ(params.func, reinterpret_cast<void*>(add_kernel));
  EXPECT_EQ(params.gridDim.x, 2u);
  EXPECT_EQ(params.blockDim.x, 4u);
  EXPECT_EQ(params.sharedMemBytes, 16u);
  const char* name = nullptr;
  ASSERT_EQ(cudaFuncGetName(&name, add_kernel), cudaSuccess);
  EXPECT_STREQ(name, "add_kernel");
  // cuBLASLt's kernel: not one the runtime registered, as on a GPU (where this call gives
  // cudaErrorInvalidDeviceFunction for the nodes of cuBLASLt's and cuDNN's kernels)...
  EXPECT_EQ(cudaGraphKernelNodeGetParams(nodes[3], &params), cudaErrorInvalidDeviceFunction);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDeviceFunction);
  // ...but the driver names it: a CUkernel, func null. Our kernel's node gives its CUfunction.
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", &entry, 12030, cudaEnableDefault, &status),
            cudaSuccess);
  ASSERT_EQ(status, cudaDriverEntryPointSuccess);
  const auto node_params = reinterpret_cast<CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*)>(entry);
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuKernelGetName", &entry, 12030, cudaEnableDefault, &status), cudaSuccess);
  const auto kernel_name = reinterpret_cast<CUresult (*)(const char**, CUkernel)>(entry);
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuFuncGetName", &entry, 12030, cudaEnableDefault, &status), cudaSuccess);
  const auto func_name = reinterpret_cast<CUresult (*)(const char**, CUfunction)>(entry);
  CUDA_KERNEL_NODE_PARAMS driver{};
  ASSERT_EQ(node_params(nodes[3], &driver), CUDA_SUCCESS);
  EXPECT_EQ(driver.func, nullptr);
  ASSERT_NE(driver.kern, nullptr);
  ASSERT_EQ(kernel_name(&name, driver.kern), CUDA_SUCCESS);
  EXPECT_NE(std::string(name).find("gemm"), std::string::npos) << name;
  ASSERT_EQ(node_params(nodes[0], &driver), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<void*>(driver.func), reinterpret_cast<void*>(add_kernel));
  EXPECT_EQ(driver.gridDimX, 2u);
  EXPECT_EQ(driver.blockDimX, 4u);
  ASSERT_EQ(func_name(&name, driver.func), CUDA_SUCCESS);
  EXPECT_STREQ(name, "add_kernel");
  EXPECT_EQ(node_params(nodes[1], &driver), CUDA_ERROR_INVALID_VALUE);  // a memset node
  // a symbol the emulated driver lacks, or a version before the one that has it
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &entry, 12030, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(entry, nullptr);
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuFuncGetName", &entry, 12000, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointVersionNotSufficent);
  EXPECT_EQ(entry, nullptr);
  EXPECT_EQ(cudaGraphKernelNodeGetParams(nodes[1], &params), cudaErrorInvalidValue);  // a memset node
  EXPECT_EQ(cudaFuncGetName(&name, &count), cudaErrorInvalidDeviceFunction);          // not a kernel
  cudaGetLastError();
  cudaGraphDestroy(graph);
  cudaEventDestroy(event);
  cudaStreamDestroy(stream);
}

// TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM=1: the heuristic finds nothing, silently, for a GEMM it
// otherwise serves (the CUDA backend's fallback test, test_cuda_ops, relies on it).
TEST_F(Simt, CublasLtFindsNoAlgorithmWhenTheEnvironmentSaysSo) {
  Gemm g(8, 8, 8, false, false, CUDA_R_32F, CUDA_R_32F);
  cublasLtMatmulHeuristicResult_t r{};
  int returned = -1;
  setenv("TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM", "1", 1);
  testing::internal::CaptureStderr();
  const cublasStatus_t none =
      cublasLtMatmulAlgoGetHeuristic(g.lt, g.desc, g.a, g.b, g.c, g.c, g.pref, 1, &r, &returned);
  const std::string said = testing::internal::GetCapturedStderr();
  unsetenv("TINYTRAIN_SIMT_CUBLASLT_NO_ALGORITHM");
  EXPECT_EQ(none, CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(returned, 0);
  EXPECT_EQ(said, "");
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(g.lt, g.desc, g.a, g.b, g.c, g.c, g.pref, 1, &r, &returned),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(returned, 1);
}

TEST_F(Simt, CublasLtRefusesWhatTheLibraryRefuses) {
  cublasLtMatmulAlgo_t algo;
  {  // fp16 inputs with a bf16 output: not a row of cublasLtMatmul's type table
    Gemm g(8, 8, 8, false, false, CUDA_R_16F, CUDA_R_16BF);
    EXPECT_EQ(g.heuristic(&algo), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // fp32 inputs with an fp16 output: neither
    Gemm g(8, 8, 8, false, false, CUDA_R_32F, CUDA_R_16F);
    EXPECT_EQ(g.heuristic(&algo), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // op(A) is 8x8 but op(B) is 16x8: the shapes do not chain
    Gemm g(8, 8, 8, false, false, CUDA_R_32F, CUDA_R_32F);
    cublasLtMatrixLayoutDestroy(g.b);
    cublasLtMatrixLayoutCreate(&g.b, CUDA_R_32F, 16, 8, 16);
    EXPECT_EQ(g.heuristic(&algo), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  float* A = device<float>(64 + 4);
  float* B = device<float>(64 + 4);
  float* D = device<float>(64 + 4);
  {  // an algorithm chosen for 16-byte aligned matrices, called with a 4-byte aligned one
    Gemm g(8, 8, 8, false, false, CUDA_R_32F, CUDA_R_32F);
    ASSERT_EQ(g.heuristic(&algo), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(g.run(A, B, D, 0.0f, &algo), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(g.run(A + 1, B, D, 0.0f, &algo), CUBLAS_STATUS_NOT_SUPPORTED);
    // with the alignment promised in the preference, the same call runs
    const uint32_t four = 4;
    cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &four, sizeof four);
    ASSERT_EQ(g.heuristic(&algo), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(g.run(A + 1, B, D, 0.0f, &algo), CUBLAS_STATUS_SUCCESS);
  }
  {  // a bias epilogue chosen for an aligned bias, called with a misaligned one
    Gemm g(8, 8, 8, false, false, CUDA_R_32F, CUDA_R_32F);
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const float* bias = D;
    cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    ASSERT_EQ(g.heuristic(&algo), CUBLAS_STATUS_SUCCESS);
    float* out = device<float>(64);
    EXPECT_EQ(g.run(A, B, out, 0.0f, &algo), CUBLAS_STATUS_SUCCESS);
    bias = D + 1;
    cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    EXPECT_EQ(g.run(A, B, out, 0.0f, &algo), CUBLAS_STATUS_NOT_SUPPORTED);
    // an attribute of the wrong size
    const uint64_t wide = 0;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
              CUBLAS_STATUS_INVALID_VALUE);
  }
}

__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = value; }

// cuBLASLt's initcheck sees kernels' stores only through the memory watch: where it is built and
// the memory checks are on, an operand nothing wrote is a fault and one a kernel wrote is not;
// elsewhere (checks off, the sanitizer build) it checks nothing rather than take a kernel's
// output for unwritten memory (doctor's GEMM probe, whose operands a kernel fills, once did).
TEST_F(Simt, CublasLtInitcheckSeesKernelsStoresOrChecksNothing) {
  Gemm g(8, 8, 8, false, false, CUDA_R_32F, CUDA_R_32F);
  cublasLtMatmulAlgo_t algo;
  ASSERT_EQ(g.heuristic(&algo), CUBLAS_STATUS_SUCCESS);
  const std::vector<float> ones(64, 1.0f);
  for (bool checks : {true, false}) {
    simt::set_checks(checks);
    float* A = device<float>(64);
    float* B = device<float>(64, ones);
    float* D = device<float>(64);
    fill_kernel<<<1, 64>>>(A, 2.0f);
    ASSERT_EQ(g.run(A, B, D, 0.0f, &algo), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "checks " << checks;
    EXPECT_EQ(host(D, 64), std::vector<float>(64, 16.0f));  // 8 products of 2 x 1
    float* never_written = device<float>(64);
    ASSERT_EQ(g.run(never_written, B, D, 0.0f, &algo), CUBLAS_STATUS_SUCCESS);
    if (checks && simt::detail::memory_watch_available()) {
      const std::string f = fault();
      EXPECT_NE(f.find("initcheck): cublasLtMatmul reads matrix A, whose byte 0 (of 256) was never written"),
                std::string::npos)
          << f;
      cudaDeviceReset();
    } else {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "checks " << checks;
    }
  }
}

}  // namespace

// CUB's radix sort as emulated (simt/cub.cpp, for the embedding backward's sorted path): the
// two-call protocol, the order of the keys by their bits [begin_bit, end_bit) only, stable
// among equal digits.
TEST_F(Simt, CubRadixSortOrdersKeysByTheirBitsStably) {
  const std::vector<uint64_t> keys = {0x30002, 0x10005, 0x20002, 0x10001, 0x40002};
  uint64_t *in = nullptr, *out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&in), keys.size() * sizeof(uint64_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), keys.size() * sizeof(uint64_t)), cudaSuccess);
  size_t bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, in, out, 5, 0, 4), cudaSuccess);  // the size only
  EXPECT_GT(bytes, 0u);
  void* temp = nullptr;
  ASSERT_EQ(cudaMalloc(&temp, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(in, keys.data(), keys.size() * sizeof(uint64_t), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(temp, bytes, in, out, 5, 0, 4), cudaSuccess);  // the low 4 bits
  std::vector<uint64_t> got(keys.size());
  ASSERT_EQ(cudaMemcpy(got.data(), out, got.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, (std::vector<uint64_t>{0x10001, 0x30002, 0x20002, 0x40002, 0x10005}));  // 2s in input order
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(temp, bytes, in, out, 5, 16, 20), cudaSuccess);  // bits 16-19
  ASSERT_EQ(cudaMemcpy(got.data(), out, got.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, (std::vector<uint64_t>{0x10005, 0x10001, 0x20002, 0x30002, 0x40002}));
  EXPECT_EQ(cub::DeviceRadixSort::SortKeys(temp, bytes, in, out, 5, 8, 4), cudaErrorInvalidValue);  // bits backwards
  cudaFree(temp);
  cudaFree(out);
  cudaFree(in);
}
