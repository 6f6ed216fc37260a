// `tinytrain profile` end to end, on the CPU backend as CI runs it: the Chrome trace parses and
// its slices nest (step > forward/loss/backward/optimizer > layer > op), the ops' times add up
// to the measured step, their FLOPs are engine/flops.h's count, and the roofline column is the
// bound computed from the peaks a test saved, over the measured time. Bad flags are one-line
// errors. The op cost formulas (engine/profile/op_cost.h) are checked on their own first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config.h"
#include "engine/flops.h"
#include "engine/profile/op_cost.h"
#include "engine/profile/peaks.h"
#include "engine/profile/step_estimate.h"
#include "tests/cli_test_util.h"
#ifdef TINYTRAIN_HAVE_SIMT
#include "simt/launch_counters.h"
#endif
#include "tests/text_match.h"

namespace tt::test {
namespace {

const std::string kBin = TINYTRAIN_BIN;

// ---- the cost formulas ----

// A view for the cost functions, which read only shapes, dtypes and whether there is data.
Tensor view(std::initializer_list<int64_t> shape, DType dtype = DType::F32) {
  static char somewhere;
  return Tensor{&somewhere, dtype, Shape(shape)};
}
const Tensor kNone{nullptr, DType::F32, Shape{0}};

TEST(OpCost, FollowsTheDocumentedFormulas) {
  const int64_t N = 6, I = 4, O = 3;
  // linear: 2 N I O per product; bytes: inputs read, output written, gradients accumulated
  const OpCost fwd = linear_forward_cost(view({N, O}), view({N, I}), view({O, I}), view({O}));
  EXPECT_EQ(fwd.flops, 2.0 * N * I * O);
  EXPECT_EQ(fwd.bytes, 4.0 * (N * I + O * I + O + N * O));
  const OpCost bwd = linear_backward_cost(view({N, I}), view({O, I}), view({O}), view({N, O}), view({N, I}), view({O, I}),
                                          ParamGrads::Add, InputGrad::Write);
  EXPECT_EQ(bwd.flops, 2 * fwd.flops);
  EXPECT_EQ(bwd.bytes, 4.0 * (N * O + N * I + 2 * O * I + 2 * O + O * I + N * I));
  // written parameter gradients are not read; an added input gradient is
  const OpCost written = linear_backward_cost(view({N, I}), view({O, I}), view({O}), view({N, O}), view({N, I}),
                                              view({O, I}), ParamGrads::Write, InputGrad::Add);
  EXPECT_EQ(written.flops, bwd.flops);
  EXPECT_EQ(written.bytes, 4.0 * (N * O + N * I + O * I + O + O * I + 2 * N * I));
  const OpCost no_dinp = linear_backward_cost(kNone, view({O, I}), kNone, view({N, O}), view({N, I}), view({O, I}),
                                              ParamGrads::Add, InputGrad::Write);
  EXPECT_EQ(no_dinp.flops, fwd.flops) << "without the input gradient only dweight's product is left";
  EXPECT_EQ(no_dinp.bytes, 4.0 * (N * O + N * I + 2 * O * I));
  // bf16 storage halves the activation bytes, not the FLOPs
  const OpCost half = linear_forward_cost(view({N, O}, DType::BF16), view({N, I}, DType::BF16),
                                          view({O, I}, DType::BF16), kNone);
  EXPECT_EQ(half.flops, fwd.flops);
  EXPECT_EQ(half.bytes, 2.0 * (N * I + O * I + N * O));
  // attention: 4 HS per allowed (query, key) pair and head, T (T + 1) / 2 pairs when causal
  const int B = 2, T = 5, NH = 3, HS = 4, C = NH * HS;
  for (bool causal : {false, true}) {
    const AttentionShape s{B, T, NH, HS, causal};
    const double pairs = causal ? T * (T + 1) / 2.0 : T * T;
    const OpCost a = attention_forward_cost(view({B, T, C}), view({B, NH, T}), view({B, T, 3 * C}), s);
    EXPECT_EQ(a.flops, B * NH * pairs * 4 * HS);
    // nothing (T,T) moves: qkv read, out and lse written
    EXPECT_EQ(a.bytes, 4.0 * (B * T * 3 * C + B * T * C + B * NH * T));
    const OpCost ab = attention_backward_cost(view({B, T, 3 * C}), view({B, NH, T}), view({B, T, C}),
                                              view({B, T, 3 * C}), view({B, T, C}), view({B, NH, T}), s);
    EXPECT_EQ(ab.flops, 2 * a.flops);
  }
  // elementwise ops count no FLOPs; dropout with p = 0 in place moves nothing
  EXPECT_EQ(elementwise_cost({view({N}), view({N})}, view({N})).bytes, 3.0 * 4 * N);
  const uint32_t step = 0;
  const Tensor x = view({N});
  EXPECT_EQ(dropout_cost(x, x, DropoutMask{0.0f, 1, &step, 0, DropoutSite::FfnHidden}).bytes, 0);
  EXPECT_EQ(dropout_cost(x, x, DropoutMask{0.1f, 1, &step, 0, DropoutSite::FfnHidden}).bytes, 2.0 * 4 * N);
}

// ---- the command ----

// A model big enough that each op takes tens of microseconds on one core (so the host's work
// between ops is a small part of the step), small enough that 3 steps take a fraction of a second.
struct SmallRun {
  int vocab = 256, d_model = 64, n_head = 4, n_layer = 2, d_ff = 256, batch = 4, seq = 32, steps = 3;
  std::string backend = "cpu";
  int llama_kv_heads = 0;  // > 0: --arch llama with this many key/value heads

