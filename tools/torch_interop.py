#!/usr/bin/env python3
"""PyTorch interoperability of tinytrain's files: checkpoints into PyTorch, state_dicts out.

  logits  --checkpoint CKPT --dump FILE [--tolerance 1e-5]
          Loads a tinytrain checkpoint (safetensors; the model's config JSON in its metadata
          "config") into tools/tinytrain_model.py's model (dropout 0, eval mode; the
          checkpoint's parameter names ARE the state_dict's, `optimizer.*` and `state.*`
          tensors are skipped), runs the tokens of FILE (written by `tinytrain sample
          --dump-logits`: tokens I32 [T], logits F32 [T, V]) and compares its logits with
          the engine's. Prints the largest absolute difference; exit 1 when it exceeds the
          tolerance (both sides fp32, no TF32), 2 on unusable input.
  export  [--config JSON|FILE] [model flags] --seed S --out FILE
          Builds the model with torch.manual_seed(S) (PyTorch's own initialisation) and writes
          its state_dict as safetensors under the same names: the input of
          `tinytrain train --init-from FILE`. The config starts from the seed workload's
          (tinytrain_model.SEED_CONFIG); --config (JSON text, or a file holding it) and then
          the flags (--vocab-size, --causal true, ...) override it.

Run with Debian's PyTorch: /usr/bin/python3 tools/torch_interop.py {logits,export} ...
"""
import json
import os
import sys
from collections import OrderedDict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_flags import OneLineParser, add_model_flags, model_config  # noqa: E402
from make_reference import read_safetensors, write_safetensors  # noqa: E402
from tinytrain_model import (BLOCK_DEFAULTS, CONFIG_KEYS, SEED_CONFIG, build_model, load_parameters,  # noqa: E402
                             parameters_by_name, validate_config)

PROG = "torch_interop.py"
CHECKPOINT_FORMAT = "tinytrain-checkpoint"


class InputProblem(Exception):
    """A file or setting this tool cannot use: one line, exit 2."""


