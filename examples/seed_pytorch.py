#!/usr/bin/env python3
"""The seed workload in plain PyTorch eager: the baseline tinytrain is measured against.

TinyTransformer = nn.Embedding(512,128) -> nn.TransformerEncoder(2 x
nn.TransformerEncoderLayer(d_model=128, nhead=4, batch_first=True), PyTorch defaults
otherwise: dim_feedforward 2048, dropout 0.1, relu, post-norm) -> nn.Linear(128,512);
AdamW(lr=1e-4), CrossEntropyLoss, random tokens, batch 16, seq 64.

Logs `step {s:3d} | loss {l:.4f} | alloc {MB} MB` every 10 steps and ends with one line
`done: {steps} steps | {tokens/s:.1f} tokens/s | {ms/step:.2f} ms/step`. The --warmup steps
(which count towards --steps) are not timed; the steps after them are timed in windows of 10,
each ending with a device synchronize, and ms/step is the median over the windows (robust to
one-off stalls); tokens/s follows from it. Losses logged inside a window are read and printed
after its clock stops, so logging never synchronizes inside a timed window. All batches are
made on the device before the first step.

--compile wraps the model in torch.compile (default mode): its forward and, through
AOTAutograd, its backward are compiled; the loss and AdamW stay eager. --compile step compiles
the whole train step instead: one torch.compile'd function that zeroes the gradients, runs
forward + loss + backward and AdamW's step (Dynamo breaks the graph at backward(), so that is
a forward graph with its compiled backward, then a graph for zero_grad's and AdamW's updates).
Compilation happens in the warm-up steps, so give it a few (--warmup >= 1); after the timing a
`compile:` line says how many graphs were compiled in the warm-up and after it (a recompile
inside the timed steps would show there).

--amp bf16|fp16 runs forward + loss under torch.autocast(device_type=<device>, dtype=...)
(parameters, gradients and AdamW stay fp32); fp16 adds a GradScaler (init scale 65536,
growth 2, backoff 0.5, interval 2000: tinytrain's dynamic loss scaling) and prints the final
scale after the timing. fp16 autocast on the CPU needs a PyTorch that supports it (1.13 does
not): the script refuses that combination rather than silently running fp32.

The model-shape flags (--vocab-size --d-model --n-head --n-layer --d-ff --activation
--norm-first --causal --pos-embedding --max-seq-len --layer-norm-eps --dropout) and --batch
--seq --lr mirror `tinytrain train`'s and default to the seed workload, so the same config can
run in both engines. --window sets the steps per timing window (default 10).

Run with Debian's PyTorch:  /usr/bin/python3 examples/seed_pytorch.py --device cpu --threads 2
On a GPU (tools/bench_gpu.py):  python3 examples/seed_pytorch.py --device cuda --steps 300 --warmup 20 [--compile]
PyTorch 2.x on the CPU, compiled (tools/bench_cpu.py):  .venv/bin/python examples/seed_pytorch.py --device cpu --threads 1 --compile step
"""
import argparse
import contextlib
import os
import sys
import time
import traceback
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from model_flags import add_model_flags, model_config  # noqa: E402  (no torch import)

BATCH, SEQ = 16, 64
WINDOW = 10  # steps per timing window (default of --window)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="default: cuda if available, else cpu")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps at the start")
    p.add_argument("--compile", nargs="?", const="model", default=None, choices=("model", "step"),
                   help="torch.compile the model (--compile or --compile model), or the whole train "
                        "step (--compile step); default mode, compiled during the warm-up")
    p.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none",
                   help="torch.autocast dtype around forward + loss (fp16: with a GradScaler)")
    p.add_argument("--window", type=int, default=WINDOW,
                   help=f"steps per timing window (default {WINDOW})")
    # The model and run shape, as `tinytrain train` spells it. Model defaults (None here)
    # are the seed workload's, from tinytrain_model.SEED_CONFIG (read after the torch import).
    add_model_flags(p)
    p.add_argument("--batch", type=int, default=BATCH, help=f"sequences per step (default {BATCH})")
    p.add_argument("--seq", type=int, default=SEQ, help=f"tokens per sequence (default {SEQ})")
    p.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate (default 1e-4)")
    args = p.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.warmup >= args.steps:
        p.error("need steps >= 1 and 0 <= warmup < steps")
    if args.window < 1 or args.batch < 1 or args.seq < 1:
        p.error("window, batch and seq must be >= 1")
    if args.compile and args.warmup < 1:
        p.error("--compile needs --warmup >= 1 (compilation must stay out of the timing)")
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