  std::vector<std::string> args(std::initializer_list<std::string> extra = {}) const {
    std::vector<std::string> argv = {kBin, "profile", "--backend", backend, "--threads", "1",
                                     "--vocab-size", std::to_string(vocab), "--d-model", std::to_string(d_model),
                                     "--n-head", std::to_string(n_head), "--n-layer", std::to_string(n_layer),
                                     "--d-ff", std::to_string(d_ff), "--batch", std::to_string(batch),
                                     "--seq", std::to_string(seq), "--max-seq-len", std::to_string(seq),
                                     "--steps", std::to_string(steps)};
    if (llama_kv_heads > 0)
      argv.insert(argv.end(), {"--arch", "llama", "--n-kv-head", std::to_string(llama_kv_heads)});
    argv.insert(argv.end(), extra);
    return argv;
  }
  ModelConfig model() const {
    ModelConfig m = llama_kv_heads > 0 ? arch_preset("llama") : ModelConfig{};
    m.n_kv_head = llama_kv_heads;
    m.vocab_size = vocab;
    m.d_model = d_model;
    m.n_head = n_head;
    m.n_layer = n_layer;
    m.d_ff = d_ff;
    m.max_seq_len = seq;
    return m;
  }
};

// A model small enough for the SIMT emulator to profile in a second.
SmallRun tiny_emulated_run() {
  SmallRun run;
  run.backend = "cuda-emu";
  run.vocab = 32;
  run.d_model = 16;
  run.n_head = 2;
  run.n_layer = 1;
  run.d_ff = 32;
  run.batch = 2;
  run.seq = 8;
  run.steps = 2;
  return run;
}

// The trace's complete events by id (every X event carries args.id).
std::map<int, nlohmann::json> events_by_id(const nlohmann::json& trace) {
  std::map<int, nlohmann::json> by_id;
  for (const nlohmann::json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") by_id[e.at("args").at("id").get<int>()] = e;
  return by_id;
}

double end_of(const nlohmann::json& e) { return e.at("ts").get<double>() + e.at("dur").get<double>(); }

// The step an event belongs to: its ancestor with category "step".
int step_of(const std::map<int, nlohmann::json>& by_id, nlohmann::json e) {
  while (e.at("cat") != "step") e = by_id.at(e.at("args").at("parent").get<int>());
  return e.at("args").at("id").get<int>();
}

// One table row: the op, then the printed columns (ms/step, GFLOP, MB and roofline % as text).
struct Row {
  double calls = 0, ms = 0;
  std::string gflop, mb, roofline;
};
std::map<std::string, Row> table_rows(const CliResult& r) {
  std::map<std::string, Row> rows;
  bool in_table = false;
  for (const std::string& line : r.out_lines()) {
    if (line.rfind("op ", 0) == 0) in_table = true;
    if (!in_table || line.empty() || line[0] == '-' || line.rfind("op ", 0) == 0) continue;
    if (line.rfind("all ops", 0) == 0 || line.rfind("step (measured)", 0) == 0 || line.rfind("outside ops", 0) == 0)
      continue;
    if (line.rfind("flops:", 0) == 0) break;
    std::istringstream in(line);
    std::string op, share, tflops, gbps, intensity;
    Row row;
    in >> op >> row.calls >> row.ms >> share >> row.gflop >> row.mb >> tflops >> gbps >> intensity >> row.roofline;
    rows[op] = row;
  }
  return rows;
}

// Profiles `run` with a trace and checks what every profile must satisfy: the trace parses, every
// slice lies within its parent, the scopes are there, the FLOPs are the model's. Returns the trace.
nlohmann::json profile_and_check(const SmallRun& run, const ScratchDir& dir, CliResult& r) {
  const std::string trace_path = dir.file("trace.json");
  r = run_command(run.args({"--trace", trace_path}), dir.path(), 120);
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  EXPECT_EQ(r.err, "");
  const nlohmann::json trace = nlohmann::json::parse(read_whole_file(trace_path), nullptr, false);
  EXPECT_FALSE(trace.is_discarded()) << "the trace is not JSON";
  if (trace.is_discarded()) return trace;
  EXPECT_EQ(trace.value("displayTimeUnit", ""), "ms");
  const std::map<int, nlohmann::json> by_id = events_by_id(trace);

  // Slices nest: each lies within its parent (times in whole nanoseconds, so exact up to the
  // rounding of adding two printed decimals).
  std::set<int> steps;
  for (const auto& [id, e] : by_id) {
    const std::string cat = e.at("cat");
    EXPECT_TRUE(cat == "step" || cat == "scope" || cat == "op") << e;
    EXPECT_GE(e.at("dur").get<double>(), 0) << e;
    if (cat == "step") {
      steps.insert(id);
      continue;
    }
    const nlohmann::json& parent = by_id.at(e.at("args").at("parent").get<int>());
    EXPECT_NE(parent.at("cat"), "op") << "an op encloses nothing";
    EXPECT_GE(e.at("ts").get<double>(), parent.at("ts").get<double>() - 1e-6) << e << " starts before " << parent;
    EXPECT_LE(end_of(e), end_of(parent) + 1e-6) << e << " ends after " << parent;
  }
  EXPECT_EQ(steps.size(), static_cast<size_t>(run.steps - 1)) << "every step but the warm-up";

  // The scopes: forward, loss, backward and optimizer in every step, a scope per layer in
  // forward and in backward, and every op of a layer inside its layer's scope.
  std::map<int, std::multiset<std::string>> paths;  // step -> scope paths below it
  for (const auto& [id, e] : by_id)
    if (e.at("cat") == "scope") paths[step_of(by_id, e)].insert(e.at("args").at("path").get<std::string>());
  for (int step : steps) {
    const std::string name = by_id.at(step).at("name");
    for (const std::string& phase : {"forward", "loss", "backward", "optimizer"})
      EXPECT_EQ(paths[step].count(name + "/" + phase), 1u) << phase << " in " << name;
    for (int l = 0; l < run.n_layer; ++l)
      for (const std::string& pass : {"forward", "backward"})
        EXPECT_EQ(paths[step].count(name + "/" + pass + "/layer " + std::to_string(l)), 1u) << pass << " layer " << l;
  }

  // FLOPs: the matrix products of one step's ops are engine/flops.h's count, exactly (integers
  // in doubles); the other ops count none.
  const double model_flops = training_step_flops(run.model(), run.batch, run.seq, Recompute::None).model();
  std::map<int, double> products;
  for (const auto& [id, e] : by_id) {
    if (e.at("cat") != "op") continue;
    const std::string name = e.at("name");
    const double flops = e.at("args").at("flops").get<double>();
    if (name.rfind("linear_", 0) == 0 || name.rfind("attention_", 0) == 0)
      products[step_of(by_id, e)] += flops;
    else
      EXPECT_EQ(flops, 0) << e;
    EXPECT_GE(e.at("args").at("bytes").get<double>(), 0) << e;
  }
  for (int step : steps) EXPECT_DOUBLE_EQ(products[step], model_flops) << by_id.at(step).at("name");
  return trace;
}

TEST(Profile, CpuTraceNestsAddsUpAndCountsTheModelFlops) {
  ScratchDir dir;
  setenv("TINYTRAIN_CACHE_DIR", dir.file("cache").c_str(), 1);  // no peaks saved (this test's own process)
  const SmallRun run;
  CliResult r;
  const nlohmann::json trace = profile_and_check(run, dir, r);
  ASSERT_FALSE(trace.is_discarded());
  // Without saved peaks the roofline column is blank, and the output says how to get them.
  EXPECT_TRUE(contains(r.out, "roofline: blank: no measured peaks for '" + cpu_device_key(1) + "'")) << r.out;
  EXPECT_TRUE(contains(r.out, "run `tinytrain doctor`")) << r.out;
  for (const auto& [op, row] : table_rows(r)) EXPECT_EQ(row.roofline, "-") << op;

  // The ops' times add up to the step. On the CPU every op has finished when its call returns
  // and is timed on the same clock as the step, so the ops are disjoint parts of the step: their
  // sum cannot exceed it, and what is left is the host's own work between ops (the engine's
  // loops, the scope and op records, about a microsecond per op). At these shapes an op takes
  // tens of microseconds, so that is a few percent; 85% leaves room for a loaded CI machine
  // preempting the test between two ops.
  const std::map<int, nlohmann::json> by_id = events_by_id(trace);
  std::map<int, double> op_us;
  for (const auto& [id, e] : by_id)
    if (e.at("cat") == "op") op_us[step_of(by_id, e)] += e.at("dur").get<double>();
  for (const auto& [step, sum] : op_us) {
    const double step_us = by_id.at(step).at("dur").get<double>();
    EXPECT_LE(sum, step_us + 1e-3) << "the ops of a step lie within it";
    EXPECT_GE(sum, 0.85 * step_us) << "ops " << sum << " us of a " << step_us << " us step";
  }
  // ... and the table says the same: "all ops" and the measured step, per step.
  EXPECT_TRUE(contains(r.out, "all ops")) << r.out;
  EXPECT_TRUE(contains(r.out, "step (measured)")) << r.out;
  EXPECT_TRUE(contains(r.out, "outside ops")) << r.out;
  EXPECT_FALSE(contains(r.out, "graph: ")) << "the CPU backend has no graphs to count";
  const std::map<std::string, Row> rows = table_rows(r);
  for (const char* op : {"linear_forward", "linear_backward", "attention_forward", "attention_backward",
                         "dropout_residual_layernorm_forward", "layernorm_residual_dropout_backward",
                         "cross_entropy", "grad_norm_check", "adamw_step_and_scaler_update"})
    EXPECT_EQ(rows.count(op), 1u) << op << " missing from\n" << r.out;
  EXPECT_EQ(rows.at("linear_forward").calls, 4 * run.n_layer + 1) << "in_proj, out_proj, linear1, linear2, lm_head";
  EXPECT_EQ(rows.at("attention_forward").calls, run.n_layer);
  unsetenv("TINYTRAIN_CACHE_DIR");
}

// The roofline column from peaks saved where `tinytrain doctor` saves them: for each op, the
// bound max(FLOPs / peak FLOP/s, bytes / bandwidth) over its measured time, recomputed here from
// the trace's times and costs.
TEST(Profile, RooflineIsTheBoundOverTheTimeFromTheSavedPeaks) {
  ScratchDir dir;
  setenv("TINYTRAIN_CACHE_DIR", dir.file("cache").c_str(), 1);
  const double peak_tflops = 0.02, memory_gbps = 4.0;  // (made up: the column's math is what is tested)
  save_peaks(Peaks{cpu_device_key(1), {{"fp32", peak_tflops}}, memory_gbps, "2026-12-01T00:00:00Z"});
  const SmallRun run;
  CliResult r;
  const nlohmann::json trace = profile_and_check(run, dir, r);
  ASSERT_FALSE(trace.is_discarded());
  EXPECT_TRUE(contains(r.out, "roofline: against the peaks `tinytrain doctor` measured for '" + cpu_device_key(1) +
                                  "' (2026-12-01T00:00:00Z): 0.020 TFLOP/s fp32, 4.0 GB/s"))
      << r.out;

  struct Sum {
    double us = 0, flops = 0, bytes = 0;
  };
  std::map<std::string, Sum> sums;  // per op, over the counted steps
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.value("cat", "") != "op") continue;
    Sum& s = sums[e.at("name").get<std::string>()];
    s.us += e.at("dur").get<double>();
    s.flops += e.at("args").at("flops").get<double>();
    s.bytes += e.at("args").at("bytes").get<double>();
  }
  const std::map<std::string, Row> rows = table_rows(r);
  ASSERT_EQ(rows.size(), sums.size()) << r.out;
  bool compute_bound = false, memory_bound = false;  // both kinds of bound were checked
  for (const auto& [op, s] : sums) {
    const double compute_s = s.flops / (peak_tflops * 1e12), memory_s = s.bytes / (memory_gbps * 1e9);
    const double expected = 100 * std::max(compute_s, memory_s) / (s.us * 1e-6);
    (compute_s > memory_s ? compute_bound : memory_bound) = true;
    const Row& row = rows.at(op);
    ASSERT_FALSE(row.roofline.empty()) << op;
    ASSERT_EQ(row.roofline.back(), '%') << op << ": " << row.roofline;
    // printed to 0.1 point; the trace's times are whole nanoseconds
    EXPECT_NEAR(std::stod(row.roofline), expected, 0.05 + 1e-4 * expected) << op;
  }
  EXPECT_TRUE(compute_bound && memory_bound) << "the GEMMs are bound by the FLOP peak, elementwise ops by bandwidth";
  unsetenv("TINYTRAIN_CACHE_DIR");
}

TEST(Profile, BadFlagsAreOneLineErrors) {
  ScratchDir dir;
  const SmallRun run;
  expect_user_error(run_command(run.args({"--bogus"}), dir.path()), {"--bogus"});
  SmallRun one = run;
  one.steps = 1;
  expect_user_error(run_command(one.args(), dir.path()), {"--steps", "warm-up"});
  expect_user_error(run_command(run.args({"--trace", dir.file("no/such/dir/trace.json")}), dir.path()),
                    {"cannot write the trace", "no/such/dir/trace.json"});
  expect_user_error(run_command(run.args({"--precision", "fp8"}), dir.path()), {"fp8"});
  // train's flags that mean nothing in one process without a log are not taken
  for (const std::string flag : {"--log-every", "--zero", "--bucket-mb"})
    expect_user_error(run_command(run.args({flag, "1"}), dir.path()), {flag});
  // the estimate: a device the model knows, on a backend whose graphs can be counted
  expect_user_error(run_command(run.args({"--estimate", "h300"}), dir.path()), {"--estimate", "h300", "h200"});
  expect_user_error(run_command(run.args({"--estimate", "h200"}), dir.path()), {"--estimate", "cuda-emu", "cpu"});
}

// The model's arithmetic on a made-up step: per call max(FLOPs / peak, bytes / bandwidth) +
// nodes x latency, GEMMs and attention's products at the GEMM precision's peak and other FLOPs
// at fp32's.
TEST(StepEstimate, IsTheRooflineBoundPlusTheNodeLatencyPerCall) {
  const DeviceModel h200 = *find_device_model("h200");
  StepProfile step;
  // a GEMM bound by math in bf16 (2e9 / 989.4e12 s > 1e6 / 4.8e12 s), two calls
  step.ops.push_back({"linear_forward", -1, 0, 0, OpCost{2e9, 1e6}, 1});
  step.ops.push_back({"linear_forward", -1, 0, 0, OpCost{2e9, 1e6}, 1});
  // attention's products on tensor cores in bf16, bound by math (2e9 / 989.4e12 s > 4.8e6 / 4.8e12 s)
  step.ops.push_back({"attention_forward", -1, 0, 0, OpCost{2e9, 4.8e6}, 1});
  // an elementwise op of two nodes
  step.ops.push_back({"dropout_residual_layernorm_forward", -1, 0, 0, OpCost{0, 9.6e6}, 2});
  const StepEstimate e = estimate_step(step, h200, "bf16");
  ASSERT_EQ(e.ops.size(), 3u);
  const double gemm_us = 2e9 / 989.4e12 * 1e6 + 1.5;
  EXPECT_EQ(e.ops[0].op, "linear_forward");
  EXPECT_EQ(e.ops[0].calls, 2);
  EXPECT_DOUBLE_EQ(e.ops[0].modelled_us, 2 * gemm_us);
  EXPECT_DOUBLE_EQ(e.ops[1].modelled_us, 2e9 / 989.4e12 * 1e6 + 1.5);
  EXPECT_DOUBLE_EQ(e.ops[2].modelled_us, 9.6e6 / 4.8e12 * 1e6 + 2 * 1.5);
  EXPECT_EQ(e.total.nodes, 5);
  EXPECT_DOUBLE_EQ(e.total.modelled_us, e.ops[0].modelled_us + e.ops[1].modelled_us + e.ops[2].modelled_us);
  // fp32 GEMMs at the CUDA cores' peak: the same GEMM is 989.4 / 66.9 times slower in math
  EXPECT_DOUBLE_EQ(estimate_step(step, h200, "fp32").ops[0].math_us, 2 * 2e9 / 66.9e12 * 1e6);
  EXPECT_DOUBLE_EQ(estimate_step(step, h200, "fp32").ops[1].math_us, 2e9 / 66.9e12 * 1e6);
  // an op recorded without a node count cannot be modelled
  step.ops.push_back({"cast", -1, 0, 0, OpCost{0, 1}, -1});
  EXPECT_THROW(estimate_step(step, h200, "bf16"), std::logic_error);
  // the printed table says it is a model, with its inputs, and no measurement off a GPU
  std::ostringstream out;
  print_step_estimate(e, nullptr, out);
  EXPECT_TRUE(contains(out.str(), "a MODEL of one step on an NVIDIA H200 SXM, not a measurement")) << out.str();
  EXPECT_TRUE(contains(out.str(), "4.8 TB/s")) << out.str();
  EXPECT_TRUE(contains(out.str(), "measured: - (not on a GPU)")) << out.str();
}

// The CUDA backend's path (events on a GPU; on the emulator the host clock, since it runs each
// op as it is enqueued) at least runs and records the same tree.
TEST(Profile, CudaBackendOnTheEmulatorRuns) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (--backend cuda-emu)";
#endif
  ScratchDir dir;
  const SmallRun run = tiny_emulated_run();
  CliResult r;
  const nlohmann::json trace = profile_and_check(run, dir, r);
  ASSERT_FALSE(trace.is_discarded());
  EXPECT_TRUE(contains(r.out, "roofline: blank: the emulated GPU (cuda-emu) has no hardware peaks")) << r.out;
  EXPECT_TRUE(contains(r.out, "all ops")) << r.out;
  // one more step captured, only to count the graph `train` would replay
  EXPECT_TRUE(contains(r.out, "graph: one step captured as CUDA graph ")) << r.out;
  EXPECT_FALSE(contains(r.out, ", other ")) << r.out;
  EXPECT_FALSE(contains(r.out, "GEMM fallbacks")) << r.out;
}

