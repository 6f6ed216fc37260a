#!/usr/bin/env python3
"""Write a PyTorch reference run of the tinytrain model family as one safetensors file.

The file is what `tinytrain verify` checks the engine against (format:
docs/reference-format.md): initial parameters, the token batches, step-0 logits and gradients,
the loss and the global gradient norm of every step, and the parameters after the first and
after the last AdamW step. The lr may follow a schedule (warmup, then constant, cosine or
linear decay: scheduled_lr, the engine's kernels/common/lr_schedule.h) and the gradients may
be clipped to a global norm (torch.nn.utils.clip_grad_norm_).

Before the file is put in place, the run is replayed in float64 and the fp32 results are
measured against it with verify's own metrics (fp64_check); a reference whose own rounding
exceeds 0.1 of a tolerance is refused with exit status 3 (`--no-fp64-check` skips this).

Also holds the minimal safetensors writer and reader (the `safetensors` package is not
installed here); `--check FILE` reads a reference back and prints what it holds.

Run with Debian's PyTorch:  /usr/bin/python3 tools/make_reference.py --out FILE [flags]
Flag names match the engine's; defaults are the seed workload with 5 steps.
"""
import argparse
import json
import math
import os
import struct
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_flags import OneLineParser, add_model_flags, model_config  # noqa: E402
from tinytrain_model import (CONFIG_KEYS, SEED_CONFIG, block_options, build_model, load_parameters,  # noqa: E402
                             kv_heads, pre_activation_modules, validate_config)

FORMAT = "tinytrain-reference"
VERSION = "1"
# The optimizer metadata's fields, as the engine's adamw_config_to_json writes them.
OPTIMIZER_KEYS = ("lr", "beta1", "beta2", "eps", "weight_decay", "lr_schedule", "warmup_steps",
                  "total_steps", "min_lr", "grad_clip")

# ---------------------------------------------------------------------------------------
# safetensors I/O
# ---------------------------------------------------------------------------------------
# Layout: u64 little-endian header length N, N bytes of JSON header
# {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}
# padded with spaces to a multiple of 8, then the raw little-endian tensor bytes, laid out
# contiguously in header order (offsets are relative to the end of the header).
_TORCH_TO_ST = {torch.float32: ("F32", "<f4"), torch.float64: ("F64", "<f8"),
                torch.int32: ("I32", "<i4"), torch.int64: ("I64", "<i8")}
_ST_TO_NP = {st: np_dtype for st, np_dtype in _TORCH_TO_ST.values()}


def write_safetensors(path, tensors, metadata):
    """Write an ordered {name: tensor} and {str: str} metadata atomically to path."""
    header = OrderedDict()
    header["__metadata__"] = OrderedDict((str(k), str(v)) for k, v in metadata.items())
    blobs = []
    offset = 0
    for name, t in tensors.items():
        if t.dtype not in _TORCH_TO_ST:
            raise TypeError(f"{name}: unsupported dtype {t.dtype}")
        st_dtype, np_dtype = _TORCH_TO_ST[t.dtype]
        blob = t.detach().cpu().contiguous().numpy().astype(np_dtype, copy=False).tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)  # pad so the data starts 8-byte aligned
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)  # readers never see a half-written file


