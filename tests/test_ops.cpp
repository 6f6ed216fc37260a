// `tinytrain ops check|perf` (engine/ops/ops_run.h) and the harness under it
// (engine/ops/op_harness.h): the comparison reports FAIL beyond tolerance (a perturbed output, the
// only way to see a check fail without a broken kernel); check passes on the CUDA backend's
// kernels (on the SIMT emulator without a GPU); perf's speeds and roofline percentages are the
// op's FLOPs and bytes over its time and over the bound from the peaks a test saves; bad input
// is one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/ops/op_harness.h"
#include "engine/ops/op_tolerance.h"
#include "engine/profile/peaks.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/cli_test_util.h"
#ifdef TINYTRAIN_HAVE_SIMT
#include "simt/launch_counters.h"
#endif

namespace tt::test {
namespace {

const std::string kBin = TINYTRAIN_BIN;

CliResult run_tinytrain(const std::vector<std::string>& args, const ScratchDir& dir) {
  std::vector<std::string> argv = {kBin};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, dir.path(), 120.0);
}

// ---- the comparison ----

TEST(OpsCompare, EqualTensorsPass) {
  const std::vector<double> want = {1.0, -2.0, 0.5};
  const TensorCheck r = compare_tensor("out", want, want, 1e-6);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.max_abs, 0.0);
  EXPECT_EQ(r.max_rel, 0.0);
}

// The error is measured on the result's scale, max |want| (here 4): an error of 3 tol x 4 at
// any element fails, one of tol / 2 x 4 passes.
TEST(OpsCompare, PerturbedBeyondToleranceFails) {
  const double tol = 1e-5;
  const std::vector<double> want = {1.0, -4.0, 0.25, 2.0};
  for (size_t i = 0; i < want.size(); ++i) {
    std::vector<double> got = want;
    got[i] += 3 * tol * 4.0;
    const TensorCheck bad = compare_tensor("out", got, want, tol);
    EXPECT_FALSE(bad.ok) << "element " << i;
    EXPECT_NEAR(bad.max_abs, 3 * tol * 4.0, 1e-12);
    EXPECT_NEAR(bad.max_rel, 3 * tol, 1e-12);
    got[i] = want[i] + 0.5 * tol * 4.0;
    EXPECT_TRUE(compare_tensor("out", got, want, tol).ok) << "element " << i;
  }
}

TEST(OpsCompare, NanIsAnInfiniteError) {
  const std::vector<double> want = {1.0, 2.0};
  const TensorCheck r = compare_tensor("out", {1.0, std::nan("")}, want, 1e9);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(std::isinf(r.max_abs));
  // a NaN the reference wrote is no pass either
  EXPECT_FALSE(compare_tensor("out", want, {1.0, std::nan("")}, 1e9).ok);
}

TEST(OpsCompare, ExactMeansTheSameBits) {
  const std::vector<double> want = {1.0, 0.0};
  EXPECT_TRUE(compare_tensor("dst", want, want, 0.0).ok);
  EXPECT_FALSE(compare_tensor("dst", {std::nextafter(1.0, 2.0), 0.0}, want, 0.0).ok);
  EXPECT_FALSE(compare_tensor("dst", {1.0, -0.0}, want, 0.0).ok) << "-0 is not the bits of +0";
}

