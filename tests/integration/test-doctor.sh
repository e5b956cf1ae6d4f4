#!/bin/sh
# SPDX-License-Identifier: MIT
# gpushmctl doctor against real daemons: golden output (run-specific values masked) for a
# host-only daemon, one on the fake CUDA driver with cuda-fd as its default, and one whose
# fake GPU lacks virtual memory management; exit statuses for the default and for
# --backend; MIG instances; MPS (a control socket, a server of this uid and of another);
# no daemon at all.  The namespace cases are in test-namespaces.sh.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/../.." && pwd)
ctl=$b/ctl/gpushmctl
dir=$(mktemp -d /tmp/gpushm-doctor.XXXXXX)
chmod 755 "$dir"
export GPUSHM_SOCKET="$dir/gpushmd.sock"
# What this machine has must not leak into the golden files.
export CUDA_MPS_PIPE_DIRECTORY="$dir/mps"
unset CUDA_VISIBLE_DEVICES GPUSHM_FAKE_CUDA_NO_VMM GPUSHM_FAKE_CUDA_MIG GPUSHM_CUDA_FAULTS || true
daemon=""
others=""
cleanup() {
  for p in $others $daemon; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect() {
  code=$1; shift
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  [ "$rc" = "$code" ] || fail "'$*' exited $rc, expected $code: $out"
}
contains() { case "$out" in *"$1"*) ;; *) fail "output lacks '$1': $out" ;; esac; }
lacks() { case "$out" in *"$1"*) fail "output has '$1': $out" ;; esac; }
wait_for() { i=0; until eval "$1"; do i=$((i + 1)); [ $i -lt 500 ] || fail "timed out: $1"; sleep 0.02; done; }
start_daemon() {
  "$GPUSHMD" --socket "$GPUSHM_SOCKET" --socket-group none --socket-mode 0666 --log-level error "$@" &
  daemon=$!
  wait_for '"$ctl" ping >/dev/null 2>&1'
}
stop_daemon() { kill "$daemon"; wait "$daemon" || true; daemon=""; }
# Masks what differs between runs and machines: versions, uids, pids, namespace inodes,
# the trial buffer's nonce, the temporary directory, the host quota (from this machine's RAM).
normalize() {
  sed -E -e "s|$dir|DIR|g" \
    -e 's/this process is uid [0-9]+, pid [0-9]+/this process is uid UID, pid PID/' \
    -e 's/gpushmd [0-9]+\.[0-9]+\.[0-9]+[^,]*, protocol/gpushmd VERSION, protocol/' \
    -e 's/uid [0-9]+ \(root\)/uid UID/g; s/uid [0-9]+/uid UID/g; s/its uid \([0-9]+\)/its uid (UID)/g' \
    -e 's/, pid [0-9]+ here/, pid PID here/' \
    -e "s/pid:\[[0-9]+\]( \(the host's\))?/pid:[NS]/g" \
    -e 's/gpushmctl-doctor\.[0-9]+\.[0-9a-f]{8}/gpushmctl-doctor.PID.NONCE/g' \
    -e 's@^(graphics/[a-z]+ +)(ok|FAIL|n-a) +.*@\1STATUS  (this machine'"'"'s graphics drivers)@' \
    -e 's@^(quota/host +ok +this uid may hold )[0-9]+ MiB@\1N MiB@'
}
# golden NAME CODE ARGS...: doctor's output, normalised, must equal tests/golden/NAME
golden() {
  name=$1 code=$2; shift 2
  set +e; "$ctl" doctor "$@" > "$dir/raw" 2>&1; rc=$?; set -e
  normalize < "$dir/raw" > "$dir/$name"
  # GPUSHM_UPDATE_GOLDEN=1 rewrites the golden file (review the diff before committing).
  [ -z "${GPUSHM_UPDATE_GOLDEN:-}" ] || cp "$dir/$name" "$src/tests/golden/$name"
  diff -u "$src/tests/golden/$name" "$dir/$name" || fail "doctor $* differs from tests/golden/$name"
  [ "$rc" = "$code" ] || fail "doctor $* exited $rc, expected $code: $(cat "$dir/raw")"
}

