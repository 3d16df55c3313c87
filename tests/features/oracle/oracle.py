#!/usr/bin/python3
"""The PyTorch reference run that our training programs are checked against.

    oracle.py --model gpt2|llama --config k=v,... --weights INIT.safetensors
              --data SHARD --batch b --seq T --global-batch B --steps N
              [--lr 3e-4 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1
               --clip 1.0 --warmup 0 --lr-min 0 --lr-schedule cosine|constant
               --optimizer adamw|sgd] --no-shuffle --out RESULT.json
              [--grads GRADS.safetensors] [--dtype f32|f64] [--threads N]
              [--log-json FILE] [--fused-ops] [--init-seed S]

It loads the same initial weights, reads the same windows of the same shard
(step i: the B*T+1 tokens from i*B*T, microbatch j = rows j*b.. of it),
accumulates the microbatch gradients scaled by 1/(B/b) as the runtime does
(its d_loss seed), clips, schedules the learning rate and steps AdamW on
CPU. It prints one line per step and writes RESULT.json:

    {"model", "config", "dtype", "batch", "seq", "global_batch", "steps": N,
     "losses": [...], "log": [{"step", "loss", "lr", "grad_norm"}, ...]}

`loss` of a step is the mean of its microbatch losses (the loss of the whole
global batch), computed before that step's update. --grads writes the first
step's accumulated gradients (before clipping) with the parameter names.
--log-json writes the per-step records in the runtime's --log-json form
(one JSON object per line), which lets compare.py be tried on two oracle
runs. Without --weights, parameters are drawn from the model file's init
rules with --init-seed (for benchmarks and self-tests).

The learning rate of step s (0-based) of N, with warmup W (llm.c's rule):
s < W: lr * (s+1) / W; then, for cosine, lr_min + (lr - lr_min) *
(1 + cos(pi * (s-W) / (N-W))) / 2, and lr for constant. Weight decay
applies to tensors of 2 or more dims only (matrices, embeddings).
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# No __pycache__ beside the sources: the tree stays as checked out.
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import common  # noqa: E402
import gpt2  # noqa: E402
import llama  # noqa: E402
import safetensors  # noqa: E402
import shard_data  # noqa: E402

MODELS = {"gpt2": gpt2, "llama": llama}
DTYPES = {"f32": torch.float32, "f64": torch.float64}


class OracleError(Exception):
    pass


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch reference training run",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--config", default="", help="k=v,... as the -D flags of shardc")
    ap.add_argument("--weights", help="initial weights (safetensors)")
    ap.add_argument("--init-seed", type=int, default=0,
                    help="seed of the init without --weights")
    ap.add_argument("--data", required=True, help="llm.c token shard (file or glob)")
    ap.add_argument("--batch", type=int, required=True, help="microbatch b")
    ap.add_argument("--seq", type=int, required=True, help="sequence length T")
    ap.add_argument("--global-batch", type=int, help="B (default b): B/b microbatches a step")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0, help="global grad-norm clip, 0: off")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--lr-min", type=float, default=0.0)
    ap.add_argument("--lr-schedule", choices=["cosine", "constant"], default="cosine")
    ap.add_argument("--no-shuffle", action="store_true", required=True,
                    help="required: only the unshuffled order is reproduced")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: nproc)")
    ap.add_argument("--out", required=True, help="RESULT.json")
    ap.add_argument("--grads", help="first step's gradients (safetensors)")
    ap.add_argument("--log-json", help="per-step records, one JSON object per line")
    ap.add_argument("--fused-ops", action="store_true",
                    help="torch's fused layernorm/gelu/silu/cross entropy (same math; benchmarks)")
    ap.add_argument("--quiet", action="store_true")
    return ap.parse_args(argv)


def lr_at(step, args):
    """The learning rate of 0-based `step` (see the module doc)."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    if args.lr_schedule == "constant" or args.steps <= args.warmup:
        return args.lr
    ratio = (step - args.warmup) / (args.steps - args.warmup)
    return args.lr_min + (args.lr - args.lr_min) * 0.5 * (1.0 + math.cos(math.pi * ratio))


def load_weights(path, table, dtype):
    """The tensors of `table` from a safetensors file; every name must be
    there with its exact shape, and no other name may be."""
    try:
        found = safetensors.read(path)
    except (OSError, safetensors.SafetensorsError) as e:
        raise OracleError(str(e))
    want = {name: shape for name, shape, _ in table}
    problems = ["missing tensor %s %s" % (n, list(s)) for n, s in want.items() if n not in found]
    problems += ["tensor %s has shape %s, the model wants %s" % (n, list(found[n].shape), list(s))
                 for n, s in want.items() if n in found and tuple(found[n].shape) != tuple(s)]
    problems += ["unexpected tensor %s" % n for n in found if n not in want]
    if problems:
        raise OracleError("%s: %s" % (path, "; ".join(problems)))
    return {n: torch.from_numpy(np.array(found[n], dtype=np.float64)).to(dtype) for n in want}


