// Reference replay and comparison. The tolerances sit about a decade above PyTorch's own
// fp32 noise against fp64 (docs/numerics.md):
//   logits0 and every step's loss: 1e-4 absolute
//   grads.* (step 0): 1e-4 x max|ref| of the tensor
//   step1.* (our AdamW on the reference params and grads): 2e-6 x max(1, |p|) per element
//   final.* (after all steps): 0.1 x lr x steps absolute; AdamW turns rounding-level gradients
//     into +-lr moves, so final parameters can only be compared on the scale of lr x steps.
//     (lr is the peak lr of the schedule: each step moves a parameter by at most about it.)
//     The key rows of in_proj_bias: a bound of their own (see Tolerances below).
//   grad_norm[s] (when the reference holds it): the global norm of the unscaled gradients of
//     step s, relative, with the grads.* tolerance (see tolerances_for).
#include "cli/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/token_batch.h"
#include "engine/io/reference.h"
#include "engine/trainer.h"
#include "kernels/common/lr_schedule.h"

namespace tt {

namespace {

std::vector<float> read_f32(const SafetensorsFile& file, const std::string& name, const Shape& shape) {
  std::vector<float> data(shape.numel());
  file.read(name, DType::F32, shape, data.data());
  return data;
}

// One printed comparison: the largest error, and the tolerance at the element where the
// error is closest to (or furthest past) its tolerance.
struct Row {
  std::string name;
  double max_error = 0.0;
  double tolerance = 0.0;
  bool passed = true;
};

class Report {
 public:
  explicit Report(std::ostream& out) : out_(out) {}
  // Compares element by element with tolerance(i); NaN anywhere fails.
  template <typename Tolerance>
  void compare(const std::string& name, const float* got, const float* want, size_t n, Tolerance tolerance) {
    Row row{name, 0.0, tolerance(0), true};
    double worst_ratio = -1.0;
    for (size_t i = 0; i < n; ++i) {
      const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
      const double tol = tolerance(i);
      const double ratio = std::isnan(err) ? INFINITY : (err == 0.0 ? 0.0 : err / tol);
      row.max_error = std::isnan(err) ? NAN : std::max(row.max_error, err);
      if (ratio > worst_ratio) {
        worst_ratio = ratio;
        row.tolerance = tol;
      }
    }
    row.passed = worst_ratio <= 1.0;
    print(row);
  }
  // Compares whole tensors: relative L2 error ||got - want|| / ||want|| at most `tolerance`.
  void compare_rel_l2(const std::string& name, const float* got, const float* want, size_t n, double tolerance) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(got[i]) - want[i];
      diff += d * d;
      norm += static_cast<double>(want[i]) * want[i];
    }
    const double rel = norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    print(Row{name + " (rel L2)", rel, tolerance, rel <= tolerance});
  }
  // Compares two training updates: ||got - want|| / sqrt(||got|| ||want||) at most `tolerance`.
  // Symmetric, and the usual relative L2 error when the two are of a size; an update that did
  // not move on one side only scores infinity (relative to ||want|| alone, a reference update of
  // 0 would leave nothing to divide by, and one scaled by 1.5 would score only 1/3).
  void compare_update(const std::string& name, const float* got, const float* want, size_t n, double tolerance) {
    double diff = 0.0, got_norm = 0.0, want_norm = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(got[i]) - want[i];
      diff += d * d;
      got_norm += static_cast<double>(got[i]) * got[i];
      want_norm += static_cast<double>(want[i]) * want[i];
    }
    const double mean = std::sqrt(std::sqrt(got_norm) * std::sqrt(want_norm));
    const double rel = diff == 0.0 ? 0.0 : mean > 0.0 ? std::sqrt(diff) / mean : INFINITY;
    print(Row{name + " (rel L2)", rel, tolerance, rel <= tolerance});
  }
  bool all_passed() const { return failed_ == 0; }
  void summary() {
    char line[128];
    std::snprintf(line, sizeof(line), "verify: %d rows, %d failed", rows_, failed_);
    out_ << line << (failed_ ? "" : " (PASS)") << std::endl;
  }

 private:
  void print(const Row& row) {
    char line[256];
    std::snprintf(line, sizeof(line), "%-52s max_err %10.3e  tol %10.3e  %s", row.name.c_str(), row.max_error,
                  row.tolerance, row.passed ? "ok" : "FAIL");
    out_ << line << std::endl;
    ++rows_;
    if (!row.passed) ++failed_;
  }
  std::ostream& out_;
  int rows_ = 0, failed_ = 0;
};

