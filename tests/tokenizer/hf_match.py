"""Token-for-token checks of shardc's byte-level BPE against Hugging Face's
`tokenizers` and OpenAI's `tiktoken`, over the bundled corpus and the
adversarial file, on four vocabularies:

  1. trained by tokenizers' ByteLevel BPE trainer, read from its tokenizer.json;
  2. the same, read from GPT-2's format (vocab.json + merges.txt) that its
     save_model writes;
  3. trained by `shardc data --bpe`, loaded by tokenizers from the
     tokenizer.json shardc wrote;
  4. a tiktoken rank file made from vocabulary 3 (and one from 1), against
     tiktoken with GPT-2's pattern.

Both vocabularies are trained on the corpus and the adversarial file
together, so that the latter's scripts have merges too. A third text is
drawn at random (seeded) from every assigned code point class, with runs of
white space, apostrophes and the end-of-text token mixed in.

The ids are read from the shards that `shardc data` writes (several of
them, --shard-tokens), so the streaming pass is what is checked, in chunks
of 4 KiB (SHARDC_DATA_CHUNK_BYTES) so that the text is cut many times. Decoding
each shard's ids with the other library gives the text back.

  hf_match.py SHARDC CORPUS ADVERSARIAL WORKDIR [VOCAB_SIZE]
"""
import os
import struct
import subprocess
import sys

from tokenizers import Tokenizer

from bpe_common import EOT, tiktoken_of, train_hf

shardc, corpus, adversarial, work = sys.argv[1:5]
vocab_size = int(sys.argv[5]) if len(sys.argv) > 5 else 4096
os.makedirs(work, exist_ok=True)
failures = 0


def read_text(path):
    # Bytes decoded as they are: no newline translation.
    return open(path, "rb").read().decode("utf-8")


def shardc_data(text_path, out, tokenizer=None, bpe=None, shard_tokens=100000):
    for f in os.listdir(work):
        if f.startswith(os.path.basename(out) + "_"):
            os.remove(os.path.join(work, f))
    cmd = [shardc, "data", text_path, "-o", os.path.join(work, out + ".bin"),
           "--shard-tokens", str(shard_tokens)]
    cmd += ["--tokenizer", tokenizer] if tokenizer else ["--bpe", str(bpe)]
    # Small chunks: the text is cut (tok_safe_cut) in many places.
    env = dict(os.environ, SHARDC_DATA_CHUNK_BYTES=os.environ.get("SHARDC_DATA_CHUNK_BYTES", "4096"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {r.returncode}")
    ids, nshards = [], 0
    for f in sorted(os.listdir(work)):
        if f.startswith(out + "_") and f.endswith(".bin"):
            raw = open(os.path.join(work, f), "rb").read()
            magic, version, n = struct.unpack("<3i", raw[:12])
            assert magic == 20240520 and version == 1 and len(raw) == 1024 + 2 * n, f
            ids += list(struct.unpack(f"<{n}H", raw[1024:]))
            nshards += 1
    return ids, nshards


def compare(label, ours, theirs, nshards, decode=None, text=None):
    global failures
    equal = sum(1 for a, b in zip(ours, theirs) if a == b)
    ok = len(ours) == len(theirs) == equal
    line = (f"{label}: ours {len(ours):,} tokens in {nshards} shards, reference {len(theirs):,}, "
            f"{equal:,} equal")
    if ok and decode is not None:
        back = decode(ours)
        ok = back == text
        line += ", decodes to the text" if ok else ", DECODES TO A DIFFERENT TEXT"
    print(("ok   " if ok else "FAIL ") + line)
    if not ok:
        failures += 1
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        print(f"     first difference at {first}: ours {ours[first:first + 8]} reference {theirs[first:first + 8]}")


def random_text(path, n=60000, seed=23):
    import random
    import unicodedata
    rng = random.Random(seed)
    pool = [c for c in range(0x110000)
            if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co")]
    bits = [" ", "  ", "   ", "\t", "\n", "\r\n", "\r", " \n ", "\u00a0", "\u3000", "'", "'s", "'LL",
            "'re", EOT, "0", "123", " 4", "e\u0301", "\U0001f600", "a", " the"]
    out = []
    while len(out) < n:
        r = rng.random()
        if r < 0.4:
            out.append(rng.choice(bits))
        elif r < 0.7:
            out.append(chr(rng.randrange(32, 127)))
        else:
            out.append(chr(rng.choice(pool)))
    open(path, "wb").write("".join(out).encode("utf-8"))
    return path


both = os.path.join(work, "train.txt")
open(both, "wb").write(open(corpus, "rb").read() + open(adversarial, "rb").read())
texts = [("corpus", corpus), ("adversarial", adversarial),
         ("random", random_text(os.path.join(work, "random.txt")))]

# 1 and 2: tokenizers' trainer.
hf = train_hf([both], vocab_size)
hf_json = os.path.join(work, "hf.tokenizer.json")
hf.save(hf_json)
hf.model.save(work, "hf")  # hf-vocab.json, hf-merges.txt: GPT-2's format
vocab_json, merges_txt = os.path.join(work, "hf-vocab.json"), os.path.join(work, "hf-merges.txt")
print(f"tokenizers {__import__('tokenizers').__version__} trained {hf.get_vocab_size():,} tokens on the corpus "
      "and the adversarial file")

for name, path in texts:
    text = read_text(path)
    ref = hf.encode(EOT + text).ids
    dec = lambda ids: hf.decode(ids[1:], skip_special_tokens=False)
    ours, ns = shardc_data(path, "a", tokenizer=hf_json)
    compare(f"{name}, tokenizers' vocabulary from tokenizer.json", ours, ref, ns, dec, text)
    ours, ns = shardc_data(path, "b", tokenizer=f"{vocab_json},{merges_txt}")
    compare(f"{name}, tokenizers' vocabulary from vocab.json + merges.txt", ours, ref, ns, dec, text)

# 3: ours, trained by shardc data --bpe, then loaded by tokenizers.
shardc_data(both, "ours", bpe=vocab_size)
ours_json = os.path.join(work, "ours.tokenizer.json")
mine = Tokenizer.from_file(ours_json)
print(f"shardc trained {mine.get_vocab_size():,} tokens on the corpus and the adversarial file")
for name, path in texts:
    text = read_text(path)
    ref = mine.encode(EOT + text).ids
    ours, ns = shardc_data(path, "c", tokenizer=ours_json)
    compare(f"{name}, shardc's vocabulary in tokenizers", ours, ref, ns,
            lambda ids: mine.decode(ids[1:], skip_special_tokens=False), text)


# 4: tiktoken rank files.
for label, tok, file in [("shardc's", mine, "ours.tiktoken"), ("tokenizers'", hf, "hf.tiktoken")]:
    path = os.path.join(work, file)
    enc = tiktoken_of(tok, path)
    for name, tpath in texts:
        text = read_text(tpath)
        ref = enc.encode(EOT + text, allowed_special="all")
        ours, ns = shardc_data(tpath, "d", tokenizer=path)
        compare(f"{name}, {label} vocabulary as a tiktoken rank file", ours, ref, ns,
                lambda ids: enc.decode_bytes(ids[1:]).decode("utf-8"), text)

if failures:
    raise SystemExit(f"FAIL: {failures} comparisons differ")
print("all comparisons equal token for token")
