#!/bin/sh
# SPDX-License-Identifier: MIT
# gpushmctl stats --prometheus against a real gpushmd: every line in the text exposition
# format and Prometheus's naming rules (tests/integration/check-metrics.py), promtool's
# own check where promtool is installed, the request latency histogram consistent and
# growing with the requests it counts, opens and creates by backend, the per-device
# metrics with their UUID and name (fake CUDA driver), and stats --json's histogram.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/../.." && pwd)
ctl=$b/ctl/gpushmctl
hold=$b/tests/hold-buffers
check="python3 $src/tests/integration/check-metrics.py"
dir=$(mktemp -d /tmp/gpushm-metrics.XXXXXX)
export GPUSHM_SOCKET="$dir/gpushmd.sock"
daemon=""
holders=""
cleanup() {
  for p in $holders $daemon; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# documented FILE [all]: every metric in FILE is in docs/metrics.md's table; with "all",
# every metric of the table is in FILE too
documented() {
  python3 - "$src/docs/metrics.md" "$@" <<'EOS' || fail "the metrics and docs/metrics.md differ"
import re, sys
table = set(re.findall(r"^\| `(gpushm_[a-z_]+)` \|", open(sys.argv[1]).read(), re.M))
shown = set(re.findall(r"^# TYPE (\S+) ", open(sys.argv[2]).read(), re.M))
assert shown <= table, "not in docs/metrics.md: %s" % sorted(shown - table)
assert len(sys.argv) < 4 or table <= shown, "documented, not shown: %s" % sorted(table - shown)
EOS
}
wait_for() { i=0; until eval "$1"; do i=$((i + 1)); [ $i -lt 500 ] || fail "timed out: $1"; sleep 0.02; done; }
start_daemon() {
  "$GPUSHMD" --socket "$GPUSHM_SOCKET" --socket-group none --socket-mode 0666 --log-level warn "$@" &
  daemon=$!
  wait_for '"$ctl" ping >/dev/null 2>&1'
}
stop_daemon() { kill "$daemon"; wait "$daemon"; daemon=""; }
# promtool FILE: promtool's parser and linter must accept it without a word
promtool_check() {
  if ! command -v promtool >/dev/null; then
    echo "# promtool not installed (Debian: prometheus): promtool check skipped"
    return 0
  fi
  set +e; out=$(promtool check metrics < "$1" 2>&1); rc=$?; set -e
  [ "$rc" = 0 ] && [ -z "$out" ] || fail "promtool check metrics (exit $rc): $out"
}

# The checkers must be able to fail: fed broken expositions, they have to say no.
printf '# HELP a_b x\n# TYPE a_b counter\na_b 1\n' > "$dir/bad"
$check "$dir/bad" >/dev/null 2>&1 && fail "check-metrics accepted a counter without _total"
printf '# HELP a_bytes x\n# TYPE a_bytes gauge\na_bytes{kind="x} 1\n' > "$dir/bad"
$check "$dir/bad" >/dev/null 2>&1 && fail "check-metrics accepted an unterminated label"
printf '# HELP h x\n# TYPE h histogram\nh_bucket{le="1"} 3\nh_bucket{le="2"} 2\nh_bucket{le="+Inf"} 3\nh_sum 1\nh_count 3\n' > "$dir/bad"
$check "$dir/bad" >/dev/null 2>&1 && fail "check-metrics accepted decreasing buckets"
printf '# HELP h x\n# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 3\nh_sum 1\nh_count 4\n' > "$dir/bad"
$check "$dir/bad" >/dev/null 2>&1 && fail "check-metrics accepted +Inf != _count"
if command -v promtool >/dev/null; then
  printf '# HELP a_b x\n# TYPE a_b counter\na_b 1\n' > "$dir/bad"
  (promtool_check "$dir/bad") >/dev/null 2>&1 && fail "promtool_check accepted a counter without _total"
fi

start_daemon
"$ctl" create frames 1M >/dev/null
"$hold" "$dir/ready" frames & h=$!; holders="$h"
wait_for '[ -e "$dir/ready" ]'

"$ctl" stats --prometheus > "$dir/m1"
$check "$dir/m1" || fail "stats --prometheus: $(cat "$dir/m1")"
promtool_check "$dir/m1"
documented "$dir/m1"
version=$("$ctl" version | sed -n 's/^gpushmctl \([^ ]*\) .*/\1/p')
grep -qx "gpushm_build_info{version=\"$version\",ctl_version=\"$version\"} 1" "$dir/m1" ||
  fail "build_info: $(grep build_info "$dir/m1")"
grep -qx 'gpushm_creates_total{backend="host",device="-1"} 1' "$dir/m1" || fail "creates_total"
grep -qx 'gpushm_opens_total{backend="host",device="-1"} 1' "$dir/m1" || fail "opens_total"
grep -qx 'gpushm_buffers{state="linked"} 1' "$dir/m1" || fail "buffers"
grep -q 'kind=' "$dir/m1" && fail "a kind label is back: $(grep 'kind=' "$dir/m1")"
grep -Eq '^gpushm_(carved_total|device_memory_bytes)' "$dir/m1" && fail "a metric renamed in 0.5 is back"

# N pings: the ping histogram's count grows by at least N, the sum does not shrink
n=25
i=0; while [ $i -lt $n ]; do "$ctl" ping >/dev/null; i=$((i + 1)); done
"$ctl" stats --prometheus > "$dir/m2"
$check "$dir/m2" || fail "stats --prometheus after pings"
promtool_check "$dir/m2"
python3 - "$dir/m1" "$dir/m2" "$n" <<'EOF' || fail "the histogram did not grow with the pings"
import sys
def read(path):
    v = {}
    for line in open(path):
        if not line.startswith("#"):
            k, _, x = line.rstrip("\n").rpartition(" ")
            v[k] = float(x)
    return v
a, b, n = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3])
c = 'gpushm_request_duration_seconds_count{type="ping"}'
s = 'gpushm_request_duration_seconds_sum{type="ping"}'
assert b[c] - a.get(c, 0) >= n, (a.get(c), b[c])
assert b[s] >= a.get(s, 0) and b[s] > 0, (a.get(s), b[s])
# each type's histogram counts no more requests than requests_total does
for k, v in b.items():
    if k.startswith("gpushm_request_duration_seconds_count{"):
        t = k[k.index("{"):]
        assert v <= b["gpushm_requests_total" + t], (k, v)
