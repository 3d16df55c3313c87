#!/usr/bin/python3
"""Checks the oracle on its own, without our compiler or runtime:

* gpt2.py's parameter table on GPT-2 small has 124,439,808 scalars (the
  published count, tied embedding counted once);
* gradients of gpt2.py and llama.py (tiny odd shapes, GQA, f64) match
  central finite differences on random coordinates of every parameter;
* rope is the rotate_half rotation (checked against a complex-number form)
  and attention with kv_heads < heads equals attention on repeated kv heads;
* safetensors and shard files round-trip, and bad ones are refused;
* oracle.py runs end to end (f32 and f64), its losses fall, and compare.py
  passes two identical runs and fails a perturbed one.

Exit status 0 when all pass, 1 when one fails, 77 (skipped) when torch is
not installed.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# No __pycache__ beside the sources: the tree stays as checked out.
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

try:
    import torch
except ImportError:
    print("selftest: SKIP: torch is not installed (Debian package python3-torch)")
    sys.exit(77)
import numpy as np  # noqa: E402

import common  # noqa: E402
import gpt2  # noqa: E402
import llama  # noqa: E402
import safetensors  # noqa: E402
import shard_data  # noqa: E402

FAILED = []
PY = sys.executable


def check(name, ok, detail=""):
    print("%-58s %s %s" % (name, "ok  " if ok else "FAIL", detail))
    if not ok:
        FAILED.append(name)


def param_count():
    n = common.count(gpt2.params(gpt2.config({})))
    check("gpt2 small parameter count", n == 124439808, "%d (want 124439808)" % n)
    n = common.count(llama.params(llama.config({})))
    # Llama-2-7B: 6,738,415,616 parameters.
    check("llama default (Llama-2-7B) parameter count", n == 6738415616,
          "%d (want 6738415616)" % n)


def finite_differences(model, overrides, seed, coords=3, h=2e-3):
    """Max relative error between autograd and finite differences over
    `coords` random coordinates of every parameter tensor, in f64. The
    five-point stencil's O(h^4) error lets h be large enough that rounding
    in the loss (1e-16 of it, over h) stays far below the 1e-6 asked for,
    even on coordinates whose gradient is tiny."""
    torch.manual_seed(seed)
    cfg = model.config(overrides)
    table = model.params(cfg)
    P = common.init_params(table, seed, torch.float64)
    # Norm weights of one and biases of zero would hide layout mistakes
    # (a transposed gain is still all ones): make them random too.
    for name, _, init in table:
        if init in ("ones", "zeros"):
            P[name] = P[name] + 0.1 * torch.randn_like(P[name])
    b, s, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    tokens = torch.randint(0, V, (b, s))
    targets = torch.randint(0, V, (b, s))
    for t in P.values():
        t.requires_grad_(True)
    model.forward(P, cfg, tokens, targets).backward()
    rng = np.random.default_rng(seed)
    worst, where = 0.0, ""
    with torch.no_grad():
        for name, shape, _ in table:
            flat = P[name].view(-1)
            for idx in rng.choice(flat.numel(), size=min(coords, flat.numel()), replace=False):
                old = float(flat[idx])
                f = {}
                for k in (-2, -1, 1, 2):
                    flat[idx] = old + k * h
                    f[k] = float(model.forward(P, cfg, tokens, targets))
                flat[idx] = old
                fd = (f[-2] - 8 * f[-1] + 8 * f[1] - f[2]) / (12 * h)
                ad = float(P[name].grad.view(-1)[idx])
                # Below 1e-5 (typical entries are 1e-4 .. 1e-1) the bound is
                # absolute, 1e-11: a gradient that is zero up to rounding
                # (the q bias moves every score of a row alike) must not
                # read as a large relative error.
                err = abs(fd - ad) / max(abs(fd), abs(ad), 1e-5)
                if err > worst:
                    worst, where = err, "%s[%d]: fd %.9g autograd %.9g" % (name, idx, fd, ad)
    return worst, where, len(table)


def gradients():
    cfg = dict(vocab=97, seq=7, hidden=48, heads=3, layers=3, batch=2)
    err, where, n = finite_differences(gpt2, cfg, 1)
    check("gpt2 f64 autograd vs finite differences (%d tensors)" % n, err < 1e-6,
          "max rel err %.2e" % err + ("" if err < 1e-6 else " at " + where))
    cfg = dict(vocab=97, seq=7, hidden=64, heads=4, kv_heads=2, layers=2, ffn=88, batch=2)
    err, where, n = finite_differences(llama, cfg, 2)
    check("llama f64 autograd vs finite differences (%d tensors)" % n, err < 1e-6,
          "max rel err %.2e" % err + ("" if err < 1e-6 else " at " + where))


def op_conventions():
    torch.manual_seed(3)
    b, s, H, d, theta = 2, 5, 3, 8, 10000.0
    x = torch.randn(b, s, H * d, dtype=torch.float64)
    # The same rotation written as complex numbers z_i = x_i + i x_{i+d/2}.
    xh = x.view(b, s, H, d)
    z = torch.complex(xh[..., :d // 2], xh[..., d // 2:])
    ang = torch.arange(s, dtype=torch.float64)[:, None] * theta ** (
        -2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    z = z * torch.polar(torch.ones_like(ang), ang)[None, :, None, :]
    want = torch.cat([z.real, z.imag], -1).reshape(b, s, H * d)
    got = common.rope(x, H, theta)
    check("rope = rotation of pairs (i, i + d/2) by pos*theta^(-2i/d)",
          torch.allclose(got, want, atol=1e-12))
    check("rope at position 0 is the identity", torch.equal(got[:, 0], x[:, 0]))

    H, K = 4, 2
    q = torch.randn(b, s, H * d, dtype=torch.float64)
    k = torch.randn(b, s, K * d, dtype=torch.float64)
    v = torch.randn(b, s, K * d, dtype=torch.float64)
    rep = lambda t: t.view(b, s, K, 1, d).expand(b, s, K, H // K, d).reshape(b, s, H * d)
    check("GQA: query head j reads kv head j // (H/K)",
          torch.allclose(common.attention(q, k, v, H, K), common.attention(q, rep(k), rep(v), H),
                         atol=1e-12))
    y = common.attention(q, rep(k), rep(v), H)
    # Causality: changing the last position leaves the earlier outputs alone.
    k2, v2 = rep(k).clone(), rep(v).clone()
    k2[:, -1] += 1
    v2[:, -1] += 1
    y2 = common.attention(q, k2, v2, H)
    check("attention is causal", torch.equal(y[:, :-1], y2[:, :-1]))
    xs = torch.randn(4, 6, dtype=torch.float64)
    want = torch.nn.functional.gelu(xs, approximate="tanh")
    check("gelu is the tanh approximation", torch.allclose(common.gelu(xs), want, atol=1e-14))
    w, bb = torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    want = torch.nn.functional.layer_norm(xs, (6,), w, bb, 1e-5)
    check("layernorm matches torch's (biased variance)",
          torch.allclose(common.layernorm(xs, w, bb, 1e-5), want, atol=1e-12))


def fused_agrees():
    """The benchmark's fused torch ops give the oracle's losses and gradients."""
    for model, cfg in ((gpt2, dict(vocab=97, seq=9, hidden=48, heads=3, layers=2, batch=2)),
                       (llama, dict(vocab=97, seq=9, hidden=64, heads=4, kv_heads=2, layers=2,
                                    ffn=88, batch=2))):
        cfg = model.config(cfg)
        tokens = torch.randint(0, 97, (2, 9))
        targets = torch.randint(0, 97, (2, 9))
        out = []
        for fused in (False, True):
            common.FUSED = fused
            P = common.init_params(model.params(cfg), 7, torch.float64)
            for t in P.values():
                t.requires_grad_(True)
            loss = model.forward(P, cfg, tokens, targets)
            loss.backward()
            out.append((loss.detach(), {n: t.grad for n, t in P.items()}))
        common.FUSED = False
        same = torch.allclose(out[0][0], out[1][0], rtol=1e-12) and all(
            torch.allclose(g, out[1][1][n], rtol=1e-10, atol=1e-14) for n, g in out[0][1].items())
        check("%s: fused torch ops (benchmark) = the oracle's ops" % model.NAME, same)


def files(tmp):
    path = os.path.join(tmp, "t.safetensors")
    t = {"b.x": np.arange(6, dtype=np.float32).reshape(2, 3),
         "a.y": np.linspace(0, 1, 5), "c.i": np.array([1, 2], dtype=np.int32)}
    safetensors.write(path, t, {"step": 3})
    back, meta = safetensors.read(path, with_metadata=True)
    ok = all(np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in t.items())
    check("safetensors round trip (f32, f64, i32, metadata)", ok and meta == {"step": "3"})
    raw = open(path, "rb").read()
    refused = 0
    for bad in (raw[:5], raw[:-1], b"\xff" * 8 + raw[8:]):
        open(path, "wb").write(bad)
        try:
            safetensors.read(path)
        except safetensors.SafetensorsError:
            refused += 1
    check("safetensors: truncated and corrupt files refused", refused == 3)

    path = os.path.join(tmp, "t.bin")
    toks = np.random.default_rng(0).integers(0, 97, 1000)
    shard_data.write(path, toks)
    check("shard round trip", np.array_equal(shard_data.read(path), toks))
    w = shard_data.Windows(path, 3, 10)
    x, y = w.step(2)
    check("window of step i starts at token i*B*T, targets shifted by one",
          np.array_equal(x.ravel(), toks[60:90]) and np.array_equal(y.ravel(), toks[61:91]))
    x, _ = w.step(len(w.index))
    check("windows wrap around after the last", np.array_equal(x.ravel(), toks[:30]))
    raw = open(path, "rb").read()
    refused = 0
    for bad in (raw[:100], raw[:-2], b"\0" * 4 + raw[4:]):
        open(path, "wb").write(bad)
        try:
            shard_data.read(path)
        except shard_data.ShardError:
            refused += 1
    shard_data.write(path, toks)
    try:
        shard_data.Windows(path, 3, 10, vocab=50)
    except shard_data.ShardError:
        refused += 1
    try:
        shard_data.Windows(path, 10, 100)
    except shard_data.ShardError:
        refused += 1
    check("shards: truncated, bad magic, id >= vocab, too short refused", refused == 5)


def run(cmd):
    p = subprocess.run([PY] + cmd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def end_to_end(tmp):
    data = os.path.join(tmp, "rand.bin")
    shard_data.write(data, np.random.default_rng(1).integers(0, 97, 20000))
    cfg = "vocab=97,hidden=48,heads=3,layers=3"
    init = os.path.join(tmp, "init.safetensors")
    P = common.init_params(gpt2.params(gpt2.config(common.parse_config(cfg + ",seq=16"))), 5)
    safetensors.write(init, {n: t.numpy() for n, t in P.items()})
    base = [os.path.join(HERE, "oracle.py"), "--model", "gpt2", "--config", cfg,
            "--weights", init, "--data", data, "--batch", "2", "--seq", "16",
            "--global-batch", "6", "--steps", "10", "--lr", "1e-2", "--warmup", "2",
            "--no-shuffle", "--quiet"]
    outs = {}
    for dt in ("f32", "f64"):
        o = {k: os.path.join(tmp, "%s.%s" % (dt, k)) for k in ("json", "grads", "log")}
        rc, text = run(base + ["--dtype", dt, "--out", o["json"], "--grads", o["grads"],
                               "--log-json", o["log"]])
        check("oracle.py gpt2 %s runs" % dt, rc == 0, text.strip()[-300:])
        outs[dt] = o
    if FAILED:
        return
    losses = json.load(open(outs["f32"]["json"]))["losses"]
    check("oracle losses start near ln(97) and fall",
          abs(losses[0] - math.log(97)) < 0.1 and losses[-1] < losses[0] - 0.05,
          "%.4f -> %.4f (ln 97 = %.4f)" % (losses[0], losses[-1], math.log(97)))
    cmp = [os.path.join(HERE, "compare.py")]
    f32, f64 = outs["f32"], outs["f64"]
    rc, text = run(cmp + ["--log-json", f32["log"], "--dump-grads", f32["grads"],
                          "--oracle", f64["json"], "--oracle-grads", f64["grads"]])
    check("compare.py passes f32 against f64 (the tolerance has room)", rc == 0,
          text.strip().splitlines()[-1] if text.strip() else "")
    worst = [l for l in text.splitlines() if l.startswith("worst")]
    if worst:
        print("    " + worst[0])
    # Perturb one gradient by 1e-3 of its norm: compare.py must fail.
    g = safetensors.read(f32["grads"])
    name = "h.1.attn.c_attn.weight"
    g[name] = g[name] + np.float32(1e-3 * np.linalg.norm(g[name]) / math.sqrt(g[name].size))
    bad = os.path.join(tmp, "bad.grads")
    safetensors.write(bad, g)
    rc, text = run(cmp + ["--log-json", f32["log"], "--dump-grads", bad,
                          "--oracle", f64["json"], "--oracle-grads", f64["grads"]])
    check("compare.py fails a gradient off by 1e-3", rc == 1)

    rc, text = run([os.path.join(HERE, "oracle.py"), "--model", "llama", "--config",
                    "vocab=97,hidden=64,heads=4,kv_heads=2,layers=2,ffn=88", "--data", data,
                    "--batch", "2", "--seq", "16", "--global-batch", "4", "--steps", "3",
                    "--no-shuffle", "--quiet", "--out", os.path.join(tmp, "l.json")])
    check("oracle.py llama (GQA) runs", rc == 0, text.strip()[-300:])
    rc, text = run(base[:-1] + ["--out", os.path.join(tmp, "x.json"), "--config",
                                cfg + ",hidden=36"])
    check("oracle.py refuses weights of the wrong shape", rc == 1 and "shape" in text,
          text.strip().splitlines()[-1][:100] if text.strip() else "")


def main():
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    param_count()
    op_conventions()
    gradients()
    fused_agrees()
    with tempfile.TemporaryDirectory() as tmp:
        files(tmp)
        end_to_end(tmp)
    print("%d failed" % len(FAILED) if FAILED else "selftest: all passed")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
