# SPDX-License-Identifier: MIT
# Sourced by the GPU tests that run Python: find_gpu_python MODULES sets py to the first
# of $GPUSHM_TEST_PYTHON, python3 and /usr/bin/python3 that imports MODULES (a
# comma-separated list, e.g. "torch, cupy") with CUDA available to torch, or fails the
# test saying so (the caller's fail()).
find_gpu_python() {
  py=
  for candidate in ${GPUSHM_TEST_PYTHON:-} python3 /usr/bin/python3; do
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c "import $1; assert torch.cuda.is_available()" 2>/dev/null; then
      py=$(command -v "$candidate"); return 0
    fi
  done
  fail "no Python here imports $1 with CUDA (set GPUSHM_TEST_PYTHON)"
}
