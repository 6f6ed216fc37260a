#!/usr/bin/env python3
"""CPU speed of tinytrain against PyTorch 1.13 eager, 2.x eager and 2.x torch.compile on the seed workload, side by side.

Four variants, each run --repeats times in alternating rounds (per round: tinytrain, then each
PyTorch variant in turn), so that drifting machine load hits all alike:

  tinytrain              <tinytrain> train --backend cpu --threads N --steps S
  torch-system           /usr/bin/python3 examples/seed_pytorch.py --device cpu --threads N --steps S
                         (Debian's python3-torch, PyTorch 1.13)
  torch-venv             the same script with the project venv's Python (.venv/, made by
                         `scripts/setup.sh venv`: PyTorch 2.x), found by `scripts/venv_python.sh torch`
  torch-venv-compile     the same, plus `--compile step` (--compile-scope): the whole train step
                         torch.compile'd (inductor's C++ backend: it needs g++), compiled in the
                         untimed warm-up steps

all with OMP_NUM_THREADS=N. Two figures per variant, each the median over the rounds:

  - whole process: the wall time of the command, start-up, initialisation, compilation and
    every step included;
  - steady step: ms/step from the `done: {steps} steps | {tokens/s} tokens/s | {ms/step}
    ms/step` line every variant prints (the median over 10-step windows after the warm-up:
    tinytrain's first step, PyTorch's first 3 steps, which for torch.compile hold the
    compilation).

and, for each PyTorch variant, its time over tinytrain's, per round, then the median over the
rounds (whole process and steady step).

A variant that cannot run is skipped with a one-line reason and the rest still run: no venv
(or one without torch), or a PyTorch without torch.compile. Before timing, torch.compile is
tried on a small function; if that fails, or the compiled seed script fails, times out or dies,
the compile variant is "not available: <reason>". --compile-cache fresh (the default) gives each
compiled run an empty inductor cache (TORCHINDUCTOR_CACHE_DIR), so every round pays the whole
compilation, as a first run does; shared lets the rounds share one, so round 1 compiles and the
later ones load the kernels it built.

--isa avx2 confines every engine to AVX2 (and FMA), as on the AVX2-only processors most
laptops and desktops have: tinytrain's loops by TINYTRAIN_CPU_SIMD=avx2 and its GEMM library
by that library's own setting, PyTorch by ATEN_CPU_CAPABILITY=avx2 (which also sets the vector
width of the C++ that torch.compile generates), the OpenBLAS Debian's PyTorch runs its GEMMs on
by OPENBLAS_CORETYPE=Haswell, the MKL the PyPI PyTorch runs its GEMMs on by
MKL_ENABLE_INSTRUCTIONS=AVX2, and the oneDNN inside both by ONEDNN_MAX_CPU_ISA=AVX2. Before
timing, each engine is asked what it then uses (`tinytrain doctor --json`; PyTorch's CPU
capability, OpenBLAS's core name, the vector ISA inductor picks), and the run stops if any
would use more than asked. (MKL does not say which kernels it picked; it is capped by its
setting.) --isa native (the default) leaves every library to choose for itself.

Prints a table and the tools' own reports; --json FILE also writes every run. --self-test
checks the parsing, the ratios and the table on canned runs, without running anything.

Usage: /usr/bin/python3 tools/bench_cpu.py [--threads N] [--steps S] [--repeats R] [--isa native|avx2]
       [--variants tinytrain,torch-system,torch-venv,torch-venv-compile] [--python PY] [--venv-python PY]
       [--compile-scope step|model] [--compile-cache fresh|shared] [--json FILE] [--self-test]
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED_PY = os.path.join(ROOT, "examples", "seed_pytorch.py")
DONE_RE = re.compile(r"^done:\s*(\d+)\s+steps\s*\|\s*([0-9.eE+-]+)\s+tokens/s\s*\|"
                     r"\s*([0-9.eE+-]+)\s+ms/step\b")  # (tinytrain's goes on: TFLOP/s, MFU)
COMPILE_RE = re.compile(r"^compile: (\S+) \| (\d+) graphs compiled in the \d+ warm-up steps, (\d+) after them")

VARIANTS = ("tinytrain", "torch-system", "torch-venv", "torch-venv-compile")

# What confines each library to AVX2 (and FMA). tinytrain's doctor names the GEMM library's
# setting too; these are the ones for the libraries PyTorch and tinytrain load.
AVX2_ENV = {
    "TINYTRAIN_CPU_SIMD": "avx2",      # tinytrain's loops (kernels/cpu/cpu_simd.h), and its GEMMs' cap
    "ATEN_CPU_CAPABILITY": "avx2",     # PyTorch's own kernels, and the width of inductor's C++
    "OPENBLAS_CORETYPE": "Haswell",    # OpenBLAS (Debian PyTorch's GEMMs; tinytrain's when it is the GEMM library)
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",  # MKL (the PyPI PyTorch's GEMMs)
    "ONEDNN_MAX_CPU_ISA": "AVX2",      # oneDNN (tinytrain's GEMMs; PyTorch's mkldnn ops)
}

# Asked of each PyTorch before timing: one JSON line. With compile=1 it also tries torch.compile
# on a small function (inductor's C++ backend) and reports the error's first line if it fails.
TORCH_PROBE = r"""
import ctypes, json, re, sys, traceback
out = {}
try:
    import torch
