#!/usr/bin/env python3
"""GPU speed of tinytrain against PyTorch on the seed workload, side by side in one run.

Four engines, each a separate process doing the same training (TinyTransformer, batch 16,
seq 64, AdamW, dropout 0.1) for --steps steps:

  tinytrain-graph    <tinytrain> train --backend cuda --cuda-graph on  --steps S --log-every 10
  tinytrain-eager    <tinytrain> train --backend cuda --cuda-graph off --steps S --log-every 10
  pytorch-eager      <python> examples/seed_pytorch.py --device cuda --steps S --warmup W
  pytorch-compile    the same with --compile (torch.compile, default mode)

Every one prints a final `done: {steps} steps | {tokens/s} tokens/s | {ms/step} ms/step` line
with the median ms/step over windows of 10 steps (tinytrain: the windows between its log
points, the one ending at step 0 untimed; seed_pytorch.py: windows after --warmup untimed
steps, each ended by torch.cuda.synchronize), and that line is all we time by. The last
`step N | loss L` line is kept as a sanity check (the engines draw different random tokens
and dropout masks, so losses agree only roughly). If `tinytrain train --help` lists a --warmup flag it gets
--warmup W too.

Prints a table: engine, ms/step (median), tokens/s, and tokens/s relative to PyTorch eager
and to torch.compile (x1.50 = 1.5 times their tokens/s). An engine that fails is reported as
failed, the others still run; the exit status is 1 if any failed. --json FILE writes
everything (commands, each run's numbers, output tails of failures).

Usage: python3 tools/bench_gpu.py [--steps 300] [--warmup 20] [--repeats 1] [--json FILE]
       [--engines tinytrain-graph,tinytrain-eager,pytorch-eager,pytorch-compile]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH, SEQ = 16, 64
ENGINES = ("tinytrain-graph", "tinytrain-eager", "pytorch-eager", "pytorch-compile")
DONE_RE = re.compile(r"^done:\s*(\d+)\s+steps\s*\|\s*([0-9.eE+-]+)\s+tokens/s\s*\|"
                     r"\s*([0-9.eE+-]+)\s+ms/step\b")
STEP_RE = re.compile(r"^step\s+(\d+)\s*\|\s*loss\s+([0-9.eE+-]+|nan|inf)")


def parse_output(output):
    """{'steps', 'tokens_per_s', 'ms_per_step'} from the last `done:` line (None if there is
    none) plus 'last_step'/'last_loss' from the last `step N | loss L` line."""
    done = last = None
    for line in output.splitlines():
        line = line.strip()
        m = DONE_RE.match(line)
        if m:
            done = {"steps": int(m.group(1)), "tokens_per_s": float(m.group(2)),
                    "ms_per_step": float(m.group(3))}
        m = STEP_RE.match(line)
        if m:
            last = (int(m.group(1)), float(m.group(2)))
    if done is not None and last is not None:
        done["last_step"], done["last_loss"] = last
    return done


def run_once(name, cmd, timeout):
    """Run one engine; return a result dict with 'ok' and either numbers or 'error'."""
    t0 = time.monotonic()
    try:
        # Own process group: on a timeout the whole group goes (torch.compile's workers too).
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)
    except OSError as e:
        return {"ok": False, "error": f"cannot run {cmd[0]}: {e.strerror}", "seconds": 0.0}
    try:
        output, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        output, _ = proc.communicate()
        return {"ok": False, "error": f"no result within {timeout:g} s", "seconds": timeout,
                "output_tail": (output or "").splitlines()[-20:]}
    seconds = round(time.monotonic() - t0, 2)
    done = parse_output(output)
    if rc != 0 or done is None:
        why = f"exit status {rc}" if rc != 0 else "no `done:` line"
        return {"ok": False, "error": why, "exit_code": rc, "seconds": seconds,
                "output_tail": output.splitlines()[-20:]}
    return dict(done, ok=True, seconds=seconds)


def has_flag(binary, subcommand, flag):
    """Whether `binary subcommand --help` mentions flag (so newer flags are used when there)."""
    try:
        out = subprocess.run([binary, subcommand, "--help"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return re.search(r"(^|\s)" + re.escape(flag) + r"\b", out) is not None


def commands(a):
    tinytrain = os.path.abspath(a.tinytrain)
    seed = os.path.join(ROOT, "examples", "seed_pytorch.py")
    tt = [tinytrain, "train", "--backend", "cuda", "--steps", str(a.steps), "--log-every", "10"]
    if has_flag(tinytrain, "train", "--warmup"):
        tt += ["--warmup", str(a.warmup)]
    py = [a.python, seed, "--device", "cuda", "--steps", str(a.steps), "--warmup", str(a.warmup)]
    return {
        "tinytrain-graph": tt + ["--cuda-graph", "on"],
        "tinytrain-eager": tt + ["--cuda-graph", "off"],
        "pytorch-eager": py,
        "pytorch-compile": py + ["--compile"],
    }


def ratio(result, ref):
    if not (result and result.get("ok") and ref and ref.get("ok")):
        return None
    return result["tokens_per_s"] / ref["tokens_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tinytrain", default=os.path.join(ROOT, "build", "tinytrain"),
                   help="tinytrain binary (default: build/tinytrain)")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with a CUDA PyTorch (default: this one)")
    p.add_argument("--steps", type=int, default=300,
                   help="training steps per run, warm-up included (default 300)")
    p.add_argument("--warmup", type=int, default=20,
                   help="untimed steps at the start of a PyTorch run (default 20)")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs per engine, alternating engines; the best median counts")
    p.add_argument("--timeout", type=float, default=300, help="seconds allowed per run")
    p.add_argument("--engines", default=",".join(ENGINES),
                   help="comma-separated subset of " + ",".join(ENGINES))
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = p.parse_args()
    engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    bad = [e for e in engines if e not in ENGINES]
    if bad or not engines:
        p.error(f"unknown engine(s) {','.join(bad) or '(none)'}; choose from {','.join(ENGINES)}")
    if a.steps < 1 or a.warmup < 1 or a.warmup >= a.steps or a.repeats < 1:
        p.error("need steps >= 1, 1 <= warmup < steps, repeats >= 1")
    if a.steps - a.warmup < 200:
        print(f"bench_gpu.py: warning: only {a.steps - a.warmup} timed steps (< 200)",
              file=sys.stderr)

    cmds = commands(a)
    runs = {name: [] for name in engines}
    for r in range(a.repeats):
        for name in engines:
            res = run_once(name, cmds[name], a.timeout)
            runs[name].append(res)
            if res["ok"]:
                msg = (f"{res['ms_per_step']:9.3f} ms/step {res['tokens_per_s']:12.1f} tokens/s"
                       f"  ({res['seconds']:.1f} s)")
            else:
                msg = f"FAILED: {res['error']}\n  " + "\n  ".join(res.get("output_tail", [])[-8:])
            print(f"[{r + 1}/{a.repeats}] {name:<16} {msg}", file=sys.stderr, flush=True)

    best = {}
    for name, rs in runs.items():
        ok = [x for x in rs if x["ok"]]
        best[name] = min(ok, key=lambda x: x["ms_per_step"]) if ok else rs[-1]
    eager, compiled = best.get("pytorch-eager"), best.get("pytorch-compile")

    print(f"seed workload on the GPU: batch {BATCH}, seq {SEQ}, {a.steps} steps "
          f"(PyTorch: {a.warmup} untimed warm-up), median ms/step over 10-step windows, "
          f"best of {a.repeats}")
    print(f"{'engine':<16} {'ms/step':>9} {'tokens/s':>12} {'vs eager':>9} {'vs compile':>10}"
          f" {'last loss':>10}")
    for name in engines:
        b = best[name]
        if not b["ok"]:
            print(f"{name:<16} {'failed':>9}  {b['error']}")
            continue
        cols = []
        for ref in (eager, compiled):
            x = ratio(b, ref)
            cols.append(f"x{x:.2f}" if x is not None else "-")
        loss = f"{b['last_loss']:.4f}" if "last_loss" in b else "-"
        print(f"{name:<16} {b['ms_per_step']:9.3f} {b['tokens_per_s']:12.1f} {cols[0]:>9} "
              f"{cols[1]:>10} {loss:>10}")
    print("vs eager / vs compile: tokens/s relative to PyTorch eager / torch.compile "
          "(above x1.00: faster)")

    failed = [name for name in engines if not best[name]["ok"]]
    if a.json:
        result = {
            "workload": "seed", "backend": "cuda", "batch": BATCH, "seq": SEQ,
            "steps": a.steps, "warmup": a.warmup, "repeats": a.repeats,
            "timing": "median ms/step over 10-step windows",
            "ratio_meaning": "tokens/s of the engine divided by that of the reference",
            "failed": failed,
            "engines": {
                name: {
                    "ok": best[name]["ok"],
                    "ms_per_step": best[name].get("ms_per_step"),
                    "tokens_per_s": best[name].get("tokens_per_s"),
                    "last_loss": best[name].get("last_loss"),
                    "vs_pytorch_eager": ratio(best[name], eager),
                    "vs_torch_compile": ratio(best[name], compiled),
                    "error": best[name].get("error"),
                    "command": cmds[name],
                    "runs": runs[name],
                } for name in engines
            },
        }
        tmp = f"{a.json}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        os.replace(tmp, a.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
