// The CUDA runtime on the host (simt/cuda_api.h): device memory is host memory, every stream
// does its work at once and in order, CUDA graphs are lists of recorded work, and kernel
// launches are checked as the hardware checks them, then run by the SIMT scheduler.
//
// Errors follow the runtime's rules: a failed call returns its error and leaves it as the
// last error (cudaGetLastError reads and clears it); a kernel that faults (what the scheduler
// reports: a divergent barrier, a bad warp mask, a deadlock, a __trap) leaves a sticky error that
// every later call returns, as a real device fault does. The host learns of the fault when it
// next waits for the device (a stream, event or device synchronisation, a synchronous copy or
// memset), the latest point a GPU reports it at: until then calls succeed and the work they
// enqueue does not run, so an error is blamed on whatever waits next, as it can be on hardware.
// What graph capture forbids fails as it does on hardware and invalidates the capture. One OS
// thread drives the runtime at a time.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "simt/cuda_api.h"
#include "simt/device_memory.h"
#include "simt/kernel_launch.h"
#include "simt/launch_counters.h"
#include "simt/library_work.h"
#include "simt/scheduler.h"

namespace simt::cuda_api {

// Work on a stream: done at once, or recorded while the stream is captured.
using Work = std::function<cudaError_t()>;

// One node of a captured graph: what it is (cudaGraphGetNodes and friends answer from it) and
// the work it does when the graph runs.
struct GraphNode {
  cudaGraphNodeType type = cudaGraphNodeTypeKernel;
  cudaKernelNodeParams kernel{};  // kernel nodes: the kernel's address and launch shape
  bool library = false;           // a library's kernel: the runtime cannot name it (the driver can)
  Work work;
};

struct Stream {
  unsigned flags = 0;
  bool capturing = false;
  bool capture_invalidated = false;
  std::vector<GraphNode> captured;
};
struct Event {
  bool recorded = false;
};
struct Graph {
  std::vector<GraphNode> nodes;  // in capture order; a stream's capture is a chain
};
struct GraphExec {
  std::vector<Work> nodes;
};

}  // namespace simt::cuda_api

namespace simt {

using namespace cuda_api;

namespace {

// An H200 SXM as the runtime describes it (the numbers tinytrain reads).
constexpr size_t kDeviceBytes = size_t{143771} << 20;  // what cudaMemGetInfo reports on an H200
constexpr int kSharedOptin = 232448;                    // 227 KiB: the most a block may opt in to
constexpr int kSharedDefault = 48 * 1024;

cudaError_t g_last = cudaSuccess;    // the last error, cleared by cudaGetLastError
cudaError_t g_sticky = cudaSuccess;  // a kernel fault: returned by every call from then on
cudaError_t g_pending = cudaSuccess; // a kernel fault the host has not waited for yet: sticky at the next wait
std::string g_fault;                 // what the scheduler said about it
std::map<const char*, size_t> g_host_allocations;    // pinned host memory (device memory: simt/device_memory.h)
std::map<const void*, int> g_dynamic_shared_limit;  // kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize
std::vector<Stream*> g_capturing;                   // streams being captured
std::map<const void*, const char*> g_kernel_names;  // kernel -> its name (cudaFuncGetName)
std::set<const void*> g_library_kernels;            // those a library launched: the driver names them
Stream g_legacy_stream;                             // the default (null) stream
uint64_t g_work_enqueued = 0;                       // see work_items_enqueued()

cudaError_t fail(cudaError_t e) {
  g_last = e;
  return e;
}

// Called by the calls that a stream capture forbids (they would synchronise or allocate):
// they fail and invalidate every capture in progress, as under cudaStreamCaptureModeThreadLocal.
bool refused_during_capture() {
  if (g_capturing.empty()) return false;
  for (Stream* s : g_capturing) s->capture_invalidated = true;
  g_last = cudaErrorStreamCaptureUnsupported;
  return true;
}

void forget_capture(Stream* s) { g_capturing.erase(std::remove(g_capturing.begin(), g_capturing.end(), s), g_capturing.end()); }

Stream* stream_of(cudaStream_t s) { return s ? s : &g_legacy_stream; }

// Called first by every call that waits for the device: a fault not yet reported becomes the
// sticky error (and the last error) that the call and every later one return.
void deliver_pending_fault() {
  if (g_pending == cudaSuccess) return;
  g_sticky = g_last = g_pending;
  g_pending = cudaSuccess;
}

// `node` describes the work (its `work` is ignored); a capturing stream records it as one node.
cudaError_t enqueue(cudaStream_t stream, GraphNode node, Work work) {
  if (g_sticky != cudaSuccess) return g_sticky;
  ++g_work_enqueued;
  Stream* s = stream_of(stream);
  if (s->capturing) {
    node.work = std::move(work);
    s->captured.push_back(std::move(node));
    return cudaSuccess;
  }
  if (g_pending != cudaSuccess) return cudaSuccess;  // the device has faulted: nothing more runs
  const cudaError_t e = work();
  return e == cudaSuccess ? e : fail(e);
}

GraphNode node_of_type(cudaGraphNodeType type) {
  GraphNode node;
  node.type = type;
  return node;
}

// Is [p, p + bytes) inside one device allocation?
bool is_device_range(const void* p, size_t bytes) { return detail::find_allocation(p, bytes) != nullptr; }

// A fault of work on the device (a kernel, or an emulated library's check): reported when the
// host next waits for the device (deliver_pending_fault), as a device fault is.
void device_work_faulted(const std::string& fault) {
  std::fprintf(stderr, "simt: %s\n", fault.c_str());
  g_fault = fault;
  g_pending = cudaErrorLaunchFailure;
}

// Device pointers must point into device allocations; host pointers are not checked (pageable
// memory is any memory).
bool copy_is_valid(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return true;
    case cudaMemcpyHostToDevice: return is_device_range(dst, bytes);
    case cudaMemcpyDeviceToHost: return is_device_range(src, bytes);
    case cudaMemcpyDeviceToDevice: return is_device_range(dst, bytes) && is_device_range(src, bytes);
    case cudaMemcpyDefault: return true;
  }
  return false;
}

bool dim_ok(unsigned v, unsigned limit) { return v >= 1 && v <= limit; }

}  // namespace

