#!/usr/bin/env python3
"""CPU GEMM libraries side by side on the GEMMs of a training step.

Builds tools/gemm_libraries.cpp once per library Debian ships (OpenBLAS and oneDNN come with
scripts/setup.sh; `apt-get install libblis-openmp-dev libxsmm-dev` adds the other two) and
times each on the linear layers of the seed workload and of examples/tiny_lm.sh, in the three
products the CPU backend's linear op makes (forward inp W^T, dinp d W, dweight d^T inp), at
each thread count and instruction set asked for. Each library is confined to an instruction set by its own environment variable:

    OpenBLAS  OPENBLAS_CORETYPE=Haswell | SkylakeX
    BLIS      BLIS_ARCH_TYPE=3 (haswell) | 0 (skx)
    oneDNN    ONEDNN_MAX_CPU_ISA=AVX2 | AVX512_CORE
    libxsmm   LIBXSMM_TARGET=hsw | skx

and each reports the kernels it then chose (printed under the table). Every result is checked
against a double-precision sum before it is timed. Prints, per (instruction set, threads), a
markdown table of milliseconds per step's worth of each shape (calls per step x median ms per
call, the three products together) and the step totals for both models.

Usage: python3 tools/bench_gemm_libs.py [--threads 1,2] [--isa avx2,avx512] [--libs ...] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "tools", "gemm_libraries.cpp")
LIB = "/usr/lib/x86_64-linux-gnu"
INC = "/usr/include/x86_64-linux-gnu"

# How to build against each library: compile flags, then link flags. Each needs its Debian package.
LIBRARIES = {
    "openblas": (["-DGEMM_LIB_OPENBLAS", f"-I{INC}/openblas-openmp"],
                 [f"-L{LIB}/openblas-openmp", f"-Wl,-rpath,{LIB}/openblas-openmp", "-lopenblas", "-fopenmp"],
                 f"{LIB}/openblas-openmp/libopenblas.so", "libopenblas-openmp-dev"),
    "blis": (["-DGEMM_LIB_BLIS", f"-I{INC}/blis-openmp"],
             [f"-L{LIB}/blis-openmp", f"-Wl,-rpath,{LIB}/blis-openmp", "-lblis", "-fopenmp"],
             f"{LIB}/blis-openmp/libblis.so", "libblis-openmp-dev"),
    "onednn": (["-DGEMM_LIB_ONEDNN"], ["-ldnnl", "-fopenmp"], f"{LIB}/libdnnl.so", "libdnnl-dev"),
    # libxsmm's own kernels are for small products; libxsmm_sgemm_omp (libxsmmext) tiles a large
    # one over them on OpenMP threads. It needs a BLAS underneath for what it does not JIT.
    "libxsmm": (["-DGEMM_LIB_LIBXSMM"],
                ["-fopenmp", "/usr/lib/libxsmmext.a", "/usr/lib/libxsmm.a", f"-L{LIB}/openblas-openmp",
                 f"-Wl,-rpath,{LIB}/openblas-openmp", "-lopenblas", "-ldl", "-lpthread"],
                "/usr/lib/libxsmm.a", "libxsmm-dev"),
}
ISA_ENV = {
    "avx2": {"OPENBLAS_CORETYPE": "Haswell", "BLIS_ARCH_TYPE": "3", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "LIBXSMM_TARGET": "hsw"},
    "avx512": {"OPENBLAS_CORETYPE": "SkylakeX", "BLIS_ARCH_TYPE": "0", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
               "LIBXSMM_TARGET": "skx"},
}

# The linear layers of a step: (name, O outputs, I inputs, calls per step) over N = 16 x 64 tokens.
TOKENS = 16 * 64
MODELS = {
    "seed": [("qkv", 384, 128, 2), ("attn out", 128, 128, 2), ("ffn in", 2048, 128, 2),
             ("ffn out", 128, 2048, 2), ("head", 512, 128, 1)],
    "tiny_lm": [("qkv", 384, 128, 4), ("attn out", 128, 128, 4), ("ffn in", 512, 128, 4),
                ("ffn out", 128, 512, 4), ("head", 4096, 128, 1)],
}
FORMS = ("forward", "dinp", "dweight")


def build(name, out_dir):
    cflags, lflags, needs, package = LIBRARIES[name]
    if not os.path.exists(needs):
        return None, f"{name}: not installed (apt-get install {package})"
    exe = os.path.join(out_dir, f"gemm_libraries_{name}")
    cmd = ["g++", "-O2", "-std=c++17", *cflags, SOURCE, "-o", exe, *lflags]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_gemm_libs.py: error: building for {name} failed: {' '.join(cmd)}\n{proc.stdout}")
    return exe, None


def run(exe, isa, threads, shapes):
    env = dict(os.environ, **ISA_ENV[isa], OMP_NUM_THREADS=str(threads))
    cmd = [exe, str(threads)] + [f"{TOKENS},{o},{i}" for o, i in shapes]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_gemm_libs.py: error: {' '.join(cmd)} failed:\n{proc.stdout}")
    kernels, ms = None, {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts[0] == "kernels":
            kernels = " ".join(parts[1:])
        else:
            ms[(parts[0], int(parts[2]), int(parts[3]))] = float(parts[4])
    return kernels, ms


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--isa", default="avx2,avx512", help="comma-separated: avx2, avx512")
    p.add_argument("--libs", default=",".join(LIBRARIES), help="comma-separated, of " + ", ".join(LIBRARIES))
    p.add_argument("--out-dir", default=os.path.join(ROOT, "build", "gemm_libraries"))
    p.add_argument("--json", metavar="FILE", help="also write every timing as JSON")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    isas = a.isa.split(",")
    libs = a.libs.split(",")
    for x in isas:
        if x not in ISA_ENV:
            p.error(f"--isa: unknown instruction set '{x}' (expected avx2 or avx512)")
    for x in libs:
        if x not in LIBRARIES:
            p.error(f"--libs: unknown library '{x}' (expected one of {', '.join(LIBRARIES)})")
    if "avx512" in isas and "avx512f" not in open("/proc/cpuinfo").read():
        p.error("--isa avx512: this CPU has no AVX-512 (give --isa avx2)")

    os.makedirs(a.out_dir, exist_ok=True)
    exes = {}
    for name in libs:
        exe, why = build(name, a.out_dir)
        if exe:
            exes[name] = exe
        else:
            print(f"skipped {why}", file=sys.stderr)
    shapes = sorted({(o, i) for layers in MODELS.values() for _, o, i, _ in layers})

    results = []
    for isa in isas:
        for t in threads:
            per_lib, kernels = {}, {}
            for name, exe in exes.items():
                kernels[name], per_lib[name] = run(exe, isa, t, shapes)
                print(f"[{isa} {t} thread(s)] {name}: {kernels[name]}", file=sys.stderr, flush=True)
            results.append({"isa": isa, "threads": t, "kernels": kernels,
                             "ms": {name: {f"{f} {o} {i}": v for (f, o, i), v in ms.items()}
                                    for name, ms in per_lib.items()}})
            print_table(isa, t, per_lib, kernels)

    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tokens": TOKENS, "models": MODELS, "results": results}, f, indent=2)
            f.write("\n")


def print_table(isa, threads, per_lib, kernels):
    names = list(per_lib)
    print(f"\n{isa}, {threads} thread(s): ms per step (calls per step x median ms per call; "
          "forward + dinp + dweight), fastest in bold")
    print("| model | layer (O x I) | form | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---:|" * len(names))
    for model, layers in MODELS.items():
        totals = {n: 0.0 for n in names}
        for layer, o, i, calls in layers:
            for form in FORMS:
                row = {n: calls * per_lib[n][(form, o, i)] for n in names}
                for n in names:
                    totals[n] += row[n]
                print(f"| {model} | {layer} ({o} x {i}) | {form} | " + cells(row, names) + " |")
        print(f"| **{model}** | **all GEMMs of a step** | | " + cells(totals, names) + " |")
    print("kernels: " + "; ".join(f"{n}: {kernels[n]}" for n in names))


def cells(row, names):
    best = min(row.values())
    return " | ".join(f"**{row[n]:.2f}**" if row[n] == best else f"{row[n]:.2f}" for n in names)


if __name__ == "__main__":
    main()