// An fp32 profile on the mma rung, which multiplies fp32 only as TF32 (--tf32): the regblock rung
// runs its GEMMs, and the profile says how many (their times are regblock's).
TEST(Profile, GemmsOnASlowerRungAreCountedInTheSummary) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (--backend cuda-emu)";
#endif
  ScratchDir dir;
  const CliResult r = run_command(tiny_emulated_run().args({"--gemm", "mma"}), dir.path(), 120.0);
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  std::istringstream said(r.err);
  int lines = 0;
  for (std::string line; std::getline(said, line);)
    lines += line.rfind("tinytrain: the mma GEMM multiplies fp32 only as TF32", 0) == 0;
  EXPECT_GT(lines, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "GEMM fallbacks: " + std::to_string(lines) + " mma -> regblock (distinct GEMMs")) << r.out;
}

// The Llama block (SwiGLU's wider linear1, one key/value head for two query heads, RoPE) on the
// emulator: the ops' FLOPs are engine/flops.h's count for it (profile_and_check), RoPE runs
// forward and backward in every layer, and the step is one captured graph.
TEST(Profile, LlamaBlockOnTheEmulatorCountsTheModelsFlops) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (--backend cuda-emu)";
#endif
  ScratchDir dir;
  SmallRun run = tiny_emulated_run();
  run.llama_kv_heads = 1;
  CliResult r;
  const nlohmann::json trace = profile_and_check(run, dir, r);
  ASSERT_FALSE(trace.is_discarded());
  const std::map<std::string, Row> rows = table_rows(r);
  for (const char* op : {"rope_forward", "rope_backward"}) {
    ASSERT_EQ(rows.count(op), 1u) << op << " missing from\n" << r.out;
    EXPECT_EQ(rows.at(op).calls, run.n_layer) << op;
  }
  EXPECT_TRUE(contains(r.out, "graph: one step captured as CUDA graph ")) << r.out;
}

