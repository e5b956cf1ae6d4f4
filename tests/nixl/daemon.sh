# SPDX-License-Identifier: MIT
# Sourced by tests/nixl/test-*.sh, tests/gpu/test-nixl.sh and tests/gpu/gpu-faults.sh: a
# scratch directory ($dir, removed at exit) and a gpushmd of its own on
# $dir/gpushmd.sock ($GPUSHM_SOCKET, $GPUSHM_LIBRARY set), from build directory $b, with
# $gpushmd_options too; the trap stops it.
dir=$(mktemp -d /tmp/gpushm-nixl.XXXXXX)
chmod 755 "$dir"
daemon=""
cleanup() {
  [ -z "$daemon" ] || { kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true; }
  rm -rf "$dir"
}
trap cleanup EXIT
export GPUSHM_SOCKET="$dir/gpushmd.sock"
export GPUSHM_LIBRARY="$b/client/.libs/libgpushm.so.1"
# shellcheck disable=SC2086 # options, split on purpose
"${GPUSHMD:-$b/daemon/gpushmd}" --socket "$GPUSHM_SOCKET" --socket-group none \
  --log-level warn ${gpushmd_options:-} &
daemon=$!
i=0
until "$b/ctl/gpushmctl" ping >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 500 ] || { echo "FAIL: gpushmd did not start"; exit 1; }; sleep 0.02
done