# --- no daemon: one failed check, exit 1
expect 1 "$ctl" doctor; contains "daemon/connect"; contains "cannot connect to gpushmd"
contains "verdict: no backend works for this process: see daemon/connect"
expect 2 "$ctl" doctor --backend nvlink; contains "unknown backend"
expect 2 "$ctl" doctor --backend cuda-fabric; contains "reports cuda-fabric in its own rows"
expect 2 "$ctl" doctor --json; contains "doctor takes no --json"

# --- a host-only daemon (no CUDA driver anywhere): host works, the device backends say why not
export GPUSHM_CUDA_LIBRARY=/nonexistent
start_daemon
golden doctor-host-only.txt 0
expect 1 "$ctl" doctor --backend cuda-fd
contains "cuda-fd/offered          FAIL   gpushmd does not offer it: unsupported: cuda-fd backend unavailable"
contains "verdict: cuda-fd (asked for) does NOT work for this process"
# the trial leaves nothing behind
expect 0 "$ctl" list --all; [ "$(echo "$out" | wc -l)" = 1 ] || fail "doctor left a buffer: $out"
# a Vulkan driver that crashes or hangs as it loads costs the probe's child, not doctor:
# both graphics rows say so, the verdict stands
icd=$GPUSHM_TEST_BUILDDIR/tests/integration/.libs/libbroken-icd.so
if [ -r "$icd" ] && "$ctl" doctor 2>&1 | grep -Eq '^graphics/vulkan .*(no Vulkan loader|built without Vulkan headers)'; then
  echo "# no Vulkan loader here, or gpushmctl built without Vulkan: the broken-driver cases need both"
elif [ -r "$icd" ]; then
  printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "%s", "api_version": "1.3.0"}}\n' \
    "$icd" > "$dir/broken-icd.json"
  expect 0 env VK_DRIVER_FILES="$dir/broken-icd.json" VK_ICD_FILENAMES="$dir/broken-icd.json" \
    GPUSHM_TEST_ICD=crash "$ctl" doctor
  # (signal 11; under a sanitizer, whose handler catches it, an exit status)
  contains "graphics/vulkan          FAIL   the graphics drivers' probe crashed ("
  contains "graphics/gl              FAIL   the graphics drivers' probe crashed ("
  contains "verdict: host (gpushmd's default) works for this process"
  expect 0 env VK_DRIVER_FILES="$dir/broken-icd.json" VK_ICD_FILENAMES="$dir/broken-icd.json" \
    GPUSHM_TEST_ICD=hang GPUSHM_DOCTOR_GRAPHICS_TIMEOUT_MS=300 "$ctl" doctor
  contains "graphics/vulkan          FAIL   the graphics drivers did not answer within 300 ms"
  contains "verdict: host (gpushmd's default) works for this process"
  # a driver that flushes stdio as it loads (NVIDIA's does) in the probe's child: with
  # stdout a file, the report is written once
  env VK_DRIVER_FILES="$dir/broken-icd.json" VK_ICD_FILENAMES="$dir/broken-icd.json" \
    GPUSHM_TEST_ICD=flush "$ctl" doctor > "$dir/flushed" 2>&1 || fail "doctor failed: $(cat "$dir/flushed")"
  [ "$(grep -c '^verdict:' "$dir/flushed")" = 1 ] && [ "$(grep -c '^daemon/connect' "$dir/flushed")" = 1 ] ||
    fail "doctor's report, stdout to a file, is not written exactly once: $(cat "$dir/flushed")"
fi
stop_daemon

if [ ! -r "${GPUSHM_FAKE_CUDA_LIB:-}" ]; then
  echo "# built without CUDA: the device cases need the fake driver"
  echo "doctor tests passed (host only)"
  exit 0
fi
export GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB

