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
. "$src/tests/nixl/daemon.sh"
export PYTHONPATH="$src/python"
${CC:-cc} -std=c11 -Wall -Wextra -Werror -O2 -I"$src/include" -isystem "$ucx/include" \
  "$src/tests/nixl/ucx-rma.c" -o "$dir/ucx-rma" -L"$b/client/.libs" -lgpushm \
  -L"$ucx/lib" -lucp -lucs -ldl -Wl,-rpath,"$b/client/.libs" -Wl,-rpath,"$ucx/lib"
if [ "$memory" = device ]; then
  [ -e "$ucx/lib/ucx/libuct_cuda.so" ] || { echo "FAIL: $ucx has no libuct_cuda.so"; exit 1; }
fi
if [ "$memory" = device ] && ! grep -qa "unable to export POSIX FD handle" \
    "$ucx"/lib/ucx/libuct_cuda.so; then
  # This UCX's cuda_ipc was built without pidfd_getfd (the PyPI wheels' are): a peer
  # cannot reach VMM memory shared by POSIX fd, so UCX moves it through the host.  The
  # bytes must still arrive, and the check must refuse the path by name (64 MiB, once:
  # a host copy of 1 GiB takes seconds).
  echo "# $ucx: cuda_ipc without its POSIX-fd path (no pidfd_getfd): a slow path expected"
  "$py" "$src/tests/nixl/ucx-check.py" --binary "$dir/ucx-rma" --memory device \
    --size 67112960 --runs 1 --expect-refusal
  exit
fi
"$py" "$src/tests/nixl/ucx-check.py" --binary "$dir/ucx-rma" --memory "$memory" \
  ${size:+--size "$size"}
tls=tcp,self
[ "$memory" = host ] || tls=tcp,self,cuda_copy
UCX_TLS=$tls "$py" "$src/tests/nixl/ucx-check.py" --binary "$dir/ucx-rma" --memory "$memory" \
  --size 1052672 --runs 1 --expect-refusal
