#!/bin/sh
# SPDX-License-Identifier: MIT
# gpushmctl against a real gpushmd: golden JSON output (parsed, normalised, compared),
# table and show output, stats in all three forms, a killed holder disappearing,
# permission cases as another uid with and without the admin group, every command's
# error path and exit codes, messages that say things once, dump against xxd.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/../.." && pwd)
ctl=$b/ctl/gpushmctl
hold=$b/tests/hold-buffers
load=$b/tests/load-buffer
# PACKAGE_VERSION, from the three lines configure reads it from
version=$(sed -n 's/^#define GPUSHM_VERSION_[A-Z]* \([0-9]*\)$/\1/p' "$src/include/gpushm.h" | paste -sd. -)
dir=$(mktemp -d /tmp/gpushm-ctl.XXXXXX)
chmod 755 "$dir"
export GPUSHM_SOCKET="$dir/gpushmd.sock"
daemon=""
holders=""
cleanup() {
  for p in $holders $daemon; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
# expect CODE COMMAND...: runs it, keeps its output in $out, checks the exit status
expect() {
  code=$1; shift
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  [ "$rc" = "$code" ] || fail "'$*' exited $rc, expected $code: $out"
}
contains() { case "$out" in *"$1"*) ;; *) fail "output lacks '$1': $out" ;; esac; }
wait_for() { i=0; until eval "$1"; do i=$((i + 1)); [ $i -lt 500 ] || fail "timed out: $1"; sleep 0.02; done; }
start_daemon() {
  "$GPUSHMD" --socket "$GPUSHM_SOCKET" --socket-group none --socket-mode 0666 --log-level warn "$@" &
  daemon=$!
  wait_for '"$ctl" ping >/dev/null 2>&1'
}
stop_daemon() { kill "$daemon"; wait "$daemon"; daemon=""; }

# --- usage errors (exit 2) and a daemon that is not running (exit 1)
expect 2 "$ctl"
expect 2 "$ctl" frobnicate; contains "unknown command"
expect 2 "$ctl" show
expect 2 "$ctl" list --prometheus; contains "list takes no --prometheus"
expect 2 "$ctl" create x 12Q; contains "bad size"
expect 2 "$ctl" create x 1 --mode 999; contains "bad mode"
expect 2 "$ctl" create-image x 64; contains "bad extent"
expect 2 "$ctl" create-image x 64x0; contains "bad extent"
expect 2 "$ctl" create-image x 64x64 --format rgba7; contains "unknown format"
expect 0 "$ctl" list --help; contains "--all"
# sizes in either case; negative numbers reach the command's own check; '--' ends options
expect 2 "$ctl" create x 1q; contains "bad size '1q'"
expect 2 "$ctl" create x -1; contains "bad size '-1'"
expect 2 "$ctl" create x 1 -- --mode; contains "Usage: gpushmctl create"
expect 2 "$ctl" disconnect -1; contains "bad client id '-1'"
expect 2 "$ctl" disconnect -- -1; contains "bad client id '-1'"
expect 2 "$ctl" disconnect bob; contains "bad client id 'bob'"
expect 2 "$ctl" dump x --offset -1; contains "bad offset '-1'"
expect 2 "$ctl" dump x --format oct; contains "unknown format 'oct' (hex or raw)"
expect 2 "$ctl" create x 1 --format r8-unorm; contains "create takes no --format"
# the versions of this side, without a daemon; version then says it could not ask one
expect 0 "$ctl" --version; contains "gpushmctl $version (libgpushm $version)"
expect 0 "$ctl" -V; contains "gpushmctl $version (libgpushm $version)"
expect 1 "$ctl" version; contains "gpushmctl $version (libgpushm $version)"
contains "gpushmctl: version: gpushmd could not be reached: "
for c in list "show x" clients stats "create x 1" "unlink x" "destroy x" events ping version "dump x"; do
  expect 1 "$ctl" $c; contains "cannot connect to gpushmd"
done