// Cross-entropy's dlogits at GPT-2's vocabulary (V = 50257): the target entries (p - 1) / N are
// ~1e4 times the others p / N, so on one scale (compare_tensor, max |want|) the others could be
// all zeros and pass, as they did before compare_by_target; on their own scale they cannot.
TEST(OpsCompare, CrossEntropyNonTargetGradientsAreCheckedOnTheirOwnScale) {
  const int N = 4, V = 50257;
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  std::vector<float> logits(static_cast<size_t>(N) * V), dlogits(logits.size()), losses(N), scale = {1.0f};
  std::vector<int32_t> targets = {7, 50256, 0, 31337};
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(4.0 * std::sin(0.7 * i));  // in [-4, 4]
  cpu->cross_entropy_forward_backward(Tensor{losses.data(), DType::F32, {N}}, Tensor{dlogits.data(), DType::F32, {N, V}},
                                      Tensor{logits.data(), DType::F32, {N, V}},
                                      Tensor{targets.data(), DType::I32, {N}}, Tensor{scale.data(), DType::F32, {1}}, N);
  const std::vector<double> want(dlogits.begin(), dlogits.end());
  const double tol = reduction_tol(V + 8);  // the case's tolerance (engine/ops/op_cases.cpp)
  auto is_target = [&](size_t i) { return static_cast<int32_t>(i % V) == targets[i / V]; };
  // got = want with the targets' entries multiplied by `at_targets`, the others by `elsewhere`
  auto scaled = [&](double at_targets, double elsewhere) {
    std::vector<double> got = want;
    for (size_t i = 0; i < got.size(); ++i) got[i] *= is_target(i) ? at_targets : elsewhere;
    return got;
  };
  EXPECT_TRUE(compare_by_target("dlogits", want, want, targets, tol).ok);

  const std::vector<double> zeroed = scaled(1.0, 0.0);  // the planted mistake: no softmax gradient
  const TensorCheck old_check = compare_tensor("dlogits", zeroed, want, tol);
  std::printf("[ zeroed   ] one scale: max_rel %.3e, targets and others apart: 1 (tol %.3e)\n", old_check.max_rel, tol);
  EXPECT_TRUE(old_check.ok) << "the one-scale check saw the zeroed non-targets after all?";
  const TensorCheck caught = compare_by_target("dlogits", zeroed, want, targets, tol);
  EXPECT_FALSE(caught.ok);
  EXPECT_EQ(caught.tensor, "dlogits (non-targets)");
  EXPECT_NEAR(caught.max_rel, 1.0, 1e-12);

  for (const double factor : {3.0, 0.5}) {  // times the tolerance, on each group's own scale
    const TensorCheck others = compare_by_target("dlogits", scaled(1.0, 1.0 + factor * tol), want, targets, tol);
    EXPECT_EQ(others.ok, factor < 1.0) << "non-targets by " << factor << " x tol: max_rel " << others.max_rel;
    EXPECT_EQ(others.tensor, "dlogits (non-targets)");
    const TensorCheck at_targets = compare_by_target("dlogits", scaled(1.0 + factor * tol, 1.0), want, targets, tol);
    EXPECT_EQ(at_targets.ok, factor < 1.0) << "targets by " << factor << " x tol: max_rel " << at_targets.max_rel;
    EXPECT_EQ(at_targets.tensor, "dlogits (targets)");
  }
  EXPECT_FALSE(compare_by_target("dlogits", want, want, {1, 2, 3}, tol).ok) << "targets of another N";
}

// The whole path of a check, on a real case: the CPU backend against another CPU backend
// passes; the same with the output of the op under test perturbed at its largest element, by
// more than the tolerance on the result's scale, fails naming that output.
TEST(OpsCheck, APerturbedOpFailsItsCase) {
  const std::unique_ptr<Backend> reference = make_cpu_backend(), tested = make_cpu_backend();
  std::vector<OpCaseSpec> specs = op_cases(DType::F32);
  const auto spec = std::find_if(specs.begin(), specs.end(), [](const OpCaseSpec& s) {
    return s.op == "linear_forward" && s.shape == "N39 I52 O99 bias";
  });
  ASSERT_NE(spec, specs.end());
  const OpCase good = prepared(spec->make(), *reference);
  const TensorCheck pass = check_case(good, *tested, *reference);
  EXPECT_TRUE(pass.ok);
  EXPECT_EQ(pass.tensor, "out");
  ASSERT_GT(pass.tol, 0.0);

  const size_t out = good.tensors.size() - 1;  // the case's last tensor
  ASSERT_EQ(good.tensors[out].name, "out");
  for (const double factor : {3.0, 0.5}) {  // times the tolerance
    OpCase perturbed = good;
    const Backend* target = tested.get();
    const double tol = pass.tol;
    perturbed.run = [run = good.run, target, out, factor, tol](Backend& be, const CaseViews& v) {
      run(be, v);
      if (&be != target) return;
      std::vector<float> values(v[out].numel());
      be.copy_to_host(values.data(), v[out].data, v[out].bytes());
      float& largest = *std::max_element(values.begin(), values.end(),
                                         [](float a, float b) { return std::fabs(a) < std::fabs(b); });
      largest *= static_cast<float>(1.0 + factor * tol);
      be.copy_to_device(v[out].data, values.data(), v[out].bytes());
    };
    const TensorCheck r = check_case(perturbed, *tested, *reference);
    EXPECT_EQ(r.ok, factor < 1.0) << "perturbed by " << factor << " x tol: max_rel " << r.max_rel;
    EXPECT_EQ(r.tensor, "out");
    EXPECT_NEAR(r.max_rel, factor * tol, kEps32);  // the perturbed value is rounded to fp32
  }
}

