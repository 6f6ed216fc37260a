#!/usr/bin/env python3
"""Plot training runs from their --metrics files (tinytrain train or tools/train_torch_lm.py).

    plot_metrics.py METRICS.jsonl [MORE.jsonl ...] --out FILE.png [--labels a,b,...]

Each file is one run: one JSON object per line, {"step", "loss", "val_loss", "tokens_per_s",
...}, any of them but "step" null or absent. One figure, two panels, the runs overlaid:
train loss (solid) and val loss (dashed, dots) against step; tokens/s against step.
Labels default to the file names (with their directory when names repeat).

A missing file or a malformed line is one line on stderr naming the file and line, exit 1.
Run with Debian's /usr/bin/python3 (matplotlib).
"""
import argparse
import json
import math
import os
import sys

PROG = "plot_metrics.py"


def fail(message):
    sys.exit(f"{PROG}: error: {message}")


def number(value, path, lineno, key):
    """A finite-or-not float from a JSON value, None for null/absent; anything else fails."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(f"{path}:{lineno}: field '{key}' must be a number or null, got {value!r}")
    return float(value)


def read_run(path):
    """{'step', 'loss', 'val_loss', 'tokens_per_s'}: lists of (step, value) pairs."""
    run = {"loss": [], "val_loss": [], "tokens_per_s": []}
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        fail(f"{path}: cannot open: {e.strerror}")
    with f:
        try:
            lines = f.readlines()
        except (OSError, UnicodeDecodeError) as e:
            fail(f"{path}: cannot read: {e}")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            fail(f"{path}:{lineno}: not JSON: {e}")
        if not isinstance(record, dict):
            fail(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            fail(f"{path}:{lineno}: field 'step' must be an integer, got {step!r}")
        for key in run:
            value = number(record.get(key), path, lineno, key)
            if value is not None and math.isfinite(value):
                run[key].append((step, value))
    if not any(run.values()):
        fail(f"{path}: no data (no line with a loss, val_loss or tokens_per_s)")
    return run


def default_labels(paths):
    names = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    if len(set(names)) == len(names):
        return names
    # Names repeat (runs/a/metrics.jsonl, runs/b/metrics.jsonl): keep the directory too.
    return [os.path.join(os.path.basename(os.path.dirname(os.path.abspath(p))), n)
            for p, n in zip(paths, names)]


def main():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("metrics", nargs="+", help="--metrics files (JSON lines), one per run")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--labels", default=None, help="comma-separated, one per file")
    p.add_argument("--title", default=None)
    args = p.parse_args()
    labels = default_labels(args.metrics)
    if args.labels is not None:
        labels = args.labels.split(",")
        if len(labels) != len(args.metrics):
            fail(f"--labels names {len(labels)} runs, but {len(args.metrics)} files are given")
    runs = [read_run(path) for path in args.metrics]

    import matplotlib
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_speed) = plt.subplots(2, 1, figsize=(9, 8), sharex=True,
                                            gridspec_kw={"height_ratios": [2, 1]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (run, label) in enumerate(zip(runs, labels)):
        c = colors[i % len(colors)]
        if run["loss"]:
            xs, ys = zip(*run["loss"])
            ax_loss.plot(xs, ys, color=c, lw=1.2, label=f"{label} train")
        if run["val_loss"]:
            xs, ys = zip(*run["val_loss"])
            ax_loss.plot(xs, ys, color=c, lw=1.6, ls="--", marker="o", ms=3, label=f"{label} val")
        if run["tokens_per_s"]:
            xs, ys = zip(*run["tokens_per_s"])
            ax_speed.plot(xs, ys, color=c, lw=1.2, marker=".", ms=3, label=label)
    ax_loss.set_ylabel("cross-entropy (nats/token)")
    ax_loss.set_title(args.title or "loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend(fontsize=8)
    ax_speed.set_ylabel("tokens/s")
    ax_speed.set_xlabel("step")
    ax_speed.grid(alpha=0.3)
    ax_speed.set_ylim(bottom=0)
    if any(r["tokens_per_s"] for r in runs):
        ax_speed.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(args.out, format="png", dpi=100)
    except OSError as e:
        fail(f"{args.out}: cannot write: {e.strerror}")
    print(f"{PROG}: {len(runs)} run(s) -> {args.out}")


if __name__ == "__main__":
    main()
