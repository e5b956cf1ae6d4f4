#!/bin/sh
# SPDX-License-Identifier: MIT
# NIXL (its UCX backend) moving gpushm cuda-fd buffers and a weight set between agents in
# separate processes on the real GPU (tests/nixl/nixl-check.py --memory device).  NIXL
# comes from $GPUSHM_TEST_NIXL_PATH (an unpacked scripts/slim-wheel tree: what
# scripts/gpu-host-test gives it) or the Python's own packages.  Exit 77 without a GPU,
# or without NIXL (saying so: scripts/gpu-host-test counts that skip as a failure).
[ -e /dev/nvidiactl ] || { echo "no NVIDIA GPU here"; exit 77; }
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }

. "$src/tests/gpu/find-python.sh"
find_gpu_python "torch"
export PYTHONPATH="${GPUSHM_TEST_NIXL_PATH:+$GPUSHM_TEST_NIXL_PATH:}$src/python"
if ! nixl=$("$py" -c 'import nixl_cu13 as n; print(n.__file__)' 2>&1); then
  echo "NIXL is not importable here (pip install nixl-cu13, or GPUSHM_TEST_NIXL_PATH): $nixl" | tail -n 1
  exit 77
fi
echo "# python: $py; nixl: $nixl"

# cuda-fd unless a buffer says otherwise; section 3's cuda-ipc buffer needs legacy IPC
gpushmd_options="--default-backend cuda-fd --allow-legacy-ipc=yes"
. "$src/tests/nixl/daemon.sh"

# UCX's logs (its protocol tables: gpushm.nixl reads them) where a failure can show them
export UCX_LOG_FILE="$dir/ucx.%p.log"
ucx_tables() { grep -h -E '^\[.*\|' "$dir"/ucx.*.log 2>/dev/null | sed 's/^\[[^]]*\] \[[^]]*\] *//' | head -n 400; }
"$py" "$src/tests/nixl/nixl-check.py" --memory device 2>"$dir/stderr" ||
  { grep -v ' NIXL INFO ' "$dir/stderr" | tail -n 40; ucx_tables; fail "nixl-check.py --memory device"; }
# the pool that outlives its engine, with this host's NIXL (a host-memory pool: above)
"$py" "$src/examples/nixl/kv_pool.py" check 2>"$dir/stderr" ||
  { grep -v ' NIXL INFO ' "$dir/stderr" | tail -n 40; fail "kv_pool.py check"; }
echo "PASS"
