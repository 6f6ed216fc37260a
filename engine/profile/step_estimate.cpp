// The step's modelled time on a named GPU (see step_estimate.h).
#include "engine/profile/step_estimate.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>

namespace tt {

IdealOp ideal_op(const char* op, const OpCost& cost, int nodes, const DeviceModel& device,
                 const std::string& gemm_precision) {
  // Linear ops, and attention's products (on tensor cores at 16 bits: flash_attention_mma.cu),
  // can run at the GEMM precision's peak.
  const bool matrix_products = std::strncmp(op, "linear_", 7) == 0 || std::strcmp(op, "attention_forward") == 0 ||
                               std::strcmp(op, "attention_backward") == 0;
  const double peak = (matrix_products ? device.tflops(gemm_precision) : device.fp32_tflops) * 1e12;  // FLOP/s
  IdealOp i;
  i.math_us = cost.flops > 0 ? cost.flops / peak * 1e6 : 0.0;
  i.memory_us = cost.bytes / (device.memory_gbps * 1e9) * 1e6;
  i.us = std::max(i.math_us, i.memory_us) + nodes * device.node_latency_us;
  return i;
}

StepEstimate estimate_step(const StepProfile& counted, const DeviceModel& device, const std::string& gemm_precision) {
  StepEstimate e;
  e.device = device;
  e.gemm_precision = gemm_precision;
  e.total.op = "step";
  std::map<std::string, size_t> row_of;
  for (const ProfiledOp& op : counted.ops) {
    if (op.nodes < 0) throw std::logic_error(std::string("estimate_step: no node count for ") + op.name);
    const IdealOp ideal = ideal_op(op.name, op.cost, op.nodes, device, gemm_precision);
    auto [it, added] = row_of.emplace(op.name, e.ops.size());
    if (added) e.ops.push_back(OpEstimate{op.name});
    for (OpEstimate* row : {&e.ops[it->second], &e.total}) {
      row->calls += 1;
      row->nodes += op.nodes;
      row->math_us += ideal.math_us;
      row->memory_us += ideal.memory_us;
      row->modelled_us += ideal.us;
    }
  }
  return e;
}

namespace {

constexpr int kOpColumn = 35;  // the longest op name: layernorm_residual_dropout_backward

}  // namespace

void print_step_estimate(const StepEstimate& e, const ProfileSummary* measured, std::ostream& out) {
  const DeviceModel& d = e.device;
  out << "estimate: a MODEL of one step on an " << d.description << ", not a measurement. Per op call: max(FLOPs / peak, "
      << "bytes / bandwidth) + its graph nodes x " << d.node_latency_us << " us; GEMMs at the " << e.gemm_precision
      << " peak (" << d.tflops(e.gemm_precision) << " TFLOP/s), other FLOPs at fp32 (" << d.fp32_tflops
      << " TFLOP/s). Inputs: " << d.sources << '\n';
  char line[256];
  std::snprintf(line, sizeof line, "%-*s %6s %6s %9s %9s %10s %9s %12s", kOpColumn, "op", "calls", "nodes", "math us",
                "memory us", "latency us", "model us", "measured us");
  const std::string rule(std::char_traits<char>::length(line), '-');
  out << line << '\n' << rule << '\n';
  auto measured_us = [&](const std::string& op) -> std::string {
    if (!measured) return "-";
    const double ms = op == "step" ? measured->step_ms : [&] {
      for (const OpSummary& s : measured->ops)
        if (s.op == op) return s.ms;
      return 0.0;
    }();
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", ms * 1e3);
    return text;
  };
  auto row = [&](const OpEstimate& o) {
    std::snprintf(line, sizeof line, "%-*s %6d %6d %9.2f %9.2f %10.2f %9.2f %12s", kOpColumn, o.op.c_str(), o.calls,
                  o.nodes, o.math_us, o.memory_us, o.nodes * d.node_latency_us, o.modelled_us,
                  measured_us(o.op).c_str());
    out << line << '\n';
  };
  for (const OpEstimate& o : e.ops) row(o);
  out << rule << '\n';
  row(e.total);
  std::snprintf(line, sizeof line,
                "estimate: %.1f us per step modelled on an %s (%d graph nodes: %.1f us of node latency, %.1f us of "
                "math and memory)%s",
                e.total.modelled_us, d.description.c_str(), e.total.nodes, e.total.nodes * d.node_latency_us,
                e.total.modelled_us - e.total.nodes * d.node_latency_us,
                measured ? "; measured: the profile above, on this GPU" : "; measured: - (not on a GPU)");
  out << line << std::endl;
}

}  // namespace tt
