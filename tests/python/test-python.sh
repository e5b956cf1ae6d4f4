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

# The package's C speedups (python/gpushm/_speedups.c), compiled as pip's build compiles
# them (with the sanitizers, where libgpushm has them): the suite runs with them, then
# without (the ctypes path, which installs without a compiler take).  Where they cannot be
# built here (no Python.h), once, without, saying why.  GPUSHM_TEST_PYTHON_CTYPES=0 runs
# only the first (CI's repeats of the suite under sanitizers and from tarballs).
sp=$(mktemp -d /tmp/gpushm-speedups.XXXXXX)
trap 'rm -rf "$sp"' EXIT
chmod 0755 "$sp"  # (the tests' uid-65534 processes load it too)
cflags=
[ -z "${GPUSHM_TEST_PYTHON_PRELOAD:-}" ] || cflags="-fsanitize=address,undefined"
built=$(CC="${GPUSHM_TEST_CC:-${CC:-}}" CFLAGS="$cflags" "$py" -c '
import sys
sys.path.insert(0, sys.argv[1])
import gpushm_build
name, why = gpushm_build.compile_speedups(sys.argv[2])
print(name or "-", why)' "$src/python/_build_backend" "$sp")
pytest() {
  "$py" -m pytest -q -rs -p no:cacheprovider -o console_output_style=classic \
    --rootdir "$src/tests/python" "$src/tests/python"
}
if [ "${built%% *}" = - ]; then
  echo "# the Python package without its C speedups only: ${built#* }"
  GPUSHM_PURE_PYTHON=1 pytest
  exit
fi
echo "# the Python package with its C speedups ($sp/${built%% *})"
GPUSHM_SPEEDUPS="$sp/${built%% *}" GPUSHM_TEST_SPEEDUPS=1 pytest
[ "${GPUSHM_TEST_PYTHON_CTYPES:-1}" != 0 ] || exit 0
echo "# the Python package without them (GPUSHM_PURE_PYTHON=1: the ctypes path)"
GPUSHM_PURE_PYTHON=1 pytest