start_daemon
# --- buffers held by two processes
expect 0 "$ctl" create frames 64M --mode 0644; contains "frames"
expect 0 "$ctl" create small 100 --metadata '{"dtype":"f4"}'
# the library's words, without gpushm_strerror()'s said before them again
expect 1 "$ctl" create small 100; [ "$out" = "gpushmctl: create: 'small' already exists" ] || fail "exists: $out"
expect 1 "$ctl" create 'bad name' 1
case "$out" in "gpushmctl: create: invalid buffer name: use 1-127 characters"*) ;; *) fail "bad name: $out" ;; esac
"$hold" "$dir/ready1" frames small & h1=$!; holders="$h1"
wait_for '[ -e "$dir/ready1" ]'
"$hold" "$dir/ready2" frames & h2=$!; holders="$h1 $h2"
wait_for '[ -e "$dir/ready2" ]'

# golden JSON: must parse, and equal the golden file once run-specific values are masked
"$ctl" list --json | python3 "$src/tests/golden/normalize-json.py" "$h1" "$h2" > "$dir/list.json"
diff -u "$src/tests/golden/list.json" "$dir/list.json" || fail "list --json differs from the golden file"

# the table: exact header, one aligned row per buffer, sorted by name, holders with names
expect 0 "$ctl" list
[ "$(printf '%s\n' "$out" | head -n 1 | tr -s ' ')" = "NAME ID BACKEND DEV SIZE OWNER MODE REFS LIFETIME STATE AGE HOLDERS" ] ||
  fail "list header: $out"
printf '%s\n' "$out" | sed -n 2p | grep -Eq "^frames +[0-9]+ +host +- +64 MiB +[a-z0-9]+ +0644 +2 +persistent +linked +[0-9]+s +$h1\(hold-buffers\),$h2\(hold-buffers\)\$" ||
  fail "frames row: $out"
printf '%s\n' "$out" | sed -n 3p | grep -Eq "^small +[0-9]+ +host +- +100 B .* 0600 +1 " || fail "small row: $out"
expect 0 "$ctl" list --bytes; contains "67108864"
# golden table output of show, with run-specific values masked
user=$(id -un); uid=$(id -u); gid=$(id -g)
"$ctl" show frames | sed -E -e "s/^id: +[0-9]+\$/id:         ID/" \
  -e "s/^created by: pid [0-9]+, [0-9a-z]+ ago/created by: pid PID, AGE ago/" \
  -e "s/pid $h1 +/pid PID1 /; s/pid $h2 +/pid PID2 /" -e "s/\b$user\b/USER/g" \
  -e "s/uid $uid +\(/uid UID (/; s/\(uid $uid, gid $gid\)/(uid UID, gid GID)/" \
  -e "s/client [0-9]+  /client CLIENT  /" > "$dir/show.txt"
diff -u "$src/tests/golden/show.txt" "$dir/show.txt" || fail "show differs from the golden file"
expect 0 "$ctl" show frames; contains "references: 2"; contains "pid $h1"; contains "mode:       0644"
id=$("$ctl" show frames --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
expect 0 "$ctl" show "$id"; contains "name:       frames"
expect 1 "$ctl" show nothing-here; contains "no buffer or event 'nothing-here'"

# --- stats: table, JSON, Prometheus text format
expect 0 "$ctl" stats; contains "buffers:        2 (2 linked, 0 unlinked but held)"; contains "create"
"$ctl" stats --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["buffers"] == 2 and s["buffers_linked"] == 2, s
assert s["bytes_allocated"] == 64 * 2**20 + 4096, s
assert s["requests_by_type"]["create"]["count"] == 3 and s["requests_by_type"]["create"]["errors"] == 1, s
assert {"backend": "host", "device": -1, "buffers": 2, "bytes": 64 * 2**20 + 4096} in s["usage"], s
assert s["fences_raised"] == 0, s
' || fail "stats --json"
"$ctl" stats --prometheus > "$dir/metrics"
# Output that cannot be written all is a failure, not success with a cut-short file
# (gpushm-textfile renames what gpushmctl wrote over node_exporter's file).
if [ -w /dev/full ]; then
  if "$ctl" stats --prometheus > /dev/full 2> "$dir/full.err"; then
    fail "stats --prometheus > /dev/full exited 0"
  fi
  grep -q "writing the output failed" "$dir/full.err" || fail "no message for a failed write: $(cat "$dir/full.err")"
fi
grep -qx 'gpushm_buffers{state="linked"} 2' "$dir/metrics" || fail "prometheus buffers"
grep -qx 'gpushm_allocated_bytes{backend="host",device="-1"} 67112960' "$dir/metrics" || fail "prometheus bytes"
grep -qx 'gpushm_fences_raised_total 0' "$dir/metrics" || fail "prometheus fences raised"
grep -qx '# TYPE gpushm_fences_raised_total counter' "$dir/metrics" || fail "prometheus counter type"
grep -v '^#' "$dir/metrics" | grep -Evq '^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9.]+$' &&
  fail "a metric line is not in the exposition format: $(cat "$dir/metrics")"

# metadata: shown by show (escaped for the terminal) and list --json, limited
expect 0 "$ctl" show small; contains 'metadata:   {"dtype":"f4"}'
expect 1 "$ctl" create too-much 1 --metadata "$(head -c 4097 /dev/zero | tr '\0' x)"
contains "over the limit of 4096"
expect 1 "$ctl" show too-much
expect 0 "$ctl" create esc 1 --metadata "$(printf 'a\033[31mb')"
expect 0 "$ctl" show esc; contains 'metadata:   a\x1b[31mb'
case "$out" in *"$(printf '\033')"*) fail "show printed an escape character: $out" ;; esac
"$ctl" list --json | python3 -c '
import json, sys
m = {b["name"]: (b["metadata"], b.get("metadata_encoding")) for b in json.load(sys.stdin)}
assert m["esc"] == ("a\x1b[31mb", "utf-8"), m
assert m["frames"] == (None, None), m
' || fail "list --json metadata"
expect 0 "$ctl" unlink esc

