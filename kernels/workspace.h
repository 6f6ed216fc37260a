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

// largest_copy: the largest single host-to-device copy (the parameters); attention_floats:
// B*NH*T*T of one micro-batch when activations are 16-bit (the fp32 softmax work buffer of the
// attention kernels), else 0.
inline std::vector<WorkspaceItem> cuda_workspaces(size_t largest_copy, size_t attention_floats) {
  std::vector<WorkspaceItem> items = {
      {"cuBLASLt workspace", kCudaGemmWorkspaceBytes, true},
      {"reduction scratch", kCudaReduceScratchFloats * sizeof(float), true},
      {"reduction counters", kCudaReduceCounters * sizeof(int), true},
      {"staging (pinned host)", largest_copy < kCudaMaxStagingBytes ? largest_copy : kCudaMaxStagingBytes, false}};
  if (attention_floats > 0) items.push_back({"attention fp32 work", attention_floats * sizeof(float), true});
  return items;
}

}  // namespace tt
