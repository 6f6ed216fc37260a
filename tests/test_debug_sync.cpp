// --debug-sync (kernels/debug_sync_backend.h) on the emulated CUDA backend: a kernel that faults
// is reported at the host's next wait, blamed on whatever waits (as on a GPU); with debug-sync
// the wait is the op's own, and the error names the op, its shapes and dtypes. The faulting
// kernel is an embedding lookup that traps on a token id past the vocabulary
// (tests/faulting_kernel.cu), put in place of the backend's embedding_forward. Also: debug-sync
// passes results through unchanged, refuses graphs, leaves logic errors alone, and
// select_backend honours the flag and TINYTRAIN_DEBUG_SYNC.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/input_error.h"
#include "engine/backend_select.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/debug_sync_backend.h"
#include "tests/forwarding_backend.h"
#ifdef TINYTRAIN_HAVE_SIMT
#include "simt/emulated_cuda.h"
#include "tests/faulting_kernel.h"
#endif

namespace tt {
namespace {

#ifdef TINYTRAIN_HAVE_SIMT

// The emulated CUDA backend, except that embedding_forward (fp32, no positional table) runs the
// trapping lookup of tests/faulting_kernel.cu on the backend's stream.
class TrappingEmbeddingBackend final : public test::ForwardingBackend {
 public:
  TrappingEmbeddingBackend() : ForwardingBackend(emu::make_cuda_backend(CudaOptions{})) {}

  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor /*wpe*/) override {
    const int C = static_cast<int>(wte.shape[1]);
    test::launch_checked_embedding(native_stream(), out.f32(), tokens.i32(), wte.f32(),
                                   static_cast<int>(tokens.numel()), C, static_cast<int>(wte.shape[0]));
  }
};

// Each test's backend is destroyed before the emulated device is reset: a fault is sticky (as on
// a GPU), and the next test needs a working device. Buffers are never released one by one: the
// reset frees them, also after a fault, when a release would fail.
class DebugSync : public ::testing::Test {
 protected:
  void TearDown() override {
    backend_.reset();
    test::reset_emulated_device();
  }

  Tensor upload_f32(Shape shape, const std::vector<float>& values) {
    Tensor t{backend_->allocate(values.size() * sizeof(float)), DType::F32, shape};
    backend_->copy_to_device(t.data, values.data(), t.bytes());
    return t;
  }
  Tensor upload_i32(Shape shape, const std::vector<int32_t>& values) {
    Tensor t{backend_->allocate(values.size() * sizeof(int32_t)), DType::I32, shape};
    backend_->copy_to_device(t.data, values.data(), t.bytes());
    return t;
  }
  Tensor zeros_f32(Shape shape) {
    Tensor t{nullptr, DType::F32, shape};
    t.data = backend_->allocate(t.bytes());
    return t;
  }

  // The lookup's views: out (B=2,T=3,C=4), tokens (2,3), wte (V=5,C=4); token 7 is past V.
  struct LookupViews {
    Tensor out, tokens, wte;
  };
  LookupViews lookup_with_bad_token() {
    std::vector<float> wte(5 * 4);
    for (size_t i = 0; i < wte.size(); ++i) wte[i] = static_cast<float>(i);
    return {zeros_f32({2, 3, 4}), upload_i32({2, 3}, {0, 1, 2, 3, 7, 4}), upload_f32({5, 4}, wte)};
  }

  std::unique_ptr<Backend> backend_;
};

const Tensor kNoPositions{nullptr, DType::F32, Shape{}};

// What debug-sync exists for: without it, the faulting op returns, so does the op after it,
// and the fault surfaces at the next wait, which names only the wait.
TEST_F(DebugSync, WithoutItTheFaultSurfacesAtTheNextWait) {
  backend_ = std::make_unique<TrappingEmbeddingBackend>();
  const LookupViews v = lookup_with_bad_token();
  const Tensor sum = zeros_f32({4}), a = upload_f32({4}, {1, 2, 3, 4});
  EXPECT_NO_THROW(backend_->embedding_forward(v.out, v.tokens, v.wte, kNoPositions));
  EXPECT_NO_THROW(backend_->residual_forward(sum, a, a));  // the next op: blamed on a GPU
  try {
    backend_->synchronize();
    FAIL() << "the trapped launch was never reported";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaStreamSynchronize"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorLaunchFailure"), std::string::npos) << what;
    EXPECT_EQ(what.find("debug-sync"), std::string::npos) << what;
  }
}

// With debug-sync, the faulting op throws, naming itself, its views' dtypes and shapes, what
// the device said (the emulator names the trap and its line) and what to run next.
TEST_F(DebugSync, NamesTheFaultingOpItsShapesAndDtypes) {
  backend_ = std::make_unique<DebugSyncBackend>(std::make_unique<TrappingEmbeddingBackend>());
  const LookupViews v = lookup_with_bad_token();
  try {
    backend_->embedding_forward(v.out, v.tokens, v.wte, kNoPositions);
    FAIL() << "debug-sync did not report the trapped launch";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    const std::string head =
        "debug-sync: embedding_forward(out F32 [2, 3, 4], tokens I32 [2, 3], wte F32 [5, 4], wpe none) failed: "
        "CUDA error: cudaStreamSynchronize";
    EXPECT_EQ(what.rfind(head, 0), 0u) << what;
    EXPECT_NE(what.find("cudaErrorLaunchFailure"), std::string::npos) << what;
    EXPECT_NE(what.find("__trap()"), std::string::npos) << what;
    EXPECT_NE(what.find("faulting_kernel.cu"), std::string::npos) << what;
    const std::string tail = "; run it under compute-sanitizer --tool memcheck to find the faulting access";
    ASSERT_GE(what.size(), tail.size());
    EXPECT_EQ(what.substr(what.size() - tail.size()), tail) << what;
  }
}

