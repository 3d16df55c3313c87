#!/usr/bin/python3
"""Our models against Hugging Face transformers' own model classes.

    hf_models.py --model neox --config k=v,... --weights INIT.safetensors
                 --data SHARD --batch b --seq T --steps N --lr LR
                 --weight-decay WD --ours OURS.jsonl --ours-final FINAL.safetensors
                 [--tol 1e-5]

The same initial weights (ours, renamed to HF's names, or with --hf-init
HF's own, drawn and saved by --make, that our program read through
--init-from) go into HF's model
(GPTNeoXForCausalLM for models/neox.shard, MixtralForCausalLM for
models/mixtral.shard, whose stacked experts are split into HF's one tensor
each, and whose loss adds HF's load-balancing loss); it reads the same windows of
the same shard as our program did with --no-shuffle, takes the mean
cross-entropy of its logits against the next tokens and steps
torch.optim.AdamW (weight decay on tensors of 2 or more dims, as our
runtime does; no clipping, a constant learning rate) N times, in fp32 or
(--dtype f64, both sides) in double. It prints
both sides' loss of every step and the largest difference of the final
weights, then HF's loss on the next window with our final weights and
with its own, and exits 1 when any of these losses differs by more than
--tol (absolute).
Exit 77 when transformers is missing (a skip for ctest).
"""
import argparse
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
# Python puts this folder first on the path, where its safetensors.py (numpy
# only) would hide the package of that name that transformers imports: the
# folder's modules are loaded by file below instead.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import transformers
    from transformers.models.gpt_neox import modeling_gpt_neox  # noqa: F401
    from transformers.models.mixtral import modeling_mixtral  # noqa: F401
except ImportError as e:
    print("hf_models: SKIP: transformers is not importable (%s); scripts/install-deps.sh "
          "installs it into build/pyenv" % e)
    sys.exit(77)


def _local(name):
    spec = importlib.util.spec_from_file_location("oracle_" + name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


safetensors = _local("safetensors")
shard_data = _local("shard_data")
hf_steps = _local("hf_steps")


def parse_config(text):
    cfg = {}
    for kv in filter(None, text.split(",")):
        k, v = kv.split("=", 1)
        cfg[k] = float(v) if any(c in v for c in ".e") else int(v)
    return cfg


def neox(cfg):
    """GPTNeoXForCausalLM of models/neox.shard's shape; our name -> HF's."""
    hc = transformers.GPTNeoXConfig(
        vocab_size=cfg["vocab"], hidden_size=cfg["hidden"], num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], intermediate_size=4 * cfg["hidden"],
        rotary_pct=0.25, rotary_emb_base=10000, max_position_embeddings=cfg["seq"],
        layer_norm_eps=1e-5, use_parallel_residual=True, hidden_act="gelu",
        attention_dropout=0.0, hidden_dropout=0.0, tie_word_embeddings=False,
        attn_implementation="eager")
    model = transformers.GPTNeoXForCausalLM(hc)

    def name(ours):
        return ours if ours.startswith("embed_out.") else "gpt_neox." + ours
    return model, name


def mixtral(cfg):
    """MixtralForCausalLM of models/mixtral.shard's shape; our name -> HF's.
    Its loss adds the router's load-balancing loss (output_router_logits)."""
    hc = transformers.MixtralConfig(
        initializer_range=cfg.get("init_std", 0.02),
        vocab_size=cfg["vocab"], hidden_size=cfg["hidden"], intermediate_size=cfg["ffn"],
        num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
        num_key_value_heads=cfg["kv_heads"], max_position_embeddings=cfg["seq"],
        rms_norm_eps=1e-5, rope_theta=10000.0, num_local_experts=cfg["experts"],
        num_experts_per_tok=cfg["top_k"], router_aux_loss_coef=cfg["router_aux_loss_coef"],
        output_router_logits=True, sliding_window=None, attention_dropout=0.0,
        tie_word_embeddings=False, attn_implementation="eager")
    model = transformers.MixtralForCausalLM(hc)

    def name(ours):
        return ours if ours.startswith("lm_head.") else "model." + ours
    return model, name


def split_experts(tensors):
    """Our stacked experts (`...experts.w1.weight` [E, out, in]) as HF's one
    tensor per expert (`...experts.N.w1.weight`); the rest as they are."""
    out = {}
    for n, t in tensors.items():
        head, sep, tail = n.partition(".experts.")
        if sep and t.ndim == 3:
            for e in range(t.shape[0]):
                out["%s.experts.%d.%s" % (head, e, tail)] = t[e]
        else:
            out[n] = t
    return out


def check_drops(model, cfg, tokens, args):
    """The slots each layer drops at a capacity factor, from HF's own router
    choices on the step's tokens (one microbatch): an expert keeps
    ceil(f * T * k / E) of its copies (ir_moe_capacity), so a layer drops
    the sum over experts of what they were given past that. Against our
    first step's moe_dropped from the same weights; whether they agree."""
    import json
    import math
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(tokens.astype(np.int64)), output_router_logits=True)
    E, k = cfg["experts"], cfg["top_k"]
    T = tokens.size
    cap = math.ceil(args.capacity * T * k / E)
    hf = []
    for logits in out.router_logits:
        chosen = torch.topk(torch.softmax(logits.double(), dim=-1), k, dim=-1).indices
        demand = torch.bincount(chosen.reshape(-1), minlength=E)
        hf.append(int(torch.clamp(demand - cap, min=0).sum()))
    ours = json.loads(open(args.ours_drops).readline())["moe_dropped"]
    print("capacity %g (%d rows an expert of %d copies): slots dropped by layer, ours %s, "
          "from HF's router choices %s%s" % (args.capacity, cap, T * k, ours, hf,
                                             "" if ours == hf else "  FAIL"))
    return ours == hf