def read_safetensors(path):
    """Return (OrderedDict name -> torch tensor, metadata dict); checks the layout strictly."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(data[8:8 + n].decode("utf-8"), object_pairs_hook=OrderedDict)
    metadata = header.pop("__metadata__", {})
    body = memoryview(data)[8 + n:]
    tensors = OrderedDict()
    expected_begin = 0
    for name, info in header.items():
        np_dtype = _ST_TO_NP.get(info["dtype"])
        if np_dtype is None:
            raise ValueError(f"{path}: {name}: unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        count = math.prod(info["shape"])
        if begin != expected_begin or end - begin != count * np.dtype(np_dtype).itemsize:
            raise ValueError(f"{path}: {name}: bad data_offsets {info['data_offsets']}")
        if end > len(body):
            raise ValueError(f"{path}: {name}: data runs past the end of the file")
        arr = np.frombuffer(body[begin:end], dtype=np_dtype).reshape(info["shape"])
        tensors[name] = torch.from_numpy(arr.copy())
        expected_begin = end
    if expected_begin != len(body):
        raise ValueError(f"{path}: {len(body) - expected_begin} trailing bytes after the data")
    return tensors, metadata


# ---------------------------------------------------------------------------------------
# The reference run
# ---------------------------------------------------------------------------------------
def run_reference(cfg, opt, batch, seq, steps, seed):
    """Train `steps` AdamW steps on random tokens in float32; return the reference tensors in
    file order. (replay_float64 repeats the run in float64 from the tensors this returns.)"""
    torch.manual_seed(seed)
    model = build_model(cfg)
    # Drawn after the model: the initialisation consumes the generator first.
    vocab = cfg["vocab_size"]
    x = torch.randint(0, vocab, (steps, batch, seq))
    y = torch.randint(0, vocab, (steps, batch, seq))
    return train_steps(model, opt, x, y)


def scheduled_lr(opt, step):
    """The lr of 0-based training step `step`: the engine's scheduled_lr
    (kernels/common/lr_schedule.h), in Python floats (double)."""
    peak, warmup, kind = opt["lr"], opt["warmup_steps"], opt["lr_schedule"]
    if step < warmup:
        return peak * (step + 1) / warmup
    if kind == "constant":
        return peak
    progress = (step - warmup) / max(1, opt["total_steps"] - warmup)
    min_lr = opt["min_lr"]
    if kind == "cosine":
        return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))
    return peak - (peak - min_lr) * progress


def global_grad_norm(params):
    """The total L2 norm of the gradients exactly as clip_grad_norm_ (PyTorch 1.13) computes
    it: the norm of the per-parameter norms, in the parameters' dtype."""
    return torch.norm(torch.stack([torch.norm(p.grad.detach(), 2.0) for p in params]), 2.0)


def train_steps(model, opt, x, y, optimizer_class=torch.optim.AdamW):
    """AdamW-train `model` on the batches x[s] -> y[s]; return the reference tensors in file order.

    x and y are (steps, batch, seq) int64. Everything runs in the dtype of the model's
    parameters; the float32 reference and the float64 replay share this one procedure.
    Each step sets the scheduled lr (group['lr'] before optimizer.step()) and, with grad_clip
    > 0, clips after the backward (grads.* are recorded before clipping: the raw gradients).
    `optimizer_class` (AdamW's signature) lets tools/plant_mistake.py train with a mistaken one.
    """
    steps = x.shape[0]
    vocab = model.lm_head.out_features
    model.train()  # dropout is 0; train mode keeps PyTorch on its plain (non fast-path) kernels

    optimizer = optimizer_class(model.parameters(), lr=opt["lr"],
                                betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
                                weight_decay=opt["weight_decay"])
    loss_fn = nn.CrossEntropyLoss()  # mean over all batch*seq tokens

    def snapshot(prefix):  # each parameter once (a tied head's weight is embed.weight)
        return OrderedDict((f"{prefix}.{k}", v.detach().clone())
                           for k, v in model.named_parameters())

    out = OrderedDict()
    out.update(snapshot("params"))
    out["x"] = x.to(torch.int32)
    out["y"] = y.to(torch.int32)
    losses = []
    norms = []
    params = list(model.parameters())
    grads = step1 = None
    for s in range(steps):
        optimizer.zero_grad(set_to_none=True)
        logits = model(x[s])
        loss = loss_fn(logits.reshape(-1, vocab), y[s].reshape(-1))
        loss.backward()
        losses.append(loss.detach().clone())
        if s == 0:
            out["logits0"] = logits.detach().clone()
            grads = OrderedDict()
            for name, p in model.named_parameters():
                if p.grad is None:
                    raise RuntimeError(f"{name} got no gradient")
                grads[f"grads.{name}"] = p.grad.detach().clone()
        if opt["grad_clip"] > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, opt["grad_clip"])
        else:
            norm = global_grad_norm(params)
        norms.append(norm.detach().clone())
        for group in optimizer.param_groups:
            group["lr"] = scheduled_lr(opt, s)
        optimizer.step()
        if s == 0:
            step1 = snapshot("step1")
    out["loss"] = torch.stack(losses)
    out["grad_norm"] = torch.stack(norms)
    out.update(grads)
    out.update(step1)
    out.update(snapshot("final"))
    return out


