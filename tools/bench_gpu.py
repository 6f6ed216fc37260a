#!/usr/bin/env python3
"""GPU speed of tinytrain against PyTorch, side by side in one run, on two configs.

Configs (--configs seed,large):
  seed   the seed workload: vocab 512, d_model 128, 4 heads, 2 post-norm layers, d_ff 2048,
         relu, dropout 0.1, no positions, batch 16 x seq 64; --seed-steps 300 steps, PyTorch
         times the steps after --seed-warmup 20, in 10-step windows.
  large  GEMM-bound: vocab --large-vocab 50304, d_model 768, 12 heads, 12 pre-norm layers
         (norm_first), d_ff 3072, GELU, causal, learned positions, max_seq_len = seq =
         --large-seq 1024, dropout 0, batch --large-batch 8; --large-steps 35 steps, PyTorch
         times the steps after --large-warmup 5, in --large-window 5-step windows.

Rows (each a separate process doing the same training, AdamW lr 1e-4, data on the device):
  tinytrain-graph-{fp32,bf16,fp16}  <tinytrain> train --backend cuda --precision P --cuda-graph on
  tinytrain-nograph-fp32            the same with --cuda-graph off (seed only)
  tinytrain-cudnn-bf16              tinytrain-graph-bf16 with --attention cudnn (cuDNN's fused
                                    attention; the run's "attention:" line says whether it served)
  torch-eager-fp32                  <python> examples/seed_pytorch.py --device cuda (no TF32)
  torch-eager-{bf16,fp16}           the same with --amp bf16|fp16 (torch.autocast around forward
                                    + loss; fp16 with a GradScaler: init 65536, growth 2,
                                    backoff 0.5, interval 2000, as tinytrain's fp16)
  torch-compile-fp32 (seed), torch-compile-bf16 (large)   the same with --compile
tinytrain logs every window-size steps (--log-every), so its median is over windows of the same
size; its first window (step 0: allocation, GEMM plans) is untimed, the graph capture falls in
the second.

Every row prints a final `done: {steps} steps | {tokens/s} tokens/s | {ms/step} ms/step` line
(median ms/step over the windows) and that line is all we time by; the last
`step N | loss L` line is kept as a sanity check (engines draw different random tokens and
dropout masks, so losses agree only roughly).

FLOPs and MFU. Achieved TFLOP/s = FLOPs per step (from the config, see step_flops()) / step
time; MFU = achieved / the bf16 matrix peak measured in the same run (torch.matmul of 8192^3
bf16 matrices, median of --peak-iters, CUDA events); the fp32 peak (TF32 off) is measured the
same way and reported for context. All rows use the bf16 peak, fp32 rows included.

Prints, per config, a table: row, ms/step (median), tokens/s, TFLOP/s, MFU, and tokens/s
relative to PyTorch eager and to torch.compile at the same precision (x1.50 = 1.5 times their
tokens/s). Rows run in priority order (tinytrain, PyTorch eager, torch.compile last), each
under --eager-timeout (60 s; torch.compile rows: --timeout, 150 s), all within --budget
seconds; a row that fails, times out or does not fit is reported, the others still run; the
exit status is 1 if any row (or the peak) failed or was skipped. --json FILE is rewritten after
every run (so a killed benchmark leaves what it measured): commands, numbers, the FLOP
formula, output tails of failures. --self-test checks the FLOP formula against a GEMM-by-GEMM
count and the output parsing, without a GPU.

Usage: python3 tools/bench_gpu.py [--configs seed,large] [--rows ROW,...] [--budget S]
       [--timeout S] [--large-batch 8] [--json FILE] ...   (--help for all)
"""
import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED_PY = os.path.join(ROOT, "examples", "seed_pytorch.py")
PEAK_N = 8192
DONE_RE = re.compile(r"^done:\s*(\d+)\s+steps\s*\|\s*([0-9.eE+-]+)\s+tokens/s\s*\|"
                     r"\s*([0-9.eE+-]+)\s+ms/step\b")