// ---- the command: check ----

// The check lines of a run: op -> (status, dtype) per line.
struct CheckLine {
  std::string status, op, dtype;
};
std::vector<CheckLine> check_lines(const CliResult& r) {
  std::vector<CheckLine> lines;
  for (const std::string& line : r.out_lines()) {
    std::istringstream in(line);
    CheckLine l;
    if (!(in >> l.status) || (l.status != "ok" && l.status != "FAIL")) continue;
    std::string word;
    in >> l.op;
    while (in >> word)
      if (word == "fp32" || word == "bf16" || word == "fp16") l.dtype = word;
    lines.push_back(l);
  }
  return lines;
}

// The CUDA backend's kernels against the CPU backend: on the SIMT emulator (no GPU here), each
// selected op at both workloads in each dtype asked for, every line ok.
TEST(OpsCommand, CheckPassesOnTheEmulatedCudaBackend) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (--backend cuda-emu)";
#endif
  ScratchDir dir;
  struct Run {
    std::vector<std::string> flags;
    std::vector<std::string> ops;
    std::vector<std::string> dtypes;
    size_t cases;  // ops x workloads (2) x variants x dtypes
  };
  // linear_backward, layernorm_backward, embedding_backward: gradients added and written;
  // linear_backward also with a frozen weight (LoRA's base): 1 + 3 variants of 2 workloads x 3
  for (const Run& run : {Run{{"--op", "linear"}, {"linear_forward", "linear_backward"}, {"fp32", "bf16", "fp16"}, 24},
                         // every op named *attention*: forward and backward causal and full at both
                         // workloads, and at the 13 odd shapes (T 1, 37, 70, 130, 1024; HS 8, 40, 64,
                         // 128; 4 query heads on 2 and on 1 key/value heads), and decode (a key/value
                         // head per query head, and one for all); on flash attention (the default:
                         // bf16 at HS 64 and 128 on tensor cores), on its CUDA-core kernels (simt)
                         // and on the naive kernels
                         Run{{"--op", "attention", "--dtype", "fp32"},
                             {"attention_forward", "attention_backward", "attention_decode"}, {"fp32"}, 38},
                         Run{{"--op", "attention", "--dtype", "bf16"},
                             {"attention_forward", "attention_backward", "attention_decode"}, {"bf16"}, 38},
                         Run{{"--op", "attention", "--dtype", "bf16", "--attention", "simt"},
                             {"attention_forward", "attention_backward", "attention_decode"}, {"bf16"}, 38},
                         Run{{"--op", "attention", "--dtype", "bf16", "--attention", "naive"},
                             {"attention_forward", "attention_backward", "attention_decode"}, {"bf16"}, 38},
                         // LayerNorm and RMSNorm, x 2 modes, both workloads
                         Run{{"--op", "layernorm_backward", "--dtype", "bf16"}, {"layernorm_backward"}, {"bf16"}, 8},
                         Run{{"--op", "embedding_backward", "--dtype", "bf16"}, {"embedding_backward"}, {"bf16"}, 4},
                         // the residual stream's fused norms: with LayerNorm, RMSNorm and without the norm
                         // forward; post-norm, pre-norm, pre-norm without a branch and pre-norm with
                         // RMSNorm, x 2 modes, backward
                         Run{{"--op", "dropout_residual_layernorm_forward", "--dtype", "fp16"},
                             {"dropout_residual_layernorm_forward"}, {"fp16"}, 6},
                         Run{{"--op", "layernorm_residual_dropout_backward"}, {"layernorm_residual_dropout_backward"},
                             {"fp32", "bf16", "fp16"}, 48},
                         // the FFN's fused pair: CUDA runs its two ops, the CPU one pass; relu and gelu;
                         // and SwiGLU's one op
                         Run{{"--op", "activation_dropout"},
                             {"activation_dropout_forward", "activation_dropout_backward"}, {"fp32", "bf16", "fp16"}, 36},
                         Run{{"--op", "adamw_step"}, {"adamw_step"}, {"fp32"}, 2},
                         Run{{"--op", "adamw_step_and_scaler_update"}, {"adamw_step_and_scaler_update"}, {"fp32"}, 2},
                         // inference: the cache append bit for bit, decoding that never reads past pos;
                         // a key/value head per query head and one for all
                         Run{{"--op", "kv_cache_append", "--dtype", "fp16"}, {"kv_cache_append"}, {"fp16"}, 4},
                         Run{{"--op", "attention_decode"}, {"attention_decode"}, {"fp32", "bf16", "fp16"}, 12},
                         // growth and backoff, once each (no sizes); the zeroing of both workloads' gradients
                         Run{{"--op", "loss_scaler_update"}, {"loss_scaler_update"}, {"fp32"}, 2},
                         Run{{"--op", "fill_zero"}, {"fill_zero"}, {"fp32"}, 2},
                         // NF4's decoding: both workloads' (F,C) weight and a partial group, bit for bit
                         Run{{"--op", "nf4"}, {"nf4_dequantize"}, {"fp32", "bf16", "fp16"}, 9}}) {
    std::vector<std::string> args = {"ops", "check", "--backend", "cuda-emu"};
    args.insert(args.end(), run.flags.begin(), run.flags.end());
    const CliResult r = run_tinytrain(args, dir);
    SCOPED_TRACE(r.describe());
    EXPECT_EQ(r.exit_code, 0);
    const std::vector<CheckLine> lines = check_lines(r);
    EXPECT_EQ(lines.size(), run.cases);
    for (const CheckLine& l : lines) {
      EXPECT_EQ(l.status, "ok") << l.op << " " << l.dtype;
      EXPECT_NE(std::find(run.ops.begin(), run.ops.end(), l.op), run.ops.end()) << l.op;
      EXPECT_NE(std::find(run.dtypes.begin(), run.dtypes.end(), l.dtype), run.dtypes.end()) << l.dtype;
    }
    EXPECT_TRUE(contains(r.out, "all " + std::to_string(run.cases) + " cases within tolerance"));
  }
}

