#!/bin/sh
# SPDX-License-Identifier: MIT
# test-segments' device half with the real driver: classes on the GPU, a segment freed
# only after its last mapper (device free memory back to baseline), no driver call for a
# second buffer of a mapped segment.  The fake-driver run is in tests/integration.
[ -e /dev/nvidiactl ] || { echo "no NVIDIA GPU here"; exit 77; }
GPUSHM_SEGMENTS_REAL_GPU=1 exec "${GPUSHM_TEST_BUILDDIR:-.}/tests/integration/test-segments"
