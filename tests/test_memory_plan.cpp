// The memory plan against what training really allocates: the same arenas, byte for byte, for
// several configs, precisions, recompute modes and accumulation; the activation saving of
// --recompute layer derived in docs/memory.md; and out-of-memory handling before the first step.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "engine/init.h"
#include "engine/memory_plan.h"
#include "cli/train_loop.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/cli_test_util.h"
#include "tests/test_models.h"

namespace tt {
namespace {

// The CPU backend, recording every allocation; optionally failing once `limit` bytes are taken.
class CountingBackend : public CpuBackend {
 public:
  explicit CountingBackend(size_t limit = SIZE_MAX) : limit_(limit) {}
  void* allocate(size_t bytes) override {
    if (total_ + bytes > limit_) throw std::runtime_error("out of host memory (test limit)");
    sizes.push_back(bytes);
    total_ += bytes;
    return CpuBackend::allocate(bytes);
  }
  std::vector<size_t> sizes;

 private:
  size_t limit_;
  size_t total_ = 0;
};

struct Case {
  const char* name;
  ModelConfig model;
};

std::vector<Case> cases() {
  ModelConfig seed;
  ModelConfig prenorm = seed;
  prenorm.norm_first = true;
  prenorm.activation = Activation::Gelu;
  prenorm.causal = true;
  prenorm.pos_embedding = PosEmbedding::Learned;
  prenorm.n_layer = 3;
  ModelConfig odd;
  odd.vocab_size = 37;
  odd.d_model = 30;
  odd.n_head = 5;
  odd.n_layer = 3;
  odd.d_ff = 52;
  odd.max_seq_len = 16;
  return {{"seed", seed}, {"prenorm", prenorm}, {"odd", odd}};
}

// Planned bytes per arena, in the order the trainer allocates its arenas.
std::vector<size_t> planned_arenas(const MemoryPlan& plan) {
  std::vector<size_t> sizes;
  for (const char* group : {"weights", "activations", "optimizer", "loss scaler", "batch"})
    sizes.push_back(plan.group_bytes(group));
  return sizes;
}

TEST(MemoryPlan, TrainingAllocatesExactlyWhatThePlanSays) {
  for (const Case& c : cases()) {
    for (Precision precision : {Precision::FP32, Precision::BF16, Precision::FP16}) {
      for (Recompute recompute : {Recompute::None, Recompute::Ffn, Recompute::Layer}) {
        for (int grad_accum : {1, 2}) {
          TrainOptions o;
          o.model = c.model;
          o.run.batch = 4;
          o.run.seq = c.model.max_seq_len < 16 ? c.model.max_seq_len : 16;
          o.precision = precision;
          o.recompute = recompute;
          o.grad_accum = grad_accum;
          const MemoryPlan plan = plan_training(o, "cpu");
          CountingBackend backend;
          Trainer trainer(backend, o);
          EXPECT_EQ(backend.sizes, planned_arenas(plan))
              << c.name << " " << precision_name(precision) << " recompute " << recompute_name(recompute) << " accum "
              << grad_accum;
          EXPECT_EQ(trainer.bytes(), plan.device_bytes());
        }
      }
    }
  }
}

// The same for LoRA (the adapters' masters, gradients and state; the base as working weights)
// and QLoRA (the base's linears as NF4 images and their decoding tile), with every recompute
// mode and accumulation, on a Llama block (its q, k, v windows) and the seed's GPT-style one.
TEST(MemoryPlan, LoraAndQloraAllocateExactlyWhatThePlanSays) {
  for (const ModelConfig& model : {test::small_llama(16, 0.0f), ModelConfig{}}) {
    for (bool nf4 : {false, true}) {
      for (Precision precision : {Precision::FP32, Precision::BF16}) {
        for (Recompute recompute : {Recompute::None, Recompute::Layer}) {
          for (int grad_accum : {1, 2}) {
            TrainOptions o;
            o.model = model;
            o.run.batch = 4;
            o.run.seq = 16;
            o.precision = precision;
            o.recompute = recompute;
            o.grad_accum = grad_accum;
            o.lora.rank = 4;
            o.lora.dropout = 0.1f;
            o.lora.targets = lora_module_names(model);
            o.lora.nf4_base = nf4;
            const MemoryPlan plan = plan_training(o, "cpu");
            CountingBackend backend;
            Trainer trainer(backend, o);
            EXPECT_EQ(backend.sizes, planned_arenas(plan))
                << (model.llama_block() ? "llama" : "seed") << (nf4 ? " nf4 " : " ") << precision_name(precision)
                << " recompute " << recompute_name(recompute) << " accum " << grad_accum;
            EXPECT_EQ(trainer.bytes(), plan.device_bytes());
          }
        }
      }
    }
  }
}

// docs/memory.md derives the seed config's activation bytes: none 56,705,024; ffn 39,927,808
// (the two (N, d_ff) buffers shared by both layers); layer 36,225,024 (one layer's set shared,
// only each layer's output kept): layer / none = 0.639.
TEST(MemoryPlan, RecomputeSavesWhatTheDocsDerive) {
  TrainOptions o;  // the seed workload
  auto activations = [&](Recompute r) {
    o.recompute = r;
    return plan_training(o, "cpu").group_bytes("activations");
  };
  EXPECT_EQ(activations(Recompute::None), 56705024u);
  EXPECT_EQ(activations(Recompute::Ffn), 39927808u);
  EXPECT_EQ(activations(Recompute::Layer), 36225024u);
}

// Flash attention's contract (kernels/backend.h): no (B,NH,T,T) buffer. GPT-2 small (d_model
// 768, 12 heads, 12 pre-norm GELU layers, vocab 50304) at seq 1024, batch 8, bf16: the (T,T)
// weights were 192 MiB a layer and the activations 5.61 GiB (docs/memory.md); now the largest
// buffer is the logits and the activations stay under 3.5 GiB (3,410,427,904 bytes).
TEST(MemoryPlan, Gpt2SmallAtSeq1024KeepsNoTTimesTBuffer) {
  TrainOptions o;
  o.model.vocab_size = 50304;
  o.model.d_model = 768;
  o.model.n_head = 12;
  o.model.n_layer = 12;
  o.model.d_ff = 3072;
  o.model.activation = Activation::Gelu;
  o.model.norm_first = true;
  o.model.causal = true;
  o.model.pos_embedding = PosEmbedding::Learned;
  o.model.max_seq_len = 1024;
  o.run.batch = 8;
  o.run.seq = 1024;
  o.precision = Precision::BF16;
  const MemoryPlan plan = plan_training(o, "cuda");
  EXPECT_EQ(plan.group_bytes("activations"), 3410427904u);
  EXPECT_LE(plan.group_bytes("activations"), size_t{7} << 29);  // 3.5 GiB
  const size_t weights_tt = size_t{8} * 12 * 1024 * 1024 * 2;  // one (B,NH,T,T) bf16 tensor
  for (const PlanItem& item : plan.items) {
    if (item.name.rfind("layers.", 0) == 0)  // every per-layer buffer is far smaller (h_pre: 48 MiB)
      EXPECT_LT(item.bytes, weights_tt) << item.name << " is as large as the (T,T) weights";
    EXPECT_EQ(item.name.find("probs"), std::string::npos) << item.name;
  }
}

TEST(MemoryPlan, TheLargestBatchThatFitsReallyFits) {
  TrainOptions o;
  const size_t available = 64u << 20;
  for (Recompute r : {Recompute::None, Recompute::Ffn, Recompute::Layer}) {
    const int b = largest_micro_batch(o, r, available, "cpu");
    ASSERT_GT(b, 0);
    TrainOptions t = o;
    t.recompute = r;
    t.run.batch = b;
    EXPECT_LE(plan_training(t, "cpu").device_bytes(), available);
    t.run.batch = b + 1;
    EXPECT_GT(plan_training(t, "cpu").device_bytes(), available) << recompute_name(r);
  }
}

TEST(MemoryPlan, OutOfMemoryMessageNamesTheBiggestItemsAndWhatFits) {
  TrainOptions o;  // seed: 74.2 MiB
  const std::string msg = out_of_memory_message(o, "cpu", 60u << 20, "");
  EXPECT_NE(msg.find("needs 74.2 MiB but 60.0 MiB are free"), std::string::npos) << msg;
  EXPECT_NE(msg.find("h_pre"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--recompute layer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--grad-accum 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--batch 11"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  // each remedy it names does fit, and --batch 11 is the largest batch that does
  auto needs = [&](int batch, int grad_accum, Recompute recompute) {
    TrainOptions t = o;
    t.run.batch = batch;
    t.grad_accum = grad_accum;
    t.recompute = recompute;
    return plan_training(t, "cpu").device_bytes();
  };
  EXPECT_LE(needs(16, 2, Recompute::None), 60u << 20);
  EXPECT_LE(needs(16, 1, Recompute::Layer), 60u << 20);
  EXPECT_LE(needs(11, 1, Recompute::None), 60u << 20);
  EXPECT_GT(needs(12, 1, Recompute::None), 60u << 20);
}

// When not even one sequence fits as configured, a smaller batch with --recompute layer may;
// below that, the message says nothing fits.
TEST(MemoryPlan, OutOfMemoryMessageFallsBackToOneSequenceWithLayerRecompute) {
  TrainOptions o;  // the seed workload, recompute none
  TrainOptions one = o;
  one.run.batch = 1;
  one.recompute = Recompute::Layer;
  const size_t just_fits = plan_training(one, "cpu").device_bytes();
  one.recompute = Recompute::None;
  ASSERT_GT(plan_training(one, "cpu").device_bytes(), just_fits);
  const std::string msg = out_of_memory_message(o, "cpu", just_fits, "");
  EXPECT_NE(msg.find("would fit: --batch 1 --recompute layer"), std::string::npos) << msg;
  const std::string none = out_of_memory_message(o, "cpu", just_fits - 1, "");
  EXPECT_NE(none.find("nothing fits"), std::string::npos) << none;
}

TEST(MemoryPlan, AFailedAllocationStopsBeforeTheFirstStepWithThePlan) {
  TrainOptions o;
  o.run.steps = 3;
  CountingBackend backend(/*limit=*/20u << 20);
  std::ostringstream log;
  try {
    run_training(backend, o, log);
    FAIL() << "training ran past a failed allocation";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("would fit"), std::string::npos) << msg;
  }
  EXPECT_EQ(log.str().find("step"), std::string::npos) << "no step ran: " << log.str();
}

TEST(MemoryPlan, ParsesMemorySizes) {
  EXPECT_EQ(parse_bytes("512MiB"), 512u << 20);
  EXPECT_EQ(parse_bytes("80GiB"), size_t{80} << 30);
  EXPECT_EQ(parse_bytes("1024"), 1024u);
  EXPECT_EQ(parse_bytes("64k"), 64u << 10);
  EXPECT_THROW(parse_bytes("lots"), InputError);
  EXPECT_THROW(parse_bytes("-5G"), InputError);
  EXPECT_THROW(parse_bytes("5 parsecs"), InputError);
}

}  // namespace
}  // namespace tt

namespace tt {
namespace {

// Through the CLI: a plan that cannot fit stops with one line and a non-zero exit, before the
// backend allocates anything (the check runs on the plan alone).
TEST(MemoryPlanCli, TrainRefusesAPlanThatDoesNotFit) {
  test::ScratchDir dir;
  const test::CliResult r = test::run_command(
      {TINYTRAIN_BIN, "train", "--backend", "cpu", "--threads", "1", "--device-memory", "70MiB"}, dir.path());
  SCOPED_TRACE(r.describe());
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "") << "no step ran";
  ASSERT_EQ(r.err_lines().size(), 1u);
  EXPECT_NE(r.err.find("error: out of memory: the plan needs 74.2 MiB but 70.0 MiB are free"), std::string::npos);
  EXPECT_NE(r.err.find("--recompute ffn (58.2 MiB)"), std::string::npos);
}

// `plan` answers the question: with --device-memory (or the free memory) it says whether the run
// fits, and when it does not, which computed remedies would, with exit status 1.
TEST(MemoryPlanCli, PlanSaysWhetherTheRunFitsAndWhatWouldMakeItFit) {
  test::ScratchDir dir;
  const test::CliResult tight = test::run_command(
      {TINYTRAIN_BIN, "plan", "--backend", "cpu", "--device-memory", "70MiB"}, dir.path());
  SCOPED_TRACE(tight.describe());
  ASSERT_TRUE(tight.exited);
  EXPECT_EQ(tight.exit_code, 1);
  EXPECT_NE(tight.out.find("does not fit: out of memory: the plan needs 74.2 MiB but 70.0 MiB are free"),
            std::string::npos);
  EXPECT_NE(tight.out.find("would fit: --recompute ffn (58.2 MiB)"), std::string::npos);
  const test::CliResult roomy = test::run_command(
      {TINYTRAIN_BIN, "plan", "--backend", "cpu", "--device-memory", "1GiB"}, dir.path());
  SCOPED_TRACE(roomy.describe());
  EXPECT_EQ(roomy.exit_code, 0);
  EXPECT_NE(roomy.out.find("fits: the plan needs 74.2 MiB of the 1024.0 MiB given (949.8 MiB to spare)"),
            std::string::npos);
}

}  // namespace
}  // namespace tt