MODELS = {"neox": neox, "mixtral": mixtral}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--weights", help="our initial weights (safetensors)")
    ap.add_argument("--hf-init", metavar="DIR",
                    help="HF's initial weights instead: the folder --make wrote")
    ap.add_argument("--make", metavar="DIR",
                    help="only draw HF's random weights (its own init, std init_std) and "
                    "save_pretrained them into DIR, as a sharded set with its index")
    ap.add_argument("--data")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.0)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--ours", help="our --log-json")
    ap.add_argument("--ours-final", help="our weights after the steps")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--dtype", choices=["f32", "f64"], default="f32")
    ap.add_argument("--capacity", type=float, default=0.0,
                    help="with --ours-drops: the capacity factor of that run")
    ap.add_argument("--ours-drops", metavar="JSONL",
                    help="our --log-json of one step from the same weights with --capacity: "
                    "its moe_dropped against what HF's router choices drop at that capacity")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = parse_config(args.config)
    cfg["seq"] = args.seq
    if args.make:
        torch.manual_seed(1234)
        model, _ = MODELS[args.model](cfg)
        # Parts of about 40 kB, so that --init-from reads a sharded set
        # through its index, with experts spread over several files.
        model.save_pretrained(args.make, safe_serialization=True, max_shard_size="40KB")
        print("hf_models: %s's random weights saved in %s: %s" % (
            type(model).__name__, args.make, " ".join(sorted(os.listdir(args.make)))))
        return
    model, hf_name = MODELS[args.model](cfg)
    dtype = {"f32": torch.float32, "f64": torch.float64}[args.dtype]
    npdtype = {"f32": np.float32, "f64": np.float64}[args.dtype]
    model.to(dtype)
    if dtype == torch.float64 and args.model == "mixtral":
        # Mixtral's causal mask is a torch.full of float64's least value
        # in the default dtype, which float32 cannot hold.
        torch.set_default_dtype(torch.float64)
        # Its norms, its router's softmax and its eager attention's ask for
        # float32 whatever the model's dtype (`torch.float32`,
        # `torch.float`), which alone moves an f64 loss by about 1e-7: in
        # double, the module's `torch` names float64 for both, as our
        # kernels compute.
        class TorchInDouble:
            float32 = float = torch.float64

            def __getattr__(self, name):
                return getattr(torch, name)
        modeling_mixtral.torch = TorchInDouble()
    if dtype == torch.float64:
        # HF computes the rotary frequencies in float32 whatever the model's
        # dtype (`.float()`), which alone moves an f64 loss by about 1e-11:
        # in double they are recomputed in double, as our kernel has them.
        rotaries = (modeling_gpt_neox.GPTNeoXRotaryEmbedding, modeling_mixtral.MixtralRotaryEmbedding)
        for m in model.modules():
            if isinstance(m, rotaries):
                m.inv_freq = 1.0 / (m.base ** (torch.arange(0, m.dim, 2, dtype=torch.float64) / m.dim))
                m._set_cos_sin_cache(m.max_seq_len_cached, m.inv_freq.device, torch.float64)
    model.train()

    routed = args.model == "mixtral"
    ours_of = split_experts if routed else (lambda t: t)
    if args.hf_init:
        # HF's own weights, as from_pretrained reads them; ours came from
        # the same folder through --init-from.
        model.load_state_dict(type(model).from_pretrained(args.hf_init).state_dict())
        model.to(dtype)
        params = dict(model.named_parameters())
    else:
        params = hf_steps.load_ours(model, ours_of(safetensors.read(args.weights)), hf_name,
                                    npdtype, "hf_models")
    opt = hf_steps.adamw(params, args)
    data = shard_data.Windows(args.data, args.batch, args.seq, vocab=cfg["vocab"])
    hf_losses = []

    # MixtralForCausalLM returns its logits cast to float32 (`.float()`):
    # the output layer's own, in the model's dtype, are taken instead.
    head = {}
    if routed:
        model.lm_head.register_forward_hook(lambda m, x, y: head.__setitem__("logits", y))

    def loss_of(tokens, targets):
        """The mean cross-entropy against the next tokens, plus for a routed
        model HF's own load-balancing loss times router_aux_loss_coef."""
        out = model(input_ids=torch.from_numpy(tokens.astype(np.int64)))
        logits = head["logits"] if routed else out.logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), torch.from_numpy(targets.astype(np.int64)).reshape(-1))
        if routed:
            loss = loss + model.config.router_aux_loss_coef * out.aux_loss
        return loss
    if args.ours_drops:
        ok_drops = check_drops(model, cfg, data.step(0)[0], args)
    for step in range(args.steps):
        tokens, targets = data.step(step)
        loss = loss_of(tokens, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        hf_losses.append(float(loss))

    print("%s (transformers %s) against models/%s.shard, %s, %s"
          % (type(model).__name__, transformers.__version__, args.model, args.config, args.dtype))
    ok = hf_steps.compare_losses(args.ours, hf_losses, args.tol)
    # HF's loss, on the next window, of our weights after the steps and of
    # its own. The key bias gets a gradient of zero up to rounding (softmax
    # ignores a shift of all of a query's scores): reported, not checked.
    tokens, targets = data.step(args.steps)

    def eval_loss():
        with torch.no_grad():
            return float(loss_of(tokens, targets))
    ok = hf_steps.compare_after(model, params, ours_of(safetensors.read(args.ours_final)), hf_name, npdtype,
                                eval_loss, args.steps, args.tol, "query_key_value.bias",
                                "the qkv biases") and ok
    ok = ok and (ok_drops if args.ours_drops else True)
    print("hf_models: %s (tolerance %g)" % ("PASS" if ok else "FAIL", args.tol))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