def reference_metadata(cfg, opt, batch, seq, steps):
    return OrderedDict([
        ("format", FORMAT),
        ("version", VERSION),
        ("config", json.dumps({**{k: cfg[k] for k in CONFIG_KEYS}, **block_options(cfg)})),
        ("optimizer", json.dumps({k: opt[k] for k in OPTIMIZER_KEYS})),
        ("batch", str(batch)),
        ("seq", str(seq)),
        ("steps", str(steps)),
    ])


# ---------------------------------------------------------------------------------------
# Conditioning check: the fp32 reference against the same run in float64
# ---------------------------------------------------------------------------------------
# A reference can only judge an engine if its own fp32 rounding sits well below the
# tolerances of `tinytrain verify` (cli/verify.cpp). It does not when a ReLU
# pre-activation lies within fp32 rounding (~1e-7) of zero: fp32 and float64 then take
# different sides of the kink, which changes that unit's weight-gradient row by percents
# and, through AdamW, moves final parameters by up to ~lr. The check replays the run in
# float64 and measures the fp32 reference against it with verify's own metrics.
VERIFY_ABS_TOL = 1e-4          # logits0 and each step's loss: absolute
VERIFY_GRAD_REL_TOL = 1e-4     # grads.*: x max|ref| of the tensor
VERIFY_FINAL_LR_STEPS = 0.1    # final.*: x lr x steps, absolute
CONDITION_LIMIT = 0.1          # the reference's own error must stay a decade below tolerance
EXIT_ILL_CONDITIONED = 3
CHECKED = ("logits", "loss", "grad_norm", "grads", "final")  # categories held to CONDITION_LIMIT
KEY_BIAS = "key-bias rows"                      # reported, not checked: see key_bias_rows


def replay_float64(cfg, opt, ref):
    """Replay the run of `ref` (the fp32 reference tensors) in float64.

    Starts from ref's own initial parameters converted to double, trains on ref's x/y with
    torch.optim.AdamW in double (the same procedure, train_steps). Returns (tensors in file
    order, margins), margins[s][l] being the smallest |pre-activation| (linear1 output) of
    encoder layer l in the forward pass of step s.
    """
    model = build_model(cfg).to(torch.float64)
    params = OrderedDict((name[len("params."):], t.to(torch.float64))
                         for name, t in ref.items() if name.startswith("params."))
    load_parameters(model, params)
    per_layer = []  # per_layer[l][s]
    handles = []
    for linear1 in pre_activation_modules(model):
        seen = []
        per_layer.append(seen)

        def record(_module, _inputs, output, seen=seen):
            seen.append(output.detach().abs().min().item())
        handles.append(linear1.register_forward_hook(record))
    try:
        out = train_steps(model, opt, ref["x"].long(), ref["y"].long())
    finally:
        for h in handles:
            h.remove()
    margins = [list(step) for step in zip(*per_layer)]
    return out, margins


def error_ratio(got, want, tol):
    """max |got - want| / tol, as verify computes it: NaN anywhere is infinite, 0/0 is 0."""
    err = (got.to(torch.float64) - want.to(torch.float64)).abs()
    if err.numel() == 0:
        return 0.0
    if torch.isnan(err).any():
        return math.inf
    worst = err.max().item()
    if worst == 0.0:
        return 0.0
    return worst / tol if tol > 0 else math.inf


