#!/usr/bin/env python3
"""Write copies of a PyTorch reference with a mistake planted in them, to show that
`tinytrain verify` catches it (tests/verify_catches_mistakes.sh runs verify on each).

Two kinds of copies, written into OUTDIR:

Mistakes a training run could make, planted in `final.*` only (every other tensor is the
reference's own, so the copy shows that the final.* check alone catches them; step1.* would
catch the last two anyway, as their first step is already wrong):
  scale_updates.safetensors       every parameter's update (final - initial) scaled by 1.5
  no_bias_correction.safetensors  final.* of the same run trained by AdamW without Adam's bias
                                  corrections (m and v used as they are)
  skip_layer.safetensors          final.* of the same run with encoder layer 0 never updated

Tolerance probes, for `--precision P` (verify's tolerances depend on it): one check's tensor
moved by a multiple of verify's tolerance for that check, in a way the check measures:
  push_<check>_<factor>.safetensors  for check in logits0, loss, grads, step1, grad_norm,
                                     final, final_key_rows and factor 0.5 (inside: verify must
                                     still pass, if the engine's own error there is below half
                                     the tolerance) and 1.5 (past: verify must fail it).
The tolerances below mirror tolerances_for() and adamw_move_bound() in cli/verify.cpp, where
their derivations are; if that file changes them, the 0.5 / 1.5 probes show the mismatch.

Run with Debian's PyTorch:
  /usr/bin/python3 tools/plant_mistake.py REF.safetensors OUTDIR --precision fp32|bf16|fp16
"""
import argparse
import json
import math
import os
import sys
from collections import OrderedDict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import read_safetensors, scheduled_lr, train_steps, write_safetensors  # noqa: E402
from tinytrain_model import build_model, load_parameters  # noqa: E402

PUSH_FACTORS = (0.5, 1.5)
UPDATE_SCALE = 1.5
SKIPPED_LAYER = 0
PUSHED_TENSOR = "lm_head.weight"  # in every model of the family
# The optimizer fields references written before schedules and clipping lack (their defaults).
OPTIMIZER_DEFAULTS = {"lr_schedule": "constant", "warmup_steps": 0, "total_steps": 0, "min_lr": 0.0,
                      "grad_clip": 0.0}


# ---------------------------------------------------------------------------------------
# verify's tolerances (cli/verify.cpp, tolerances_for and adamw_move_bound)
# ---------------------------------------------------------------------------------------
def unit_roundoff(precision):
    return {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}[precision]


def grads_rel_tol(precision, activation):
    if precision == "fp32":
        return 1e-4
    u = unit_roundoff(precision)
    return 8 * u if activation == "gelu" else 4 * math.sqrt(u)


def adamw_move_bound(opt, t):
    total = sum((opt["beta1"] ** 2 / opt["beta2"]) ** j for j in range(t))
    return ((1 - opt["beta1"]) / math.sqrt(1 - opt["beta2"]) * math.sqrt(total) *
            math.sqrt(1 - opt["beta2"] ** t) / (1 - opt["beta1"] ** t))


def key_rows_tol(opt, steps):
    return sum(2 * scheduled_lr(opt, s) * adamw_move_bound(opt, s + 1) for s in range(steps))


FINAL_REL_TOL_16BIT = 0.3


# ---------------------------------------------------------------------------------------
# Tolerance probes: each moves the reference so that verify's error grows by factor x tol
# ---------------------------------------------------------------------------------------
def push(ref, check, factor, precision, cfg, opt, steps):
    """A copy of ref (OrderedDict of tensors) with `check`'s tensor pushed by factor x tol."""
    out = OrderedDict((k, v.clone()) for k, v in ref.items())
    fp32 = precision == "fp32"
    u = 0.0 if fp32 else unit_roundoff(precision)
    if check == "logits0":  # one element; tol absolute (fp32) or 10 u x max|logits|
        tol = 1e-4 if fp32 else 10 * u * ref["logits0"].abs().max().item()
        out["logits0"].view(-1)[0] += factor * tol
    elif check == "loss":  # the last step's loss; 1e-4 absolute or u x |pushed loss|
        last = out["loss"][-1].item()
        out["loss"][-1] = last + 1e-4 * factor if fp32 else last / (1 - factor * u)
    elif check == "grads":
        g = out["grads." + PUSHED_TENSOR]
        if fp32:  # one element; tol 1e-4 x max|ref| of the tensor
            g.view(-1)[0] += factor * 1e-4 * g.abs().max().item()
        else:  # the whole tensor scaled by s: error |g - s g| / |s g| = factor x tol
            g.div_(1 - factor * grads_rel_tol(precision, cfg["activation"]))
    elif check == "step1":  # one element; tol 2e-6 x max(1, |p|) in every precision
        p = out["step1." + PUSHED_TENSOR].view(-1)
        p[0] += factor * 2e-6 * max(1.0, abs(p[0].item()))
    elif check == "grad_norm":  # the last step's norm, relative, with the grads tolerance
        if "grad_norm" not in out:
            return None
        out["grad_norm"][-1] /= 1 - factor * grads_rel_tol(precision, cfg["activation"])
    elif check == "final":
        name = "final." + PUSHED_TENSOR
        if fp32:  # one element; tol 0.1 x lr x steps absolute
            out[name].view(-1)[0] += factor * 0.1 * opt["lr"] * steps
        else:  # the update scaled by s: verify's |d - s d| / sqrt(|d| |s d|) = (s - 1) / sqrt(s)
            r = factor * FINAL_REL_TOL_16BIT  # = (s - 1) / sqrt(s) for sqrt(s) = (r + sqrt(r^2 + 4)) / 2
            s = ((r + math.sqrt(r * r + 4)) / 2) ** 2
            initial = ref["params." + PUSHED_TENSOR]
            out[name] = initial + s * (ref[name] - initial)
    elif check == "final_key_rows":  # 16-bit only: one key-row element by the AdamW bound
        if fp32:
            return None
        bias = out["final.encoder.layers.0.self_attn.in_proj_bias"]
        bias[cfg["d_model"]] += factor * key_rows_tol(opt, steps)
    else:
        raise ValueError(check)
    return out