// Work that a library on the emulated device enqueues (cuBLASLt's matmuls, simt/cublaslt.cpp):
// on a GPU the library launches its own kernels, so the work is a kernel node whose kernel is
// `library_kernel` (any address unique to it), named `name` for cudaFuncGetName.
cudaError_t enqueue_work(cudaStream_t stream, const void* library_kernel, const char* name,
                         std::function<cudaError_t()> work) {
  g_kernel_names[library_kernel] = name;
  g_library_kernels.insert(library_kernel);
  GraphNode node;
  node.kernel.func = const_cast<void*>(library_kernel);
  node.library = true;
  return enqueue(stream, node, std::move(work));
}

// An emulated library's work found what the device would fault on (simt/cublaslt.cpp's initcheck).
void library_fault(const std::string& fault) { device_work_faulted(fault); }

// For tests only (tests/test_cuda_ops.cpp declares it): how many work items (kernel launches,
// memsets, copies, library calls) have been enqueued on any stream since the process began,
// run at once or recorded by a capture; the difference across an op is the work it enqueues.
uint64_t work_items_enqueued() { return g_work_enqueued; }

// ---- launches (simt/kernel_launch.h) ----

void launch_kernel(const LaunchConfig& c, const void* kernel, std::function<void()> body) {
  if (g_sticky != cudaSuccess) return;  // the context is broken: cudaGetLastError reports it
  if (!dim_ok(c.block.x, 1024) || !dim_ok(c.block.y, 1024) || !dim_ok(c.block.z, 64) ||
      uint64_t{c.block.x} * c.block.y * c.block.z > 1024 || !dim_ok(c.grid.x, 0x7fffffffu) ||
      !dim_ok(c.grid.y, 65535) || !dim_ok(c.grid.z, 65535)) {
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  auto limit = g_dynamic_shared_limit.find(kernel);
  const size_t dynamic_limit = limit == g_dynamic_shared_limit.end() ? kSharedDefault : limit->second;
  if (c.shared_bytes > dynamic_limit) {
    fail(cudaErrorInvalidValue);  // more dynamic shared memory than the kernel may use
    return;
  }
  GridLaunch grid;
  grid.grid = c.grid;
  grid.block = c.block;
  grid.dynamic_shared_bytes = c.shared_bytes;
  grid.shared_limit_bytes = std::max<size_t>(dynamic_limit, kSharedDefault);
  grid.kernel = c.kernel;
  grid.file = c.file;
  grid.line = c.line;
  g_kernel_names[kernel] = c.kernel;
  GraphNode node;
  node.kernel = cudaKernelNodeParams{const_cast<void*>(kernel), c.grid, c.block,
                                     static_cast<unsigned int>(c.shared_bytes), nullptr, nullptr};
  enqueue(c.stream, node, [grid, body = std::move(body)]() mutable {
    grid.body = &body;
    const std::string fault = run_grid(grid);
    if (!fault.empty()) device_work_faulted(fault);
    return cudaSuccess;
  });
}

}  // namespace simt

