#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/run-test hands a test a clean environment: a service manager's variables and the
# runner's own GPUSHM_* go (they made the suite's daemons notify the runner's manager
# and stop carving persistent buffers inside `systemd-nspawn --pipe`); the suite's
# variables and its GPUSHM_TEST_* knobs stay.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(env NOTIFY_SOCKET=/run/host/notify LISTEN_PID=1 LISTEN_FDS=1 LISTEN_FDNAMES=x \
  WATCHDOG_USEC=1000 WATCHDOG_PID=1 SYSTEMD_EXEC_PID=1 GPUSHM_SOCKET=/elsewhere \
  GPUSHM_CUDA_FAULTS=cuInit=1 GPUSHM_TEST_KNOB=kept GPUSHM_LIBDIR=/lib-dir \
  GPUSHM_FAKE_CUDA_LIB=/fake.so GPUSHM_HEADERS=/h GPUSHMD=/gpushmd \
  sh "$src/tests/run-test" /usr/bin/env)
for gone in NOTIFY_SOCKET LISTEN_PID LISTEN_FDS LISTEN_FDNAMES WATCHDOG_USEC WATCHDOG_PID \
  SYSTEMD_EXEC_PID GPUSHM_SOCKET GPUSHM_CUDA_FAULTS; do
  if echo "$out" | grep -q "^$gone="; then
    echo "FAIL: run-test passed the runner's $gone on to the test"; exit 1
  fi
done
for kept in GPUSHM_TEST_KNOB=kept GPUSHM_LIBDIR=/lib-dir GPUSHM_FAKE_CUDA_LIB=/fake.so \
  GPUSHM_HEADERS=/h GPUSHMD=/gpushmd; do
  echo "$out" | grep -qx "$kept" || { echo "FAIL: run-test dropped $kept"; exit 1; }
done
# The GPU lock: a test that judges by the device's free memory starts only once the
# tests running beside it are done, and not later: a process a test leaves behind (a
# daemon of a failed test) does not hold the lock.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/tests/gpu"
printf '#!/bin/sh\necho exclusive >> "%s/order"\n' "$dir" > "$dir/tests/gpu/test-cuda-ipc"
chmod +x "$dir/tests/gpu/test-cuda-ipc"
env -u GPUSHM_TEST_GPU_LOCKED GPUSHM_TEST_BUILDDIR="$dir" sh "$src/tests/run-test" /bin/sh -c \
  "touch '$dir/started'; (sleep 3; echo left-behind >> '$dir/order') > /dev/null 2>&1 &
   sleep 1; echo shared >> '$dir/order'" &
while [ ! -f "$dir/started" ]; do sleep 0.05; done
env -u GPUSHM_TEST_GPU_LOCKED GPUSHM_TEST_BUILDDIR="$dir" sh "$src/tests/run-test" "$dir/tests/gpu/test-cuda-ipc"
for i in $(seq 1 100); do grep -q left-behind "$dir/order" && break; sleep 0.05; done
wait
[ "$(cat "$dir/order")" = "$(printf 'shared\nexclusive\nleft-behind')" ] ||
  { echo "FAIL: a free-memory GPU test ran beside another test, or waited for what one left" \
      "behind: $(cat "$dir/order" | paste -sd' ')"; exit 1; }
echo "run-test: a service manager's variables and the runner's GPUSHM_* dropped, the suite's" \
  "kept; the free-memory GPU tests run alone"