STEP_RE = re.compile(r"^step\s+(\d+)\s*\|\s*loss\s+([0-9.eE+-]+|-?nan|-?inf)")
# tinytrain fp16: `step N | loss L | scale S | skipped K | alloc ...`
SCALE_RE = re.compile(r"\|\s*scale\s+([0-9.eE+-]+|inf)\s*\|\s*skipped\s+(\d+)")
# seed_pytorch.py --amp fp16: `amp: fp16 | final loss scale S`
TORCH_SCALE_RE = re.compile(r"^amp: fp16 \| final loss scale\s+([0-9.eE+-]+|inf)")

FLOP_FORMULA = (
    "flops_per_step = 6 * P_mm * batch * seq + 12 * n_layer * seq^2 * d_model * batch, "
    "P_mm = n_layer * (4 * d_model^2 + 2 * d_model * d_ff) + d_model * vocab "
    "(weights that multiply activations: q,k,v,out projections, the two feed-forward matrices, "
    "the LM head; embeddings, biases, norms, softmax, loss and AdamW not counted; 2 FLOPs per "
    "weight per token forward, 4 backward; attention QK^T and PV 4 seq^2 d_model per layer per "
    "sequence forward, 8 backward, counted in full also when causal)")


# ---------------------------------------------------------------------------------------
# FLOPs
# ---------------------------------------------------------------------------------------
def matmul_params(m):
    """Weights that multiply activations: per layer in_proj (q,k,v: 3 d^2) + out_proj (d^2)
    + linear1 (d d_ff) + linear2 (d_ff d); plus the LM head (d V). Embeddings are lookups."""
    d, f = m["d_model"], m["d_ff"]
    return m["n_layer"] * (4 * d * d + 2 * d * f) + d * m["vocab_size"]


def step_flops(m, batch, seq):
    """FLOPs of one training step (forward + backward), the usual 6ND count plus attention:

        6 * P_mm * batch * seq  +  12 * n_layer * seq^2 * d_model * batch

    6 = 2 (a multiply-add per weight per token, forward) + 4 (backward: the input gradient and
    the weight gradient, each as large as the forward). Attention per layer per sequence:
    Q K^T and P V are 2 seq^2 d_model each forward (4), twice that backward (8): 12. A causal
    mask is not discounted (the full seq^2 counts, as in the PaLM MFU convention). Not counted:
    embedding lookups, biases, LayerNorm, softmax, activations, dropout, loss, AdamW."""
    tokens = batch * seq
    return 6 * matmul_params(m) * tokens + 12 * m["n_layer"] * seq * seq * m["d_model"] * batch


def hand_count_flops(m, batch, seq):
    """Independent count, GEMM by GEMM (for --self-test): forward GEMMs (M, N, K) cost 2MNK;
    each has two backward GEMMs of the same size (input gradient, weight/second-operand
    gradient)."""
    B, T, d, f, V, H = batch, seq, m["d_model"], m["d_ff"], m["vocab_size"], m["n_head"]
    dh = d // H
    gemms = []  # (count, M, N, K)
    for _ in range(m["n_layer"]):
        gemms += [(1, B * T, 3 * d, d),       # x @ in_proj^T -> q, k, v
                  (B * H, T, T, dh),          # q @ k^T per head
                  (B * H, T, dh, T),          # softmax(.) @ v per head
                  (1, B * T, d, d),           # out_proj
                  (1, B * T, f, d),           # linear1
                  (1, B * T, d, f)]           # linear2
    gemms.append((1, B * T, V, d))            # LM head
    forward = sum(c * 2 * M * N * K for c, M, N, K in gemms)
    return 3 * forward  # forward + 2 x forward backward


# ---------------------------------------------------------------------------------------
# Configs and rows
# ---------------------------------------------------------------------------------------
ROWS = {
    "seed": ("tinytrain-graph-fp32", "tinytrain-nograph-fp32", "tinytrain-graph-bf16",
             "tinytrain-graph-fp16", "tinytrain-cudnn-bf16", "torch-eager-fp32", "torch-eager-bf16",
             "torch-eager-fp16", "torch-compile-fp32"),
    "large": ("tinytrain-graph-fp32", "tinytrain-graph-bf16", "tinytrain-graph-fp16",
              "tinytrain-cudnn-bf16", "torch-eager-fp32", "torch-eager-bf16", "torch-eager-fp16",
              "torch-compile-bf16"),
}
ALL_ROWS = sorted({r for rows in ROWS.values() for r in rows})


