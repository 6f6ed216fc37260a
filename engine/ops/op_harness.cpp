// Running, comparing and timing op cases on a backend (see op_harness.h).
#include "engine/ops/op_harness.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "engine/ops/op_tolerance.h"

namespace tt {

namespace {

bool is_16bit(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

// Every present tensor of the case in one arena, named by its index.
ArenaPlan plan_of(const OpCase& c) {
  ArenaPlan plan;
  for (size_t i = 0; i < c.tensors.size(); ++i)
    if (!c.tensors[i].absent) plan.add(std::to_string(i), c.tensors[i].dtype, c.tensors[i].shape);
  return plan;
}

// A tensor's contents as the bytes its dtype stores.
std::vector<uint8_t> stored_bytes(const CaseTensor& t) {
  std::vector<uint8_t> bytes(static_cast<size_t>(t.shape.numel()) * dtype_size(t.dtype));
  if (t.dtype == DType::U8) {
    std::copy(t.ids.begin(), t.ids.end(), bytes.begin());
  } else if (t.dtype == DType::I32) {
    std::memcpy(bytes.data(), t.ids.data(), bytes.size());
  } else if (t.dtype == DType::F32) {
    std::memcpy(bytes.data(), t.values.data(), bytes.size());
  } else {
    for (size_t i = 0; i < t.values.size(); ++i) {
      const uint16_t bits = t.dtype == DType::BF16 ? float_to_bf16(t.values[i]).bits : float_to_f16(t.values[i]).bits;
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

}  // namespace

CaseMemory::CaseMemory(Backend& backend, const OpCase& c) : backend_(backend), arena_(backend, plan_of(c)) {
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const CaseTensor& t = c.tensors[i];
    Tensor view{nullptr, t.dtype, t.shape};
    if (!t.absent) {
      view = arena_.get(std::to_string(i));
      const std::vector<uint8_t> bytes = stored_bytes(t);
      backend_.copy_to_device(view.data, bytes.data(), bytes.size());  // the source may go once it returns
    }
    views_.push_back(view);
  }
}

std::vector<double> CaseMemory::read(size_t i) const {
  const Tensor& view = views_.at(i);
  std::vector<uint8_t> bytes(view.bytes());
  backend_.copy_to_host(bytes.data(), view.data, bytes.size());
  std::vector<double> values(static_cast<size_t>(view.numel()));
  for (size_t k = 0; k < values.size(); ++k) {
    if (view.dtype == DType::U8) {
      values[k] = bytes[k];
    } else if (view.dtype == DType::F32 || view.dtype == DType::I32) {
      float f;
      int32_t n;
      std::memcpy(view.dtype == DType::F32 ? static_cast<void*>(&f) : static_cast<void*>(&n), bytes.data() + 4 * k, 4);
      values[k] = view.dtype == DType::F32 ? static_cast<double>(f) : static_cast<double>(n);
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * k, 2);
      values[k] = view.dtype == DType::BF16 ? to_float(bf16{bits}) : to_float(f16{bits});
    }
  }
  return values;
}

OpCase prepared(OpCase c, Backend& reference) {
  if (!c.prepare) return c;
  const CaseMemory memory(reference, c);
  c.prepare(reference, memory.views());
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    CaseTensor& t = c.tensors[i];
    if (t.absent) continue;
    const std::vector<double> now = memory.read(i);
    if (t.dtype == DType::I32 || t.dtype == DType::U8)
      t.ids.assign(now.begin(), now.end());
    else
      t.values.assign(now.begin(), now.end());  // values of the tensor's type: exact in float
  }
  return c;
}

TensorCheck compare_tensor(const std::string& tensor, const std::vector<double>& got,
                           const std::vector<double>& want, double tol, double abs_tol) {
  TensorCheck r{tensor, 0.0, 0.0, tol, true};
  if (got.size() != want.size()) {
    r.max_abs = r.max_rel = INFINITY;
    r.ok = false;
    return r;
  }
  double scale = 0.0;  // max |want|
  bool same_bits = true;
  for (size_t i = 0; i < got.size(); ++i) {
    same_bits = same_bits && std::memcmp(&got[i], &want[i], sizeof(double)) == 0;
    // equal values (infinities included) are no error; a NaN on either side is an infinite one
    const double d = got[i] == want[i] ? 0.0 : std::fabs(got[i] - want[i]);
    r.max_abs = std::max(r.max_abs, std::isnan(d) ? INFINITY : d);
    if (std::isfinite(want[i])) scale = std::max(scale, std::fabs(want[i]));
  }
  r.max_rel = r.max_abs == 0.0 ? 0.0 : r.max_abs / std::max(scale, 1e-300);
  if (tol > 0.0 && abs_tol > 0.0) r.tol = tol + abs_tol / std::max(scale, 1e-300);
  r.ok = tol == 0.0 ? same_bits : r.max_rel <= r.tol;
  return r;
}

TensorCheck compare_by_target(const std::string& tensor, const std::vector<double>& got,
                              const std::vector<double>& want, const std::vector<int32_t>& targets, double tol,
                              double abs_tol) {
  const size_t N = targets.size(), V = N > 0 ? want.size() / N : 0;
  if (N == 0 || want.size() != N * V || got.size() != want.size())
    return compare_tensor(tensor, got, {}, tol);  // a size mismatch: an infinite error
  std::vector<double> got_target, want_target, got_other, want_other;
  for (size_t n = 0; n < N; ++n)
    for (size_t v = 0; v < V; ++v) {
      const bool is_target = static_cast<int64_t>(v) == targets[n];
      (is_target ? got_target : got_other).push_back(got[n * V + v]);
      (is_target ? want_target : want_other).push_back(want[n * V + v]);
    }
  const TensorCheck at_targets = compare_tensor(tensor + " (targets)", got_target, want_target, tol, abs_tol);
  const TensorCheck elsewhere = compare_tensor(tensor + " (non-targets)", got_other, want_other, tol, abs_tol);
  if (!at_targets.ok) return at_targets;
  if (!elsewhere.ok) return elsewhere;
  return at_targets.max_rel / at_targets.tol >= elsewhere.max_rel / elsewhere.tol ? at_targets : elsewhere;
}

TensorCheck check_case(const OpCase& c, Backend& backend, Backend& reference) {
  const CaseMemory want(reference, c), got(backend, c);
  c.run(reference, want.views());
  c.run(backend, got.views());
  TensorCheck worst;
  double worst_ratio = -1.0;  // max_rel / tol of `worst`
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const CaseTensor& t = c.tensors[i];
    if (t.tol < 0.0 || t.absent) continue;
    const bool widened = t.tol > 0.0 && is_16bit(t.dtype);
    const double tol = widened ? t.tol + storage_tol(t.dtype) : t.tol;
    const double abs_tol = widened ? storage_abs_tol(t.dtype) : 0.0;
    const TensorCheck check = t.targets >= 0 ? compare_by_target(t.name, got.read(i), want.read(i),
                                                                 c.tensors[t.targets].ids, tol, abs_tol)
                                             : compare_tensor(t.name, got.read(i), want.read(i), tol, abs_tol);
    if (!check.ok) return check;
    // an exact match says less than a measured error: show a toleranced tensor when there is one
    const double ratio = check.tol > 0.0 ? check.max_rel / check.tol : -0.5;
    if (ratio > worst_ratio) {
      worst = check;
      worst_ratio = ratio;
    }
  }
  return worst;
}

OpTiming time_case(const OpCase& c, Backend& backend, int warmup, double target_seconds, int max_reps,
                   const std::function<void()>& before_calls) {
  const CaseMemory memory(backend, c);
  const CaseViews& v = memory.views();
  for (int i = 0; i < warmup; ++i) c.run(backend, v);
  backend.synchronize();  // nothing of the warm-up (or of the copies) runs into the timed calls
  if (before_calls) before_calls();
  auto seconds_for = [&](int calls) {
    std::unique_ptr<StreamClock> clock = backend.make_stream_clock();
    clock->mark();
    for (int i = 0; i < calls; ++i) c.run(backend, v);
    clock->mark();
    return clock->read().back() * 1e-3;  // waits for the last call to finish
  };
  const OpCost cost = c.cost(v);
  const double one = seconds_for(1);
  if (max_reps <= 1) return OpTiming{one, 1, cost};
  // The fastest of a few batches: other processes can only add time to a batch, never take it
  // away, so the fastest is the one least disturbed.
  const int batches = 5;
  const int per_batch =
      std::clamp(static_cast<int>(target_seconds / batches / std::max(one, 1e-9)), 1, std::max(1, max_reps / batches));
  double best = INFINITY;
  for (int b = 0; b < batches; ++b) best = std::min(best, seconds_for(per_batch) / per_batch);
  return OpTiming{best, batches * per_batch, cost};
}

}  // namespace tt
