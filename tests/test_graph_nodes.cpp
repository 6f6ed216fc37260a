// The nodes of a captured training step, counted by kind (kernels/cuda/graph_nodes.h) on the
// emulated CUDA device, where issue 24's node budget is counted: the count accounts for every
// node the graph holds, names every kernel (no `other`), and the seed workload's step fits the
// budget (at most 50 nodes in fp32, 52 in bf16). The emulator's graph API itself (what a node
// is, an event record making none) is checked in tests/test_simt.cu.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <vector>

#include "engine/init.h"
#include "engine/token_batch.h"
#include "engine/trainer.h"
#include "tests/test_models.h"
#ifdef TINYTRAIN_HAVE_SIMT
#include "simt/cuda_api.h"
#include "simt/emulated_cuda.h"
#endif

namespace tt {
namespace {

#ifdef TINYTRAIN_HAVE_SIMT

// Which counter a kernel name adds to, as a name.
const char* kind_of(const std::string& name) {
  GraphNodeCount count;
  int& counter = emu::kernel_node_counter(count, name);
  if (&counter == &count.gemm) return "gemm";
  if (&counter == &count.attention) return "attention";
  if (&counter == &count.elementwise) return "elementwise";
  if (&counter == &count.reduction) return "reduction";
  if (&counter == &count.optimizer) return "optimizer";
  if (&counter == &count.memset_copy) return "memset_copy";
  return "other";
}

// The names as the runtimes give them: the emulator the launch's own spelling, a GPU the
// mangled symbol (these mangled by hand after the Itanium C++ ABI), a library its own names.
TEST(GraphNodes, KernelNamesAreClassifiedInEveryForm) {
  EXPECT_STREQ(kind_of("layernorm_forward_kernel<S>"), "elementwise");
  EXPECT_STREQ(kind_of("activation_forward_kernel<Activation::Relu, S>"), "elementwise");
  EXPECT_STREQ(kind_of("tt::adamw_kernel"), "optimizer");
  EXPECT_STREQ(kind_of("tiled_gemm_kernel<AB, Out>"), "gemm");
  // void tt::{anonymous}::layernorm_backward_kernel(float*, ...) and
  // void tt::attention_forward_kernel<float>(float*, ...)
  EXPECT_STREQ(kind_of("_ZN2tt12_GLOBAL__N_125layernorm_backward_kernelEPfS1_PKfii"), "reduction");
  EXPECT_STREQ(kind_of("_ZN2tt24attention_forward_kernelIfEEvPT_S2_"), "attention");
  EXPECT_STREQ(kind_of("_Z17tiled_gemm_kernelIffEvPKT_"), "gemm");
  // a name that merely starts like one of ours is not ours
  EXPECT_STREQ(kind_of("_ZN2tt29layernorm_forward_kernel_wideEv"), "other");
  // cuBLASLt's and cuDNN's kernels
  EXPECT_STREQ(kind_of("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32"), "gemm");
  EXPECT_STREQ(kind_of("nvjet_tst_64x8_64x16_4x1_v_bz_TNT"), "gemm");
  EXPECT_STREQ(kind_of("_ZN7cutlass13device_kernelIN10cutlass_803GemmEEEvNT_6ParamsE"), "gemm");
  // the kernels cuBLASLt adds to finish a product, in its namespace: void cublasLt::
  // splitKreduce_kernel<float>(float*) and cublasLt::epilogue::impl::globalKernel<8, 32>(), and
  // cuBLAS's reduce_1Block_kernel<float>(float const*)
  EXPECT_STREQ(kind_of("_ZN8cublasLt19splitKreduce_kernelIfEEvPT_"), "gemm");
  EXPECT_STREQ(kind_of("_ZN8cublasLt8epilogue4impl12globalKernelILi8ELi32EEEvv"), "gemm");
  EXPECT_STREQ(kind_of("_Z20reduce_1Block_kernelIfEvPKT_"), "gemm");
  EXPECT_STREQ(kind_of("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1"), "attention");
  EXPECT_STREQ(kind_of("some_helper_kernel"), "other");
}

struct CapturedStep {
  size_t graph_nodes = 0;          // cudaGraphGetNodes's count
  GraphNodeCount counted;          // count_graph_nodes on the same graph
  GraphNodeCount from_trainer;     // what the trainer's own captured step reported
};

// How capture_step takes the trainer's graph.
enum class TrainerCapture {
  // Trainer::train_step(true) at step 1: its capture (Trainer::graph_nodes), then its replay.
  AndReplay,
  // Trainer::train_step's own capture calls at step 1 (Backend::begin_capture, forward_backward,
  // optimizer_step, Backend::end_capture; Backend::captured_graph_nodes is what the trainer
  // reports), without the replay that train_step runs after them: the replay executes the whole
  // step, the counts are the capture's, and a captured step is not executed.
  CaptureOnly,
};

// Step 0 eagerly, step 1 captured by the trainer, then the next step's ops captured here on
// the backend's stream with the runtime's own calls, counted both ways.
CapturedStep capture_step(const ModelConfig& model, Precision precision, int B, int T,
                          TrainerCapture how = TrainerCapture::AndReplay) {
  auto backend = emu::make_cuda_backend(CudaOptions{});
  AdamWConfig opt;
  TrainOptions o = test::trainer_options(model, opt, B, T, 1337);
  o.precision = precision;
  Trainer trainer(*backend, o);
  trainer.load_params(init_params(trainer.model().layout(), 1337).data());
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  CapturedStep out;
  for (uint32_t step = 0; step < 2; ++step) {
    random_batch(1337, step, B, T, model.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), y.data(), step);
    if (step == 1 && how == TrainerCapture::CaptureOnly) {
      EXPECT_FALSE(trainer.graph_nodes().has_value());  // step 0 ran eagerly, as train_step runs it
      backend->begin_capture();
      trainer.forward_backward();
      trainer.optimizer_step();
      backend->end_capture();
      out.from_trainer = backend->captured_graph_nodes();
      break;
    }
    trainer.train_step(/*use_graph=*/true);
  }
  if (how == TrainerCapture::AndReplay) {
    EXPECT_TRUE(trainer.graph_nodes().has_value());
    EXPECT_EQ(trainer.graph_replays(), 1);
    out.from_trainer = trainer.graph_nodes().value_or(GraphNodeCount{});
  }