def row_parts(row):
    """'tinytrain-graph-bf16' -> ('tinytrain', 'graph', 'bf16')."""
    engine, mode, prec = row.split("-")
    return engine, mode, prec


def priority(config, row):
    """Run order: tinytrain rows, then PyTorch eager, then torch.compile (slowest to start:
    it compiles during the warm-up), the cheaper seed compile before the large one."""
    engine, mode, _ = row_parts(row)
    tier = 0 if engine == "tinytrain" else 1 if mode == "eager" else 2
    return (tier, 0 if config == "seed" else 1, ROWS[config].index(row))


def make_configs(a):
    seed_model = dict(vocab_size=512, d_model=128, n_head=4, n_layer=2, d_ff=2048,
                      activation="relu", norm_first=False, causal=False, pos_embedding="none",
                      max_seq_len=64, dropout=0.1)
    large_model = dict(vocab_size=a.large_vocab, d_model=768, n_head=12, n_layer=12, d_ff=3072,
                       activation="gelu", norm_first=True, causal=True, pos_embedding="learned",
                       max_seq_len=a.large_seq, dropout=0.0)
    cfgs = {
        "seed": dict(model=seed_model, batch=16, seq=64, steps=a.seed_steps,
                     warmup=a.seed_warmup, window=10),
        "large": dict(model=large_model, batch=a.large_batch, seq=a.large_seq,
                      steps=a.large_steps, warmup=a.large_warmup, window=a.large_window),
    }
    for c in cfgs.values():
        c["tokens_per_step"] = c["batch"] * c["seq"]
        c["params_in_matmuls"] = matmul_params(c["model"])
        c["flops_per_step"] = step_flops(c["model"], c["batch"], c["seq"])
    return cfgs


def shape_flags(c):
    m = c["model"]
    return ["--vocab-size", str(m["vocab_size"]), "--d-model", str(m["d_model"]),
            "--n-head", str(m["n_head"]), "--n-layer", str(m["n_layer"]),
            "--d-ff", str(m["d_ff"]), "--activation", m["activation"],
            "--norm-first", "true" if m["norm_first"] else "false",
            "--causal", "true" if m["causal"] else "false",
            "--pos-embedding", m["pos_embedding"], "--max-seq-len", str(m["max_seq_len"]),
            "--dropout", repr(float(m["dropout"])),
            "--batch", str(c["batch"]), "--seq", str(c["seq"])]


def command(a, c, row):
    engine, mode, prec = row_parts(row)
    if engine == "tinytrain":
        cmd = [os.path.abspath(a.tinytrain), "train", "--backend", "cuda"] + shape_flags(c) + [
            "--steps", str(c["steps"]), "--log-every", str(c["window"]), "--precision", prec,
            "--cuda-graph", "off" if mode == "nograph" else "on"]
        if mode == "cudnn":
            cmd += ["--attention", "cudnn"]
        return cmd + shlex.split(a.tinytrain_extra)
    cmd = [a.python, SEED_PY, "--device", "cuda", "--steps", str(c["steps"]),
           "--warmup", str(c["warmup"]), "--window", str(c["window"])] + shape_flags(c)
    if prec != "fp32":
        cmd += ["--amp", prec]
    if mode == "compile":
        cmd.append("--compile")
    return cmd


# ---------------------------------------------------------------------------------------
# Running and parsing
# ---------------------------------------------------------------------------------------
def parse_output(output):
    """{'steps', 'tokens_per_s', 'ms_per_step'} from the last `done:` line (None if there is
    none) plus 'last_step'/'last_loss' from the last `step N | loss L` line and, for fp16,
    'loss_scale' (+ tinytrain's 'skipped_steps') and tinytrain's 'attention' line (which
    attention kernel ran, with --attention cudnn)."""
    done = last = scale = attention = None
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("attention: "):
            attention = line[len("attention: "):]
        m = DONE_RE.match(line)
        if m:
            done = {"steps": int(m.group(1)), "tokens_per_s": float(m.group(2)),
                    "ms_per_step": float(m.group(3))}
        m = STEP_RE.match(line)
        if m:
            last = (int(m.group(1)), float(m.group(2)))
            m = SCALE_RE.search(line)
            if m:
                scale = {"loss_scale": float(m.group(1)), "skipped_steps": int(m.group(2))}
        m = TORCH_SCALE_RE.match(line)
        if m:
            scale = {"loss_scale": float(m.group(1))}
    if done is not None and last is not None:
        done["last_step"], done["last_loss"] = last
    if done is not None and scale is not None:
        done.update(scale)
    if done is not None and attention is not None:
        done["attention"] = attention
    return done


