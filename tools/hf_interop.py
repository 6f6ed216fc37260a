#!/usr/bin/env python3
"""tinytrain against Hugging Face transformers itself, both ways (docs/toy-lm.md).

Tiny models are made by transformers in this process (LlamaConfig / GPT2Config, from_config,
save_pretrained: nothing is downloaded), and tinytrain is run on them as a user would:

  import    `tinytrain sample --checkpoint HF_DIR --dump-logits`: tinytrain's logits equal
            transformers' (fp32) for Llama with and without GQA, tied and untied, and GPT-2;
  generate  `tinytrain sample --temperature 0` and transformers' greedy `generate` give the
            same tokens;
  export    `tinytrain train --data` then `tinytrain export --format hf`: transformers loads the
            directory with no missing, unexpected or mismatched key, gives tinytrain's logits,
            and the run's own final val loss on its val shard;
  roundtrip HF -> `train --init-from` (lr 0) -> `export` -> HF leaves every tensor bit for bit;
  tokenizer a run on `prepare --tokenizer bpe` shards exports its SentencePiece tokenizer, and
            AutoTokenizer encodes text to the ids `tinytrain sample` encodes it to;
  train     20 steps from one HF init on tinytrain's own windows, dropout 0: tinytrain's losses
            agree with transformers + torch.optim.AdamW to 1e-4.

Usage: .venv/bin/python tools/hf_interop.py TINYTRAIN [--only NAME ...]
Prints a line per check and exits 1 when one fails. tests/hf_interop.sh runs it.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_torch_lm import eval_window_starts, read_shard, tinytrain_window_start  # noqa: E402

VOCAB = 256  # the byte tokenizer's: `tinytrain prepare --tokenizer byte` and sample's decoding
FORTUNES = "/usr/share/games/fortunes/fortunes"  # the fortunes package (scripts/setup.sh)

# fp32 on both sides, the same math in other summation orders: PyTorch's own fp32 noise on
# logits is ~1.5e-6 of their scale (docs/numerics.md), so 1e-5 of the largest |logit| is a decade
# above it and far below any mistake in a mapping (a transposed or swapped tensor moves logits by
# their own size).
LOGIT_RTOL = 1e-5
# Losses after up to 20 AdamW steps: parameters whose gradient sits at rounding level move by
# +-lr either way (docs/numerics.md), which moves the loss by ~1e-6 at lr 1e-3 on these models.
LOSS_ATOL = 1e-4

failures = []


def check(name, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        failures.append(name)


def run(cmd, **kw):
    """Run tinytrain; its output on failure, then stop."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, **kw)
    if p.returncode != 0:
        sys.stdout.write(p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace"))
        raise SystemExit(f"FAIL: {' '.join(str(c) for c in cmd)} exited {p.returncode}")
    return p


def llama(seed, kv_heads, tied):
    torch.manual_seed(seed)
    # initializer_range 0.3: logits far apart enough that greedy decoding is not a coin toss
    # between near-equal tokens (transformers' 0.02 leaves the top two within ~1e-4)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
                      rms_norm_eps=1e-5, rope_theta=500.0, tie_word_embeddings=tied, initializer_range=0.3,
                      bos_token_id=0, eos_token_id=0)
    return LlamaForCausalLM(cfg).eval()


def gpt2(seed, tied):
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=64,
                     activation_function="gelu", tie_word_embeddings=tied, initializer_range=0.3,
                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg).eval()


def logits_gap(ours, theirs):
    """max |ours - theirs| over the largest |theirs|."""
    return ((ours - theirs).abs().max() / theirs.abs().max()).item()


def tinytrain_logits(bin_, model_dir, ids, work, byte_dir):
    dump = os.path.join(work, "dump.safetensors")
    run([bin_, "sample", "--backend", "cpu", "--threads", "1", "--checkpoint", model_dir, "--tokenizer", byte_dir,
         "--prompt-ids", ",".join(map(str, ids)), "--dump-logits", dump])
    return load_file(dump)["logits"]


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def load_quietly(model_dir):
    """from_pretrained, and its loading report: every list must be empty."""
    model, info = AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    return model.eval(), problems


