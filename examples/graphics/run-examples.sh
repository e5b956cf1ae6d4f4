#!/bin/sh
# SPDX-License-Identifier: MIT
# The graphics examples end to end: frame-producer animates an image (device memory
# with a GPU, else host memory), frame-vk-consumer and frame-gl-consumer each take
# frames 10, 30 and 50 and write them as PNGs, each frame checked against what the
# producer rendered.  Uses $GPUSHM_SOCKET's daemon, else starts one of its own.
# Usage: run-examples.sh BUILD_DIR [OUT_DIR]
set -eu
b=$(cd "$1" && pwd)
out=${2:-$PWD/frames}
mkdir -p "$out"
daemon=""
cleanup() { [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null; return 0; }
trap cleanup EXIT
if [ -z "${GPUSHM_SOCKET:-}" ]; then
  dir=$(mktemp -d /tmp/gpushm-examples.XXXXXX)
  export GPUSHM_SOCKET="$dir/gpushmd.sock"
  "$b/daemon/gpushmd" --socket "$GPUSHM_SOCKET" --default-backend auto --log-level warn &
  daemon=$!
  i=0; until [ -S "$GPUSHM_SOCKET" ]; do i=$((i + 1)); [ $i -lt 500 ] || exit 1; sleep 0.02; done
fi
"$b/examples/graphics/frame-producer" 60 20 & producer=$!
rc=0
"$b/examples/graphics/frame-vk-consumer" "$out" 10 30 50 & vk=$!
"$b/examples/graphics/frame-gl-consumer" "$out" 10 30 50 & gl=$!
wait "$vk" || rc=1
wait "$gl" || rc=1
wait "$producer" || rc=1
[ "$rc" = 0 ] || { echo "graphics examples failed"; exit 1; }
echo "graphics examples: $(ls "$out"/vk-frame-*.png | wc -l) Vulkan and $(ls "$out"/gl-frame-*.png | wc -l) GL frames in $out, each identical to what the producer rendered"
