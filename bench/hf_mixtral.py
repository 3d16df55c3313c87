#!/usr/bin/env python3
"""The PyTorch side of bench/moe_cpu.sh: Hugging Face transformers'
MixtralForCausalLM of models/mixtral.shard's shape, trained on the CPU in
fp32 as shardc's CPU target trains it: eager attention, the loss with the
router's load-balancing loss (output_router_logits), torch.optim.AdamW,
the gradient norm clipped to 1.

It trains `--warmup` steps, then times `--steps` more on random tokens
(the speed does not depend on them), and prints one JSON line: tokens per
second and seconds per step.

  hf_mixtral.py --vocab 256 --seq 64 --hidden 64 --heads 4 --kv-heads 2 --layers 2 \\
      --ffn 128 --experts 8 --top-k 2 --batch 8 --threads 1 [--warmup 3 --steps 20]
"""
import argparse
import json
import time

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(vocab=256, seq=64, hidden=64, heads=4, kv_heads=2, layers=2, ffn=128,
                     experts=8, top_k=2, batch=8, threads=1, warmup=3, steps=20).items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        max_position_embeddings=a.seq, num_local_experts=a.experts, num_experts_per_tok=a.top_k,
        router_aux_loss_coef=0.02, output_router_logits=True, sliding_window=None,
        attention_dropout=0.0, tie_word_embeddings=False, attn_implementation="eager")
    model = transformers.MixtralForCausalLM(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    g = torch.Generator().manual_seed(1)

    def step():
        ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
        out = model(input_ids=ids[:, :-1])
        logits = out.logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 ids[:, 1:].reshape(-1))
        loss = loss + cfg.router_aux_loss_coef * out.aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = time.perf_counter() - t0
    print(json.dumps({"tokens_per_s": a.steps * a.batch * a.seq / dt, "s_per_step": dt / a.steps,
                      "threads": a.threads, "torch": torch.__version__,
                      "transformers": transformers.__version__}))


if __name__ == "__main__":
    main()