def import_and_generate(bin_, work, byte_dir, name, model, shard=False):
    model_dir = os.path.join(work, name)
    # shard: several files and model.safetensors.index.json, as save_pretrained writes big models
    model.save_pretrained(model_dir, max_shard_size="20KB" if shard else "5GB")
    if shard:
        shards = [f for f in os.listdir(model_dir) if f.endswith(".safetensors")]
        check(f"import {name}: sharded", len(shards) > 1, f"saved as {len(shards)} shards and an index")
    ids = [ord(c) for c in "Hugging Face, both ways."]
    gap = logits_gap(tinytrain_logits(bin_, model_dir, ids, work, byte_dir), hf_logits(model, ids))
    check(f"import {name}", gap <= LOGIT_RTOL, f"logits differ by {gap:.2e} of their scale (limit {LOGIT_RTOL:g})")
    # greedy decoding, stopping at the end-of-text id 0 as tinytrain does
    new = 24
    out = run([bin_, "sample", "--backend", "cpu", "--threads", "1", "--checkpoint", model_dir, "--tokenizer", byte_dir,
               "--prompt-ids", ",".join(map(str, ids)), "--temperature", "0", "--max-new-tokens", new]).stdout
    ours = list(out[:-1]) if out.endswith(b"\n") else list(out)  # the byte tokenizer: a byte per id
    with torch.no_grad():
        theirs = model.generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False, eos_token_id=0,
                                pad_token_id=0)[0].tolist()
    if theirs and theirs[-1] == 0:  # transformers keeps the end-of-text id; sample prints no text for it
        theirs = theirs[:-1]
    check(f"generate {name}", ours == theirs,
          f"{len(theirs) - len(ids)} greedy tokens {'the same' if ours == theirs else f'differ: {ours} vs {theirs}'}")
    return model_dir


def export_after_training(bin_, work, byte_dir, data_dir, name, arch_flags):
    run_dir, hf_dir, metrics = (os.path.join(work, f"{name}.{x}") for x in ("run", "hf", "jsonl"))
    B, T, steps, eval_batches = 4, 32, 20, 2
    run([bin_, "train", "--backend", "cpu", "--threads", "1", *arch_flags, "--vocab-size", VOCAB, "--d-model", 32,
         "--n-head", 4, "--n-layer", 2, "--d-ff", 48, "--max-seq-len", 64, "--batch", B, "--seq", T, "--steps", steps,
         "--lr", "1e-3", "--dropout", 0, "--data", data_dir, "--eval-every", 10, "--eval-batches", eval_batches,
         "--metrics", metrics, "--save-dir", run_dir])
    out = run([bin_, "export", "--checkpoint", run_dir, "--format", "hf", "--out", hf_dir]).stdout.decode()
    model, problems = load_quietly(hf_dir)
    check(f"export {name}: loads", not problems,
          f"{type(model).__name__} with {problems or 'no missing, unexpected or mismatched keys'} ({out.strip()})")
    ids = [ord(c) for c in "An exported checkpoint."]
    ckpt = os.path.join(run_dir, f"ckpt_{steps:08d}.safetensors")
    gap = logits_gap(tinytrain_logits(bin_, ckpt, ids, work, byte_dir), hf_logits(model, ids))
    check(f"export {name}: logits", gap <= LOGIT_RTOL, f"differ by {gap:.2e} of their scale")
    # the run's final evaluation: the mean cross-entropy over eval_batches x B fixed val windows
    final = [json.loads(line) for line in open(metrics) if line.strip()][-1]
    val = torch.from_numpy(read_shard(os.path.join(data_dir, "val.bin"), VOCAB).astype("int64"))
    starts = torch.tensor(eval_window_starts(len(val), T, eval_batches * B))
    idx = starts[:, None] + torch.arange(T)
    with torch.no_grad():
        logits = model(val[idx]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), val[idx + 1].reshape(-1)).item()
    # fp32 means of 256 token losses of ~5 (ulp 5e-7): a few ulps apart at most
    check(f"export {name}: val loss", final["step"] == steps and abs(loss - final["val_loss"]) <= 1e-5,
          f"transformers {loss:.6f}, tinytrain's run {final['val_loss']:.6f} (step {final['step']})")


def export_tokenizer(bin_, work):
    data_dir, run_dir, hf_dir = (os.path.join(work, f"bpe.{x}") for x in ("data", "run", "hf"))
    run([bin_, "prepare", "--input", FORTUNES, "--out", data_dir, "--tokenizer", "bpe", "--vocab-size", 512])
    run([bin_, "train", "--backend", "cpu", "--threads", "1", "--arch", "llama", "--vocab-size", 512, "--d-model", 32,
         "--n-head", 4, "--n-layer", 1, "--d-ff", 48, "--max-seq-len", 64, "--batch", 2, "--seq", 32, "--steps", 1,
         "--data", data_dir, "--save-dir", run_dir])
    run([bin_, "export", "--checkpoint", run_dir, "--format", "hf", "--out", hf_dir])
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    # leading and doubled spaces, tabs, a newline, letters outside the training text (bytes)
    text = " Two  spaces,\ttabs and\nnewlines: naïve café, 漢字 ✓ {braces} 'quotes'"
    dump = os.path.join(work, "bpe.logits.safetensors")
    run([bin_, "sample", "--backend", "cpu", "--threads", "1", "--checkpoint", run_dir, "--prompt", text,
         "--dump-logits", dump])
    ours = load_file(dump)["tokens"].tolist()[1:]  # after the end-of-text id sample starts with
    theirs = tokenizer.encode(text)
    check("tokenizer", ours == theirs,
          f"{type(tokenizer).__name__} encodes {len(theirs)} ids {'as tinytrain does' if ours == theirs else f'{theirs} vs {ours}'}")