def key_bias_rows(name, cfg):
    """The rows of parameter tensor `name` whose exact gradient is 0, else None.

    Only the key part of in_proj_bias (rows d_model..d_model + the key heads' width): adding one value to every
    score of a softmax row changes nothing. An fp32 reference holds rounding noise (~1e-10)
    there, which AdamW turns into moves of ~lr*|g|/eps in an arbitrary direction, for every
    seed alike (tests/data/README.md); no seed can fix it, so the check reports these rows
    apart and does not hold them to CONDITION_LIMIT.
    """
    d_model = cfg["d_model"]
    key_width = kv_heads(cfg) * (d_model // cfg["n_head"])
    return slice(d_model, d_model + key_width) if name.endswith(".in_proj_bias") else None


def conditioning_ratios(ref32, ref64, opt, steps, cfg):
    """{category: (worst error/tolerance, where)} of the fp32 reference against float64.

    Categories and tolerances are verify's: logits0 and each step's loss absolute;
    grads.* per tensor relative to the max |value| of the fp32 tensor (the scale verify
    takes from the file); final.* per tensor absolute on the scale of lr x steps. The
    key-bias rows (key_bias_rows) go to their own category, KEY_BIAS.
    """
    worst = {}

    def note(category, where, ratio):
        if category not in worst or ratio > worst[category][0]:
            worst[category] = (ratio, where)

    note("logits", "logits0", error_ratio(ref32["logits0"], ref64["logits0"], VERIFY_ABS_TOL))
    for s in range(steps):
        note("loss", f"loss[{s}]", error_ratio(ref32["loss"][s], ref64["loss"][s], VERIFY_ABS_TOL))
        # grad_norm: verify's tolerance is VERIFY_GRAD_REL_TOL x |norm|
        note("grad_norm", f"grad_norm[{s}]", error_ratio(
            ref32["grad_norm"][s], ref64["grad_norm"][s],
            VERIFY_GRAD_REL_TOL * abs(ref32["grad_norm"][s].item())))
    final_tol = VERIFY_FINAL_LR_STEPS * opt["lr"] * steps
    for name, t32 in ref32.items():
        category = name.split(".", 1)[0]
        if category == "grads":
            tol = VERIFY_GRAD_REL_TOL * (t32.abs().max().item() if t32.numel() else 0.0)
        elif category == "final":
            tol = final_tol
        else:
            continue
        t64 = ref64[name]
        rows = key_bias_rows(name, cfg)
        if rows is None:
            note(category, name, error_ratio(t32, t64, tol))
        else:
            keep = torch.ones(t32.shape[0], dtype=torch.bool)
            keep[rows] = False
            note(category, name, error_ratio(t32[keep], t64[keep], tol))
            note(KEY_BIAS, name, error_ratio(t32[rows], t64[rows], tol))
    return worst


def steps_behind(where, steps):
    """How many steps' forward passes can have shaped the value `where`: logits0 and grads.*
    come from step 0, loss[s] and grad_norm[s] from steps 0..s, final.* from every step."""
    if where == "logits0" or where.startswith("grads."):
        return 1
    for prefix in ("loss[", "grad_norm["):
        if where.startswith(prefix):
            return int(where[len(prefix):-1]) + 1
    return steps


def smallest_margin(margins, steps=None):
    """(smallest |pre-activation|, step, layer) over the first `steps` steps (default all)."""
    return min((m, s, l) for s, step in enumerate(margins[:steps]) for l, m in enumerate(step))


def fp64_check(cfg, opt, ref32, steps):
    """Run the conditioning check; return (passed, one-line message)."""
    ref64, margins = replay_float64(cfg, opt, ref32)
    worst = conditioning_ratios(ref32, ref64, opt, steps, cfg)
    ratio, where = max(worst[c] for c in CHECKED)
    if not ratio <= CONDITION_LIMIT:
        margin, step, _ = smallest_margin(margins, steps_behind(where, steps))
        return False, (f"ill-conditioned reference: PyTorch fp32 differs from float64 by "
                       f"{ratio:.3g} of the tolerance in {where} (smallest |pre-activation| "
                       f"{margin:.2g} at step {step}); try another --seed")
    margin, step, layer = smallest_margin(margins)
    # (a model without biases has no key-bias rows)
    parts = ", ".join(f"{c} {worst[c][0]:.2g}" + ("" if c == "logits" else f" ({worst[c][1]})")
                      for c in CHECKED + (KEY_BIAS,) if c in worst)
    return True, (f"fp64 check: {parts} of tolerance (limit {CONDITION_LIMIT}; {KEY_BIAS} not "
                  f"checked); smallest |pre-activation| {margin:.2g} (layer {layer}, step {step})")


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------
def build_parser():
    d = SEED_CONFIG
    p = OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_model_flags(p, defaults=d, skip=("dropout",))  # references have no dropout
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-steps", type=int, default=0,
                   help="lr warmup: steps 0..N-1 take lr x (step + 1) / N")
    p.add_argument("--lr-schedule", choices=("constant", "cosine", "linear"), default="constant",
                   help="lr after the warmup (cosine and linear decay to --min-lr at --steps)")
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=0.0,
                   help="clip_grad_norm_ to this global norm after the backward (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--out", metavar="FILE", help="reference file to write")
    # The check is on by default: SUPPRESS keeps "(default: True)" out of the flag's help.
    p.set_defaults(fp64_check=True)
    p.add_argument("--no-fp64-check", dest="fp64_check", action="store_false",
                   default=argparse.SUPPRESS,
                   help="skip the conditioning check (replay in float64, refuse the reference "
                        f"and exit {EXIT_ILL_CONDITIONED} if its fp32 error exceeds "
                        f"{CONDITION_LIMIT} of verify's tolerances)")
    p.add_argument("--check", metavar="FILE",
                   help="instead of generating, read FILE back and print what it holds")
    return p