def run_process(cmd, timeout):
    """(rc, None, seconds, output), or (None, error text, seconds, output so far) when it
    cannot start or times out; on a timeout the whole process group goes (torch.compile's
    workers too)."""
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)
    except OSError as e:
        return None, f"cannot run {cmd[0]}: {e.strerror}", 0.0, ""
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        output, _ = proc.communicate()
        return None, f"no result within {timeout:g} s", round(time.monotonic() - t0, 2), output or ""
    return proc.returncode, None, round(time.monotonic() - t0, 2), output


def run_once(cmd, timeout):
    """Run one row; a result dict with 'ok' and either numbers or 'error'."""
    rc, err, seconds, output = run_process(cmd, timeout)
    if rc is None:
        res = {"ok": False, "error": err, "seconds": seconds}
        if output:
            res["output_tail"] = output.splitlines()[-20:]
        return res
    done = parse_output(output)
    if rc != 0 or done is None:
        why = f"exit status {rc}" if rc != 0 else "no `done:` line"
        # The most telling line: the last one that names an error.
        for line in reversed(output.splitlines()):
            if re.search(r"error|Error|out of memory", line):
                why += ": " + line.strip()[:200]
                break
        return {"ok": False, "error": why, "exit_code": rc, "seconds": seconds,
                "output_tail": output.splitlines()[-20:]}
    return dict(done, ok=True, seconds=seconds)


PEAK_SCRIPT = r"""
import json, statistics, sys
import torch
n, iters = int(sys.argv[1]), int(sys.argv[2])
if not torch.cuda.is_available():
    sys.exit("peak: torch sees no CUDA device")
torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 peak is plain fp32, no TF32
torch.backends.cudnn.allow_tf32 = False
out = {"n": n, "iters": iters, "device": torch.cuda.get_device_name(0), "torch": torch.__version__}
for name, dtype, warm in (("bf16", torch.bfloat16, 25), ("fp32", torch.float32, 3)):
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    for _ in range(warm):
        torch.matmul(a, b, out=c)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(iters)]
    torch.cuda.synchronize()
    for s, e in ev:
        s.record()
        torch.matmul(a, b, out=c)
        e.record()
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in ev)
    med = statistics.median(ms)
    out[name] = {"tflops": 2 * n ** 3 / (med * 1e-3) / 1e12, "median_ms": med,
                 "min_ms": ms[0], "max_ms": ms[-1],
                 "best_tflops": 2 * n ** 3 / (ms[0] * 1e-3) / 1e12}
    del a, b, c
    torch.cuda.empty_cache()
print("peak: " + json.dumps(out), flush=True)
"""


def measure_peak(a, timeout):
    cmd = [a.python, "-c", PEAK_SCRIPT, str(PEAK_N), str(a.peak_iters)]
    rc, err, seconds, output = run_process(cmd, timeout)
    res = {"command": [a.python, "-c", "<PEAK_SCRIPT>", str(PEAK_N), str(a.peak_iters)],
           "seconds": seconds}
    if rc is None:
        return dict(res, ok=False, error=err, output_tail=output.splitlines()[-20:])
    for line in output.splitlines():
        if line.startswith("peak: "):
            try:
                data = json.loads(line[len("peak: "):])
                return dict(res, ok=True, **data)
            except ValueError:
                break
    lines = [x.strip() for x in output.splitlines() if x.strip()]
    return dict(res, ok=False, error=f"exit status {rc}, no `peak:` line" +
                (f": {lines[-1][:200]}" if lines else ""), output_tail=lines[-20:])


# ---------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------
def ratio(result, ref):
    if not (result and result.get("ok") and ref and ref.get("ok")):
        return None
    return result["tokens_per_s"] / ref["tokens_per_s"]


