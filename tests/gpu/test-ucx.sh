#!/bin/sh
# SPDX-License-Identifier: MIT
# UCX's own RMA API between two processes' gpushm cuda-fd buffers on the real GPU
# (tests/nixl/test-ucx.sh, 1 GiB): fast where the UCX's cuda_ipc has its POSIX-fd path;
# with one built without it (libucx-cu13 1.22.0 from PyPI, like the UCX inside
# nixl-cu13), the bytes moved through the host and the check refusing that path by name
# (docs/multinode.md).  UCX comes from $GPUSHM_TEST_UCX_DIR (an unpacked libucx/ of
# scripts/slim-wheel: what scripts/gpu-host-test gives it).  Exit 77 without a GPU, or
# without that UCX (scripts/gpu-host-test counts that skip as a failure).
[ -e /dev/nvidiactl ] || { echo "no NVIDIA GPU here"; exit 77; }
[ -n "${GPUSHM_TEST_UCX_DIR:-}" ] && [ -d "$GPUSHM_TEST_UCX_DIR/include" ] || {
  echo "no UCX to build against (GPUSHM_TEST_UCX_DIR: an unpacked libucx-cu13 libucx/)"
  exit 77
}
set -eu
exec sh "$(dirname "$0")/../nixl/test-ucx.sh" "${GPUSHM_TEST_BUILDDIR:?}" "$GPUSHM_TEST_UCX_DIR" \
  device $((1 << 30))
