"""GPT-2 as models/gpt2.shard defines it, in plain PyTorch.

Parameters are a dict {name: tensor} with the model file's names and
layouts (Hugging Face's: Conv1D weights [in, out]); the output layer is the
token embedding (tied), so its gradient collects both uses.
"""
import math

import common

NAME = "gpt2"

# The model file's `let`s: GPT-2 small.
DEFAULTS = dict(vocab=50257, seq=1024, hidden=768, heads=12, layers=12, batch=1,
                eps=1e-5, dropout_rate=0.0, init_std=0.02)
# Those the model file computes from others, unless overridden.
DERIVED = {
    "ffn": lambda c: 4 * c["hidden"],
    "proj_std": lambda c: 0.02 / math.sqrt(2 * c["layers"]),
}


def config(overrides):
    cfg = common.merge_config(DEFAULTS, DERIVED, overrides)
    if cfg["dropout_rate"] != 0:
        raise common.ConfigError("dropout_rate must be 0: the oracle cannot reproduce "
                                 "the runtime's dropout masks")
    if cfg["hidden"] % cfg["heads"]:
        raise common.ConfigError("hidden %d is not a multiple of heads %d"
                                 % (cfg["hidden"], cfg["heads"]))
    return cfg


def params(cfg):
    """[(name, shape, init)] in the model file's order; init is 'zeros',
    'ones' or (mean, std)."""
    h, f, V, S = cfg["hidden"], cfg["ffn"], cfg["vocab"], cfg["seq"]
    std, pstd = cfg["init_std"], cfg["proj_std"]
    out = [("wte.weight", (V, h), (0.0, std)), ("wpe.weight", (S, h), (0.0, 0.01))]
    for i in range(cfg["layers"]):
        p = "h.%d." % i
        out += [
            (p + "ln_1.weight", (h,), "ones"), (p + "ln_1.bias", (h,), "zeros"),
            (p + "attn.c_attn.weight", (h, 3 * h), (0.0, std)),
            (p + "attn.c_attn.bias", (3 * h,), "zeros"),
            (p + "attn.c_proj.weight", (h, h), (0.0, pstd)),
            (p + "attn.c_proj.bias", (h,), "zeros"),
            (p + "ln_2.weight", (h,), "ones"), (p + "ln_2.bias", (h,), "zeros"),
            (p + "mlp.c_fc.weight", (h, f), (0.0, std)), (p + "mlp.c_fc.bias", (f,), "zeros"),
            (p + "mlp.c_proj.weight", (f, h), (0.0, pstd)),
            (p + "mlp.c_proj.bias", (h,), "zeros"),
        ]
    out += [("ln_f.weight", (h,), "ones"), ("ln_f.bias", (h,), "zeros")]
    return out


def forward(P, cfg, tokens, targets):
    """tokens, targets: int64 [b, seq] -> the mean cross entropy (a scalar)."""
    eps, H = cfg["eps"], cfg["heads"]
    s = tokens.shape[1]
    x = P["wte.weight"][tokens] + P["wpe.weight"][:s]
    for i in range(cfg["layers"]):
        p = "h.%d." % i
        a = common.layernorm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        qkv = common.linear(a, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"])
        q, k, v = qkv.chunk(3, dim=-1)
        y = common.attention(q, k, v, H, causal=True)
        x = x + common.linear(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        m = common.layernorm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        u = common.gelu(common.linear(m, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]))
        x = x + common.linear(u, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
    x = common.layernorm(x, P["ln_f.weight"], P["ln_f.bias"], eps)
    logits = x @ P["wte.weight"].t()
    return common.cross_entropy(logits, targets)
