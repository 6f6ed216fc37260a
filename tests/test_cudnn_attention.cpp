// cuDNN's fused attention (`--attention cudnn`, kernels/cudnn/) against independent
// references:
//   - which cases it serves, and the graphs' math evaluated on the host in double against the
//     CPU backend, dropout masks included (no GPU needed);
//   - the graphs' attributes where NVIDIA's cudnn-frontend declares something particular, and
//     the alignment check and one-line fallback reason (no GPU needed);
//   - without dropout: forward output, the saved row statistics and every gradient against
//     the CPU backend in fp32 on the same 16-bit inputs, and against our own CUDA kernel, over
//     awkward shapes (seq 2, 17, 33, 64, 67; head sizes 8 to 128; causal or not);
//   - with dropout (cuDNN draws its own masks): the mask is read back from the forward with
//     inputs that expose it, and the backward's gradients are computed from that mask in
//     double, so the test shows that the backward uses the forward's mask; masks are the same
//     for the same step and layer, differ across steps and layers, and drop a fraction p;
//   - whole runs: verify on the committed PyTorch references with 16-bit storage, and
//     training that is bitwise repeatable, graph or eager.
// Without a usable GPU the GPU tests report SKIPPED; without cuDNN in the build, they say so.
//
// Tolerances. u is the unit roundoff of the storage type (2^-8 bf16, 2^-11 fp16). cuDNN rounds
// the attention weights P to the storage type before P V, and the score gradients before
// dS^T q (the operands of its tensor-core matmuls), and rounds what it stores; everything
// else is fp32. Each output element is a sum of terms that each carry a relative error of at
// most u (the rounded operand) and the result carries one more rounding of at most u; the
// errors of different terms are independent roundings, so relative to the L2 norm of the
// result they add to about u (not u times the number of terms). The bound, relative L2 error
// < 8u (bf16 0.031, fp16 0.0039), leaves a factor of about 4 over that; a wrong mask, index or
// scale gives relative errors of 0.1 and more. The row statistics are fp32 log-sum-exps of
// scores that are exact products of 16-bit values summed in fp32: 1e-5 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/trainer.h"
#include "cli/verify.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/device_query.h"
#include "tests/cuda_test_util.h"
#include "tests/mixed_precision_util.h"
#include "tests/op_test_util.h"
#include "tests/training_run_util.h"
#ifdef TINYTRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cudnn_attention.h"
#endif
#ifdef TINYTRAIN_HAVE_CUDNN
#include "kernels/cudnn/sdpa_graphs.h"
#include "tests/cudnn_graph_eval.h"
#endif

