#!/bin/sh
# SPDX-License-Identifier: MIT
# The GPU suite against the fake driver, so machines without a GPU (CI) run every
# CUDA code path in daemon and library; the real-driver run is tests/gpu/test-cuda-ipc.
[ -r "$GPUSHM_FAKE_CUDA_LIB" ] || { echo "no fake driver (built without CUDA)"; exit 77; }
GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB exec "${GPUSHM_TEST_BUILDDIR:-.}/tests/gpu/test-cuda-ipc"
