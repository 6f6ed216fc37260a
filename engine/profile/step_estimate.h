// A model of one training step's time on a named GPU (engine/profile/device_model.h), op by
// op: `tinytrain profile --estimate h200`. Each op call is modelled as
//     max(FLOPs / peak, bytes / bandwidth) + nodes x node latency
// with its FLOPs and bytes from engine/profile/op_cost.h and its nodes counted: the op alone
// captured into a CUDA graph (ProfilingBackend's counting mode). The peak for a linear's FLOPs
// is the GEMM precision's (fp32, or tf32/bf16/fp16 on the tensor cores); other FLOPs (our
// attention kernels) are fp32 on the CUDA cores. A model: it never says what a GPU measured.
#pragma once
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/profile/device_model.h"
#include "engine/profile/profile_report.h"
#include "engine/profile/profiler.h"

namespace tt {

// One op (a Backend method) in one step, modelled.
struct OpEstimate {
  std::string op;
  int calls = 0;
  int nodes = 0;            // graph nodes of all its calls
  double math_us = 0;       // sum over calls of FLOPs / peak
  double memory_us = 0;     // sum over calls of bytes / bandwidth
  double modelled_us = 0;   // sum over calls of max(math, memory) + nodes x latency
};

struct StepEstimate {
  DeviceModel device;
  std::string gemm_precision;
  std::vector<OpEstimate> ops;  // in the order each op was first called
  OpEstimate total;             // "step": every op together
};

// One op call's ideal time: max(FLOPs / peak, bytes / bandwidth) + nodes x node latency, the
// FLOPs of a linear op or of attention's forward and backward at the GEMM precision's peak, any
// other op's at fp32's.
struct IdealOp {
  double math_us = 0, memory_us = 0, us = 0;
};
IdealOp ideal_op(const char* op, const OpCost& cost, int nodes, const DeviceModel& device,
                 const std::string& gemm_precision);

// `counted`: a step recorded in counting mode (every op's nodes known). Throws
// std::logic_error for an op without a node count.
StepEstimate estimate_step(const StepProfile& counted, const DeviceModel& device, const std::string& gemm_precision);

// Prints the modelled table, labelled a model with its inputs; with `measured` (a real GPU's
// profile of the same step), each op's measured time beside it.
void print_step_estimate(const StepEstimate& estimate, const ProfileSummary* measured, std::ostream& out);

}  // namespace tt
