#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/gpu/test-cuda-multinode against the fake driver: once as on the lent GPU host
# (no IMEX channel: cuda-fabric refused), once with a channel (GPUSHM_FAKE_CUDA_IMEX=1:
# the success path, handle imported by another process), and once with a channel and
# faults injected (the driver refusing a dma-buf, and gpushmd's fabric export).
[ -r "$GPUSHM_FAKE_CUDA_LIB" ] || { echo "no fake driver (built without CUDA)"; exit 77; }
test=${GPUSHM_TEST_BUILDDIR:-.}/tests/gpu/test-cuda-multinode
GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB "$test" || exit 1
GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB GPUSHM_FAKE_CUDA_IMEX=1 \
  GPUSHM_CUDA_FAULTS=cuMemGetHandleForAddressRange=CUDA_ERROR_OUT_OF_MEMORY,cuMemExportToShareableHandle=CUDA_ERROR_OUT_OF_MEMORY@3 \
  "$test" || exit 1
GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB GPUSHM_FAKE_CUDA_IMEX=1 exec "$test"
