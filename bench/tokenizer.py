"""Encoding speed of shardc's byte-level BPE against Hugging Face's
tokenizers on one thread, on the same text and vocabulary, in the same run
(see bench/tokenizer.sh). shardc's time is the whole `shardc data` command
(reading the tokenizer and the text, writing the shards); tokenizers' is
its encode() call alone, the text already in memory, in two ways: the whole
text as one string (which checks the ids) and encode_batch() over its
paragraphs (which tokenizers handles much faster); the ratio is taken
against the faster of the two. tiktoken, on a rank
file of the same vocabulary, is shown for information.

  tokenizer.py SHARDC CORPUS WORKDIR [VOCAB_SIZE] [COPIES]
"""
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tokenizer"))
from bpe_common import EOT, tiktoken_of, train_hf  # noqa: E402

shardc, corpus, work = sys.argv[1:4]
vocab_size = int(sys.argv[4]) if len(sys.argv) > 4 else 32768
copies = int(sys.argv[5]) if len(sys.argv) > 5 else 5
os.makedirs(work, exist_ok=True)

hf = train_hf([corpus], vocab_size)
tok_json = os.path.join(work, "bench.tokenizer.json")
hf.save(tok_json)
text_path = os.path.join(work, "text.txt")
raw = open(corpus, "rb").read() * copies
open(text_path, "wb").write(raw)
text = raw.decode("utf-8")
mb = len(raw) / 1e6
print(f"text: {copies} copies of {os.path.basename(corpus)}, {mb:.1f} MB; vocabulary {hf.get_vocab_size():,} "
      f"tokens trained by tokenizers {__import__('tokenizers').__version__}")


def best(f, runs=3):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), out


def ours():
    subprocess.run([shardc, "data", text_path, "-o", os.path.join(work, "bench.bin"), "--tokenizer", tok_json],
                   check=True, stdout=subprocess.DEVNULL)
    data = open(os.path.join(work, "bench.bin"), "rb").read()
    n = struct.unpack("<3i", data[:12])[2]
    return list(struct.unpack(f"<{n}H", data[1024:]))


t_ours, ids_ours = best(ours)
t_one, enc = best(lambda: hf.encode(EOT + text), runs=1)
ids_hf = enc.ids
same = ids_ours == ids_hf
paragraphs = [p + "\n\n" for p in text.split("\n\n")]
t_batch, encs = best(lambda: hf.encode_batch(paragraphs))
ntok_batch = sum(len(e.ids) for e in encs)
print(f"shardc data (one thread, whole command): {t_ours:.3f} s, {mb / t_ours:.2f} MB/s, "
      f"{len(ids_ours) / t_ours / 1e6:.2f} M tokens/s")
threads = os.environ.get("RAYON_NUM_THREADS")
print(f"tokenizers encode(), one string (RAYON_NUM_THREADS={threads}): {t_one:.3f} s, "
      f"{mb / t_one:.2f} MB/s, {len(ids_hf) / t_one / 1e6:.2f} M tokens/s")
print(f"tokenizers encode_batch(), {len(paragraphs):,} paragraphs (RAYON_NUM_THREADS={threads}): "
      f"{t_batch:.3f} s, {mb / t_batch:.2f} MB/s, {ntok_batch / t_batch / 1e6:.2f} M tokens/s")
t_hf = min(t_one, t_batch)
try:
    enc_t = tiktoken_of(hf)
    t_tt, _ = best(lambda: enc_t.encode_ordinary(text))
    print(f"tiktoken encode_ordinary() (for information): {t_tt:.3f} s, {mb / t_tt:.2f} MB/s")
except ImportError:
    print("tiktoken: not installed, not measured")
print(f"the ids of both are {'equal' if same else 'DIFFERENT'} ({len(ids_ours):,} and {len(ids_hf):,})")
ratio = t_hf / t_ours
print(f"speed ratio shardc / tokenizers (its faster way): {ratio:.2f}x")
if not same or ratio < 1.0:
    raise SystemExit("FAIL: " + ("the ids differ" if not same else "shardc encodes slower than tokenizers"))