TEST(OpsCommand, CheckOnTheCpuBackendSaysItIsTheReference) {
  ScratchDir dir;
  const CliResult r = run_tinytrain({"ops", "check", "--backend", "cpu", "--op", "linear"}, dir);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "cpu is the reference backend: nothing to check against; use --backend cuda or cuda-emu\n");
}

// ---- the command: perf ----

// One perf row: the columns after op, shape and dtype.
struct PerfRow {
  std::string shape, dtype;
  double us = 0;
  std::string gflops, gbps, intensity, roofline;
};
std::vector<PerfRow> perf_rows(const CliResult& r, const std::string& op) {
  std::vector<PerfRow> rows;
  for (const std::string& line : r.out_lines()) {
    if (line.rfind(op + " ", 0) != 0) continue;
    // the shape has spaces: read the last six columns from the end
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (words.size() < 8) continue;
    const size_t n = words.size();
    PerfRow row;
    for (size_t i = 1; i + 6 < n; ++i) row.shape += (row.shape.empty() ? "" : " ") + words[i];
    row.dtype = words[n - 6];
    row.us = std::stod(words[n - 5]);
    row.gflops = words[n - 4];
    row.gbps = words[n - 3];
    row.intensity = words[n - 2];
    row.roofline = words[n - 1];
    rows.push_back(row);
  }
  return rows;
}

