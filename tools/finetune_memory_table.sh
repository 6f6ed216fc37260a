#!/usr/bin/env bash
# The fine-tuning memory table of docs/memory.md: `tinytrain plan` for a 7B Llama (--model-size
# 7b: Llama 2 7B's shapes), batch 1, bf16, on a CUDA device (its workspaces included), as a full
# fine-tune, LoRA (rank 16 on every linear of the block, the base in bf16) and QLoRA (the same
# adapters, the base's linears in NF4), at seq 512 and 2048, without and with --recompute layer;
# then whether each fits in 8, 16, 24, 80 and 141 GiB. Every figure is the plan's.
# Usage: finetune_memory_table.sh TINYTRAIN
set -euo pipefail
tinytrain=$1
lora="--lora-rank 16 --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
echo "| run | seq | recompute | weights GiB | optimizer GiB | activations GiB | peak GiB | 8 | 16 | 24 | 80 | 141 |"
echo "|---|---:|---|---:|---:|---:|---:|:-:|:-:|:-:|:-:|:-:|"
for seq in 512 2048; do
  for run in "full fine-tune" "LoRA bf16" "QLoRA NF4"; do
    case $run in
      "full fine-tune") flags="" ;;
      "LoRA bf16") flags=$lora ;;
      "QLoRA NF4") flags="$lora --base-quant nf4" ;;
    esac
    for recompute in none layer; do
      # shellcheck disable=SC2086
      plan=$("$tinytrain" plan --model-size 7b --seq "$seq" --batch 1 --precision bf16 --recompute "$recompute" \
        $flags --backend cuda --device-memory 1000GiB)
      gib() { echo "$plan" | awk -v what="$1" '$1 == "total" && $2 == what {printf "%.2f", $NF / 1024}'; }
      peak=$(echo "$plan" | awk '$1 == "peak" {printf "%.2f", $NF / 1024}')
      fits=""
      for card in 8 16 24 80 141; do
        fits+=" | $(awk -v p="$peak" -v c="$card" 'BEGIN {print (p <= c ? "yes" : "no")}')"
      done
      echo "| $run | $seq | $recompute | $(gib weights) | $(gib optimizer) | $(gib activations) | $peak$fits |"
    done
  done
done
