"""Hugging Face transformers' side of hf_transformers.sh.

  hf_transformers.py make MODEL DIR      a random GPT2LMHeadModel,
                                         LlamaForCausalLM,
                                         GPTNeoXForCausalLM or
                                         MixtralForCausalLM saved with
                                         save_pretrained (safetensors; LLaMA's
                                         as a sharded set with its index)
  hf_transformers.py loss DIR SHARD B S  from_pretrained(DIR)'s loss on the
                                         shard's first window (B*S+1 tokens),
                                         as a one-rank shardc run reads it
  hf_transformers.py greedy DIR N IDS..  N greedy tokens after the prompt IDS

The caller (hf_transformers.sh) checks that transformers imports first.
"""
import struct
import sys

import torch
import transformers

SHAPE = dict(vocab=256, hidden=32, heads=4, kv_heads=2, layers=2, seq=16, ffn=48, experts=4, top_k=2)


def config(model):
    s = SHAPE
    if model == "gpt2":
        return transformers.GPT2Config(
            vocab_size=s["vocab"], n_positions=s["seq"], n_embd=s["hidden"], n_layer=s["layers"],
            n_head=s["heads"], n_inner=4 * s["hidden"], activation_function="gelu_new",
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5)
    if model == "neox":
        return transformers.GPTNeoXConfig(
            vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"], intermediate_size=4 * s["hidden"], rotary_pct=0.25,
            rotary_emb_base=10000, max_position_embeddings=s["seq"], layer_norm_eps=1e-5,
            use_parallel_residual=True, hidden_act="gelu", attention_dropout=0.0,
            hidden_dropout=0.0, tie_word_embeddings=False)
    if model == "mixtral":
        # The load-balancing loss in the model's loss, with models/mixtral.shard's
        # coefficient.
        return transformers.MixtralConfig(
            vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["ffn"],
            num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
            num_key_value_heads=s["kv_heads"], max_position_embeddings=s["seq"], rms_norm_eps=1e-5,
            rope_theta=10000.0, num_local_experts=s["experts"], num_experts_per_tok=s["top_k"],
            router_aux_loss_coef=0.02, output_router_logits=True, sliding_window=None,
            tie_word_embeddings=False)
    return transformers.LlamaConfig(
        vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["ffn"],
        num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"], max_position_embeddings=s["seq"], rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=False)


def load(path):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    model.eval()
    return model


def attention_peak(model, ids):
    """The mean of each query's largest attention weight over the last
    half of the positions (1/(q+1) at query q for uniform attention)."""
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    s = ids.shape[1]
    return torch.stack([a[..., s // 2:, :].amax(-1).mean() for a in out.attentions]).mean().item()


def make(model, path):
    torch.manual_seed(1234)
    m = transformers.AutoModelForCausalLM.from_config(config(model), attn_implementation="eager")
    ids = torch.randint(0, SHAPE["vocab"], (1, SHAPE["seq"]))
    before = attention_peak(m, ids)
    # HF's init (std 0.02) gives nearly uniform attention at this width:
    # the matrices get std 0.3, the query and key projections more, so that
    # which position attends where changes the loss.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() < 2:
                p.add_(0.1 * torch.randn_like(p))
                continue
            std = 0.3
            if any(k in name for k in ("q_proj", "k_proj", "c_attn", "query_key_value")):
                std = 0.6
            p.normal_(0.0, std)
    after = attention_peak(m, ids)
    # LLaMA's and Mixtral's go out in parts of 50 kB, so that the sharded
    # set and its index are transformers' own (Mixtral's experts spread
    # over several parts).
    m.save_pretrained(path, safe_serialization=True,
                      max_shard_size="50KB" if model in ("llama", "mixtral") else "10GB")
    s = SHAPE["seq"]
    flat = sum(1.0 / (q + 1) for q in range(s // 2, s)) / (s - s // 2)
    print("attention peak (mean largest weight of the late queries): %.3f at HF's init, %.3f "
          "scaled; uniform attention gives %.3f" % (before, after, flat))


def window(shard, b, s):
    with open(shard, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        assert head[0] == 20240520 and head[2] >= b * s + 1, head[:3]
        toks = struct.unpack("<%dH" % (b * s + 1), f.read(2 * (b * s + 1)))
    t = torch.tensor(toks, dtype=torch.long)
    return t[:-1].view(b, s), t[1:].view(b, s)


def loss(path, shard, b, s):
    m = load(path)
    x, y = window(shard, int(b), int(s))
    with torch.no_grad():
        out = m(x)
    logits = out.logits.double()
    ce = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
    # A routed model's loss adds its load-balancing loss, as shardc's does.
    if getattr(out, "aux_loss", None) is not None:
        ce = ce + m.config.router_aux_loss_coef * out.aux_loss.double()
    print("%.10f" % ce.item())


def greedy(path, n, *ids):
    m = load(path)
    x = torch.tensor([[int(i) for i in ids]], dtype=torch.long)
    with torch.no_grad():
        out = m.generate(x, max_new_tokens=int(n), do_sample=False, pad_token_id=0,
                         eos_token_id=None)
    print(" ".join(str(int(i)) for i in out[0, x.shape[1]:]))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"make": make, "loss": loss, "greedy": greedy}[cmd](*args)
