// The op cases of `tinytrain ops check|perf` (engine/ops/ops_run.h), in the style of ggml's
// test-backend-ops: for every op of the Backend interface (kernels/backend.h), forward and
// backward, one call of it at the shapes of two workloads, with inputs drawn from the seeded
// generator (engine/rng.h) and a tolerance for each output (engine/ops/op_tolerance.h). The
// harness (engine/ops/op_harness.h) runs a case on any backend; nothing here knows which.
//
// The workloads: the seed workload (ModelConfig and RunConfig defaults: B16 T64 C128 NH4 F2048
// V512, no positional embedding) and a small odd one (B3 T13 C52 NH4 HS13 F99 V37, learned
// positions), whose sizes match no tile, warp or vector width.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/profile/op_cost.h"
#include "kernels/backend.h"

namespace tt {

// One tensor of a case: its contents before the op, and how it is compared after.
struct CaseTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<float> values;  // F32, BF16, F16: the contents (16-bit: values of the type, exact)
  std::vector<int32_t> ids;   // I32: the contents; U8: the contents, one byte each
  double tol = -1.0;          // < 0: not compared; 0: bit for bit; > 0: max |got - want| / max |want|
  bool absent = false;        // an optional tensor passed with null data (no bias, no wpe)
  int targets = -1;           // >= 0: an (N,V) tensor compared row target and the rest apart,
                              // each on its own scale, with the I32 tensor at this index as the
                              // targets (compare_by_target, engine/ops/op_harness.h)
};

// The tensors' views in some backend's memory, in the order of OpCase::tensors.
using CaseViews = std::vector<Tensor>;
using CaseFn = std::function<void(Backend&, const CaseViews&)>;

struct OpCase {
  std::vector<CaseTensor> tensors;
  // Inputs that must be consistent with each other (softmax weights, LayerNorm statistics) are
  // computed by the forward on the reference backend before any backend gets the inputs, so
  // both sides of a comparison read the same bits. Empty: nothing to compute.
  CaseFn prepare;
  CaseFn run;  // the op: one Backend call
  std::function<OpCost(const CaseViews&)> cost;
};

// A case by name, built on demand (a case of the seed workload holds megabytes).
struct OpCaseSpec {
  std::string op;     // the Backend method, e.g. "linear_forward"
  std::string shape;  // what sets its size, e.g. "N1024 I128 O2048 bias"
  DType dtype;        // the storage dtype of its activations
  std::function<OpCase()> make;
};

// Every op of the table, in table order.
std::vector<std::string> op_names();

// Every case with activations stored in `dtype` (F32, BF16 or F16). The ops on gradients and
// optimizer state (fill_zero, grad_norm_check, adamw_step, loss_scaler_update) work on fp32 in
// every precision: they are F32 cases only.
std::vector<OpCaseSpec> op_cases(DType dtype);

// `ops perf --attention-sweep`: attention_forward and attention_backward at long sequences,
// T = 256, 512, 1024, 2048, 4096, batch 4, 12 heads of 64, causal, no dropout (tools/
// bench_attention.py times them against PyTorch's scaled_dot_product_attention). Each call first
// offers the case to a vendor library (Backend::use_library_attention), so `--attention cudnn`
// times cuDNN where it serves the case.
std::vector<OpCaseSpec> attention_sweep_cases(DType dtype);
std::vector<AttentionShape> attention_sweep_shapes();  // the sweep's shapes, in its order

// `ops perf --gpt2-gemms`: linear_forward and linear_backward at GPT-2 small's four GEMMs for a
// batch of 8 x 1024 tokens (d_model 768: qkv 768 -> 2304, out_proj 768 -> 768, the FFN's 768 ->
// 3072 and 3072 -> 768): the GEMM ladder's shapes (docs/gemm.md).
std::vector<OpCaseSpec> gpt2_gemm_cases(DType dtype);

// nf4_dequantize of n random weights (quantised on the host, engine/nf4_weight.h) into an output
// in `dtype`, compared bit for bit; `what` ends its shape column. op_cases holds some; the CUDA
// op tests add one past the grid-stride cap (tests/test_cuda_ops.cpp).
OpCaseSpec nf4_dequantize_case(DType dtype, int64_t n, const std::string& what);

}  // namespace tt