namespace simt::cuda_api {

// ---- device and errors ----

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "NVIDIA H200 (emulated on the CPU by tinytrain's SIMT emulator)");
  prop->totalGlobalMem = kDeviceBytes;
  prop->sharedMemPerBlock = kSharedDefault;
  prop->sharedMemPerBlockOptin = kSharedOptin;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->multiProcessorCount = 132;
  prop->major = 9;
  prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = kSharedDefault; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kSharedOptin; return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaDeviceSynchronize() {
  deliver_pending_fault();
  if (g_sticky != cudaSuccess) return g_sticky;
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  return cudaSuccess;
}

cudaError_t cudaDeviceReset() {
  for (void* ptr : detail::all_allocations()) {
    detail::unregister_allocation(ptr);
    std::free(ptr);
  }
  for (auto& [ptr, bytes] : g_host_allocations) std::free(const_cast<char*>(ptr));
  g_host_allocations.clear();
  for (Stream* s : g_capturing) {
    s->capturing = false;
    s->captured.clear();
  }
  g_capturing.clear();
  g_dynamic_shared_limit.clear();
  g_last = g_sticky = g_pending = cudaSuccess;
  g_fault.clear();
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (g_sticky != cudaSuccess) return g_sticky;
  *total_bytes = kDeviceBytes;
  *free_bytes = kDeviceBytes - std::min(detail::allocated_bytes(), kDeviceBytes);
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  if (g_sticky != cudaSuccess) return g_sticky;
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return g_sticky != cudaSuccess ? g_sticky : g_last; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: {
      // The fault the emulator found, after the runtime's own words.
      static std::string text;
      text = "unspecified launch failure; the SIMT emulator says: " + g_fault;
      return text.c_str();
    }
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorIllegalState: return "the operation is not permitted in the current state";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
  }
  return "unknown error";
}

// ---- memory ----

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (g_sticky != cudaSuccess) return g_sticky;
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  if (bytes > kDeviceBytes - std::min(detail::allocated_bytes(), kDeviceBytes)) return fail(cudaErrorMemoryAllocation);
  // 256-byte aligned, as cudaMalloc guarantees; exactly `bytes` long, so AddressSanitizer
  // reports the first byte past the end. Its bytes count as never written (initcheck) until a
  // kernel, copy or memset writes them.
  void* p = nullptr;
  if (posix_memalign(&p, 256, std::max<size_t>(bytes, 1)) != 0) return fail(cudaErrorMemoryAllocation);
  detail::register_allocation(p, bytes);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return g_sticky;
  if (g_sticky == cudaSuccess && refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  const detail::DeviceAllocation* a = detail::find_allocation(ptr);
  if (!a || a->begin != ptr) return g_sticky != cudaSuccess ? g_sticky : fail(cudaErrorInvalidDevicePointer);
  // After a fault a GPU's context is gone and cudaFree says so; the emulator still hands the
  // host memory back, so a process that reports a fault and exits leaks nothing.
  detail::unregister_allocation(ptr);
  std::free(ptr);
  return g_sticky;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (g_sticky != cudaSuccess) return g_sticky;
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  void* p = nullptr;
  if (posix_memalign(&p, 256, std::max<size_t>(bytes, 1)) != 0) return fail(cudaErrorMemoryAllocation);
  g_host_allocations[static_cast<const char*>(p)] = bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (g_sticky != cudaSuccess) return g_sticky;
  if (!ptr) return cudaSuccess;
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  auto it = g_host_allocations.find(static_cast<const char*>(ptr));
  if (it == g_host_allocations.end()) return fail(cudaErrorInvalidValue);
  g_host_allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (g_sticky != cudaSuccess) return g_sticky;
  if (bytes == 0) return cudaSuccess;
  if (!copy_is_valid(dst, src, bytes, kind)) return fail(cudaErrorInvalidValue);
  return enqueue(stream, node_of_type(cudaGraphNodeTypeMemcpy), [=]() {
    std::memmove(dst, src, bytes);
    detail::mark_written(dst, bytes);  // a no-op for host memory
    if (kind == cudaMemcpyDeviceToDevice) record_library_call("cudaMemcpyAsync (device to device)", 0, 2 * bytes, "fp32");
    return cudaSuccess;
  });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  deliver_pending_fault();
  if (g_sticky != cudaSuccess) return g_sticky;
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;  // it synchronises
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (g_sticky != cudaSuccess) return g_sticky;
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(ptr, bytes)) return fail(cudaErrorInvalidValue);
  return enqueue(stream, node_of_type(cudaGraphNodeTypeMemset), [=]() {
    std::memset(ptr, value, bytes);
    detail::mark_written(ptr, bytes);
    record_library_call("cudaMemsetAsync", 0, bytes, "fp32");
    return cudaSuccess;
  });
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  deliver_pending_fault();
  if (g_sticky != cudaSuccess) return g_sticky;
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  return cudaMemsetAsync(ptr, value, bytes, nullptr);
}

