// The thin layer over cuDNN's backend API (cudnn_graph.h): descriptors, tensors, ops, plans.
#include "kernels/cudnn/cudnn_graph.h"

#include <string>
#include <utility>

namespace tt {

void cudnn_check(cudnnStatus_t status, const std::string& what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string message = what + ": " + cudnnGetErrorString(status);
  // cuDNN's message may span lines: each run of line breaks becomes "; " (none at the end).
  std::string detail_line;
  bool line_break = false;
  for (const char* c = detail; *c != '\0'; ++c) {
    if (*c == '\n' || *c == '\r') {
      line_break = true;
      continue;
    }
    if (line_break && !detail_line.empty()) detail_line += "; ";
    line_break = false;
    detail_line += *c;
  }
  if (!detail_line.empty()) message += " (" + detail_line + ")";
  throw CudnnError(message);
}

CudnnDescriptor::CudnnDescriptor(cudnnBackendDescriptorType_t type) {
  cudnn_check(cudnnBackendCreateDescriptor(type, &desc_), "cudnnBackendCreateDescriptor");
}

CudnnDescriptor::~CudnnDescriptor() {
  if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
}

CudnnDescriptor& CudnnDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                      int64_t count, const void* values) {
  cudnn_check(cudnnBackendSetAttribute(desc_, name, type, count, values),
              "cudnnBackendSetAttribute (attribute " + std::to_string(static_cast<int>(name)) + ")");
  attributes_set_.push_back(name);
  return *this;
}

CudnnDescriptor& CudnnDescriptor::set_descriptor(cudnnBackendAttributeName_t name, const CudnnDescriptor& value) {
  const cudnnBackendDescriptor_t d = value.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

void CudnnDescriptor::finalize(const std::string& what) { cudnn_check(cudnnBackendFinalize(desc_), what); }

Dims4 packed_strides(const Dims4& dims) {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

// ---- building the graph ----

CudnnDescriptor& CudnnGraph::keep(std::unique_ptr<CudnnDescriptor> d) {
  owned_.push_back(std::move(d));
  return *owned_.back();
}

const CudnnDescriptor& CudnnGraph::tensor_desc(int64_t id) const {
  const auto it = tensors_.find(id);
  if (it == tensors_.end()) throw std::logic_error("cuDNN graph: no tensor with id " + std::to_string(id));
  return *it->second;
}

int64_t CudnnGraph::add_tensor(cudnnDataType_t dtype, const Dims4& dims, const Dims4& strides, bool is_virtual,
                               bool by_value, float value) {
  const int64_t id = next_id_++;
  const int64_t alignment = kCudnnByteAlignment;
  const bool yes = true;
  CudnnDescriptor& t = keep(std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  if (is_virtual) t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
  if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  t.finalize("cuDNN tensor descriptor");
  tensors_[id] = &t;
  if (by_value) scalars_[id] = value;
  tensor_list_.push_back(GraphTensor{id, dtype, dims, strides, is_virtual, by_value, value});
  return id;
}

int64_t CudnnGraph::tensor(cudnnDataType_t dtype, const Dims4& dims, const Dims4& strides, bool is_virtual) {
  return add_tensor(dtype, dims, strides, is_virtual, false, 0.0f);
}

int64_t CudnnGraph::scalar(float value) {
  const Dims4 ones = {1, 1, 1, 1};
  return add_tensor(CUDNN_DATA_FLOAT, ones, ones, false, true, value);
}

void CudnnGraph::add_op(std::unique_ptr<CudnnDescriptor> op, const CudnnDescriptor* inner, GraphOp record) {
  op->finalize("cuDNN operation descriptor");
  ops_.push_back(op->get());
  record.attributes = op->attributes_set();
  if (inner != nullptr)
    record.attributes.insert(record.attributes.end(), inner->attributes_set().begin(), inner->attributes_set().end());
  op_list_.push_back(std::move(record));
  keep(std::move(op));
}

// The compute type only. No CUDNN_ATTR_MATMUL_PADDING_VALUE: cudnn-frontend sets it only when
// it is non-zero (include/cudnn_frontend/node/matmul.h, commit 3929da2), and only its
// padding-mask graphs ask for one; every sequence here is full length.
void CudnnGraph::matmul(int64_t a, int64_t b, int64_t c) {
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  CudnnDescriptor& desc = keep(std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_MATMUL_DESCRIPTOR));
  desc.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  desc.finalize("cuDNN matmul descriptor");
  auto op = std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op->set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensor_desc(a))
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensor_desc(b))
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensor_desc(c))
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc);
  add_op(std::move(op), &desc,
         GraphOp{GraphOpKind::Matmul, a, b, 0, c, CUDNN_POINTWISE_ADD, CUDNN_REDUCE_TENSOR_ADD, -1, 0.0, {}});
}