CHECKS = ("logits0", "loss", "grads", "step1", "grad_norm", "final", "final_key_rows")


# ---------------------------------------------------------------------------------------
# Mistakes: final.* of the reference's run trained with a mistake
# ---------------------------------------------------------------------------------------
class AdamWWithoutBiasCorrection(torch.optim.Optimizer):
    """AdamW as torch.optim.AdamW, but dividing m by sqrt(v) as they are: the bias corrections
    1 / (1 - beta1^t) and 1 / (1 - beta2^t) forgotten (the first steps then move 3x too far)."""

    def __init__(self, params, lr, betas, eps, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                p.mul_(1 - group["lr"] * group["weight_decay"])
                state["m"].mul_(beta1).add_(p.grad, alpha=1 - beta1)
                state["v"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                p.addcdiv_(state["m"], state["v"].sqrt().add_(group["eps"]), value=-group["lr"])


def rerun_final(ref, cfg, opt, optimizer_for):
    """final.* of the reference's run (its initial parameters and batches) retrained with the
    optimizer class optimizer_for(model) returns."""
    model = build_model(cfg)
    load_parameters(model, OrderedDict((k[len("params."):], v) for k, v in ref.items() if k.startswith("params.")))
    run = train_steps(model, opt, ref["x"].long(), ref["y"].long(), optimizer_class=optimizer_for(model))
    out = OrderedDict((k, v.clone()) for k, v in ref.items())
    for k in out:
        if k.startswith("final."):
            out[k] = run[k]
    return out


def skipping_layer(layer):
    def optimizer_for(model):
        frozen = {id(p) for p in model.encoder.layers[layer].parameters()}

        class AdamWSkippingLayer(torch.optim.AdamW):
            def __init__(self, params, **kw):
                super().__init__([p for p in params if id(p) not in frozen], **kw)
        return AdamWSkippingLayer
    return optimizer_for


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ref", help="a reference written by tools/make_reference.py")
    p.add_argument("outdir")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), required=True,
                   help="the precision the probes are sized for (verify --precision)")
    p.add_argument("--no-mistakes", dest="mistakes", action="store_false",
                   help="write only the tolerance probes")
    a = p.parse_args()
    try:
        ref, meta = read_safetensors(a.ref)
        cfg = json.loads(meta["config"])
        opt = dict(OPTIMIZER_DEFAULTS, **json.loads(meta["optimizer"]))
        steps = int(meta["steps"])
    except (OSError, ValueError, KeyError) as e:
        print(f"plant_mistake.py: error: {a.ref}: {e}", file=sys.stderr)
        sys.exit(1)
    os.makedirs(a.outdir, exist_ok=True)
    written = []

    def write(name, tensors):
        path = os.path.join(a.outdir, name + ".safetensors")
        write_safetensors(path, tensors, meta)
        written.append(name)

    for check in CHECKS:
        for factor in PUSH_FACTORS:
            tensors = push(ref, check, factor, a.precision, cfg, opt, steps)
            if tensors is not None:
                write(f"push_{check}_{factor}", tensors)
    if a.mistakes:
        torch.set_num_threads(2)  # as make_reference.py's default
        scaled = OrderedDict((k, v.clone()) for k, v in ref.items())
        for k in ref:
            if k.startswith("final."):
                initial = ref["params." + k[len("final."):]]
                scaled[k] = initial + UPDATE_SCALE * (ref[k] - initial)
        write("scale_updates", scaled)
        write("no_bias_correction", rerun_final(ref, cfg, opt, lambda _model: AdamWWithoutBiasCorrection))
        write("skip_layer", rerun_final(ref, cfg, opt, skipping_layer(SKIPPED_LAYER)))
    print(f"plant_mistake.py: wrote {len(written)} files to {a.outdir}: {' '.join(written)}")


if __name__ == "__main__":
    main()
