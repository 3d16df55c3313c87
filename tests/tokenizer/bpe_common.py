"""What tests/tokenizer/hf_match.py and bench/tokenizer.py share: GPT-2's
pattern and byte stand-ins, a vocabulary trained by tokenizers' ByteLevel
BPE trainer, and a tiktoken Encoding of a tokenizers vocabulary."""
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"


def byte_decoder():
    """GPT-2's bytes_to_unicode, inverted: stand-in character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def train_hf(files, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(files, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def ranks_of(tok):
    """The vocabulary of a tokenizers Tokenizer as tiktoken ranks: bytes ->
    rank, in id order, from 0 without gaps (the end of text left out:
    tokenizers' trainer puts it first, ours last)."""
    c2b = byte_decoder()
    vocab = sorted((i, t) for t, i in tok.get_vocab().items() if t != EOT)
    return {bytes(c2b[c] for c in t): r for r, (_, t) in enumerate(vocab)}


def tiktoken_of(tok, path=None):
    """A tiktoken Encoding with GPT-2's pattern on tok's vocabulary; with a
    path, the rank file is written there too."""
    import base64
    import tiktoken
    ranks = ranks_of(tok)
    if path:
        with open(path, "w") as f:
            for b, r in ranks.items():
                f.write(f"{base64.b64encode(b).decode()} {r}\n")
    return tiktoken.Encoding(name="shardc-check", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={EOT: len(ranks)})
