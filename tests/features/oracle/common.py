"""What gpt2.py and llama.py share: configuration, parameter tables and the
ops of ir/ops.def written out in plain PyTorch, each the way ops.def
defines it (not the way torch.nn happens to), so that the oracle checks the
compiler against the op semantics rather than against itself."""
import math

import torch
import torch.nn.functional as F

# When true, ops that torch.nn.functional has as one fused kernel with the
# same definition (layernorm, the tanh GELU, SiLU, cross entropy, causal
# attention where torch has it) use it. The benchmark sets it, so that our
# program is measured against PyTorch at its best rather than against a
# chain of small ops; the oracle leaves it off, and selftest.py checks that
# both ways give the same losses and gradients.
FUSED = False


class ConfigError(Exception):
    pass


def parse_config(text):
    """'vocab=97,hidden=48' -> {'vocab': 97, 'hidden': 48} (ints stay ints)."""
    out = {}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        if "=" not in item:
            raise ConfigError("--config: %r is not NAME=VALUE" % item)
        k, v = (s.strip() for s in item.split("=", 1))
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                raise ConfigError("--config: %s=%r is not a number" % (k, v))
    return out


def merge_config(defaults, derived, overrides):
    """The model file's defaults, then -D style overrides, then the values
    the model file computes from others (ffn = 4 * hidden, ...) unless they
    were overridden themselves. Unknown names are an error, as with -D."""
    unknown = sorted(set(overrides) - set(defaults) - set(derived))
    if unknown:
        raise ConfigError("unknown config name(s): %s (known: %s)"
                          % (", ".join(unknown), ", ".join(sorted(set(defaults) | set(derived)))))
    cfg = dict(defaults)
    cfg.update({k: v for k, v in overrides.items() if k in defaults})
    for name, rule in derived.items():
        cfg[name] = overrides[name] if name in overrides else rule(cfg)
    return cfg


def count(shapes):
    """Number of scalars in a list of (name, shape, init) entries."""
    return sum(math.prod(shape) for _, shape, _ in shapes)


def init_params(table, seed, dtype=torch.float32):
    """Fresh parameters from the table's init rules (zeros, ones, normal
    with the model file's std), for runs without an initial weights file
    (benchmarks, self-tests). Not the runtime's random stream."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape, init in table:
        if init == "zeros":
            t = torch.zeros(shape, dtype=dtype)
        elif init == "ones":
            t = torch.ones(shape, dtype=dtype)
        else:
            mean, std = init
            t = torch.randn(shape, generator=gen, dtype=torch.float64).mul_(std).add_(mean).to(dtype)
        out[name] = t
    return out


# --- the ops of ir/ops.def ---------------------------------------------------

def linear(x, w, b=None, transposed=False):
    """x[..., in] @ w[in, out] (+ b[out]); transposed: w is [out, in]."""
    y = x @ (w.t() if transposed else w)
    return y + b if b is not None else y


def layernorm(x, w, b, eps):
    """Biased variance over the last dim, as ops.def's (x - mean) / sqrt(var + eps)."""
    if FUSED:
        return F.layer_norm(x, x.shape[-1:], w, b, eps)
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps) * w
    return y + b if b is not None else y


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu(x):
    """GPT-2's tanh approximation."""
    if FUSED:
        return F.gelu(x, approximate="tanh")
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    if FUSED:
        return F.silu(x)
    return x * torch.sigmoid(x)


def swiglu(gate, up):
    return silu(gate) * up


def rope(x, heads, theta):
    """x[b, s, H*d]: in each head, the pair (i, i + d/2) for i < d/2 is
    rotated by the angle pos * theta^(-2i/d), pos the index along s (Hugging
    Face Llama's rotate_half layout)."""
    b, s, hd = x.shape
    d = hd // heads
    half = d // 2
    i = torch.arange(half, dtype=torch.float64)
    inv = theta ** (-2.0 * i / d)
    ang = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]  # [s, d/2]
    cos, sin = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    xh = x.reshape(b, s, heads, d)
    x1, x2 = xh[..., :half], xh[..., half:]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    y = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return y.reshape(b, s, hd)


def attention(q, k, v, heads, kv_heads=0, causal=True):
    """softmax(q k^T / sqrt(d) (+ causal mask)) v per head. q [b, s, H*d],
    k and v [b, s, K*d]; query head j reads kv head j // (H/K)."""
    b, s, hd = q.shape
    H = heads
    K = kv_heads or heads
    d = hd // H
    qh = q.reshape(b, s, H, d).transpose(1, 2)            # [b, H, s, d]
    kh = k.reshape(b, s, K, d).transpose(1, 2)            # [b, K, s, d]
    vh = v.reshape(b, s, K, d).transpose(1, 2)
    if K != H:
        group = torch.arange(H) // (H // K)               # kv head of each query head
        kh, vh = kh[:, group], vh[:, group]               # [b, H, s, d]
    if FUSED and causal and hasattr(F, "scaled_dot_product_attention"):
        y = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
        return y.transpose(1, 2).reshape(b, s, H * d)
    scores = (qh @ kh.transpose(-1, -2)) / math.sqrt(d)   # [b, H, s, s]
    if causal:
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return (p @ vh).transpose(1, 2).reshape(b, s, H * d)


def cross_entropy(logits, targets):
    """Mean over every position of -log softmax(logits)[target]."""
    if FUSED:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1).mean()
