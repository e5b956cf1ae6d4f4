#!/bin/sh
# SPDX-License-Identifier: MIT
# UCX's own RMA API (ucp_mem_map, ucp_get_nbx, ucp_put_nbx) between two processes' gpushm
# buffers: tests/nixl/ucx-rma.c built here against the UCX in UCX_DIR (an unpacked
# libucx-cu13 wheel's libucx/: include/, lib/), run by tests/nixl/ucx-check.py, then
# again with UCX_TLS leaving only TCP, which the check must name.
# Usage: test-ucx.sh BUILDDIR UCX_DIR host|device [SIZE]
set -eu
b=$(cd "${1:?BUILDDIR}" && pwd)
ucx=$(cd "${2:?UCX_DIR}" && pwd)
memory=${3:?host or device}
size=${4:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-python3}
dir=$(mktemp -d /tmp/gpushm-ucx.XXXXXX)
chmod 755 "$dir"
daemon=""
cleanup() {
  [ -z "$daemon" ] || { kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true; }
  rm -rf "$dir"
}
trap cleanup EXIT
${CC:-cc} -std=c11 -Wall -Wextra -Werror -O2 -I"$src/include" -isystem "$ucx/include" \
  "$src/tests/nixl/ucx-rma.c" -o "$dir/ucx-rma" -L"$b/client/.libs" -lgpushm \
  -L"$ucx/lib" -lucp -lucs -ldl -Wl,-rpath,"$b/client/.libs" -Wl,-rpath,"$ucx/lib"
export GPUSHM_SOCKET="$dir/gpushmd.sock"
export GPUSHM_LIBRARY="$b/client/.libs/libgpushm.so.1"
export PYTHONPATH="$src/python"
"${GPUSHMD:-$b/daemon/gpushmd}" --socket "$GPUSHM_SOCKET" --socket-group none --log-level warn &
daemon=$!
i=0
until "$b/ctl/gpushmctl" ping >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 500 ] || { echo "FAIL: gpushmd did not start"; exit 1; }; sleep 0.02
done
"$py" "$src/tests/nixl/ucx-check.py" --binary "$dir/ucx-rma" --memory "$memory" \
  ${size:+--size "$size"}
tls=tcp,self
[ "$memory" = host ] || tls=tcp,self,cuda_copy
UCX_TLS=$tls "$py" "$src/tests/nixl/ucx-check.py" --binary "$dir/ucx-rma" --memory "$memory" \
  --size 1052672 --runs 1 --expect-refusal
