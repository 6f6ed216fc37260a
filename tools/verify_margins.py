#!/usr/bin/env python3
"""How close `tinytrain verify` comes to its tolerances: runs it on each reference in each
precision given and prints, per check, the worst error / tolerance over all of them and where
(the margins of docs/numerics.md). Checks are split by the model's activation (the gradient
tolerance of 16-bit runs depends on it) and in_proj_bias's key rows are their own check.

usage: tools/verify_margins.py TINYTRAIN_BIN --backend cpu|cuda-emu --precision bf16,fp16 REF...
Exit status 1 when any run fails or errors.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

ROW = re.compile(r"^(.*?)\s+max_err\s+(\S+)\s+tol\s+(\S+)\s+(ok|FAIL)$")


def check_of(row_name, activation):
    """The check a verify row belongs to: 'relu:grads', 'gelu:final key rows', ..."""
    check = re.split(r"[.\[ ]", row_name, maxsplit=1)[0]
    if "[key rows]" in row_name:
        check += " key rows"
    return f"{activation}:{check}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binary")
    p.add_argument("refs", nargs="+")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--precision", default="bf16,fp16", help="comma-separated")
    a = p.parse_args()
    failed = False
    for precision in a.precision.split(","):
        worst = collections.defaultdict(lambda: (-1.0, "", 0.0, 0.0))
        for ref in a.refs:
            run = subprocess.run([a.binary, "verify", "--backend", a.backend, "--precision", precision, ref],
                                 capture_output=True, text=True)
            lines = run.stdout.strip().splitlines()
            print(f"{precision} {os.path.basename(ref)}: exit {run.returncode}: "
                  f"{lines[-1] if lines else run.stderr.strip()}")
            failed = failed or run.returncode != 0
            activation = "gelu" if '"activation":"gelu"' in run.stdout else "relu"
            for line in lines:
                m = ROW.match(line)
                if not m:
                    continue
                name, err, tol = m.group(1), float(m.group(2)), float(m.group(3))
                ratio = err / tol if tol > 0 else (0.0 if err == 0 else float("inf"))
                check = check_of(name, activation)
                if ratio > worst[check][0]:
                    worst[check] = (ratio, f"{os.path.basename(ref)}: {name}", err, tol)
        for check, (ratio, where, err, tol) in sorted(worst.items()):
            print(f"  {precision} {check:22s} worst {ratio:6.3f} of tol  (err {err:.3e}, tol {tol:.3e})  {where}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
