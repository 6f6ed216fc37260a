"""Command-line pieces the PyTorch tools share: the model's flags as `tinytrain train` spells
them, their true|false parser, and argparse that reports a bad flag on one line.

No torch import here: tools that set thread variables before importing torch parse first.
"""
import argparse
import sys

# (flag, config key, type or choices); bool flags take true|false.
_MODEL_FLAGS = (
    ("--vocab-size", "vocab_size", int),
    ("--d-model", "d_model", int),
    ("--n-head", "n_head", int),
    ("--n-layer", "n_layer", int),
    ("--d-ff", "d_ff", int),
    ("--activation", "activation", ("relu", "gelu", "swiglu")),
    ("--n-kv-head", "n_kv_head", int),
    ("--norm-first", "norm_first", bool),
    ("--causal", "causal", bool),
    ("--pos-embedding", "pos_embedding", ("none", "learned", "rope")),
    ("--rope-theta", "rope_theta", float),
    ("--max-seq-len", "max_seq_len", int),
    ("--layer-norm-eps", "layer_norm_eps", float),
    ("--dropout", "dropout", float),
    ("--norm", "norm", ("layernorm", "rmsnorm")),
    ("--bias", "bias", bool),
    ("--head-bias", "head_bias", bool),
    ("--tie-embeddings", "tie_embeddings", bool),
)


# --arch: the block fields each preset sets, as engine/config.cpp's arch_preset; a flag given
# beside it wins.
ARCH_PRESETS = {
    "seed": {"activation": "relu", "norm_first": False, "causal": False, "pos_embedding": "none",
             "norm": "layernorm", "bias": True, "head_bias": True, "tie_embeddings": False},
    "gpt2": {"activation": "gelu", "norm_first": True, "causal": True, "pos_embedding": "learned",
             "norm": "layernorm", "bias": True, "head_bias": False, "tie_embeddings": True},
    "llama": {"activation": "swiglu", "norm_first": True, "causal": True, "pos_embedding": "rope",
              "norm": "rmsnorm", "bias": False, "head_bias": True, "tie_embeddings": False},
}


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag on one line (no usage dump) and exits 2."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def parse_bool(text):
    """true|false (also 1|0, yes|no), as tinytrain's flags take them."""
    low = text.lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_model_flags(parser, defaults=None, skip=()):
    """Adds the model's flags (config keys as dests) and --arch. defaults: {config key: value},
    shown in the help; a flag not given leaves no attribute, meaning "the base config's
    value, or --arch's" (see model_config).
    skip: config keys whose flag the tool does not take."""
    defaults = defaults or {}
    parser.add_argument("--arch", dest="arch", choices=tuple(ARCH_PRESETS), default=argparse.SUPPRESS,
                        help="a preset block (flags given beside it win)")
    for flag, key, kind in _MODEL_FLAGS:
        if key in skip:
            continue
        # No attribute when the flag is not given (SUPPRESS), so that model_config can tell a
        # flag from --arch's preset; the default is only shown.
        shown = {"help": f"(default: {defaults[key]})"} if key in defaults else {}
        if kind is bool:
            parser.add_argument(flag, dest=key, type=parse_bool, default=argparse.SUPPRESS, metavar="true|false", **shown)
        elif isinstance(kind, tuple):
            parser.add_argument(flag, dest=key, choices=kind, default=argparse.SUPPRESS, **shown)
        else:
            parser.add_argument(flag, dest=key, type=kind, default=argparse.SUPPRESS, **shown)


def model_config(args, base):
    """A copy of the config dict `base` with --arch's preset, then every model flag given in args
    (not None), applied."""
    cfg = dict(base)
    arch = getattr(args, "arch", None)
    if arch is not None:
        cfg.update(ARCH_PRESETS[arch])
    for _, key, _ in _MODEL_FLAGS:
        value = getattr(args, key, None)
        if value is not None:
            cfg[key] = value
    return cfg
