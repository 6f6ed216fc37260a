// Device memory a backend holds besides the engine's planned arenas (its workspaces), as
// numbers the memory plan can print before anything is allocated. The CUDA backend allocates
// exactly these (plus, with --attention cudnn, cuDNN's plan workspace, whose size only cuDNN
// knows: kernels/cudnn/); the CPU backend has none (its bf16/fp16 emulation copies are transient host
// vectors, see kernels/cpu/storage.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tt {

constexpr size_t kCudaGemmWorkspaceBytes = size_t{32} << 20;  // cuBLASLt workspace
constexpr size_t kCudaReduceScratchFloats = size_t{1} << 22;  // deterministic reductions
constexpr size_t kCudaReduceCounters = 64;                    // last-block counters (int32)
constexpr size_t kCudaMaxStagingBytes = size_t{64} << 20;     // pinned host staging, at most

struct WorkspaceItem {
  std::string name;
  size_t bytes;
  bool on_device;  // false: pinned host memory
};

// largest_copy: the largest single host-to-device copy (the parameters). The default flash
// attention needs no work buffer; `--attention naive` adds one of 2 B NH T^2 floats
// (CudaBackend::attention_work), which this list leaves out.
inline std::vector<WorkspaceItem> cuda_workspaces(size_t largest_copy) {
  std::vector<WorkspaceItem> items = {
      {"cuBLASLt workspace", kCudaGemmWorkspaceBytes, true},
      {"reduction scratch", kCudaReduceScratchFloats * sizeof(float), true},
      {"reduction counters", kCudaReduceCounters * sizeof(int), true},
      {"staging (pinned host)", largest_copy < kCudaMaxStagingBytes ? largest_copy : kCudaMaxStagingBytes, false}};
  return items;
}

}  // namespace tt
