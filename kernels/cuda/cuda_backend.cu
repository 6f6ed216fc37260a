// The CUDA backend's plumbing: device, stream, cuBLASLt handle and workspace, memory,
// host <-> device copies and whole-step CUDA graphs. The ops live in one file per family
// (embedding.cu, linear.cu, attention.cu, ...).
//
// Everything runs on one non-blocking stream, in the order the engine enqueues it, so the
// ops need no other synchronisation; only copy_to_host and synchronize wait for the GPU.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/graph_nodes.h"
#include "kernels/device_query.h"

namespace tt {

namespace {

// Workspace sizes: kernels/workspace.h (the memory plan prints them). copy_to_device's pinned
// staging buffer grows to fit a copy up to kCudaMaxStagingBytes; a larger copy (the initial
// parameters of a big model) goes through it in chunks.

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

CudaBackend::CudaBackend(const CudaOptions& options) : options_(options) {
  try {
    // The device is per thread: this thread's later CUDA calls (and the NCCL communicator
    // made on our stream) use it too.
    CUDA_CHECK(cudaSetDevice(options.device));
    // Non-blocking: our stream never waits on work that other libraries put on the legacy
    // default stream, and vice versa.
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&staging_done_, cudaEventDisableTiming));
    CUBLAS_CHECK(cublasLtCreate(&lt_));
    // A workspace we own (rather than one cuBLASLt allocates) keeps matmuls capturable in a
    // graph and their results reproducible.
    CUDA_CHECK(cudaMalloc(&lt_workspace_, kCudaGemmWorkspaceBytes));
    lt_workspace_bytes_ = kCudaGemmWorkspaceBytes;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&reduce_scratch_), kReduceScratchFloats * sizeof(float)));
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&reduce_counters_), kReduceCounters * sizeof(unsigned int)));
    CUDA_CHECK(cudaMemset(reduce_counters_, 0, kReduceCounters * sizeof(unsigned int)));
  } catch (...) {
    release_resources();  // the destructor does not run for a constructor that throws
    throw;
  }
}

CudaBackend::~CudaBackend() { release_resources(); }

// Frees everything this backend holds, ignoring errors: it runs in the destructor (which must
// not throw) and after a failed constructor (where the first error is the one to report).
void CudaBackend::release_resources() noexcept {
  abandon_capture();  // an op threw during a capture
  if (stream_) cudaStreamSynchronize(stream_);  // nothing in flight may still use what is freed below
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (graph_) cudaGraphDestroy(graph_);
  graph_exec_ = nullptr;
  graph_ = nullptr;
  cudnn_attention_.reset();  // its handle, plans and workspace
  gemm_plans_.clear();  // destroys the cuBLASLt descriptors (GemmPlanDeleter, linear.cu)
  if (lt_) cublasLtDestroy(lt_);
  lt_ = nullptr;
  if (lt_workspace_) cudaFree(lt_workspace_);
  lt_workspace_ = nullptr;
  lt_workspace_bytes_ = 0;
  if (reduce_scratch_) cudaFree(reduce_scratch_);
  reduce_scratch_ = nullptr;
  if (reduce_counters_) cudaFree(reduce_counters_);
  reduce_counters_ = nullptr;
  if (attention_work_) cudaFree(attention_work_);
  attention_work_ = nullptr;
  attention_work_floats_ = 0;
  for (void* ptr : retired_work_) cudaFree(ptr);
  retired_work_.clear();
  if (staging_) cudaFreeHost(staging_);
  staging_ = nullptr;
  staging_bytes_ = 0;
  if (staging_done_) cudaEventDestroy(staging_done_);
  staging_done_ = nullptr;
  if (stream_) cudaStreamDestroy(stream_);
  stream_ = nullptr;
  cudaGetLastError();  // leave no error behind for whoever uses CUDA next
}

