"""transformers' side of export_bert.sh: BertForMaskedLM.from_pretrained on
the folder `shardc export --hf` wrote, then every tensor of the shardc
checkpoint against the loaded model's, under export's names (HF's less
`bert.` before the embeddings and `bert.encoder.` before the layers, with
`out` spelled `output`; the decoder is the tied word embedding).

  export_bert.py HF_DIR CHECKPOINT.safetensors
Prints what it checks; exit 1 on a difference.
"""
import json
import struct
import sys

import numpy as np
import torch
import transformers


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=np.float32).reshape(e["shape"])
    return out


def hf_name(ours):
    ours = ".".join("output" if w == "out" else w for w in ours.split("."))
    if ours.startswith("layer."):
        return "bert.encoder." + ours
    if ours.startswith("cls."):
        return ours
    return "bert." + ours


def main():
    folder, ckpt = sys.argv[1], sys.argv[2]
    model, info = transformers.BertForMaskedLM.from_pretrained(
        folder, output_loading_info=True, torch_dtype=torch.float32)
    state = model.state_dict()
    ours = read_safetensors(ckpt)
    bad = 0
    # Tied copies (the decoder's weight and bias) are filled by tying, not
    # read; anything else missing or unexpected is a naming error.
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    missing = [k for k in info["missing_keys"] if k not in tied]
    print("from_pretrained: %d tensors in the folder, missing %s, unexpected %s"
          % (len(ours), missing or "none", info["unexpected_keys"] or "none"))
    if missing or info["unexpected_keys"] or info["mismatched_keys"]:
        bad += 1
    worst = 0.0
    for name, t in ours.items():
        hf = state[hf_name(name)].numpy()
        if hf.shape != t.shape:
            print("FAIL: %s: shape %s here, %s in the loaded model" % (name, t.shape, hf.shape))
            bad += 1
            continue
        worst = max(worst, float(np.max(np.abs(hf - t))))
    tie = float(np.max(np.abs(state["cls.predictions.decoder.weight"].numpy()
                              - ours["embeddings.word_embeddings.weight"])))
    print("largest difference of a loaded tensor from the checkpoint's: %g; "
          "the decoder from the word embeddings: %g" % (worst, tie))
    if worst != 0.0 or tie != 0.0:
        bad += 1
    c = model.config
    print("config: %s, %d layers, hidden %d, %d heads, ffn %d, eps %g, act %s"
          % (type(model).__name__, c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
             c.intermediate_size, c.layer_norm_eps, c.hidden_act))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