from tinytrain_model import SEED_CONFIG, build_model, validate_config  # noqa: E402

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


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


def seed_config():
    """SEED_CONFIG with the shape flags given on the command line applied."""
    cfg = model_config(args, SEED_CONFIG)  # exactly the seed by default: dropout 0.1, relu, post-norm
    err = validate_config(cfg)
    if not err and args.seq > cfg["max_seq_len"]:
        err = f"seq {args.seq} exceeds max_seq_len {cfg['max_seq_len']} (raise --max-seq-len)"
    if err:
        sys.exit(f"seed_pytorch.py: error: {err}")
    return cfg


def make_scaler(device):
    """The fp16 GradScaler (tinytrain's loss-scaling constants), or exit with a reason."""
    kw = dict(init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000)
    amp_scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if amp_scaler is not None:  # torch >= 2.3: torch.amp.GradScaler(device, ...)
        return amp_scaler(device, **kw)
    if device == "cuda":
        return torch.cuda.amp.GradScaler(**kw)
    sys.exit(f"seed_pytorch.py: error: --amp fp16 on the CPU needs torch.amp.GradScaler "
             f"(PyTorch >= 2.3); this is torch {torch.__version__}: use --amp bf16 or --device cuda")


def check_autocast(device):
    """Exit with a reason when this PyTorch cannot autocast to --amp on device (some versions
    only warn and run fp32, e.g. fp16 on the CPU in 1.13)."""
    dtype = AMP_DTYPES[args.amp]
    why = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast(device_type=device, dtype=dtype):
                got = torch.mm(torch.ones(2, 2, device=device), torch.ones(2, 2, device=device)).dtype
        if got != dtype:
            why = "; ".join(str(w.message).strip() for w in caught) or f"matmul ran in {got}"
    except (RuntimeError, ValueError, TypeError) as e:
        why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    if why:
        sys.exit(f"seed_pytorch.py: error: --amp {args.amp} is not supported on {device} by "
                 f"torch {torch.__version__} ({why})")


