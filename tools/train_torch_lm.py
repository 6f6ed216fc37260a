#!/usr/bin/env python3
"""`tinytrain train --data DIR` in plain PyTorch: the reference a toy-LM run is compared against.

Trains a causal language model (tools/tinytrain_model.py's build_model, the engine's model
family) on token shards written by `tinytrain prepare` (docs/toy-lm.md), with what tinytrain
does, step for step:

- data: DIR/train.bin, DIR/val.bin (llm.c's format: 256 x int32 header [magic 20240520,
  version 1, token count], then count x uint16 tokens) and DIR/tokenizer.json (vocab_size).
  Each step draws, for each of the B rows, a start o uniform in [0, n_train - T - 1];
  x = tokens[o : o+T], y = tokens[o+1 : o+T+1]. The starts come from torch.randint (--windows
  torch, the default: the same distribution as tinytrain's, other draws) or from tinytrain's own
  counter-based generator (--windows tinytrain: engine/rng.h in Python, the very same windows).
- optimizer: AdamW(lr, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01 by default), mean
  cross-entropy, gradient clipping to --grad-clip (total L2 norm, when > 0), and the
  learning-rate schedule of lr_at() set before every optimizer step.
- evaluation (--eval-every N > 0): before every step s with s % N == 0 (on the parameters
  after s updates) and after the last step, the mean cross-entropy over M = eval_batches * B
  fixed windows of val.bin (eval_window_starts()), in eval mode (no dropout).

Output: tinytrain's progress line every --log-every steps (val: the latest evaluation),
  step 0/500 | loss 8.4340 | val 8.4616 | lr 2.000e-04 | ? tokens/s | ETA ? | alloc 9.7 MB
  ...
  final val loss 5.1234 | tokens/s 12345.6
and with --metrics FILE.jsonl tinytrain's metrics, one JSON object per line: per logged step
  {"step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "ms_per_step",
   "loss_scale", "alloc_mb"}  (val_loss null unless evaluated at that step)
and one line with "loss": null for an evaluation at a step that is not logged and for the
final evaluation (step = --steps). alloc_mb is the bytes of parameters, gradients and AdamW
state (tinytrain's also counts its activations).

Speed is measured as tinytrain measures it: the time of the windows between log points
(evaluation time taken out), the first window (one-time costs) not timed (tokens/s "?" and
null); the final tokens/s = B * T / the median ms per step over the timed windows.

Flags are `tinytrain train`'s names and defaults where they apply (model shape, --batch,
--seq, --steps, --seed, --lr, --weight-decay, --warmup-steps, --lr-schedule, --min-lr,
--grad-clip, --eval-every, --eval-batches, --log-every, --metrics, --threads, --backend).
Checkpoint flags (--save-dir, --save-every, --keep, --resume) are not supported.

Run with Debian's PyTorch:
  /usr/bin/python3 tools/train_torch_lm.py --data data/fortunes --norm-first true \
      --activation gelu --causal true --pos-embedding learned --steps 500 --threads 2
"""
import argparse
import json
import math
import os
import struct
import sys
import time

from model_flags import add_model_flags, model_config  # (this directory: no torch import)

PROG = "train_torch_lm.py"
SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD_HEADER_INTS = 256
SHARD_HEADER_BYTES = 4 * SHARD_HEADER_INTS


def fail(message):
    """One line on stderr, exit status 1: how every user error ends."""
    sys.exit(f"{PROG}: error: {message}")


