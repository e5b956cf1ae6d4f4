#!/bin/sh
# SPDX-License-Identifier: MIT
# Every program in examples/ takes --help (usage on stdout, exit 0, before it touches
# gpushmd, a GPU or a graphics driver) and refuses an option it does not take or too
# many arguments (usage on stderr, exit 2): a newcomer's first "--help" must not make a
# buffer called --help, nor wait for a producer that never comes.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
s=${GPUSHM_TEST_SRCDIR:?}
py=${PYTHON:-python3}
tmp=$(mktemp -d /tmp/gpushm-example-args.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# No daemon here: a program that went past its arguments fails (or waits) visibly.
export GPUSHM_SOCKET=$tmp/no-daemon.sock
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect RC STREAM WORDS -- COMMAND...: exit status RC within 10 s, "usage" on STREAM
# (stdout or stderr), nothing on the other, WORDS (if not "") in the usage
expect() {
  want=$1 stream=$2 words=$3
  shift 4
  rc=0
  timeout 10 "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
  [ "$rc" = "$want" ] || { fail "$* exited $rc, expected $want: $(cat "$tmp/out" "$tmp/err" | head -n 3)"; return; }
  if [ "$stream" = stdout ]; then on=$tmp/out off=$tmp/err; else on=$tmp/err off=$tmp/out; fi
  grep -q "usage" "$on" || fail "$*: no usage on $stream"
  [ ! -s "$off" ] || fail "$*: wrote to the other stream: $(head -n 2 "$off")"
  [ -z "$words" ] || grep -q -- "$words" "$on" || fail "$*: usage does not say '$words'"
}

# C programs: --help, an unknown option, and one argument too many
check_c() {
  prog=$1 max=$2 success=$3
  [ -x "$b/examples/$prog" ] || { fail "examples/$prog was not built"; return; }
  expect 0 stdout "$success" -- "$b/examples/$prog" --help
  expect 0 stdout "" -- "$b/examples/$prog" -h
  expect 2 stderr "unknown" -- "$b/examples/$prog" --no-such-option
  set --
  i=0
  while [ $i -le "$max" ]; do set -- "$@" 7; i=$((i + 1)); done
  expect 2 stderr "" -- "$b/examples/$prog" "$@"
}
check_c gpushm-producer 4 "answer verified"
check_c gpushm-consumer 1 "verified, answering"
check_c python/c-producer 2 "floats written"
check_c python/c-consumer 1 "floats verified"
check_c multinode/dmabuf-export 2 ""
check_c graphics/frame-producer 2 "frames presented"
# (built where configure found Vulkan, and EGL for the GL one: test-examples.sh runs them)
for c in frame-vk-consumer frame-gl-consumer; do
  [ -x "$b/examples/graphics/$c" ] || { echo "examples/graphics/$c: not built here"; continue; }
  expect 0 stdout "each identical" -- "$b/examples/graphics/$c" --help
  expect 2 stderr "unknown" -- "$b/examples/graphics/$c" --no-such-option
  expect 2 stderr "" -- "$b/examples/graphics/$c" "$tmp" 10 x
done

# scripts
expect 0 stdout "demo: OK" -- sh "$s/examples/demo.sh" --help
expect 2 stderr "unknown" -- sh "$s/examples/demo.sh" --no-such-option
expect 2 stderr "" -- sh "$s/examples/demo.sh" "$b" extra
expect 0 stdout "graphics examples:" -- sh "$s/examples/graphics/run-examples.sh" --help
expect 2 stderr "unknown" -- sh "$s/examples/graphics/run-examples.sh" --no-such-option
expect 2 stderr "" -- sh "$s/examples/graphics/run-examples.sh"
for p in python/torch_producer.py python/torch_consumer.py nixl/kv_pool.py; do
  expect 0 stdout "" -- "$py" "$s/examples/$p" --help
done
expect 2 stderr "unrecognized arguments" -- "$py" "$s/examples/python/torch_producer.py" a 1 --no-such-option
expect 2 stderr "unrecognized arguments" -- "$py" "$s/examples/python/torch_consumer.py" a 1 extra
expect 2 stderr "unrecognized arguments" -- "$py" "$s/examples/nixl/kv_pool.py" check --no-such-option

[ "$fails" = 0 ] || { echo "$fails failures"; exit 1; }
echo "every example takes --help and refuses what it does not take"
