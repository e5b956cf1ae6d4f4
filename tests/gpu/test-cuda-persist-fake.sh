#!/bin/sh
# SPDX-License-Identifier: MIT
# Persistent cuda-fd buffers across a daemon restart, against the fake driver, so that CI
# (no GPU) runs adoption, a failed import, a device that is gone and one renumbered; the
# real-driver run is tests/gpu/test-cuda-persist.
[ -r "$GPUSHM_FAKE_CUDA_LIB" ] || { echo "no fake driver (built without CUDA)"; exit 77; }
GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB exec "${GPUSHM_TEST_BUILDDIR:-.}/tests/gpu/test-cuda-persist"