# --- clients, then a holder killed: gone from clients and from the holders
expect 0 "$ctl" clients
printf '%s\n' "$out" | grep -Eq "^[0-9]+ +$h1 +hold-buffers +[a-z0-9]+ +hold-buffers +2 " || fail "clients: $out"
printf '%s\n' "$out" | grep -Eq "^[0-9]+ +$h2 +hold-buffers +[a-z0-9]+ +hold-buffers +1 " || fail "clients: $out"
"$ctl" clients --json | python3 -c 'import json,sys; json.load(sys.stdin)' || fail "clients --json"
kill -9 "$h1"; wait "$h1" 2>/dev/null || true; holders="$h2"
wait_for '! "$ctl" clients | grep -q " $h1 "'
expect 0 "$ctl" show frames; contains "references: 1"
case "$out" in *"pid $h1"*) fail "killed holder still listed: $out" ;; esac

# --- unlink (and its old name, destroy): the name goes, a held buffer stays as unlinked-held,
# and unlink says who holds it
expect 0 "$ctl" unlink frames
contains "unlinked 'frames': still held by 1 client, so its 64 MiB stay allocated until it lets go"
printf '%s\n' "$out" | grep -Eq "^  pid $h2 +hold-buffers +uid $(id -u) " || fail "unlink's holders: $out"
expect 0 "$ctl" list; contains "unlinked-held"
expect 1 "$ctl" destroy frames; contains "no buffer named 'frames'"
# rows in name then id order whatever order the daemon made them in (it lists by id)
expect 0 "$ctl" create frames 1
expect 0 "$ctl" create aaa 1
expect 0 "$ctl" list
[ "$(printf '%s\n' "$out" | awk 'NR > 1 {for (i = 2; i <= NF; i++) if ($i ~ /linked/) print $1 "," $i}' | tr '\n' ' ')" = "aaa,linked frames,unlinked-held frames,linked small,linked " ] ||
  fail "list order: $out"
expect 0 "$ctl" unlink frames
expect 0 "$ctl" unlink aaa

# --- disconnect: the last holder's references go (so does the memory), the process lives on
expect 1 "$ctl" disconnect 4000000000
[ "$out" = "gpushmctl: disconnect: no client with id 4000000000 among those you may end (gpushmctl clients lists them)" ] ||
  fail "disconnect of no client: $out"
