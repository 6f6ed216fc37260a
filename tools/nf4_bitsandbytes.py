#!/usr/bin/env python3
"""tinytrain's NF4 against bitsandbytes itself, on the CPU (docs/nf4.md).

The weights are made here (seeded NumPy): normal ones at a model's scale, a shape that is not a
multiple of 64 or of 64 x 256, all zeros, a block of zeros, one very large outlier, two weights,
and rows of scales from 1e-4 to 1. tests/nf4_image.cpp quantises them with tinytrain
(engine/nf4_weight.h) and this compares, tensor by tensor, with bitsandbytes' quantize_4bit(
blocksize=64, quant_type="nf4", compress_statistics=True) and dequantize_4bit:

  tables   nf4.h's 16 levels are get_4bit_type("nf4")'s and its 256 dynamic-map values
           create_dynamic_map(signed=True)'s, bit for bit;
  codes    the packed 4-bit codes are bitsandbytes', byte for byte (the nibble order with them);
  offset   tinytrain's mean absmax (summed in double, rounded once) is within OFFSET_ULPS of
           bitsandbytes' (torch's fp32 mean);
  absmax2  bitsandbytes' double quantisation (quantize_blockwise, blocksize 256) of its absmax
           minus tinytrain's offset gives tinytrain's absmax2, bit for bit;
  nearest  tinytrain's absmax codes are the nearest dynamic-map values as bitsandbytes' CUDA
           kernel picks them (fp32 midpoints, ties to the even code), written here in NumPy, byte
           for byte; bitsandbytes' own CPU codes differ only where its lookup table of [-1, 1]
           in 65536 steps decides (a code nearest to a point within one step), counted;
  decoded  bitsandbytes' dequantize_4bit of tinytrain's image is tinytrain's decoding, bit for
           bit, in fp32, and in bf16 and fp16 that rounded once more.

Usage: .venv/bin/python tools/nf4_bitsandbytes.py NF4_IMAGE
Prints a line per check and exits 1 when one fails. tests/nf4_bitsandbytes.sh runs it.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import bitsandbytes
import bitsandbytes.functional as F
from safetensors.numpy import load_file, save_file

# tinytrain sums the absmax values in double and rounds the mean once; torch sums them in fp32
# (a cascade of partial sums over its vector lanes, then one division by n), which rounds at each
# of its levels: a few ulps of the mean at these sizes. 16 ulps is a decade above what is
# measured here and far below a wrong mean (a missing block moves it by ~1/n of itself, 2^23/n
# ulps: 256 ulps at n = 32768 blocks).
OFFSET_ULPS = 16
# bitsandbytes' CPU kernel snaps a value to the nearest of 65536 points of [-1, 1] before
# looking up its code (csrc/cpu_ops.cpp, quantize_cpu_impl): its code is the nearest to a point
# within half a step of the value. One whole step bounds that and the table's own rounding.
LUT_STEP = 2.0 / 65535

failures = []


def check(name, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        failures.append(name)


def weights():
    rng = np.random.default_rng(20260)
    normal = lambda *shape: (rng.standard_normal(shape) * 0.02).astype(np.float32)  # noqa: E731
    zero_block = normal(300, 70)
    zero_block.reshape(-1)[64 * 5:64 * 6] = 0.0  # block 5
    outlier = normal(257, 64)
    outlier[100, 7] = 100.0  # 5000 standard deviations
    scales = 10.0 ** rng.uniform(-4.0, 0.0, size=(512, 1))
    return {
        "normal_4096x512": normal(4096, 512),   # 32768 blocks, 128 full groups of 256
        "odd_1000x37": normal(1000, 37),        # a last block of 8, a last group of 67
        "zeros_128x128": np.zeros((128, 128), np.float32),
        "zero_block_300x70": zero_block,
        "outlier_257x64": outlier,              # a last group of one block
        "pair_2": np.array([0.3, -0.1], np.float32),
        "scales_512x256": (rng.standard_normal((512, 256)) * scales).astype(np.float32),
    }


def ulps(a, b):
    """fp32 ulps between a and b (both positive or both zero here)."""
    return abs(int(np.float32(a).view(np.int32)) - int(np.float32(b).view(np.int32)))


def nearest_codes(y, code):
    """The dynamic-map code of each fp32 y as bitsandbytes' CUDA dQuantize<0> picks it: the number
    of fp32 midpoints (code[c] + code[c+1]) * 0.5 strictly below y, and on a midpoint the even
    code of the two."""
    mids = ((code[:-1] + code[1:]) * np.float32(0.5)).astype(np.float32)
    c = np.searchsorted(mids, y, side="left")
    on_mid = (c < len(mids)) & (mids[np.minimum(c, len(mids) - 1)] == y)
    return np.where(on_mid & (c % 2 == 1), c + 1, c).astype(np.uint8)


def compare_tensor(name, w, image):
    n = w.size
    flat = torch.from_numpy(w.reshape(-1).copy())
    codes = image[f"{name}.codes"]
    absmax_codes = image[f"{name}.absmax_codes"]
    absmax2 = image[f"{name}.absmax2"]
    offset = image[f"{name}.offset"][0]
    dequantized = image[f"{name}.dequantized"].reshape(-1)

    packed, state = F.quantize_4bit(flat, blocksize=64, compress_statistics=True, quant_type="nf4")
    check(f"{name} codes", np.array_equal(packed.numpy().reshape(-1), codes),
          f"{codes.size} bytes of packed 4-bit codes")

    bnb_offset = np.float32(state.offset.item())
    check(f"{name} offset", ulps(offset, bnb_offset) <= OFFSET_ULPS,
          f"tinytrain {offset:.9g}, bitsandbytes {bnb_offset:.9g}: {ulps(offset, bnb_offset)} ulps (<= {OFFSET_ULPS})")

    # bitsandbytes' double quantisation with tinytrain's offset (quantize_4bit's own steps)
    _, absmax = torch.ops.bitsandbytes.quantize_4bit.default(flat, 64, "nf4", torch.uint8)
    bnb_codes, state2 = F.quantize_blockwise(absmax - torch.tensor(offset), blocksize=256)
    check(f"{name} absmax2", np.array_equal(state2.absmax.numpy().view(np.int32), absmax2.view(np.int32)),
          f"{absmax2.size} values bit for bit")

    dynamic_map = state2.code.numpy()
    v = absmax.numpy() - offset
    group = np.arange(v.size) // 256
    with np.errstate(divide="ignore", invalid="ignore"):
        y = v * (np.float32(1.0) / absmax2[group])
    y = np.where(absmax2[group] == 0, np.float32(np.nan), y).astype(np.float32)  # a group of zeros: code 0
    want = np.where(np.isnan(y), 0, nearest_codes(np.nan_to_num(y), dynamic_map)).astype(np.uint8)
    check(f"{name} nearest", np.array_equal(absmax_codes, want), f"{absmax_codes.size} absmax codes")

    bnb = bnb_codes.numpy()
    differ = np.nonzero(bnb != absmax_codes)[0]
    lo = nearest_codes((y[differ] - LUT_STEP).astype(np.float32), dynamic_map)
    hi = nearest_codes((y[differ] + LUT_STEP).astype(np.float32), dynamic_map)
    explained = np.all((lo <= bnb[differ]) & (bnb[differ] <= hi))
    check(f"{name} absmax codes", explained,
          f"{differ.size} of {bnb.size} differ from bitsandbytes' CPU kernel, each its lookup table's "
          "code of a point within one step")

    nested = F.QuantState(absmax=torch.from_numpy(absmax2), code=state2.code, blocksize=256, dtype=torch.float32)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        ours = F.QuantState(absmax=torch.from_numpy(absmax_codes), shape=torch.Size([n]), code=state.code,
                            blocksize=64, quant_type="nf4", dtype=dtype, offset=torch.tensor(offset), state2=nested)
        theirs = F.dequantize_4bit(torch.from_numpy(codes).reshape(-1, 1), ours).reshape(-1)
        want = torch.from_numpy(dequantized).to(dtype)
        bits = torch.int32 if dtype == torch.float32 else torch.int16
        check(f"{name} decoded {str(dtype).replace('torch.', '')}", torch.equal(theirs.view(bits), want.view(bits)),
              f"{n} weights bit for bit")
    # for the record: bitsandbytes' own image decoded, against tinytrain's decoding
    own = F.dequantize_4bit(packed, state).reshape(-1).numpy()
    error = np.max(np.abs(w.reshape(-1) - dequantized))
    print(f"     {name}: bitsandbytes' own round trip vs tinytrain's: max |difference| "
          f"{np.max(np.abs(own - dequantized)):.3g}; max |w - w'| tinytrain {error:.3g}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: nf4_bitsandbytes.py NF4_IMAGE")
    print(f"bitsandbytes {bitsandbytes.__version__}, torch {torch.__version__} "
          f"(CPU capability {torch.backends.cpu.get_cpu_capability()})")
    inputs = weights()
    with tempfile.TemporaryDirectory() as work:
        source, out = os.path.join(work, "weights.safetensors"), os.path.join(work, "nf4.safetensors")
        save_file(inputs, source)
        subprocess.run([sys.argv[1], source, out], check=True)
        image = load_file(out)
    levels = F.get_4bit_type("nf4", device="cpu").numpy()
    check("levels", np.array_equal(image["nf4.levels"].view(np.int32), levels.view(np.int32)),
          "16 values bit for bit")
    check("dynamic map", np.array_equal(image["nf4.dynamic_map"].view(np.int32),
                                        F.create_dynamic_map(signed=True).numpy().view(np.int32)),
          "256 values bit for bit")
    for name, w in inputs.items():
        compare_tensor(name, w, image)
    if failures:
        print(f"{len(failures)} check(s) failed: {', '.join(failures)}")
        return 1
    print("every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
