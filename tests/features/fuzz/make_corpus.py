#!/usr/bin/env python3
"""Writes the seed corpora of the file readers' fuzz harnesses: small
valid files of each format, one per interesting shape, and a few files
that each of the rarer checks refuses (seed-bad-*), into
tests/features/fuzz/corpus/NAME/seed-*. The seeds are committed; run this again
after a format changes. Inputs that once failed are kept beside them
(crash-*, a name of their own), never regenerated.

    tests/features/fuzz/make_corpus.py [SHARDC]   # SHARDC prints the hw presets
"""
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def out(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def safetensors(tensors, meta=None):
    """tensors: [(name, dtype, shape, bytes)] -> one safetensors file."""
    header, blob = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the writer pads to 8 bytes
    return struct.pack("<Q", len(text)) + text + blob


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def seeds_safetensors():
    out("safetensors", "empty", safetensors([]))
    out("safetensors", "f32", safetensors(
        [("w", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6)), ("b", "F32", [3], f32(0.5, -1, 2))],
        {"model": "m", "source": "m.shard"}))
    out("safetensors", "types", safetensors([
        ("d", "F64", [2], struct.pack("<2d", 1.5, -2)),
        ("h", "F16", [2], struct.pack("<2H", 0x3c00, 0x7c00)),
        ("bf", "BF16", [1, 2], struct.pack("<2H", 0x3f80, 0x7fc0)),
        ("i", "I32", [1], struct.pack("<i", 7)),
        ("z", "F32", [0, 4], b""),
        ("s", "F32", [], f32(3))]))


def seeds_safetensors_bad():
    """Refusals a campaign reaches rarely by itself, one per check."""
    def raw(name, header, blob=b""):
        text = header.encode()
        out("safetensors", "bad-" + name, struct.pack("<Q", len(text)) + text + blob)
    raw("rank-9", json.dumps({"t": {"dtype": "F32", "shape": [1] * 9, "data_offsets": [0, 4]}}),
        f32(1))
    raw("shape-too-large", json.dumps({"t": {"dtype": "F32", "shape": [2 ** 40, 2 ** 40],
                                             "data_offsets": [0, 4]}}), f32(1))
    raw("offsets-outside", json.dumps({"t": {"dtype": "F32", "shape": [2],
                                             "data_offsets": [0, 8]}}), f32(1))
    raw("trailing-text", '{"t": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}} x', f32(1))
    raw("twice", '{"t": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},'
        ' "t": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}', f32(1))
    out("safetensors", "bad-header-length", struct.pack("<Q", 2 ** 63) + b"{}")


FLAGS = {
    "flag.data": "train.bin", "flag.val-data": "", "flag.steps": "2",
    "flag.global-batch": "1", "flag.lr": "0.0006", "flag.beta1": "0.9",
    "flag.beta2": "0.95", "flag.eps": "1e-08", "flag.weight-decay": "0.1",
    "flag.clip": "1", "flag.warmup": "0", "flag.lr-min": "0",
    "flag.lr-schedule": "cosine", "flag.optimizer": "adamw", "flag.seed": "1337",
    "flag.no-shuffle": "0", "flag.log-every": "10", "flag.eval-every": "0",
    "flag.eval-batches": "20", "flag.save": "ck", "flag.save-every": "0",
    "flag.keep-last": "0"}


def seeds_state():
    meta = {"format": "shardc-state-1", "model": "gpt2", "source": "models/gpt2.shard",
            "defines": "layers=1 hidden=8", "real": "f32", "step": "2",
            "rng": "01f2f804a7f01ecc40814aa0b9539fd9eeeebeb2f8abb232f4e837927b07087b",
            "data_position": "2", "layout": "t=1 p=1 d=1 v=1 zero=0"}
    meta.update(FLAGS)
    tensors = []
    for name, shape, vals in [("wte.weight", [2, 2], (1, 2, 3, 4)), ("ln.bias", [2], (0, 1))]:
        for suffix in ("", ".exp_avg", ".exp_avg_sq"):
            tensors.append((name + suffix, "F32", shape, f32(*vals)))
    out("state", "adamw", safetensors(tensors, meta))
    sgd = dict(meta, **{"flag.optimizer": "sgd", "flag.lr-schedule": "linear", "step": "0"})
    out("state", "sgd", safetensors(tensors[:1], sgd))