// Tolerances per precision; u is the unit of the storage type's last place, 2^-8 for bf16
// (8 significant bits) and 2^-11 for fp16 (11 bits). The measured errors and margins, and the
// planted mistakes each tolerance must catch, are in docs/numerics.md ("bf16 and fp16 against
// the fp32 references"; tests/verify_catches_mistakes.sh checks them):
//   logits0: 10 u x max|logits| (storage rounding moves logits by ~1 u of their size)
//   loss: u x |loss| (the mean over tokens averages the per-token errors down)
//   grads.*, relative L2 error of each tensor:
//     GELU models: 8 u. Every op stores its output rounded (relative error <= u/2 each), and a
//       gradient passes through a few such roundings per layer, forward and backward; they
//       add up like a random walk: measured 2.2 to 3.7 u (2 to 6 layers, bf16 and fp16).
//     ReLU models: 4 sqrt(u). A fraction ~u of the pre-activations lie within rounding of
//       zero and land on the other side of the kink; each flip switches one term of a
//       weight-gradient sum on or off, so the error grows like sqrt(u), and in the small
//       references a single flip is a few percent of a tensor (measured up to 0.54 of this
//       tolerance in bf16 and 0.84 in fp16, in linear1.weight; the other tensors see the flips
//       through the backward too, up to 8.7 u in bf16 and 30 u in fp16).
//   step1.*: the fp32 tolerance (the optimizer runs in fp32 on fp32 masters)
//   grad_norm[s]: grads_rel x |ref norm|. | |a| - |b| | <= |a - b| (triangle inequality): the
//     norm's relative error is at most the whole gradient's relative L2 error, which grads_rel
//     bounds. (Both sides' own fp32 ways of taking the norm differ by ~1e-7, see the fp32 notes
//     above.) Measured far below it: up to 0.8 u (GELU) and 2.6 u (ReLU, fp16).
//   final.*, each tensor's whole update (final - initial), ||ours - ref|| / sqrt(||ours|| ||ref||)
//     (Report::compare_update): 0.3. AdamW moves each element by about lr whatever its
//     gradient's size, so an element whose gradient error exceeds the gradient itself moves
//     the other way: with gradient errors a fraction r of the gradient, a fraction ~r/pi of
//     the elements flips (Gaussian gradients), an update error of ~2 sqrt(r/pi): 0.12 in bf16
//     and 0.04 in fp16 at r = 3 u. Measured up to 0.19 (bf16) and 0.15 (fp16; ReLU flips):
//     the gradients have more elements near zero than a Gaussian. Every update scaled by 1.5
//     scores 0.5 / sqrt(1.5) = 0.41 (by 0.5: 0.71; a skipped update: infinity), so 0.3 sits
//     1.6x above the worst measured and 1.4x below the smallest of these mistakes.
//   final.*in_proj_bias, key rows (d_model..d_model + key heads x head size), in every precision,
//     fp32 too: their exact gradient is zero (a constant added to a softmax row's scores changes
//     nothing), so both sides move them by rounding noise in unrelated directions; only the size
//     of the moves can be bounded. An AdamW step moves an element by at most lr_s x B_t
//     (adamw_move_bound), so the two runs, which start equal and decay alike, end at most
//     2 sum_s lr_s B_(s+1) apart, per element. (In fp32 the noise's sign agreed with PyTorch's
//     only while both ran the same GEMM kernels: with oneDNN's sums the tiny reference's key
//     bias moved the other way, 5.5e-4 from PyTorch's after 2 steps of lr 1e-4.)
struct Tolerances {
  double logits_rel, loss_rel, grads_rel, step1_rel, final;
};

