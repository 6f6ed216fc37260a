#!/usr/bin/env python3
"""CPU speed of tinytrain against PyTorch eager on the seed workload, side by side.

Runs `<tinytrain> train --backend cpu --threads N --steps S` and
`/usr/bin/python3 examples/seed_pytorch.py --device cpu --threads N --steps S`, both with
OMP_NUM_THREADS=N, in --repeats alternating pairs (tinytrain, then PyTorch) so that drifting
machine load hits both alike. Two figures per engine, each the median over the pairs:

  - whole process: the wall time of the command, start-up, initialisation and every step
    included; the ratio is PyTorch's time over tinytrain's, per pair, then the median;
  - steady step: ms/step from the `done: {steps} steps | {tokens/s} tokens/s | {ms/step}
    ms/step` line both print (the median over 10-step windows after the warm-up).

--isa avx2 confines both engines to AVX2 (and FMA), as on the AVX2-only processors most
laptops and desktops have: tinytrain's loops by TINYTRAIN_CPU_SIMD=avx2 and its GEMM library
by that library's own setting, PyTorch by ATEN_CPU_CAPABILITY=avx2, the OpenBLAS it runs its
GEMMs on by OPENBLAS_CORETYPE=Haswell, and the oneDNN inside it by ONEDNN_MAX_CPU_ISA=AVX2.
Before timing, each engine is asked what it then uses (`tinytrain doctor --json`, PyTorch's
`torch.__config__.show()` and OpenBLAS's core name), and the run stops if either would use
more than asked. --isa native (the default) leaves every library to choose for itself.

Prints a table and the tools' own reports; --json FILE also writes every run.

Usage: /usr/bin/python3 tools/bench_cpu.py [--threads N] [--steps S] [--repeats R] [--isa native|avx2] [--json FILE]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DONE_RE = re.compile(r"^done:\s*(\d+)\s+steps\s*\|\s*([0-9.eE+-]+)\s+tokens/s\s*\|"
                     r"\s*([0-9.eE+-]+)\s+ms/step\b")  # (tinytrain's goes on: TFLOP/s, MFU)

# What confines each library to AVX2 (and FMA). tinytrain's doctor names the GEMM library's
# setting too; these are the ones for the libraries PyTorch and tinytrain load.
AVX2_ENV = {
    "TINYTRAIN_CPU_SIMD": "avx2",      # tinytrain's loops (kernels/cpu/cpu_simd.h), and its GEMMs' cap
    "ATEN_CPU_CAPABILITY": "avx2",     # PyTorch's own kernels
    "OPENBLAS_CORETYPE": "Haswell",    # OpenBLAS (PyTorch's GEMMs; tinytrain's when it is the GEMM library)
    "ONEDNN_MAX_CPU_ISA": "AVX2",      # oneDNN (tinytrain's GEMMs; PyTorch's mkldnn ops)
}


def parse_done(output):
    """(steps, tokens/s, ms/step) from the last `done:` line of output, or None."""
    found = None
    for line in output.splitlines():
        m = DONE_RE.match(line.strip())
        if m:
            found = (int(m.group(1)), float(m.group(2)), float(m.group(3)))
    return found


def run_once(name, cmd, env, timeout):
    """Run one benchmark command; return (wall seconds, parsed `done:` line) or exit with its output."""
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except FileNotFoundError:
        sys.exit(f"bench_cpu.py: error: {name}: cannot run {cmd[0]}")
    except subprocess.TimeoutExpired:
        sys.exit(f"bench_cpu.py: error: {name}: no result within {timeout} s")
    wall = time.monotonic() - start
    done = parse_done(proc.stdout)
    if proc.returncode != 0 or done is None:
        tail = "\n".join(proc.stdout.splitlines()[-20:])
        why = f"exit status {proc.returncode}" if proc.returncode != 0 else "no `done:` line"
        sys.exit(f"bench_cpu.py: error: {name}: {why}; command: {' '.join(cmd)}\n{tail}")
    return wall, done


def tinytrain_isa(tinytrain, env, threads):
    """(the loops' width, [(library, its products, its kernels, their width)]) under env, from
    `tinytrain doctor --json`."""
    proc = subprocess.run([tinytrain, "doctor", "--json", "--backend", "cpu", "--threads", str(threads)],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        probes = {p["name"]: p for p in json.loads(proc.stdout)["probes"]}
        libs = [(lib["name"], lib["products"], lib["kernels"], lib["isa"])
                for lib in probes["cpu.blas"]["numbers"]["gemm_libraries"]]
        return probes["cpu"]["numbers"]["loops_isa"], libs
    except (ValueError, KeyError) as e:
        sys.exit(f"bench_cpu.py: error: `tinytrain doctor --json` did not report the instruction sets "
                 f"in use ({e}); stderr: {proc.stderr.strip()}")


def pytorch_isa(python, env):
    """(PyTorch's CPU capability, the OpenBLAS core it loaded) under env."""
    probe = ("import ctypes, torch, re\n"
             "cap = re.search(r'CPU capability usage: (\\S+)', torch.__config__.show()).group(1)\n"
             "core = 'unknown'\n"
             "for line in open('/proc/self/maps'):\n"
             "    if '/libopenblas' in line and '.so' in line:\n"
             "        lib = ctypes.CDLL(line.split()[-1]); lib.openblas_get_corename.restype = ctypes.c_char_p\n"
             "        core = lib.openblas_get_corename().decode(); break\n"
             "print(cap, core)\n")
    proc = subprocess.run([python, "-c", probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_cpu.py: error: asking PyTorch its CPU capability failed: {proc.stderr.strip()}")
    cap, core = proc.stdout.split()
    return cap, core


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tinytrain", default=os.path.join(ROOT, "build", "tinytrain"),
                   help="tinytrain binary (default: build/tinytrain)")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="interpreter with PyTorch (Debian's python3-torch)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=50, help="training steps per run")
    p.add_argument("--repeats", type=int, default=5, help="alternating pairs; the medians count")
    p.add_argument("--isa", choices=("native", "avx2"), default="native",
                   help="avx2: confine both engines and their libraries to AVX2 (see above)")
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
    if a.isa == "avx2":
        env.update(AVX2_ENV)

    loops, libs = tinytrain_isa(tinytrain, env, a.threads)
    cap, core = pytorch_isa(a.python, env)
    isa = {"tinytrain": f"loops {loops}; GEMMs: " + "; ".join(f"{name} for {products}: {kernels} kernels ({width})"
                                                           for name, products, kernels, width in libs),
           "pytorch": f"CPU capability {cap}, OpenBLAS kernels {core}"}
    widths = [loops] + [width for _, _, _, width in libs]
    if a.isa == "avx2" and (any(w not in ("avx2", "avx", "sse41") for w in widths) or cap != "AVX2"
                            or core not in ("Haswell", "Zen")):
        sys.exit(f"bench_cpu.py: error: --isa avx2, but tinytrain uses {isa['tinytrain']} and PyTorch "
                 f"{isa['pytorch']}")

    runs = {name: [] for name in engines}
    for r in range(a.repeats):
        for name, cmd in engines.items():
            wall, (steps, tps, ms) = run_once(name, cmd, env, a.timeout)
            runs[name].append({"wall_s": wall, "tokens_per_s": tps, "ms_per_step": ms})
            print(f"[{r + 1}/{a.repeats}] {name:<9} {wall:7.2f} s whole process {ms:9.2f} ms/step",
                  file=sys.stderr, flush=True)

    median = {name: {k: statistics.median(run[k] for run in rs) for k in ("wall_s", "ms_per_step")}
              for name, rs in runs.items()}
    pair_ratios = [pt["wall_s"] / tt["wall_s"] for tt, pt in zip(runs["tinytrain"], runs["pytorch"])]
    ratio = statistics.median(pair_ratios)
    step_ratio = median["pytorch"]["ms_per_step"] / median["tinytrain"]["ms_per_step"]

    print(f"seed workload, CPU, {a.threads} thread(s), {a.steps} steps, --isa {a.isa}, "
          f"median of {a.repeats} alternating pairs")
    print(f"{'engine':<10} {'whole process s':>16} {'ms/step':>10}")
    for name in engines:
        print(f"{name:<10} {median[name]['wall_s']:16.2f} {median[name]['ms_per_step']:10.2f}")
    print(f"pytorch/tinytrain whole process: {ratio:.3f} (pairs: {', '.join(f'{x:.2f}' for x in pair_ratios)}); "
          f"steady step: {step_ratio:.3f}")
    for name in engines:
        print(f"{name}: {isa[name]}")

    if a.json:
        result = {
            "workload": "seed", "backend": "cpu", "threads": a.threads, "steps": a.steps, "isa": a.isa,
            "repeats": a.repeats, "ratio_whole_process": ratio, "pair_ratios": pair_ratios,
            "ratio_steady_step": step_ratio,
            "engines": {name: {**median[name], "isa": isa[name], "runs": runs[name], "command": engines[name]}
                        for name in engines},
            "environment": {k: env[k] for k in AVX2_ENV if k in env},
        }
        tmp = f"{a.json}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        os.replace(tmp, a.json)


if __name__ == "__main__":
    main()
