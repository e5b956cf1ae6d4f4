#!/bin/sh
# SPDX-License-Identifier: MIT
# NIXL (its UCX backend) moving gpushm host buffers and a weight set between agents in
# separate processes (tests/nixl/nixl-check.py --memory host), and the KV pool example
# (examples/nixl/kv_pool.py check): what .ci/run runs without
# a GPU, with the nixl-cu13 wheel scripts/fetch-wheel unpacked.  PYTHON: a Python with
# NumPy; NIXL from $GPUSHM_TEST_NIXL_PATH or its own packages.
# Usage: test-nixl-host.sh BUILDDIR
set -eu
b=$(cd "${1:?BUILDDIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-python3}
dir=$(mktemp -d /tmp/gpushm-nixl.XXXXXX)
daemon=""
cleanup() {
  [ -z "$daemon" ] || { kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true; }
  rm -rf "$dir"
}
trap cleanup EXIT
export GPUSHM_SOCKET="$dir/gpushmd.sock"
export GPUSHM_LIBRARY="$b/client/.libs/libgpushm.so.1"
export PYTHONPATH="${GPUSHM_TEST_NIXL_PATH:+$GPUSHM_TEST_NIXL_PATH:}$src/python"
"$b/daemon/gpushmd" --socket "$GPUSHM_SOCKET" --socket-group none --log-level warn &
daemon=$!
i=0
until "$b/ctl/gpushmctl" ping >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 500 ] || { echo "FAIL: gpushmd did not start"; exit 1; }; sleep 0.02
done
"$py" "$src/tests/nixl/nixl-check.py" --memory host --tensors 100000 --tensor-bytes 64 \
  2>"$dir/stderr" || { grep -v ' NIXL INFO ' "$dir/stderr" | tail -n 40; exit 1; }
# the KV pool example: the pool outlives its engine, many engines register it
"$py" "$src/examples/nixl/kv_pool.py" check 2>"$dir/stderr" ||
  { grep -v ' NIXL INFO ' "$dir/stderr" | tail -n 40; exit 1; }