# --- the fake GPU, cuda-fd by default, legacy IPC allowed: every backend works here
start_daemon --default-backend cuda-fd --allow-legacy-ipc yes
golden doctor-fake.txt 0
expect 0 "$ctl" doctor --backend cuda-ipc; contains "cuda-ipc/trial           ok"
expect 0 "$ctl" doctor --backend host; contains "host/trial               ok"
expect 0 "$ctl" list --all; [ "$(echo "$out" | wc -l)" = 1 ] || fail "doctor left a buffer: $out"

# --- this process sees no GPU the daemon uses (another fake UUID): both device backends fail
expect 1 env GPUSHM_FAKE_CUDA_DEVICES=0 "$ctl" doctor
contains "device/0                 FAIL   GPU-fafafafa-fafa-fafa-fafa-fafafafafa00 gpushm fake GPU 0 is not visible to this process"
contains "cuda-fd/devices          FAIL   none of gpushmd's 1 GPU(s) is visible to this process"
contains "verdict: cuda-fd (gpushmd's default) does NOT work for this process: see cuda-fd/devices"

# --- MPS: a control socket makes contexts run through it; a server of this uid is fine,
# one of another uid would make them wait (so the device trial is skipped).
mps_cases() {
  mkdir "$dir/mps"
  python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$dir/mps/control"
  expect 0 "$ctl" doctor
  contains "mps/control              ok     MPS control daemon at $dir/mps/control"
  contains "mps/server               n-a    MPS active; servers run one uid at a time"
  cp "$(command -v sleep)" "$dir/nvidia-cuda-mps-server"
  "$dir/nvidia-cuda-mps-server" 60 & others="$!"
  wait_for '[ "$(cat /proc/$others/comm 2>/dev/null)" = nvidia-cuda-mps ]'
  expect 0 "$ctl" doctor; contains "mps/server               ok     MPS server pid $others runs as uid $(id -u), this process's"
  kill "$others"; wait "$others" 2>/dev/null || true; others=""
  if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    chmod 755 "$dir/nvidia-cuda-mps-server"
    setpriv --reuid=65534 --regid=65534 --clear-groups "$dir/nvidia-cuda-mps-server" 60 & others="$!"
    wait_for '[ "$(cat /proc/$others/comm 2>/dev/null)" = nvidia-cuda-mps ]'
    expect 1 "$ctl" doctor
    contains "mps/server               FAIL   MPS server pid $others runs as uid 65534"
    contains "cuda-fd/trial            n-a    not tried: a CUDA context here would wait"
    contains "verdict: cuda-fd (gpushmd's default) does NOT work for this process: see mps/server"
    expect 0 "$ctl" doctor --backend host
    kill "$others"; wait "$others" 2>/dev/null || true; others=""
  fi
  rm -rf "$dir/mps"
}
# A real MPS server on this machine would be found too: then they cannot be staged.
real_mps=""
for f in /proc/[0-9]*/cmdline; do
  case "$(tr '\0' ' ' 2>/dev/null < "$f")" in *nvidia-cuda-mps-server*) real_mps=yes ;; esac
done
if [ -n "$real_mps" ]; then
  echo "# an MPS server runs here: the staged MPS cases are left out"
else
  mps_cases
fi
stop_daemon

# --- MIG instances: named as the driver names them, and said to share only within one
export GPUSHM_FAKE_CUDA_MIG=1
start_daemon --default-backend cuda-fd
expect 0 "$ctl" doctor
contains "device/0                 ok     MIG-fafafafa-fafa-fafa-fafa-fafafafafa00 gpushm fake GPU 0 MIG 1g.10gb: ordinal 0 here"
contains "a MIG instance: shared only within it"
stop_daemon
unset GPUSHM_FAKE_CUDA_MIG

# --- a GPU without virtual memory management: gpushmd cannot offer cuda-fd, its default
export GPUSHM_FAKE_CUDA_NO_VMM=1
start_daemon --default-backend cuda-fd --allow-legacy-ipc no
golden doctor-no-vmm.txt 1
expect 0 "$ctl" doctor --backend host
stop_daemon
echo "doctor tests passed"
