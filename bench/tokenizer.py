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
import base64
import os
import struct
import subprocess
import sys
import time

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

shardc, corpus, work = sys.argv[1:4]
vocab_size = int(sys.argv[4]) if len(sys.argv) > 4 else 32768
copies = int(sys.argv[5]) if len(sys.argv) > 5 else 5
EOT = "<|endoftext|>"
os.makedirs(work, exist_ok=True)

hf = Tokenizer(models.BPE())
hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
hf.decoder = decoders.ByteLevel()
hf.train([corpus], trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
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
    import tiktoken
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, k = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + k); k += 1
    c2b = {chr(c): b for b, c in zip(bs, cs)}
    vocab = sorted(((i, t) for t, i in hf.get_vocab().items() if t != EOT))
    ranks = {bytes(c2b[c] for c in t): r for r, (_, t) in enumerate(vocab)}
    enc_t = tiktoken.Encoding(name="bench", mergeable_ranks=ranks, special_tokens={EOT: len(ranks)},
                              pat_str=r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
    t_tt, _ = best(lambda: enc_t.encode_ordinary(text))
    print(f"tiktoken encode_ordinary() (for information): {t_tt:.3f} s, {mb / t_tt:.2f} MB/s")
except ImportError:
    print("tiktoken: not installed, not measured")
print(f"the ids of both are {'equal' if same else 'DIFFERENT'} ({len(ids_ours):,} and {len(ids_hf):,})")
ratio = t_hf / t_ours
print(f"speed ratio shardc / tokenizers (its faster way): {ratio:.2f}x")
if not same or ratio < 1.0:
    raise SystemExit("FAIL: " + ("the ids differ" if not same else "shardc encodes slower than tokenizers"))
