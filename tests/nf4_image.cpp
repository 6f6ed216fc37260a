// nf4_image IN OUT: tinytrain's NF4 quantisation (engine/nf4_weight.h) of every F32 tensor of
// the safetensors file IN, written to the safetensors file OUT for tools/nf4_bitsandbytes.py,
// which compares it with bitsandbytes. For each tensor NAME of IN (flattened, n elements):
//   NAME.codes         U8  [n/2]              the packed 4-bit codes
//   NAME.absmax_codes  U8  [ceil(n/64)]       the absmax values' 8-bit codes
//   NAME.absmax2       F32 [ceil(n/16384)]    the double quantisation's scales
//   NAME.offset        F32 [1]
//   NAME.dequantized   F32, NAME's shape      dequantize_nf4 of the image
// and the format's tables: nf4.levels F32 [16], nf4.dynamic_map F32 [256].
// Exits 1 with one line on bad input.
#include <cstdio>
#include <string>
#include <vector>

#include "base/input_error.h"
#include "engine/io/safetensors.h"
#include "engine/nf4_weight.h"
#include "kernels/common/nf4.h"

namespace {

// One tensor's image and decoding, kept alive until the file is written.
struct Quantised {
  std::string name;
  tt::Shape shape;
  tt::Nf4Weight q;
  std::vector<float> dequantized;
};

void run(const std::string& in, const std::string& out) {
  const tt::SafetensorsFile file = tt::SafetensorsFile::open(in);
  std::vector<Quantised> all;
  for (const std::string& name : file.names()) {
    const tt::Shape shape = file.entry(name).shape;
    std::vector<float> w(shape.numel());
    file.read(name, tt::DType::F32, shape, w.data());
    tt::Nf4Weight q = tt::quantize_nf4(w.data(), shape.numel());
    std::vector<float> dequantized = tt::dequantize_nf4(q);
    all.push_back({name, shape, std::move(q), std::move(dequantized)});
  }
  std::vector<float> levels(tt::nf4::kLevels), dynamic_map(tt::nf4::kDynamicCodes);
  for (int c = 0; c < tt::nf4::kLevels; ++c) levels[c] = tt::nf4::level(c);
  for (int c = 0; c < tt::nf4::kDynamicCodes; ++c) dynamic_map[c] = tt::nf4::dynamic_map_value(c);

  std::vector<tt::SafetensorsTensorRef> refs = {
      {"nf4.levels", tt::DType::F32, tt::Shape{tt::nf4::kLevels}, levels.data()},
      {"nf4.dynamic_map", tt::DType::F32, tt::Shape{tt::nf4::kDynamicCodes}, dynamic_map.data()}};
  for (const Quantised& t : all) {
    auto count = [](const auto& v) { return static_cast<int64_t>(v.size()); };
    refs.push_back({t.name + ".codes", tt::DType::U8, tt::Shape{count(t.q.codes)}, t.q.codes.data()});
    refs.push_back(
        {t.name + ".absmax_codes", tt::DType::U8, tt::Shape{count(t.q.absmax_codes)}, t.q.absmax_codes.data()});
    refs.push_back({t.name + ".absmax2", tt::DType::F32, tt::Shape{count(t.q.absmax2)}, t.q.absmax2.data()});
    refs.push_back({t.name + ".offset", tt::DType::F32, tt::Shape{1}, &t.q.offset});
    refs.push_back({t.name + ".dequantized", tt::DType::F32, t.shape, t.dequantized.data()});
  }
  tt::write_safetensors(out, {}, refs);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: nf4_image IN.safetensors OUT.safetensors\n");
    return 2;
  }
  try {
    run(argv[1], argv[2]);
  } catch (const tt::InputError& e) {
    std::fprintf(stderr, "nf4_image: %s\n", e.what());
    return 1;
  }
  return 0;
}
