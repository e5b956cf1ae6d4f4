#!/bin/sh
# SPDX-License-Identifier: MIT
# gpushm between containers, without a container runtime: gpushmd, the producer and the
# consumer each run in PID + mount + IPC namespaces of their own (siblings, none of them
# the host's namespace for these processes), the clients with a private /dev/shm, the
# consumer as uid 65534.  They share nothing but the socket directory -- what a
# container with gpushmd's socket bind-mounted and no --pid=host / --ipc=host has.
#
#   test-namespaces.sh [BACKEND...]     (or GPUSHM_NS_BACKENDS="BACKEND...")
#     host           host memory: the consumer verifies the producer's data, the
#                    producer the consumer's answer
#     fake-cuda-fd   cuda-fd on the fake driver (CI): the same
#     fake-cuda-ipc  cuda-ipc on the fake driver, which fails between sibling PID
#                    namespaces as the real one does
#     cuda-fd        cuda-fd on the real GPU: the same as host
#     cuda-ipc       cuda-ipc on the real GPU: the producer shares gpushmd's namespace,
#                    the consumer's open must fail with the library's explanation
# Default: host, and the fake-driver cases where the fake driver is built.  In each
# case gpushmctl doctor, run in the consumer's namespaces as uid 65534, must report the
# namespace difference.  Exit 77 only where this machine cannot make the namespaces.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
daemon_bin=${GPUSHMD:-$b/daemon/gpushmd}

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root: PID and mount namespaces, and switching to uid 65534"
for tool in unshare nsenter setpriv; do
  command -v "$tool" >/dev/null || skip "no $tool (util-linux) to make or enter namespaces"