  const uint32_t next = how == TrainerCapture::AndReplay ? 2 : 1;
  random_batch(1337, next, B, T, model.vocab_size, x.data(), y.data());
  trainer.load_batch(x.data(), y.data(), next);
  backend->synchronize();
  auto stream = static_cast<simt::cuda_api::cudaStream_t>(backend->native_stream());
  EXPECT_EQ(simt::cuda_api::cudaStreamBeginCapture(stream, simt::cuda_api::cudaStreamCaptureModeThreadLocal),
            simt::cuda_api::cudaSuccess);
  trainer.forward_backward();
  trainer.optimizer_step();
  simt::cuda_api::cudaGraph_t graph = nullptr;
  EXPECT_EQ(simt::cuda_api::cudaStreamEndCapture(stream, &graph), simt::cuda_api::cudaSuccess);
  EXPECT_EQ(simt::cuda_api::cudaGraphGetNodes(graph, nullptr, &out.graph_nodes), simt::cuda_api::cudaSuccess);
  out.counted = emu::count_graph_nodes(graph);
  simt::cuda_api::cudaGraphDestroy(graph);
  return out;
}

void print(const char* what, const GraphNodeCount& n) {
  std::printf("[ nodes    ] %s: %s\n", what, graph_nodes_text(n).c_str());
}

void expect_same(const GraphNodeCount& a, const GraphNodeCount& b) {
  EXPECT_EQ(a.gemm, b.gemm);
  EXPECT_EQ(a.attention, b.attention);
  EXPECT_EQ(a.elementwise, b.elementwise);
  EXPECT_EQ(a.reduction, b.reduction);
  EXPECT_EQ(a.optimizer, b.optimizer);
  EXPECT_EQ(a.memset_copy, b.memset_copy);
  EXPECT_EQ(a.other, b.other);
}

// A small member of the seed's family (fast on the emulator): every node of the graph is
// counted once, every kernel has a kind, each kind the step has is there, and the trainer's
// capture reports what a capture of the same ops holds. cuBLASLt's GEMM nodes are named through
// the driver, as on a GPU: the runtime refuses to name a library's kernel (tests/test_simt.cu).
TEST(GraphNodes, CountIsEveryNodeOfTheCapturedStep) {
  for (Precision precision : {Precision::FP32, Precision::BF16}) {
    SCOPED_TRACE(precision_name(precision));
    const CapturedStep s = capture_step(test::small_model(16, 0.1f), precision, 4, 16);
    print(precision_name(precision), s.counted);
    EXPECT_EQ(static_cast<size_t>(s.counted.total()), s.graph_nodes);
    EXPECT_EQ(s.counted.other, 0) << "a kernel missing from kernels/cuda/graph_nodes.cu's table";
    EXPECT_GT(s.counted.gemm, 0);
    EXPECT_GT(s.counted.attention, 0);
    EXPECT_GT(s.counted.elementwise, 0);
    EXPECT_GT(s.counted.reduction, 0);
    EXPECT_GT(s.counted.optimizer, 0);
    expect_same(s.from_trainer, s.counted);
  }
}

// Issue 24's acceptance: the seed workload's training step (post-norm, 2 layers, d_model 128,
// 4 heads, d_ff 2048, vocab 512, batch 16 x seq 64, dropout 0.1) is at most 50 graph nodes in
// fp32 and 52 in bf16 (the working weights' cast adds one). The budget is the seed's, so the
// step is the seed's full size; it runs one step on the emulator per precision (about 9 s
// each with the memory checks), the eager step 0 that train_step runs before it captures, and
// captures step 1 as the trainer does (TrainerCapture::CaptureOnly) without replaying it: the
// replay, a second full step, would check nothing here (the replayed bits are CudaTraining's
// and CudaGraphMemory's), and its counts are the capture's. That the trainer's own train_step
// reports what a capture of the same ops holds, through its replay, is checked above on the
// small model. Measured (ctest -R alone, 2 cores, back to back): 43 s with the replay, 18 s
// without.
TEST(GraphNodes, SeedStepFitsTheNodeBudget) {
  ModelConfig seed;
  seed.dropout = 0.1f;
  for (auto [precision, budget] : {std::pair{Precision::FP32, 50}, std::pair{Precision::BF16, 52}}) {
    SCOPED_TRACE(precision_name(precision));
    const CapturedStep s = capture_step(seed, precision, 16, 64, TrainerCapture::CaptureOnly);
    print((std::string("seed workload ") + precision_name(precision)).c_str(), s.counted);
    EXPECT_EQ(static_cast<size_t>(s.counted.total()), s.graph_nodes);
    EXPECT_EQ(s.counted.other, 0);
    EXPECT_LE(s.counted.total(), budget);
    expect_same(s.from_trainer, s.counted);  // the trainer's capture calls record the same graph
  }
}

#else

TEST(GraphNodes, NeedTheEmulator) { GTEST_SKIP() << "this build has no SIMT emulator (simt/)"; }

#endif

}  // namespace
}  // namespace tt
