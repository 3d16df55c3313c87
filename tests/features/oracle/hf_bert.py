#!/usr/bin/python3
"""models/bert.shard against Hugging Face transformers' BertForMaskedLM.

    hf_bert.py data --vocab V --seq T --rows N --seed S -o SHARD
    hf_bert.py check --config k=v,... --weights INIT.safetensors --data SHARD
                     --batch b --seq T --steps N --lr LR --weight-decay WD
                     --ours OURS.jsonl --ours-final FINAL.safetensors
                     [--seed S] [--tol 1e-5] [--dtype f32|f64]

`data` writes a shard of N rows of T tokens, each row a random length
between T/2 and T of tokens in [1, V-1) followed by padding (token 0), so
that the key-padding mask matters; V-1 is left for [MASK].

`check` loads the same initial weights (ours, renamed to HF's names) into
BertForMaskedLM, makes each step's masked-LM examples from the same window
by the runtime's rule (runtime/mlm.h, repeated here in Python: the same
hash of (--seed, step, position)), feeds input_ids, attention_mask and
labels to HF's model, whose loss is its own cross entropy over the labels
that are not -100, and steps torch.optim.AdamW N times (weight decay on
tensors of 2 or more dims, as our runtime does). Every step's loss, and
HF's loss of our final weights on the next window, must be within --tol of
ours. Exit 77 when transformers is missing (a skip for ctest).
"""
import argparse
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
# This folder's safetensors.py (numpy only) would hide the package that
# transformers imports: the folder's modules are loaded by file instead.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import numpy as np  # noqa: E402