except Exception as e:
    print(json.dumps({"error": f"import torch failed: {type(e).__name__}: {e}"})); sys.exit(0)
out["version"] = torch.__version__.split("+")[0]
config = torch.__config__.show()
m = re.search(r"CPU capability usage: (\S+)", config)
cap = m.group(1) if m else "unknown"
if hasattr(torch.backends, "cpu") and hasattr(torch.backends.cpu, "get_cpu_capability"):
    cap = torch.backends.cpu.get_cpu_capability()
out["capability"] = cap
m = re.search(r"BLAS_INFO=(\w+)", config)
out["blas"] = m.group(1) if m else "unknown"
out["openblas_core"] = None
for line in open("/proc/self/maps"):
    if "/libopenblas" in line and ".so" in line:
        lib = ctypes.CDLL(line.split()[-1]); lib.openblas_get_corename.restype = ctypes.c_char_p
        out["openblas_core"] = lib.openblas_get_corename().decode(); break
if sys.argv[1] == "1":
    if not hasattr(torch, "compile"):
        out["compile_error"] = f"torch {torch.__version__} has no torch.compile (needs PyTorch >= 2.0)"
    else:
        try:
            from torch._inductor import cpu_vec_isa
            isa = cpu_vec_isa.pick_vec_isa()
            out["inductor_isa"] = str(isa).split()[0] if isa else "none (scalar C++)"
            f = torch.compile(lambda x: torch.relu(x * 2.0 + 1.0).sum())
            x = torch.randn(1000)
            if abs(f(x).item() - torch.relu(x * 2.0 + 1.0).sum().item()) > 1e-2:
                raise RuntimeError("the compiled function returned a wrong result")
        except Exception as e:
            traceback.print_exc()
            msg = str(e).strip().splitlines()
            out["compile_error"] = f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]
print(json.dumps(out))
"""


def parse_done(output):
    """(steps, tokens/s, ms/step) from the last `done:` line of output, or None."""
    found = None
    for line in output.splitlines():
        m = DONE_RE.match(line.strip())
        if m:
            found = (int(m.group(1)), float(m.group(2)), float(m.group(3)))
    return found


def parse_compile(output):
    """(scope, graphs compiled in the warm-up, graphs after it) from seed_pytorch's `compile:` line, or None."""
    for line in output.splitlines():
        m = COMPILE_RE.match(line.strip())
        if m:
            return m.group(1), int(m.group(2)), int(m.group(3))
    return None


