#!/usr/bin/env bash
# A minimal Debian root file system for the GPU kit's rehearsal
# (tests/features/gpu/kit/rehearse.sh): the packages of a base Debian that a shell
# script needs (the C and C++ runtimes, bash, coreutils, sed, grep, awk,
# tar, gzip, find, cmp) and nothing else: no MPI, OpenBLAS, cJSON,
# OpenMP runtime, Python, compilers or CUDA. What the kit's programs need
# beyond it must travel inside the kit, as on a bare CUDA image, so a
# library the kit lacks fails the rehearsal here.
#
#   tests/features/gpu/kit/rootfs.sh DIR    builds DIR/root (once: a DIR/root/.complete
#                                  marks it done; the .deb files stay in DIR/debs)
#
# The packages come from this machine's apt sources (apt-get download, no
# installation), unpacked with dpkg-deb -x: seconds, where debootstrap
# --variant=minbase takes minutes, and with the same libraries as the
# machine that built the kit, so that a difference is the kit's, not a
# version's.
set -eu
DIR=${1:?usage: rootfs.sh DIR}
ROOT=$DIR/root
[ -f "$ROOT/.complete" ] && { echo "rootfs: $ROOT (cached)"; exit 0; }
# The C library and loader, libgcc and libstdc++ (in every base image, the
# kit's programs link them), the shell and the tools the runner calls, and
# what those link.
PACKAGES="libc6 libgcc-s1 libstdc++6 bash dash coreutils sed grep mawk tar gzip findutils
diffutils libtinfo6 libacl1 libattr1 libselinux1 libpcre2-8-0 libgmp10 libcrypt1 libzstd1
liblzma5 libbz2-1.0 libmd0 libcap2 base-files"
mkdir -p "$DIR/debs"
rm -rf "$ROOT" "$ROOT.tmp"
mkdir -p "$ROOT.tmp"
# shellcheck disable=SC2086
(cd "$DIR/debs" && for p in $PACKAGES; do ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -q "$p"; done) ||
  { echo "rootfs: apt-get download failed (no Debian mirror?)" >&2; exit 1; }
for deb in "$DIR"/debs/*.deb; do dpkg-deb -x "$deb" "$ROOT.tmp"; done
# /bin/sh, as dash's postinst makes it; /tmp and the mount points.
ln -sf dash "$ROOT.tmp/bin/sh"
# /usr/bin/awk, as the alternatives system makes it for mawk.
ln -sf mawk "$ROOT.tmp/usr/bin/awk"
mkdir -p "$ROOT.tmp/tmp" "$ROOT.tmp/proc" "$ROOT.tmp/dev" "$ROOT.tmp/sys" "$ROOT.tmp/etc"
chmod 1777 "$ROOT.tmp/tmp"
echo "root:x:0:0:root:/root:/bin/bash" >"$ROOT.tmp/etc/passwd"
echo "root:x:0:" >"$ROOT.tmp/etc/group"
echo "127.0.0.1 localhost $(hostname)" >"$ROOT.tmp/etc/hosts"
# The loader's cache, as libc-bin's trigger would write it.
ldconfig -r "$ROOT.tmp"
touch "$ROOT.tmp/.complete"
mv "$ROOT.tmp" "$ROOT"
echo "rootfs: $ROOT, $(du -sm "$ROOT" | cut -f1) MiB from $(ls "$DIR"/debs/*.deb | wc -l) packages"