id2=$("$ctl" clients | awk -v pid="$h2" '$2 == pid {print $1}')
[ -n "$id2" ] || fail "no client id for holder $h2"
expect 0 "$ctl" disconnect "$id2"; contains "client $id2 disconnected"
wait_for '! "$ctl" clients | grep -q " $h2 "'
expect 0 "$ctl" list
case "$out" in *frames*) fail "a buffer nobody holds any more is still there: $out" ;; esac
kill -0 "$h2" || fail "disconnect killed the holder process"
expect 0 "$ctl" events; [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "events: $out"

# --- dump: a buffer's bytes as xxd -a lays them out, or raw; ranges checked; images as
# their rows
expect 0 "$ctl" version; contains "gpushmctl $version (libgpushm $version)"
contains "gpushmd $version"
expect 0 "$ctl" create lower 2k; contains "lower"
expect 0 "$ctl" show lower --bytes; contains "size:       2048 ("
expect 0 "$ctl" unlink lower
{ printf 'Hello, world\n'; head -c 100 /dev/zero; printf abc; head -c 3000 /dev/urandom
  head -c 4096 /dev/zero; printf end; } > "$dir/content"
size=$(wc -c < "$dir/content")
"$load" content "$dir/content" host 0644 || fail "load-buffer content"
expect 0 "$ctl" dump content
[ "$(printf '%s\n' "$out" | head -n 3)" = "00000000: 4865 6c6c 6f2c 2077 6f72 6c64 0a00 0000  Hello, world....
00000010: 0000 0000 0000 0000 0000 0000 0000 0000  ................
*" ] || fail "dump: $out"
printf '%s\n' "$out" | tail -n 2 | head -n 1 | grep -qx '\*' || fail "dump's last zero run: $out"
if command -v xxd >/dev/null; then
  "$ctl" dump content > "$dir/dump.hex"
  xxd -a "$dir/content" | cmp -s - "$dir/dump.hex" || fail "dump differs from xxd -a"
  "$ctl" dump content --offset 10 --length 300 > "$dir/dump.hex"
  xxd -a -s 10 -l 300 "$dir/content" | cmp -s - "$dir/dump.hex" || fail "dump of a range differs from xxd -a"
fi
"$ctl" dump content --format raw > "$dir/dump.raw"
cmp -s "$dir/content" "$dir/dump.raw" || fail "dump --format raw differs from what was loaded"
cid=$("$ctl" show content --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
"$ctl" dump "$cid" --offset 1k --length 2K --format raw > "$dir/dump.raw"
tail -c +1025 "$dir/content" | head -c 2048 | cmp -s - "$dir/dump.raw" || fail "dump of a range by id"
expect 1 "$ctl" dump content --offset 1M
[ "$out" = "gpushmctl: dump: offset 1048576 is past the end of 'content' ($size bytes)" ] || fail "offset: $out"
expect 1 "$ctl" dump content --offset 100 --length "$size"
contains "$size bytes from offset 100 run past the end of 'content' ($size bytes: at most $((size - 100)) from there)"
expect 0 "$ctl" dump content --offset "$size"; [ -z "$out" ] || fail "an empty range: $out"
expect 1 "$ctl" dump nothing-here
case "$out" in # (a uid that may not see every buffer is told so)
  "gpushmctl: dump: no buffer named 'nothing-here'" | \
  "gpushmctl: dump: no buffer named 'nothing-here' that uid $uid may open "*) ;;
  *) fail "$out" ;;
esac
# raw bytes are not for a terminal
python3 - "$ctl" <<'EOF' || fail "dump --format raw to a terminal"
import os, pty, subprocess, sys
master, slave = pty.openpty()
r = subprocess.run([sys.argv[1], "dump", "content", "--format", "raw"], stdout=slave,
                   stderr=subprocess.PIPE)
err = r.stderr.decode()
assert r.returncode == 2 and "standard output is a terminal: redirect it" in err, (r.returncode, err)
EOF
# a linear image is its rows, row pitch apart: 30 rows of 512 bytes
expect 0 "$ctl" create-image rows 100x30 --format r32-sfloat; contains " 512"
[ "$("$ctl" dump rows --format raw | wc -c)" = 15360 ] || fail "dump of an image's rows"
expect 0 "$ctl" unlink rows

# --- another uid: no --all, no destroying root's buffers, sees only what it may open
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && getent group nogroup >/dev/null; then
  # the tools must be reachable by nobody wherever the build lives
  cp "$b/ctl/.libs/gpushmctl" "$dir/gpushmctl" 2>/dev/null || cp "$b/ctl/gpushmctl" "$dir/gpushmctl"
  cp -P "$b"/client/.libs/libgpushm.so* "$dir/"
  chmod 755 "$dir"/gpushmctl
  # and every library it needs from outside the system directories (an offline GPU
  # host has protobuf-c in a private prefix nobody cannot read)
  LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$dir/gpushmctl" |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | grep -Ev "^(/(usr/)?lib(64)?/|$dir/)" |
    while read -r lib; do cp -L "$lib" "$dir/"; done
  chmod 644 "$dir"/lib*.so*
  as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups env LD_LIBRARY_PATH="$dir" "$dir/gpushmctl" "$@"; }
  nobody_ok=1
  expect 0 "$ctl" create public 1 --mode 0644
  expect 1 as_nobody list --all; contains "needs root or the admin group"
  expect 0 as_nobody list; contains "public"
  case "$out" in *small*) fail "nobody sees a 0600 buffer: $out" ;; esac
  expect 1 as_nobody unlink public; contains "belongs to uid 0"
  # dump opens like any reader: the mode decides
  expect 0 as_nobody dump content; contains "Hello, world"
  expect 1 as_nobody dump small
  [ "$out" = "gpushmctl: dump: no buffer named 'small' that uid 65534 may open (one whose owner and mode keep it from uid 65534 is not shown either)" ] || fail "$out"
  expect 0 as_nobody clients
  case "$out" in *hold-buffers*) fail "nobody sees root's clients: $out" ;; esac
  # with the admin group, its members may list and destroy everyone's buffers
  stop_daemon
  start_daemon --admin-group nogroup
  expect 0 "$ctl" create secret 1
  expect 0 as_nobody list --all; contains "secret"
  expect 0 as_nobody unlink secret
  expect 1 "$ctl" show secret