def first_line(text, limit=300):
    """The most telling line of a failed command's output: its own `error:` line, else the last one."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in reversed(lines):
        if "error:" in l:
            return l[:limit]
    return lines[-1][:limit] if lines else "no output"


def run_cmd(cmd, env, timeout):
    """Run cmd in its own process group; (returncode or None on timeout, output, wall seconds).
    On a timeout the whole group goes (torch.compile's compile workers included)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = None
    return rc, out, time.monotonic() - start


def run_once(name, cmd, env, timeout):
    """Run one benchmark command: (wall seconds, parsed `done:` line, output) or (None, reason, output)."""
    try:
        rc, out, wall = run_cmd(cmd, env, timeout)
    except OSError as e:
        return None, f"cannot run {cmd[0]}: {e.strerror}", ""
    if rc is None:
        return None, f"no result within {timeout:g} s", out
    done = parse_done(out)
    if rc != 0 or done is None:
        why = f"exit status {rc}" if rc != 0 else "no `done:` line"
        return None, f"{why}: {first_line(out)}", out
    return wall, done, out


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


def probe_torch(python, env, compile_check, timeout):
    """What PyTorch under `python` uses (TORCH_PROBE's dict), or {"error": reason}."""
    if compile_check:
        env = dict(env, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="bench_cpu_probe_inductor_"))
    try:
        rc, out, _ = run_cmd([python, "-c", TORCH_PROBE, "1" if compile_check else "0"], env, timeout)
    except OSError as e:
        return {"error": f"cannot run {python}: {e.strerror}"}
    finally:
        if compile_check:
            shutil.rmtree(env["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)
    if rc is None:
        return {"error": f"probing PyTorch took over {timeout:g} s"}
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {"error": f"probing PyTorch failed (exit status {rc}): {first_line(out)}"}


def torch_isa_text(probe, compiled, env):
    """One line: what a PyTorch variant computes with (under env)."""
    gemm = (f"OpenBLAS kernels {probe['openblas_core']}" if probe.get("openblas_core")
            else f"GEMMs in {probe.get('blas', 'unknown')}")
    if probe.get("blas") == "mkl":
        gemm += f" (MKL_ENABLE_INSTRUCTIONS={env.get('MKL_ENABLE_INSTRUCTIONS', 'unset')})"
    text = f"torch {probe['version']}: CPU capability {probe['capability']}, {gemm}"
    if compiled:
        text += f", inductor's C++ vectorised for {probe.get('inductor_isa', 'unknown')}"
    return text


def torch_over_avx2(probe, compiled):
    """What a PyTorch variant would use beyond AVX2 under --isa avx2, or None."""
    over = []
    if probe["capability"] != "AVX2":
        over.append(f"CPU capability {probe['capability']}")
    if probe.get("openblas_core") and probe["openblas_core"] not in ("Haswell", "Zen"):
        over.append(f"OpenBLAS kernels {probe['openblas_core']}")
    if compiled and probe.get("inductor_isa") not in ("avx2", "none (scalar C++)"):
        over.append(f"inductor ISA {probe.get('inductor_isa')}")
    return ", ".join(over) or None


def summarize(runs, order):
    """Medians per variant and, for each variant but tinytrain, its per-round ratios over
    tinytrain's (whole process and steady step) and their medians. runs[name] is a list, one per
    round, of {"wall_s", "ms_per_step", ...} or None where that round has no run of it."""
    out = {}
    base = runs["tinytrain"]
    for name in order:
        ok = [r for r in runs.get(name, []) if r is not None]
        if not ok:
            continue
        s = {k: statistics.median(r[k] for r in ok) for k in ("wall_s", "ms_per_step")}
        s["rounds"] = len(ok)
        if name != "tinytrain":
            for key, field in (("whole", "wall_s"), ("step", "ms_per_step")):
                per_round = [r[field] / b[field] for r, b in zip(runs[name], base)
                             if r is not None and b is not None]
                s[f"ratios_{key}"] = per_round
                s[f"ratio_{key}"] = statistics.median(per_round) if per_round else None
        out[name] = s
    return out


def table(summary, order, labels, unavailable):
    """The printed table: one line per variant, unavailable ones with their reason."""
    lines = [f"{'variant':<34} {'whole process s':>15} {'ms/step':>9} {'/tinytrain whole':>16} {'/tinytrain step':>15}"]
    for name in order:
        if name in unavailable:
            lines.append(f"{labels.get(name, name):<34} not available: {unavailable[name]}")
            continue
        if name not in summary:
            continue
        s = summary[name]
        rw = "-" if name == "tinytrain" or s["ratio_whole"] is None else f"{s['ratio_whole']:.2f}"
        rs = "-" if name == "tinytrain" or s["ratio_step"] is None else f"{s['ratio_step']:.2f}"
        lines.append(f"{labels.get(name, name):<34} {s['wall_s']:15.2f} {s['ms_per_step']:9.2f} {rw:>16} {rs:>15}")
    for name in order:
        if name in summary and name != "tinytrain":
            lines.append(f"{name} / tinytrain per round: whole process "
                         f"{', '.join(f'{x:.2f}' for x in summary[name]['ratios_whole'])}; steady step "
                         f"{', '.join(f'{x:.2f}' for x in summary[name]['ratios_step'])}")
    return "\n".join(lines)


def self_test():
    tt = "done: 50 steps | 11097.0 tokens/s | 92.28 ms/step | 0.085 TFLOP/s (no MFU: ...)"
    assert parse_done("step 10 | loss 6.4\n" + tt) == (50, 11097.0, 92.28)
    assert parse_done("no result") is None
    out = ("timing: 47 steps after 3 warm-up, 4 windows of <= 10: median 247.364 ms/step\n"
           "compile: step | 2 graphs compiled in the 3 warm-up steps, 0 after them\n"
           "done: 50 steps | 4139.6 tokens/s | 247.36 ms/step\n")
    assert parse_done(out) == (50, 4139.6, 247.36) and parse_compile(out) == ("step", 2, 0)
    assert first_line("Traceback\n  x\nseed_pytorch.py: error: torch.compile failed: X\n") == \
        "seed_pytorch.py: error: torch.compile failed: X"
    r = lambda w, ms: {"wall_s": w, "ms_per_step": ms}
    runs = {"tinytrain": [r(4.0, 100.0), r(5.0, 100.0), r(4.0, 90.0)],
            "torch-system": [r(8.0, 150.0), r(12.0, 170.0), r(10.0, 180.0)],
            "torch-venv-compile": [r(60.0, 250.0), None, r(50.0, 270.0)]}
    order = ("tinytrain", "torch-system", "torch-venv", "torch-venv-compile")
    s = summarize(runs, order)
    assert s["tinytrain"]["wall_s"] == 4.0 and s["torch-system"]["ms_per_step"] == 170.0
    assert s["torch-system"]["ratios_whole"] == [2.0, 2.4, 2.5] and s["torch-system"]["ratio_whole"] == 2.4
    assert s["torch-system"]["ratio_step"] == 1.7  # per round 1.5, 1.7, 2.0
    assert s["torch-venv-compile"]["rounds"] == 2 and s["torch-venv-compile"]["ratio_whole"] == 13.75
    labels = {"tinytrain": "tinytrain", "torch-system": "PyTorch 1.13.0 eager"}
    text = table(s, order, labels, {"torch-venv": "no project venv at .venv/"})
    assert "torch-venv                         not available: no project venv at .venv/" in text, text
    assert re.search(r"PyTorch 1.13.0 eager\s+10.00\s+170.00\s+2.40\s+1.70", text), text
    assert "torch-system / tinytrain per round: whole process 2.00, 2.40, 2.50" in text, text
    probe = {"version": "2.11.0", "capability": "AVX512", "blas": "mkl", "openblas_core": None,
             "inductor_isa": "avx512"}
    assert torch_over_avx2(probe, True) == "CPU capability AVX512, inductor ISA avx512"
    assert torch_over_avx2(dict(probe, capability="AVX2", inductor_isa="avx2"), True) is None
    assert torch_over_avx2({"capability": "AVX2", "openblas_core": "SkylakeX"}, False) == "OpenBLAS kernels SkylakeX"
    print("self-test: ok")
    return 0


def find_venv_python():
    """(the venv's Python, None) from scripts/venv_python.sh torch, or (None, its reason)."""
    proc = subprocess.run([os.path.join(ROOT, "scripts", "venv_python.sh"), "torch"], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode == 0 and proc.stdout.strip():
        return proc.stdout.strip(), None
    return None, first_line(proc.stderr) if proc.stderr.strip() else f"scripts/venv_python.sh exit status {proc.returncode}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tinytrain", default=os.path.join(ROOT, "build", "tinytrain"),
                   help="tinytrain binary (default: build/tinytrain)")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="interpreter with the system's PyTorch (Debian's python3-torch, 1.13): torch-system")
    p.add_argument("--venv-python", default=None,
                   help="interpreter with PyTorch 2.x: torch-venv and torch-venv-compile (default: the "
                        "project venv's, from scripts/venv_python.sh torch; '' skips both)")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated, from {','.join(VARIANTS)} (tinytrain is always run)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=50, help="training steps per run")
    p.add_argument("--repeats", type=int, default=5, help="alternating rounds; the medians count")
    p.add_argument("--isa", choices=("native", "avx2"), default="native",
                   help="avx2: confine every engine and its libraries to AVX2 (see above)")
    p.add_argument("--compile-scope", choices=("step", "model"), default="step",
                   help="torch-venv-compile: seed_pytorch.py --compile step (the whole train step, "
                        "default) or --compile model (the model only)")
    p.add_argument("--compile-cache", choices=("fresh", "shared"), default="fresh",
                   help="fresh: an empty inductor cache per compiled run (each pays the whole "
                        "compilation); shared: one for all rounds (round 1 fills it)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per run")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--self-test", action="store_true", help="check the parsing and the table on canned runs")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if a.threads < 1 or a.steps < 4 or a.repeats < 1:
        p.error("threads and repeats must be >= 1, steps >= 4 (PyTorch's warm-up is 3 steps)")
    chosen = ["tinytrain"] + [v.strip() for v in a.variants.split(",") if v.strip() and v.strip() != "tinytrain"]
    bad = [v for v in chosen if v not in VARIANTS]
    if bad:
        p.error(f"unknown variant(s) {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
    order = [v for v in VARIANTS if v in chosen]

    tinytrain = os.path.abspath(a.tinytrain)  # we run from the repo root
    n, s = str(a.threads), str(a.steps)
    env = dict(os.environ, OMP_NUM_THREADS=n)
    if a.isa == "avx2":
        env.update(AVX2_ENV)

    unavailable = {}  # variant -> one-line reason
    pythons = {"torch-system": a.python}
    venv_py, why = (a.venv_python, None) if a.venv_python is not None else find_venv_python()
    if not venv_py:
        why = why or "skipped by --venv-python ''"
    for v in ("torch-venv", "torch-venv-compile"):
        if venv_py:
            pythons[v] = venv_py
        elif v in order:
            unavailable[v] = why
    seed = [SEED_PY, "--device", "cpu", "--threads", n, "--steps", s]
    commands = {"tinytrain": [tinytrain, "train", "--backend", "cpu", "--threads", n, "--steps", s]}
    for v in ("torch-system", "torch-venv", "torch-venv-compile"):
        if v in pythons:
            commands[v] = [pythons[v]] + seed + (["--compile", a.compile_scope] if v == "torch-venv-compile" else [])

    loops, libs = tinytrain_isa(tinytrain, env, a.threads)
    isa = {"tinytrain": f"loops {loops}; GEMMs: " + "; ".join(f"{name} for {products}: {kernels} kernels ({width})"
                                                           for name, products, kernels, width in libs)}
    widths = [loops] + [width for _, _, _, width in libs]
    if a.isa == "avx2" and any(w not in ("avx2", "avx", "sse41") for w in widths):
        sys.exit(f"bench_cpu.py: error: --isa avx2, but tinytrain uses {isa['tinytrain']}")
    labels = {"tinytrain": "tinytrain", "torch-system": "PyTorch (system) eager",
              "torch-venv": "PyTorch (venv) eager", "torch-venv-compile": "PyTorch (venv) compile"}
    probes = {}
    for v in order[1:]:
        if v in unavailable:
            continue
        compiled = v == "torch-venv-compile"
        key = (pythons[v], compiled)
        if key not in probes:
            if compiled:
                print(f"bench_cpu.py: trying torch.compile on a small function ({pythons[v]})...",
                      file=sys.stderr, flush=True)
            probes[key] = probe_torch(pythons[v], env, compiled, min(a.timeout, 900))
        probe = probes[key]
        if "error" in probe:
            if v == "torch-system":
                sys.exit(f"bench_cpu.py: error: {v} ({pythons[v]}): {probe['error']}")
            unavailable[v] = probe["error"]
            continue
        if compiled and "compile_error" in probe:
            unavailable[v] = f"torch.compile failed on a small function: {probe['compile_error']}"
            continue
        labels[v] = f"PyTorch {probe['version']} " + (f"compile ({a.compile_scope})" if compiled else "eager")
        isa[v] = torch_isa_text(probe, compiled, env)
        over = torch_over_avx2(probe, compiled) if a.isa == "avx2" else None
        if over:
            sys.exit(f"bench_cpu.py: error: --isa avx2, but {v} would use {over} ({isa[v]})")

    cache_root = tempfile.mkdtemp(prefix="bench_cpu_inductor_")
    runs = {name: [] for name in order}
    compile_info = []
    try:
        for r in range(a.repeats):
            for name in order:
                if name in unavailable:
                    runs[name].append(None)
                    continue
                run_env = env
                if name == "torch-venv-compile":
                    cache = os.path.join(cache_root, "shared" if a.compile_cache == "shared" else f"round{r + 1}")
                    run_env = dict(env, TORCHINDUCTOR_CACHE_DIR=cache)
                wall, done, out = run_once(name, commands[name], run_env, a.timeout)
                if wall is None:
                    if name == "torch-venv-compile":  # torch.compile can fail late: say so, go on
                        unavailable[name] = f"round {r + 1}: {done}"
                        print(f"bench_cpu.py: {name}: not available: {done}\n"
                              + "\n".join(out.splitlines()[-15:]), file=sys.stderr, flush=True)
                        runs[name] = [None] * (r + 1)
                        continue
                    sys.exit(f"bench_cpu.py: error: {name}: {done}; command: {' '.join(commands[name])}\n"
                             + "\n".join(out.splitlines()[-20:]))
                steps, tps, ms = done
                run = {"wall_s": wall, "tokens_per_s": tps, "ms_per_step": ms}
                if name == "torch-venv-compile":
                    c = parse_compile(out)
                    if c:
                        run["graphs_in_warmup"], run["graphs_after_warmup"] = c[1], c[2]
                        compile_info.append(c[2])
                runs[name].append(run)
                print(f"[{r + 1}/{a.repeats}] {name:<18} {wall:7.2f} s whole process {ms:9.2f} ms/step",
                      file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)

    summary = summarize(runs, order)
    print(f"seed workload, CPU, {a.threads} thread(s), {a.steps} steps, --isa {a.isa}, "
          f"median of {a.repeats} alternating rounds"
          + (f", torch.compile cache {a.compile_cache}" if "torch-venv-compile" in summary else ""))
    print(table(summary, order, labels, unavailable))
    if any(compile_info):
        print(f"warning: torch-venv-compile compiled graphs after the warm-up (per round: {compile_info}): "
              f"its steady step includes compilation")
    for name in order:
        if name in isa and name in summary:
            print(f"{name}: {isa[name]}")

    if a.json:
        result = {
            "workload": "seed", "backend": "cpu", "threads": a.threads, "steps": a.steps, "isa": a.isa,
            "repeats": a.repeats, "compile_scope": a.compile_scope, "compile_cache": a.compile_cache,
            "variants": {name: ({**summary[name], "label": labels.get(name, name), "isa": isa.get(name),
                                 "runs": runs[name], "command": commands[name]}
                                if name in summary else
                                {"not_available": unavailable.get(name, "no run"), "runs": runs[name],
                                 "command": commands.get(name)})
                         for name in order},
            "environment": {k: env[k] for k in AVX2_ENV if k in env},
        }
        tmp = f"{a.json}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
