#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs gpushmd on a private socket, a producer that creates and fills a 64 MiB
# buffer, and a consumer in another process that verifies it and answers; the
# producer verifies the answer.  Usage: examples/demo.sh [BUILD_DIR]
set -eu
usage="usage: examples/demo.sh [BUILD_DIR]
  Starts the gpushmd of BUILD_DIR (default _build) on a private socket, runs
  gpushm-producer and gpushm-consumer on a 64 MiB buffer (device memory with a GPU,
  else host memory) and stops gpushmd.  Success ends with
  'demo: OK (gpushmd stopped cleanly)', exit 0."
case "${1:-}" in
  -h | --help) echo "$usage"; exit 0 ;;
  -*) printf 'demo.sh: unknown option %s\n%s\n' "'$1'" "$usage" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { printf 'demo.sh: at most one argument\n%s\n' "$usage" >&2; exit 2; }
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/_build}
dir=$(mktemp -d /tmp/gpushm-demo.XXXXXX)
export GPUSHM_SOCKET="$dir/gpushmd.sock"
# Device memory through the default backend: cuda-fd, the capability-based one (gpushmd
# answers "unsupported" without a GPU, and the producer falls back to host memory).
"$build/daemon/gpushmd" --log-level info --default-backend cuda-fd &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$dir"' EXIT
# A ping, not the socket file: that appears at bind(), before gpushmd listens.
i=0
until "$build/ctl/gpushmctl" ping >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 500 ] || { echo "demo: gpushmd did not start"; exit 1; }
  sleep 0.01
done
"$build/examples/gpushm-producer" demo 64 &
producer=$!
"$build/examples/gpushm-consumer" demo
wait $producer
kill -TERM $daemon
wait $daemon
trap 'rm -rf "$dir"' EXIT
echo "demo: OK (gpushmd stopped cleanly)"