// ---- streams and events: work is done when it is enqueued, so waiting is immediate ----

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (g_sticky != cudaSuccess) return g_sticky;
  *stream = new Stream;
  (*stream)->flags = flags;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capturing) forget_capture(stream);
  delete stream;
  return g_sticky;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  deliver_pending_fault();
  if (g_sticky != cudaSuccess) return g_sticky;
  if (stream_of(stream)->capturing || refused_during_capture()) {
    refused_during_capture();
    return cudaErrorStreamCaptureUnsupported;
  }
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  if (g_sticky != cudaSuccess) return g_sticky;
  *event = new Event;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  delete event;
  return g_sticky;
}

// During a capture, recording an event makes no graph node: the runtime turns it into an
// ordering point for other streams' captured work (only cudaEventRecordWithFlags with
// cudaEventRecordExternal makes a node), and one captured stream needs no ordering point.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (g_sticky != cudaSuccess) return g_sticky;
  if (stream_of(stream)->capturing) return cudaSuccess;
  if (g_pending != cudaSuccess) return cudaSuccess;  // the device has faulted: nothing more runs
  event->recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  deliver_pending_fault();
  if (g_sticky != cudaSuccess) return g_sticky;
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  return cudaSuccess;
}

// ---- graphs: capture records a stream's work, a launch replays it in order ----

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (g_sticky != cudaSuccess) return g_sticky;
  if (!stream) return fail(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
  if (stream->capturing) return fail(cudaErrorIllegalState);
  stream->capturing = true;
  stream->capture_invalidated = false;
  stream->captured.clear();
  g_capturing.push_back(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  if (!stream || !stream->capturing) return fail(cudaErrorIllegalState);
  stream->capturing = false;
  forget_capture(stream);
  std::vector<GraphNode> nodes = std::move(stream->captured);
  stream->captured.clear();
  if (stream->capture_invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  if (g_sticky != cudaSuccess) return g_sticky;
  *graph = new Graph{std::move(nodes)};
  return cudaSuccess;
}

// Asks, never forbidden: a library (cuBLASLt's plans in linear.cu) checks before it does what
// a capture would refuse.
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!status) return fail(cudaErrorInvalidValue);
  *status = cudaStreamCaptureStatusNone;
  if (g_sticky != cudaSuccess) return g_sticky;
  const Stream* s = stream_of(stream);
  if (s->capturing)
    *status = s->capture_invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = nullptr;
  if (g_sticky != cudaSuccess) return g_sticky;
  if (!graph) return fail(cudaErrorInvalidValue);
  *exec = new GraphExec;
  for (const GraphNode& node : graph->nodes) (*exec)->nodes.push_back(node.work);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return fail(cudaErrorInvalidValue);
  return enqueue(stream, node_of_type(cudaGraphNodeTypeGraph), [exec]() {  // captured: a child-graph node
    for (Work& node : exec->nodes) {
      if (g_pending != cudaSuccess) break;  // a node faulted: the rest of the graph does not run
      const cudaError_t e = node();
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  });
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return g_sticky;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return g_sticky;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  if (g_sticky != cudaSuccess) return g_sticky;
  if (!graph || !numNodes) return fail(cudaErrorInvalidValue);
  if (!nodes) {
    *numNodes = graph->nodes.size();
    return cudaSuccess;
  }
  const size_t given = std::min(*numNodes, graph->nodes.size());
  for (size_t i = 0; i < *numNodes; ++i) nodes[i] = i < given ? &graph->nodes[i] : nullptr;
  *numNodes = given;
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* pType) {
  if (g_sticky != cudaSuccess) return g_sticky;
  if (!node || !pType) return fail(cudaErrorInvalidValue);
  *pType = node->type;
  return cudaSuccess;
}

cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* pNodeParams) {
  if (g_sticky != cudaSuccess) return g_sticky;
  if (!node || !pNodeParams || node->type != cudaGraphNodeTypeKernel) return fail(cudaErrorInvalidValue);
  if (node->library) return fail(cudaErrorInvalidDeviceFunction);  // not a kernel the runtime registered
  *pNodeParams = node->kernel;
  return cudaSuccess;
}

