#!/bin/sh
# SPDX-License-Identifier: MIT
# The README's demo, as the suite runs it: host memory without a GPU driver, and GPU
# memory through the fake driver where CUDA support is built.
set -eu
build=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
GPUSHM_CUDA_LIBRARY=/nonexistent "$src/examples/demo.sh" "$build" > "$out" 2>&1 || { cat "$out"; exit 1; }
grep -q "words of host memory verified" "$out" || { cat "$out"; exit 1; }
grep -q "demo: OK" "$out"
if [ -r "${GPUSHM_FAKE_CUDA_LIB:-}" ]; then
  GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB "$src/examples/demo.sh" "$build" > "$out" 2>&1 || { cat "$out"; exit 1; }
  grep -q "words of GPU memory verified" "$out" || { cat "$out"; exit 1; }
fi
echo "demo passed"