else
  echo "# not root (or no setpriv/nogroup): permission cases left to test-permissions"
fi
# --- an image: made, listed and shown with its format and size; the daemon's limits
expect 0 "$ctl" create-image picture 100x30 --format r32-sfloat --mode 0644
contains "picture"; contains " 512"
expect 0 "$ctl" list; contains "image 100x30 r32-sfloat linear"
expect 0 "$ctl" show picture; contains "image:      100x30 r32-sfloat linear, row pitch 512"
expect 0 "$ctl" show picture --json; contains '"image":{"format":"r32-sfloat","width":100'
expect 1 "$ctl" create-image huge 20000x2; contains "over the limits"
expect 0 "$ctl" unlink picture
# read-only kept by the host backend is shown as a mode; a host buffer can be strict
expect 0 "$ctl" create kept 4096 --backend host --mode 0644 --strict-mode
expect 0 "$ctl" show kept
case "$out" in *"not enforced"*) fail "a host buffer's read-only is kept: $out" ;; esac
expect 0 "$ctl" unlink kept
stop_daemon

# --- read-only of device memory (the fake driver): shown as not enforced, refused when
# the creator or the daemon asks for strict modes
if [ -r "${GPUSHM_FAKE_CUDA_LIB:-}" ]; then
  export GPUSHM_CUDA_LIBRARY=$GPUSHM_FAKE_CUDA_LIB
  start_daemon
  # device memory is dumped through a copy to host
  "$load" devbuf "$dir/content" cuda-fd || fail "load-buffer into cuda-fd memory"
  "$ctl" dump devbuf --format raw > "$dir/dump.raw"
  cmp -s "$dir/content" "$dir/dump.raw" || fail "dump of cuda-fd memory differs from what was loaded"
  expect 0 "$ctl" dump devbuf --length 32
  [ "$out" = "00000000: 4865 6c6c 6f2c 2077 6f72 6c64 0a00 0000  Hello, world....
00000010: 0000 0000 0000 0000 0000 0000 0000 0000  ................" ] || fail "dump devbuf: $out"
  # an event holds no memory: dump says so (the Python package makes one)
  if GPUSHM_LIBRARY="$b/client/.libs/libgpushm.so.1" PYTHONPATH="$src/python" python3 -c \
      'import gpushm; gpushm.Connection().create_event("tick").close()' 2> "$dir/py.err"; then
    expect 1 "$ctl" dump tick
    [ "$out" = "gpushmctl: dump: 'tick' is an event, which holds no memory to dump" ] || fail "$out"
  else
    echo "# no event made (the Python package: $(cat "$dir/py.err")): dump's refusal of events untested"
  fi
  expect 0 "$ctl" create readers 4096 --backend cuda-fd --mode 0644
  expect 0 "$ctl" show readers
  contains "read-only for group and others is not enforced: cuda-fd hands readers an fd that maps it read-write"
  expect 1 "$ctl" create strict 4096 --backend cuda-fd --mode 0640 --strict-mode
  contains "mode 0640 gives its group read-only access, which cuda-fd cannot keep"
  contains "use 0660, 0600 or the host backend; docs/security.md"
  expect 0 "$ctl" create strict 4096 --backend cuda-fd --mode 0660 --strict-mode
  expect 0 "$ctl" show strict
  case "$out" in *"not enforced"*) fail "0660 promises no read-only: $out" ;; esac
  stop_daemon
  start_daemon --strict-modes yes
  expect 1 "$ctl" create readers2 4096 --backend cuda-fd --mode 0604
  contains "mode 0604 gives others read-only access"; contains "strict-modes setting"
  expect 0 "$ctl" create readers2 4096 --backend host --mode 0604
  stop_daemon
  unset GPUSHM_CUDA_LIBRARY
