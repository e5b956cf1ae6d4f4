#!/bin/sh
# SPDX-License-Identifier: MIT
# The graphics examples as a user runs them (examples/graphics/run-examples.sh): the
# producer animates an image, the Vulkan and GL consumers each take three frames, check
# them against what the producer rendered and write PNGs.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
s=${GPUSHM_TEST_SRCDIR:?}
out=$(mktemp -d /tmp/gpushm-frames.XXXXXX)
trap 'rm -rf "$out"' EXIT
for p in frame-producer frame-vk-consumer frame-gl-consumer; do
  [ -x "$b/examples/graphics/$p" ] || { echo "FAIL: examples/graphics/$p not built"; exit 1; }
done
unset GPUSHM_SOCKET
# Under ASan: Mesa's lavapipe and llvmpipe leave allocations behind that LeakSanitizer
# reports once the loaders have unloaded them, with no frame to suppress them by.  What
# the examples share with test-vulkan and test-gl (gpushm-vulkan.h, gpushm-gl.h) is
# leak-checked there; this test is about frames.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}detect_leaks=0"
# Under the Khronos validation layer where it is installed (scripts/setup-debian): it
# writes what it finds to stdout, and the examples must give it nothing to say.
if [ -f /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json ]; then
  export VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation
  echo "under VK_LAYER_KHRONOS_validation"
fi
sh "$s/examples/graphics/run-examples.sh" "$b" "$out" > "$out/run.log" 2>&1 ||
  { cat "$out/run.log"; echo "FAIL: the examples"; exit 1; }
cat "$out/run.log"
if grep -q "Validation Error\|VUID-" "$out/run.log"; then
  echo "FAIL: the validation layer found errors"; exit 1
fi
n=$(ls "$out"/*.png | wc -l)
[ "$n" -ge 6 ] || { echo "FAIL: $n frames written"; exit 1; }
head -c 8 "$(ls "$out"/vk-frame-*.png | head -n 1)" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" ||
  { echo "FAIL: not a PNG"; exit 1; }