void CudnnGraph::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b, int64_t t,
                           cudnnDataType_t compute_type, int64_t axis) {
  CudnnDescriptor& desc = keep(std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
  desc.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute_type);
  if (axis >= 0) desc.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  desc.finalize("cuDNN pointwise descriptor");
  const float one = 1.0f;
  auto op = std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op->set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc)
      .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensor_desc(x));
  if (b != 0) op->set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensor_desc(b));
  if (t != 0) op->set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensor_desc(t));
  op->set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensor_desc(y))
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  add_op(std::move(op), &desc,
         GraphOp{GraphOpKind::Pointwise, x, b, t, y, mode, CUDNN_REDUCE_TENSOR_ADD, axis, 0.0, {}});
}

void CudnnGraph::reduction(cudnnReduceTensorOp_t reduce, int64_t x, int64_t y) {
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  CudnnDescriptor& desc = keep(std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
  desc.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute)
      .set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
  desc.finalize("cuDNN reduction descriptor");
  auto op = std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op->set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensor_desc(x))
      .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensor_desc(y))
      .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc);
  add_op(std::move(op), &desc, GraphOp{GraphOpKind::Reduction, x, 0, 0, y, CUDNN_POINTWISE_ADD, reduce, -1, 0.0, {}});
}

void CudnnGraph::reshape(int64_t x, int64_t y) {
  auto op = std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op->set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensor_desc(x))
      .set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensor_desc(y));
  add_op(std::move(op), nullptr,
         GraphOp{GraphOpKind::Reshape, x, 0, 0, y, CUDNN_POINTWISE_ADD, CUDNN_REDUCE_TENSOR_ADD, -1, 0.0, {}});
}

void CudnnGraph::bernoulli(int64_t y, int64_t seed, int64_t offset, double keep_probability) {
  const cudnnRngDistribution_t distribution = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
  CudnnDescriptor& desc = keep(std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_RNG_DESCRIPTOR));
  desc.set(CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, 1, &distribution)
      .set(CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, 1, &keep_probability);
  desc.finalize("cuDNN RNG descriptor");
  auto op = std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR);
  op->set_descriptor(CUDNN_ATTR_OPERATION_RNG_YDESC, tensor_desc(y))
      .set_descriptor(CUDNN_ATTR_OPERATION_RNG_SEED, tensor_desc(seed))
      .set_descriptor(CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, tensor_desc(offset))
      .set_descriptor(CUDNN_ATTR_OPERATION_RNG_DESC, desc);
  add_op(std::move(op), &desc,
         GraphOp{GraphOpKind::Bernoulli, seed, offset, 0, y, CUDNN_POINTWISE_ADD, CUDNN_REDUCE_TENSOR_ADD, -1,
                 keep_probability, {}});
}

// ---- plans ----

