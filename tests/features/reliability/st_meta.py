#!/usr/bin/env python3
"""st_meta.py FILE KEY: prints one __metadata__ value of a safetensors file
(an empty line when the key is absent). The checkpoint tests read the step,
the seed, the run id and the checksums with it."""
import json
import struct
import sys

with open(sys.argv[1], "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
print(header.get("__metadata__", {}).get(sys.argv[2], ""))
