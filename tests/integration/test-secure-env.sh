#!/bin/sh
# SPDX-License-Identifier: MIT
# A setuid program that links libgpushm must not take its caller's word for which
# daemon to trust or which "libcuda" to load: the library reads $GPUSHM_DAEMON_UID,
# $GPUSHM_SOCKET, $GPUSHM_TIMEOUT_MS and $GPUSHM_CUDA_LIBRARY with secure_getenv().
# uid 65534 runs a gpushmd of its own and a setuid-root probe with the environment set
# to point at it: the probe must refuse that daemon (it runs as neither root nor the
# probe's euid), ignore the socket path, and load no library of the caller's.  The same
# probe without the setuid bit, run by root with the same environment, does all three:
# the variables work, so their being ignored is the setuid bit's doing.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || skip "needs root: a setuid-root program, run by uid 65534"
command -v setpriv >/dev/null || skip "no setpriv (util-linux)"
getent group nogroup >/dev/null || skip "no group nogroup"

dir=$(mktemp -d /tmp/gpushm-secure-env.XXXXXX)
chmod 755 "$dir"
mkdir -m 755 "$dir/bin"
mkdir -m 700 "$dir/run"
chown 65534:65534 "$dir/run"
daemon=""
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

probe=$b/tests/.libs/secure-env-probe
[ -f "$probe" ] && head -c 4 "$probe" | grep -q ELF || probe=$b/tests/secure-env-probe
cp "$probe" "$dir/bin/probe"
cp "$probe" "$dir/bin/probe-setuid"
chmod 4755 "$dir/bin/probe-setuid"
# Only system directories and the probe's own absolute RUNPATH serve a setuid program:
# where libgpushm's dependencies live in a private prefix, it cannot start at all.
if ! setpriv --reuid=65534 --regid=65534 --clear-groups "$dir/bin/probe-setuid" "$dir/none" \
     > "$dir/start.log" 2>&1; then
  skip "the setuid probe cannot load its libraries here: $(head -c 300 "$dir/start.log")"
fi
grep -q '^connect ' "$dir/start.log" || skip "a setuid program does not run here (nosuid /tmp?)"

# The daemon uid 65534 runs: a socket only it could have made.
sock=$dir/run/gpushmd.sock
setpriv --reuid=65534 --regid=65534 --clear-groups "$b/daemon/gpushmd" --socket "$sock" \
  --pool-bytes 0 > "$dir/daemon.log" 2>&1 &
daemon=$!
i=0
until [ -S "$sock" ]; do
  i=$((i + 1)); [ $i -lt 500 ] || fail "gpushmd did not start: $(cat "$dir/daemon.log")"
  sleep 0.02
done
chmod 755 "$dir/run"

env_for_attack() {
  env GPUSHM_DAEMON_UID=65534 GPUSHM_SOCKET="$sock" \
    GPUSHM_CUDA_LIBRARY="${GPUSHM_FAKE_CUDA_LIB:-$dir/no-such-libcuda.so}" "$@"
}

# Not setuid, run by root: every variable is taken.
env_for_attack "$dir/bin/probe" "$sock" > "$dir/plain.log" 2>&1 || fail "probe: $(cat "$dir/plain.log")"
cat "$dir/plain.log"
grep -q '^connect 0 ' "$dir/plain.log" || fail "GPUSHM_DAEMON_UID=65534 was not trusted by a plain program"
grep -q '^default-socket 0 ' "$dir/plain.log" || fail "GPUSHM_SOCKET was not used by a plain program"
if [ -n "${GPUSHM_FAKE_CUDA_LIB:-}" ]; then
  grep -q '^device0 gpushm fake GPU' "$dir/plain.log" || fail "GPUSHM_CUDA_LIBRARY was not loaded by a plain program"
fi

# Setuid root, run by uid 65534 with the same environment: none of it is taken.
env_for_attack setpriv --reuid=65534 --regid=65534 --clear-groups "$dir/bin/probe-setuid" "$sock" \
  > "$dir/setuid.log" 2>&1 || fail "setuid probe: $(cat "$dir/setuid.log")"
cat "$dir/setuid.log"
grep -q "^connect -$(grep -o 'XX(PERM, [0-9]*' "${GPUSHM_TEST_SRCDIR:?}/include/gpushm.h" | grep -o '[0-9]*$') " "$dir/setuid.log" ||
  fail "a setuid program trusted the caller's GPUSHM_DAEMON_UID"
grep -q '^connect .*gpushmd' "$dir/setuid.log" || fail "the refusal does not say why"
# (the default socket may have a daemon of its own on this machine: then it answers)
if grep -q '^default-socket 0 ' "$dir/setuid.log" && ! [ -S /run/gpushm/gpushmd.sock ]; then
  fail "a setuid program connected through the caller's GPUSHM_SOCKET"
fi
if grep -q '^device0 gpushm fake GPU' "$dir/setuid.log"; then
  fail "a setuid program loaded the caller's GPUSHM_CUDA_LIBRARY"
fi
echo "setuid: GPUSHM_DAEMON_UID, GPUSHM_SOCKET and GPUSHM_CUDA_LIBRARY ignored"