def derived(best, c, peak):
    """TFLOP/s, MFU and the fraction of the fp32 peak of one (ok) result."""
    if not best.get("ok"):
        return {"tflops": None, "mfu": None, "frac_of_fp32_peak": None}
    tflops = c["flops_per_step"] / (best["ms_per_step"] * 1e-3) / 1e12
    bf16 = peak.get("bf16", {}).get("tflops") if peak.get("ok") else None
    fp32 = peak.get("fp32", {}).get("tflops") if peak.get("ok") else None
    return {"tflops": tflops, "mfu": tflops / bf16 if bf16 else None,
            "frac_of_fp32_peak": tflops / fp32 if fp32 else None}


def best_of(rs):
    ok = [x for x in rs if x["ok"]]
    return min(ok, key=lambda x: x["ms_per_step"]) if ok else rs[-1]


def describe(name, c):
    m = c["model"]
    return (f"{name}: batch {c['batch']} x seq {c['seq']} = {c['tokens_per_step']} tokens/step, "
            f"vocab {m['vocab_size']}, d_model {m['d_model']}, {m['n_head']} heads, "
            f"{m['n_layer']} {'pre' if m['norm_first'] else 'post'}-norm layers, d_ff {m['d_ff']}, "
            f"{m['activation']}, {'causal' if m['causal'] else 'bidirectional'}, positions "
            f"{m['pos_embedding']}, dropout {m['dropout']:g}; {c['params_in_matmuls'] / 1e6:.2f}M "
            f"matmul weights, {c['flops_per_step'] / 1e9:.2f} GFLOP/step; {c['steps']} steps "
            f"(PyTorch: {c['warmup']} untimed warm-up), median over {c['window']}-step windows")


def build_json(a, cfgs, order, runs, cmds, peak, skipped, complete, t0):
    engines, failed = {}, []
    for config, row in order:
        key = f"{config}/{row}"
        c = cfgs[config]
        rs = runs[key]
        if not rs:
            b = {"ok": False, "error": "not run yet"} if not complete else \
                {"ok": False, "error": "not run"}
        else:
            b = best_of(rs)
        engine, mode, prec = row_parts(row)
        eager = runs.get(f"{config}/torch-eager-{prec}")
        comp = runs.get(f"{config}/torch-compile-{prec}")
        eager = best_of(eager) if eager else None
        comp = best_of(comp) if comp else None
        d = derived(b, c, peak)
        engines[key] = {
            "config": config, "row": row, "engine": engine, "mode": mode, "precision": prec,
            "ok": b["ok"], "skipped": bool(b.get("skipped")),
            "ms_per_step": b.get("ms_per_step"), "tokens_per_s": b.get("tokens_per_s"),
            "tflops": d["tflops"], "mfu": d["mfu"], "frac_of_fp32_peak": d["frac_of_fp32_peak"],
            "last_loss": b.get("last_loss"), "loss_scale": b.get("loss_scale"),
            "skipped_steps": b.get("skipped_steps"), "attention": b.get("attention"),
            "vs_pytorch_eager": ratio(b, eager), "vs_torch_compile": ratio(b, comp),
            "error": b.get("error"), "command": cmds[key], "runs": rs,
        }
        if not b["ok"] and rs and not b.get("skipped"):
            failed.append(key)
    if complete and not peak.get("ok"):
        failed.append("peak")
    return {
        "backend": "cuda", "complete": complete, "elapsed_s": round(time.monotonic() - t0, 1),
        "repeats": a.repeats, "budget_s": a.budget, "timeout_s": a.timeout,
        "eager_timeout_s": a.eager_timeout,
        "timing": "median ms/step over windows of `window` steps after the warm-up "
                  "(tinytrain: after step 0); best of `repeats`",
        "ratio_meaning": "tokens/s of the row divided by that of PyTorch eager (vs_pytorch_eager) "
                         "or torch.compile (vs_torch_compile) at the same precision",
        "flop_formula": FLOP_FORMULA,
        "mfu_meaning": "achieved TFLOP/s (flops_per_step / step time) divided by the measured "
                       "bf16 matmul peak (peak.bf16.tflops), for every row; frac_of_fp32_peak "
                       "divides by the measured fp32 (no TF32) peak",
        "fp32_note": "fp32 rows use no TF32: tinytrain without --tf32, PyTorch's default "
                     "float32 matmul precision 'highest'",
        "peak": peak,
        "configs": {name: dict(c, rows=[r for cf, r in order if cf == name])
                    for name, c in cfgs.items() if any(cf == name for cf, _ in order)},
        "failed": failed, "skipped": sorted(set(skipped)),
        "engines": engines,
    }