// --estimate on the emulator: every op of the step is modelled with the nodes its own graph
// holds, and the nodes add up to the step's whole graph (train's done: line).
TEST(Profile, EstimateOnTheEmulatorCountsEveryOpsNodes) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (--backend cuda-emu)";
#else
  ScratchDir dir;
  const SmallRun run = tiny_emulated_run();
  const CliResult r = run_command(run.args({"--estimate", "h200"}), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "estimate: a MODEL of one step on an NVIDIA H200 SXM, not a measurement")) << r.out;
  std::vector<std::string> totals;  // the profile's measured step, then the model's
  for (const std::string& line : r.out_lines())
    if (line.rfind("step ", 0) == 0) totals.push_back(line);
  ASSERT_EQ(totals.size(), 2u) << r.out;
  std::istringstream row(totals[1]);
  std::string name;
  int calls = 0, nodes = 0;
  row >> name >> calls >> nodes;
  EXPECT_GT(calls, 10) << totals[1];
  EXPECT_GE(nodes, calls) << "every op of the step enqueues at least one node: " << totals[1];
  // the ops' nodes, each op captured alone, are the whole step's graph
  const auto whole = regex_search_groups(r.out, "graph: one step captured as CUDA graph (\\d+) nodes");
  ASSERT_TRUE(whole) << r.out;
  EXPECT_EQ(nodes, std::stoi((*whole)[1])) << r.out;
}