Tolerances tolerances_for(Precision precision, Activation activation) {
  if (precision == Precision::FP32) return {1e-4, 1e-4, 1e-4, 2e-6, 0.1};
  const double u = precision == Precision::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double grads_rel = activation == Activation::Gelu ? 8 * u : 4 * std::sqrt(u);
  return {10 * u, u, grads_rel, 2e-6, 0.3};
}

// The largest |m_hat / (sqrt(v_hat) + eps)| AdamW's step t (1-based) can produce, for any
// gradients g_1..g_t. With m_t = (1 - b1) sum_k b1^(t-k) g_k and v_t = (1 - b2) sum_k b2^(t-k) g_k^2,
// Cauchy-Schwarz on sum_k (b1^(t-k) / b2^((t-k)/2)) (b2^((t-k)/2) g_k) gives
//   |m_t| / sqrt(v_t) <= (1 - b1) / sqrt(1 - b2) x sqrt(sum_{j<t} (b1^2 / b2)^j),
// and the bias corrections multiply it by sqrt(1 - b2^t) / (1 - b1^t); eps only shrinks it.
// For PyTorch's defaults it is 1 at t = 1 and 1.01 at t = 5.
double adamw_move_bound(const AdamWConfig& opt, int t) {
  double sum = 0.0;
  for (int j = 0; j < t; ++j) sum += std::pow(opt.beta1 * opt.beta1 / opt.beta2, j);
  return (1.0 - opt.beta1) / std::sqrt(1.0 - opt.beta2) * std::sqrt(sum) * std::sqrt(1.0 - std::pow(opt.beta2, t)) /
         (1.0 - std::pow(opt.beta1, t));
}

double max_abs(const float* v, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(v[i])));
  return m;
}

}  // namespace

