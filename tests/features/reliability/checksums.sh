#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# checksums.sh: silent corruption is found. Every checkpoint
# file carries one XXH64 per tensor and the run's id (abi/formats.h);
# --resume, --init-from and `shardc sample` compare them:
# - one flipped byte in a weight of state.safetensors (--resume), of
#   model.safetensors (--init-from, sample): refused, naming the tensor;
# - two tensors of one shape with their names swapped in the header:
#   refused, naming one of them;
# - --no-verify loads the flipped file and says that it did not verify;
# - sample from weights holding a NaN (with --no-verify, past the
#   checksum): refused, naming the tensor; no NUL byte printed;
# - a file of another program (no checksums): loaded, with a note.
# On one rank, and --resume on 4 (t=2 x p=2).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 --microbatch 2"
corpus_shards
run() { "$SHARDC" run $MODEL --out prog --data train.bin "$@" </dev/null; }
check "a clean checkpoint at step 3" run --steps 3 --save good

# spoil IN OUT HOW TENSOR [OTHER]: HOW is flip (one byte of the tensor's
# data) or swap (its name and OTHER's exchanged in the header) or nan.
spoil() {
  python3 - "$@" <<'PY'
import json, struct, sys
src, dst, how, name = sys.argv[1:5]
d = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n])
b, _ = h[name]["data_offsets"]
if how == "flip":
    d[8 + n + b + 5] ^= 0x10
elif how == "nan":
    d[8 + n + b + 4:8 + n + b + 8] = struct.pack("<f", float("nan"))
else:
    other = sys.argv[5]
    text = d[8:8 + n].decode()
    a, c = '"%s"' % name, '"%s"' % other
    assert len(a) == len(c)
    text = text.replace(a, "\0").replace(c, a).replace("\0", c)
    d[8:8 + n] = text.encode()
open(dst, "wb").write(d)
PY
}

cp -r good flip
spoil good/state.safetensors flip/state.safetensors flip h.1.attn.c_attn.weight
expect_error "--resume, one byte flipped in h.1.attn.c_attn.weight" \
  "flip/state.safetensors: tensor h.1.attn.c_attn.weight does not match its checksum" \
  run --steps 4 --resume flip
expect_error "  on 4 ranks too" "tensor h.1.attn.c_attn.weight does not match its checksum" \
  "$SHARDC" run $MODEL --out prog4 --data train.bin --tp 2 --pp 2 --global-batch 4 --steps 4 \
  --resume flip
st=0; run --steps 4 --resume flip --no-verify >nv.txt 2>&1 || st=$?
echo "      --no-verify: exit $st: $(grep -m1 'not verified' nv.txt)"
check "  --no-verify loads it, and says so" \
  sh -c "[ $st -eq 0 ] && grep -q 'flip/state.safetensors: checksums not verified (--no-verify)' nv.txt"
cp -r good swap
spoil good/state.safetensors swap/state.safetensors swap h.0.ln_1.weight h.1.ln_1.weight
expect_error "--resume, h.0.ln_1.weight and h.1.ln_1.weight swapped in the header" \
  "does not match its checksum" run --steps 4 --resume swap
spoil good/model.safetensors mflip.safetensors flip wte.weight
expect_error "--init-from, one byte flipped in wte.weight" \
  "mflip.safetensors: tensor wte.weight does not match its checksum" \
  run --steps 0 --init-from mflip.safetensors
cp -r good sflip
cp mflip.safetensors sflip/model.safetensors
expect_error "shardc sample, one byte flipped in wte.weight" \
  "sflip/model.safetensors: tensor wte.weight does not match its checksum" \
  "$SHARDC" sample sflip --tokens 20
cp -r good snan
spoil good/model.safetensors snan/model.safetensors nan lm_head.weight 2>/dev/null ||
  spoil good/model.safetensors snan/model.safetensors nan wte.weight
st=0; "$SHARDC" sample snan --tokens 20 --no-verify >nan.txt 2>&1 || st=$?
echo "      sample from a NaN: exit $st: $(grep -m1 error nan.txt)"
check "shardc sample from NaN weights: refused, naming the tensor" \
  sh -c "[ $st -eq 1 ] && grep -q 'tensor [a-z_.]*weight holds a NaN or an infinity' nan.txt"
check "  and no NUL byte printed" sh -c "[ \$(tr -cd '\\000' <nan.txt | wc -c) -eq 0 ]"
# A file written by another program: the same header without the checksums.
python3 - good/model.safetensors foreign.safetensors <<'PY'
import json, struct, sys
d = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n])
del h["__metadata__"]["checksums.xxh64"]
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + d[8 + n:])
PY
st=0; run --steps 0 --init-from foreign.safetensors >fo.txt 2>&1 || st=$?
echo "      a file without checksums: exit $st: $(grep -m1 'no checksums' fo.txt)"
check "a file without checksums loads, with a note" \
  sh -c "[ $st -eq 0 ] && grep -q 'foreign.safetensors holds no checksums' fo.txt"
finish
