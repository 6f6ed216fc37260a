// A frozen weight quantised to NF4 on the host, as bitsandbytes' quantize_4bit(quant_type="nf4",
// blocksize=64, compress_statistics=True) makes it (kernels/common/nf4.h has the format, and
// docs/nf4.md), and its decoding on the host: the reference every backend's nf4_dequantize
// matches bit for bit. QLoRA's base weights are quantised once, when a run starts, then uploaded
// into the views of kernels/nf4_tensor.h.
#pragma once
#include <cstdint>
#include <vector>

namespace tt {

// The host image of n weights (n even): 4.127 bits a weight (4 + 8/64 + 32/16384).
struct Nf4Weight {
  int64_t n = 0;
  std::vector<uint8_t> codes;         // n / 2: two 4-bit codes a byte, element 2i in the high nibble
  std::vector<uint8_t> absmax_codes;  // ceil(n / 64): each block's absmax, coded in the dynamic map
  std::vector<float> absmax2;         // ceil(n / 16384): the scale of each 256 absmax codes
  float offset = 0.0f;                // the mean of the blocks' absmax, subtracted before coding them
};

// Quantises w[0, n). A last block of fewer than 64 weights (n not a multiple of 64) takes its
// absmax over the weights it has, as bitsandbytes' does, and so does a last group of fewer than
// 256 absmax values. Throws InputError (one line) for n odd or negative (two codes share a byte;
// bitsandbytes pads an odd count with a zero, tinytrain asks for an even one) or a weight that
// is not finite (naming its index).
Nf4Weight quantize_nf4(const float* w, int64_t n);

// The n weights the image holds, in fp32: nf4.h's decoding, in its order of operations.
std::vector<float> dequantize_nf4(const Nf4Weight& q);

}  // namespace tt
