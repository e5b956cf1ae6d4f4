#!/bin/sh
# SPDX-License-Identifier: MIT
# Kill storms against the fake driver (tests/gpu/test-cuda-kill-storm on the real one):
# every CUDA path of daemon and library that a client's death crosses, without a GPU.
[ -r "$GPUSHM_FAKE_CUDA_LIB" ] || { echo "no fake driver (built without CUDA)"; exit 77; }
GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB exec "${GPUSHM_TEST_BUILDDIR:-.}/tests/gpu/test-cuda-kill-storm"
