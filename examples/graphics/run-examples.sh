#!/bin/sh
# SPDX-License-Identifier: MIT
# The graphics examples end to end: frame-producer animates an image (device memory
# with a GPU, else host memory), frame-vk-consumer and frame-gl-consumer each take
# frames 10, 30 and 50 and write them as PNGs, each frame checked against what the
# producer rendered.  Uses $GPUSHM_SOCKET's daemon, else starts one of its own: the build
# directory's gpushmd, else the installed one.
# Usage: run-examples.sh DIR [OUT_DIR]
#   DIR: gpushm's build directory, or the examples directory built with its Makefile
#   ("make graphics": the installed libgpushm-dev's copy of examples/)
set -eu
usage="usage: run-examples.sh DIR [OUT_DIR]
  Runs frame-producer with frame-vk-consumer and frame-gl-consumer beside it (DIR: gpushm's
  build directory, or the examples directory built with 'make graphics'), on
  \$GPUSHM_SOCKET's gpushmd, else on one of its own; the consumers take frames 10, 30
  and 50, check each against what the producer rendered and write them as PNGs in
  OUT_DIR (default ./frames).  Success ends with 'graphics examples: 3 Vulkan and 3 GL
  frames in OUT_DIR, each identical to what the producer rendered', exit 0."
case "${1:-}" in
  -h | --help) echo "$usage"; exit 0 ;;
  -*) printf 'run-examples.sh: unknown option %s\n%s\n' "'$1'" "$usage" >&2; exit 2 ;;
  "") printf 'run-examples.sh: which directory?\n%s\n' "$usage" >&2; exit 2 ;;
esac
[ $# -le 2 ] || { printf 'run-examples.sh: at most two arguments\n%s\n' "$usage" >&2; exit 2; }
b=$(cd "$1" && pwd)
out=${2:-$PWD/frames}
if [ -x "$b/examples/graphics/frame-producer" ]; then g=$b/examples/graphics; else g=$b/graphics; fi
mkdir -p "$out"
daemon=""
dir=""
cleanup() {
  if [ -n "$daemon" ]; then
    kill "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
  fi
  [ -z "$dir" ] || rm -rf "$dir"
}
trap cleanup EXIT
if [ -z "${GPUSHM_SOCKET:-}" ]; then
  gpushmd=$b/daemon/gpushmd
  [ -x "$gpushmd" ] || gpushmd=$(PATH=$PATH:/usr/sbin:/sbin command -v gpushmd) ||
    { echo "run-examples: no gpushmd in $b/daemon, and none installed"; exit 1; }
  dir=$(mktemp -d /tmp/gpushm-examples.XXXXXX)
  export GPUSHM_SOCKET="$dir/gpushmd.sock"
  "$gpushmd" --socket "$GPUSHM_SOCKET" --default-backend auto --log-level warn &
  daemon=$!
  # A ping where gpushmctl is at hand: the socket file appears at bind(), before gpushmd
  # listens, so a connect right after it may be refused.
  ctl=$b/ctl/gpushmctl
  [ -x "$ctl" ] || ctl=$(command -v gpushmctl) || ctl=true
  i=0
  until [ -S "$GPUSHM_SOCKET" ] && "$ctl" ping >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 500 ] || { echo "run-examples: gpushmd did not start"; exit 1; }
    sleep 0.02
  done
fi
"$g/frame-producer" 60 20 & producer=$!
rc=0
"$g/frame-vk-consumer" "$out" 10 30 50 & vk=$!
"$g/frame-gl-consumer" "$out" 10 30 50 & gl=$!
wait "$vk" || rc=1
wait "$gl" || rc=1
wait "$producer" || rc=1
[ "$rc" = 0 ] || { echo "graphics examples failed"; exit 1; }
echo "graphics examples: $(ls "$out"/vk-frame-*.png | wc -l) Vulkan and $(ls "$out"/gl-frame-*.png | wc -l) GL frames in $out, each identical to what the producer rendered"
