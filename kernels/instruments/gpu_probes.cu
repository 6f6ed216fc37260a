// The GPU probes of `tinytrain doctor` (kernels/instruments/gpu_probes.h): a copy kernel,
// host<->device copies and cuBLASLt GEMMs, timed; and what the runtime, driver, cuDNN and NCCL
// report.
//
// Like every kernels/cuda/ file this one is built twice: by nvcc for the GPU, and as host C++
// for the SIMT emulator (simt/prelude.h renames `tt` to `tt::emu` there). The emulator has the
// runtime subset the CUDA backend uses and nothing else: no driver to ask for versions, no
// clock or bus-width attributes, no cuDNN, no NCCL. The code that needs those is marked
// `#ifdef __CUDACC__` (nvcc, the real build only), or by the build's TINYTRAIN_HAVE_CUDNN /
// TINYTRAIN_HAVE_NCCL, which the emulated build never defines.
//
// Timing is host wall-clock time around stream synchronisation (the emulator has events but
// not their elapsed time); every measurement repeats its work long enough for that to be exact.

// The interface's types are the engine's own in both builds: included with `tt` as written.
#pragma push_macro("tt")
#undef tt
#include "kernels/instruments/gpu_probes.h"
#pragma pop_macro("tt")

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/cudnn_attention.h"
#ifdef TINYTRAIN_HAVE_CUDNN
#include <cudnn_graph.h>  // cudnnGetVersion
#endif
#ifdef TINYTRAIN_HAVE_NCCL
#include <nccl.h>
#endif

