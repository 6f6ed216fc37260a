// cuDNN's fused attention for the CUDA backend (cudnn_attention.h): a cuDNN handle, the
// forward and backward plans of each prepared case, one workspace, and the dropout RNG state.
#include "kernels/cuda/cudnn_attention.h"

#include <cudnn_graph.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <tuple>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cudnn/cudnn_graph.h"
#include "kernels/cudnn/sdpa_graphs.h"

namespace tt {

namespace {

constexpr int kMaxHeadSize = 128;  // cuDNN's fused backward on sm_80/sm_90 (frontend support surface)
constexpr int kRngOffsetSlot = 2;  // int64 slots: the offset 16 bytes after the seed
static_assert(kRngOffsetSlot * sizeof(int64_t) % kCudnnByteAlignment == 0, "the RNG offset must keep the alignment");

// cuDNN's dropout RNG state for one attention call: the Philox seed at state[0], the offset
// at state[kRngOffsetSlot] (16 bytes on: every operand is 16-byte aligned). The seed (host)
// names the mask site (run seed, layer, micro-batch rows); the offset moves one whole mask
// (numel draws) per training step, read from device memory so that one captured CUDA graph
// serves every step. One thread: two integers.
__global__ void sdpa_rng_state_kernel(int64_t* state, uint64_t site_seed, const uint32_t* step, uint64_t numel) {
  state[0] = static_cast<int64_t>(site_seed);
  state[kRngOffsetSlot] = static_cast<int64_t>(static_cast<uint64_t>(*step) * numel);
}

// SplitMix64's finaliser: distinct inputs -> well-spread, distinct-looking seeds.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

cudnnDataType_t cudnn_dtype(DType storage) {
  switch (storage) {
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F16: return CUDNN_DATA_HALF;
    default: throw std::logic_error("cuDNN attention: no fused path for " + std::string(dtype_name(storage)));
  }
}

std::string version_string(size_t version) {  // 91900 -> "9.19.0"
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

class CudnnAttentionImpl final : public CudnnAttention {
 public:
  explicit CudnnAttentionImpl(cudaStream_t stream) : stream_(stream) {
    cudnn_check(cudnnCreate(&handle_), "cudnnCreate");
    try {
      cudnn_check(cudnnSetStream(handle_, stream_), "cudnnSetStream");
      CUDA_CHECK(cudaMalloc(&rng_state_, (kRngOffsetSlot + 1) * sizeof(int64_t)));
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudnnAttentionImpl() override { release(); }

  std::string describe() const override {
    std::string line = "cuDNN " + version_string(cudnnGetVersion()) + " fused attention (";
    for (const auto& [key, plans] : plans_)
      line += "forward " + plans.forward->engine_name() + ", backward " + plans.backward->engine_name() + "; ";
    return line + "workspace " + std::to_string(workspace_bytes_) + " bytes)";
  }

  void prepare(const AttentionShape& s, DType storage, float dropout_p) override {
    const std::string why_not = cudnn_attention_unsupported(s, storage, dropout_p);
    if (!why_not.empty()) throw std::runtime_error(why_not);
    if (prepared(s, storage, dropout_p)) return;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone)
      throw std::logic_error("cuDNN attention: plans must be prepared before CUDA graph capture");
    const SdpaCase c{s.B, s.T, s.NH, s.HS, s.causal, cudnn_dtype(storage), dropout_p};
    // The operands' alignment, once here rather than at every execute (sdpa_graphs.h).
    const std::string misaligned = sdpa_misaligned_operand(c);
    if (!misaligned.empty()) throw std::runtime_error(misaligned);
    Plans plans;
    CudnnGraph forward_graph, backward_graph;
    describe_sdpa_forward(forward_graph, c, plans.forward_ids);
    plans.forward = forward_graph.build(handle_, "cuDNN attention forward");
    describe_sdpa_backward(backward_graph, c, plans.backward_ids);
    plans.backward = backward_graph.build(handle_, "cuDNN attention backward");
    const int64_t need = std::max(plans.forward->workspace_bytes(), plans.backward->workspace_bytes());
    if (need > workspace_bytes_) {  // the new buffer first: on failure the old one still serves
      void* grown = nullptr;
      CUDA_CHECK(cudaMalloc(&grown, static_cast<size_t>(need)));
      CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old workspace may still be in use
      if (workspace_ != nullptr) CUDA_CHECK(cudaFree(workspace_));
      workspace_ = grown;
      workspace_bytes_ = need;
    }
    plans_.emplace(key(s, storage, dropout_p), std::move(plans));
  }

  bool prepared(const AttentionShape& s, DType storage, float dropout_p) const override {
    return plans_.count(key(s, storage, dropout_p)) != 0;
  }

  void forward(Tensor out, Tensor stats, Tensor qkv, const AttentionShape& s, const DropoutMask& dropout) override {
    const Plans& p = plans_for(s, qkv.dtype, dropout.p);
    const SdpaForwardIds& id = p.forward_ids;
    std::map<int64_t, void*> pointers = {{id.o, out.data}, {id.stats, stats.data}};
    add_qkv(pointers, qkv, s, id.q, id.k, id.v);
    add_rng_state(pointers, s, dropout, id.seed, id.offset);
    p.forward->execute(handle_, pointers, workspace_);
  }

  void backward(Tensor dqkv, Tensor softmax_sum, Tensor dout, Tensor qkv, Tensor out, Tensor stats,
                const AttentionShape& s, const DropoutMask& dropout) override {
    const Plans& p = plans_for(s, qkv.dtype, dropout.p);
    const SdpaBackwardIds& id = p.backward_ids;
    std::map<int64_t, void*> pointers = {
        {id.o, out.data}, {id.dout, dout.data}, {id.stats, stats.data}, {id.softmax_sum, softmax_sum.data}};
    add_qkv(pointers, qkv, s, id.q, id.k, id.v);
    add_qkv(pointers, dqkv, s, id.dq, id.dk, id.dv);
    add_rng_state(pointers, s, dropout, id.seed, id.offset);
    p.backward->execute(handle_, pointers, workspace_);
  }

 private:
  struct Plans {
    std::unique_ptr<CudnnPlan> forward, backward;
    SdpaForwardIds forward_ids{};
    SdpaBackwardIds backward_ids{};
  };
  using Key = std::tuple<int, int, int, int, bool, int, uint32_t>;

  static Key key(const AttentionShape& s, DType storage, float dropout_p) {
    uint32_t p_bits = 0;
    std::memcpy(&p_bits, &dropout_p, sizeof(p_bits));
    return Key{s.B, s.T, s.NH, s.HS, s.causal, static_cast<int>(storage), p_bits};
  }

  const Plans& plans_for(const AttentionShape& s, DType storage, float dropout_p) const {
    const auto it = plans_.find(key(s, storage, dropout_p));
    if (it == plans_.end()) throw std::logic_error("cuDNN attention: this case was not prepared");
    return it->second;
  }

  // q, k, v: the three C-wide parts of each packed row (their alignment: prepare).
  static void add_qkv(std::map<int64_t, void*>& pointers, Tensor packed, const AttentionShape& s, int64_t q,
                      int64_t k, int64_t v) {
    const size_t part = static_cast<size_t>(s.NH) * s.HS * dtype_size(packed.dtype);
    char* base = static_cast<char*>(packed.data);
    pointers[q] = base;
    pointers[k] = base + part;
    pointers[v] = base + 2 * part;
  }

  void add_rng_state(std::map<int64_t, void*>& pointers, const AttentionShape& s, const DropoutMask& dropout,
                     int64_t seed_id, int64_t offset_id) {
    if (dropout.p <= 0.0f) return;
    const uint64_t site = (static_cast<uint64_t>(dropout.layer) << 8) | static_cast<uint64_t>(dropout.site);
    const uint64_t site_seed = mix64(mix64(mix64(dropout.seed) ^ site) ^ dropout.index_offset);
    const uint64_t numel = static_cast<uint64_t>(s.B) * s.NH * s.T * s.T;
    sdpa_rng_state_kernel<<<1, 1, 0, stream_>>>(rng_state_, site_seed, dropout.step, numel);
    CUDA_CHECK(cudaGetLastError());
    pointers[seed_id] = rng_state_;
    pointers[offset_id] = rng_state_ + kRngOffsetSlot;
  }

  void release() noexcept {
    plans_.clear();
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (rng_state_ != nullptr) cudaFree(rng_state_);
    if (handle_ != nullptr) cudnnDestroy(handle_);
    workspace_ = nullptr;
    rng_state_ = nullptr;
    handle_ = nullptr;
  }

  cudaStream_t stream_;
  cudnnHandle_t handle_ = nullptr;
  std::map<Key, Plans> plans_;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
  int64_t* rng_state_ = nullptr;
};

}  // namespace

std::string cudnn_attention_unsupported(const AttentionShape& s, DType storage, float dropout_p) {
  if (storage != DType::BF16 && storage != DType::F16)
    return std::string("cuDNN's fused attention takes bf16/fp16 inputs only, and this run stores ") +
           (storage == DType::F32 ? "fp32" : dtype_name(storage));
  if (s.HS % 8 != 0 || s.HS > kMaxHeadSize)
    return "head size " + std::to_string(s.HS) + ": cuDNN's fused attention needs a multiple of 8 up to " +
           std::to_string(kMaxHeadSize);
  if (s.T < 2) return "seq 1: cuDNN's fused attention backward needs seq >= 2";
  if (s.kv_heads() != s.NH)  // our graph strides q, k and v alike; grouped heads would need their own
    return std::to_string(s.kv_heads()) + " key/value heads for " + std::to_string(s.NH) +
           " query heads: tinytrain builds cuDNN's graph for multi-head attention only";
  if (!(dropout_p >= 0.0f && dropout_p < 1.0f))
    return "dropout " + std::to_string(dropout_p) + ": cuDNN's fused attention needs 0 <= p < 1";
  return "";
}

std::unique_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t stream) {
  return std::make_unique<CudnnAttentionImpl>(stream);
}

}  // namespace tt