def config_from_args(a):
    cfg = OrderedDict(model_config(a, SEED_CONFIG))
    cfg["dropout"] = 0.0  # references are deterministic: no dropout
    opt = OrderedDict([("lr", a.lr), ("beta1", a.beta1), ("beta2", a.beta2), ("eps", a.eps),
                       ("weight_decay", a.weight_decay), ("lr_schedule", a.lr_schedule),
                       ("warmup_steps", a.warmup_steps),
                       # as the engine: the decaying schedules end at --steps, constant needs no end
                       ("total_steps", 0 if a.lr_schedule == "constant" else a.steps),
                       ("min_lr", a.min_lr), ("grad_clip", a.grad_clip)])
    return cfg, opt


def validate_run(cfg, opt, batch, seq, steps, threads):
    """None if the run is valid, else a one-line reason."""
    err = validate_config(cfg)
    if err:
        return err
    for name, v in (("batch", batch), ("seq", seq), ("steps", steps), ("threads", threads)):
        if v < 1:
            return f"{name} must be >= 1, got {v}"
    if seq > cfg["max_seq_len"]:
        return f"seq {seq} exceeds max_seq_len {cfg['max_seq_len']}"
    numbers = [v for k, v in opt.items() if k != "lr_schedule"]
    if not all(math.isfinite(v) for v in numbers) or not math.isfinite(cfg["layer_norm_eps"]):
        return "optimizer settings and layer_norm_eps must be finite"
    if opt["lr"] < 0 or opt["eps"] < 0 or opt["weight_decay"] < 0 or opt["grad_clip"] < 0:
        return "lr, eps, weight_decay and grad_clip must be >= 0"
    if not 0.0 <= opt["min_lr"] <= opt["lr"]:
        return f"min_lr must be in [0, lr], got {opt['min_lr']}"
    if opt["warmup_steps"] < 0:
        return f"warmup_steps must be >= 0, got {opt['warmup_steps']}"
    if opt["lr_schedule"] != "constant" and opt["warmup_steps"] > steps:
        return f"warmup_steps ({opt['warmup_steps']}) exceeds steps ({steps})"
    for k in ("beta1", "beta2"):
        if not 0.0 <= opt[k] < 1.0:
            return f"{k} must be in [0, 1), got {opt[k]}"
    return None


