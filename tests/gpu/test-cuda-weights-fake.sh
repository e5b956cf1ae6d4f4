#!/bin/sh
# SPDX-License-Identifier: MIT
# Weight sets of cuda-fd memory against the fake driver, so machines without a GPU (CI)
# run the library's CUDA paths for them (gpushm_weights_copy() on a stream, its close
# waiting for the copies); the real-driver run is tests/gpu/test-cuda-weights.
[ -r "$GPUSHM_FAKE_CUDA_LIB" ] || { echo "no fake driver (built without CUDA)"; exit 77; }
GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB exec "${GPUSHM_TEST_BUILDDIR:-.}/tests/gpu/test-cuda-weights" --fake-driver