namespace tt {
namespace {

#ifndef TINYTRAIN_HAVE_CUDA

TEST(CudnnAttention, SkippedBecauseTheBuildHasNoCuda) {
  GTEST_SKIP() << "this build has no CUDA backend (CMake found no CUDA toolkit)";
}

#else

using test::HalfBuffer;
using test::HalfType;
using test::kBf16;
using test::kFp16;

#ifdef TINYTRAIN_HAVE_CUDNN
constexpr bool kBuiltWithCudnn = true;
#else
constexpr bool kBuiltWithCudnn = false;
#endif

// ---- which cases cuDNN serves (no GPU needed) ----

TEST(CudnnAttentionSupport, ServesBf16AndFp16WithHeadSizesMultipleOf8UpTo128) {
  if (!kBuiltWithCudnn) GTEST_SKIP() << "this build has no cuDNN";
  for (DType dtype : {DType::BF16, DType::F16})
    for (int hs : {8, 16, 32, 64, 128})
      for (bool causal : {false, true})
        EXPECT_EQ(cudnn_attention_unsupported(AttentionShape{2, 64, 4, hs, causal}, dtype, 0.1f), "")
            << dtype_name(dtype) << " head size " << hs;
  EXPECT_EQ(cudnn_attention_unsupported(AttentionShape{1, 2, 1, 8, true}, DType::BF16, 0.0f), "");
}

TEST(CudnnAttentionSupport, SaysWhyItCannotServeACase) {
  if (!kBuiltWithCudnn) GTEST_SKIP() << "this build has no cuDNN";
  auto reason = [](AttentionShape s, DType dtype) { return cudnn_attention_unsupported(s, dtype, 0.1f); };
  EXPECT_NE(reason({16, 64, 4, 32, false}, DType::F32).find("fp32"), std::string::npos);
  EXPECT_NE(reason({2, 16, 5, 6, false}, DType::BF16).find("head size 6"), std::string::npos);
  EXPECT_NE(reason({2, 16, 1, 136, false}, DType::F16).find("head size 136"), std::string::npos);
  EXPECT_NE(reason({2, 1, 4, 32, true}, DType::BF16).find("seq 1"), std::string::npos);
  for (const std::string& r : {reason({16, 64, 4, 32, false}, DType::F32), reason({2, 16, 5, 6, false}, DType::BF16)})
    EXPECT_EQ(r.find('\n'), std::string::npos) << "one line: " << r;
}

#ifdef TINYTRAIN_HAVE_CUDNN
// ---- the graphs themselves, without a GPU: every tensor and operation descriptor, and the
// operation graph, finalize (cuDNN checks attribute types, ports, shapes and dtypes here) ----

struct GraphParam {
  bool causal;
  float dropout_p;
  cudnnDataType_t io;
};

TEST(CudnnAttentionGraphs, DescribeAndFinalizeWithoutAGpu) {
  for (const GraphParam& p : {GraphParam{false, 0.0f, CUDNN_DATA_BFLOAT16}, GraphParam{true, 0.0f, CUDNN_DATA_HALF},
                              GraphParam{false, 0.1f, CUDNN_DATA_HALF}, GraphParam{true, 0.1f, CUDNN_DATA_BFLOAT16}}) {
    const SdpaCase c{2, 64, 4, 32, p.causal, p.io, p.dropout_p};
    const std::string label = std::string(p.causal ? "causal" : "full") + (p.dropout_p > 0 ? " dropout" : "");
    // op counts: forward = 2 matmuls + scale + 7 softmax ops (max, sub, exp, sum, log, add,
    // div); backward = 5 matmuls + 3 reshapes + 9 pointwise/reduction; the causal mask adds 4
    // (two index generators, compare, select) to each; dropout adds the RNG and its
    // multiplies: 3 forward, 5 backward
    CudnnGraph forward, backward;
    SdpaForwardIds fwd_ids{};
    SdpaBackwardIds bwd_ids{};
    // (each graph finalized before the next is described: cuDNN's API log then lists them one
    // after the other, as tools/cudnn_api_ops.py reads it)
    ASSERT_NO_THROW(describe_sdpa_forward(forward, c, fwd_ids)) << label;
    EXPECT_NO_THROW(forward.operation_graph(nullptr, "forward")) << label;
    ASSERT_NO_THROW(describe_sdpa_backward(backward, c, bwd_ids)) << label;
    EXPECT_NO_THROW(backward.operation_graph(nullptr, "backward")) << label;
    EXPECT_EQ(forward.op_count(), 10u + (p.causal ? 4u : 0u) + (p.dropout_p > 0 ? 3u : 0u)) << label;
    EXPECT_EQ(backward.op_count(), 17u + (p.causal ? 4u : 0u) + (p.dropout_p > 0 ? 5u : 0u)) << label;
    // the memory operands have distinct ids; the RNG state only with dropout
    EXPECT_EQ(fwd_ids.seed != 0, p.dropout_p > 0) << label;
    EXPECT_EQ(bwd_ids.offset != 0, p.dropout_p > 0) << label;
  }
}

// The graphs' math, evaluated on the host in double (tests/cudnn_graph_eval.h), against the
// CPU backend's attention in fp32 with the same dropout mask: the Bernoulli samples are set to
// the CPU backend's Philox keep decisions. This checks every stride (the transposed k and v
// views over the packed qkv, the transposes by reshape), the op order, the statistics, the
// causal mask and both dropout paths, given cuDNN's documented op semantics. Tolerances: the
// evaluation is exact (double), so the error is the CPU backend's own fp32 error, bounded as in
// test_cpu_ops (CpuAttention): forward K = HS + 2T + 1 reduction terms, backward twice that.
struct EvalParam {
  AttentionShape s;
  float p;
};

TEST(CudnnAttentionGraphs, ComputeAttentionWhenEvaluatedOnTheHost) {
  for (const EvalParam& e : {EvalParam{{2, 13, 3, 8, false}, 0.0f}, EvalParam{{2, 13, 3, 8, true}, 0.0f},
                             EvalParam{{1, 9, 2, 16, false}, 0.25f}, EvalParam{{2, 11, 2, 8, true}, 0.2f}}) {
    const AttentionShape s = e.s;
    const int C = s.NH * s.HS;
    const std::string label = "T" + std::to_string(s.T) + (s.causal ? " causal" : "") + " p " + std::to_string(e.p);
    const Shape qkv_shape{s.B, s.T, 3 * C}, out_shape{s.B, s.T, C};
    std::vector<float> qkv = test::random_floats(qkv_shape.numel(), 61, -1.5f, 1.5f);
    std::vector<float> dout = test::random_floats(out_shape.numel(), 62);
    uint32_t step = 5;
    const DropoutMask mask{e.p, 99, &step, 1, DropoutSite::AttentionWeights};

    // the CPU backend, fp32
    auto cpu = make_cpu_backend();
    const test::AttentionF32 ref = test::attention_f32(*cpu, s, qkv, dout, mask);
    const std::vector<float>&out32 = ref.out, &lse32 = ref.lse, &dqkv32 = ref.dqkv;

    // the graphs, with the CPU backend's keep decisions as their Bernoulli samples
    const DropoutKey key = mask.key();
    auto keep = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
      const uint64_t index = static_cast<uint64_t>(((b * s.NH + h) * s.T + i) * s.T + j);
      return dropout_uniform(key, index) < e.p ? 0.0 : 1.0;
    };
    const SdpaCase c{s.B, s.T, s.NH, s.HS, s.causal, CUDNN_DATA_BFLOAT16, e.p};
    std::vector<double> qkv_d(qkv.begin(), qkv.end()), dout_d(dout.begin(), dout.end());
    std::vector<double> out_d(out_shape.numel()), stats_d(static_cast<size_t>(s.B) * s.NH * s.T);
    std::vector<double> dqkv_d(qkv_shape.numel()), softmax_sum_d(stats_d.size());
    CudnnGraph fwd, bwd;
    SdpaForwardIds f{};
    SdpaBackwardIds g{};
    describe_sdpa_forward(fwd, c, f);
    describe_sdpa_backward(bwd, c, g);
    test::GraphEvaluator run_fwd(fwd);
    run_fwd.bind(f.q, qkv_d, 0);
    run_fwd.bind(f.k, qkv_d, C);
    run_fwd.bind(f.v, qkv_d, 2 * C);
    run_fwd.bind(f.o, out_d, 0);
    run_fwd.bind(f.stats, stats_d, 0);
    run_fwd.set_bernoulli(keep);
    run_fwd.run();
    test::GraphEvaluator run_bwd(bwd);
    run_bwd.bind(g.q, qkv_d, 0);
    run_bwd.bind(g.k, qkv_d, C);
    run_bwd.bind(g.v, qkv_d, 2 * C);
    run_bwd.bind(g.o, out_d, 0);
    run_bwd.bind(g.dout, dout_d, 0);
    run_bwd.bind(g.stats, stats_d, 0);
    run_bwd.bind(g.softmax_sum, softmax_sum_d, 0);
    run_bwd.bind(g.dq, dqkv_d, 0);
    run_bwd.bind(g.dk, dqkv_d, C);
    run_bwd.bind(g.dv, dqkv_d, 2 * C);
    run_bwd.set_bernoulli(keep);
    run_bwd.run();

    const double forward_tol = test::kEps32 * (s.HS + 2 * s.T + 1);
    test::expect_rel_close(label + ": out", out32, out_d, forward_tol);
    test::expect_rel_close(label + ": dqkv", dqkv32, dqkv_d, 2.0 * forward_tol);
    // stats: the log-sum-exp of the visible scaled scores, the CPU backend's lse (max + log of a
    // T-term sum: absolute error within the forward's budget)
    test::expect_rel_close(label + ": stats", lse32, stats_d, forward_tol);
  }
}

// ---- the graphs against NVIDIA's cudnn-frontend, attribute by attribute (no GPU needed) ----
//
// The expected values below are what cudnn-frontend (commit 3929da2) declared when it built
// its SDPA graphs for the case B2 T64 NH4 HS32 bf16, on tinytrain's packed layouts, against
// this machine's cuDNN 9.19, without a device (sm_version 90, no handle), as cuDNN's API log
// shows them (tools/cudnn_frontend_sdpa.cpp, tools/cudnn_api_ops.py; docs/kernels.md).

const GraphTensor& tensor_of(const CudnnGraph& g, int64_t id) {
  for (const GraphTensor& t : g.tensor_list())
    if (t.id == id) return t;
  throw std::logic_error("no tensor " + std::to_string(id));
}

// The op of `kind` that writes tensor y.
const GraphOp& op_writing(const CudnnGraph& g, GraphOpKind kind, int64_t y) {
  for (const GraphOp& op : g.op_list())
    if (op.kind == kind && op.y == y) return op;
  throw std::logic_error("no op writes tensor " + std::to_string(y));
}

// Every op sets the attributes the frontend's op of that kind sets (as sets: the order does
// not matter to cuDNN), and no others. Matmuls: the compute type only on the matmul
// descriptor, no CUDNN_ATTR_MATMUL_PADDING_VALUE (the frontend sets it only when it is not 0,
// node/matmul.h). Pointwise: alpha1 and alpha2, and the axis for GEN_INDEX only. Reductions:
// the frontend also sets IS_DETERMINISTIC = false, the default (docs/kernels.md).
std::multiset<cudnnBackendAttributeName_t> frontend_attributes(const GraphOp& op) {
  switch (op.kind) {
    case GraphOpKind::Matmul:
      return {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_ATTR_OPERATION_MATMUL_CDESC,
              CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_ATTR_MATMUL_COMP_TYPE};
    case GraphOpKind::Pointwise: {
      std::multiset<cudnnBackendAttributeName_t> a = {
          CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
          CUDNN_ATTR_OPERATION_POINTWISE_YDESC,         CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1,
          CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2,        CUDNN_ATTR_POINTWISE_MODE,
          CUDNN_ATTR_POINTWISE_MATH_PREC};
      if (op.b != 0) a.insert(CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
      if (op.t != 0) a.insert(CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
      if (op.pointwise_mode == CUDNN_POINTWISE_GEN_INDEX) a.insert(CUDNN_ATTR_POINTWISE_AXIS);
      return a;
    }
    case GraphOpKind::Reduction:
      return {CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
              CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_ATTR_REDUCTION_OPERATOR};
    case GraphOpKind::Reshape:
      return {CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
    case GraphOpKind::Bernoulli:
      return {CUDNN_ATTR_OPERATION_RNG_YDESC, CUDNN_ATTR_OPERATION_RNG_SEED, CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC,
              CUDNN_ATTR_OPERATION_RNG_DESC, CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY};
  }
  return {};
}

TEST(CudnnAttentionGraphs, OpsSetTheFrontendsAttributesAndMatmulsNoPaddingValue) {
  for (const GraphParam& p : {GraphParam{false, 0.0f, CUDNN_DATA_BFLOAT16}, GraphParam{true, 0.0f, CUDNN_DATA_HALF},
                              GraphParam{false, 0.1f, CUDNN_DATA_HALF}, GraphParam{true, 0.1f, CUDNN_DATA_BFLOAT16}}) {
    const SdpaCase c{2, 64, 4, 32, p.causal, p.io, p.dropout_p};
    CudnnGraph forward, backward;
    SdpaForwardIds fwd_ids{};
    SdpaBackwardIds bwd_ids{};
    describe_sdpa_forward(forward, c, fwd_ids);
    describe_sdpa_backward(backward, c, bwd_ids);
    size_t matmuls = 0;
    for (const CudnnGraph* g : {&forward, &backward})
      for (const GraphOp& op : g->op_list()) {
        matmuls += op.kind == GraphOpKind::Matmul;
        const std::multiset<cudnnBackendAttributeName_t> set(op.attributes.begin(), op.attributes.end());
        EXPECT_EQ(set, frontend_attributes(op)) << "op writing tensor " << op.y;
        EXPECT_EQ(set.count(CUDNN_ATTR_MATMUL_PADDING_VALUE), 0u);
      }
    EXPECT_EQ(matmuls, 2u + 5u);
  }
}

// The backward's tensors where the frontend declares something particular.
TEST(CudnnAttentionGraphs, BackwardDeclaresTheFrontendsTensors) {
  for (const cudnnDataType_t io : {CUDNN_DATA_BFLOAT16, CUDNN_DATA_HALF}) {
    const SdpaCase c{2, 64, 4, 32, true, io, 0.0f};
    CudnnGraph g;
    SdpaBackwardIds ids{};
    describe_sdpa_backward(g, c, ids);

    // dO * O, the product whose row sums are softmax_sum: fp32, virtual, with the frontend's
    // strides {NH*T*HS, T*HS, NH*HS, 1} ("mul_dO_O::OUT_0": Str [ 8192,2048,128,1 ])
    const GraphOp* d_o_o = nullptr;
    for (const GraphOp& op : g.op_list())
      if (op.kind == GraphOpKind::Pointwise && op.pointwise_mode == CUDNN_POINTWISE_MUL && op.x == ids.dout &&
          op.b == ids.o)
        d_o_o = &op;
    ASSERT_NE(d_o_o, nullptr) << "no dO * O product";
    const GraphTensor& product = tensor_of(g, d_o_o->y);
    EXPECT_EQ(product.dtype, CUDNN_DATA_FLOAT);
    EXPECT_TRUE(product.is_virtual);
    EXPECT_EQ(product.dims, (Dims4{2, 4, 64, 32}));
    EXPECT_EQ(product.strides, (Dims4{8192, 2048, 128, 1}));

    // dQ = dS K: K is viewed back as [B,NH,T,HS] by a reshape whose output the frontend leaves
    // untyped, so it takes the graph's intermediate type ("reshape_k::Y": FLOAT, Str
    // [ 24576,32,384,1 ]); dS enters in fp32 ("matmul_dS_K": aDesc FLOAT)
    const GraphOp& dq = op_writing(g, GraphOpKind::Matmul, ids.dq);
    const GraphTensor& k_rows = tensor_of(g, dq.b);
    EXPECT_EQ(k_rows.dtype, CUDNN_DATA_FLOAT);
    EXPECT_TRUE(k_rows.is_virtual);
    EXPECT_EQ(k_rows.dims, (Dims4{2, 4, 64, 32}));
    EXPECT_EQ(k_rows.strides, (Dims4{24576, 32, 384, 1}));
    EXPECT_EQ(op_writing(g, GraphOpKind::Reshape, dq.b).x, ids.k);
    EXPECT_EQ(tensor_of(g, dq.x).dtype, CUDNN_DATA_FLOAT);

    // dV = P^T dO and dK = dS^T q take their transposed left operand in the io type
    // ("reshape_p::Y", "reshape_dS::Y": BFLOAT16, Str [ 16384,4096,1,64 ])
    for (const int64_t out : {ids.dv, ids.dk}) {
      const GraphTensor& left = tensor_of(g, op_writing(g, GraphOpKind::Matmul, out).x);
      EXPECT_EQ(left.dtype, io);
      EXPECT_EQ(left.strides, (Dims4{16384, 4096, 1, 64}));
    }
  }
}

// The backward's dropout scalars, as the frontend makes them: one by-value 1/(1-p) tensor for
// both of its uses (P before dV, and dS), and (1-p) itself, not 1/(1/(1-p)), for the row sums
// (in fp32 they differ for p = 0.01: 0.99000001 against 0.990000069).
TEST(CudnnAttentionGraphs, BackwardDropoutScalarsAreTheFrontends) {
  const float p = 0.01f;
  CudnnGraph g;
  SdpaBackwardIds ids{};
  describe_sdpa_backward(g, SdpaCase{2, 64, 4, 32, false, CUDNN_DATA_BFLOAT16, p}, ids);
  const GraphTensor& fraction = tensor_of(g, op_writing(g, GraphOpKind::Pointwise, ids.softmax_sum).b);
  EXPECT_TRUE(fraction.by_value);
  EXPECT_EQ(fraction.value, 1.0f - p);
  std::vector<int64_t> scale_uses;
  for (const GraphOp& op : g.op_list())
    if (op.kind == GraphOpKind::Pointwise && op.b != 0 && tensor_of(g, op.b).by_value &&
        tensor_of(g, op.b).value == 1.0f / (1.0f - p))
      scale_uses.push_back(op.b);
  ASSERT_EQ(scale_uses.size(), 2u);
  EXPECT_EQ(scale_uses[0], scale_uses[1]) << "one 1/(1-p) tensor";
}

// Every tensor descriptor declares 16-byte alignment; k and v start C elements apart in the
// packed qkv, so C 16-bit elements must fill whole 16-byte units. prepare() refuses the case
// otherwise, once, instead of checking pointers at every execute. (Served head sizes are
// multiples of 8, so it holds for every case cuDNN serves: shown here on other sizes.)
TEST(CudnnAttentionSupport, OperandAlignmentIsCheckedFromTheLayout) {
  EXPECT_EQ(sdpa_misaligned_operand(SdpaCase{2, 64, 1, 8, false, CUDNN_DATA_BFLOAT16, 0.0f}), "");
  EXPECT_EQ(sdpa_misaligned_operand(SdpaCase{2, 64, 2, 4, false, CUDNN_DATA_HALF, 0.0f}), "");
  const std::string why = sdpa_misaligned_operand(SdpaCase{2, 64, 1, 4, false, CUDNN_DATA_HALF, 0.0f});
  EXPECT_NE(why.find("8 bytes"), std::string::npos) << why;
  EXPECT_NE(why.find("16-byte"), std::string::npos) << why;
  EXPECT_NE(sdpa_misaligned_operand(SdpaCase{1, 16, 3, 12, true, CUDNN_DATA_BFLOAT16, 0.1f}), "");  // C 36: 72 bytes
  for (int hs : {8, 16, 24, 64, 128})
    for (int nh : {1, 3})
      EXPECT_EQ(sdpa_misaligned_operand(SdpaCase{2, 8, nh, hs, false, CUDNN_DATA_BFLOAT16, 0.0f}), "") << hs;
}

// When cuDNN builds no plan, the reason reaches the log as one line. Without a GPU there is no
// handle: cuDNN's heuristics offer no engine (on a GPU machine, every engine they offer fails
// to build without the handle), and that is the reason the line gives.
TEST(CudnnAttentionSupport, NoEngineGivesOneLogLineWithCudnnsReason) {
  CudnnGraph forward;
  SdpaForwardIds ids{};
  describe_sdpa_forward(forward, SdpaCase{2, 64, 4, 32, true, CUDNN_DATA_BFLOAT16, 0.0f}, ids);
  std::string reason;
  try {
    forward.build(nullptr, "cuDNN attention forward");
    ADD_FAILURE() << "a plan built without a cuDNN handle";
  } catch (const CudnnError& e) {
    reason = e.what();
  }
  EXPECT_EQ(reason.rfind("cuDNN attention forward: ", 0), 0u) << reason;
  EXPECT_NE(reason.find("no engine"), std::string::npos) << reason;
  EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
  const std::string line = cudnn_fallback_line("cuDNN cannot serve this attention: " + reason);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_NE(line.find(reason), std::string::npos) << line;
  const std::string ours = "; tinytrain's attention kernel runs";
  ASSERT_GT(line.size(), ours.size());
  EXPECT_EQ(line.substr(line.size() - ours.size()), ours) << line;
}
#endif

// The fallback line stays one line whatever the reason holds.
TEST(CudnnAttentionSupport, FallbackLineIsOneLine) {
  EXPECT_EQ(cudnn_fallback_line("head size 6: not served"),
            "head size 6: not served; tinytrain's attention kernel runs");
  EXPECT_EQ(cudnn_fallback_line("plan failed\nengine 3: no\r\n\nengine 4: no\n"),
            "plan failed; engine 3: no; engine 4: no; tinytrain's attention kernel runs");
}

// ---- GPU helpers ----

// The CUDA backend with cuDNN attention allowed, or a reason to skip: cuDNN runs only on a real
// GPU (its kernels are NVIDIA's binaries, which the SIMT emulator cannot run).
std::unique_ptr<Backend> cudnn_backend_or_skip(std::string& why) {
  if (!kBuiltWithCudnn) {
    why = "this build has no cuDNN";
    return nullptr;
  }
  if (test::cuda_is_emulated()) {
    why = "cuDNN needs a real GPU (" + query_cuda_device().reason + "); the SIMT emulator has no cuDNN";
    return nullptr;
  }
  CudaOptions options;
  options.attention = AttentionKernel::Cudnn;
  return test::cuda_backend_or_skip(why, options);
}

#define REQUIRE_CUDNN(backend)                         \
  std::string why_skipped;                             \
  auto backend = cudnn_backend_or_skip(why_skipped);   \
  if (!backend) GTEST_SKIP() << why_skipped

// A device buffer of the backend, freed with its owner.
struct DeviceBuffer {
  Backend& backend;
  void* data;
  size_t bytes;
  DeviceBuffer(Backend& b, size_t n) : backend(b), data(b.allocate(n)), bytes(n) {}
  ~DeviceBuffer() { backend.release(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

std::unique_ptr<DeviceBuffer> upload(Backend& backend, const HalfBuffer& host) {
  auto buffer = std::make_unique<DeviceBuffer>(backend, host.bits.size() * sizeof(uint16_t));
  backend.copy_to_device(buffer->data, host.bits.data(), buffer->bytes);
  return buffer;
}

// n fp32 NaNs on the device: an fp32 output the op must overwrite (lse) or scratch.
std::unique_ptr<DeviceBuffer> upload_f32_nan(Backend& backend, size_t n) {
  const std::vector<float> host(n, std::nanf(""));
  auto buffer = std::make_unique<DeviceBuffer>(backend, n * sizeof(float));
  backend.copy_to_device(buffer->data, host.data(), buffer->bytes);
  return buffer;
}

std::vector<float> download(Backend& backend, const DeviceBuffer& buffer, DType dtype, size_t n) {
  if (dtype == DType::F32) {
    std::vector<float> v(n);
    backend.copy_to_host(v.data(), buffer.data, n * sizeof(float));
    return v;
  }
  HalfBuffer h{dtype, std::vector<uint16_t>(n)};
  backend.copy_to_host(h.bits.data(), buffer.data, n * sizeof(uint16_t));
  return h.values();
}

// ||got - want|| / ||want|| over the elements [first, first + count) of rows of `row` elements
// taken every `stride` (one of q, k, v in a packed (N,3C) tensor: stride 3C, row C).
double rel_l2(const std::vector<float>& got, const std::vector<double>& want, size_t first = 0, size_t row = 0,
              size_t stride = 0) {
  if (row == 0) row = stride = got.size();
  double err = 0.0, norm = 0.0;
  for (size_t base = first; base < got.size(); base += stride)
    for (size_t i = base; i < base + row; ++i) {
      err += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
    }
  return std::sqrt(err / std::max(norm, 1e-300));
}

// One attention forward + backward on the GPU from 16-bit inputs: through cuDNN when the
// backend prepared the case (use_library_attention), else through our kernels.
struct AttentionRun {
  std::vector<float> out, stats, dqkv;
};

AttentionRun run_attention(Backend& cuda, const AttentionShape& s, DType dtype, const std::vector<float>& qkv,
                   const std::vector<float>& dout, const DropoutMask& mask) {
  const int C = s.NH * s.HS;
  const Shape qkv_shape{s.B, s.T, 3 * C}, out_shape{s.B, s.T, C}, rows_shape{s.B, s.NH, s.T};
  auto d_qkv = upload(cuda, test::half_of(dtype, qkv));
  auto d_dout = upload(cuda, test::half_of(dtype, dout));
  auto d_out = upload(cuda, test::half_nan(dtype, out_shape.numel()));
  auto d_lse = upload_f32_nan(cuda, rows_shape.numel());
  auto d_dout_dot_out = upload_f32_nan(cuda, rows_shape.numel());
  auto d_dqkv = upload(cuda, test::half_nan(dtype, qkv_shape.numel()));
  const Tensor tqkv{d_qkv->data, dtype, qkv_shape}, tout{d_out->data, dtype, out_shape};
  const Tensor tlse{d_lse->data, DType::F32, rows_shape}, tscratch{d_dout_dot_out->data, DType::F32, rows_shape};
  cuda.attention_forward(tout, tlse, tqkv, s, mask);
  cuda.attention_backward(Tensor{d_dqkv->data, dtype, qkv_shape}, tscratch, Tensor{d_dout->data, dtype, out_shape},
                          tqkv, tout, tlse, s, mask);
  AttentionRun r;
  r.out = download(cuda, *d_out, dtype, out_shape.numel());
  r.stats = download(cuda, *d_lse, DType::F32, rows_shape.numel());
  r.dqkv = download(cuda, *d_dqkv, dtype, qkv_shape.numel());
  return r;
}

// Whether a line of use_library_attention says that cuDNN serves the case (the other lines
// end in "tinytrain's attention kernel runs").
bool cudnn_serves(const std::string& line) {
  return line.rfind("cuDNN ", 0) == 0 && line.find("tinytrain's attention kernel runs") == std::string::npos;
}

void expect_served(Backend& cuda, const AttentionShape& s, DType dtype, float p) {
  const std::string line = cuda.use_library_attention(s, dtype, p);
  ASSERT_TRUE(cudnn_serves(line)) << "cuDNN did not take the case: " << line;
}

// ---- without dropout: against the CPU backend in fp32 on the same 16-bit inputs ----

struct ShapeCase {
  AttentionShape s;
  const char* name;
};
struct NoDropoutParam {
  HalfType type;
  ShapeCase shape;
};
void PrintTo(const NoDropoutParam& p, std::ostream* os) { *os << p.type.name << "_" << p.shape.name; }

class CudnnAttentionNoDropout : public ::testing::TestWithParam<NoDropoutParam> {};

TEST_P(CudnnAttentionNoDropout, MatchesTheFp32ReferenceOnTheSameInputs) {
  REQUIRE_CUDNN(cuda);
  const AttentionShape s = GetParam().shape.s;
  const HalfType h = GetParam().type;
  const int C = s.NH * s.HS;
  const Shape qkv_shape{s.B, s.T, 3 * C}, out_shape{s.B, s.T, C};
  const std::vector<float> qkv = test::rounded(h.dtype, test::random_floats(qkv_shape.numel(), 41, -1.5f, 1.5f));
  const std::vector<float> dout = test::rounded(h.dtype, test::random_floats(out_shape.numel(), 42));
  uint32_t step = 0;
  const DropoutMask no_dropout{0.0f, 7, &step, 0, DropoutSite::AttentionWeights};

  // the reference: the CPU backend in fp32 on the same (exactly widened) values
  auto cpu = make_cpu_backend();
  const test::AttentionF32 ref = test::attention_f32(*cpu, s, qkv, dout, no_dropout);
  const std::vector<float>&out32 = ref.out, &dqkv32 = ref.dqkv;
  // the row statistics in double: log sum_j exp(score_ij) over the unmasked keys
  std::vector<double> stats_ref(static_cast<size_t>(s.B) * s.NH * s.T);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HS));
  for (int b = 0; b < s.B; ++b)
    for (int hd = 0; hd < s.NH; ++hd)
      for (int i = 0; i < s.T; ++i) {
        std::vector<double> scores;
        for (int j = 0; j < (s.causal ? i + 1 : s.T); ++j) {
          double dot = 0.0;
          for (int d = 0; d < s.HS; ++d)
            dot += static_cast<double>(qkv[(static_cast<size_t>(b) * s.T + i) * 3 * C + hd * s.HS + d]) *
                   qkv[(static_cast<size_t>(b) * s.T + j) * 3 * C + C + hd * s.HS + d];
          scores.push_back(dot * scale);
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double x : scores) sum += std::exp(x - m);
        stats_ref[(static_cast<size_t>(b) * s.NH + hd) * s.T + i] = m + std::log(sum);
      }

  expect_served(*cuda, s, h.dtype, 0.0f);
  const AttentionRun r = run_attention(*cuda, s, h.dtype, qkv, dout, no_dropout);

  // our CUDA kernels on the same inputs (a backend without cuDNN attention)
  auto plain = make_cuda_backend(CudaOptions{});
  const AttentionRun ours = run_attention(*plain, s, h.dtype, qkv, dout, no_dropout);

  const double bound = 8.0 * h.u;
  const std::vector<double> out_ref = test::to_double(out32), dqkv_ref = test::to_double(dqkv32);
  const std::vector<double> out_ours = test::to_double(ours.out), dqkv_ours = test::to_double(ours.dqkv);
  EXPECT_LT(rel_l2(r.out, out_ref), bound) << "out";
  // cuDNN against our kernel: each within `bound` of the reference, so within twice it of each other
  EXPECT_LT(rel_l2(r.out, out_ours), 2 * bound) << "out against our kernel";
  const char* parts[] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    const size_t first = static_cast<size_t>(part) * C;
    EXPECT_LT(rel_l2(r.dqkv, dqkv_ref, first, C, 3 * C), bound) << parts[part];
    EXPECT_LT(rel_l2(r.dqkv, dqkv_ours, first, C, 3 * C), 2 * bound) << parts[part] << " against our kernel";
    EXPECT_LT(rel_l2(ours.dqkv, dqkv_ref, first, C, 3 * C), bound) << parts[part] << " of our kernel";
  }
  for (size_t i = 0; i < stats_ref.size(); ++i)
    ASSERT_NEAR(r.stats[i], stats_ref[i], 1e-5 * std::max(1.0, std::fabs(stats_ref[i]))) << "stats row " << i;
  for (float x : r.dqkv) ASSERT_TRUE(std::isfinite(x)) << "dqkv must be overwritten everywhere";
}

std::vector<NoDropoutParam> no_dropout_cases() {
  const ShapeCase shapes[] = {
      {{2, 64, 4, 32, false}, "seed_B2_T64_NH4_HS32"},
      {{2, 64, 4, 32, true}, "causal_B2_T64_NH4_HS32"},
      {{2, 17, 2, 8, false}, "B2_T17_NH2_HS8"},
      {{1, 67, 2, 64, true}, "causal_B1_T67_NH2_HS64"},
      {{1, 33, 1, 128, false}, "B1_T33_NH1_HS128"},
      {{3, 2, 3, 16, true}, "causal_B3_T2_NH3_HS16"},
  };
  std::vector<NoDropoutParam> cases;
  for (const HalfType& h : {kBf16, kFp16})
    for (const ShapeCase& sc : shapes) cases.push_back({h, sc});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionNoDropout, ::testing::ValuesIn(no_dropout_cases()),
                         [](const auto& info) {
                           std::ostringstream name;
                           PrintTo(info.param, &name);
                           return name.str();
                         });

// ---- with dropout: cuDNN's own masks, shared by its forward and backward ----
//
// With q = 0 every score is 0, so P = 1/T on every key, and with v_j the one-hot vector of
// channel j (T <= HS), output channel j of query i is P_ij * M_ij / (1-p) = M_ij / (T (1-p)):
// the forward's output spells out its dropout mask M. The gradients then follow in double
// from that mask: dV_j = sum_i P_ij M_ij/(1-p) dO_i, dS_ij = P_ij (dP_ij M_ij/(1-p) - D_i)
// scale with dP = dO V^T and D_i = dO_i . O_i, dQ = dS K, and dK = dS^T Q = 0.

class CudnnAttentionDropout : public ::testing::TestWithParam<HalfType> {};

struct DropoutProbe {
  AttentionShape s{2, 32, 2, 64, false};
  float p = 0.25f;
  std::vector<float> qkv, dout;

  explicit DropoutProbe(DType dtype) {
    const int C = s.NH * s.HS;
    qkv.assign(static_cast<size_t>(s.B) * s.T * 3 * C, 0.0f);
    std::vector<float> k = test::random_floats(qkv.size(), 51, -1.0f, 1.0f);
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < s.T; ++t)
        for (int h = 0; h < s.NH; ++h) {
          const size_t row = (static_cast<size_t>(b) * s.T + t) * 3 * C + h * s.HS;
          for (int d = 0; d < s.HS; ++d) qkv[row + C + d] = test::round_to(dtype, k[row + C + d]);
          qkv[row + 2 * C + t] = 1.0f;  // v_t: one-hot on channel t of its head
        }
    dout = test::rounded(dtype, test::random_floats(static_cast<size_t>(s.B) * s.T * C, 52));
  }
  // M_ij of head h, batch b, from the forward output: kept where the output is nonzero.
  std::vector<int> mask(const std::vector<float>& out) const {
    const int C = s.NH * s.HS;
    std::vector<int> m(static_cast<size_t>(s.B) * s.NH * s.T * s.T);
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.NH; ++h)
        for (int i = 0; i < s.T; ++i)
          for (int j = 0; j < s.T; ++j)
            m[((static_cast<size_t>(b) * s.NH + h) * s.T + i) * s.T + j] =
                out[(static_cast<size_t>(b) * s.T + i) * C + h * s.HS + j] != 0.0f;
    return m;
  }
};

TEST_P(CudnnAttentionDropout, BackwardUsesTheForwardsMask) {
  REQUIRE_CUDNN(cuda);
  const HalfType h = GetParam();
  const DropoutProbe probe(h.dtype);
  const AttentionShape& s = probe.s;
  const int C = s.NH * s.HS, T = s.T;
  uint32_t* step = static_cast<uint32_t*>(cuda->allocate(sizeof(uint32_t)));
  const DropoutMask mask{probe.p, 1234, step, 1, DropoutSite::AttentionWeights};
  expect_served(*cuda, s, h.dtype, probe.p);
  const AttentionRun r = run_attention(*cuda, s, h.dtype, probe.qkv, probe.dout, mask);
  cuda->release(step);
  const std::vector<int> m = probe.mask(r.out);

  // the kept weights are 1/(T(1-p)), rounded to the storage type (within one rounding either
  // way: cuDNN may apply the 1/(1-p) before or after rounding the weights)
  const float kept = test::round_to(h.dtype, static_cast<float>(1.0 / (T * (1.0 - probe.p))));
  size_t dropped = 0;
  for (int b = 0; b < s.B; ++b)
    for (int i = 0; i < T; ++i)
      for (int c = 0; c < C; ++c) {
        const float o = r.out[(static_cast<size_t>(b) * T + i) * C + c];
        if (c % s.HS < T) {
          ASSERT_TRUE(o == 0.0f || std::fabs(o - kept) <= 2.0 * h.u * kept)
              << "out " << o << " (kept weight " << kept << ") at b " << b << " i " << i << " c " << c;
        } else {
          ASSERT_EQ(o, 0.0f);
        }
      }
  for (int x : m) dropped += x == 0;
  // binomial: n = 4096 draws, p = 0.25, sd = 27.7; 5 sd is 0.034 of the fraction
  const double n = static_cast<double>(m.size());
  EXPECT_NEAR(dropped / n, probe.p, 5.0 * std::sqrt(probe.p * (1 - probe.p) / n));

  // the gradients from that mask, in double
  const double keep = 1.0 / (1.0 - probe.p), scale = 1.0 / std::sqrt(static_cast<double>(s.HS)), P = 1.0 / T;
  std::vector<double> dqkv_ref(r.dqkv.size(), 0.0);
  for (int b = 0; b < s.B; ++b)
    for (int hd = 0; hd < s.NH; ++hd) {
      auto at = [&](int t, int part, int d) { return (static_cast<size_t>(b) * T + t) * 3 * C + part * C + hd * s.HS + d; };
      auto dO = [&](int t, int d) { return static_cast<double>(probe.dout[(static_cast<size_t>(b) * T + t) * C + hd * s.HS + d]); };
      auto M = [&](int i, int j) { return m[((static_cast<size_t>(b) * s.NH + hd) * T + i) * T + j]; };
      for (int i = 0; i < T; ++i) {
        double D = 0.0;  // dO_i . O_i, with O_ij = P M_ij keep on channel j
        for (int j = 0; j < T; ++j) D += dO(i, j) * P * M(i, j) * keep;
        for (int j = 0; j < T; ++j) {
          // dP_ij = dO_i . v_j = dO_i[j]
          const double dS = P * (dO(i, j) * M(i, j) * keep - D) * scale;
          for (int d = 0; d < s.HS; ++d) dqkv_ref[at(i, 0, d)] += dS * probe.qkv[at(j, 1, d)];
          for (int d = 0; d < s.HS; ++d) dqkv_ref[at(j, 2, d)] += P * M(i, j) * keep * dO(i, d);
        }
      }
    }
  const double bound = 8.0 * h.u;
  EXPECT_LT(rel_l2(r.dqkv, dqkv_ref, 0, C, 3 * C), bound) << "dq";
  EXPECT_LT(rel_l2(r.dqkv, dqkv_ref, 2 * C, C, 3 * C), bound) << "dv";
  for (size_t base = C; base < r.dqkv.size(); base += 3 * C)
    for (int c = 0; c < C; ++c) ASSERT_EQ(r.dqkv[base + c], 0.0f) << "dk = dS^T q with q = 0";
}

TEST_P(CudnnAttentionDropout, MasksRepeatForTheSameStepAndLayerAndDifferOtherwise) {
  REQUIRE_CUDNN(cuda);
  const HalfType h = GetParam();
  const DropoutProbe probe(h.dtype);
  uint32_t* step = static_cast<uint32_t*>(cuda->allocate(sizeof(uint32_t)));
  expect_served(*cuda, probe.s, h.dtype, probe.p);
  auto mask_of = [&](uint32_t at_step, uint32_t layer) {
    cuda->copy_to_device(step, &at_step, sizeof(at_step));
    const DropoutMask mask{probe.p, 1234, step, layer, DropoutSite::AttentionWeights};
    return probe.mask(run_attention(*cuda, probe.s, h.dtype, probe.qkv, probe.dout, mask).out);
  };
  const std::vector<int> base = mask_of(3, 0);
  EXPECT_EQ(mask_of(3, 0), base);
  for (const auto& other : {mask_of(4, 0), mask_of(3, 1)}) {
    size_t differ = 0;
    for (size_t i = 0; i < base.size(); ++i) differ += base[i] != other[i];
    // independent masks differ in a fraction 2p(1-p) = 0.375 of places (1536 of 4096, sd 31)
    EXPECT_GT(differ, base.size() / 4) << "masks of another step or layer must be independent";
  }
  cuda->release(step);
}

INSTANTIATE_TEST_SUITE_P(Types, CudnnAttentionDropout, ::testing::Values(kBf16, kFp16),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- whole runs ----

// verify on the committed PyTorch references (dropout 0) with 16-bit storage and cuDNN
// attention, where cuDNN serves the head size (odd_sizes has head size 6: our kernel runs,
// and the line says so).
TEST(CudnnAttentionTraining, VerifyPassesTheCommittedReferences) {
  REQUIRE_CUDNN(cuda);
  for (Precision precision : {Precision::BF16, Precision::FP16})
    for (const char* name : {"seed_small", "prenorm_gelu_causal_learned", "odd_sizes"}) {
      std::ostringstream out;
      const std::string path = std::string(TINYTRAIN_SOURCE_DIR "/tests/data/") + name + ".safetensors";
      EXPECT_TRUE(run_verify(*cuda, path, out, precision)) << out.str();
      const std::string text = out.str();
      const size_t line = text.find("attention: ");
      ASSERT_NE(line, std::string::npos) << "verify must say which attention runs:\n" << text;
      const std::string note = text.substr(line + 11, text.find('\n', line) - line - 11);
      EXPECT_EQ(cudnn_serves(note), std::string(name) != "odd_sizes") << note;
    }
}

// The seed workload (dropout 0.1) in bf16.
test::TrainingRun train_bf16(Backend& backend, int steps, bool use_graph) {
  return test::train_seed_workload(backend, steps, use_graph, ModelConfig{}, Precision::BF16);
}

TEST(CudnnAttentionTraining, TwoRunsGiveTheSameBitsGraphOrEager) {
  REQUIRE_CUDNN(cuda);
  const test::TrainingRun a = train_bf16(*cuda, 20, true), b = train_bf16(*cuda, 20, true), eager = train_bf16(*cuda, 20, false);
  ASSERT_TRUE(cudnn_serves(a.attention_note)) << a.attention_note;
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.losses, eager.losses);
  EXPECT_EQ(a.params, eager.params);
  for (double loss : a.losses) EXPECT_TRUE(std::isfinite(loss));
}

#endif  // TINYTRAIN_HAVE_CUDA

}  // namespace
}  // namespace tt