done
if ! why=$(unshare -p -f -m -i --mount-proc sh -c 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm' 2>&1); then
  skip "this machine cannot create PID + mount + IPC namespaces: $why"
fi

if [ "$#" -gt 0 ]; then
  backends="$*"
elif [ -n "${GPUSHM_NS_BACKENDS:-}" ]; then
  backends=$GPUSHM_NS_BACKENDS
else
  backends=host
  [ -r "${GPUSHM_FAKE_CUDA_LIB:-}" ] && backends="$backends fake-cuda-fd fake-cuda-ipc"
fi

dir=$(mktemp -d /tmp/gpushm-ns.XXXXXX)
chmod 755 "$dir"
mkdir -m 755 "$dir/run" "$dir/bin"
sock=$dir/run/gpushmd.sock
daemon=""
producer=""
cleanup() {
  for p in $producer $daemon; do stop_tree "$p"; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# The pids whose parent is $1 (no procps needed).
children() {
  for stat in /proc/[0-9]*/stat; do
    read -r pid comm state ppid rest 2>/dev/null < "$stat" || continue
    [ "$ppid" = "$1" ] && echo "$pid"
  done
  return 0
}
# Ends $1 and the process it forked (unshare -f, nsenter --pid).
stop_tree() {
  for p in $(children "$1") "$1"; do kill "$p" 2>/dev/null || true; done
  wait "$1" 2>/dev/null || true
}

# uid 65534 must be able to run the clients wherever the build lives: copies of them and
# of every library they need from outside the system directories (an offline GPU host
# has protobuf-c in a private prefix).
for prog in examples/gpushm-producer examples/gpushm-consumer ctl/gpushmctl; do
  name=$(basename "$prog")
  real=$b/$(dirname "$prog")/.libs/$name
  [ -f "$real" ] && head -c 4 "$real" | grep -q ELF || real=$b/$prog
  cp "$real" "$dir/bin/$name"
done
cp -P "$b"/client/.libs/libgpushm.so* "$dir/bin/"
[ -r "${GPUSHM_FAKE_CUDA_LIB:-}" ] && cp "$GPUSHM_FAKE_CUDA_LIB" "$dir/bin/libcuda-fake.so"
for prog in "$dir"/bin/gpushm*; do
  LD_LIBRARY_PATH="$dir/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$prog" |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | grep -Ev "^(/(usr/)?lib(64)?/|$dir/)" || true
done | sort -u | while read -r lib; do cp -L "$lib" "$dir/bin/"; done
chmod 755 "$dir"/bin/gpushm*
chmod 644 "$dir"/bin/lib*.so*

# in_container [--nobody] COMMAND...: COMMAND in fresh PID + mount + IPC namespaces with
# a private /dev/shm, as root or as uid 65534, seeing gpushmd only through its socket.
in_container() {
  user=""
  if [ "$1" = --nobody ]; then user="setpriv --reuid=65534 --regid=65534 --clear-groups"; shift; fi
  unshare -p -f -m -i --mount-proc --kill-child sh -c 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"' \
    sh $user env GPUSHM_SOCKET="$sock" LD_LIBRARY_PATH="$dir/bin" ${cuda_lib:+GPUSHM_CUDA_LIBRARY=$cuda_lib} \
    GPUSHM_TIMEOUT_MS=30000 "$@"
}
# The daemon's own namespaces (--kill-child: it does not outlive unshare).
start_daemon() {
  rm -f "$sock"
  env ${cuda_lib:+GPUSHM_CUDA_LIBRARY=$cuda_lib} unshare -p -f -m -i --mount-proc --kill-child=TERM \
    "$daemon_bin" --socket "$sock" --socket-group none --socket-mode 0666 --log-level warn "$@" &
  daemon=$!
  i=0
  until [ -S "$sock" ]; do
    i=$((i + 1)); [ $i -lt 500 ] || fail "gpushmd did not start"
    sleep 0.02
  done
  # its pid here (the child unshare forked), for nsenter
  dpid=$(children "$daemon")
  [ -n "$dpid" ] || fail "no gpushmd under unshare $daemon"
}
# gpushmd itself gets SIGTERM and unshare exits after it: a daemon still stopping must
# not remove the next one's socket.
stop_daemon() { kill "$dpid" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; daemon=""; }

# doctor as uid 65534 in namespaces of its own: it must see that gpushmd is elsewhere.
check_doctor() {
  code=$1 backend=$2
  set +e
  out=$(in_container --nobody "$dir/bin/gpushmctl" doctor --backend "$backend" 2>&1)
  rc=$?
  set -e
  echo "$out" | sed 's/^/  doctor: /'
  [ "$rc" = "$code" ] || fail "doctor --backend $backend exited $rc, expected $code"
  echo "$out" | grep -Eq '^process/pid-namespace +ok +pid:\[[0-9]+\] here, pid:\[[0-9]+\] for gpushmd' ||
    fail "doctor did not report the PID namespace difference"
  echo "$out" | grep -q "its pid reads 0 here" || fail "doctor did not see gpushmd's pid as hidden"
  echo "$out" | grep -Eq '^cuda-ipc/pid-namespace +FAIL +another PID namespace than gpushmd' ||
    fail "doctor did not say cuda-ipc fails between these namespaces"
}

run_case() {
  case=$1
  cuda_lib=""
  case $case in
    host) backend=host ;;
    fake-cuda-fd|fake-cuda-ipc)
      [ -r "$dir/bin/libcuda-fake.so" ] || fail "$case needs the fake driver (GPUSHM_FAKE_CUDA_LIB)"
      cuda_lib=$dir/bin/libcuda-fake.so
      backend=${case#fake-} ;;
    cuda-fd|cuda-ipc) backend=$case ;;
    *) fail "unknown case '$case'" ;;
  esac
  echo "# $case: gpushmd, producer and consumer (uid 65534) in sibling namespaces"
  name="ns-$case"
  if [ "$backend" = cuda-ipc ]; then
    start_daemon --allow-legacy-ipc yes
    # Legacy handles open only within gpushmd's namespace (or the host's): the producer
    # shares gpushmd's, as a sidecar would.  nsenter forks into it.
    nsenter --target "$dpid" --pid --mount env GPUSHM_SOCKET="$sock" LD_LIBRARY_PATH="$dir/bin" \
      ${cuda_lib:+GPUSHM_CUDA_LIBRARY=$cuda_lib} "$dir/bin/gpushm-producer" "$name" 8 cuda-ipc 0666 \
      > "$dir/producer.out" 2>&1 &
    producer=$!
    set +e
    out=$(in_container --nobody "$dir/bin/gpushm-consumer" "$name" 2>&1)
    rc=$?
    set -e
    echo "$out" | sed 's/^/  consumer: /'
    stop_tree "$producer"; producer=""
    sed 's/^/  producer: /' "$dir/producer.out"
    grep -q "of GPU memory written" "$dir/producer.out" ||
      fail "the producer in gpushmd's namespace did not write its cuda-ipc buffer"
    # a clean failure, not a crash and not data: exit 1 with the library's explanation
    [ "$rc" = 1 ] || fail "consumer exited $rc, expected 1 (an error, not a crash, not success)"
    case "$out" in
      *"consumer: open: operation not supported: cuIpcOpenMemHandle: "*"sibling PID namespaces"*"use the cuda-fd backend"*) ;;
      *) fail "the consumer's error does not explain the namespaces: $out" ;;
    esac
    check_doctor 1 cuda-ipc
    echo "$out" | grep -Eq '^cuda-ipc/trial +FAIL +create .*sibling PID namespaces' ||
      fail "doctor's cuda-ipc trial did not fail with the explanation"
  else
    start_daemon --default-backend "$backend"
    in_container "$dir/bin/gpushm-producer" "$name" 8 "$backend" 0666 > "$dir/producer.out" 2>&1 &
    producer=$!
    set +e
    out=$(in_container --nobody "$dir/bin/gpushm-consumer" "$name" 2>&1)
    rc=$?
    wait "$producer"
    prc=$?
    set -e
    producer=""
    echo "$out" | sed 's/^/  consumer: /'
    sed 's/^/  producer: /' "$dir/producer.out"
    [ "$rc" = 0 ] || fail "consumer exited $rc"
    [ "$prc" = 0 ] || fail "producer exited $prc"
    where="host memory"
    [ "$backend" = host ] || where="GPU memory"
    echo "$out" | grep -q "words of $where verified" || fail "the consumer did not verify $where"
    grep -q "consumer's answer verified" "$dir/producer.out" || fail "the producer did not verify the answer"
    check_doctor 0 "$backend"
    echo "$out" | grep -Eq "^$backend/trial +ok" || fail "doctor's $backend trial did not pass"
  fi
  stop_daemon
}

for c in $backends; do run_case "$c"; done
echo "namespace tests passed: $backends"