cudaError_t cudaFuncGetName(const char** name, const void* func) {
  if (g_sticky != cudaSuccess) return g_sticky;
  if (!name || !func) return fail(cudaErrorInvalidValue);
  auto it = g_kernel_names.find(func);
  if (it == g_kernel_names.end() || g_library_kernels.count(func)) return fail(cudaErrorInvalidDeviceFunction);
  *name = it->second;
  return cudaSuccess;
}

namespace {

// The emulated driver's functions (cudaGetDriverEntryPointByVersion). A CUfunction or CUkernel
// here is the kernel's address, as func is in the runtime's node parameters.
CUresult driver_graph_kernel_node_get_params(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* params) {
  if (!node || !params || node->type != cudaGraphNodeTypeKernel) return CUDA_ERROR_INVALID_VALUE;
  const cudaKernelNodeParams& k = node->kernel;
  *params = CUDA_KERNEL_NODE_PARAMS{};
  void* kernel = k.func;
  if (node->library)
    params->kern = static_cast<CUkernel>(kernel);
  else
    params->func = static_cast<CUfunction>(kernel);
  params->gridDimX = k.gridDim.x;
  params->gridDimY = k.gridDim.y;
  params->gridDimZ = k.gridDim.z;
  params->blockDimX = k.blockDim.x;
  params->blockDimY = k.blockDim.y;
  params->blockDimZ = k.blockDim.z;
  params->sharedMemBytes = k.sharedMemBytes;
  return CUDA_SUCCESS;
}

CUresult driver_name_of(const char** name, const void* kernel) {
  if (!name || !kernel) return CUDA_ERROR_INVALID_VALUE;
  auto it = g_kernel_names.find(kernel);
  if (it == g_kernel_names.end()) return CUDA_ERROR_NOT_FOUND;
  *name = it->second;
  return CUDA_SUCCESS;
}
CUresult driver_func_get_name(const char** name, CUfunction func) { return driver_name_of(name, func); }
CUresult driver_kernel_get_name(const char** name, CUkernel kernel) { return driver_name_of(name, kernel); }

}  // namespace

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus) {
  if (!symbol || !funcPtr || flags != cudaEnableDefault) return fail(cudaErrorInvalidValue);
  struct Entry {
    const char* symbol;
    unsigned int since;  // the CUDA version that brought this form of it
    void* function;
  };
  const Entry entries[] = {
      {"cuGraphKernelNodeGetParams", 12000, reinterpret_cast<void*>(&driver_graph_kernel_node_get_params)},
      {"cuFuncGetName", 12030, reinterpret_cast<void*>(&driver_func_get_name)},
      {"cuKernelGetName", 12030, reinterpret_cast<void*>(&driver_kernel_get_name)},
  };
  cudaDriverEntryPointQueryResult result = cudaDriverEntryPointSymbolNotFound;
  *funcPtr = nullptr;
  for (const Entry& e : entries) {
    if (std::strcmp(symbol, e.symbol) != 0) continue;
    result = cudaVersion >= e.since ? cudaDriverEntryPointSuccess : cudaDriverEntryPointVersionNotSufficent;
    if (result == cudaDriverEntryPointSuccess) *funcPtr = e.function;
  }
  if (driverStatus) *driverStatus = result;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (g_sticky != cudaSuccess) return g_sticky;
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > kSharedOptin)
    return fail(cudaErrorInvalidValue);
  g_dynamic_shared_limit[kernel] = value;
  return cudaSuccess;
}

}  // namespace simt::cuda_api
