#!/usr/bin/env python3
"""Every kernel of a training step on a GPU: the time it measured there beside the time the
kernel model gave it on the emulator (engine/profile/kernel_model.h), so the model is judged
kernel by kernel (scripts/gpu_check.sh's kernel_model step).

The model comes from the emulator, written where the emulator runs (this project's machines):
    tinytrain profile --backend cuda-emu --estimate h200 --kernel-json MODEL.json [--precision P]
The measurement comes from the GPU: `tinytrain train --backend cuda --steps N` run under NVIDIA
Nsight Systems (nsys profile -t cuda), whose per-kernel sums (nsys stats --report
cuda_gpu_kern_sum) are divided by the steps. Kernels are matched by their identifier: the name
without namespaces, template arguments or parameters (layernorm_forward_kernel); cuBLASLt's
GEMMs (named sm90_xmma_gemm..., nvjet..., cutlass...) count together as one row, which the model
has at its ideal (the emulator runs no cuBLASLt kernel).

Prints one row per kernel: launches per step, measured us per step, modelled us per step, and
measured / modelled (1.00: the model was right; 3.00: the kernel took three times the model).
The first step runs eagerly (it makes the GEMM plans), so a few launches more than the model's
per step are expected. --json FILE gets the rows. Without nsys it says so and exits 77 (not run).
--self-test checks the parsing and the matching on canned output, without a GPU.

Usage: python3 tools/kernel_times.py --tinytrain build/tinytrain --model MODEL.json
       [--precision fp32] [--steps 20] [--nsys nsys] [--json OUT.json] [--timeout 120]
"""
import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

LIBRARY_GEMM = re.compile(r"gemm|xmma|nvjet|cutlass|gemv|splitk", re.I)
CUBLASLT_ROW = "cuBLASLt GEMMs"


def identifier(name):
    """layernorm_forward_kernel from 'void tt::(anonymous namespace)::layernorm_forward_kernel<float>(float*, ...)'
    or from the emulator's 'layernorm_forward_kernel<S>'."""
    name = name.replace("(anonymous namespace)", "")
    head = re.split(r"[<(]", name, maxsplit=1)[0].strip()
    head = head.split()[-1] if head.split() else head
    return head.split("::")[-1]


def row_of(name, library=False):
    return CUBLASLT_ROW if library or LIBRARY_GEMM.search(identifier(name)) else identifier(name)


def modelled_per_kernel(model):
    """{row: (launches, modelled us)} per step from the JSON `profile --kernel-json` wrote."""
    rows = {}
    for k in model["kernels"]:
        if k["kernel"].startswith("cudaMemsetAsync") or k["kernel"].startswith("cudaMemcpyAsync"):
            continue  # not kernels: nsys's kernel report has no row for them
        row = row_of(k["kernel"], k.get("library", False))
        launches, us = rows.get(row, (0, 0.0))
        rows[row] = (launches + k["launches"], us + k["modelled_us"])
    return rows


def measured_per_kernel(csv_text, steps):
    """{row: (launches per step, us per step)} from nsys's cuda_gpu_kern_sum CSV."""
    start = csv_text.find('"Time')
    if start < 0:
        start = csv_text.find("Time")
    rows = {}
    for r in csv.DictReader(io.StringIO(csv_text[max(start, 0):])):
        total = r.get("Total Time (ns)")
        if total is None:
            continue
        row = row_of(r["Name"])
        launches, us = rows.get(row, (0.0, 0.0))
        rows[row] = (launches + float(r["Instances"]) / steps, us + float(total) / 1e3 / steps)
    return rows


def table(measured, modelled):
    rows = []
    for row in sorted(set(measured) | set(modelled), key=lambda r: -measured.get(r, (0, 0))[1]):
        m_launch, m_us = measured.get(row, (0, None))
        p_launch, p_us = modelled.get(row, (0, None))
        ratio = m_us / p_us if m_us is not None and p_us else None
        rows.append({"kernel": row, "launches_measured": m_launch, "launches_modelled": p_launch,
                     "measured_us": m_us, "modelled_us": p_us, "measured_over_modelled": ratio})
    return rows


def print_table(rows, out=sys.stdout):
    fmt = "%-48s %9s %9s %12s %12s %9s"
    out.write(fmt % ("kernel", "runs/step", "model", "measured us", "MODEL us", "x model") + "\n")
    for r in rows:
        def num(v, f):
            return f % v if v is not None else "-"
        out.write(fmt % (r["kernel"][:48], num(r["launches_measured"], "%.1f"), num(r["launches_modelled"], "%d"),
                         num(r["measured_us"], "%.2f"), num(r["modelled_us"], "%.2f"),
                         num(r["measured_over_modelled"], "%.2f")) + "\n")