def check_reference(path):
    """Read a reference back, check its metadata and tensor set, print a summary."""
    tensors, meta = read_safetensors(path)
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(f"{path}: not a {FORMAT} v{VERSION} file: {dict(meta)}")
    cfg = json.loads(meta["config"])
    batch, seq, steps = int(meta["batch"]), int(meta["seq"]), int(meta["steps"])
    names = [n for n, _ in build_model(dict(cfg)).named_parameters()]
    # grad_norm is optional: references written before it do not have it
    head = ["x", "y", "logits0", "loss"] + (["grad_norm"] if "grad_norm" in tensors else [])
    want = ([f"params.{n}" for n in names] + head +
            [f"{p}.{n}" for p in ("grads", "step1", "final") for n in names])
    if list(tensors.keys()) != want:
        raise ValueError(f"{path}: tensor names/order differ from the expected layout")
    assert tuple(tensors["x"].shape) == (steps, batch, seq)
    assert tuple(tensors["logits0"].shape) == (batch, seq, cfg["vocab_size"])
    assert tuple(tensors["loss"].shape) == (steps,)
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")
    print(f"  config    {meta['config']}")
    print(f"  optimizer {meta['optimizer']}")
    print(f"  batch {batch} seq {seq} steps {steps}")
    print("  loss " + " ".join(f"{v:.6f}" for v in tensors["loss"].tolist()))
    if "grad_norm" in tensors:
        assert tuple(tensors["grad_norm"].shape) == (steps,)
        print("  grad_norm " + " ".join(f"{v:.6f}" for v in tensors["grad_norm"].tolist()))
    return tensors, meta


def check_readback(path, tensors, meta):
    """Read path back and compare bit for bit, so a writer bug cannot reach a test."""
    back, back_meta = read_safetensors(path)
    assert dict(back_meta) == dict(meta) and list(back.keys()) == list(tensors.keys())
    for name, t in tensors.items():
        assert torch.equal(back[name], t), name


def main():
    args = build_parser().parse_args()
    if args.check:
        try:
            check_reference(args.check)
        except (OSError, ValueError, KeyError, AssertionError) as e:
            print(f"make_reference.py: error: {e}", file=sys.stderr)
            sys.exit(1)
        return
    cfg, opt = config_from_args(args)
    err = validate_run(cfg, opt, args.batch, args.seq, args.steps, args.threads)
    if err is None and not args.out:
        err = "--out FILE is required"
    if err:
        print(f"make_reference.py: error: {err}", file=sys.stderr)
        sys.exit(2)

    torch.set_num_threads(args.threads)
    tensors = run_reference(cfg, opt, args.batch, args.seq, args.steps, args.seed)
    meta = reference_metadata(cfg, opt, args.batch, args.seq, args.steps)

    # Written to a temporary file that only replaces --out once every check has passed.
    tmp = f"{args.out}.unchecked{os.getpid()}"
    try:
        write_safetensors(tmp, tensors, meta)
        check_readback(tmp, tensors, meta)
        if args.fp64_check:
            passed, message = fp64_check(cfg, opt, tensors, args.steps)
            if not passed:
                print(f"make_reference.py: error: {message}", file=sys.stderr)
                sys.exit(EXIT_ILL_CONDITIONED)
            print(message)
        os.replace(tmp, args.out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    losses = " ".join(f"{v:.4f}" for v in tensors["loss"].tolist())
    norms = " ".join(f"{v:.4f}" for v in tensors["grad_norm"].tolist())
    print(f"wrote {args.out}: {len(tensors)} tensors, {os.path.getsize(args.out)} bytes; "
          f"loss {losses}; grad_norm {norms}")


if __name__ == "__main__":
    main()