// FLOPs and bytes of the cases timed below, from their shapes (fp32: 4 bytes an element).
struct Cost {
  double flops, bytes;
};
const std::map<std::string, Cost> kCosts = {
    // inp (N,I), weight (O,I), bias (O) read, out (N,O) written; 2 N I O
    {"N1024 I128 O2048 bias", {2.0 * 1024 * 128 * 2048, 4.0 * (1024 * 128 + 2048 * 128 + 2048 + 1024 * 2048)}},
    {"N39 I52 O99 bias", {2.0 * 39 * 52 * 99, 4.0 * (39 * 52 + 99 * 52 + 99 + 39 * 99)}},
    // a, b read, out written
    {"N1024 C128", {0.0, 4.0 * 3 * 1024 * 128}},
    {"N39 C52", {0.0, 4.0 * 3 * 39 * 52}},
};

TEST(OpsCommand, PerfPrintsSpeedsAndSaysWhichPeakIsMissing) {
  ScratchDir dir;
  setenv("TINYTRAIN_CACHE_DIR", dir.file("cache").c_str(), 1);  // no peaks saved there
  const CliResult r =
      run_tinytrain({"ops", "perf", "--backend", "cpu", "--op", "linear_forward", "--dtype", "fp32", "--threads", "1"},
                    dir);
  unsetenv("TINYTRAIN_CACHE_DIR");
  SCOPED_TRACE(r.describe());
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "roofline: blank: no measured peaks for '" + cpu_device_key(1) + "'"));
  EXPECT_TRUE(contains(r.out, "run `tinytrain doctor`"));
  const std::vector<PerfRow> rows = perf_rows(r, "linear_forward");
  ASSERT_EQ(rows.size(), 2u);
  for (const PerfRow& row : rows) {
    EXPECT_GT(row.us, 0.0) << row.shape;
    EXPECT_GT(std::stod(row.gflops), 0.0) << row.shape;
    EXPECT_GT(std::stod(row.gbps), 0.0) << row.shape;
    EXPECT_EQ(row.roofline, "-") << row.shape;
  }
}

// With peaks saved where `tinytrain doctor` saves them, each row's roofline is the bound
// max(FLOPs / peak FLOP/s, bytes / bandwidth) over its time, in percent: compute-bound for the
// GEMM, memory-bound for the residual add. The peaks are made up (tiny, so both bounds exceed
// the time): the column's arithmetic is what is tested.
TEST(OpsCommand, PerfRooflineIsTheBoundFromTheSavedPeaks) {
  ScratchDir dir;
  setenv("TINYTRAIN_CACHE_DIR", dir.file("cache").c_str(), 1);
  const double peak_tflops = 0.01, memory_gbps = 10.0;
  save_peaks(Peaks{cpu_device_key(1), {{"fp32", peak_tflops}}, memory_gbps, "2026-12-01T00:00:00Z"});
  for (const std::string op : {"linear_forward", "residual_forward"}) {
    const CliResult r =
        run_tinytrain({"ops", "perf", "--backend", "cpu", "--op", op, "--dtype", "fp32", "--threads", "1"}, dir);
    SCOPED_TRACE(r.describe());
    ASSERT_EQ(r.exit_code, 0);
    EXPECT_TRUE(contains(r.out, "roofline: the peaks `tinytrain doctor` measured for '" + cpu_device_key(1) +
                                    "' (2026-12-01T00:00:00Z): 0.010 TFLOP/s fp32, 10.0 GB/s"));
    const std::vector<PerfRow> rows = perf_rows(r, op);
    ASSERT_EQ(rows.size(), 2u);
    for (const PerfRow& row : rows) {
      ASSERT_EQ(kCosts.count(row.shape), 1u) << row.shape;
      const Cost cost = kCosts.at(row.shape);
      const double seconds = row.us * 1e-6;
      const double compute_s = cost.flops / (peak_tflops * 1e12), memory_s = cost.bytes / (memory_gbps * 1e9);
      EXPECT_EQ(compute_s > memory_s, op == "linear_forward") << row.shape;
      const double expected = 100 * std::max(compute_s, memory_s) / seconds;
      ASSERT_EQ(row.roofline.back(), '%') << row.roofline;
      // the time is printed to 0.1 us, so the true time t is within 0.05 us of it and the rates the
      // tool computed from t are off from those computed here by up to a factor 0.05 / t, with t
      // at least row.us - 0.05 (0.05 / row.us alone is too tight at row.us 0.5: 11%, not 10%);
      // the percentage is printed to 0.05 points
      const double time_slack = 0.05 / std::max(row.us - 0.05, 0.05);
      const double slack = expected * time_slack + 0.05;
      EXPECT_NEAR(std::stod(row.roofline), expected, slack + 1e-3 * expected) << row.shape;
      const double gbps = cost.bytes / seconds / 1e9, gflops = cost.flops / seconds / 1e9;
      EXPECT_NEAR(std::stod(row.gbps), gbps, 0.005 + gbps * time_slack) << row.shape;
      if (cost.flops > 0) {
        EXPECT_NEAR(std::stod(row.gflops), gflops, 0.05 + gflops * time_slack) << row.shape;
        EXPECT_NEAR(std::stod(row.intensity), cost.flops / cost.bytes, 0.05) << row.shape;
      } else {
        EXPECT_EQ(row.gflops, "-");
        EXPECT_EQ(row.intensity, "-");
      }
    }
  }
  unsetenv("TINYTRAIN_CACHE_DIR");
}