// --estimate on the emulator models every kernel launch of the step from the emulator's counts:
// each launch is a node of the step's graph (kernels, library calls, memsets), every line of the
// table says MODEL, and no op's kernels come in under its ideal bound (they move at least the
// bytes the op must and run at most at the peaks: a model that undercounts fails here).
TEST(Profile, EstimateOnTheEmulatorModelsEveryKernelAtOrAboveItsOpsIdealBound) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (--backend cuda-emu)";
#endif
  ScratchDir dir;
  const SmallRun run = tiny_emulated_run();
  const CliResult r = run_command(run.args({"--estimate", "h200"}), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  if (!simt::counting_available()) {  // the sanitizer build: no counts, so no kernel table, and it says so
    EXPECT_TRUE(contains(r.out, "kernels: no per-kernel model: this build's emulator counts nothing")) << r.out;
    EXPECT_FALSE(contains(r.out, "kernels: a MODEL of every kernel")) << r.out;
    return;
  }
  const std::vector<std::string> lines = r.out_lines();
  auto header = std::find_if(lines.begin(), lines.end(),
                             [](const std::string& l) { return l.rfind("kernels: a MODEL of every kernel", 0) == 0; });
  ASSERT_NE(header, lines.end()) << r.out;
  EXPECT_TRUE(contains(*header, "not a measurement")) << *header;
  EXPECT_TRUE(contains(*header, "Inputs: 132 SMs at 1.98 GHz")) << *header;
  int launches = 0, ops = 0;
  bool in_ops = false;
  for (auto it = header + 3; it != lines.end() && it->rfind("kernels: ", 0) != 0; ++it) {
    if (it->rfind("-----", 0) == 0) continue;
    if (contains(*it, "kernels us")) {  // the per-op summary's header
      in_ops = true;
      continue;
    }
    ASSERT_EQ(it->rfind("MODEL ", 0), 0u) << "every row of the estimate says MODEL: " << *it;
    std::istringstream row(it->substr(6));
    std::vector<std::string> words{std::istream_iterator<std::string>(row), std::istream_iterator<std::string>()};
    if (in_ops) {
      ASSERT_EQ(words.size(), 4u) << *it;
      ++ops;
      EXPECT_GE(std::stod(words[1]), std::stod(words[2])) << "an op's kernels under its ideal bound: " << *it;
    } else if (it->rfind("MODEL   ", 0) == 0) {  // a kernel: its launches after its name
      const auto runs = regex_search_groups(*it, "^MODEL   .+? +(\\d+) +(\\d+|-) ");
      ASSERT_TRUE(runs) << *it;
      launches += std::stoi((*runs)[1]);
    }
  }
  EXPECT_GT(ops, 10) << r.out;
  const auto whole = regex_search_groups(r.out, "graph: one step captured as CUDA graph (\\d+) nodes");
  ASSERT_TRUE(whole) << r.out;
  EXPECT_EQ(launches, std::stoi((*whole)[1])) << "every node of the step's graph is one modelled launch: " << r.out;
  EXPECT_TRUE(regex_search_groups(r.out, "kernels: [0-9.]+ us per step modelled from the counts")) << r.out;
#endif
}

}  // namespace
}  // namespace tt::test
