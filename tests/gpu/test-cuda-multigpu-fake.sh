#!/bin/sh
# SPDX-License-Identifier: MIT
# The two-GPU test against the fake driver with two fake devices, so CI runs the
# multi-device paths of daemon and library; the real-driver run is
# tests/gpu/test-cuda-multigpu (on a machine with two GPUs).
[ -r "$GPUSHM_FAKE_CUDA_LIB" ] || { echo "no fake driver (built without CUDA)"; exit 77; }
GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB GPUSHM_FAKE_CUDA_DEVICES=2 \
  exec "${GPUSHM_TEST_BUILDDIR:-.}/tests/gpu/test-cuda-multigpu"
