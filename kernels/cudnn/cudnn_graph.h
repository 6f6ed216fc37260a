// A thin layer over cuDNN's backend (graph) API, enough to describe a fused operation graph
// and run it: tensors, matmul / pointwise / reduction / reshape / RNG ops, and an execution
// plan picked by cuDNN's heuristics. Every descriptor is owned (RAII); errors throw CudnnError
// with cuDNN's own message. What the graphs compute is in sdpa_graphs.cpp.
//
// The backend API in four steps:
//   1. tensors: every tensor of the graph gets a descriptor (dtype, dims, strides, a unique
//      id). "Virtual" tensors are intermediates that cuDNN keeps on chip (never in memory);
//      "by-value" tensors are scalars read from host memory when the plan runs.
//   2. operations: each op names its input and output tensors.
//   3. operation graph -> heuristics (mode A) -> engine configs, in cuDNN's preference order
//      -> the first one that finalizes as an execution plan. Finalizing compiles kernels
//      (runtime fusion), so plans are built once and reused.
//   4. execute: a variant pack maps every non-virtual tensor id to a device pointer (host
//      pointer for by-value scalars) and supplies the plan's workspace.
#pragma once
#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tt {

class CudnnError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CudnnError "<what>: <status> (<cuDNN's last error message>)" unless status is success.
// One line: line breaks in cuDNN's message become "; ".
void cudnn_check(cudnnStatus_t status, const std::string& what);

// The byte alignment every tensor descriptor declares (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, the
// frontend's default too): every operand's address, and every stride between its rows, must
// be a multiple of it. The caller checks that when the plans are prepared (sdpa_graphs.h).
constexpr int64_t kCudnnByteAlignment = 16;

// One backend descriptor, destroyed with its owner.
class CudnnDescriptor {
 public:
  explicit CudnnDescriptor(cudnnBackendDescriptorType_t type);
  ~CudnnDescriptor();
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  CudnnDescriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                       const void* values);
  CudnnDescriptor& set_descriptor(cudnnBackendAttributeName_t name, const CudnnDescriptor& value);
  void finalize(const std::string& what);
  // The attributes set so far, in order (what tests compare with cudnn-frontend's graphs).
  const std::vector<cudnnBackendAttributeName_t>& attributes_set() const { return attributes_set_; }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
  std::vector<cudnnBackendAttributeName_t> attributes_set_;
};

using Dims4 = std::array<int64_t, 4>;

// Row-major strides of dims (the last dimension contiguous).
Dims4 packed_strides(const Dims4& dims);

// A finalized execution plan with what it needs to run: its workspace size and the host
// values of its by-value scalars (the variant pack points at them).
class CudnnPlan {
 public:
  int64_t workspace_bytes() const { return workspace_bytes_; }
  const std::string& engine_name() const { return engine_name_; }
  // Enqueues the plan on the handle's stream. `pointers` maps every non-virtual, non-scalar
  // tensor id of the graph to its device memory; workspace has workspace_bytes().
  void execute(cudnnHandle_t handle, const std::map<int64_t, void*>& pointers, void* workspace) const;

 private:
  friend class CudnnGraph;
  std::vector<std::unique_ptr<CudnnDescriptor>> keep_alive_;  // tensors, ops, graph, config
  std::unique_ptr<CudnnDescriptor> plan_;
  std::map<int64_t, std::unique_ptr<float>> scalars_;  // by-value scalar id -> its value
  int64_t workspace_bytes_ = 0;
  std::string engine_name_;
};

// The graph as plain data, alongside the descriptors: what each tensor and op is, in the
// order they were added (a valid evaluation order). Tests evaluate it on the host with the
// ops' documented semantics (tests/cudnn_graph_eval.h).
struct GraphTensor {
  int64_t id;
  cudnnDataType_t dtype;
  Dims4 dims, strides;
  bool is_virtual, by_value;
  float value;  // by-value scalars only
};
enum class GraphOpKind { Matmul, Pointwise, Reduction, Reshape, Bernoulli };
struct GraphOp {
  GraphOpKind kind;
  int64_t x, b, t, y;  // inputs x, b, t (0: none) and output y; matmul: y = x @ b; Bernoulli:
                       // y from the seed x and the offset b
  cudnnPointwiseMode_t pointwise_mode;
  cudnnReduceTensorOp_t reduce_op;
  int64_t axis;             // GEN_INDEX
  double keep_probability;  // Bernoulli
  // Every attribute set on the op's descriptors: the operation's own, then its matmul /
  // pointwise / reduction / RNG descriptor's (none for a reshape).
  std::vector<cudnnBackendAttributeName_t> attributes;
};

// Builds one operation graph. Tensor ids are handed out in order from 1.
class CudnnGraph {
 public:
  // A tensor in memory (virtual = false) or an on-chip intermediate (virtual = true).
  int64_t tensor(cudnnDataType_t dtype, const Dims4& dims, const Dims4& strides, bool is_virtual);
  int64_t intermediate(cudnnDataType_t dtype, const Dims4& dims) {
    return tensor(dtype, dims, packed_strides(dims), true);
  }
  // An fp32 scalar passed by value when the plan runs, shaped [1,1,1,1] to broadcast.
  int64_t scalar(float value);

  // c = a @ b over the last two dims (batched over the first two), accumulated in fp32.
  void matmul(int64_t a, int64_t b, int64_t c);
  // y = mode(x [, b [, t]]) elementwise, computed in compute_type; axis only for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b = 0, int64_t t = 0,
                 cudnnDataType_t compute_type = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // y = reduce(x) over the dims where y has size 1, in fp32.
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  // y = x with other strides (or another dtype): a transpose by layout.
  void reshape(int64_t x, int64_t y);
  // y = Bernoulli(keep_probability) samples (1 kept, 0 dropped) from cuDNN's Philox stream,
  // keyed by the int64 device scalars seed and offset.
  void bernoulli(int64_t y, int64_t seed, int64_t offset, double keep_probability);

  size_t op_count() const { return ops_.size(); }
  const std::vector<GraphTensor>& tensor_list() const { return tensor_list_; }
  const std::vector<GraphOp>& op_list() const { return op_list_; }
  // The finalized operation graph (handle may be null: a graph can be checked without a GPU).
  std::unique_ptr<CudnnDescriptor> operation_graph(cudnnHandle_t handle, const std::string& what) const;
  // The operation graph, its heuristics and the first engine config that builds. Throws
  // CudnnError naming why no engine can run the graph.
  std::unique_ptr<CudnnPlan> build(cudnnHandle_t handle, const std::string& what);

 private:
  int64_t add_tensor(cudnnDataType_t dtype, const Dims4& dims, const Dims4& strides, bool is_virtual, bool by_value,
                     float value);
  const CudnnDescriptor& tensor_desc(int64_t id) const;
  CudnnDescriptor& keep(std::unique_ptr<CudnnDescriptor> d);
  // Finalizes op and records it, with the attributes of op and of `inner` (its matmul /
  // pointwise / reduction / RNG descriptor; null for a reshape).
  void add_op(std::unique_ptr<CudnnDescriptor> op, const CudnnDescriptor* inner, GraphOp record);

  int64_t next_id_ = 1;
  std::map<int64_t, CudnnDescriptor*> tensors_;
  std::map<int64_t, float> scalars_;
  std::vector<std::unique_ptr<CudnnDescriptor>> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::vector<GraphTensor> tensor_list_;
  std::vector<GraphOp> op_list_;
};

}  // namespace tt
