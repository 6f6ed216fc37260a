// Incremental decoding with a KV cache (engine/decoder.h; Backend::kv_cache_append and
// attention_decode), on the CPU backend and on the CUDA backend (a GPU, else the same kernels
// on the SIMT emulator, tests/cuda_test_util.h):
//  - the two ops against a naive double-precision reference computed here, in fp32, bf16 and
//    fp16 storage; cache positions past the new token hold NaN, so reading one shows;
//  - Decoder::step's logits at every position against Model::forward's on the whole sequence,
//    for the causal members of the model family (pre-/post-norm, relu/gelu, learned/no
//    positions); rewinding; the same bits run after run;
//  - the refusals: a bidirectional model, positions outside the context or skipping ahead,
//    token ids outside the vocabulary, a parameter vector of the wrong size;
//  - a benchmark, disabled by default (docs/toy-lm.md, "Sampling: the KV cache"): the CPU time
//    per generated token against recomputing the whole prefix for every token.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "engine/decoder.h"
#include "engine/init.h"
#include "engine/model.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/cuda_test_util.h"
#include "tests/memory_checks.h"
#include "tests/mixed_precision_util.h"
#include "tests/op_test_util.h"
#include "tests/test_models.h"

namespace tt {

void PrintTo(DType dtype, std::ostream* os) { *os << dtype_name(dtype); }  // gtest's parameter names

namespace {

using test::kEps32;

// ---- backend memory for the tests ----

// A buffer in backend memory, released with the object: floats stored as `dtype` (16-bit types
// rounded to nearest even), or int32 ids.
class BackendBuffer {
 public:
  BackendBuffer(Backend& backend, DType dtype, Shape shape, const std::vector<float>& values)
      : backend_(backend), view_{nullptr, dtype, shape} {
    EXPECT_EQ(static_cast<int64_t>(values.size()), shape.numel());
    view_.data = backend.allocate(view_.bytes());
    if (dtype == DType::F32) {
      backend.copy_to_device(view_.data, values.data(), view_.bytes());
    } else {
      const test::HalfBuffer stored = test::half_of(dtype, values);
      backend.copy_to_device(view_.data, stored.bits.data(), view_.bytes());
    }
  }
  // Zeros (Backend::allocate fills with zeros).
  BackendBuffer(Backend& backend, DType dtype, Shape shape) : backend_(backend), view_{nullptr, dtype, shape} {
    view_.data = backend.allocate(view_.bytes());
  }
  BackendBuffer(Backend& backend, Shape shape, const std::vector<int32_t>& ids)
      : backend_(backend), view_{nullptr, DType::I32, shape} {
    EXPECT_EQ(static_cast<int64_t>(ids.size()), shape.numel());
    view_.data = backend.allocate(view_.bytes());
    backend.copy_to_device(view_.data, ids.data(), view_.bytes());
  }
  ~BackendBuffer() { backend_.release(view_.data); }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  Tensor view() const { return view_; }
  std::vector<float> read() const { return read_floats(backend_, view_); }

  // A float view's values, widened to fp32.
  static std::vector<float> read_floats(Backend& backend, const Tensor& t) {
    if (t.dtype == DType::F32) {
      std::vector<float> v(t.numel());
      backend.copy_to_host(v.data(), t.data, t.bytes());
      return v;
    }
    test::HalfBuffer stored{t.dtype, std::vector<uint16_t>(t.numel())};
    backend.copy_to_host(stored.bits.data(), t.data, t.bytes());
    return stored.values();
  }

