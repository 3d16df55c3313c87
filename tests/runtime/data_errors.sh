#!/bin/bash
# Every problem with token data is an error that names the file, exit 1.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

"$TOOL" seq good.bin 100 50
cp good.bin magic.bin && "$TOOL" header magic.bin 0 12345
expect_error "wrong magic" "magic.bin: not a token shard: magic 12345, expected 20240520" \
  "$TOY" --data magic.bin --steps 1
cp good.bin version.bin && "$TOOL" header version.bin 1 2
expect_error "wrong version" "version.bin: unsupported shard version 2, expected 1" \
  "$TOY" --data version.bin --steps 1
head -c $((1024 + 2 * 60)) good.bin >trunc.bin
expect_error "truncated tokens" "trunc.bin: truncated: the header says 100 tokens (200 bytes), the file holds 120" \
  "$TOY" --data trunc.bin --steps 1
head -c 500 good.bin >header.bin
expect_error "truncated header" "header.bin: truncated: 500 bytes, shorter than the 1024-byte shard header" \
  "$TOY" --data header.bin --steps 1
cp good.bin extra.bin && printf 'xyz' >>extra.bin
expect_error "bytes after the tokens" "extra.bin: 203 bytes follow the header, but it says 100 tokens" \
  "$TOY" --data extra.bin --steps 1
"$TOOL" seq few.bin 32 50
expect_error "fewer tokens than one window" "few.bin: 32 tokens, fewer than one window of batch*seq+1 = 4*8+1 = 33" \
  "$TOY" --data few.bin --steps 1
expect_error "fewer tokens than a global batch" "good.bin: 100 tokens, fewer than one window of batch*seq+1 = 16*8+1 = 129" \
  "$TOY" --data good.bin --steps 1 --global-batch 16
cp good.bin badid.bin && "$TOOL" token badid.bin 37 300
expect_error "token id >= vocab" "badid.bin: token 37 has id 300, outside the vocabulary of 256" \
  "$TOY" --data badid.bin --steps 1
expect_error "token id >= vocab in --val-data" "badid.bin: token 37 has id 300" \
  "$TOY" --data good.bin --val-data badid.bin --steps 1
cp good.bin badid2.bin && "$TOOL" token badid2.bin 99 256
expect_error "token id == vocab at the end" "badid2.bin: token 99 has id 256" \
  "$TOY" --data badid2.bin --steps 1
expect_error "missing file" "nothere.bin: cannot open: No such file or directory" \
  "$TOY" --data nothere.bin --steps 1
expect_error "glob without a match" "none_*.bin: no file matches this pattern" \
  "$TOY" --data 'none_*.bin' --steps 1
mkdir shards && cp good.bin shards/a.bin && cp magic.bin shards/b.bin
expect_error "one bad shard in a glob" "shards/b.bin: not a token shard" \
  "$TOY" --data 'shards/*.bin' --steps 1
check "a good shard trains" "$TOY" --data good.bin --steps 2
finish
