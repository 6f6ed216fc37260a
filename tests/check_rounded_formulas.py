#!/usr/bin/env python3
"""The shared host/device formulas round as written on the GPU, where nvcc fuses multiply-adds.

tests/rounded_formulas.cu calls each formula of kernels/common/ that has no library call
(AdamW's update and clip coefficient, RoPE's turn, the loss scaler) from a probe kernel. This
compiles it to PTX twice, with nvcc's default --fmad=true (the build's) and with --fmad=false,
and checks that (1) no probe kernel holds an fma instruction with --fmad=true, and (2) the two
PTX texts are the same once the explicit rounding suffix (.rn on mul/add/sub, which --fmad=false
writes on every plain operation) and the register counts are set aside: contraction changed
nothing. A product written as a plain `*` next to a sum fails (1); no GPU is needed.

usage: check_rounded_formulas.py NVCC SOURCE_DIR [ARCH]
"""
import os
import re
import subprocess
import sys
import tempfile


def ptx(nvcc, source_dir, arch, fmad):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "probe.ptx")
        cmd = [nvcc, "-ptx", f"-arch=sm_{arch}", f"--fmad={fmad}", "-std=c++17", "-I", source_dir,
               "-o", out, os.path.join(source_dir, "tests", "rounded_formulas.cu")]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.exit(f"error: nvcc failed: {' '.join(cmd)}\n{r.stdout}")
        with open(out, encoding="utf-8") as f:
            return f.read()


def kernels(text):
    """{kernel name: its body's instruction lines}, .reg declarations left out."""
    found = {}
    for m in re.finditer(r"\.entry\s+(\w+)\((.*?)\n\}", text, re.S):
        lines = [l.strip() for l in m.group(2).splitlines()]
        found[m.group(1)] = [l for l in lines if l and not l.startswith(".reg")]
    return found


def normalized(lines):
    return [re.sub(r"\b(mul|add|sub)\.rn\.(f32|f64)\b", r"\1.\2", l) for l in lines]


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    nvcc, source_dir = sys.argv[1], sys.argv[2]
    arch = sys.argv[3] if len(sys.argv) == 4 else "90"
    fused, unfused = (kernels(ptx(nvcc, source_dir, arch, f)) for f in ("true", "false"))
    if len(fused) < 4 or fused.keys() != unfused.keys():
        sys.exit(f"error: expected the 4 probe kernels in both PTX texts, got {sorted(fused)} and {sorted(unfused)}")
    failures = []
    for name, lines in sorted(fused.items()):
        fmas = [l for l in lines if re.match(r"fma\.", l)]
        if fmas:
            failures.append(f"{name}: {len(fmas)} fused multiply-add(s) with --fmad=true, e.g. '{fmas[0]}'")
        elif normalized(lines) != normalized(unfused[name]):
            failures.append(f"{name}: the PTX with --fmad=true differs from --fmad=false beyond rounding suffixes")
        else:
            print(f"ok: {name}: {len(lines)} PTX lines, no fma, the same with --fmad=false")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
