#!/bin/sh
# SPDX-License-Identifier: MIT
# The Python package (python/) against a real gpushmd: pytest over tests/python, with the
# first of $GPUSHM_TEST_PYTHON, /usr/bin/python3 (Debian's python3-numpy and
# python3-pytest: scripts/setup-debian installs them) and python3 that has both.  The
# daemon is started by the tests' fixture (conftest.py), with the fake CUDA driver where
# it is built.  Exit 77 only where no Python here has NumPy and pytest.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/../.." && pwd)
py=
for candidate in ${GPUSHM_TEST_PYTHON:-} /usr/bin/python3 python3; do
  if "$candidate" -c 'import numpy, pytest' 2>/dev/null; then
    py=$candidate; break
  fi
done
if [ -z "$py" ]; then
  echo "no Python here imports numpy and pytest (Debian: apt-get install python3-numpy python3-pytest)"
  exit 77
fi
lib=$b/client/.libs/libgpushm.so.1
[ -f "$lib" ] || { echo "no $lib"; exit 1; }
export GPUSHM_LIBRARY="$lib" PYTHONPATH="$src/python" PYTHONDONTWRITEBYTECODE=1
export GPUSHMD="${GPUSHMD:-$b/daemon/gpushmd}"

# A sanitizer build's library expects its runtime in the executable, which python is
# not: preload the runtime (ASan's carries UBSan's handlers), and leave Python's own
# leaks at exit unreported.
if nm -D --undefined-only "$lib" 2>/dev/null | grep -q ' __asan_'; then
  cc=${GPUSHM_TEST_CC:-cc}
  rt=
  for name in libclang_rt.asan-x86_64.so libclang_rt.asan.so libasan.so; do
    candidate=$($cc -print-file-name="$name" 2>/dev/null || true)
    [ -f "$candidate" ] && { rt=$candidate; break; }
  done
  [ -n "$rt" ] || { echo "libgpushm is built with ASan, and $cc names no ASan runtime to preload"; exit 1; }
  # (conftest.py's native_env() takes it out again for gpushmd and the examples)
  export LD_PRELOAD="$rt" GPUSHM_TEST_PYTHON_PRELOAD="$rt"
  export GPUSHM_TEST_NATIVE_ASAN_OPTIONS="${ASAN_OPTIONS:-}"
  export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi

exec "$py" -m pytest -q -rs -p no:cacheprovider -o console_output_style=classic \
  --rootdir "$src/tests/python" "$src/tests/python"