// A healthy op through debug-sync computes what the CPU backend computes (fp32 a + b is one
// correctly rounded addition on both: the same bits), and debug-sync refuses graphs.
TEST_F(DebugSync, PassesResultsThroughAndRefusesGraphs) {
  backend_ = std::make_unique<DebugSyncBackend>(emu::make_cuda_backend(CudaOptions{}));
  EXPECT_EQ(backend_->name(), "cuda");
  EXPECT_FALSE(backend_->supports_graphs());
  const std::vector<float> a = {1.5f, -2.25f, 1e-7f, 3e8f, 0.1f}, b = {0.25f, 7.0f, 1.0f, -1.0f, 0.2f};
  const Tensor ta = upload_f32({5}, a), tb = upload_f32({5}, b), sum = zeros_f32({5});
  backend_->residual_forward(sum, ta, tb);
  std::vector<float> got(5);
  backend_->copy_to_host(got.data(), sum.data, sum.bytes());

  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  std::vector<float> expected = a;
  const Tensor ca{expected.data(), DType::F32, {5}};
  const Tensor cb{const_cast<float*>(b.data()), DType::F32, {5}};
  cpu->residual_forward(ca, ca, cb);
  EXPECT_EQ(got, expected);
}

// A view that does not fit is the op's own logic error, thrown before anything runs: it passes
// through debug-sync unchanged (it names the op already).
TEST_F(DebugSync, LeavesLogicErrorsAlone) {
  backend_ = std::make_unique<DebugSyncBackend>(emu::make_cuda_backend(CudaOptions{}));
  const Tensor k = zeros_f32({1, 4, 8}), v = zeros_f32({1, 4, 8}), qkv = zeros_f32({1, 24});
  try {
    backend_->kv_cache_append(k, v, qkv, /*pos=*/4);  // past the cache's 4 positions
    FAIL() << "a position past the cache was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("kv_cache_append: ", 0), 0u) << e.what();
  }
}

#endif  // TINYTRAIN_HAVE_SIMT

// Sets TINYTRAIN_DEBUG_SYNC for as long as it lives ("" unsets it).
class DebugSyncEnvironment {
 public:
  explicit DebugSyncEnvironment(const char* value) {
    if (*value) setenv("TINYTRAIN_DEBUG_SYNC", value, 1);
    else unsetenv("TINYTRAIN_DEBUG_SYNC");
  }
  ~DebugSyncEnvironment() { unsetenv("TINYTRAIN_DEBUG_SYNC"); }
};

// The CPU backend finishes each op before it returns: debug-sync is accepted, says it adds
// nothing, and leaves the backend as it is.
TEST(DebugSyncSelect, OnTheCpuBackendSaysItAddsNothing) {
  DebugSyncEnvironment unset("");
  GpuOptions gpu;
  gpu.debug_sync = true;
  std::ostringstream note;
  const std::unique_ptr<Backend> backend = select_backend(BackendChoice::Cpu, gpu, note);
  EXPECT_EQ(note.str(), "debug-sync: the cpu backend finishes every op before it returns; nothing to add\n");
  EXPECT_EQ(dynamic_cast<DebugSyncBackend*>(backend.get()), nullptr);
}

TEST(DebugSyncSelect, EnvironmentMustBeZeroOrOne) {
  DebugSyncEnvironment bad("yes");
  std::ostringstream note;
  try {
    select_backend(BackendChoice::Cpu, GpuOptions{}, note);
    FAIL() << "TINYTRAIN_DEBUG_SYNC=yes was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "TINYTRAIN_DEBUG_SYNC must be 1 (on) or 0 (off), got 'yes'");
  }
}

#ifdef TINYTRAIN_HAVE_SIMT
// The flag and TINYTRAIN_DEBUG_SYNC=1 both wrap the emulated CUDA backend, with one line saying
// that graphs are off; "0" and no flag leave it as it is, graphs and all.
TEST_F(DebugSync, SelectBackendHonoursTheFlagAndTheEnvironment) {
  const std::string line = "debug-sync: the cuda-emu backend waits after every op";
  for (const char* env : {"", "0", "1"}) {
    for (bool flag : {false, true}) {
      SCOPED_TRACE(std::string("TINYTRAIN_DEBUG_SYNC='") + env + "', --debug-sync " + (flag ? "on" : "off"));
      DebugSyncEnvironment set(env);
      GpuOptions gpu;
      gpu.debug_sync = flag;
      std::ostringstream note;
      backend_ = select_backend(BackendChoice::CudaEmu, gpu, note);
      const bool on = flag || std::string(env) == "1";
      EXPECT_EQ(dynamic_cast<DebugSyncBackend*>(backend_.get()) != nullptr, on);
      EXPECT_EQ(backend_->supports_graphs(), !on);
      EXPECT_EQ(note.str().find(line) != std::string::npos, on) << note.str();
      if (on) EXPECT_NE(note.str().find("CUDA graphs off"), std::string::npos) << note.str();
      backend_.reset();
    }
  }
}
#endif

}  // namespace
}  // namespace tt
