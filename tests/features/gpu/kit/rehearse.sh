#!/usr/bin/env bash
# The GPU kit's rehearsal (docs/gpu.md): the kit built with the CPU
# emulator's programs in place of the nvcc ones (scripts/gpu-kit.sh
# --emu), then its runner run inside a minimal Debian root file system
# that holds nothing but a base Debian and the kit (tests/features/gpu/kit/rootfs.sh),
# through chroot: a library or a tool that the kit lacks and a bare CUDA
# image would lack too fails here, not on the GPU.
#
#   tests/features/gpu/kit/rehearse.sh [--quick] BUILD [TIERS]
#
# TIERS is the runner's argument (default "all"); --quick builds and runs
# the quick kit (tier 1's rows but the speed row's torch part), as ctest's
# gpu/kit_rehearsal does. The root file system and the kits are built once
# under BUILD (gpu-rootfs, gpu-kit-emu, gpu-kit-emu-quick) and reused; the
# runner's JSON and failed rows' logs are copied to BUILD/gpu-rehearsal-out
# (or $OUT). Needs root (chroot, bind mounts of /proc, /sys and /dev);
# without it, it says so and exits 77.
set -u
cd "$(dirname "$0")/../../../.." || exit 1
ROOT=$PWD
QUICK=""
[ "${1:-}" = --quick ] && { QUICK=--quick; shift; }
BUILD=$(cd "${1:?usage: rehearse.sh [--quick] BUILD [TIERS]}" && pwd) || exit 1
TIERS=${2:-all}
[ "$(id -u)" = 0 ] || { echo "SKIP: the rehearsal needs root (chroot and bind mounts)"; exit 77; }
command -v chroot >/dev/null || { echo "SKIP: no chroot"; exit 77; }
KIT=$BUILD/gpu-kit-emu${QUICK:+-quick}
FS=$BUILD/gpu-rootfs
RES=${OUT:-$BUILD/gpu-rehearsal-out}
t0=$SECONDS
"$ROOT/tests/features/gpu/kit/rootfs.sh" "$FS" || { echo "SKIP: no root file system (see above)"; exit 77; }
"$ROOT/scripts/gpu-kit.sh" --emu $QUICK "$BUILD" "$KIT" || exit 1
echo "== rehearsal: $KIT in $FS/root ($((SECONDS - t0)) s to prepare)"
# One rehearsal at a time in the root file system: the bind mounts are shared.
exec 9>"$FS/.lock"
flock 9
R=$FS/root
NAME=$(basename "$KIT")
rm -rf "${R:?}/$NAME" "$R/out" && mkdir -p "$R/out" && cp -a "$KIT" "$R/$NAME" || exit 1
mounted=()
cleanup() { local m; for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || umount -l "$m"; done; }
trap cleanup EXIT
for m in proc sys dev dev/shm; do
  mkdir -p "$R/$m"
  mount --bind "/$m" "$R/$m" && mounted=("$R/$m" "${mounted[@]}") || { echo "FAIL: cannot bind /$m"; exit 1; }
done
# A clean environment: what the image would have, and nothing of this
# machine's (no LD_LIBRARY_PATH, no MPI or CUDA on PATH).
chroot "$R" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root TMPDIR=/tmp OUT=/out \
  OMP_NUM_THREADS=1 /bin/bash "/$NAME/run.sh" "$TIERS"
rc=$?
rm -rf "$RES" && cp -r "$R/out" "$RES"
echo "== rehearsal: runner exit $rc after $((SECONDS - t0)) s; JSON and failed rows' logs in $RES"
exit $rc
