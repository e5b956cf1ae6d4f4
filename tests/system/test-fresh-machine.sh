#!/bin/bash
# SPDX-License-Identifier: MIT
# The README's two quick-start commands on a freshly bootstrapped Debian 12, run as a new
# user runs them: a minbase root with git and nothing else (no CUDA toolkit, no build
# tools), the tree cloned into root's home (mode 0700, as Debian makes it), the default
# open-file limit (1024 soft), then `scripts/demo` and `scripts/test` exactly as the
# README writes them, each of which must pass.  Prints how long each took, dependency
# installation included.  Then both again in the same root under `systemd-nspawn
# --pipe`, where NOTIFY_SOCKET is set as for any service that runs them (its daemons
# must not take it for theirs): the demo, and the tests that variable would reach.
#
# Usage: tests/system/test-fresh-machine.sh [CHECKOUT]  (default: this script's tree)
# What is cloned is CHECKOUT's committed HEAD, as a user's `git clone` gets it.
# Needs root, and a Debian mirror or the cached root file system (tests/system/rootfs.sh).
#   GPUSHM_TEST_APT_ARCHIVES  a directory of .debs apt may take instead of downloading
#                             them again (default /var/cache/apt/archives of this host;
#                             "none": download everything)
# Exit status: 0 both commands passed, 1 one failed, 77 this machine cannot run the test
# (one line says why).
set -eu
set -o pipefail

say() { printf '%s\n' "$*"; }
skip() { say "SKIP: $*"; exit 77; }
die() { say "FAIL: $*"; exit 1; }

src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, namespaces, mounts)"
for tool in git unshare pivot_root mountpoint flock sha256sum; do
  command -v "$tool" >/dev/null || skip "$tool missing"
done
git -C "$src" rev-parse --verify -q HEAD >/dev/null || skip "$src is not a git checkout"
suite=$(. /etc/os-release 2>/dev/null && [ "${ID:-}" = debian ] && echo "${VERSION_CODENAME:-}") || true
[ -n "$suite" ] || skip "host is not Debian (it bootstraps its own release)"
[ "$suite" = bookworm ] || say "# host is Debian $suite; the fresh machine is bookworm all the same"

. "$src/tests/system/rootfs.sh"
# What a "minbase + git" install has: no compiler, no toolkit, no procps.
rootfs_bootstrap bookworm "git,ca-certificates"

run=$(mktemp -d /var/tmp/gpushm-fresh.XXXXXX)
root=$run/root
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  if mountpoint -q "$root"; then
    umount "$root" 2>/dev/null || { sleep 1; umount "$root" 2>/dev/null; } || umount -l "$root" || true
  fi
  mountpoint -q "$root" || rm -rf "$run"
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
rootfs_layer "$run"

home=$root/root
[ "$(stat -c %a "$home")" = 700 ] || die "the bootstrapped root's home is $(stat -c %a "$home"), not 0700"
git clone -q --no-hardlinks "$src" "$home/gpushm"
cp /etc/resolv.conf "$root/etc/resolv.conf"

archives=${GPUSHM_TEST_APT_ARCHIVES:-/var/cache/apt/archives}
[ "$archives" = none ] || [ -d "$archives" ] || archives=none

# Debian's default for a login: soft 1024, hard 524288 (systemd's DefaultLimitNOFILE),
# or this machine's hard limit where that is lower.
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || [ "$hard" -ge 524288 ] && hard=524288

# cmd NAME COMMAND: runs COMMAND in the tree, in the fresh root, in mount and PID
# namespaces of its own (its /proc, /sys, /dev, and apt's download cache if shared).
# The fresh root becomes the namespace's root (pivot_root, not chroot): tests that
# enter a mount namespace of theirs (nsenter --mount) must land in it, not out here.
cmd() {
  local name=$1 command=$2 t0 rc=0
  t0=$(date +%s)
  unshare --mount --pid --fork --propagation private bash -c '
    set -e
    root=$1 archives=$2 soft_hard=$3 command=$4
    mount -t proc proc "$root/proc"
    mount -t sysfs sysfs "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs tmpfs "$root/tmp"
    [ "$archives" = none ] || mount --bind "$archives" "$root/var/cache/apt/archives"
    mountpoint -q "$root" || mount --bind "$root" "$root"
    cd "$root"
    mkdir -p .pivot-old
    pivot_root . .pivot-old
    umount -l /.pivot-old
    rmdir /.pivot-old
    cd /
    exec /usr/bin/prlimit --nofile="$soft_hard" \
      /usr/bin/env -i HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 TERM=dumb \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      /bin/sh -c "cd /root/gpushm && $command"
  ' fresh "$root" "$archives" "1024:$hard" "$command" > "$run/$name.log" 2>&1 || rc=$?
  elapsed=$(( $(date +%s) - t0 ))
  if [ "$rc" -ne 0 ]; then
    say "# --- the last lines of $name's output"
    tail -n 60 "$run/$name.log" | sed 's/^/# /'
    die "'$command' failed on the fresh machine (exit $rc, after ${elapsed} s)"
  fi
  say "# $command: passed in ${elapsed} s: $(tail -n 1 "$run/$name.log")"
  grep '^skipped ' "$run/$name.log" | sed 's/^/#   /' || true
}