EOF

# stats --json carries the same histogram: bounds, cumulative buckets, +Inf last
"$ctl" stats --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
bounds = s["latency_bounds_ns"]
assert bounds and bounds == sorted(bounds) and len(set(bounds)) == len(bounds), bounds
p = s["requests_by_type"]["ping"]
le = p["latency_le"]
assert len(le) == len(bounds) + 1, (le, bounds)
assert all(x <= y for x, y in zip(le, le[1:])), le
assert le[-1] >= 25 and le[-1] <= p["count"], (le, p)
assert p["latency_sum_ns"] > 0, p
assert {"backend": "host", "device": -1, "opens": 1, "creates": 1} in s["opens"], s["opens"]
' || fail "stats --json histogram"
# an image: counted by format and tiling, its memory beside
"$ctl" create-image picture 100x30 >/dev/null
"$ctl" stats --prometheus > "$dir/mi"
$check "$dir/mi" || fail "stats --prometheus with an image: $(cat "$dir/mi")"
promtool_check "$dir/mi"
documented "$dir/mi"
grep -qx 'gpushm_images{format="rgba8-unorm",tiling="linear"} 1' "$dir/mi" ||
  fail "images: $(grep image "$dir/mi")"
grep -qx 'gpushm_image_bytes{format="rgba8-unorm",tiling="linear"} 16384' "$dir/mi" ||
  fail "image_bytes: $(grep image "$dir/mi")"
"$ctl" unlink picture >/dev/null
stop_daemon

# Devices (fake driver, two GPUs): memory as two metrics, labelled with UUID and name;
# free memory only for the device gpushmd holds a context on.
if [ -r "${GPUSHM_FAKE_CUDA_LIB:-}" ]; then
  # the daemon and gpushmctl (whose create maps the buffer) both load the fake driver
  export GPUSHM_CUDA_LIBRARY="$GPUSHM_FAKE_CUDA_LIB" GPUSHM_FAKE_CUDA_DEVICES=2
  start_daemon
  "$ctl" create dev0 1M --backend cuda-fd --device 0 >/dev/null
  "$ctl" create-image pic 8x8 --backend host >/dev/null # every documented metric shows
  "$ctl" stats --prometheus > "$dir/m3"
  $check "$dir/m3" || fail "stats --prometheus with devices: $(cat "$dir/m3")"
  promtool_check "$dir/m3"
  documented "$dir/m3" all
  for d in 0 1; do
    grep -Eq "^gpushm_device_memory_total_bytes\{device=\"$d\",uuid=\"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\",name=\"[^\"]+\"\} [1-9][0-9]*\$" "$dir/m3" ||
      fail "device $d total memory: $(grep device_memory "$dir/m3")"
  done
  grep -Eq '^gpushm_device_memory_free_bytes\{device="0",uuid="GPU-[^"]+",name="[^"]+"\} [1-9]' "$dir/m3" ||
    fail "device 0 free memory: $(grep device_memory "$dir/m3")"
  grep -q '^gpushm_device_memory_free_bytes{device="1"' "$dir/m3" &&
    fail "free memory of a device without a context: $(grep device_memory "$dir/m3")"
  grep -qx 'gpushm_creates_total{backend="cuda-fd",device="0"} 1' "$dir/m3" ||
    fail "creates_total on device 0: $(grep creates_total "$dir/m3")"
  "$ctl" stats --json | python3 -c '
import json, sys
d = json.load(sys.stdin)["devices"]
assert len(d) == 2 and all(x["uuid"].startswith("GPU-") and len(x["uuid"]) == 40 for x in d), d
' || fail "stats --json devices"
  stop_daemon
else
  echo "# no fake CUDA driver (built without CUDA): device metrics not checked"
fi
echo "metrics tests passed"
