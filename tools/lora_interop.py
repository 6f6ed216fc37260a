#!/usr/bin/env python3
"""tinytrain's LoRA against PEFT itself, both ways (docs/finetune.md).

A tiny LlamaForCausalLM is made here with transformers (save_pretrained: nothing is
downloaded); tinytrain fine-tunes it with adapters on every module of the block, and:
  init      tinytrain's initial adapters, exported with `export --format peft`, load into
            PeftModel.from_pretrained with no missing or unexpected key, and give the base's
            logits (B starts at zero);
  train     20 AdamW steps from that init on tinytrain's own windows, dropout 0: tinytrain's
            losses equal PEFT + torch.optim.AdamW's on the same windows;
  logits    the trained adapters exported to PEFT give the logits of `tinytrain merge`'s model;
  merge     PEFT's merge_and_unload() weights equal `tinytrain merge`'s;
  import    an adapter PEFT made and trained itself loads into tinytrain: `merge` gives
            PEFT's logits, and `train --lora-from` starts at PEFT's loss;
  qlora     `--base-quant nf4` against PEFT on the base as QLoRA sees it: every linear weight
            quantised by bitsandbytes' quantize_4bit (NF4, blocks of 64, double-quantised
            absmax) and decoded here from its codes and statistics (nf4_decoded); 20 steps from
            the same adapters give the same losses, and stay within QLORA_DISTANCE of the
            fp32-base run. (bitsandbytes' own CPU dequantize_4bit is not the reference: 0.50.2
            decodes a 2-D weight whose last dimension is a multiple of 16 but not of 64, as
            k_proj's (16, 32) here, with the wrong blocks' absmax on AVX-512; docs/nf4.md.)
"""
import argparse
import json
import math
import os
import sys
import tempfile

import peft
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_interop import FORTUNES, VOCAB, check, failures, llama, logits_gap, run, tinytrain_logits  # noqa: E402
from train_torch_lm import read_shard, tinytrain_window_start  # noqa: E402

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK, ALPHA = 4, 8
# fp32 both sides, other summation orders: as tools/hf_interop.py, 1e-5 of the largest |logit|
# is a decade above fp32 noise and far below a mapping mistake (a swapped A and B, a missing
# alpha / r, a module on the wrong window moves logits by their own size).
LOGIT_RTOL = 1e-5
# Losses after 20 AdamW steps at lr 1e-2 on the adapters: an adapter element whose gradient sits
# at rounding level moves +-lr either way; measured gaps are ~1e-6, so 1e-4 is wide of noise
# and far below a wrong gradient (which moves the loss by ~1e-2 within a few steps).
LOSS_ATOL = 1e-4
# QLoRA against LoRA on the same base, adapters and steps. NF4 moves each weight by up to ~0.1
# of its block's absmax (docs/nf4.md); on this untrained model (weights N(0, 0.3)) that moves the
# step-0 loss by 0.12 and the 20 steps' by at most 0.19 (measured), while training closes the
# gap: the last losses differ by 0.1% (measured). The stated distance: every step within 0.3,
# the last within 1%.
QLORA_DISTANCE = 0.3
QLORA_LAST_RTOL = 0.01
# Weights after merging: W + s B A summed over the rank in another order: a few ulps of |W|.
MERGE_ATOL = 1e-6


def nf4_decoded(weight):
    """weight through bitsandbytes' NF4 quantiser, decoded from the QLoRA paper's definition:
    w = level[code] x absmax of its block of 64, the absmax from its 8-bit code (bitsandbytes'
    dequantize_blockwise) plus the offset; two codes a byte, the first in the high nibble."""
    import bitsandbytes.functional as bnb
    packed, state = bnb.quantize_4bit(weight.detach().contiguous(), quant_type="nf4", blocksize=64,
                                      compress_statistics=True)
    absmax = bnb.dequantize_blockwise(state.absmax, state.state2) + state.offset
    packed = packed.flatten()
    codes = torch.stack([packed >> 4, packed & 15], dim=1).flatten().long()
    n = weight.numel()
    w = state.code[codes][:n] * absmax.repeat_interleave(64)[:n]
    # bitsandbytes' own decoding, for the record: far from this on a CPU build without its kernels
    return w.reshape(weight.shape), (bnb.dequantize_4bit(packed.reshape(-1, 1), state) - w.reshape(weight.shape)).abs().max().item()


def base_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def windows(train, seed, step, B, T):
    o = torch.tensor([tinytrain_window_start(seed, step, r, len(train) - T) for r in range(B)])
    idx = o[:, None] + torch.arange(T)
    return train[idx], train[idx + 1]


