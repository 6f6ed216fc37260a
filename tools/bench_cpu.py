#!/usr/bin/env python3
"""CPU speed of tinytrain against PyTorch eager on the seed workload, side by side.

Runs `<tinytrain> train --backend cpu --threads N --steps S` and
`/usr/bin/python3 examples/seed_pytorch.py --device cpu --threads N --steps S`, both with
OMP_NUM_THREADS=N, alternating them --repeats times so that drifting machine load hits both
alike, and keeps each one's best run. Both print a final line
`done: {steps} steps | {tokens/s} tokens/s | {ms/step} ms/step ...`: these three are all we read.

Prints a table (engine, tokens/s, ms/step, tinytrain/PyTorch tokens/s); --json FILE also
writes the numbers.

Usage: /usr/bin/python3 tools/bench_cpu.py [--threads N] [--steps S] [--repeats R] [--json FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DONE_RE = re.compile(r"^done:\s*(\d+)\s+steps\s*\|\s*([0-9.eE+-]+)\s+tokens/s\s*\|"
                     r"\s*([0-9.eE+-]+)\s+ms/step\b")  # (tinytrain's goes on: TFLOP/s, MFU)


def parse_done(output):
    """(steps, tokens/s, ms/step) from the last `done:` line of output, or None."""
    found = None
    for line in output.splitlines():
        m = DONE_RE.match(line.strip())
        if m:
            found = (int(m.group(1)), float(m.group(2)), float(m.group(3)))
    return found


def run_once(name, cmd, env, timeout):
    """Run one benchmark command; return its parsed `done:` line or exit with its output."""
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except FileNotFoundError:
        sys.exit(f"bench_cpu.py: error: {name}: cannot run {cmd[0]}")
    except subprocess.TimeoutExpired:
        sys.exit(f"bench_cpu.py: error: {name}: no result within {timeout} s")
    done = parse_done(proc.stdout)
    if proc.returncode != 0 or done is None:
        tail = "\n".join(proc.stdout.splitlines()[-20:])
        why = f"exit status {proc.returncode}" if proc.returncode != 0 else "no `done:` line"
        sys.exit(f"bench_cpu.py: error: {name}: {why}; command: {' '.join(cmd)}\n{tail}")
    return done


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tinytrain", default=os.path.join(ROOT, "build", "tinytrain"),
                   help="tinytrain binary (default: build/tinytrain)")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="interpreter with PyTorch (Debian's python3-torch)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=100, help="training steps per run")
    p.add_argument("--repeats", type=int, default=3, help="runs per engine; the best counts")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per run")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = p.parse_args()
    if a.threads < 1 or a.steps < 1 or a.repeats < 1:
        p.error("threads, steps and repeats must be >= 1")

    tinytrain = os.path.abspath(a.tinytrain)  # we run from the repo root
    n, s = str(a.threads), str(a.steps)
    engines = {
        "tinytrain": [tinytrain, "train", "--backend", "cpu", "--threads", n, "--steps", s],
        "pytorch": [a.python, os.path.join(ROOT, "examples", "seed_pytorch.py"),
                    "--device", "cpu", "--threads", n, "--steps", s],
    }
    env = dict(os.environ, OMP_NUM_THREADS=n)

    runs = {name: [] for name in engines}
    for r in range(a.repeats):
        for name, cmd in engines.items():
            steps, tps, ms = run_once(name, cmd, env, a.timeout)
            runs[name].append({"tokens_per_s": tps, "ms_per_step": ms})
            print(f"[{r + 1}/{a.repeats}] {name:<9} {tps:10.1f} tokens/s {ms:9.2f} ms/step",
                  file=sys.stderr, flush=True)

    best = {name: max(rs, key=lambda x: x["tokens_per_s"]) for name, rs in runs.items()}
    ratio = best["tinytrain"]["tokens_per_s"] / best["pytorch"]["tokens_per_s"]

    print(f"seed workload, CPU, {a.threads} threads, {a.steps} steps, best of {a.repeats}")
    print(f"{'engine':<10} {'tokens/s':>12} {'ms/step':>10}")
    for name in engines:
        print(f"{name:<10} {best[name]['tokens_per_s']:12.1f} {best[name]['ms_per_step']:10.2f}")
    print(f"tinytrain/pytorch tokens/s: {ratio:.3f}")

    if a.json:
        result = {
            "workload": "seed", "backend": "cpu", "threads": a.threads, "steps": a.steps,
            "repeats": a.repeats, "ratio_tokens_per_s": ratio,
            "engines": {name: {"tokens_per_s": best[name]["tokens_per_s"],
                               "ms_per_step": best[name]["ms_per_step"],
                               "runs": runs[name], "command": engines[name]}
                        for name in engines},
        }
        tmp = f"{a.json}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        os.replace(tmp, a.json)


if __name__ == "__main__":
    main()