def _local(name):
    spec = importlib.util.spec_from_file_location("oracle_" + name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


safetensors = _local("safetensors")
shard_data = _local("shard_data")
hf_steps = _local("hf_steps")

# --- runtime/rng.c and runtime/mlm.c, bit for bit ---------------------------
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
IGNORE = -100


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def key2(a, b):
    return mix64(mix64((a + GOLDEN) & M64) ^ b)


def hash_unit(key, index):
    return (mix64((key + (index + 1) * GOLDEN) & M64) >> 11) * (1.0 / 9007199254740992.0)


def mlm_key(seed, step, val=False):
    return key2(key2(seed, 0x6D6C6D2D76616C if val else 0x6D6C6D), step & M64)


def mlm_examples(window, key, prob, mask_id, pad_id, vocab):
    """(input_ids, labels, attention_mask) of a window's positions."""
    rkey = mix64(key)
    ids, labels, keep = window.copy(), np.full_like(window, IGNORE), np.ones_like(window)
    for p, x in enumerate(window.tolist()):
        if pad_id >= 0 and x == pad_id:
            keep[p] = 0
            continue
        if hash_unit(key, 2 * p) >= prob:
            continue
        labels[p] = x
        u = hash_unit(key, 2 * p + 1)
        if u < 0.8:
            ids[p] = mask_id
        elif u < 0.9:
            ids[p] = int(hash_unit(rkey, p) * vocab)
    return ids, labels, keep


def make_data(args):
    rng = np.random.default_rng(args.seed)
    rows = []
    for _ in range(args.rows):
        n = int(rng.integers(args.seq // 2, args.seq + 1))
        row = np.zeros(args.seq, dtype=np.int64)
        row[:n] = rng.integers(1, args.vocab - 1, size=n)
        rows.append(row)
    # One token more than the rows: a window is B*T+1 tokens.
    shard_data.write(args.o, np.concatenate(rows + [np.zeros(1, dtype=np.int64)]))
    print("hf_bert: %d rows of %d tokens (padding 0) -> %s" % (args.rows, args.seq, args.o))


def parse_config(text):
    cfg = {}
    for kv in filter(None, text.split(",")):
        k, v = kv.split("=", 1)
        cfg[k] = float(v) if any(c in v for c in ".e") else int(v)
    return cfg


def hf_name(ours):
    """Our name -> HF's: `bert.` before the embeddings, `bert.encoder.` before
    the layers, and `out` (`output` is a keyword of the language) spelled
    `output`."""
    ours = ".".join("output" if w == "out" else w for w in ours.split("."))
    if ours.startswith("embeddings."):
        return "bert." + ours
    if ours.startswith("layer."):
        return "bert.encoder." + ours
    return ours


def check(args):
    import torch
    try:
        import transformers
    except ImportError as e:
        print("hf_bert: SKIP: transformers is not importable (%s); scripts/install-deps.sh "
              "installs it into build/pyenv" % e)
        sys.exit(77)
    torch.set_num_threads(1)
    cfg = parse_config(args.config)
    V = cfg["vocab"]
    hc = transformers.BertConfig(
        vocab_size=V, hidden_size=cfg["hidden"], num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], intermediate_size=4 * cfg["hidden"],
        hidden_act="gelu", max_position_embeddings=args.seq, type_vocab_size=2,
        layer_norm_eps=1e-12, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        attn_implementation="eager")
    model = transformers.BertForMaskedLM(hc)
    dtype = {"f32": torch.float32, "f64": torch.float64}[args.dtype]
    npdtype = {"f32": np.float32, "f64": np.float64}[args.dtype]
    model.to(dtype)
    model.train()

    init = safetensors.read(args.weights)
    # The decoder's weight and bias are the word embeddings and
    # cls.predictions.bias (tied): named_parameters lists each once.
    params = hf_steps.load_ours(model, init, hf_name, npdtype, "hf_bert")
    if set(params) != {hf_name(n) for n in init}:
        sys.exit("hf_bert: parameters differ: HF only %s, ours only %s"
                 % (sorted(set(params) - {hf_name(n) for n in init}),
                    sorted({hf_name(n) for n in init} - set(params))))
    opt = hf_steps.adamw(params, args)
    data = shard_data.Windows(args.data, args.batch, args.seq, vocab=V)
    mask_id = V - 1

    def batch(step):
        tokens, _ = data.step(step)
        ids, labels, keep = mlm_examples(tokens.reshape(-1), mlm_key(args.seed, step), 0.15,
                                         mask_id, 0, V)
        shape = (args.batch, args.seq)
        return {"input_ids": torch.from_numpy(ids.reshape(shape)),
                "labels": torch.from_numpy(labels.reshape(shape)),
                "attention_mask": torch.from_numpy(keep.reshape(shape))}

    hf_losses = []
    for step in range(args.steps):
        b = batch(step)
        if step == 0:
            print("step 1: %d of %d positions predicted, %d padding"
                  % (int((b["labels"] != IGNORE).sum()), b["labels"].numel(),
                     int((b["attention_mask"] == 0).sum())))
        loss = model(**b).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        hf_losses.append(float(loss))

    print("BertForMaskedLM (transformers %s) against models/bert.shard, %s, %s"
          % (transformers.__version__, args.config, args.dtype))
    ok = hf_steps.compare_losses(args.ours, hf_losses, args.tol)
    nxt = batch(args.steps)

    def eval_loss():
        with torch.no_grad():
            return float(model(**nxt).loss)
    # The key biases' gradient is zero up to rounding (a softmax ignores a
    # common shift): reported, not checked.
    ok = hf_steps.compare_after(model, params, safetensors.read(args.ours_final), hf_name, npdtype,
                                eval_loss, args.steps, args.tol, "key.bias", "the key biases") and ok
    print("hf_bert: %s (tolerance %g)" % ("PASS" if ok else "FAIL", args.tol))
    sys.exit(0 if ok else 1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("--vocab", type=int, required=True)
    d.add_argument("--seq", type=int, required=True)
    d.add_argument("--rows", type=int, required=True)
    d.add_argument("--seed", type=int, default=1)
    d.add_argument("-o", required=True)
    c = sub.add_parser("check")
    c.add_argument("--config", required=True)
    c.add_argument("--weights", required=True)
    c.add_argument("--data", required=True)
    c.add_argument("--batch", type=int, required=True)
    c.add_argument("--seq", type=int, required=True)
    c.add_argument("--steps", type=int, required=True)
    c.add_argument("--lr", type=float, required=True)
    c.add_argument("--beta1", type=float, default=0.9)
    c.add_argument("--beta2", type=float, default=0.95)
    c.add_argument("--eps", type=float, default=1e-8)
    c.add_argument("--weight-decay", type=float, required=True)
    c.add_argument("--seed", type=int, default=1337, help="our --seed: the masking's key")
    c.add_argument("--ours", required=True, help="our --log-json")
    c.add_argument("--ours-final", required=True, help="our weights after the steps")
    c.add_argument("--tol", type=float, default=1e-5)
    c.add_argument("--dtype", choices=["f32", "f64"], default="f32")
    args = ap.parse_args()
    (make_data if args.cmd == "data" else check)(args)


if __name__ == "__main__":
    main()
