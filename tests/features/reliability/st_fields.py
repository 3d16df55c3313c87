#!/usr/bin/env python3
"""st_fields.py A B: compares two safetensors files field by field: every
__metadata__ key and every tensor (dtype, shape, bytes). Prints one line
per field that differs or is missing on one side, then a summary line;
exits 1 when any differs. resume_state.sh runs it on the state file of an
uninterrupted run and of a resumed one."""
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
               for k, v in header.items()}
    return meta, tensors


def main():
    (ma, ta), (mb, tb) = load(sys.argv[1]), load(sys.argv[2])
    bad = 0
    for kind, a, b in (("metadata", ma, mb), ("tensor", ta, tb)):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                print("      %s %s: only in %s" % (kind, key, "the first" if key in a else "the second"))
                bad += 1
            elif a[key] != b[key]:
                shown = a[key] if kind == "metadata" else "%s %s" % a[key][:2]
                print("      %s %s differs (first: %s)" % (kind, key, shown))
                bad += 1
    moments = sum(1 for k in ta if k.endswith((".exp_avg", ".exp_avg_sq")))
    print("      %d metadata fields (%s), %d tensors (%d weights, %d AdamW moments): %d differ"
          % (len(ma), ", ".join(sorted(k for k in ma if not k.startswith("flag."))) + ", flag.*",
             len(ta), len(ta) - moments, moments, bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
