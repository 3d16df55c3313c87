"""The LLaMA-style model of models/llama.shard, in plain PyTorch.

Parameters are a dict {name: tensor} with the model file's names (Hugging
Face's Llama names less `model.`) and layouts: projections [out, in], as
torch.nn.Linear keeps them. RMSNorm, rotary embeddings on the pairs
(i, i + d/2) of each head, grouped-query attention, a SwiGLU MLP, no biases,
an output layer separate from the embedding.
"""
import common

NAME = "llama"

# The model file's `let`s: the Llama-2-7B shape.
DEFAULTS = dict(vocab=32000, seq=4096, hidden=4096, heads=32, kv_heads=32, layers=32,
                ffn=11008, batch=1, eps=1e-5, theta=10000.0, init_std=0.02)
DERIVED = {"head_dim": lambda c: c["hidden"] // c["heads"]}


def config(overrides):
    cfg = common.merge_config(DEFAULTS, DERIVED, overrides)
    H, K, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    if K <= 0 or H % K:
        raise common.ConfigError("kv_heads %d does not divide heads %d" % (K, H))
    if d % 2:
        raise common.ConfigError("head_dim %d is odd: rotary needs pairs" % d)
    return cfg


def params(cfg):
    """[(name, shape, init)] in the model file's order."""
    h, f, V = cfg["hidden"], cfg["ffn"], cfg["vocab"]
    H, K, d, std = cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["init_std"]
    out = [("embed_tokens.weight", (V, h), (0.0, std)), ("lm_head.weight", (V, h), (0.0, std))]
    for i in range(cfg["layers"]):
        p = "layers.%d." % i
        out += [
            (p + "input_layernorm.weight", (h,), "ones"),
            (p + "self_attn.q_proj.weight", (H * d, h), (0.0, std)),
            (p + "self_attn.k_proj.weight", (K * d, h), (0.0, std)),
            (p + "self_attn.v_proj.weight", (K * d, h), (0.0, std)),
            (p + "self_attn.o_proj.weight", (h, H * d), (0.0, std)),
            (p + "post_attention_layernorm.weight", (h,), "ones"),
            (p + "mlp.gate_proj.weight", (f, h), (0.0, std)),
            (p + "mlp.up_proj.weight", (f, h), (0.0, std)),
            (p + "mlp.down_proj.weight", (h, f), (0.0, std)),
        ]
    out += [("norm.weight", (h,), "ones")]
    return out


def forward(P, cfg, tokens, targets):
    """tokens, targets: int64 [b, seq] -> the mean cross entropy (a scalar)."""
    eps, H, K, theta = cfg["eps"], cfg["heads"], cfg["kv_heads"], cfg["theta"]
    lin = common.linear
    x = P["embed_tokens.weight"][tokens]
    for i in range(cfg["layers"]):
        p = "layers.%d." % i
        a = common.rmsnorm(x, P[p + "input_layernorm.weight"], eps)
        q = common.rope(lin(a, P[p + "self_attn.q_proj.weight"], transposed=True), H, theta)
        k = common.rope(lin(a, P[p + "self_attn.k_proj.weight"], transposed=True), K, theta)
        v = lin(a, P[p + "self_attn.v_proj.weight"], transposed=True)
        y = common.attention(q, k, v, H, K, causal=True)
        x = x + lin(y, P[p + "self_attn.o_proj.weight"], transposed=True)
        m = common.rmsnorm(x, P[p + "post_attention_layernorm.weight"], eps)
        g = lin(m, P[p + "mlp.gate_proj.weight"], transposed=True)
        u = lin(m, P[p + "mlp.up_proj.weight"], transposed=True)
        x = x + lin(common.swiglu(g, u), P[p + "mlp.down_proj.weight"], transposed=True)
    x = common.rmsnorm(x, P["norm.weight"], eps)
    logits = lin(x, P["lm_head.weight"], transposed=True)
    return common.cross_entropy(logits, targets)