// On the emulator perf times nothing: each case runs once with its kernels counted and is
// modelled on an H200 twice, from the counts and by its ideal bytes and FLOPs, both MODEL; the
// model is never under the ideal (the kernel moves at least the bytes the op must), and each
// kernel has its own line.
TEST(OpsCommand, PerfOnTheEmulatorModelsEachCaseFromItsCounts) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (--backend cuda-emu)";
#else
  ScratchDir dir;
  const CliResult r =
      run_tinytrain({"ops", "perf", "--backend", "cuda-emu", "--op", "residual_forward", "--dtype", "fp32"}, dir);
  SCOPED_TRACE(r.describe());
  if (!simt::counting_available()) {  // the sanitizer build: no counts, so no model, and it says so
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(contains(r.err, "this build counts nothing"));
    EXPECT_FALSE(contains(r.out, "MODEL"));
    return;
  }
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "neither is a measurement"));
  int cases = 0, kernels = 0;
  for (const std::string& line : r.out_lines()) {
    if (line.rfind("MODEL   residual_forward_kernel", 0) == 0) ++kernels;
    if (line.rfind("MODEL residual_forward ", 0) != 0) continue;
    ++cases;
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    ASSERT_GE(words.size(), 8u) << line;
    const size_t n = words.size();  // ... kernels, model us, bound, ideal us, x ideal
    EXPECT_EQ(words[n - 5], "1") << line;
    EXPECT_EQ(words[n - 3], "dram") << "an elementwise add is memory-bound: " << line;
    EXPECT_GE(std::stod(words[n - 4]), std::stod(words[n - 2])) << line;
  }
  EXPECT_EQ(cases, 2);  // the seed's shape and the odd one
  EXPECT_EQ(kernels, 2);
#endif
}

// ---- bad input: one line ----

TEST(OpsCommand, AnUnknownOpIsOneLineListingTheOps) {
  ScratchDir dir;
  const CliResult r = run_tinytrain({"ops", "check", "--backend", "cpu", "--op", "matmul"}, dir);
  if (expect_user_error(r, {"--op matmul", "linear_forward", "adamw_step"})) {
    EXPECT_EQ(r.exit_code, 1);
  }
  EXPECT_TRUE(r.out.empty()) << "nothing runs: " << r.out;
}

TEST(OpsCommand, BadFlagsAreOneLineErrors) {
  ScratchDir dir;
  expect_user_error(run_tinytrain({"ops", "check", "--dtype", "fp8"}, dir), {"fp8"});
  expect_user_error(run_tinytrain({"ops", "verify"}, dir), {"verify"});
  expect_user_error(run_tinytrain({"ops"}, dir), {"mode"});
  expect_user_error(run_tinytrain({"ops", "perf", "--bogus"}, dir), {"--bogus"});
  expect_user_error(run_tinytrain({"ops", "perf", "--threads", "-1"}, dir), {"--threads"});
  expect_user_error(run_tinytrain({"ops", "check", "--backend", "tpu"}, dir), {"tpu"});
  // the optimizer's ops have fp32 cases only
  expect_user_error(run_tinytrain({"ops", "check", "--backend", "cpu", "--op", "adamw", "--dtype", "bf16"}, dir),
                    {"adamw", "--dtype fp32"});
}

}  // namespace
}  // namespace tt::test