namespace {

// The engine behind an engine config: its global index, and whether cuDNN notes it as
// nondeterministic (floating-point atomics, so results vary run to run).
struct EngineInfo {
  int64_t index = -1;
  bool nondeterministic = false;
};

EngineInfo engine_info(const CudnnDescriptor& config) {
  EngineInfo info;
  CudnnDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t engine_desc = engine.get();
  int64_t count = 0;
  cudnn_check(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                       &count, &engine_desc),
              "cuDNN engine of a config");
  cudnn_check(cudnnBackendGetAttribute(engine_desc, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count,
                                       &info.index),
              "cuDNN engine index");
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  cudnn_check(cudnnBackendGetAttribute(engine_desc, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                       CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes),
              "cuDNN engine numerical notes");
  for (int64_t i = 0; i < count; ++i)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) info.nondeterministic = true;
  return info;
}

}  // namespace

std::unique_ptr<CudnnDescriptor> CudnnGraph::operation_graph(cudnnHandle_t handle, const std::string& what) const {
  auto graph = std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
             ops_.data());
  if (handle != nullptr) graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  graph->finalize(what + ": operation graph");
  return graph;
}

std::unique_ptr<CudnnPlan> CudnnGraph::build(cudnnHandle_t handle, const std::string& what) {
  auto plan = std::make_unique<CudnnPlan>();
  std::unique_ptr<CudnnDescriptor> graph = operation_graph(handle, what);

  CudnnDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heuristics.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heuristics.finalize(what + ": heuristics");
  int64_t available = 0;
  cudnn_check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr),
              what + ": heuristics results");
  if (available == 0) throw CudnnError(what + ": cuDNN's heuristics (mode A) offer no engine for this graph");
  std::vector<std::unique_ptr<CudnnDescriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> config_handles;
  for (int64_t i = 0; i < available; ++i) {
    configs.push_back(std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    config_handles.push_back(configs.back()->get());
  }
  int64_t returned = 0;
  cudnn_check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned, config_handles.data()),
              what + ": heuristics results");

  // The first deterministic config that builds; otherwise one line on why none did.
  int64_t nondeterministic = 0, failed = 0;
  std::string last_failure;
  for (int64_t i = 0; i < returned; ++i) {
    const EngineInfo info = engine_info(*configs[i]);
    if (info.nondeterministic) {
      ++nondeterministic;
      continue;
    }
    auto candidate = std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    try {
      candidate->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
          .set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *configs[i]);
      candidate->finalize("engine " + std::to_string(info.index));
    } catch (const CudnnError& e) {
      ++failed;
      last_failure = e.what();
      continue;
    }
    int64_t count = 0;
    cudnn_check(cudnnBackendGetAttribute(candidate->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                         CUDNN_TYPE_INT64, 1, &count, &plan->workspace_bytes_),
                what + ": workspace size");
    plan->engine_name_ = "engine " + std::to_string(info.index);
    plan->plan_ = std::move(candidate);
    plan->keep_alive_.push_back(std::move(configs[i]));
    plan->keep_alive_.push_back(std::move(graph));
    for (auto& d : owned_) plan->keep_alive_.push_back(std::move(d));
    owned_.clear();
    for (const auto& [id, value] : scalars_) plan->scalars_[id] = std::make_unique<float>(value);
    return plan;
  }
  std::string why = std::to_string(returned) + " engine config(s) offered, " + std::to_string(nondeterministic) +
                    " nondeterministic, " + std::to_string(failed) + " failed to build";
  if (!last_failure.empty()) why += " (last: " + last_failure + ")";
  throw CudnnError(what + ": no engine could build a deterministic plan: " + why);
}

void CudnnPlan::execute(cudnnHandle_t handle, const std::map<int64_t, void*>& pointers, void* workspace) const {
  std::vector<int64_t> ids;
  std::vector<void*> data;
  for (const auto& [id, ptr] : pointers) {
    ids.push_back(id);
    data.push_back(ptr);
  }
  for (const auto& [id, value] : scalars_) {
    ids.push_back(id);
    data.push_back(value.get());
  }
  CudnnDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(ids.size()), ids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(data.size()),
           data.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize("cuDNN variant pack");
  cudnn_check(cudnnBackendExecute(handle, plan_->get(), pack.get()), "cudnnBackendExecute");
}

}  // namespace tt