def make_optimizer(P, args):
    """AdamW (or SGD) with weight decay on tensors of >= 2 dims only."""
    decay = [t for t in P.values() if t.dim() >= 2]
    other = [t for t in P.values() if t.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": other, "weight_decay": 0.0}]
    if args.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=args.lr)
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)


def clip_grads(P, clip):
    """The global gradient norm (before clipping); scales the gradients by
    clip / (norm + 1e-6) when that is below 1, the rule of
    torch.nn.utils.clip_grad_norm_ (which nanoGPT calls). The norm is summed
    in f64 whatever the dtype, as the runtime sums it."""
    norm = math.sqrt(sum(float((t.grad.double() ** 2).sum()) for t in P.values()))
    scale = clip / (norm + 1e-6) if clip > 0 else 1.0
    if scale < 1:
        for t in P.values():
            t.grad.mul_(scale)
    return norm


def setup(args):
    """Model module, config, parameters and data windows from the flags."""
    model = MODELS[args.model]
    if args.batch <= 0 or args.seq <= 0 or args.steps < 0:
        raise OracleError("--batch and --seq must be positive, --steps >= 0")
    B = args.global_batch or args.batch
    if B % args.batch:
        raise OracleError("--global-batch %d is not a multiple of --batch %d" % (B, args.batch))
    overrides = common.parse_config(args.config)
    for k, v in (("seq", args.seq), ("batch", args.batch)):
        if k in overrides and overrides[k] != v:
            raise OracleError("--config %s=%s disagrees with --%s %d" % (k, overrides[k], k, v))
        overrides[k] = v
    cfg = model.config(overrides)
    table = model.params(cfg)
    dtype = DTYPES[args.dtype]
    if args.weights:
        P = load_weights(args.weights, table, dtype)
    else:
        P = common.init_params(table, args.init_seed, dtype)
    data = shard_data.Windows(args.data, B, args.seq, vocab=cfg["vocab"])
    return model, cfg, P, data, B


def train(args):
    model, cfg, P, data, B = setup(args)
    for t in P.values():
        t.requires_grad_(True)
    opt = make_optimizer(P, args)
    micro = B // args.batch
    log, grads = [], None
    for step in range(args.steps):
        t0 = time.perf_counter()
        tokens, targets = data.step(step)
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for j in range(micro):
            rows = slice(j * args.batch, (j + 1) * args.batch)
            loss = model.forward(P, cfg, torch.from_numpy(tokens[rows]),
                                 torch.from_numpy(targets[rows]))
            # The runtime seeds each microbatch's backward with 1/microbatches.
            (loss / micro).backward()
            total += float(loss)
        if step == 0 and args.grads:
            grads = {n: t.grad.detach().clone() for n, t in P.items()}
        norm = clip_grads(P, args.clip)
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        dt = time.perf_counter() - t0
        rec = {"step": step, "loss": total / micro, "lr": lr, "grad_norm": norm,
               "tokens_per_s": B * args.seq / dt}
        log.append(rec)
        if not args.quiet:
            print("step %4d | loss %.6f | lr %.3e | norm %.4f | %.0f tok/s"
                  % (step, rec["loss"], lr, norm, rec["tokens_per_s"]), flush=True)
    return cfg, P, log, grads


def write_outputs(args, cfg, log, grads):
    result = {"model": args.model, "config": cfg, "dtype": args.dtype, "batch": args.batch,
              "seq": args.seq, "global_batch": args.global_batch or args.batch,
              "steps": args.steps, "losses": [r["loss"] for r in log], "log": log}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    if args.log_json:
        with open(args.log_json, "w") as f:
            for r in log:
                f.write(json.dumps(r) + "\n")
    if args.grads:
        if grads is None:
            raise OracleError("--grads needs --steps >= 1")
        safetensors.write(args.grads, {n: g.numpy() for n, g in grads.items()})


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    common.FUSED = args.fused_ops
    try:
        cfg, _, log, grads = train(args)
        write_outputs(args, cfg, log, grads)
    except (OSError, OracleError, common.ConfigError, shard_data.ShardError,
            safetensors.SafetensorsError) as e:
        sys.exit("oracle.py: error: %s" % e)
    return log


if __name__ == "__main__":
    main()
