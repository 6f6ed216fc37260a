// The generic harness behind `tinytrain ops` (engine/ops/ops_run.h): puts a case of
// engine/ops/op_cases.h into a backend's memory, runs it there, compares what it wrote with what
// the reference backend wrote, and times it. One harness for every op: an op is checked and
// timed by adding a case, never by writing another test loop.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/ops/op_cases.h"
#include "kernels/arena.h"

namespace tt {

// A case's tensors in one backend's memory (one allocation), holding the case's contents.
class CaseMemory {
 public:
  CaseMemory(Backend& backend, const OpCase& c);
  const CaseViews& views() const { return views_; }
  // Tensor i as it is now, widened to double: 16-bit values, int32 ids and bytes exactly.
  std::vector<double> read(size_t i) const;

 private:
  Backend& backend_;
  Arena arena_;
  CaseViews views_;
};

// The case with the inputs its `prepare` computes (on `reference`) filled in: what every
// backend then receives. A case without prepare comes back as it was.
OpCase prepared(OpCase c, Backend& reference);

// One compared tensor: how far `got` is from `want`.
struct TensorCheck {
  std::string tensor;
  double max_abs = 0;  // max |got - want|; infinite when an element is NaN on one side only
  double max_rel = 0;  // max_abs / max |want|: the error on the scale of the result
  double tol = 0;      // the bound on max_rel; 0: bit for bit
  bool ok = true;      // max_rel <= tol (tol 0: every element has the same bits)
};

// Compares got with want (same length) against tol (> 0: max_rel <= tol; 0: bit for bit);
// abs_tol (storage_abs_tol) widens a tolerance > 0 by abs_tol / max |want|, and the returned
// tol is the widened one.
TensorCheck compare_tensor(const std::string& tensor, const std::vector<double>& got,
                           const std::vector<double>& want, double tol, double abs_tol = 0.0);

// Cross-entropy's dlogits (N,V) = (softmax - onehot(target)) s / N holds (p - 1) s / N at each
// row's target and p s / N elsewhere; with V = 50257 the others are ~1e-4 of the targets, so on
// one scale (max |want|) they would go unchecked: all zeros would pass. Compares the N target
// entries and the N (V - 1) others each on its own scale (max |want| of each group) against
// tol, and returns the check closer to (or further past) tol, named "<tensor> (targets)" or
// "<tensor> (non-targets)".
TensorCheck compare_by_target(const std::string& tensor, const std::vector<double>& got,
                              const std::vector<double>& want, const std::vector<int32_t>& targets, double tol,
                              double abs_tol = 0.0);

// Runs a prepared case on `backend` and on `reference` from the same inputs and compares every
// compared tensor, 16-bit ones with storage_tol (engine/ops/op_tolerance.h) added to their
// tolerance. Returns the first failing tensor, else the one closest to its tolerance.
TensorCheck check_case(const OpCase& c, Backend& backend, Backend& reference);

// How long the case's op takes on `backend`, in seconds per call: `warmup` untimed calls (the
// first may build plans or fault pages in), one timed call to size the run (the answer when
// max_reps is 1), then five batches of calls filling about target_seconds together (at most
// max_reps calls), each timed on the backend's own clock (kernels/stream_clock.h: CUDA events on
// a GPU, the host clock where ops finish as they return); the fastest batch's mean is the answer.
struct OpTiming {
  double seconds_per_call = 0;
  int calls = 0;  // the calls the time is the mean of
  OpCost cost;    // what one call costs (engine/profile/op_cost.h), from the views it ran on
};
// `before_calls`, when given, runs once the case's memory is ready, right before the calls
// (ops perf on the emulator starts counting its kernels there, not its set-up's memsets).
OpTiming time_case(const OpCase& c, Backend& backend, int warmup, double target_seconds, int max_reps,
                   const std::function<void()>& before_calls = {});

}  // namespace tt
