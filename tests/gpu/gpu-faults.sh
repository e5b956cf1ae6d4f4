#!/bin/sh
# SPDX-License-Identifier: MIT
# Writes to read-only device memory through the frameworks that ignore DLPack's
# read-only flag (PyTorch, CuPy; issue 42): the cuda-fd mapping is read-only, so the
# write faults on the GPU, the framework raises, the interpreter lives on, and the
# buffer is unchanged.  Each consumer runs in a process of its own: a fault ends CUDA in
# the process that made it.
#
# Not part of `make check`: a GPU fault is an Xid 31 in the kernel log, which GPU health
# monitors count, and on the H200 with driver 580 every GL context made after two such
# faults timed out (Xid 109, CTX SWITCH TIMEOUT) and read garbage, where the same GL
# example passed 6 times of 6 without them.  scripts/gpu-host-test runs this last, after
# every other GPU test, then the graphics examples once more, reported, not counted.
# Exit 77 only without a GPU.
[ -e /dev/nvidiactl ] || { echo "no NVIDIA GPU here"; exit 77; }
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }

. "$src/tests/gpu/find-python.sh"
find_gpu_python "torch, cupy"

gpushmd_options="--default-backend cuda-fd"
. "$src/tests/nixl/daemon.sh"
export PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}"
xids_before=$(dmesg 2>/dev/null | grep -c 'NVRM: Xid' || true)

said=$dir/read-only.txt
"$py" - > "$said" 2>&1 <<'PY' || { cat "$said"; fail "writes to read-only device memory"; }
import subprocess, sys, torch, gpushm

def consumer(code):
    p = subprocess.run([sys.executable, "-c", "import torch, cupy, gpushm\n" + code],
                       capture_output=True, text=True, timeout=120)
    said = (p.stdout + p.stderr).strip().splitlines()
    assert p.returncode == 0, f"exit {p.returncode} (a signal if negative): {said[-3:]}"
    return said[-1] if said else ""

gpushm.share("ro-dev", torch.full((1 << 20,), 7, dtype=torch.int32, device="cuda"),
             mode=0o644).close()
for who, write in [("torch", "r = torch.from_dlpack(t)\n    r.add_(1)\n"
                             "    torch.cuda.synchronize()"),
                   ("cupy", "c = cupy.from_dlpack(t)\n    c += 1\n"
                            "    cupy.cuda.runtime.deviceSynchronize()")]:
    print(f"# {who}, cuda-fd:", consumer(
        "t = gpushm.open('ro-dev', readonly=True)\n"
        "try:\n"
        f"    {write}\n"
        "    print('NOT refused')\n"
        "except Exception as e:\n"
        "    print(f'raised {type(e).__name__}: {str(e).splitlines()[0]}')"))
d = torch.from_dlpack(gpushm.open("ro-dev"))
assert bool((d == 7).all()), "a consumer's write to a read-only open reached the buffer"
del d
gpushm.unlink("ro-dev")
PY
cat "$said"
grep -q "NOT refused" "$said" && fail "a write to read-only device memory went through"
grep -c "^# .*raised" "$said" | grep -qx 2 || fail "not both writes raised"
# The faults as the kernel logged them, where dmesg can be read here.
if dmesg > /dev/null 2>&1; then
  xids=$(($(dmesg | grep -c 'NVRM: Xid' || true) - xids_before))
  echo "# the kernel logged $xids GPU faults (Xid) for these writes:"
  dmesg | grep 'NVRM: Xid' | tail -n 2 | sed 's/^/#   /'
fi
echo "writes to read-only device memory: both raised, the interpreter lived, the buffer unchanged"