def round_trip(bin_, work, name, model_dir):
    run_dir, back = os.path.join(work, f"{name}.rt"), os.path.join(work, f"{name}.back")
    run([bin_, "train", "--backend", "cpu", "--threads", "1", "--init-from", model_dir, "--batch", 2, "--seq", 16,
         "--steps", 1, "--lr", 0, "--weight-decay", 0, "--save-dir", run_dir])
    run([bin_, "export", "--checkpoint", run_dir, "--format", "hf", "--out", back])
    a = {}
    for f in sorted(os.listdir(model_dir)):  # one file or shards
        if f.endswith(".safetensors"):
            a.update(load_file(os.path.join(model_dir, f)))
    b = load_file(os.path.join(back, "model.safetensors"))
    same = a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
    check(f"round trip {name}", same, f"{len(a)} tensors {'bit for bit' if same else 'differ'}")


def train_side_by_side(bin_, work, data_dir, name, model_dir):
    steps, B, T, lr, seed = 20, 4, 32, 1e-3, 7
    metrics = os.path.join(work, f"{name}.train.jsonl")
    run([bin_, "train", "--backend", "cpu", "--threads", "1", "--init-from", model_dir, "--dropout", 0,
         "--data", data_dir, "--batch", B, "--seq", T, "--steps", steps, "--lr", lr, "--seed", seed,
         "--log-every", 1, "--metrics", metrics])
    ours = [r["loss"] for r in map(json.loads, open(metrics)) if r.get("loss") is not None]
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    for m in model.modules():  # dropout 0 on transformers' side too
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    model.train()
    train = torch.from_numpy(read_shard(os.path.join(data_dir, "train.bin"), VOCAB).astype("int64"))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    theirs = []
    for step in range(steps):
        o = torch.tensor([tinytrain_window_start(seed, step, r, len(train) - T) for r in range(B)])
        idx = o[:, None] + torch.arange(T)
        loss = torch.nn.functional.cross_entropy(model(train[idx]).logits.reshape(-1, VOCAB),
                                                 train[idx + 1].reshape(-1))
        theirs.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    gap = max(abs(a - b) for a, b in zip(ours, theirs)) if len(ours) == steps else math.inf
    check(f"train {name}", gap <= LOSS_ATOL,
          f"{len(ours)} step losses, largest gap {gap:.1e} (limit {LOSS_ATOL:g}); {theirs[0]:.4f} -> {theirs[-1]:.4f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tinytrain")
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as work:
        byte_dir = os.path.join(work, "byte")
        os.makedirs(byte_dir)
        with open(os.path.join(byte_dir, "tokenizer.json"), "w") as f:
            json.dump({"kind": "byte", "vocab_size": VOCAB}, f)
        data_dir = os.path.join(work, "data")
        run([args.tinytrain, "prepare", "--input", FORTUNES, "--out", data_dir, "--tokenizer", "byte"])
        made = {
            "llama-gqa-tied": llama(1, kv_heads=2, tied=True),
            "llama-untied": llama(2, kv_heads=4, tied=False),
            "gpt2-tied": gpt2(3, tied=True),
            "gpt2-untied": gpt2(4, tied=False),
        }
        dirs = {name: import_and_generate(args.tinytrain, work, byte_dir, name, m, shard=name == "llama-untied")
                for name, m in made.items()}
        for name in ("llama-gqa-tied", "llama-untied", "gpt2-tied"):
            round_trip(args.tinytrain, work, name, dirs[name])
        export_after_training(args.tinytrain, work, byte_dir, data_dir, "llama",
                              ["--arch", "llama", "--n-kv-head", 2, "--tie-embeddings", "true"])
        export_after_training(args.tinytrain, work, byte_dir, data_dir, "gpt2", ["--arch", "gpt2"])
        export_tokenizer(args.tinytrain, work)
        for name in ("llama-gqa-tied", "gpt2-tied"):
            train_side_by_side(args.tinytrain, work, data_dir, name, dirs[name])
    if failures:
        print(f"{len(failures)} check(s) failed: {', '.join(failures)}")
        return 1
    print("every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
