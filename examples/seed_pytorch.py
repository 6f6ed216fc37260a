#!/usr/bin/env python3
"""The seed workload in plain PyTorch eager: the baseline tinytrain is measured against.

TinyTransformer = nn.Embedding(512,128) -> nn.TransformerEncoder(2 x
nn.TransformerEncoderLayer(d_model=128, nhead=4, batch_first=True), PyTorch defaults
otherwise: dim_feedforward 2048, dropout 0.1, relu, post-norm) -> nn.Linear(128,512);
AdamW(lr=1e-4), CrossEntropyLoss, random tokens, batch 16, seq 64.

Logs `step {s:3d} | loss {l:.4f} | alloc {MB} MB` every 10 steps and ends with one line
`done: {steps} steps | {tokens/s:.1f} tokens/s | {ms/step:.2f} ms/step`, timed over the
steps after the --warmup steps (which count towards --steps).

Run with Debian's PyTorch:  /usr/bin/python3 examples/seed_pytorch.py --device cpu --threads 2
"""
import argparse
import os
import sys
import time

BATCH, SEQ = 16, 64


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="default: cuda if available, else cpu")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps at the start")
    args = p.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.warmup >= args.steps:
        p.error("need steps >= 1 and 0 <= warmup < steps")
    if args.threads is not None and args.threads < 1:
        p.error("threads must be >= 1")
    return args


args = parse_args()
# Debian's torch runs GEMMs in OpenBLAS's own pthread pool, beside torch's OpenMP pool.
# OpenBLAS sizes its pool from the environment when loaded (torch.set_num_threads does not
# reach it), so set it here, before the import. And with libgomp's default spin-waiting,
# the idle OpenMP workers spin on the cores OpenBLAS computes on: on 2 cores, 2+2 threads
# ran 5-10x slower than 1+2. Passive waiting removes that (overridable from the shell).
if args.threads is not None:
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402  (after the environment is set)
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from tinytrain_model import SEED_CONFIG, build_model  # noqa: E402


def state_bytes(model, optimizer):
    """Bytes of parameters + gradients + optimizer state (the CPU stand-in for 'alloc')."""
    total = 0
    for p in model.parameters():
        total += p.numel() * p.element_size()
        if p.grad is not None:
            total += p.grad.numel() * p.grad.element_size()
    for state in optimizer.state.values():
        for v in state.values():
            if torch.is_tensor(v):
                total += v.numel() * v.element_size()
    return total


def main():
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("seed_pytorch.py: error: --device cuda but CUDA is not available")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"seed_pytorch: torch {torch.__version__} | device {device} | "
          f"threads {torch.get_num_threads()} | OPENBLAS_NUM_THREADS "
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '-')} | OMP_WAIT_POLICY "
          f"{os.environ.get('OMP_WAIT_POLICY')}", flush=True)

    cfg = dict(SEED_CONFIG)  # exactly the seed: dropout 0.1, relu, post-norm
    model = build_model(cfg).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    vocab = cfg["vocab_size"]

    # All batches up front, so token generation and host->device copies stay out of the timing.
    xs = torch.randint(0, vocab, (args.steps, BATCH, SEQ), device=device)
    ys = torch.randint(0, vocab, (args.steps, BATCH, SEQ), device=device)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    t0 = None
    for s in range(args.steps):
        if s == args.warmup:
            sync()
            t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        logits = model(xs[s])
        loss = loss_fn(logits.reshape(-1, vocab), ys[s].reshape(-1))
        loss.backward()
        optimizer.step()
        if s % 10 == 0 or s == args.steps - 1:
            alloc = torch.cuda.memory_allocated() if device == "cuda" else state_bytes(model, optimizer)
            print(f"step {s:3d} | loss {loss.item():.4f} | alloc {alloc / 2**20:.1f} MB", flush=True)
    sync()
    elapsed = time.perf_counter() - t0
    timed = args.steps - args.warmup
    print(f"done: {args.steps} steps | {timed * BATCH * SEQ / elapsed:.1f} tokens/s | "
          f"{1000.0 * elapsed / timed:.2f} ms/step", flush=True)


if __name__ == "__main__":
    main()
