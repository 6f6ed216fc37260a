#!/usr/bin/env python3
"""The attention core on the GPU, side by side in one run: tinytrain's flash (tensor cores), simt
(flash on the CUDA cores) and naive kernels, cuDNN's fused attention (through tinytrain), and PyTorch's scaled_dot_product_attention.

Shapes: batch 4, 12 heads of 64, causal, no dropout, T = 256, 512, 1024, 2048, 4096 (tinytrain's
`ops perf --attention-sweep` cases, engine/ops/op_cases.h), in --dtype (bf16 by default: cuDNN
takes no fp32). Forward and backward are timed apart:
  tinytrain   `<tinytrain> ops perf --backend cuda --attention-sweep --op attention --dtype D
              --attention flash|simt|naive|cudnn`: each case's us/call (2 warm-up calls, then about
              0.2 s of calls, timed on the stream). The forward writes out and lse; the backward
              recomputes the weights and writes dqkv (nothing (T,T) in memory for flash).
  torch-sdpa  torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) on
              (B, NH, T, HS) tensors, whichever kernel PyTorch picks; forward alone, then
              forward + backward minus the forward, medians of --iters calls timed with CUDA
              events after --warmup calls.
The layouts differ (tinytrain reads q, k, v from the packed (B, T, 3C) projection; PyTorch's
tensors are (B, NH, T, HS)), the arithmetic is the same: 4 HS FLOPs per (query, key) pair
forward, twice that backward (engine/flops.h), T (T + 1) / 2 pairs per head when causal.

Prints a table per direction: us per call of each row and each row's time relative to torch-sdpa
(x2.00 = twice as slow). A row that fails (no GPU, cuDNN does not serve the case, out of memory)
is reported and the others still run; exit status 1 when any row failed. --json FILE gets the
numbers and the commands. --self-test checks the parsing on canned output, without a GPU.

Usage: python3 tools/bench_attention.py --tinytrain build/tinytrain [--dtype bf16] [--json F]
       [--timeout 60] [--iters 20] [--warmup 3]
"""
import argparse
import json
import re
import subprocess
import sys

SEQS = (256, 512, 1024, 2048, 4096)
B, NH, HS = 4, 12, 64
KERNELS = ("flash", "simt", "naive", "cudnn")

# ops perf prints: op, shape, dtype, us/call, GFLOP/s, ...; the shape holds spaces.
PERF_LINE = re.compile(r"^(attention_forward|attention_backward)\s+B(\d+) T(\d+) NH(\d+) HS(\d+) \S+ p\S+\s+"
                       r"(fp32|bf16|fp16)\s+([0-9.]+)")


def parse_perf(text):
    """{(direction, T): microseconds per call} from `ops perf` output."""
    times = {}
    for line in text.splitlines():
        m = PERF_LINE.match(line)
        if m:
            direction = "forward" if m.group(1) == "attention_forward" else "backward"
            times[(direction, int(m.group(3)))] = float(m.group(7))
    return times


def run_tinytrain(binary, kernel, dtype, timeout):
    cmd = [binary, "ops", "perf", "--backend", "cuda", "--attention-sweep", "--op", "attention", "--dtype", dtype,
           "--attention", kernel]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return cmd, None, "timed out after %d s" % timeout
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        return cmd, None, lines[-1] if lines else "exit %d" % r.returncode
    # `--attention cudnn` where cuDNN declines a case: ops perf says so on an attention: line,
    # and tinytrain's own kernel ran: not a cuDNN time
    declined = [line for line in r.stdout.splitlines()
                if line.startswith("attention:") and "tinytrain's attention kernel runs" in line]
    if declined:
        return cmd, None, "cuDNN did not serve every case: " + declined[0]
    times = parse_perf(r.stdout)
    if len(times) != 2 * len(SEQS):
        return cmd, None, "expected %d timed cases, parsed %d" % (2 * len(SEQS), len(times))
    return cmd, times, None


def run_torch(dtype, iters, warmup):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        return None, "PyTorch is missing: %s" % e
    if not torch.cuda.is_available():
        return None, "PyTorch sees no CUDA device"
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    times = {}

    def median_ms(fn):
        for _ in range(warmup):
            fn()
        samples = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        samples.sort()
        return samples[len(samples) // 2]

    try:
        for T in SEQS:
            q, k, v = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch_dtype, requires_grad=True)
                       for _ in range(3))
            dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch_dtype)
            forward = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))

            def forward_backward():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                torch.autograd.grad(out, (q, k, v), dout)

            both = median_ms(forward_backward)
            times[("forward", T)] = forward * 1e3
            times[("backward", T)] = max(both - forward, 0.0) * 1e3
            del q, k, v, dout
            torch.cuda.empty_cache()
    except RuntimeError as e:  # out of memory and the like: reported, the other rows stand
        return None, str(e).splitlines()[0]
    return times, None


def table(rows, direction):
    lines = ["%s, B%d NH%d HS%d causal: us per call (x: relative to torch-sdpa)" % (direction, B, NH, HS)]
    lines.append("%-12s" % "row" + "".join("%18s" % ("T%d" % T) for T in SEQS))
    base = rows.get("torch-sdpa")
    for name, times in rows.items():
        cells = []
        for T in SEQS:
            t = times.get((direction, T)) if times else None
            if t is None:
                cells.append("%18s" % "-")
                continue
            ref = base.get((direction, T)) if base else None
            cells.append("%18s" % ("%.1f" % t + (" (x%.2f)" % (t / ref) if ref else "")))
        lines.append("%-12s" % name + "".join(cells))
    return "\n".join(lines)


def self_test():
    canned = """roofline: ...
op                                   shape                                                 dtype    us/call    GFLOP/s      GB/s   FLOP/B  roofline
attention_forward                    B4 T256 NH12 HS64 causal p0                           bf16        12.5     1234.5     10.00      9.9       -
attention_backward                   B4 T4096 NH12 HS64 causal p0                          bf16      4321.0     1234.5     10.00      9.9       -
"""
    t = parse_perf(canned)
    assert "tinytrain's attention kernel runs" in "attention: T256: seq 1: cuDNN ...; tinytrain's attention kernel runs"
    assert t == {("forward", 256): 12.5, ("backward", 4096): 4321.0}, t
    out = table({"flash": t, "torch-sdpa": {("forward", 256): 25.0}}, "forward")
    assert "12.5 (x0.50)" in out, out
    print("self-test: ok")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tinytrain", default="build/tinytrain")
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--timeout", type=int, default=60, help="seconds per tinytrain run")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv[1:])
    if a.self_test:
        return self_test()
    rows, failures, commands = {}, {}, {}
    for kernel in KERNELS:
        cmd, times, error = run_tinytrain(a.tinytrain, kernel, a.dtype, a.timeout)
        commands[kernel] = " ".join(cmd)
        if error:
            failures[kernel] = error
        rows[kernel] = times
    rows["torch-sdpa"], error = run_torch(a.dtype, a.iters, a.warmup)
    if error:
        failures["torch-sdpa"] = error
    for direction in ("forward", "backward"):
        print(table(rows, direction))
    for name, why in failures.items():
        print("%s: FAILED: %s" % (name, why))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"dtype": a.dtype, "shape": {"B": B, "NH": NH, "HS": HS, "causal": True, "seqs": SEQS},
                       "us_per_call": {name: ({"%s_T%d" % k: v for k, v in t.items()} if t else None)
                                       for name, t in rows.items()},
                       "commands": commands, "failures": failures}, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
