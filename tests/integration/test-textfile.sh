#!/bin/sh
# ctl/gpushm-textfile (what gpushm-textfile.service runs): the metrics file appears
# whole or not at all, a failing gpushmctl leaves the previous file as it was, no
# temporary file is left or ever named *.prom (node_exporter reads only those), the
# file is readable by node_exporter's user; and with the real gpushmctl and gpushmd,
# what it writes is a valid exposition.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/../.." && pwd)
script=$b/ctl/gpushm-textfile
dir=$(mktemp -d /tmp/gpushm-textfile.XXXXXX)
out=$dir/out
mkdir "$out"
daemon=""
pid=""
cleanup() {
  : > "$dir/go" # a run stopped by a failed check finishes
  for p in $pid $daemon; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
[ -x "$script" ] || fail "no $script"
export GPUSHM_TEXTFILE_DIR="$out"
only_prom() { # the directory holds exactly the metrics file, nothing else
  [ "$(ls -A "$out")" = gpushm.prom ] || fail "$1: the directory holds: $(ls -A "$out")"
}

# A fake gpushmctl: writes half its output, waits for a go-ahead, writes the rest, and
# exits with the status it is given.
cat > "$dir/fakectl" <<'EOS'
#!/bin/sh
[ "$1 $2" = "stats --prometheus" ] || exit 2
echo "gpushm_fake{run=\"$FAKE_RUN\"} 1"
: > "$FAKE_DIR/started"
while [ ! -e "$FAKE_DIR/go" ]; do sleep 0.02; done
echo "gpushm_fake_end{run=\"$FAKE_RUN\"} 1"
exit "$FAKE_STATUS"
EOS
chmod +x "$dir/fakectl"
export GPUSHMCTL="$dir/fakectl" FAKE_DIR="$dir"
run() { # run NAME STATUS: one run of the script, with a look at the directory mid-way
  rm -f "$dir/started" "$dir/go"
  FAKE_RUN=$1 FAKE_STATUS=$2 "$script" 2>/dev/null & pid=$!
  i=0; until [ -e "$dir/started" ]; do i=$((i + 1)); [ $i -lt 500 ] || fail "fake never ran"; sleep 0.02; done
  # half written: the file node_exporter would read is the previous one, whole
  if [ -n "$prev" ]; then
    [ "$(cat "$out/gpushm.prom")" = "$prev" ] || fail "$1: a partial file is visible"
  else
    [ ! -e "$out/gpushm.prom" ] || fail "$1: a partial file is visible"
  fi
  for f in "$out"/*.prom; do
    [ ! -e "$f" ] || [ "$f" = "$out/gpushm.prom" ] || fail "$1: temporary file named *.prom: $f"
  done
  : > "$dir/go"
  set +e; wait "$pid"; rc=$?; set -e
  pid=""
}

prev=""
run first 0
[ "$rc" = 0 ] || fail "first run exited $rc"
only_prom "first"
prev=$(printf 'gpushm_fake{run="first"} 1\ngpushm_fake_end{run="first"} 1')
[ "$(cat "$out/gpushm.prom")" = "$prev" ] || fail "first run wrote: $(cat "$out/gpushm.prom")"
[ "$(stat -c %a "$out/gpushm.prom")" = 644 ] || fail "mode $(stat -c %a "$out/gpushm.prom")"

run failing 1
[ "$rc" != 0 ] || fail "a failing gpushmctl did not fail the script"
only_prom "after a failure"
[ "$(cat "$out/gpushm.prom")" = "$prev" ] || fail "a failure changed the file: $(cat "$out/gpushm.prom")"

run second 0
[ "$rc" = 0 ] || fail "second run exited $rc"
only_prom "second"
grep -qx 'gpushm_fake_end{run="second"} 1' "$out/gpushm.prom" || fail "second run's file"

# a directory that is not there: fails, writes nothing anywhere
set +e; GPUSHM_TEXTFILE_DIR="$dir/missing" FAKE_RUN=x FAKE_STATUS=0 "$script" 2>/dev/null; rc=$?; set -e
[ "$rc" != 0 ] || fail "a missing directory did not fail the script"
set +e; GPUSHM_TEXTFILE_NAME=gpushm.txt "$script" 2>/dev/null; rc=$?; set -e
[ "$rc" = 2 ] || fail "a name node_exporter would not read was accepted"

# the real thing
unset GPUSHMCTL
export GPUSHMCTL="$b/ctl/gpushmctl" GPUSHM_SOCKET="$dir/gpushmd.sock"
"$GPUSHMD" --socket "$GPUSHM_SOCKET" --log-level warn & daemon=$!
i=0; until "$GPUSHMCTL" ping >/dev/null 2>&1; do i=$((i + 1)); [ $i -lt 500 ] || fail "no daemon"; sleep 0.02; done
"$script" || fail "against gpushmd"
only_prom "against gpushmd"
python3 "$src/tests/integration/check-metrics.py" "$out/gpushm.prom" || fail "the written file"
grep -q '^gpushm_build_info{' "$out/gpushm.prom" || fail "no build_info in $(cat "$out/gpushm.prom")"
kill "$daemon"; wait "$daemon" || true; daemon=""
# gpushmd gone: the script fails and the last good file stays
good=$(cat "$out/gpushm.prom")
set +e; "$script" 2>/dev/null; rc=$?; set -e
[ "$rc" != 0 ] || fail "no daemon, yet the script succeeded"
only_prom "without gpushmd"
[ "$(cat "$out/gpushm.prom")" = "$good" ] || fail "without gpushmd the file changed"
echo "textfile tests passed"