cmd demo scripts/demo
cmd test scripts/test
say "fresh Debian 12 (minbase + git, tree in a 0700 home, 1024 open files): both README commands passed"

# in_nspawn NAME COMMAND: COMMAND in the tree, in the same root, as the payload of
# `systemd-nspawn --pipe` (what a service or CI job that runs the suite in a container
# does): it must find NOTIFY_SOCKET set, or this case proves nothing.  (The Python suite
# runs once there, with the C speedups: the run above took both paths.)
in_nspawn() {
  local name=$1 command=$2 t0 rc=0 bind=
  t0=$(date +%s)
  [ "$archives" = none ] || bind="--bind=$archives:/var/cache/apt/archives"
  systemd-nspawn --quiet --pipe --register=no --keep-unit -D "$root" $bind \
    --rlimit=RLIMIT_NOFILE=1024:"$hard" --setenv=HOME=/root --setenv=LANG=C.UTF-8 \
    --setenv=TERM=dumb --setenv=GPUSHM_TEST_PYTHON_CTYPES=0 /bin/sh -c \
    "[ -n \"\${NOTIFY_SOCKET:-}\" ] || { echo 'no NOTIFY_SOCKET in the container'; exit 3; }; \
     cd /root/gpushm && $command" > "$run/nspawn-$name.log" 2>&1 || rc=$?
  elapsed=$(( $(date +%s) - t0 ))
  if [ "$rc" -ne 0 ]; then
    say "# --- the last lines of $name's output under systemd-nspawn --pipe"
    tail -n 60 "$run/nspawn-$name.log" | sed 's/^/# /'
    die "'$command' failed under systemd-nspawn --pipe (exit $rc, after ${elapsed} s)"
  fi
  # (nspawn itself may end with a complaint about its propagation directory, which a
  # host without systemd as PID 1 never cleans up: not the command's last word)
  say "# $command under systemd-nspawn --pipe: passed in ${elapsed} s:" \
    "$(grep -v '^Attempted to remove disk file system' "$run/nspawn-$name.log" | grep . | tail -n 1)"
  grep '^skipped ' "$run/nspawn-$name.log" | sed 's/^/#   /' || true
}
command -v systemd-nspawn >/dev/null || skip "systemd-nspawn missing (apt-get install systemd-container)"
if ! out=$(systemd-nspawn --quiet --pipe --register=no --keep-unit -D "$root" /bin/true 2>&1); then
  skip "systemd-nspawn cannot run a container here: $out"
fi
# The test command there runs the tests a service manager's variables would reach if
# tests/run-test let them (its own check, and the tests whose daemons notify, keep
# buffers across restarts or carve persistent ones); the whole suite ran above, and
# again there it took 72 s of CI's 20 minutes.
nspawn_tests=$(echo tests/check-run-test-env.sh tests/integration/test-daemon-lifecycle \
  tests/integration/test-fdstore tests/integration/test-systemd.sh \
  tests/integration/test-segments tests/integration/test-lifetime \
  tests/integration/test-demo.sh)
in_nspawn demo scripts/demo
in_nspawn test "CHECK_TESTS='$nspawn_tests' scripts/test"
# each of them ran: passed, or skipped saying why
ran=$(sed -n 's/^\([0-9]*\) passed, 0 failed, \([0-9]*\) skipped$/\1 \2/p' "$run/nspawn-test.log")
set -- $nspawn_tests
[ -n "$ran" ] && [ $(( ${ran% *} + ${ran#* } )) -eq $# ] && [ "${ran% *}" -gt 0 ] ||
  die "under systemd-nspawn --pipe, scripts/test ran ${ran:-no} tests of the $# asked for"
say "and under systemd-nspawn --pipe (NOTIFY_SOCKET set): the demo, and the tests its" \
  "variables would reach, passed"