namespace tt {

namespace {

// ---- buffers and a stream that free themselves, so a failed call leaks nothing ----

class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes) { CUDA_CHECK(cudaMalloc(&ptr_, bytes)); }
  ~DeviceMemory() { cudaFree(ptr_); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class PinnedMemory {
 public:
  explicit PinnedMemory(size_t bytes) { CUDA_CHECK(cudaMallocHost(&ptr_, bytes)); }
  ~PinnedMemory() { cudaFreeHost(ptr_); }
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class Stream {
 public:
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// ---- timing ----

// The best seconds per call of enqueue_calls(k), which enqueues k calls on `stream`. One call
// first, untimed (first-use costs: module loading, cuBLASLt's kernel selection, page mapping);
// then batches, doubling while a batch is short against min_seconds so that the launch and
// synchronisation overhead vanishes, until min_seconds have been timed in all.
template <typename EnqueueCalls>
double best_seconds_per_call(cudaStream_t stream, EnqueueCalls&& enqueue_calls, double min_seconds) {
  using Clock = std::chrono::steady_clock;
  enqueue_calls(1);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  double best = INFINITY, timed = 0;
  int calls = 1;
  while (timed < min_seconds) {
    const Clock::time_point start = Clock::now();
    enqueue_calls(calls);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::min(best, seconds / calls);
    timed += seconds;
    if (seconds < min_seconds / 8) calls *= 2;
  }
  return best;
}

// ---- kernels ----

// 16 bytes: one 128-bit load and store per thread on the GPU, the widest a thread issues.
struct alignas(16) Chunk {
  uint32_t word[4];
};

// dst[i] = src[i] over n chunks, grid-stride: each byte is read once and written once.
__global__ void copy_chunks_kernel(Chunk* dst, const Chunk* src, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

// A value in [-1, 1) from an index: a 32-bit integer hash (no RNG state needed per thread).
__host__ __device__ inline float hashed_unit(uint32_t index) {
  uint32_t h = index * 0x9e3779b9u;
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return static_cast<float>(h) * (2.0f / 4294967296.0f) - 1.0f;
}

// out[i] = hashed_unit(i) in storage type S (float, bf16 or f16), grid-stride.
template <typename S>
__global__ void fill_hashed_kernel(S* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_float<S>(hashed_unit(static_cast<uint32_t>(i)));
}

template <typename S>
void fill_hashed(void* out, int64_t n, cudaStream_t stream) {
  fill_hashed_kernel<S><<<grid_stride_blocks(n), kThreadsPerBlock, 0, stream>>>(static_cast<S*>(out), n);
  CUDA_CHECK(cudaGetLastError());
}

// ---- one cuBLASLt GEMM, its descriptors destroyed with it ----

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // room for the heuristic's faster algorithms

struct LtGemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;  // A, B, C and D are all n x n of one type
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~LtGemm() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (layout) cublasLtMatrixLayoutDestroy(layout);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (handle) cublasLtDestroy(handle);
  }
};

cudaDataType_t gemm_storage_type(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::BF16: return CUDA_R_16BF;
    case GemmPrecision::FP16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

size_t gemm_element_bytes(GemmPrecision precision) {
  return precision == GemmPrecision::BF16 || precision == GemmPrecision::FP16 ? 2 : 4;
}

// ---- what only a real driver answers ----

#ifdef __CUDACC__
GpuRuntimeInfo query_runtime() {
  GpuRuntimeInfo info;
  cudaDriverGetVersion(&info.driver_version);  // 0 when no driver is installed
  cudaRuntimeGetVersion(&info.runtime_version);
  const cudaError_t err = cudaGetDeviceCount(&info.device_count);
  if (err != cudaSuccess) {
    info.device_count = 0;
    info.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    // (the runtime says "insufficient" when there is no driver at all too: then the version is 0)
    info.insufficient_driver = err == cudaErrorInsufficientDriver && info.driver_version > 0;
    cudaGetLastError();  // clear it for the calls that follow
  }
  return info;
}

// The clocks and bus width: attributes, since CUDA 13 removed them from cudaDeviceProp.
void read_clocks(int device, GpuDeviceProps& props) {
  auto attribute = [device](cudaDeviceAttr attr) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return value;
  };
  props.sm_clock_khz = attribute(cudaDevAttrClockRate);
  props.memory_clock_khz = attribute(cudaDevAttrMemoryClockRate);
  props.memory_bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth);
}
#else
// The emulated device has no driver: its runtime is the emulator itself.
GpuRuntimeInfo query_runtime() {
  GpuRuntimeInfo info;
  if (cudaGetDeviceCount(&info.device_count) != cudaSuccess) info.error = "cudaGetDeviceCount failed";
  return info;
}

void read_clocks(int, GpuDeviceProps&) {}  // no clocks: the emulator does not model time
#endif

class CudaGpuProbes final : public GpuProbes {
 public:
#ifdef __CUDACC__
  bool emulated() const override { return false; }
#else
  bool emulated() const override { return true; }
#endif

  GpuRuntimeInfo runtime() override { return query_runtime(); }

  GpuDeviceProps device(int device) override {
    CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    GpuDeviceProps props;
    props.name = prop.name;
    props.major = prop.major;
    props.minor = prop.minor;
    props.sm_count = prop.multiProcessorCount;
    read_clocks(device, props);
    CUDA_CHECK(cudaMemGetInfo(&props.free_bytes, &props.total_bytes));
    return props;
  }

  double pinned_copy_gbps(int device, CopyDirection direction, size_t bytes, double min_seconds) override {
    CUDA_CHECK(cudaSetDevice(device));
    Stream stream;
    PinnedMemory host(bytes);
    DeviceMemory gpu(bytes);
    const bool to_device = direction == CopyDirection::HostToDevice;
    void* dst = to_device ? gpu.get() : host.get();
    const void* src = to_device ? host.get() : gpu.get();
    const cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    const double seconds = best_seconds_per_call(
        stream.get(),
        [&](int calls) {
          for (int i = 0; i < calls; ++i) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream.get()));
        },
        min_seconds);
    return static_cast<double>(bytes) / seconds / 1e9;
  }

  double device_copy_gbps(int device, size_t bytes, double min_seconds) override {
    CUDA_CHECK(cudaSetDevice(device));
    Stream stream;
    const int64_t chunks = static_cast<int64_t>(bytes / sizeof(Chunk));
    DeviceMemory src(chunks * sizeof(Chunk)), dst(chunks * sizeof(Chunk));
    CUDA_CHECK(cudaMemsetAsync(src.get(), 1, chunks * sizeof(Chunk), stream.get()));
    CUDA_CHECK(cudaMemsetAsync(dst.get(), 0, chunks * sizeof(Chunk), stream.get()));
    const double seconds = best_seconds_per_call(
        stream.get(),
        [&](int calls) {
          for (int i = 0; i < calls; ++i)
            copy_chunks_kernel<<<grid_stride_blocks(chunks), kThreadsPerBlock, 0, stream.get()>>>(
                static_cast<Chunk*>(dst.get()), static_cast<const Chunk*>(src.get()), chunks);
          CUDA_CHECK(cudaGetLastError());
        },
        min_seconds);
    // A kernel that skipped part of the copy would report a rate it never reached: every byte
    // of the destination must be the source's 1 (read back in pieces of at most 16 MiB).
    const size_t total = chunks * sizeof(Chunk);
    std::vector<unsigned char> piece(std::min(total, size_t{16} << 20));
    for (size_t at = 0; at < total; at += piece.size()) {
      const size_t n = std::min(piece.size(), total - at);
      CUDA_CHECK(cudaMemcpy(piece.data(), static_cast<const unsigned char*>(dst.get()) + at, n, cudaMemcpyDeviceToHost));
      if (std::count(piece.begin(), piece.begin() + n, 1) != static_cast<std::ptrdiff_t>(n))
        throw std::runtime_error("copy_chunks_kernel: the destination is not a copy of the source");
    }
    return 2.0 * static_cast<double>(chunks * sizeof(Chunk)) / seconds / 1e9;
  }