def main():
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("seed_pytorch.py: error: --device cuda but CUDA is not available")
    if args.compile and not hasattr(torch, "compile"):
        sys.exit(f"seed_pytorch.py: error: --compile needs torch.compile (PyTorch >= 2.0); "
                 f"this is torch {torch.__version__}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"seed_pytorch: torch {torch.__version__} | device {device} | "
          f"threads {torch.get_num_threads()} | OPENBLAS_NUM_THREADS "
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '-')} | OMP_WAIT_POLICY "
          f"{os.environ.get('OMP_WAIT_POLICY')} | compile {args.compile or 'off'} | "
          f"amp {args.amp}", flush=True)

    cfg = seed_config()
    if args.amp != "none":
        check_autocast(device)
    scaler = make_scaler(device) if args.amp == "fp16" else None
    print("config: " + " ".join(f"{k}={v}" for k, v in cfg.items()) +
          f" batch={args.batch} seq={args.seq} lr={args.lr:g}", flush=True)
    model = build_model(cfg).to(device)
    model.train()
    # The optimizer holds the parameters themselves: torch.compile's wrapper shares them.
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if args.compile == "model":
        model = torch.compile(model)
    loss_fn = nn.CrossEntropyLoss()
    vocab = cfg["vocab_size"]
    batch, seq, window = args.batch, args.seq, args.window
    amp_dtype = AMP_DTYPES.get(args.amp)

    # All batches up front, so token generation and host->device copies stay out of the timing.
    xs = torch.randint(0, vocab, (args.steps, batch, seq), device=device)
    ys = torch.randint(0, vocab, (args.steps, batch, seq), device=device)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def log(s, loss, alloc):
        print(f"step {s:3d} | loss {loss.item():.4f} | alloc {alloc / 2**20:.1f} MB", flush=True)

    def train_step(x, y):
        """One step: zero the gradients, forward + loss (under autocast with --amp), backward,
        AdamW (through the GradScaler with fp16); returns the loss."""
        optimizer.zero_grad(set_to_none=True)
        # autocast (when --amp) around forward + loss; backward runs outside it
        with (torch.autocast(device_type=device, dtype=amp_dtype) if amp_dtype is not None
              else contextlib.nullcontext()):
            logits = model(x)
            loss = loss_fn(logits.reshape(-1, vocab), y.reshape(-1))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)  # skipped when the scaled gradients hold inf/NaN
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss

    step_fn = torch.compile(train_step) if args.compile == "step" else train_step
    dynamo_counters = None
    if args.compile:
        from torch._dynamo.utils import counters as dynamo_counters
    graphs_in_warmup = 0

    window_ms = []       # ms/step of each full timed window
    window_start = None  # clock at the start of the current window
    pending = []         # (step, loss, alloc) logged inside the current window
    for s in range(args.steps):
        if s == args.warmup:
            sync()
            if dynamo_counters is not None:
                graphs_in_warmup = dynamo_counters["stats"]["unique_graphs"]
            window_start = time.perf_counter()
        try:
            loss = step_fn(xs[s], ys[s])
        except Exception as e:  # torch.compile fails on first use (no compiler, no triton...)
            if args.compile and s == 0:
                traceback.print_exc()
                sys.exit(f"seed_pytorch.py: error: torch.compile failed on the first step: "
                         f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
            raise
        if s % 10 == 0 or s == args.steps - 1:
            # memory_allocated is a host-side counter: reading it does not synchronize
            alloc = torch.cuda.memory_allocated() if device == "cuda" else state_bytes(model, optimizer)
            if window_start is None:
                log(s, loss, alloc)
            else:
                pending.append((s, loss.detach(), alloc))
        if window_start is not None and ((s + 1 - args.warmup) % window == 0 or s == args.steps - 1):
            sync()
            now = time.perf_counter()
            n = (s + 1 - args.warmup) % window or window
            if n == window or not window_ms:  # a short last window counts only if it is the only one
                window_ms.append(1000.0 * (now - window_start) / n)
            for p in pending:
                log(*p)
            pending = []
            window_start = time.perf_counter()
    window_ms.sort()
    k = len(window_ms)
    ms = window_ms[k // 2] if k % 2 else 0.5 * (window_ms[k // 2 - 1] + window_ms[k // 2])
    print(f"timing: {args.steps - args.warmup} steps after {args.warmup} warm-up, {k} windows "
          f"of <= {window}: median {ms:.3f} ms/step, min {window_ms[0]:.3f}, max {window_ms[-1]:.3f}",
          flush=True)
    if dynamo_counters is not None:
        graphs = dynamo_counters["stats"]["unique_graphs"]
        print(f"compile: {args.compile} | {graphs_in_warmup} graphs compiled in the {args.warmup} "
              f"warm-up steps, {graphs - graphs_in_warmup} after them", flush=True)
    if scaler is not None:  # after the timing: get_scale() synchronizes
        print(f"amp: fp16 | final loss scale {scaler.get_scale():g}", flush=True)
    print(f"done: {args.steps} steps | {batch * seq / (ms / 1000.0):.1f} tokens/s | "
          f"{ms:.2f} ms/step", flush=True)


if __name__ == "__main__":
    main()