# ---------------------------------------------------------------------------------------------
# Command line (parsed before torch is imported: the thread settings must precede the import)
# ---------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="directory of train.bin, val.bin, tokenizer.json")
    # The model. None: tinytrain's default (the seed workload's SEED_CONFIG); --vocab-size
    # defaults to tokenizer.json's vocab_size.
    add_model_flags(p)
    # The run.
    p.add_argument("--batch", type=int, default=16, help="sequences per step (default 16)")
    p.add_argument("--seq", type=int, default=64, help="tokens per sequence (default 64)")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps (default 100)")
    p.add_argument("--seed", type=int, default=1337,
                   help="seed of initialisation, batches and dropout (default 1337)")
    p.add_argument("--windows", choices=("torch", "tinytrain"), default="torch",
                   help="where the training windows' starts come from: torch.randint (default) "
                        "or tinytrain's own Philox draws, the very windows `train --data` reads")
    # The optimizer and its schedule.
    p.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (default 1e-4)")
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-steps", type=int, default=0, help="linear warm-up steps (default 0)")
    p.add_argument("--lr-schedule", choices=("constant", "cosine", "linear"), default="constant")
    p.add_argument("--min-lr", type=float, default=0.0, help="cosine/linear: final lr (default 0)")
    p.add_argument("--grad-clip", type=float, default=0.0,
                   help="clip the gradients' total L2 norm to this (0: no clipping)")
    # Evaluation and logging.
    p.add_argument("--eval-every", type=int, default=0,
                   help="evaluate on val.bin before every N-th step and after the last "
                        "(default 0: never)")
    p.add_argument("--eval-batches", type=int, default=8,
                   help="batches of B fixed val windows per evaluation (default 8)")
    p.add_argument("--log-every", type=int, default=10, help="log every N steps (default 10)")
    p.add_argument("--metrics", default=None, metavar="FILE.jsonl",
                   help="write one JSON object per logged step")
    # Where it runs.
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: all cores)")
    p.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="cpu",
                   help="cpu (default) | cuda | auto (cuda when available)")
    a = p.parse_args(argv)
    for name in ("batch", "seq", "steps", "log_every", "eval_batches"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.warmup_steps < 0 or a.threads < 0 or a.eval_every < 0:
        p.error("--warmup-steps, --threads and --eval-every must be >= 0")
    if not (a.lr > 0 and math.isfinite(a.lr)) or not (0 <= a.min_lr <= a.lr):
        p.error(f"need 0 < --lr and 0 <= --min-lr <= --lr, got lr {a.lr:g}, min-lr {a.min_lr:g}")
    if not (a.grad_clip >= 0 and math.isfinite(a.grad_clip)):
        p.error(f"--grad-clip must be >= 0, got {a.grad_clip:g}")
    if a.warmup_steps > a.steps:
        p.error(f"warmup_steps ({a.warmup_steps}) exceeds total_steps ({a.steps})")
    if a.seed < 0:
        p.error(f"--seed must be >= 0, got {a.seed}")
    return a


# ---------------------------------------------------------------------------------------------
# Token shards (no torch needed: tests import these to write their own shards)
# ---------------------------------------------------------------------------------------------

def write_shard(path, tokens):
    """Write tokens (ints in [0, 65535]) as a shard in llm.c's format."""
    header = [SHARD_MAGIC, SHARD_VERSION, len(tokens)] + [0] * (SHARD_HEADER_INTS - 3)
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{SHARD_HEADER_INTS}i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def read_shard(path, vocab_size):
    """The tokens of a shard as a numpy uint16 array, checked as tinytrain's TokenShard::open
    checks them; any problem exits with one line naming the file."""
    import numpy as np
    name = path
    if not os.path.exists(path):
        fail(f"{name}: cannot open: No such file or directory")
    if not os.path.isfile(path):
        fail(f"{name}: not a regular file")
    size = os.path.getsize(path)
    if size < SHARD_HEADER_BYTES:
        fail(f"{name}: {size} bytes, shorter than the {SHARD_HEADER_BYTES}-byte header")
    with open(path, "rb") as f:
        header = struct.unpack(f"<{SHARD_HEADER_INTS}i", f.read(SHARD_HEADER_BYTES))
        magic, version, count = header[0], header[1], header[2]
        if magic != SHARD_MAGIC:
            fail(f"{name}: magic {magic}, expected {SHARD_MAGIC} (not a token shard)")
        if version != SHARD_VERSION:
            fail(f"{name}: version {version}, expected {SHARD_VERSION}")
        if count < 1:
            fail(f"{name}: the header's token count is {count}, expected >= 1")
        need = SHARD_HEADER_BYTES + 2 * count
        if size != need:
            fail(f"{name}: the header's token count {count} needs a file of {need} bytes; "
                 f"the file has {size}")
        tokens = np.frombuffer(f.read(2 * count), dtype="<u2")
    if len(tokens) != count:
        fail(f"{name}: read {len(tokens)} of {count} tokens (the file changed while read?)")
    bad = np.flatnonzero(tokens >= vocab_size)
    if len(bad):
        fail(f"{name}: token {bad[0]} is {tokens[bad[0]]}, outside the vocabulary [0, {vocab_size})")
    return tokens


def read_tokenizer_json(data_dir):
    """tokenizer.json's (kind, vocab_size), checked."""
    path = os.path.join(data_dir, "tokenizer.json")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except OSError as e:
        fail(f"{path}: cannot open: {e.strerror}")
    except ValueError as e:
        fail(f"{path}: not JSON: {e}")
    if not isinstance(meta, dict):
        fail(f"{path}: expected a JSON object")
    kind, vocab = meta.get("kind"), meta.get("vocab_size")
    if kind not in ("bpe", "byte"):
        fail(f"{path}: field 'kind' must be \"bpe\" or \"byte\", got {kind!r}")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or not 1 <= vocab <= 65536:
        fail(f"{path}: field 'vocab_size' must be an integer in [1, 65536], got {vocab!r}")
    return kind, vocab


# ---------------------------------------------------------------------------------------------
# The schedule and the evaluation windows: plain functions, the same arithmetic as tinytrain
# ---------------------------------------------------------------------------------------------

def lr_at(step, total, peak, warmup, schedule, min_lr):
    """The learning rate of 0-based `step` (in double, as tinytrain computes it)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if schedule == "constant":
        return peak
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "cosine":
        return min_lr + 0.5 * (peak - min_lr) * (1.0 + math.cos(math.pi * progress))
    if schedule == "linear":
        return peak - (peak - min_lr) * progress
    raise ValueError(f"unknown schedule {schedule!r}")


def eval_window_starts(n_val, seq, count):
    """Start of each of `count` fixed val windows, spread evenly over [0, n_val - seq - 1]."""
    last = n_val - seq - 1
    return [(j * last) // max(count - 1, 1) for j in range(count)]


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# tinytrain's training windows (--windows tinytrain): engine/rng.h's rng_below64 in Python
# ---------------------------------------------------------------------------------------------

MASK32 = 0xFFFFFFFF
RNG_STREAM_WINDOWS = 0x3A1D  # engine/rng.h RngStream::Windows


def philox4x32_10(ctr, key0, key1):
    """Philox4x32-10 (kernels/common/philox.h): 4 counter words, 2 key words -> 4 random words."""
    c0, c1, c2, c3 = ctr
    for round_ in range(10):
        if round_ > 0:
            key0, key1 = (key0 + 0x9E3779B9) & MASK32, (key1 + 0xBB67AE85) & MASK32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ key0, p1 & MASK32, (p0 >> 32) ^ c3 ^ key1, p0 & MASK32)
    return c0, c1, c2, c3


def tinytrain_window_start(seed, step, row, n):
    """The start of row `row`'s window at step `step`: uniform in [0, n), from 64 Philox bits."""
    words = philox4x32_10((row & MASK32, row >> 32, step & MASK32, RNG_STREAM_WINDOWS),
                          seed & MASK32, (seed >> 32) & MASK32)
    return (((words[1] << 32) | words[0]) * n) >> 64


def main(args):
    import torch
    import torch.nn as nn
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from tinytrain_model import SEED_CONFIG, build_model, validate_config

    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)
    if args.backend == "cuda" and not torch.cuda.is_available():
        fail("--backend cuda but CUDA is not available")
    device = "cuda" if args.backend != "cpu" and torch.cuda.is_available() else "cpu"

    # Data and model config.
    kind, tok_vocab = read_tokenizer_json(args.data)
    cfg = model_config(args, SEED_CONFIG)
    vocab_size = getattr(args, "vocab_size", None)
    if vocab_size is None:
        cfg["vocab_size"] = tok_vocab
    elif vocab_size < tok_vocab:
        fail(f"--vocab-size {vocab_size} is below the tokenizer's {tok_vocab} ids")
    err = validate_config(cfg)
    if not err and not cfg["causal"]:
        err = ("--data trains a language model, which needs --causal true (a bidirectional "
               "model sees the very token it is asked to predict)")
    if not err and args.seq > cfg["max_seq_len"]:
        err = f"seq {args.seq} exceeds max_seq_len {cfg['max_seq_len']} (raise --max-seq-len)"
    if err:
        fail(err)
    vocab, B, T = cfg["vocab_size"], args.batch, args.seq
    train_path, val_path = os.path.join(args.data, "train.bin"), os.path.join(args.data, "val.bin")
    train_np, val_np = read_shard(train_path, vocab), read_shard(val_path, vocab)
    for path, toks in ((train_path, train_np), (val_path, val_np)):
        if len(toks) < T + 1:
            fail(f"{path}: {len(toks)} tokens, fewer than seq + 1 = {T + 1}")
    train_tokens = torch.from_numpy(train_np.astype("int64"))
    val_tokens = torch.from_numpy(val_np.astype("int64"))
    n_train = len(train_tokens)

    # The fixed evaluation set: M windows, made once (rows of x and y).
    M = args.eval_batches * B
    starts = torch.tensor(eval_window_starts(len(val_tokens), T, M), dtype=torch.int64)
    offsets = torch.arange(T, dtype=torch.int64)
    val_x = val_tokens[starts[:, None] + offsets].to(device)
    val_y = val_tokens[starts[:, None] + offsets + 1].to(device)

    print(f"{PROG}: torch {torch.__version__} | device {device} | threads {torch.get_num_threads()} | "
          f"data {args.data} ({kind} vocab {tok_vocab}: train {n_train}, val {len(val_tokens)} tokens)",
          flush=True)
    print("config: " + " ".join(f"{k}={v}" for k, v in cfg.items()) +
          f" batch={B} seq={T} steps={args.steps} seed={args.seed} lr={args.lr:g}"
          f" schedule={args.lr_schedule} warmup={args.warmup_steps} min_lr={args.min_lr:g}"
          f" grad_clip={args.grad_clip:g} weight_decay={args.weight_decay:g}", flush=True)

    torch.manual_seed(args.seed)  # initialisation and dropout
    model = build_model(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(args.beta1, args.beta2),
                                  eps=args.eps, weight_decay=args.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    batch_gen = torch.Generator().manual_seed(args.seed)  # the batches' own stream
    params = [p for p in model.parameters()]

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def evaluate():
        """Mean cross-entropy over all M * T tokens of the fixed val windows (no dropout)."""
        model.eval()
        total = 0.0
        with torch.no_grad():
            for i in range(0, M, B):
                logits = model(val_x[i:i + B])
                total += nn.functional.cross_entropy(
                    logits.reshape(-1, vocab), val_y[i:i + B].reshape(-1), reduction="sum").item()
        model.train()
        return total / (M * T)

    def state_mb():
        """Parameters + gradients + AdamW state in MiB (the CPU stand-in for tinytrain's alloc)."""
        total = sum(p.numel() * p.element_size() * (2 if p.grad is not None else 1) for p in params)
        for state in optimizer.state.values():
            total += sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v))
        return total / 2**20

    metrics = None
    if args.metrics:
        try:
            metrics = open(args.metrics, "w", encoding="utf-8")
        except OSError as e:
            fail(f"{args.metrics}: cannot write: {e.strerror}")

    def emit(record):
        if metrics:
            metrics.write(json.dumps(record) + "\n")
            metrics.flush()

    # Timing windows: from one log point to the next; evaluation time is taken out of them.
    # The first window (one-time costs: first touches of memory, thread pools) is not timed.
    window_ms = []                  # ms/step of every window but the first
    window_start = time.perf_counter()
    window_first_step = 0
    window_eval_s = 0.0
    first_window, first_window_ms = True, None
    eval_on = args.eval_every > 0
    last_val = None                 # the latest validation loss, shown in every log line
    alloc_mb = None

    model.train()
    for step in range(args.steps):
        val_loss = None
        if eval_on and step % args.eval_every == 0:  # the parameters after `step` updates
            sync()
            t0 = time.perf_counter()
            val_loss = last_val = evaluate()
            window_eval_s += time.perf_counter() - t0

        # The batch: B random windows of train.bin.
        if args.windows == "torch":
            o = torch.randint(0, n_train - T, (B,), generator=batch_gen)  # o in [0, n_train - T - 1]
        else:
            o = torch.tensor([tinytrain_window_start(args.seed, step, r, n_train - T) for r in range(B)])
        idx = o[:, None] + offsets
        x, y = train_tokens[idx].to(device), train_tokens[idx + 1].to(device)

        lr = lr_at(step, args.steps, args.lr, args.warmup_steps, args.lr_schedule, args.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        logged = step % args.log_every == 0
        if args.grad_clip > 0:  # returns the total norm before clipping
            grad_norm = torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
        elif logged:            # the same norm, for the log only
            grad_norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(p.grad) for p in params if p.grad is not None]))
        optimizer.step()
        if alloc_mb is None:    # (AdamW's state exists from the first step on)
            alloc_mb = state_mb()

        if not logged:
            if val_loss is not None:  # an evaluation at a step that is not logged
                emit(val_only_record(step, val_loss, alloc_mb))
            continue
        loss_value, grad_norm = loss.item(), float(grad_norm)  # (waits for the step)
        now = time.perf_counter()
        ms = 1e3 * (now - window_start - window_eval_s) / (step + 1 - window_first_step)
        if first_window:
            first_window_ms, first_window = ms, False
            ms = None  # not timed: like tinytrain, "?" in the log and null in the metrics
        else:
            window_ms.append(ms)
        window_start, window_first_step, window_eval_s = now, step + 1, 0.0
        tps = 1e3 * B * T / ms if ms else None
        # The log line of `tinytrain train --data`, field for field (so the two logs diff well).
        eta = format_duration(median(window_ms) * (args.steps - step - 1) / 1e3) if window_ms else "?"
        print(f"step {step}/{args.steps} | loss {loss_value:.4f} | "
              f"val {'-' if last_val is None else f'{last_val:.4f}'} | lr {lr:.3e} | "
              f"{'?' if tps is None else round(tps)} tokens/s | ETA {eta} | alloc {alloc_mb:.1f} MB",
              flush=True)
        emit({"step": step, "loss": loss_value, "val_loss": val_loss, "lr": lr,
              "grad_norm": grad_norm, "tokens_per_s": tps, "ms_per_step": ms,
              "loss_scale": 1.0, "alloc_mb": alloc_mb})
        if not math.isfinite(loss_value):
            fail(f"training diverged: the loss became non-finite at step {step} (try a lower --lr)")

    # The last window (steps after the last log point). Step 0 is always logged, so the first
    # window is closed by now; when it is the only window, it is the only measurement there is.
    sync()
    if window_first_step < args.steps:
        window_ms.append(1e3 * (time.perf_counter() - window_start - window_eval_s)
                         / (args.steps - window_first_step))
    if not window_ms:
        window_ms.append(first_window_ms)
    tokens_per_s = 1e3 * B * T / median(window_ms)
    # The final evaluation: the parameters after the last update.
    val_text = "-"
    if eval_on:
        val_loss = evaluate()
        emit(val_only_record(args.steps, val_loss, alloc_mb))
        val_text = f"{val_loss:.4f}"
    if metrics:
        metrics.close()
    print(f"final val loss {val_text} | tokens/s {tokens_per_s:.1f}", flush=True)


def val_only_record(step, val_loss, alloc_mb):
    """A metrics line of an evaluation alone (a step that is not logged, or after the last)."""
    return {"step": step, "loss": None, "val_loss": val_loss, "lr": None, "grad_norm": None,
            "tokens_per_s": None, "ms_per_step": None, "loss_scale": None, "alloc_mb": alloc_mb}


def format_duration(seconds):
    """"3m12s", "1h05m", "42s" (tinytrain's ETA)."""
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"

if __name__ == "__main__":
    ARGS = parse_args()
    # Debian's torch runs GEMMs in OpenBLAS's own thread pool, sized from the environment when
    # it loads (torch.set_num_threads does not reach it); idle libgomp workers spin on the
    # cores OpenBLAS needs unless told to wait passively (examples/seed_pytorch.py measured it).
    os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads or os.cpu_count())
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    main(ARGS)