def _fp32_exact():
    """fp32 as the engine computes it: no TF32 on a GPU, a fixed thread count."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(2)


def load_checkpoint_model(path):
    """(model in eval mode with dropout 0, config dict) from a tinytrain checkpoint."""
    try:
        tensors, meta = read_safetensors(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputProblem(f"{path}: not a readable safetensors file: {e}")
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise InputProblem(f"{path}: not a tinytrain checkpoint (metadata 'format' is {meta.get('format')!r})")
    try:
        cfg = json.loads(meta["config"], object_pairs_hook=OrderedDict)
    except (KeyError, ValueError) as e:
        raise InputProblem(f"{path}: metadata 'config' missing or not JSON: {e}")
    if all(k in cfg for k in CONFIG_KEYS):  # the family's keys in their order, then the block's options
        cfg = OrderedDict([*((k, cfg.get(k)) for k in CONFIG_KEYS), *((k, cfg[k]) for k in BLOCK_DEFAULTS if k in cfg)])
    err = validate_config(cfg)
    if err:
        raise InputProblem(f"{path}: metadata 'config': {err}")
    cfg["dropout"] = 0.0  # inference: the engine's Decoder has no dropout
    model = build_model(cfg)
    params = OrderedDict((name, t) for name, t in tensors.items()
                         if not name.startswith("optimizer.") and not name.startswith("state."))
    try:
        load_parameters(model, params)  # every parameter, nothing else, same shapes
    except RuntimeError as e:
        raise InputProblem(f"{path}: parameters do not fit the model of its config: " + " ".join(str(e).split()))
    model.eval()
    return model, cfg


def cmd_logits(args):
    _fp32_exact()
    model, cfg = load_checkpoint_model(args.checkpoint)
    try:
        dump, _ = read_safetensors(args.dump)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputProblem(f"{args.dump}: not a readable safetensors file: {e}")
    if set(dump) != {"tokens", "logits"}:
        raise InputProblem(f"{args.dump}: expected the tensors tokens and logits of `tinytrain sample --dump-logits`, "
                           f"got {sorted(dump)}")
    tokens, want = dump["tokens"], dump["logits"]
    T = tokens.shape[0] if tokens.dim() == 1 else -1
    V = cfg["vocab_size"]
    if tokens.dtype != torch.int32 or T < 1 or want.dtype != torch.float32 or tuple(want.shape) != (T, V):
        raise InputProblem(f"{args.dump}: tokens {tokens.dtype} {list(tokens.shape)} and logits {want.dtype} "
                           f"{list(want.shape)} do not fit the checkpoint's model (vocab_size {V}): expected "
                           f"tokens int32 [T] and logits float32 [T, {V}]")
    if T > cfg["max_seq_len"] or int(tokens.min()) < 0 or int(tokens.max()) >= V:
        raise InputProblem(f"{args.dump}: tokens outside the model's vocabulary or context")
    # (grad enabled, as in the references: PyTorch 1.13's inference fast path of
    # TransformerEncoderLayer stays off, so the ops are the ones training runs)
    got = model(tokens.long().unsqueeze(0))[0].detach()
    diff = (got - want).abs()
    worst = int(diff.argmax())
    max_diff = float(diff.max())
    pos, vid = divmod(worst, V)
    scale = float(want.abs().max())
    ok = max_diff <= args.tolerance
    print(f"logits [{T}, {V}]: max abs difference {max_diff:.3e} (at position {pos}, id {vid}; "
          f"largest |logit| {scale:.3g}) against the tolerance {args.tolerance:g}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def export_config(args):
    cfg = OrderedDict(SEED_CONFIG)
    if args.config:
        text = args.config
        if not text.lstrip().startswith("{"):
            try:
                with open(text) as f:
                    text = f.read()
            except OSError as e:
                raise InputProblem(f"--config: neither JSON nor a readable file: {e}")
        try:
            given = json.loads(text)
        except ValueError as e:
            raise InputProblem(f"--config: not valid JSON: {e}")
        if not isinstance(given, dict):
            raise InputProblem("--config: expected a JSON object")
        fields = (*CONFIG_KEYS, *BLOCK_DEFAULTS)
        unknown = [k for k in given if k not in fields]
        if unknown:
            raise InputProblem(f"--config: unknown field {unknown[0]!r} (fields: {', '.join(fields)})")
        cfg.update(given)
    cfg = OrderedDict(model_config(args, cfg))  # --arch, then the model flags given
    err = validate_config(cfg)
    if err:
        raise InputProblem(f"config: {err}")
    return cfg


def cmd_export(args):
    cfg = export_config(args)
    if args.seed < 0:
        raise InputProblem(f"--seed must be 0 or more, got {args.seed}")
    torch.manual_seed(args.seed)
    model = build_model(cfg)
    state = OrderedDict((name, t.detach().float().contiguous()) for name, t in parameters_by_name(model))
    meta = OrderedDict([("format", "pytorch-state-dict"), ("config", json.dumps(cfg, separators=(",", ":"))),
                        ("seed", str(args.seed))])
    try:
        write_safetensors(args.out, state, meta)
    except OSError as e:
        raise InputProblem(f"{args.out}: cannot write: {e}")
    count = sum(t.numel() for t in state.values())
    print(f"export: wrote {args.out} ({len(state)} tensors, {count} parameters, torch.manual_seed({args.seed}))")
    return 0


def build_parser():
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    lg = sub.add_parser("logits", help="compare PyTorch's logits for a checkpoint with the engine's dump")
    lg.add_argument("--checkpoint", required=True, metavar="CKPT")
    lg.add_argument("--dump", required=True, metavar="FILE", help="written by tinytrain sample --dump-logits")
    lg.add_argument("--tolerance", type=float, default=1e-5, help="largest absolute difference allowed")
    ex = sub.add_parser("export", help="a freshly initialised PyTorch model's state_dict as safetensors")
    ex.add_argument("--config", metavar="JSON|FILE", help="config fields over the seed workload's")
    add_model_flags(ex)
    ex.add_argument("--seed", type=int, required=True)
    ex.add_argument("--out", required=True, metavar="FILE")
    return p


def main():
    args = build_parser().parse_args()
    try:
        return cmd_logits(args) if args.command == "logits" else cmd_export(args)
    except InputProblem as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