def peft_losses(model, train, seed, steps, B, T, lr):
    """`steps` steps of torch.optim.AdamW (tinytrain's defaults) on the model's trainable
    parameters, the adapters, over tinytrain's windows: every step's loss."""
    model.train()
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=lr, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.01)
    losses = []
    for step in range(steps):
        x, y = windows(train, seed, step, B, T)
        loss = torch.nn.functional.cross_entropy(model(x).logits.reshape(-1, VOCAB), y.reshape(-1))
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tinytrain")
    args = p.parse_args()
    tt = args.tinytrain
    torch.set_num_threads(1)
    print(f"peft {peft.__version__}, torch {torch.__version__}")
    steps, B, T, lr, seed = 20, 4, 32, 1e-2, 7
    ids = [3, 17, 42, 99, 250, 7, 64, 128]
    with tempfile.TemporaryDirectory() as work:
        byte_dir = os.path.join(work, "byte")
        os.makedirs(byte_dir)
        with open(os.path.join(byte_dir, "tokenizer.json"), "w") as f:
            json.dump({"kind": "byte", "vocab_size": VOCAB}, f)
        data_dir = os.path.join(work, "data")
        run([tt, "prepare", "--input", FORTUNES, "--out", data_dir, "--tokenizer", "byte"])
        base_dir = os.path.join(work, "base")
        base = llama(11, kv_heads=2, tied=False)
        base.save_pretrained(base_dir)
        train = torch.from_numpy(read_shard(os.path.join(data_dir, "train.bin"), VOCAB).astype("int64"))
        common = [tt, "train", "--backend", "cpu", "--threads", "1", "--init-from", base_dir, "--dropout", 0,
                  "--data", data_dir, "--batch", B, "--seq", T, "--seed", seed, "--log-every", 1]
        lora = ["--lora-rank", RANK, "--lora-alpha", ALPHA, "--lora-targets", ",".join(MODULES)]

        # init: tinytrain's initial adapters in PEFT
        init_run, init_dir = os.path.join(work, "init.run"), os.path.join(work, "init.peft")
        run(common + lora + ["--steps", 1, "--lr", 0, "--weight-decay", 0, "--save-dir", init_run])
        run([tt, "export", "--checkpoint", init_run, "--format", "peft", "--out", init_dir, "--base-name", base_dir])
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), init_dir, is_trainable=True)
        saved = load_file(os.path.join(init_dir, "adapter_model.safetensors"))
        named = {n for n, _ in model.named_parameters() if "lora_" in n}
        expected = {k.replace(".weight", ".default.weight") for k in saved}
        check("init keys", named == expected, f"{len(saved)} adapter tensors, PEFT's names: {named == expected}")
        gap = logits_gap(base_logits(model.eval(), ids), base_logits(base, ids))
        check("init is the base", gap == 0.0, f"logits with the initial adapters vs the base: {gap:.1e} (B is zero)")

        # train: 20 steps side by side
        metrics = os.path.join(work, "train.jsonl")
        final_run = os.path.join(work, "final.run")
        run(common + lora + ["--steps", steps, "--lr", lr, "--metrics", metrics, "--save-dir", final_run])
        ours = [r["loss"] for r in map(json.loads, open(metrics)) if r.get("loss") is not None]
        theirs = peft_losses(model, train, seed, steps, B, T, lr)
        gap = max(abs(a - b) for a, b in zip(ours, theirs)) if len(ours) == steps else math.inf
        check("train", gap <= LOSS_ATOL,
              f"{len(ours)} step losses, largest gap {gap:.1e} (limit {LOSS_ATOL:g}); {theirs[0]:.4f} -> {theirs[-1]:.4f}")

        # qlora: the same 20 steps on a 4-bit base, ours and bitsandbytes'
        metrics = os.path.join(work, "qlora.jsonl")
        run(common + lora + ["--base-quant", "nf4", "--steps", steps, "--lr", lr, "--metrics", metrics])
        ours_q = [r["loss"] for r in map(json.loads, open(metrics)) if r.get("loss") is not None]
        quantised = AutoModelForCausalLM.from_pretrained(base_dir)
        bnb_gap = 0.0
        with torch.no_grad():
            for layer in quantised.model.layers:
                for linear in (*[getattr(layer.self_attn, m) for m in MODULES[:4]],
                               *[getattr(layer.mlp, m) for m in MODULES[4:]]):
                    decoded, gap = nf4_decoded(linear.weight)
                    linear.weight.copy_(decoded)
                    bnb_gap = max(bnb_gap, gap)
        print(f"     (bitsandbytes' own dequantize_4bit is {bnb_gap:.2e} away from the decoding)")
        model_q = PeftModel.from_pretrained(quantised, init_dir, is_trainable=True)
        theirs_q = peft_losses(model_q, train, seed, steps, B, T, lr)
        gap = max(abs(a - b) for a, b in zip(ours_q, theirs_q)) if len(ours_q) == steps else math.inf
        check("qlora", gap <= LOSS_ATOL,
              f"{len(ours_q)} step losses beside PEFT on bitsandbytes' NF4 codes, largest gap {gap:.1e} "
              f"(limit {LOSS_ATOL:g}); {theirs_q[0]:.4f} -> {theirs_q[-1]:.4f}")
        distance = max(abs(a - b) for a, b in zip(ours_q, ours)) if len(ours_q) == steps else math.inf
        last = abs(ours_q[-1] - ours[-1]) / ours[-1] if len(ours_q) == steps else math.inf
        check("qlora distance", distance <= QLORA_DISTANCE and last <= QLORA_LAST_RTOL,
              f"the 4-bit base's losses vs the fp32 base's: largest gap {distance:.2f} (limit {QLORA_DISTANCE:g}), "
              f"last {ours_q[-1]:.4f} vs {ours[-1]:.4f}, {100 * last:.2f}% (limit {100 * QLORA_LAST_RTOL:g}%)")

        # logits and merge: the trained adapters both ways
        final_dir, merged_dir = os.path.join(work, "final.peft"), os.path.join(work, "merged")
        run([tt, "export", "--checkpoint", final_run, "--format", "peft", "--out", final_dir])
        run([tt, "merge", "--base", base_dir, "--adapter", final_run, "--out", merged_dir])
        trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), final_dir).eval()
        ours_logits = tinytrain_logits(tt, merged_dir, ids, work, byte_dir)
        gap = logits_gap(ours_logits, base_logits(trained, ids))
        check("logits", gap <= LOGIT_RTOL, f"PEFT with tinytrain's adapters vs tinytrain merge: {gap:.1e} (limit {LOGIT_RTOL:g})")
        moved = logits_gap(ours_logits, base_logits(base, ids))
        check("adapters trained", moved > 100 * LOGIT_RTOL, f"the merged model's logits moved {moved:.1e} from the base's")
        unloaded = trained.merge_and_unload().state_dict()
        mine = load_file(os.path.join(merged_dir, "model.safetensors"))
        worst = max((unloaded[k] - mine[k]).abs().max().item() for k in mine)
        check("merge", worst <= MERGE_ATOL, f"merge_and_unload() vs tinytrain merge, largest |difference| {worst:.1e}")

        # import: an adapter PEFT made (PEFT's own init, B at zero) and trained 10 steps itself,
        # on windows of another seed
        torch.manual_seed(5)
        made = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir),
                              LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0,
                                         target_modules=["q_proj", "v_proj", "down_proj"], task_type="CAUSAL_LM"))
        peft_losses(made, train, seed + 1, 10, B, T, lr)
        peft_dir, from_peft = os.path.join(work, "made.peft"), os.path.join(work, "made.merged")
        made.save_pretrained(peft_dir)
        run([tt, "merge", "--base", base_dir, "--adapter", peft_dir, "--out", from_peft])
        gap = logits_gap(tinytrain_logits(tt, from_peft, ids, work, byte_dir), base_logits(made.eval(), ids))
        check("import", gap <= LOGIT_RTOL, f"PEFT's own adapter merged by tinytrain vs PEFT: {gap:.1e}")
        metrics = os.path.join(work, "from.jsonl")
        run(common + ["--lora-from", peft_dir, "--steps", 1, "--lr", 0, "--metrics", metrics])
        first = [r["loss"] for r in map(json.loads, open(metrics)) if r.get("loss") is not None][0]
        x, y = windows(train, seed, 0, B, T)
        with torch.no_grad():
            want = torch.nn.functional.cross_entropy(made(x).logits.reshape(-1, VOCAB), y.reshape(-1)).item()
        check("lora-from", abs(first - want) <= LOSS_ATOL, f"step 0 loss {first:.6f}, PEFT's {want:.6f}")
    if failures:
        print(f"{len(failures)} check(s) failed: {', '.join(failures)}")
        return 1
    print("every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
