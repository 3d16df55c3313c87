#!/usr/bin/python3
"""llm.c token shards: a header of 256 int32 (magic 20240520, version 1, the
token count, the rest zero), then the tokens as uint16.

As a library: read(path) -> uint16 array, write(path, tokens), and Windows,
which yields the training windows in the --no-shuffle order. As a command,
it makes shards for the tests and benchmarks:

    shard_data.py text FILE -o OUT.bin            # bytes of FILE, vocab 256
    shard_data.py random --vocab 97 --tokens N [--seed S] -o OUT.bin
"""
import argparse
import glob
import sys

import numpy as np

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256


class ShardError(Exception):
    pass


def read(path):
    """The tokens of one shard as a uint16 array, every header field checked."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 * HEADER_INTS:
        raise ShardError("%s: truncated header (%d bytes)" % (path, len(data)))
    header = np.frombuffer(data, dtype="<i4", count=HEADER_INTS)
    if header[0] != MAGIC:
        raise ShardError("%s: bad magic %d (expected %d)" % (path, header[0], MAGIC))
    if header[1] != VERSION:
        raise ShardError("%s: unsupported version %d" % (path, header[1]))
    ntok = int(header[2])
    body = len(data) - 4 * HEADER_INTS
    if ntok < 0 or body != 2 * ntok:
        raise ShardError("%s: header says %d tokens, file holds %d bytes of tokens"
                         % (path, ntok, body))
    return np.frombuffer(data, dtype="<u2", offset=4 * HEADER_INTS).copy()


def write(path, tokens):
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > 0xFFFF):
        raise ShardError("%s: token ids must fit in uint16" % path)
    if tokens.size >= 2**31:
        raise ShardError("%s: too many tokens for one shard" % path)
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = (MAGIC, VERSION, tokens.size)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


def expand(pattern):
    """A file name or a glob -> the sorted list of shard paths."""
    paths = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
    if not paths:
        raise ShardError("%s: no shard matches" % pattern)
    return paths


class Windows:
    """The --no-shuffle data order, as llm.c's loader walks it: every shard in
    name order contributes the windows of B*T+1 tokens starting at 0, B*T,
    2*B*T, ... that fit inside it; after the last window of the last shard
    the order wraps to the first. With one shard long enough, step i reads
    the window starting at token i*B*T. Each window gives inputs[B, T]
    (its first B*T tokens) and targets[B, T] (the next token of each)."""

    def __init__(self, pattern, B, T, vocab=None):
        self.B, self.T = B, T
        self.shards = [read(p) for p in expand(pattern)]
        self.index = []
        for s, toks in enumerate(self.shards):
            if vocab is not None and toks.size and int(toks.max()) >= vocab:
                raise ShardError("%s: token id %d >= vocab %d"
                                 % (expand(pattern)[s], int(toks.max()), vocab))
            n = (toks.size - 1) // (B * T) if toks.size else 0
            self.index += [(s, k * B * T) for k in range(n)]
        if not self.index:
            raise ShardError("%s: fewer than B*T+1 = %d tokens in every shard"
                             % (pattern, B * T + 1))

    def step(self, i):
        s, start = self.index[i % len(self.index)]
        w = self.shards[s][start:start + self.B * self.T + 1].astype(np.int64)
        return w[:-1].reshape(self.B, self.T), w[1:].reshape(self.B, self.T)


def main():
    ap = argparse.ArgumentParser(description="make llm.c token shards")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("text", help="the bytes of a file as tokens (vocab 256)")
    t.add_argument("file")
    t.add_argument("-o", "--out", required=True)
    r = sub.add_parser("random", help="uniform random tokens")
    r.add_argument("--vocab", type=int, required=True)
    r.add_argument("--tokens", type=int, required=True)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    try:
        if args.cmd == "text":
            with open(args.file, "rb") as f:
                tokens = np.frombuffer(f.read(), dtype=np.uint8)
        else:
            if not 1 <= args.vocab <= 65536 or args.tokens < 0:
                raise ShardError("--vocab must be in 1..65536 and --tokens >= 0")
            tokens = np.random.default_rng(args.seed).integers(0, args.vocab, args.tokens)
        write(args.out, tokens)
    except (OSError, ShardError) as e:
        sys.exit("shard_data.py: error: %s" % e)
    print("%s: %d tokens" % (args.out, tokens.size))


if __name__ == "__main__":
    main()