bool run_verify(Backend& backend, const std::string& path, std::ostream& out, Precision precision) {
  // Every tensor below is checked against the file before it is allocated (reference.h).
  const Reference ref = Reference::open(path);
  const SafetensorsFile& file = ref.file;
  const ModelConfig& config = ref.config;
  const AdamWConfig& opt = ref.optimizer;
  const int B = ref.run.batch, T = ref.run.seq, V = config.vocab_size, S = ref.run.steps;
  const Tolerances tol = tolerances_for(precision, config.activation);

  const ParamLayout layout(config);
  auto read_all = [&](const std::string& prefix) {
    std::vector<float> flat(layout.total());
    for (const ParamInfo& p : layout.params())
      file.read(prefix + p.name, DType::F32, p.shape, flat.data() + p.offset);
    return flat;
  };
  const std::vector<float> params0 = read_all("params."), grads0 = read_all("grads."), step1 = read_all("step1."),
                           final_params = read_all("final.");
  std::vector<int32_t> x(static_cast<size_t>(S) * B * T), y(x.size());
  file.read("x", DType::I32, {S, B, T}, x.data());
  file.read("y", DType::I32, {S, B, T}, y.data());
  check_token_ids(x.data(), static_cast<int64_t>(x.size()), V, path + ": reference tensor 'x'");
  check_token_ids(y.data(), static_cast<int64_t>(y.size()), V, path + ": reference tensor 'y'");
  const std::vector<float> logits0 = read_f32(file, "logits0", {B, T, V});
  const std::vector<float> losses = read_f32(file, "loss", {S});
  const bool has_grad_norm = file.contains("grad_norm");  // optional: newer references record it
  const std::vector<float> grad_norms = has_grad_norm ? read_f32(file, "grad_norm", {S}) : std::vector<float>();

  out << "verify " << path << " on the " << backend.name() << " backend, " << precision_name(precision) << ": "
      << model_config_to_json(config)
      << " batch " << B << " seq " << T << " steps " << S << std::endl;
  Report report(out);
  TrainOptions replay;  // the reference's run; its batches come from the file, so no seed is used
  replay.model = config;
  replay.optimizer = opt;
  replay.run.batch = B;
  replay.run.seq = T;
  replay.run.seed = 0;
  replay.precision = precision;
  Trainer trainer(backend, replay);
  Model& model = trainer.model();
  if (!model.attention_note().empty()) out << "attention: " << model.attention_note() << std::endl;
  const size_t P = layout.total();
  std::vector<float> host(P);
  auto download = [&](const Tensor& t, std::vector<float>& dst) {
    dst.resize(t.numel());
    backend.copy_to_host(dst.data(), t.data, t.bytes());
  };
  // A float tensor of any storage dtype, widened to fp32 on the host.
  auto download_float = [&](const Tensor& t, std::vector<float>& dst) {
    if (t.dtype == DType::F32) return download(t, dst);
    std::vector<uint16_t> raw(t.numel());
    backend.copy_to_host(raw.data(), t.data, t.bytes());
    dst.resize(raw.size());
    for (size_t i = 0; i < raw.size(); ++i)
      dst[i] = t.dtype == DType::BF16 ? to_float(bf16{raw[i]}) : to_float(f16{raw[i]});
  };
  auto compare_params = [&](const std::string& prefix, const std::vector<float>& got, const std::vector<float>& want,
                            auto tolerance_for) {
    for (const ParamInfo& p : layout.params()) {
      const float* w = want.data() + p.offset;
      report.compare(prefix + p.name, got.data() + p.offset, w, p.shape.numel(), tolerance_for(p, w));
    }
  };

  // step1.*: our AdamW applied once to the reference's params and step-0 gradients.
  {
    AdamW adamw(backend, opt, static_cast<int64_t>(P));
    const LossScaler unit_scale(backend, LossScalerConfig{});  // scale 1, no inf found
    ArenaPlan step_plan;
    step_plan.add("step", DType::I32, {1});
    const Arena step0(backend, step_plan);  // training step 0: the schedule's first lr
    const int32_t zero = 0;
    backend.copy_to_device(step0.get("step").data, &zero, sizeof zero);
    trainer.load_params(params0.data());
    backend.copy_to_device(model.grads().data, grads0.data(), model.grads().bytes());
    backend.grad_norm_check(model.grads(), unit_scale.state());  // the norm clipping reads
    adamw.step(model.params(), model.grads(), step0.get("step"), unit_scale.state());
    download(model.params(), host);
    compare_params("step1.", host, step1, [&tol](const ParamInfo&, const float* w) {
      return [w, &tol](size_t i) { return tol.step1_rel * std::max(1.0, std::fabs(static_cast<double>(w[i]))); };
    });
  }

  // Replay all steps from the reference's initial parameters and batches.
  trainer.load_params(params0.data());
  for (int s = 0; s < S; ++s) {
    const size_t batch_offset = static_cast<size_t>(s) * B * T;
    trainer.load_batch(x.data() + batch_offset, y.data() + batch_offset, static_cast<uint32_t>(s));
    if (s == 0) {  // logits before the fused loss backward overwrites them with dlogits
      trainer.forward();
      download_float(model.logits(), host);
      const double logits_tol = precision == Precision::FP32 ? tol.logits_rel : tol.logits_rel * max_abs(logits0.data(), logits0.size());
      report.compare("logits0", host.data(), logits0.data(), logits0.size(), [logits_tol](size_t) { return logits_tol; });
    }
    trainer.forward_backward();
    const float loss = static_cast<float>(trainer.read_loss());
    const double loss_tol = precision == Precision::FP32 ? tol.loss_rel : tol.loss_rel * std::fabs(losses[s]);
    report.compare("loss[" + std::to_string(s) + "]", &loss, &losses[s], 1, [loss_tol](size_t) { return loss_tol; });
    if (s == 0) {
      download(model.grads(), host);
      const float scale = trainer.scaler().read().scale;  // fp16: the gradients are loss-scaled
      for (float& g : host) g /= scale;
      if (precision == Precision::FP32) {
        compare_params("grads.", host, grads0, [&tol](const ParamInfo& p, const float* w) {
          const double scale = max_abs(w, static_cast<size_t>(p.shape.numel()));
          return [scale, &tol](size_t) { return tol.grads_rel * scale; };
        });
      } else {
        for (const ParamInfo& p : layout.params())
          report.compare_rel_l2("grads." + p.name, host.data() + p.offset, grads0.data() + p.offset,
                                p.shape.numel(), tol.grads_rel);
      }
    }
    // The scale these gradients carry, read before the scaler's update may change it.
    const float scale = has_grad_norm ? trainer.scaler().read().scale : 1.0f;
    trainer.optimizer_step();
    if (has_grad_norm) {  // the global norm the step computed (and clipped with), unscaled
      const float norm = trainer.scaler().read().grad_norm / scale;
      const double norm_tol = tol.grads_rel * std::fabs(static_cast<double>(grad_norms[s]));
      report.compare("grad_norm[" + std::to_string(s) + "]", &norm, &grad_norms[s], 1,
                     [norm_tol](size_t) { return norm_tol; });
    }
  }
  download(model.params(), host);
  // The key rows of in_proj_bias apart, in every precision (see Tolerances): [C, C + KVH HS).
  double key_rows_tol = 0.0;  // 2 sum_s lr_s B_(s+1): see adamw_move_bound
  for (int s = 0; s < S; ++s) key_rows_tol += 2.0 * scheduled_lr(opt.lr, opt.schedule, s) * adamw_move_bound(opt, s + 1);
  const size_t key_begin = static_cast<size_t>(config.d_model);
  const size_t key_end = key_begin + static_cast<size_t>(config.kv_heads()) * config.head_dim();
  const std::string suffix = ".in_proj_bias";
  auto is_in_proj_bias = [&suffix](const ParamInfo& p) {
    return p.name.size() > suffix.size() && p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (precision == Precision::FP32) {
    const double final_tol = tol.final * opt.lr * S;
    compare_params("final.", host, final_params, [&](const ParamInfo& p, const float*) {
      const bool key_rows = is_in_proj_bias(p);
      return [=](size_t i) { return key_rows && i >= key_begin && i < key_end ? key_rows_tol : final_tol; };
    });
  } else {  // the whole training update of each tensor, final - initial, by relative L2
    std::vector<float> ours(P), theirs(P);
    for (size_t i = 0; i < P; ++i) {
      ours[i] = host[i] - params0[i];
      theirs[i] = final_params[i] - params0[i];
    }
    for (const ParamInfo& p : layout.params()) {
      const float* got = ours.data() + p.offset;
      const float* want = theirs.data() + p.offset;
      if (!is_in_proj_bias(p)) {
        report.compare_update("final." + p.name + " update", got, want, p.shape.numel(), tol.final);
        continue;
      }
      // in_proj_bias = [query | key | value]: the key rows apart (see Tolerances)
      const size_t n = p.shape.numel();
      std::vector<float> got_qv(got, got + key_begin), want_qv(want, want + key_begin);
      got_qv.insert(got_qv.end(), got + key_end, got + n);
      want_qv.insert(want_qv.end(), want + key_end, want + n);
      report.compare_update("final." + p.name + "[query, value rows] update", got_qv.data(), want_qv.data(),
                            got_qv.size(), tol.final);
      report.compare("final." + p.name + "[key rows] update", got + key_begin, want + key_begin, key_end - key_begin,
                     [key_rows_tol](size_t) { return key_rows_tol; });
    }
  }
  report.summary();
  return report.all_passed();
}

}  // namespace tt