def shard(tokens, magic=20240520, version=1):
    header = struct.pack("<3i", magic, version, len(tokens)) + b"\0" * (1024 - 12)
    return header + struct.pack("<%dH" % len(tokens), *tokens)


def seeds_shard():
    out("shard", "one-window", shard(list(range(9))))
    out("shard", "bytes", shard([(i * 37) % 256 for i in range(40)]))
    out("shard", "wide-ids", shard([(i * 7919) % 65536 for i in range(25)]))


def seeds_shard_bad():
    out("shard", "bad-magic", shard(list(range(9)), magic=1234))
    out("shard", "bad-truncated", shard(list(range(20)))[:-6])
    out("shard", "bad-short", shard(list(range(4))))


def seeds_hw(shardc):
    out("hw", "base", b"# an A100 with half its memory\nbase = a100\nmemory_gib = 40\n")
    out("hw", "minimal", b"peak_bf16_tflops = 100\nmemory_gib = 16\nmemory_bw_gbs = 900\n"
        b"gpus_per_node = 4\nintra_bw_gbs = 64\ninter_bw_gbs = 25\n")
    for preset in ("a100", "h100", "h200"):
        text = subprocess.run([shardc, "hw", preset], check=True, capture_output=True).stdout
        out("hw", preset, text)


def seeds_manifest(shardc):
    """A manifest `shardc compile` writes, and some cut to what launch.sh
    reads."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(HERE, "../../../models/gpt2.shard")
        subprocess.run([shardc, "compile", model, "-D", "layers=2", "--tp", "2", "--pp", "2",
                        "-o", d], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(d, "manifest.json"), "rb") as f:
            out("manifest", "compiled-t2p2", f.read())
    def manifest(programs, tp=1, pp=1, dp=1):
        return json.dumps({"model": "gpt2", "target": "cpu",
                           "mesh": {"tp": tp, "pp": pp, "dp": dp},
                           "ranks": [{"rank": i, "program": p}
                                     for i, p in enumerate(programs)]},
                          indent=2).encode()
    out("manifest", "one-rank", manifest(["rank0"]))
    out("manifest", "t2p2", manifest(["stage0"] * 2 + ["stage1"] * 2, tp=2, pp=2))
    out("manifest", "interleaved-runs", manifest(["stage0", "stage1", "stage0", "stage1"], pp=2, dp=2))
    out("manifest", "bad-program", manifest(["stage0", "$(reboot)"], pp=2))
    out("manifest", "bad-no-ranks", b'{"model": "gpt2", "ranks": []}')


def seeds_latest():
    out("latest", "good", b"step-00000005\n")
    out("latest", "no-newline", b"step-12")
    out("latest", "bad-path", b"../../etc\n")
    out("latest", "bad-tail", b"step-12x\n")
    out("latest", "bad-empty-step", b"step-\n")


def seeds_checksums():
    # The manifest of fuzz_st.h's two tensors, as --save writes it, and
    # near misses.
    out("checksums", "two", b"0123456789abcdef a\nfedcba9876543210 b\n")
    out("checksums", "one", b"0123456789abcdef a\n")
    out("checksums", "bad-upper", b"0123456789ABCDEF a\n")
    out("checksums", "bad-twice", b"0123456789abcdef a\n0123456789abcdef a\n")
    out("checksums", "bad-no-newline", b"0123456789abcdef a")


def seeds_state_meta():
    # Key/value pairs, each NUL-terminated, that replace the valid state's.
    out("state_meta", "step", b"step\x0042\x00")
    out("state_meta", "rng", b"rng\x00" + b"0" * 64 + b"\x00")
    out("state_meta", "flags", b"flag.lr\x001e-3\x00flag.optimizer\x00sgd\x00")
    out("state_meta", "bad-format", b"format\x00pt\x00")
    out("state_meta", "bad-step", b"step\x00-1\x00")


def main():
    shardc = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../../../build/shardc")
    seeds_safetensors()
    seeds_safetensors_bad()
    seeds_state()
    seeds_shard()
    seeds_shard_bad()
    seeds_hw(shardc)
    seeds_manifest(shardc)
    seeds_latest()
    seeds_checksums()
    seeds_state_meta()


if __name__ == "__main__":
    main()
