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
. "$src/tests/nixl/daemon.sh"
export PYTHONPATH="${GPUSHM_TEST_NIXL_PATH:+$GPUSHM_TEST_NIXL_PATH:}$src/python"
"$py" "$src/tests/nixl/nixl-check.py" --memory host --tensors 100000 --tensor-bytes 64 \
  2>"$dir/stderr" || { grep -v ' NIXL INFO ' "$dir/stderr" | tail -n 40; exit 1; }
# the KV pool example: the pool outlives its engine, many engines register it
"$py" "$src/examples/nixl/kv_pool.py" check 2>"$dir/stderr" ||
  { grep -v ' NIXL INFO ' "$dir/stderr" | tail -n 40; exit 1; }