 private:
  Backend& backend_;
  Tensor view_;
};

// "cpu" or "cuda" (a GPU, else the emulator): the backend a parameterised test runs on.
std::unique_ptr<Backend> backend_named(const std::string& name, std::string& why_not) {
  if (name == "cpu") return make_cpu_backend();
  return test::cuda_backend_or_skip(why_not);
}
#define REQUIRE_BACKEND(backend, name)                        \
  std::string why_skipped;                                    \
  auto backend = backend_named(name, why_skipped);            \
  if (!backend) GTEST_SKIP() << why_skipped

const std::vector<std::string> kBackends = {"cpu", "cuda"};

// ============================== the ops ==============================

struct DecodeCase {
  int B, maxT, NH, HS, pos;
  int KVH = 0;  // key/value heads in the caches (grouped-query attention); 0: NH
  int kv_heads() const { return KVH > 0 ? KVH : NH; }
};

std::string decode_case_name(const DecodeCase& c) {
  return "B" + std::to_string(c.B) + "_maxT" + std::to_string(c.maxT) + "_NH" + std::to_string(c.NH) +
         (c.KVH ? "_KVH" + std::to_string(c.KVH) : std::string()) + "_HS" + std::to_string(c.HS) + "_pos" +
         std::to_string(c.pos);
}
void PrintTo(const DecodeCase& c, std::ostream* os) { *os << decode_case_name(c); }  // gtest's parameter names

// fp32: one token and a cache of one; a full cache; more keys than a CUDA block has threads
// (300); a head wider than a block (HS 200: channels d and d + 128 on one thread); odd head
// sizes; grouped key/value heads (2 for 4 query heads) and one for all (multi-query). bf16 and
// fp16: the full cache, the long one, the odd sizes, the wide head and the grouped heads.
using DecodeParam = std::tuple<std::string, DType, DecodeCase>;  // backend, storage, shape
std::vector<DecodeParam> decode_params() {
  const std::vector<DecodeCase> all = {{1, 1, 1, 8, 0},     {2, 16, 4, 8, 15}, {3, 67, 2, 32, 40},
                                       {2, 300, 3, 16, 299}, {1, 64, 1, 128, 63}, {2, 20, 5, 6, 7},
                                       {1, 160, 2, 200, 150}, {2, 16, 4, 8, 15, 2}, {3, 67, 6, 16, 40, 1}};
  const std::vector<DecodeCase> some = {{2, 16, 4, 8, 15},     {2, 300, 3, 16, 299}, {2, 20, 5, 6, 7},
                                        {1, 160, 2, 200, 150}, {2, 16, 4, 8, 15, 2}};
  std::vector<DecodeParam> params;
  for (const std::string& backend : kBackends) {
    for (const DecodeCase& c : all) params.emplace_back(backend, DType::F32, c);
    for (DType dtype : {DType::BF16, DType::F16})
      for (const DecodeCase& c : some) params.emplace_back(backend, dtype, c);
  }
  return params;
}

// out (B,C) for the new token, in double: per query head h softmax(q.k / sqrt(HS)) over
// positions 0..pos of the caches (B,maxT,KC), times v, k and v from key/value head
// h / (NH / KVH) (Hugging Face's repeat_kv).
std::vector<double> attention_decode_ref(const std::vector<float>& qkv, const std::vector<float>& k_cache,
                                         const std::vector<float>& v_cache, const DecodeCase& c) {
  const int C = c.NH * c.HS, KC = c.kv_heads() * c.HS, W = C + 2 * KC, group = c.NH / c.kv_heads();
  std::vector<double> out(static_cast<size_t>(c.B) * C);
  for (int b = 0; b < c.B; ++b) {
    for (int h = 0; h < c.NH; ++h) {
      auto cached = [&](const std::vector<float>& cache, int t, int d) {
        return static_cast<double>(cache[(static_cast<size_t>(b) * c.maxT + t) * KC + (h / group) * c.HS + d]);
      };
      std::vector<double> w(c.pos + 1);
      double max_score = -INFINITY;
      for (int t = 0; t <= c.pos; ++t) {
        double dot = 0.0;
        const float* q = &qkv[static_cast<size_t>(b) * W + h * c.HS];
        for (int d = 0; d < c.HS; ++d) dot += static_cast<double>(q[d]) * cached(k_cache, t, d);
        w[t] = dot / std::sqrt(static_cast<double>(c.HS));
        max_score = std::max(max_score, w[t]);
      }
      double sum = 0.0;
      for (double& x : w) sum += (x = std::exp(x - max_score));
      for (int d = 0; d < c.HS; ++d) {
        double acc = 0.0;
        for (int t = 0; t <= c.pos; ++t) acc += w[t] / sum * cached(v_cache, t, d);
        out[static_cast<size_t>(b) * C + h * c.HS + d] = acc;
      }
    }
  }
  return out;
}

// Equal values, NaN equal to NaN (the cache rows past the new token hold NaN).
void expect_same_values(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = (std::isnan(got[i]) && std::isnan(want[i])) || got[i] == want[i];
    if (!same && mismatches++ == 0) first = i;
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << got.size() << " differ, first at " << first;
}

class DecodeOps : public ::testing::TestWithParam<DecodeParam> {};

// kv_cache_append writes the new token's k and v at `pos` and nothing else; attention_decode
// then gives what the double reference gives from the same (stored) values.
TEST_P(DecodeOps, AppendThenDecodeMatchDoubleReference) {
  const std::string& backend_name = std::get<0>(GetParam());
  const DType dtype = std::get<1>(GetParam());
  const DecodeCase& c = std::get<2>(GetParam());
  REQUIRE_BACKEND(backend, backend_name);
  const int C = c.NH * c.HS, KC = c.kv_heads() * c.HS, W = C + 2 * KC;
  const Shape cache_shape{c.B, c.maxT, KC};
  // Inputs as the storage type holds them, so the reference sees exactly what the op sees.
  auto stored = [&](std::vector<float> v) { return dtype == DType::F32 ? v : test::rounded(dtype, std::move(v)); };
  // q and k in [-1.5,1.5]: scores q.k / sqrt(HS) of standard deviation 0.75, so weights that
  // differ by factors of ten within a row, not a flat softmax
  const std::vector<float> qkv = stored(test::random_floats(static_cast<size_t>(c.B) * W, 1, -1.5f, 1.5f));
  std::vector<float> k_before = stored(test::random_floats(cache_shape.numel(), 2, -1.5f, 1.5f));
  std::vector<float> v_before = stored(test::random_floats(cache_shape.numel(), 3));
  for (int b = 0; b < c.B; ++b)  // positions after the new token: never read
    for (int t = c.pos + 1; t < c.maxT; ++t)
      for (int d = 0; d < KC; ++d) {
        const size_t i = (static_cast<size_t>(b) * c.maxT + t) * KC + d;
        k_before[i] = v_before[i] = std::nanf("");
      }
  // What the caches must hold after the append: row (b,pos) replaced by the k and v of qkv row b.
  std::vector<float> k_after = k_before, v_after = v_before;
  for (int b = 0; b < c.B; ++b)
    for (int d = 0; d < KC; ++d) {
      const size_t row = (static_cast<size_t>(b) * c.maxT + c.pos) * KC + d, x = static_cast<size_t>(b) * W + d;
      k_after[row] = qkv[x + C];
      v_after[row] = qkv[x + C + KC];
    }

  BackendBuffer qkv_d(*backend, dtype, {c.B, W}, qkv);
  BackendBuffer k_d(*backend, dtype, cache_shape, k_before), v_d(*backend, dtype, cache_shape, v_before);
  BackendBuffer out_d(*backend, dtype, {c.B, C}, test::nan_filled(static_cast<size_t>(c.B) * C));
  backend->kv_cache_append(k_d.view(), v_d.view(), qkv_d.view(), c.pos);
  backend->attention_decode(out_d.view(), qkv_d.view(), k_d.view(), v_d.view(), c.pos, c.NH);

  const std::string name = backend_name + " " + decode_case_name(c) + " " + dtype_name(dtype);
  expect_same_values(name + " k_cache", k_d.read(), k_after);
  expect_same_values(name + " v_cache", v_d.read(), v_after);
  // Scores are HS-term dot products, the softmax sums pos+1 exps, each output sums pos+1
  // weighted values: K = HS + 2(pos+1) + 1 roundings at most, as the full attention's CPU test
  // (test_cpu_ops). 16-bit storage rounds the output once more: at most u of the stored value,
  // so u (1 + u) of the reference's scale. That part is a bound, not an estimate: round to
  // nearest reaches it at ties, and the measured errors come within a factor 2 of it.
  const double u = dtype == DType::BF16 ? test::kBf16.u : dtype == DType::F16 ? test::kFp16.u : 0.0;
  const double tol = kEps32 * (c.HS + 2 * (c.pos + 1) + 1) + u * (1.0 + u);
  test::expect_rel_close(name + " out", out_d.read(), attention_decode_ref(qkv, k_after, v_after, c), tol);
}

INSTANTIATE_TEST_SUITE_P(AllCases, DecodeOps, ::testing::ValuesIn(decode_params()), [](const auto& info) {
  return std::get<0>(info.param) + "_" + decode_case_name(std::get<2>(info.param)) + "_" +
         dtype_name(std::get<1>(info.param));
});

class DecodeOpsOn : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeOpsOn, RefuseAPositionOutsideTheCache) {
  REQUIRE_BACKEND(backend, GetParam());
  const int B = 2, maxT = 4, NH = 2, C = 8;
  BackendBuffer qkv(*backend, DType::F32, {B, 3 * C}), out(*backend, DType::F32, {B, C});
  BackendBuffer k(*backend, DType::F32, {B, maxT, C}), v(*backend, DType::F32, {B, maxT, C});
  for (int pos : {-1, maxT}) {
    EXPECT_THROW(backend->kv_cache_append(k.view(), v.view(), qkv.view(), pos), std::invalid_argument);
    EXPECT_THROW(backend->attention_decode(out.view(), qkv.view(), k.view(), v.view(), pos, NH),
                 std::invalid_argument);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DecodeOpsOn, ::testing::ValuesIn(kBackends),
                         [](const auto& info) { return info.param; });

// More than 65536 blocks x 256 threads of elements (B*C), so the CUDA append's grid-stride
// loop takes a second lap (the CPU backend has no grid to lap).
TEST(DecodeOpsCuda, AppendCoversMoreThanOneGridStride) {
  REQUIRE_BACKEND(backend, "cuda");
  const int B = 65536 * 2 + 1, C = 128;
  // Every element of qkv a distinct value, the bits of its index + 1 read as a float (finite:
  // tiny positive numbers), so that a misplaced copy shows; cheaper than 50M random draws.
  auto element = [](size_t i) {
    const uint32_t bits = static_cast<uint32_t>(i) + 1;
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
  };
  auto all_elements = [&] {  // a temporary: 200 MB that need not outlive the upload
    std::vector<float> qkv(static_cast<size_t>(B) * 3 * C);
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = element(i);
    return qkv;
  };
  BackendBuffer qkv_d(*backend, DType::F32, {B, 3 * C}, all_elements());
  // zero-filled (Backend::allocate): an element the append skips stays 0, which no element of qkv is
  BackendBuffer k_d(*backend, DType::F32, {B, 1, C}), v_d(*backend, DType::F32, {B, 1, C});
  backend->kv_cache_append(k_d.view(), v_d.view(), qkv_d.view(), 0);
  const std::vector<float> k = k_d.read(), v = v_d.read();
  size_t wrong = 0;
  for (size_t b = 0; b < static_cast<size_t>(B); ++b)
    for (size_t d = 0; d < static_cast<size_t>(C); ++d) {
      const size_t x = b * 3 * C + d;  // q of sequence b, channel d; k at + C, v at + 2C
      wrong += k[b * C + d] != element(x + C);
      wrong += v[b * C + d] != element(x + 2 * C);
    }
  EXPECT_EQ(wrong, 0u) << "cache elements that are not the k or v of their sequence";
}

// ============================== the decoder ==============================

struct DecoderCase {
  std::string name;
  ModelConfig config;
  int T;  // positions decoded
};
void PrintTo(const DecoderCase& c, std::ostream* os) { *os << c.name; }

// The causal members of tests/memory_checks.h (pre-norm gelu learned; post-norm gelu learned
// with odd sizes and 3 layers), and the seed's kind made causal: post-norm relu without
// positions, and its pre-norm twin. Dropout 0.1 in the config: the decoder has none, and the
// full forward below runs with dropout 0.
std::vector<DecoderCase> decoder_cases() {
  std::vector<DecoderCase> cases;
  for (const test::MemoryCase& mc : test::memory_cases())
    if (mc.config.causal) cases.push_back({mc.name, mc.config, mc.T});
  ModelConfig seed_kind = test::small_model(/*max_seq_len=*/16, /*dropout=*/0.1f);
  seed_kind.causal = true;
  cases.push_back({"post_norm_relu_causal_nopos", seed_kind, 16});
  seed_kind.norm_first = true;
  cases.push_back({"pre_norm_relu_causal_nopos", seed_kind, 11});
  return cases;
}

// Parameters from PyTorch's initial distributions, each then moved by up to +-0.05: init_params
// gives every layer the same weights, zero attention biases and LayerNorms of ones and zeros,
// so a decoder that used one layer's weights for all, or skipped a bias or a norm's affine
// part, would still pass without the perturbation.
std::vector<float> random_params(const ParamLayout& layout, uint64_t seed) {
  std::vector<float> params = init_params(layout, seed);
  const std::vector<float> noise = test::random_floats(params.size(), static_cast<uint32_t>(seed) + 1, -0.05f, 0.05f);
  for (size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
  return params;
}

// The full forward's logits (B,T,V) for tokens (B,T): Model::forward, dropout 0.
std::vector<float> full_forward_logits(Backend& backend, ModelConfig config, int B, int T,
                                       const std::vector<float>& params, const std::vector<int32_t>& tokens) {
  config.dropout = 0.0f;
  Model model(backend, config, B, T);
  backend.copy_to_device(model.params().data, params.data(), model.params().bytes());
  model.refresh_working_weights();
  BackendBuffer tokens_d(backend, {B, T}, tokens);
  BackendBuffer step_d(backend, {1}, std::vector<int32_t>{0});
  model.forward(tokens_d.view(), DropoutContext{1, static_cast<const uint32_t*>(step_d.view().data)});
  return BackendBuffer::read_floats(backend, model.logits());
}

// Decoder::step at positions first..T-1 of tokens (B,T): the logits (B,V) of each position.
std::vector<std::vector<float>> decode_logits(Backend& backend, Decoder& decoder, int B, int T,
                                              const std::vector<int32_t>& tokens, int first = 0) {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> column(B);
  for (int t = first; t < T; ++t) {
    for (int b = 0; b < B; ++b) column[b] = tokens[static_cast<size_t>(b) * T + t];
    logits.push_back(BackendBuffer::read_floats(backend, decoder.step(column.data(), t)));
  }
  return logits;
}

class DecoderOn : public ::testing::TestWithParam<std::tuple<std::string, DecoderCase>> {};

// Decoding token by token gives, at every position t, the logits the full forward gives at
// row t, for each of the B sequences.
//
// Tolerance: 1e-5 of the logits' scale (max |logit| of the whole forward), about 80 fp32 eps.
// Both paths run the same ops on the same inputs; they differ only in summation order: the
// GEMMs run on B rows instead of B*T (OpenBLAS and cuBLASLt block a short matrix
// differently), and the CUDA softmax sums a row in a block reduction instead of a warp one.
// Each such sum of K terms (K up to d_ff = 64 here) moves by a few eps of its terms' scale,
// and the LayerNorms and the head carry that to the logits with gains of order one; measured:
// a few 1e-7 (printed below), so 1e-5 leaves a decade and more. A wrong position, a missing
// cache row, a skipped bias or norm shows as an error of order 1e-2 or more.
TEST_P(DecoderOn, StepLogitsEqualTheFullForwardAtEveryPosition) {
  const auto& [backend_name, dc] = GetParam();
  REQUIRE_BACKEND(backend, backend_name);
  const int B = 3, T = dc.T, V = dc.config.vocab_size;
  const ParamLayout layout(dc.config);
  const std::vector<float> params = random_params(layout, 11);
  const std::vector<int32_t> tokens = test::random_ints(static_cast<size_t>(B) * T, 12, 0, V);
  const std::vector<float> full = full_forward_logits(*backend, dc.config, B, T, params, tokens);
  double scale = 0.0;
  for (float x : full) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  ASSERT_GT(scale, 0.1) << "the logits are nearly zero: the comparison would say little";

  Decoder decoder(*backend, dc.config, B);
  decoder.load_params(params);
  const std::vector<std::vector<float>> steps = decode_logits(*backend, decoder, B, T, tokens);
  ASSERT_EQ(static_cast<int>(steps.size()), T);
  EXPECT_EQ(decoder.length(), T);
  double worst = 0.0;
  int worst_t = 0;
  for (int t = 0; t < T; ++t) {
    double err = 0.0;
    for (int b = 0; b < B; ++b)
      for (int v = 0; v < V; ++v) {
        const double d = std::fabs(static_cast<double>(steps[t][static_cast<size_t>(b) * V + v]) -
                                   full[(static_cast<size_t>(b) * T + t) * V + v]);
        err = std::max(err, std::isnan(d) ? INFINITY : d);
      }
    if (err > worst) worst = err, worst_t = t;
  }
  const double rel = worst / scale;
  std::printf("[ rel err  ] %s %s: decode vs full forward %.3e at position %d (max |logit| %.3f, tol 1e-5)\n",
              backend_name.c_str(), dc.name.c_str(), rel, worst_t, scale);
  EXPECT_LE(rel, 1e-5) << "position " << worst_t;
}

// reset() forgets the sequences: decoding again gives the same bits. A step at an earlier
// position rewinds: from there on the logits are those of a fresh decoder given the changed
// sequence, bit for bit (the same ops on the same values).
TEST_P(DecoderOn, ResetAndRewindGiveTheSameBitsAsAFreshDecoder) {
  const auto& [backend_name, dc] = GetParam();
  REQUIRE_BACKEND(backend, backend_name);
  const int B = 2, T = dc.T, V = dc.config.vocab_size;
  const ParamLayout layout(dc.config);
  const std::vector<float> params = random_params(layout, 21);
  std::vector<int32_t> tokens = test::random_ints(static_cast<size_t>(B) * T, 22, 0, V);
  Decoder decoder(*backend, dc.config, B);
  decoder.load_params(params);
  const auto first = decode_logits(*backend, decoder, B, T, tokens);
  decoder.reset();
  EXPECT_EQ(decoder.length(), 0);
  const auto again = decode_logits(*backend, decoder, B, T, tokens);
  for (int t = 0; t < T; ++t) test::expect_bitwise_equal("after reset, position " + std::to_string(t), again[t], first[t]);

  const int from = T / 2;  // change both sequences' token there, rewind, decode the rest
  for (int b = 0; b < B; ++b) tokens[static_cast<size_t>(b) * T + from] = (tokens[static_cast<size_t>(b) * T + from] + 1) % V;
  const auto rewound = decode_logits(*backend, decoder, B, T, tokens, from);
  Decoder fresh(*backend, dc.config, B);
  fresh.load_params(params);
  const auto want = decode_logits(*backend, fresh, B, T, tokens);
  for (int t = from; t < T; ++t)
    test::expect_bitwise_equal("rewound to " + std::to_string(from) + ", position " + std::to_string(t),
                               rewound[t - from], want[t]);
  EXPECT_NE(rewound[0], first[from]) << "the changed token did not change the logits";
}

INSTANTIATE_TEST_SUITE_P(CausalModels, DecoderOn,
                         ::testing::Combine(::testing::ValuesIn(kBackends), ::testing::ValuesIn(decoder_cases())),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

// ---- the refusals: one line each (the CLI prints what() and exits) ----

// what() of the InputError `fn` throws; fails the test when it throws nothing or something else.
template <typename Fn>
std::string input_error_of(Fn fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}

TEST(DecoderRefuses, ABidirectionalModelInOneLine) {
  auto cpu = make_cpu_backend();
  const ModelConfig both_ways = test::small_model(16, 0.0f);  // the seed's kind: causal false
  EXPECT_EQ(input_error_of([&] { Decoder(*cpu, both_ways, 1); }),
            "sampling needs a causal model (--causal true): this one attends both ways");
}

TEST(DecoderRefuses, PositionsOutsideTheContextOrSkippingAhead) {
  auto cpu = make_cpu_backend();
  ModelConfig c = test::small_model(/*max_seq_len=*/4, 0.0f);
  c.causal = true;
  Decoder decoder(*cpu, c, 2);
  decoder.load_params(init_params(decoder.layout(), 1));
  const int32_t tokens[2] = {1, 2};
  auto expect_one_line = [](const std::string& message, const std::string& contains) {
    EXPECT_NE(message.find(contains), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    std::printf("[ message  ] %s\n", message.c_str());
  };
  expect_one_line(input_error_of([&] { decoder.step(tokens, -1); }), "outside the model's context");
  expect_one_line(input_error_of([&] { decoder.step(tokens, 1); }), "skips ahead");  // nothing cached yet
  for (int t = 0; t < 4; ++t) decoder.step(tokens, t);
  expect_one_line(input_error_of([&] { decoder.step(tokens, 4); }),
                  "position 4 is outside the model's context: positions run from 0 to 3 (max_seq_len 4)");
  EXPECT_EQ(decoder.length(), 4) << "a refused step changed the cache";
  decoder.step(tokens, 3);  // rewinding to the last position is fine
  const int32_t bad[2] = {1, 32};  // vocabulary 32
  expect_one_line(input_error_of([&] { decoder.step(bad, 0); }), "token id 32 of sequence 1 is outside the vocabulary");
  EXPECT_THROW(decoder.load_params(std::vector<float>(3)), std::invalid_argument);
}

// ============================== benchmark ==============================

// The CPU time per generated token of the seed-sized causal model (vocab 512, d_model 128, 4
// heads, 2 layers, d_ff 2048, post-norm, relu), generating one sequence of max_seq_len tokens:
// with the KV cache (one Decoder::step per token) against recomputing the whole prefix for
// every token (a full forward over the t+1 tokens so far; the Model for each length is built
// outside the timing). Best of three runs each. Run it on one thread, so that the process's
// CPU time is the work done and other jobs on the machine do not enter the numbers; it prints
// the wall-clock time too. Disabled: it measures, it checks nothing. Run:
//   OMP_NUM_THREADS=1 build/tests/test_kv_cache --gtest_also_run_disabled_tests --gtest_filter='*Benchmark*'
TEST(KvCacheBenchmark, DISABLED_CpuTimePerGeneratedToken) {
  auto cpu = make_cpu_backend();
  struct Time {
    double cpu_ms, wall_ms;
  };
  // Runs fn three times; the best CPU time and the best wall-clock time.
  auto best_of_three = [](const std::function<void()>& fn) {
    Time best{INFINITY, INFINITY};
    for (int run = 0; run < 3; ++run) {
      const std::clock_t cpu_start = std::clock();
      const auto wall_start = std::chrono::steady_clock::now();
      fn();
      const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start).count();
      best.cpu_ms = std::min(best.cpu_ms, 1e3 * static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC);
      best.wall_ms = std::min(best.wall_ms, wall);
    }
    return best;
  };
  std::printf("[ bench    ] %d OpenMP thread(s)\n", omp_get_max_threads());
  for (int maxT : {64, 256}) {
    ModelConfig c;  // the seed's sizes
    c.causal = true;
    c.max_seq_len = maxT;
    c.dropout = 0.0f;
    const ParamLayout layout(c);
    const std::vector<float> params = init_params(layout, 1);
    const std::vector<int32_t> tokens = test::random_ints(maxT, 2, 0, c.vocab_size);

    Decoder decoder(*cpu, c, 1);
    decoder.load_params(params);
    const Time cached = best_of_three([&] {
      decoder.reset();
      for (int t = 0; t < maxT; ++t) decoder.step(&tokens[t], t);
    });

    Time recompute{0.0, 0.0};
    BackendBuffer step_d(*cpu, {1}, std::vector<int32_t>{0});
    for (int t = 0; t < maxT; ++t) {
      Model model(*cpu, c, 1, t + 1);
      cpu->copy_to_device(model.params().data, params.data(), model.params().bytes());
      BackendBuffer prefix(*cpu, {1, t + 1}, std::vector<int32_t>(tokens.begin(), tokens.begin() + t + 1));
      const Time one = best_of_three([&] {
        model.forward(prefix.view(), DropoutContext{1, static_cast<const uint32_t*>(step_d.view().data)});
      });
      recompute.cpu_ms += one.cpu_ms;
      recompute.wall_ms += one.wall_ms;
    }
    std::printf("[ bench    ] max_seq_len %d (cache %.2f MB): KV cache %.3f ms/token CPU (%.3f wall); "
                "recomputing the prefix %.3f ms/token CPU (%.3f wall): %.1fx\n",
                maxT, 2.0 * c.n_layer * maxT * c.d_model * sizeof(float) / 1e6, cached.cpu_ms / maxT,
                cached.wall_ms / maxT, recompute.cpu_ms / maxT, recompute.wall_ms / maxT,
                recompute.cpu_ms / cached.cpu_ms);
  }
}

}  // namespace
}  // namespace tt