def write_json(path, result):
    if not path:
        return
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def print_tables(result, cfgs):
    peak = result["peak"]
    if peak.get("ok"):
        print(f"matmul peak ({peak['n']}^3, median of {peak['iters']}, {peak.get('device')}): "
              f"bf16 {peak['bf16']['tflops']:.1f} TFLOP/s, fp32 (no TF32) "
              f"{peak['fp32']['tflops']:.1f} TFLOP/s")
    else:
        print(f"matmul peak: failed ({peak.get('error')}): no MFU")
    for name, c in result["configs"].items():
        print()
        print("== " + describe(name, cfgs[name]) + f", best of {result['repeats']}")
        print(f"{'row':<24} {'ms/step':>9} {'tokens/s':>12} {'TFLOP/s':>8} {'MFU':>6} "
              f"{'vs eager':>9} {'vs compile':>10} {'last loss':>10}")
        for row in ROWS[name]:
            e = result["engines"].get(f"{name}/{row}")
            if e is None:
                continue
            if not e["ok"]:
                what = "skipped" if e["skipped"] else "failed"
                print(f"{row:<24} {what:>9}  {e['error']}")
                continue
            cols = [f"x{x:.2f}" if x is not None else "-"
                    for x in (e["vs_pytorch_eager"], e["vs_torch_compile"])]
            mfu = f"{100 * e['mfu']:.1f}%" if e["mfu"] is not None else "-"
            loss = f"{e['last_loss']:.4f}" if e["last_loss"] is not None else "-"
            print(f"{row:<24} {e['ms_per_step']:9.3f} {e['tokens_per_s']:12.1f} "
                  f"{e['tflops']:8.2f} {mfu:>6} {cols[0]:>9} {cols[1]:>10} {loss:>10}")
            if e.get("attention") and row_parts(row)[1] == "cudnn":
                print(f"{'':<24} attention: {e['attention']}")
    print()
    print("TFLOP/s: (6 * P_mm * batch * seq + 12 * n_layer * seq^2 * d_model * batch) / step "
          "time, P_mm = n_layer * (4 d_model^2 + 2 d_model d_ff) + d_model vocab")
    print("MFU: TFLOP/s over the measured bf16 matmul peak (every row, fp32 ones too)")
    print("vs eager / vs compile: tokens/s relative to PyTorch eager / torch.compile at the same "
          "precision (above x1.00: faster)")


# ---------------------------------------------------------------------------------------
# Self-test (no GPU)
# ---------------------------------------------------------------------------------------
def self_test(a):
    cfgs = make_configs(a)
    fails = 0
    for name, c in cfgs.items():
        f, h = c["flops_per_step"], hand_count_flops(c["model"], c["batch"], c["seq"])
        ok = f == h
        fails += not ok
        print(f"flops {name}: formula {f:,} hand count {h:,} ({f / 1e9:.3f} GFLOP/step, "
              f"P_mm {c['params_in_matmuls']:,}) {'ok' if ok else 'MISMATCH'}")
    seed = cfgs["seed"]["flops_per_step"]
    # Seed by hand: P_mm = 2 (4*128^2 + 2*128*2048) + 128*512 = 1,245,184; 6 * P_mm * 1024 =
    # 7,650,410,496; attention 12 * 2 * 64^2 * 128 * 16 = 201,326,592; total 7,851,737,088.
    ok = seed == 7_851_737_088
    fails += not ok
    print(f"flops seed == 7,851,737,088 (about 7.9 GFLOP): {'ok' if ok else 'MISMATCH'}")
    samples = [
        ("step   0 | loss 10.9 | scale 65536 | skipped 0 | alloc 1.0 MB\n"
         "step  30 | loss 10.8 | scale 32768 | skipped 1 | alloc 1.0 MB\n"
         "done: 35 steps | 81920.0 tokens/s | 100.00 ms/step\n",
         {"steps": 35, "tokens_per_s": 81920.0, "ms_per_step": 100.0, "last_step": 30,
          "last_loss": 10.8, "loss_scale": 32768.0, "skipped_steps": 1}),
        ("step  34 | loss 6.4144 | alloc 20.1 MB\namp: fp16 | final loss scale 16384\n"
         "done: 300 steps | 12645.9 tokens/s | 80.97 ms/step\n",
         {"steps": 300, "tokens_per_s": 12645.9, "ms_per_step": 80.97, "last_step": 34,
          "last_loss": 6.4144, "loss_scale": 16384.0}),
        ("step 0 | loss nan | alloc 1 MB\n", None),
    ]
    for text, want in samples:
        got = parse_output(text)
        ok = got == want
        fails += not ok
        print(f"parse {'ok' if ok else 'MISMATCH: got ' + repr(got) + ' want ' + repr(want)}")
    print("self-test: " + ("PASS" if not fails else f"{fails} FAILED"))
    return 1 if fails else 0


