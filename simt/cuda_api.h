// The CUDA runtime as the emulator provides it: the types, constants and functions that
// kernels/cuda/ calls, with the runtime's names and meanings, implemented on the host by
// simt/runtime.cpp. Device memory is host memory (so AddressSanitizer sees out-of-bounds
// accesses), every stream runs its work at once and in order, and CUDA graphs record and
// replay. Declared in namespace simt::cuda_api, not in the global namespace, so that one
// program can hold both the real runtime (libcudart) and this one; the emulated build of
// kernels/cuda/ sees these names through the using-directive at the end.
#pragma once
#include <cstddef>
#include <cstdint>

namespace simt::cuda_api {

// ---- built-in vector types ----
struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

// ---- errors (the runtime's names; the numbers are the emulator's own) ----
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue,
  cudaErrorMemoryAllocation,
  cudaErrorInitializationError,
  cudaErrorInvalidConfiguration,
  cudaErrorInvalidDevice,
  cudaErrorInvalidDevicePointer,
  cudaErrorInvalidResourceHandle,
  cudaErrorNoDevice,
  cudaErrorLaunchFailure,
  cudaErrorMisalignedAddress,
  cudaErrorStreamCaptureUnsupported,
  cudaErrorStreamCaptureInvalidated,
  cudaErrorStreamCaptureWrongThread,
  cudaErrorIllegalState,
  cudaErrorInvalidDeviceFunction,
};
using cudaError_t = cudaError;

// ---- opaque handles ----
struct Stream;
struct Event;
struct Graph;
struct GraphExec;
struct GraphNode;
using cudaStream_t = Stream*;
using cudaEvent_t = Event*;
using cudaGraph_t = Graph*;
using cudaGraphExec_t = GraphExec*;
using cudaGraphNode_t = GraphNode*;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,  // a forbidden call broke the capture; it must still be ended
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};
// The kinds of graph node a stream capture records here (the runtime's numbers; it has more
// kinds, which the emulator never makes).
enum cudaGraphNodeType {
  cudaGraphNodeTypeKernel = 0x00,
  cudaGraphNodeTypeMemcpy = 0x01,
  cudaGraphNodeTypeMemset = 0x02,
  cudaGraphNodeTypeGraph = 0x04,  // a graph launched onto a capturing stream
};
// A kernel node's launch. The emulator keeps a launch's arguments in the node's own closure,
// so kernelParams and extra are null; func is the kernel's address (for a library's kernel, an
// address cudaFuncGetName names).
struct cudaKernelNodeParams {
  void* func;
  dim3 gridDim;
  dim3 blockDim;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
};
constexpr unsigned int cudaStreamDefault = 0x0;
constexpr unsigned int cudaStreamNonBlocking = 0x1;
constexpr unsigned int cudaEventDefault = 0x0;
constexpr unsigned int cudaEventDisableTiming = 0x2;

// The fields of cudaDeviceProp that tinytrain reads (an H200's numbers, simt/runtime.cpp).
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int multiProcessorCount;
  int major;
  int minor;
};

// ---- the runtime API ----
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
// Destroys the device's state: frees every allocation, graph capture and attribute, and clears
// errors, sticky ones too (after a fault, what a test needs to go on).
cudaError_t cudaDeviceReset();
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
// A graph's nodes, in the order they were captured: with nodes null, *numNodes is set to their
// number; otherwise up to *numNodes of them are written (the rest of the array nulled) and
// *numNodes is set to how many were.
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes);
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* pType);
cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* pNodeParams);  // kernel nodes only

// The name of a kernel (CUDA 12.3+): here the name its launch was written with (e.g.
// "layernorm_forward_kernel<S>"), where the runtime gives the mangled symbol; a kernel never
// launched has none (cudaErrorInvalidDeviceFunction).
cudaError_t cudaFuncGetName(const char** name, const void* func);
template <typename Kernel>
cudaError_t cudaFuncGetName(const char** name, Kernel* func) {
  return cudaFuncGetName(name, reinterpret_cast<const void*>(func));
}

// ---- the driver API's subset that tinytrain reaches through the runtime ----
// cudaGetDriverEntryPointByVersion hands out the driver's functions, so a program calls them
// without linking libcuda. Here they are the emulator's, with the driver's names and types.
// A library's kernel node is where the two APIs differ, as on a GPU: its kernel was loaded by the
// library (cuBLASLt's own module), not registered with the runtime, so
// cudaGraphKernelNodeGetParams fails with cudaErrorInvalidDeviceFunction while the driver's
// cuGraphKernelNodeGetParams gives it as a CUkernel (func null) that cuKernelGetName names. Our
// own kernels' nodes give func, which cuFuncGetName names.
#define CUDAAPI
using CUresult = int;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
struct CUfunc_st;
struct CUkern_st;
struct CUctx_st;
using CUfunction = CUfunc_st*;
using CUkernel = CUkern_st*;
using CUcontext = CUctx_st*;
using CUgraphNode = cudaGraphNode_t;  // one handle type for both APIs, as in the toolkit
struct CUDA_KERNEL_NODE_PARAMS {      // the toolkit's CUDA_KERNEL_NODE_PARAMS_v2
  CUfunction func;
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
  CUkernel kern;  // the kernel when func is null
  CUcontext ctx;
};
enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2,
};
constexpr unsigned long long cudaEnableDefault = 0x0;
// The emulated driver offers cuGraphKernelNodeGetParams (12.0 and later), cuFuncGetName and
// cuKernelGetName (12.3 and later): an earlier cudaVersion is
// cudaDriverEntryPointVersionNotSufficent, any other symbol cudaDriverEntryPointSymbolNotFound.
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus = nullptr);

// Per-kernel attributes are keyed by the kernel's address, as the runtime's template overload does.
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value);
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

}  // namespace simt::cuda_api

using namespace simt::cuda_api;  // the emulated build of kernels/cuda/ names these unqualified
