#!/usr/bin/env python3
"""Write a PyTorch reference run of the tinytrain model family as one safetensors file.

The file is what `tinytrain verify` checks the engine against (format: DESIGN.md, "The
reference format"): initial parameters, the token batches, step-0 logits and gradients,
the loss of every step, and the parameters after the first and after the last AdamW step.

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
from tinytrain_model import CONFIG_KEYS, SEED_CONFIG, build_model, validate_config  # noqa: E402

FORMAT = "tinytrain-reference"
VERSION = "1"

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
def run_reference(cfg, opt, batch, seq, steps, seed, dtype=torch.float32):
    """Train `steps` AdamW steps on random tokens; return the reference tensors in file order.

    The model is always initialised in float32 (the engine's init) and then cast, so a
    float64 run starts from exactly the same weights and sees the same tokens.
    """
    torch.manual_seed(seed)
    model = build_model(cfg)
    # Drawn after the model: the initialisation consumes the generator first.
    vocab = cfg["vocab_size"]
    x = torch.randint(0, vocab, (steps, batch, seq))
    y = torch.randint(0, vocab, (steps, batch, seq))
    model = model.to(dtype)
    model.train()  # dropout is 0; train mode keeps PyTorch on its plain (non fast-path) kernels

    optimizer = torch.optim.AdamW(model.parameters(), lr=opt["lr"],
                                  betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
                                  weight_decay=opt["weight_decay"])
    loss_fn = nn.CrossEntropyLoss()  # mean over all batch*seq tokens

    def snapshot(prefix):
        return OrderedDict((f"{prefix}.{k}", v.detach().clone())
                           for k, v in model.state_dict().items())

    out = OrderedDict()
    out.update(snapshot("params"))
    out["x"] = x.to(torch.int32)
    out["y"] = y.to(torch.int32)
    losses = []
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
        optimizer.step()
        if s == 0:
            step1 = snapshot("step1")
    out["loss"] = torch.stack(losses)
    out.update(grads)
    out.update(step1)
    out.update(snapshot("final"))
    return out


def reference_metadata(cfg, opt, batch, seq, steps):
    return OrderedDict([
        ("format", FORMAT),
        ("version", VERSION),
        ("config", json.dumps({k: cfg[k] for k in CONFIG_KEYS})),
        ("optimizer", json.dumps({k: opt[k] for k in ("lr", "beta1", "beta2", "eps",
                                                      "weight_decay")})),
        ("batch", str(batch)),
        ("seq", str(seq)),
        ("steps", str(steps)),
    ])


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------
class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag on one line (no usage dump) and exits 2."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def _bool(text):
    low = text.lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser():
    d = SEED_CONFIG
    p = _OneLineParser(description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--vocab-size", type=int, default=d["vocab_size"])
    p.add_argument("--d-model", type=int, default=d["d_model"])
    p.add_argument("--n-head", type=int, default=d["n_head"])
    p.add_argument("--n-layer", type=int, default=d["n_layer"])
    p.add_argument("--d-ff", type=int, default=d["d_ff"])
    p.add_argument("--activation", choices=("relu", "gelu"), default=d["activation"])
    p.add_argument("--norm-first", type=_bool, default=d["norm_first"], metavar="true|false")
    p.add_argument("--causal", type=_bool, default=d["causal"], metavar="true|false")
    p.add_argument("--pos-embedding", choices=("none", "learned"), default=d["pos_embedding"])
    p.add_argument("--max-seq-len", type=int, default=d["max_seq_len"])
    p.add_argument("--layer-norm-eps", type=float, default=d["layer_norm_eps"])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--out", metavar="FILE", help="reference file to write")
    p.add_argument("--check", metavar="FILE",
                   help="instead of generating, read FILE back and print what it holds")
    return p


def config_from_args(a):
    cfg = OrderedDict([
        ("vocab_size", a.vocab_size), ("d_model", a.d_model), ("n_head", a.n_head),
        ("n_layer", a.n_layer), ("d_ff", a.d_ff), ("activation", a.activation),
        ("norm_first", a.norm_first), ("causal", a.causal),
        ("pos_embedding", a.pos_embedding), ("max_seq_len", a.max_seq_len),
        ("layer_norm_eps", a.layer_norm_eps),
        ("dropout", 0.0),  # references are deterministic: no dropout
    ])
    opt = OrderedDict([("lr", a.lr), ("beta1", a.beta1), ("beta2", a.beta2), ("eps", a.eps),
                       ("weight_decay", a.weight_decay)])
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
    if not all(math.isfinite(v) for v in opt.values()) or not math.isfinite(cfg["layer_norm_eps"]):
        return "optimizer settings and layer_norm_eps must be finite"
    if opt["lr"] < 0 or opt["eps"] < 0 or opt["weight_decay"] < 0:
        return "lr, eps and weight_decay must be >= 0"
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
    names = list(build_model(dict(cfg)).state_dict().keys())
    want = ([f"params.{n}" for n in names] + ["x", "y", "logits0", "loss"] +
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
    return tensors, meta


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
    write_safetensors(args.out, tensors, meta)

    # Read it back and compare bit for bit, so a writer bug cannot reach a test.
    back, back_meta = read_safetensors(args.out)
    assert dict(back_meta) == dict(meta) and list(back.keys()) == list(tensors.keys())
    for name, t in tensors.items():
        assert torch.equal(back[name], t), name
    losses = " ".join(f"{v:.4f}" for v in tensors["loss"].tolist())
    print(f"wrote {args.out}: {len(tensors)} tensors, {os.path.getsize(args.out)} bytes; "
          f"loss {losses}")


if __name__ == "__main__":
    main()