# ---------------------------------------------------------------------------------------
def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tinytrain", default=os.path.join(ROOT, "build", "tinytrain"),
                   help="tinytrain binary (default: build/tinytrain)")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with a CUDA PyTorch (default: this one)")
    p.add_argument("--configs", default="seed,large", help="comma-separated subset of seed,large")
    p.add_argument("--rows", dest="rows", default=None,
                   help="comma-separated rows to run, ROW or CONFIG/ROW (default: all); rows: "
                        + ",".join(ALL_ROWS))
    p.add_argument("--seed-steps", dest="seed_steps", type=int, default=300,
                   help="seed: training steps per run, warm-up included (default 300)")
    p.add_argument("--seed-warmup", dest="seed_warmup", type=int, default=20,
                   help="seed: untimed steps at the start of a PyTorch run (default 20)")
    p.add_argument("--large-steps", type=int, default=35,
                   help="large: training steps per run, warm-up included (default 35)")
    p.add_argument("--large-warmup", type=int, default=5,
                   help="large: untimed steps at the start of a PyTorch run (default 5)")
    p.add_argument("--large-window", type=int, default=5,
                   help="large: steps per timing window, both engines (default 5)")
    p.add_argument("--large-batch", type=int, default=8, help="large: batch (default 8)")
    p.add_argument("--large-seq", type=int, default=1024,
                   help="large: seq = max_seq_len (default 1024)")
    p.add_argument("--large-vocab", type=int, default=50304,
                   help="large: vocabulary (default 50304)")
    p.add_argument("--tinytrain-extra", default="", metavar="ARGS",
                   help="more flags for every tinytrain run, e.g. '--attention cudnn'")
    p.add_argument("--peak-iters", type=int, default=50,
                   help="timed 8192^3 matmuls per dtype for the peak (default 50)")
    p.add_argument("--no-peak", action="store_true", help="skip the peak (no MFU)")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs per row, alternating rows; the best median counts")
    p.add_argument("--timeout", type=float, default=150,
                   help="seconds allowed per torch.compile run (default 150)")
    p.add_argument("--eager-timeout", type=float, default=60,
                   help="seconds allowed per other run (default 60; capped by --timeout)")
    p.add_argument("--budget", type=float, default=0,
                   help="seconds for the whole benchmark (0: no limit); rows that do not fit "
                        "are reported as skipped")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--self-test", action="store_true",
                   help="check the FLOP formula and the output parsing (no GPU), then exit")
    a = p.parse_args()
    a.eager_timeout = min(a.eager_timeout, a.timeout)
    if a.self_test:
        return self_test(a)

    configs = [x.strip() for x in a.configs.split(",") if x.strip()]
    bad = [x for x in configs if x not in ROWS]
    if bad or not configs:
        p.error(f"unknown config(s) {','.join(bad) or '(none)'}; choose from seed,large")
    order = [(cf, r) for cf in configs for r in ROWS[cf]]
    if a.rows is not None:
        want = [x.strip() for x in a.rows.split(",") if x.strip()]
        known = set(ALL_ROWS) | {f"{cf}/{r}" for cf in ROWS for r in ROWS[cf]}
        bad = [x for x in want if x not in known]
        if bad or not want:
            p.error(f"unknown row(s) {','.join(bad) or '(none)'}; rows: {','.join(ALL_ROWS)} "
                    f"(or CONFIG/ROW)")
        order = [(cf, r) for cf, r in order if r in want or f"{cf}/{r}" in want]
        if not order:
            p.error("no row of the chosen configs matches --rows")
    for name, steps, warmup, window in (
            ("seed", a.seed_steps, a.seed_warmup, 10),
            ("large", a.large_steps, a.large_warmup, a.large_window)):
        if steps < 2 or warmup < 1 or warmup >= steps or window < 1:
            p.error(f"{name}: need steps >= 2, 1 <= warmup < steps, window >= 1")
    if (a.large_batch < 1 or a.large_seq < 1 or a.large_vocab < 1 or a.repeats < 1
            or a.peak_iters < 1 or a.timeout <= 0 or a.eager_timeout <= 0 or a.budget < 0):
        p.error("need positive large-batch/seq/vocab, repeats, peak-iters, timeout; budget >= 0")
    if "seed" in configs and a.seed_steps - a.seed_warmup < 200:
        print(f"bench_gpu.py: warning: seed: only {a.seed_steps - a.seed_warmup} timed steps "
              f"(< 200)", file=sys.stderr)

    t0 = time.monotonic()
    cfgs = make_configs(a)
    cmds = {f"{cf}/{r}": command(a, cfgs[cf], r) for cf, r in order}
    runs = {f"{cf}/{r}": [] for cf, r in order}
    skipped = []

    def left():
        return a.budget - (time.monotonic() - t0) if a.budget else float("inf")

    if a.no_peak:
        peak = {"ok": False, "error": "--no-peak"}
    else:
        peak = measure_peak(a, min(120.0, max(left(), 1.0)))
        if peak["ok"]:
            print(f"[peak] bf16 {peak['bf16']['tflops']:.1f} TFLOP/s, fp32 (no TF32) "
                  f"{peak['fp32']['tflops']:.1f} TFLOP/s  ({peak['seconds']:.1f} s)",
                  file=sys.stderr, flush=True)
        else:
            print(f"[peak] FAILED: {peak['error']}\n  " + "\n  ".join(peak.get("output_tail", [])[-8:]),
                  file=sys.stderr, flush=True)

    run_order = sorted(order, key=lambda x: priority(*x))
    total = a.repeats * len(run_order)
    n = 0
    for r in range(a.repeats):
        for cf, row in run_order:
            key = f"{cf}/{row}"
            n += 1
            remaining = left()
            if remaining < 10:
                res = {"ok": False, "skipped": True, "seconds": 0.0,
                       "error": f"the --budget of {a.budget:g} s was spent"}
                skipped.append(key)
            else:
                limit = a.timeout if row_parts(row)[1] == "compile" else a.eager_timeout
                res = run_once(cmds[key], min(limit, remaining))
            runs[key].append(res)
            if res["ok"]:
                tflops = cfgs[cf]["flops_per_step"] / (res["ms_per_step"] * 1e-3) / 1e12
                msg = (f"{res['ms_per_step']:9.3f} ms/step {res['tokens_per_s']:12.1f} tokens/s "
                       f"{tflops:8.2f} TFLOP/s  ({res['seconds']:.1f} s)")
            else:
                msg = (("SKIPPED: " if res.get("skipped") else "FAILED: ") + res["error"] +
                       "".join("\n  " + x for x in res.get("output_tail", [])[-8:]))
            print(f"[{n}/{total}] {key:<30} {msg}", file=sys.stderr, flush=True)
            write_json(a.json, build_json(a, cfgs, order, runs, cmds, peak, skipped, False, t0))

    result = build_json(a, cfgs, order, runs, cmds, peak, skipped, True, t0)
    write_json(a.json, result)
    print_tables(result, cfgs)
    return 1 if result["failed"] or result["skipped"] else 0


if __name__ == "__main__":
    sys.exit(main())
