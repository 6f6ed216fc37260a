// Initialisation: each parameter follows PyTorch's default distribution for its module
// (bounds, mean, variance within statistical limits), layers start identical as after
// PyTorch's deep copy, and the seed decides everything.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/init.h"

namespace tt {
namespace {

struct Moments {
  double mean = 0, var = 0, min = INFINITY, max = -INFINITY;
};

Moments moments(const float* x, int64_t n) {
  Moments m;
  for (int64_t i = 0; i < n; ++i) {
    m.mean += x[i];
    m.min = std::fmin(m.min, x[i]);
    m.max = std::fmax(m.max, x[i]);
  }
  m.mean /= n;
  for (int64_t i = 0; i < n; ++i) m.var += (x[i] - m.mean) * (x[i] - m.mean);
  m.var /= n;
  return m;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Checks U(-bound, bound): inside the bounds, and mean and variance within 5 sigma of the
// sampling distribution (mean: sigma = bound / sqrt(3n); variance b^2/3: sigma of the sample
// variance = sqrt(Var(x^2) / n) with Var(x^2) = b^4/5 - b^4/9 = 4 b^4 / 45).
void expect_uniform(const std::string& name, const float* x, int64_t n, double bound) {
  const Moments m = moments(x, n);
  EXPECT_GE(m.min, -bound) << name;
  EXPECT_LE(m.max, bound) << name;
  EXPECT_NEAR(m.mean, 0.0, 5 * bound / std::sqrt(3.0 * n)) << name;
  EXPECT_NEAR(m.var, bound * bound / 3.0, 5 * std::sqrt(4.0 * std::pow(bound, 4) / 45.0 / n)) << name;
  if (n >= 1000) EXPECT_GT(m.max, 0.99 * bound) << name << ": the whole range is used";
}

// Checks N(0, 1): mean within 5 / sqrt(n), variance within 5 sqrt(2 / n).
void expect_standard_normal(const std::string& name, const float* x, int64_t n) {
  const Moments m = moments(x, n);
  EXPECT_NEAR(m.mean, 0.0, 5.0 / std::sqrt(static_cast<double>(n))) << name;
  EXPECT_NEAR(m.var, 1.0, 5.0 * std::sqrt(2.0 / n)) << name;
  EXPECT_GT(m.max, 3.0) << name << ": tails are there";
  EXPECT_LT(m.min, -3.0) << name;
}

ModelConfig config_with_everything() {
  ModelConfig c;  // the seed sizes
  c.norm_first = true;
  c.pos_embedding = PosEmbedding::Learned;
  c.n_layer = 3;
  return c;
}

TEST(Init, EveryParameterFollowsPyTorchsDistribution) {
  const ModelConfig c = config_with_everything();
  const ParamLayout layout(c);
  const std::vector<float> params = init_params(layout, 1234);
  int checked = 0;
  for (const ParamInfo& p : layout.params()) {
    const float* x = params.data() + p.offset;
    const int64_t n = p.shape.numel();
    const std::string& name = p.name;
    if (name == "embed.weight" || name == "pos_embed.weight") {
      expect_standard_normal(name, x, n);
    } else if (name.find("norm") != std::string::npos) {
      const float want = ends_with(name, ".weight") ? 1.0f : 0.0f;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], want) << name;
    } else if (ends_with(name, "in_proj_weight")) {  // xavier_uniform over (3C, C)
      expect_uniform(name, x, n, std::sqrt(6.0 / (c.d_model + 3.0 * c.d_model)));
    } else if (ends_with(name, "in_proj_bias") || ends_with(name, "out_proj.bias")) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 0.0f) << name;
    } else {  // nn.Linear weight and bias, out_proj.weight included: U(+-1/sqrt(fan_in))
      const int64_t fan_in = ends_with(name, ".weight") ? p.shape[1]
                                                        : layout.find(name.substr(0, name.size() - 4) + "weight").shape[1];
      expect_uniform(name, x, n, 1.0 / std::sqrt(static_cast<double>(fan_in)));
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2 + 12 * c.n_layer + 2 + 2);
}

TEST(Init, LayersStartIdenticalButParametersDiffer) {
  const ModelConfig c = config_with_everything();
  const ParamLayout layout(c);
  const std::vector<float> params = init_params(layout, 7);
  auto values = [&](const std::string& name) {
    const ParamInfo& p = layout.find(name);
    return std::vector<float>(params.begin() + p.offset, params.begin() + p.offset + p.shape.numel());
  };
  for (const char* suffix : {"self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight",
                             "linear1.bias", "linear2.weight", "linear2.bias"}) {
    const std::vector<float> first = values(std::string("encoder.layers.0.") + suffix);
    for (int l = 1; l < c.n_layer; ++l)
      EXPECT_EQ(values("encoder.layers." + std::to_string(l) + "." + suffix), first) << suffix << " layer " << l;
  }
  // Different tensors of the same shape draw from different streams.
  const std::vector<float> a = values("embed.weight"), b = values("lm_head.weight");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);
}

TEST(Init, TheSeedDecidesEverything) {
  const ParamLayout layout(config_with_everything());
  EXPECT_EQ(init_params(layout, 5), init_params(layout, 5));
  const std::vector<float> a = init_params(layout, 5), b = init_params(layout, 6);
  int64_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i] && a[i] != 0.0f && a[i] != 1.0f;
  EXPECT_LT(same, 10) << "another seed gives other values";
}

TEST(Init, LayoutFollowsPyTorchStateDictOrder) {
  ModelConfig c;
  c.n_layer = 1;
  c.norm_first = true;
  c.pos_embedding = PosEmbedding::Learned;
  const ParamLayout layout(c);
  std::vector<std::string> names;
  for (const ParamInfo& p : layout.params()) names.push_back(p.name);
  const std::vector<std::string> want = {
      "embed.weight", "pos_embed.weight", "encoder.layers.0.self_attn.in_proj_weight",
      "encoder.layers.0.self_attn.in_proj_bias", "encoder.layers.0.self_attn.out_proj.weight",
      "encoder.layers.0.self_attn.out_proj.bias", "encoder.layers.0.linear1.weight", "encoder.layers.0.linear1.bias",
      "encoder.layers.0.linear2.weight", "encoder.layers.0.linear2.bias", "encoder.layers.0.norm1.weight",
      "encoder.layers.0.norm1.bias", "encoder.layers.0.norm2.weight", "encoder.layers.0.norm2.bias",
      "encoder.norm.weight", "encoder.norm.bias", "lm_head.weight", "lm_head.bias"};
  EXPECT_EQ(names, want);
  // the seed model's parameter count: nn.Module's sum(p.numel())
  ModelConfig seed;
  EXPECT_EQ(ParamLayout(seed).total(), 65536 + 2 * (49152 + 384 + 16384 + 128 + 262144 + 2048 + 262144 + 128 + 512) +
                                           65536 + 512);
}

}  // namespace
}  // namespace tt
