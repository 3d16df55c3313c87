#!/usr/bin/env python3
"""Byte-level unigram entropy of a text file: the loss of the best model that
ignores context, and so the bar a byte-level language model must clear.

    python3 data/entropy.py data/corpus.txt [--json]

Prints bits and nats per byte. Training losses are natural-log cross
entropies, so the nats figure is the one to compare them with.
"""
import argparse
import collections
import json
import math
import sys


def entropy(data):
    """Entropy in nats of the byte distribution of `data` (bytes)."""
    n = len(data)
    if n == 0:
        raise ValueError("empty input")
    counts = collections.Counter(data)
    return -sum(c / n * math.log(c / n) for c in counts.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    try:
        with open(args.file, "rb") as f:
            data = f.read()
        nats = entropy(data)
    except (OSError, ValueError) as e:
        sys.exit("entropy.py: error: %s: %s" % (args.file, e))
    result = {"file": args.file, "bytes": len(data), "distinct_bytes": len(set(data)),
              "nats_per_byte": nats, "bits_per_byte": nats / math.log(2)}
    if args.json:
        print(json.dumps(result))
    else:
        print("%s: %d bytes, %d distinct, unigram entropy %.4f bits/byte = %.4f nats/byte"
              % (args.file, len(data), result["distinct_bytes"], result["bits_per_byte"], nats))


if __name__ == "__main__":
    main()
