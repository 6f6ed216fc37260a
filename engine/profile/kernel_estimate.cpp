// Every kernel of a step modelled from the emulator's counts (see kernel_estimate.h).
#include "engine/profile/kernel_estimate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

namespace tt {

KernelEstimate estimate_kernels(const StepProfile& counted, const DeviceModel& device) {
  KernelEstimate e;
  std::map<std::pair<std::string, std::string>, size_t> row_of;
  for (const ProfiledOp& op : counted.ops) {
    if (std::find(e.ops.begin(), e.ops.end(), op.name) == e.ops.end()) e.ops.push_back(op.name);
    for (const simt::LaunchRecord& launch : op.launches) {
      const LaunchModel m = model_launch(launch, device);
      auto [it, added] = row_of.emplace(std::make_pair(std::string(op.name), launch.kernel), e.kernels.size());
      if (added) {
        KernelRow row;
        row.op = op.name;
        row.kernel = launch.kernel;
        row.library = launch.library;
        e.kernels.push_back(row);
      }
      KernelRow& row = e.kernels[it->second];
      if (launch.counters.blocks >= row.counters.blocks) row.blocks_per_sm = m.blocks_per_sm;
      row.launches += 1;
      row.counters.add(launch.counters);
      for (int p = 0; p < kPipes; ++p) row.pipe_us[p] += m.pipe_us[p];
      row.modelled_us += m.modelled_us;
      e.modelled_us += m.modelled_us;
    }
  }
  return e;
}

std::string kernel_counts_header() {
  char text[96];
  std::snprintf(text, sizeof text, "%9s %9s %9s %8s %9s %9s", "dram MB", "smem wf", "fp32 GF", "sfu M", "mma GF",
                "inst M");
  return text;
}

std::string kernel_counts(const simt::LaunchCounters& c) {
  char text[96];
  std::snprintf(text, sizeof text, "%9.3f %9.3f %9.4f %8.3f %9.4f %9.3f",
                static_cast<double>(c.global_load_sectors + c.global_store_sectors + c.global_atomics) * 32 / 1e6,
                static_cast<double>(c.shared_load_wavefronts + c.shared_store_wavefronts) / 1e6,
                static_cast<double>(c.fp32_ops) / 1e9, static_cast<double>(c.special_ops) / 1e6,
                static_cast<double>(c.mma_flops()) / 1e9, static_cast<double>(c.statements) / 32 / 1e6);
  return text;
}

namespace {

constexpr int kNameColumn = 46;

std::string shortened(const std::string& name, size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

}  // namespace

void print_kernel_estimate(const KernelEstimate& e, const StepEstimate& ideal, std::ostream& out) {
  const DeviceModel& d = ideal.device;
  out << "kernels: a MODEL of every kernel of the step on an " << d.description
      << ", from the SIMT emulator's counts of what it did, not a measurement. Per launch: the slowest of its pipes "
         "(dram, shared, fp32, special, tensor, issue; engine/profile/kernel_model.h) + "
      << d.node_latency_us << " us. Inputs: " << d.kernel_sources << "; " << d.sources << '\n';
  char line[512];
  std::snprintf(line, sizeof line, "%-5s %-*s %4s %5s %4s %s %-7s %10s", "", kNameColumn, "op / kernel", "runs",
                "grid", "occ", kernel_counts_header().c_str(), "bound", "model us");
  const std::string rule(std::char_traits<char>::length(line), '-');
  out << line << '\n' << rule << '\n';
  for (const std::string& op : e.ops) {
    bool any = false;
    for (const KernelRow& k : e.kernels) {
      if (k.op != op) continue;
      if (!any) {
        std::snprintf(line, sizeof line, "%-5s %s", "MODEL", op.c_str());
        out << line << '\n';
        any = true;
      }
      const simt::LaunchCounters& c = k.counters;
      const int bound = static_cast<int>(std::max_element(k.pipe_us, k.pipe_us + kPipes) - k.pipe_us);
      if (k.library) {
        std::snprintf(line, sizeof line, "%-5s   %-*s %4d %5s %4s %9s %9s %9s %8s %9s %9s %-7s %10.2f", "MODEL",
                      kNameColumn - 2, shortened(k.kernel + " (library: ideal)", kNameColumn - 2).c_str(), k.launches,
                      "-", "-", "-", "-", "-", "-", "-", "-", pipe_name(bound), k.modelled_us);
      } else {
        char grid[16];
        std::snprintf(grid, sizeof grid, "%llu", static_cast<unsigned long long>(c.blocks / std::max(k.launches, 1)));
        std::snprintf(line, sizeof line, "%-5s   %-*s %4d %5s %4d %s %-7s %10.2f", "MODEL", kNameColumn - 2,
                      shortened(k.kernel, kNameColumn - 2).c_str(), k.launches, grid, k.blocks_per_sm,
                      kernel_counts(c).c_str(), pipe_name(bound), k.modelled_us);
      }
      out << line << '\n';
    }
  }
  out << rule << '\n';
  // Per op: its kernels together, beside its ideal bound (its ideal bytes once, its FLOPs at the
  // peak, its graph nodes' latency): the model is at or above the bound unless it credits a
  // kernel with less traffic than the op must move (it cannot: it counts what the kernels did).
  std::snprintf(line, sizeof line, "%-5s %-*s %12s %12s %9s", "", kNameColumn, "op", "kernels us", "ideal us",
                "x ideal");
  out << line << '\n';
  for (const OpEstimate& op : ideal.ops) {
    double kernels_us = 0;
    for (const KernelRow& k : e.kernels)
      if (k.op == op.op) kernels_us += k.modelled_us;
    std::snprintf(line, sizeof line, "%-5s %-*s %12.2f %12.2f %9.2f", "MODEL", kNameColumn, op.op.c_str(), kernels_us,
                  op.modelled_us, op.modelled_us > 0 ? kernels_us / op.modelled_us : 0.0);
    out << line << '\n';
  }
  std::snprintf(line, sizeof line,
                "kernels: %.1f us per step modelled from the counts on an %s; the ideal bound of the same step: %.1f us "
                "(x %.2f)",
                e.modelled_us, d.description.c_str(), ideal.total.modelled_us,
                ideal.total.modelled_us > 0 ? e.modelled_us / ideal.total.modelled_us : 0.0);
  out << line << std::endl;
}

nlohmann::json kernel_estimate_json(const KernelEstimate& e, const StepEstimate& ideal) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelRow& k : e.kernels) {
    nlohmann::json pipes = nlohmann::json::object();
    for (int p = 0; p < kPipes; ++p) pipes[pipe_name(p)] = k.pipe_us[p];
    kernels.push_back({{"op", k.op},
                       {"kernel", k.kernel},
                       {"launches", k.launches},
                       {"library", k.library},
                       {"modelled_us", k.modelled_us},
                       {"pipes_us", pipes}});
  }
  return {{"what", "a MODEL of each kernel of one training step, from the SIMT emulator's counts"},
          {"device", ideal.device.name},
          {"gemm_precision", ideal.gemm_precision},
          {"inputs", ideal.device.kernel_sources + "; " + ideal.device.sources},
          {"step_modelled_us", e.modelled_us},
          {"kernels", kernels}};
}

}  // namespace tt