void CudaBackend::abandon_capture() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t partial = nullptr;
  if (cudaStreamEndCapture(stream_, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
  cudaGetLastError();
}

void CudaBackend::require_not_capturing(const char* what) const {
  if (capturing_)
    throw std::logic_error(std::string(what) +
                           " during CUDA graph capture: only ops may be enqueued between begin_capture and end_capture");
}

// ---------------------------------------------------------------------------------------
// memory

void* CudaBackend::allocate(size_t bytes) {
  require_not_capturing("allocate");
  void* ptr = nullptr;
  // cudaMalloc(0) may hand back null, which views read as "absent": ask for at least one byte.
  const cudaError_t err = cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
  if (err != cudaSuccess) {
    cudaGetLastError();  // a failed cudaMalloc is not sticky, but it is recorded as the last error
    size_t free_bytes = 0, total_bytes = 0;
    const bool have_info = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
    if (!have_info) cudaGetLastError();
    // Out of memory is cudaErrorMemoryAllocation; a request beyond what is free is reported
    // the same way whatever code the driver picked for it.
    if (err == cudaErrorMemoryAllocation || (have_info && bytes > free_bytes))
      throw std::runtime_error("GPU out of memory: asked for " + mib(bytes) + " MiB, " + mib(free_bytes) +
                               " MiB free of " + mib(total_bytes) + " MiB");
    throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
  }
  // The contract says zero-filled. Synchronising here keeps allocate's meaning simple (the
  // memory is ready when it returns); allocations happen at setup, not per step.
  cudaError_t fill = cudaMemsetAsync(ptr, 0, std::max<size_t>(bytes, 1), stream_);
  if (fill == cudaSuccess) fill = cudaStreamSynchronize(stream_);
  if (fill != cudaSuccess) {
    cudaFree(ptr);
    throw_cuda_error(fill, "cudaMemsetAsync + cudaStreamSynchronize (zero-filling a new allocation)", __FILE__,
                     __LINE__);
  }
  return ptr;
}

// Called from destructors (the engine's Arena), so it never throws. A capture still open
// here means an exception is unwinding it: cudaFree cannot be captured, so the capture is
// abandoned first. A failing cudaFree means the context is already broken by an earlier
// error, which was reported where it happened.
void CudaBackend::release(void* ptr) {
  if (!ptr) return;
  abandon_capture();
  const cudaError_t err = cudaFree(ptr);  // waits for the work that may still use it
  if (err != cudaSuccess) {
    std::fprintf(stderr, "tinytrain: cudaFree failed: %s\n", cudaGetErrorString(err));
    cudaGetLastError();
  }
}

// The host buffer `src` may be reused as soon as this returns, yet the copy stays
// asynchronous: the bytes go to a pinned staging buffer first, then from there to the
// device on our stream. staging_done_ marks when the previous copy has left the staging
// buffer, so the next copy waits for that, not for the whole stream.
void CudaBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  require_not_capturing("copy_to_device");
  if (bytes == 0) return;
  const size_t wanted = std::min(bytes, kCudaMaxStagingBytes);
  if (wanted > staging_bytes_) {
    CUDA_CHECK(cudaEventSynchronize(staging_done_));  // the old buffer may still feed a copy
    if (staging_) CUDA_CHECK(cudaFreeHost(staging_));
    staging_ = nullptr;
    staging_bytes_ = 0;
    CUDA_CHECK(cudaMallocHost(&staging_, wanted));
    staging_bytes_ = wanted;
  }
  const char* from = static_cast<const char*>(src);
  char* to = static_cast<char*>(dst);
  for (size_t done = 0; done < bytes;) {
    const size_t chunk = std::min(bytes - done, staging_bytes_);
    CUDA_CHECK(cudaEventSynchronize(staging_done_));  // returns at once if never recorded
    std::memcpy(staging_, from + done, chunk);
    CUDA_CHECK(cudaMemcpyAsync(to + done, staging_, chunk, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaEventRecord(staging_done_, stream_));
    done += chunk;
  }
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  require_not_capturing("copy_to_host");
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::fill_zero(Tensor t) {
  if (!t.data || t.bytes() == 0) return;
  CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));  // a memset node when captured
}

float* CudaBackend::attention_work(size_t floats) {
  if (floats <= attention_work_floats_) return attention_work_;
  require_not_capturing("growing the attention work buffer (attention on a larger shape than before the capture)");
  float* grown = nullptr;
  const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&grown), floats * sizeof(float));
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error("GPU out of memory: the attention work buffer needs " + mib(floats * sizeof(float)) +
                             " MiB (" + cudaGetErrorString(err) + ")");
  }
  float* outgrown = attention_work_;
  attention_work_ = grown;
  attention_work_floats_ = floats;
  if (outgrown) {
    if (graph_exec_) {
      retired_work_.push_back(outgrown);  // the captured graph still points at it
    } else {
      CUDA_CHECK(cudaStreamSynchronize(stream_));  // enqueued attention ops may still use it
      CUDA_CHECK(cudaFree(outgrown));
    }
  }
  return attention_work_;
}

void CudaBackend::synchronize() {
  require_not_capturing("synchronize");
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---------------------------------------------------------------------------------------
// whole-step graphs
//
// The trainer runs one step eagerly first (cuBLASLt plans and the staging buffer are made
// then), captures the next one, and replays it for every later step. What changes between
// steps (batch, dropout step, AdamW step count) lives in device memory that the graph reads,
// so one graph serves every step.

void CudaBackend::begin_capture() {
  require_not_capturing("begin_capture");
  if (graph_exec_ || graph_) {  // a new capture replaces the previous graph
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // which may still be running
    if (graph_exec_) CUDA_CHECK(cudaGraphExecDestroy(graph_exec_));
    graph_exec_ = nullptr;
    if (graph_) CUDA_CHECK(cudaGraphDestroy(graph_));
    graph_ = nullptr;
  }
  // ThreadLocal: only this thread's unsafe calls (cudaMalloc, synchronisation, ...) break the
  // capture; other threads' CUDA work is unaffected.
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
}

void CudaBackend::end_capture() {
  if (!capturing_) throw std::logic_error("end_capture without begin_capture");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream_, &graph);
  if (err != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    throw_cuda_error(err, "cudaStreamEndCapture", __FILE__, __LINE__);
  }
  graph_ = graph;
  graph_nodes_ = count_graph_nodes(graph_);
  CUDA_CHECK(cudaGraphInstantiate(&graph_exec_, graph_, 0));
}

void CudaBackend::replay_graph() {
  require_not_capturing("replay_graph");
  if (!graph_exec_) throw std::logic_error("replay_graph before a graph was captured");
  CUDA_CHECK(cudaGraphLaunch(graph_exec_, stream_));
}

// ---------------------------------------------------------------------------------------

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options) {
  // query_cuda_device asks cudaGetDeviceCount first and explains, in one line, why a GPU is
  // not usable (no driver, no such device, the device unavailable).
  const CudaDeviceInfo gpu = query_cuda_device(options.device);
  if (!gpu.usable) throw std::runtime_error(gpu.reason);
  return std::make_unique<CudaBackend>(options);
}

}  // namespace tt