def run(args):
    nsys = shutil.which(args.nsys) or (args.nsys if os.path.exists(args.nsys) else None)
    if not nsys:
        print(f"kernel_times: no Nsight Systems ({args.nsys}) on this machine: per-kernel times need it; not run")
        return 77
    with open(args.model, encoding="utf-8") as f:
        model = json.load(f)
    with tempfile.TemporaryDirectory(prefix="kernel-times-") as tmp:
        report = os.path.join(tmp, "step")
        train = [args.tinytrain, "train", "--backend", "cuda", "--precision", args.precision, "--steps",
                 str(args.steps), "--log-every", str(args.steps)]
        r = subprocess.run([nsys, "profile", "-t", "cuda", "-o", report, "--force-overwrite", "true", *train],
                           capture_output=True, text=True, timeout=args.timeout)
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-2000:])
            print(f"kernel_times: nsys profile exited {r.returncode}")
            return 1
        s = subprocess.run([nsys, "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", report + ".nsys-rep"],
                           capture_output=True, text=True, timeout=args.timeout)
        if s.returncode != 0:
            print(s.stdout[-2000:], s.stderr[-2000:])
            print(f"kernel_times: nsys stats exited {s.returncode}")
            return 1
    rows = table(measured_per_kernel(s.stdout, args.steps), modelled_per_kernel(model))
    print(f"kernel_times: {args.precision}, {args.steps} steps measured on this GPU (nsys) beside the MODEL of "
          f"{args.model} ({model.get('device', '?')}; {model.get('inputs', '')[:200]}...)")
    print_table(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"precision": args.precision, "steps": args.steps, "model": model.get("inputs"), "rows": rows},
                      f, indent=1)
    return 0


def self_test():
    names = {
        "void tt::(anonymous namespace)::layernorm_forward_kernel<float>(float*, const float*, int)": "layernorm_forward_kernel",
        "tt::emu::adamw_kernel": "adamw_kernel",
        "flash_attention_forward_kernel<S, kRegs>": "flash_attention_forward_kernel",
        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    }
    for name, want in names.items():
        assert identifier(name) == want, (name, identifier(name))
    canned = ('Collecting data...\n"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)",'
              '"Max (ns)","StdDev (ns)","Name"\n'
              '60.0,2000000,200,10000.0,10000.0,9000,11000,100.0,"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_kernel"\n'
              '30.0,1000000,20,50000.0,50000.0,49000,51000,100.0,"void tt::(anonymous namespace)::flash_attention_forward_kernel<float, 1>(float*)"\n'
              '10.0,40000,20,2000.0,2000.0,1900,2100,10.0,"void tt::(anonymous namespace)::adamw_kernel(float*)"\n')
    measured = measured_per_kernel(canned, 10)
    assert measured[CUBLASLT_ROW] == (20.0, 200.0), measured
    assert measured["adamw_kernel"] == (2.0, 4.0), measured
    model = {"kernels": [
        {"op": "linear_forward", "kernel": "sm90_xmma_gemm_emulated_by_simt_cublaslt", "launches": 9, "library": True,
         "modelled_us": 50.0},
        {"op": "linear_backward", "kernel": "sm90_xmma_gemm_emulated_by_simt_cublaslt", "launches": 11, "library": True,
         "modelled_us": 100.0},
        {"op": "attention_forward", "kernel": "flash_attention_forward_kernel<S, kRegs>", "launches": 2,
         "modelled_us": 20.0},
        {"op": "fill_zero", "kernel": "cudaMemsetAsync", "launches": 1, "library": True, "modelled_us": 2.0}]}
    modelled = modelled_per_kernel(model)
    assert modelled[CUBLASLT_ROW] == (20, 150.0) and "cudaMemsetAsync" not in modelled, modelled
    rows = {r["kernel"]: r for r in table(measured, modelled)}
    assert abs(rows["flash_attention_forward_kernel"]["measured_over_modelled"] - 5.0) < 1e-12, rows
    assert rows["adamw_kernel"]["modelled_us"] is None, rows
    print_table(list(rows.values()), io.StringIO())
    print("self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tinytrain")
    ap.add_argument("--model")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--nsys", default="nsys")
    ap.add_argument("--json")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.tinytrain or not a.model:
        ap.error("--tinytrain and --model are needed (or --self-test)")
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