fi
start_daemon
# --- wait: for a name made meanwhile; a timeout exits 1 and says so; bad timeouts are
# usage errors
expect 2 "$ctl" wait x --timeout -1; contains "bad timeout '-1'"
expect 2 "$ctl" wait x --timeout 3601; contains "bad timeout '3601' (seconds, 0 to 3600)"
expect 2 "$ctl" wait x --timeout soon; contains "bad timeout 'soon'"
expect 1 "$ctl" wait waited --timeout 0.2
contains "no buffer named 'waited'"; contains "was made within 200 ms"
( sleep 0.3; "$ctl" create waited 4096 >/dev/null ) &
maker=$!
expect 0 "$ctl" wait waited --timeout 30; contains "waited (id "; contains ") is there, after 0."
wait "$maker"
expect 0 "$ctl" wait waited --timeout 0; contains "is there, after 0.0"; contains ", a buffer)"
expect 0 "$ctl" unlink waited
# a ring or a timeline made under the name ends the wait too (the wait's open is a
# buffer's, which they refuse: the list then says what is there); one that uid 65534 may
# not see does not, and its kind is not named
py() { GPUSHM_LIBRARY="$b/client/.libs/libgpushm.so.1" PYTHONPATH="$src/python" python3 -c "$@"; }
if py 'import gpushm' 2> "$dir/py.err"; then
  ( sleep 0.3
    py 'import gpushm; gpushm.Connection().create_ring("waitring", 2, 4096, backend="host").close()'
  ) &
  maker=$!
  expect 0 "$ctl" wait waitring --timeout 30
  contains "waitring (id "; contains ", a ring) is there, after "
  wait "$maker"
  py 'import gpushm; gpushm.Connection().create_timeline("waittl").close()'
  expect 0 "$ctl" wait waittl --timeout 0; contains "waittl (id "; contains ", a timeline) is there"
  if [ "${nobody_ok:-0}" = 1 ]; then
    expect 1 as_nobody wait waittl --timeout 0.2
    contains "no buffer named 'waittl' that uid 65534 may open was made within 200 ms"
    case "$out" in *timeline*) fail "uid 65534 is told of root's 0600 timeline: $out" ;; esac
    # a member of the admin group sees every user's: root's 0600 timeline is there for it
    stop_daemon
    start_daemon --admin-group nogroup
    py 'import gpushm; gpushm.Connection().create_timeline("waittl").close()'
    expect 0 as_nobody wait waittl --timeout 0; contains "waittl (id "; contains ", a timeline)"
  fi
else
  echo "# no ring or timeline made (the Python package: $(cat "$dir/py.err")):" \
    "waits for them untested"
fi
# --group takes a group name or a gid, not a negative number that strtoul would wrap
expect 2 "$ctl" create negwrap 4096 --group -18446744073709551615
contains "no group '-18446744073709551615'"
stop_daemon
echo "gpushmctl tests passed"
