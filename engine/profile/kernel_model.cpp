// The cost model of a kernel launch (see kernel_model.h).
#include "engine/profile/kernel_model.h"

#include <algorithm>
#include <cmath>

namespace tt {

const char* pipe_name(int pipe) {
  switch (pipe) {
    case kDram: return "dram";
    case kShared: return "shared";
    case kFp32: return "fp32";
    case kSpecial: return "special";
    case kTensor: return "tensor";
    case kIssue: return "issue";
  }
  return "?";
}

namespace {

constexpr double kSectorBytes = 32;

double tensor_peak_flops(const DeviceModel& d, const std::string& precision) { return d.tflops(precision) * 1e12; }

LaunchModel model_library_call(const simt::LaunchRecord& r, const DeviceModel& d) {
  LaunchModel m;
  m.pipe_us[kDram] = static_cast<double>(r.library_bytes) / (d.memory_gbps * 1e9) * 1e6;
  const int pipe = r.library_precision == "fp32" ? kFp32 : kTensor;
  m.pipe_us[pipe] = r.library_flops / tensor_peak_flops(d, r.library_precision) * 1e6;
  m.active_sms = d.sms;
  return m;
}

}  // namespace

LaunchModel model_launch(const simt::LaunchRecord& r, const DeviceModel& d) {
  LaunchModel m = r.library ? model_library_call(r, d) : LaunchModel{};
  if (!r.library) {
    const simt::LaunchCounters& c = r.counters;
    const double blocks = static_cast<double>(std::max<uint64_t>(c.blocks, 1));
    const unsigned threads = std::max(c.threads_per_block, 1u);
    // Occupancy: blocks resident per SM, as threads, the block limit and shared memory allow.
    const size_t shared = c.shared_bytes_per_block + d.shared_reserved_per_block;
    m.blocks_per_sm = std::max(
        1, std::min({d.max_blocks_per_sm, d.max_threads_per_sm / static_cast<int>(threads),
                     static_cast<int>(d.shared_bytes_per_sm / std::max<size_t>(shared, 1))}));
    m.active_sms = static_cast<int>(std::min<double>(d.sms, blocks));
    m.waves = static_cast<long long>(std::ceil(blocks / (static_cast<double>(d.sms) * m.blocks_per_sm)));
    // The busiest SM's share of the work: ceil(blocks / SMs) of the blocks.
    const double busiest = std::ceil(blocks / d.sms) / blocks;
    const double clock = d.clock_ghz * 1e9;
    auto per_sm_us = [&](double work, double per_second) { return work * busiest / per_second * 1e6; };
    m.pipe_us[kShared] = per_sm_us(static_cast<double>(c.shared_load_wavefronts + c.shared_store_wavefronts),
                                   d.shared_wavefronts_per_clock * clock);
    m.pipe_us[kFp32] = per_sm_us(static_cast<double>(c.fp32_ops), d.fp32_tflops * 1e12 / d.sms);
    m.pipe_us[kSpecial] = per_sm_us(static_cast<double>(c.special_ops), d.special_per_clock * clock);
    const double mma_rate = d.mma_sync_fraction / d.sms;
    m.pipe_us[kTensor] = per_sm_us(4096.0 * c.mma_bf16, tensor_peak_flops(d, "bf16") * mma_rate) +
                         per_sm_us(4096.0 * c.mma_fp16, tensor_peak_flops(d, "fp16") * mma_rate) +
                         per_sm_us(2048.0 * c.mma_tf32, tensor_peak_flops(d, "tf32") * mma_rate);
    m.pipe_us[kIssue] = per_sm_us(static_cast<double>(c.statements) / 32.0, d.issue_per_clock * clock);
    const double sectors =
        static_cast<double>(c.global_load_sectors + c.global_store_sectors + c.global_atomics);
    m.pipe_us[kDram] = sectors * kSectorBytes / (d.memory_gbps * 1e9 * m.active_sms / d.sms) * 1e6;
  }
  m.bound = static_cast<int>(std::max_element(m.pipe_us, m.pipe_us + kPipes) - m.pipe_us);
  m.latency_us = d.node_latency_us;
  m.modelled_us = m.pipe_us[m.bound] + m.latency_us;
  return m;
}

}  // namespace tt
