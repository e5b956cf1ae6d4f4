#!/bin/sh
# SPDX-License-Identifier: MIT
# ctl/gpushm-textfile (what gpushm-textfile.service runs) against the real gpushmctl and
# gpushmd: the metrics file appears, valid, readable by node_exporter's user, with no
# temporary left or ever named *.prom; a failure (no daemon, a missing directory) leaves
# the previous file as it was; a directory every user may write is refused; run as root
# into a directory another user owns, a link planted at the file's name leads nowhere
# (issue 29, item 4).  What a half-written or swapped temporary does: tests/unit/test-textfile.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/../.." && pwd)
script=$b/ctl/gpushm-textfile
dir=$(mktemp -d /tmp/gpushm-textfile.XXXXXX)
chmod 0755 "$dir"
out=$dir/out
mkdir "$out"
daemon=""
cleanup() {
  [ -z "$daemon" ] || { kill -9 "$daemon" 2>/dev/null || true; wait 2>/dev/null || true; }
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
[ -x "$script" ] || fail "no $script"
export GPUSHM_TEXTFILE_DIR="$out"
only_prom() { # the directory holds exactly the metrics file, nothing else
  [ "$(ls -A "$out")" = gpushm.prom ] || fail "$1: the directory holds: $(ls -A "$out")"
}
rc_of() { set +e; "$@" > "$dir/msg" 2>&1; rc=$?; set -e; }

# usage
rc_of "$script" --help; [ "$rc" = 0 ] && grep -q "^Usage: gpushm-textfile" "$dir/msg" || fail "--help"
rc_of "$script" extra; [ "$rc" = 2 ] || fail "an argument was accepted"
rc_of env GPUSHM_TEXTFILE_NAME=gpushm.txt "$script"; [ "$rc" = 2 ] || fail "a name node_exporter would not read was accepted"
rc_of env GPUSHM_TEXTFILE_NAME=../x.prom "$script"; [ "$rc" = 2 ] || fail "a name with a slash was accepted"

export GPUSHMCTL="$b/ctl/gpushmctl" GPUSHM_SOCKET="$dir/gpushmd.sock"
"$GPUSHMD" --socket "$GPUSHM_SOCKET" --socket-group none --socket-mode 0666 --log-level warn & daemon=$!
i=0; until "$GPUSHMCTL" ping >/dev/null 2>&1; do i=$((i + 1)); [ $i -lt 500 ] || fail "no daemon"; sleep 0.02; done

"$script" || fail "against gpushmd"
only_prom "against gpushmd"
python3 "$src/tests/integration/check-metrics.py" "$out/gpushm.prom" || fail "the written file"
grep -q '^gpushm_build_info{' "$out/gpushm.prom" || fail "no build_info in $(cat "$out/gpushm.prom")"
[ "$(stat -c %a "$out/gpushm.prom")" = 644 ] || fail "mode $(stat -c %a "$out/gpushm.prom")"

# a directory that is not there: fails, writes nothing anywhere
rc_of env GPUSHM_TEXTFILE_DIR="$dir/missing" "$script"
[ "$rc" = 1 ] && [ ! -e "$dir/missing" ] || fail "a missing directory: exit $rc"
# a directory every user may write: refused, saying why
mkdir "$dir/open"; chmod 1777 "$dir/open"
rc_of env GPUSHM_TEXTFILE_DIR="$dir/open" "$script"
[ "$rc" = 1 ] && grep -q "writable by every user" "$dir/msg" || fail "a world-writable directory: exit $rc: $(cat "$dir/msg")"
[ -z "$(ls -A "$dir/open")" ] || fail "something was written into it: $(ls -A "$dir/open")"

# as root, into a directory another user owns, with a link planted at the file's name:
# the link is replaced, the file it pointed at (root's, 0600) is untouched
if [ "$(id -u)" = 0 ]; then
  mkdir "$dir/owned"; chown 65534:65534 "$dir/owned"
  printf "root's own" > "$dir/secret"; chmod 0600 "$dir/secret"
  setpriv --reuid 65534 --regid 65534 --clear-groups ln -s "$dir/secret" "$dir/owned/gpushm.prom"
  GPUSHM_TEXTFILE_DIR="$dir/owned" "$script" || fail "into a directory uid 65534 owns"
  [ ! -L "$dir/owned/gpushm.prom" ] && grep -q '^gpushm_build_info{' "$dir/owned/gpushm.prom" ||
    fail "the planted link was not replaced by the metrics"
  [ "$(cat "$dir/secret")" = "root's own" ] && [ "$(stat -c %a "$dir/secret")" = 600 ] ||
    fail "the file the link pointed at changed: $(stat -c %a "$dir/secret") $(cat "$dir/secret")"
fi

kill "$daemon"; wait "$daemon" || true; daemon=""
# gpushmd gone: the script fails and the last good file stays
good=$(cat "$out/gpushm.prom")
rc_of "$script"
[ "$rc" != 0 ] || fail "no daemon, yet the script succeeded"
only_prom "without gpushmd"
[ "$(cat "$out/gpushm.prom")" = "$good" ] || fail "without gpushmd the file changed"
echo "textfile tests passed"