  double gemm_tflops(int device, GemmPrecision precision, int n, double min_seconds) override {
    CUDA_CHECK(cudaSetDevice(device));
    Stream stream;
    const int64_t elements = static_cast<int64_t>(n) * n;
    const size_t bytes = elements * gemm_element_bytes(precision);
    DeviceMemory a(bytes), b(bytes), d(bytes), workspace(kGemmWorkspaceBytes);
    const auto fill = precision == GemmPrecision::BF16   ? fill_hashed<bf16>
                      : precision == GemmPrecision::FP16 ? fill_hashed<f16>
                                                         : fill_hashed<float>;
    fill(a.get(), elements, stream.get());
    fill(b.get(), elements, stream.get());

    LtGemm gemm;
    const cudaDataType_t type = gemm_storage_type(precision);
    const cublasComputeType_t compute =
        precision == GemmPrecision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasLtCreate(&gemm.handle));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&gemm.desc, compute, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&gemm.layout, type, n, n, n));
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&gemm.preference));
    const uint64_t workspace_bytes = kGemmWorkspaceBytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(gemm.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes, sizeof(workspace_bytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(gemm.handle, gemm.desc, gemm.layout, gemm.layout, gemm.layout,
                                                gemm.layout, gemm.preference, 1, &result, &returned));
    if (returned == 0 || result.state != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error(std::string("cuBLASLt has no algorithm for a ") + gemm_precision_name(precision) +
                               " GEMM of " + std::to_string(n) + "^3 on this device");
    gemm.algo = result.algo;

    const float alpha = 1.0f, beta = 0.0f;
    const double seconds = best_seconds_per_call(
        stream.get(),
        [&](int calls) {
          for (int i = 0; i < calls; ++i)
            CUBLAS_CHECK(cublasLtMatmul(gemm.handle, gemm.desc, &alpha, a.get(), gemm.layout, b.get(), gemm.layout,
                                        &beta, d.get(), gemm.layout, d.get(), gemm.layout, &gemm.algo,
                                        workspace.get(), kGemmWorkspaceBytes, stream.get()));
        },
        min_seconds);
    return 2.0 * static_cast<double>(n) * n * n / seconds / 1e12;
  }

  std::string cudnn_version() override {
#ifdef TINYTRAIN_HAVE_CUDNN
    const size_t v = cudnnGetVersion();  // 91002 -> 9.10.2
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
#else
    return "";
#endif
  }

  std::string cudnn_attention(int device, const AttentionShape& shape) override {
    CUDA_CHECK(cudaSetDevice(device));
    Stream stream;  // declared first: the attention's handle is destroyed before its stream
    std::unique_ptr<CudnnAttention> attention = make_cudnn_attention(stream.get());
    attention->prepare(shape, DType::BF16, 0.0f);
    return attention->describe();
  }

  std::string nccl_version() override {
#ifdef TINYTRAIN_HAVE_NCCL
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return "";
    // NCCL_VERSION_CODE: major 10000 + minor 100 + patch since 2.9, major 1000 + minor 100 + patch before
    const int major_unit = v >= 20900 ? 10000 : 1000;
    return std::to_string(v / major_unit) + "." + std::to_string(v % major_unit / 100) + "." + std::to_string(v % 100);
#else
    return "";
#endif
  }
};

}  // namespace

std::unique_ptr<GpuProbes> make_gpu_probes() { return std::make_unique<CudaGpuProbes>(); }

}  // namespace tt
