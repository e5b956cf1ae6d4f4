#!/bin/sh
# SPDX-License-Identifier: MIT
# gpushmctl printing strings it does not control.  Holders set their /proc/PID/comm
# (any process may, to any bytes but NUL, with PR_SET_NAME) to terminal escapes, C1
# and bidi controls, a backslash, a newline, ill-formed UTF-8 and legitimate
# non-ASCII.  Tables (list, show, clients) must carry them escaped as man/gpushmctl.1
# says -- no ESC, BEL, C1, bidi control or stray byte reaches the terminal, columns
# stay aligned, cutting to the terminal's width never splits an escape -- and --json
# must decode as strict UTF-8 and give back each name by the documented rule.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
ctl=$b/ctl/gpushmctl
dir=$(mktemp -d /tmp/gpushm-ctl-escape.XXXXXX)
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
wait_for() { i=0; until eval "$1"; do i=$((i + 1)); [ $i -lt 500 ] || fail "timed out: $1"; sleep 0.02; done; }

# comm (at most 15 bytes) in hex  |  what the tables show in a UTF-8 locale
#   ESC [2J, 0xff 0xfe, a lone 0x9b (8-bit CSI), "31m", BEL
#                                 \x1b[2J\xff\xfe\x9b31m\x07
#   RLO (U+202E), "evil", U+009B (C1 CSI, valid UTF-8), backslash, "x", newline, "z"
#                                 \xe2\x80\xaeevil\xc2\x9b\\x\x0az
#   "café日", a surrogate (ED A0 80), a sequence cut short (E2 80)
#                                 café日\xed\xa0\x80\xe2\x80
#   an overlong (F0 80 80 80), past U+10FFFF (F4 90 80 80), "ok"
#                                 \xf0\x80\x80\x80\xf4\x90\x80\x80ok
comms="1b5b324afffe9b33316d07 e280ae6576696cc29b5c780a7a 636166c3a9e697a5eda080e280 f0808080f49080806f6b"

"$GPUSHMD" --socket "$GPUSHM_SOCKET" --socket-group none --socket-mode 0666 --log-level warn &
daemon=$!
wait_for '"$ctl" ping >/dev/null 2>&1'
"$ctl" create shared 1M --mode 0644 >/dev/null
n=0
for hex in $comms; do
  n=$((n + 1))
  # tests/hold-buffers sets its comm to those bytes, then holds the buffer
  HOLD_COMM_HEX=$hex HOLD_CLIENT_NAME=escape-holder "$b/tests/hold-buffers" "$dir/ready$n" shared &
  holders="$holders $!"
  wait_for '[ -e "$dir/ready$n" ]'
done

for loc in C.UTF-8 C; do
  for c in list "show shared" clients; do
    # shellcheck disable=SC2086
    LC_ALL=$loc "$ctl" $c > "$dir/$(echo "$c" | cut -d' ' -f1).$loc" || fail "$c ($loc)"
  done
done
for c in list "show shared" clients stats; do
  # shellcheck disable=SC2086
  "$ctl" $c --json > "$dir/$(echo "$c" | cut -d' ' -f1).json" || fail "$c --json"
done
"$ctl" stats --prometheus > "$dir/metrics" || fail "stats --prometheus"
utf8=0
[ "$(LC_ALL=C.UTF-8 locale charmap 2>/dev/null)" = UTF-8 ] && utf8=1
tty=0
script -qec true /dev/null </dev/null >/dev/null 2>&1 && tty=1

python3 - "$dir" "$ctl" "$utf8" "$tty" $comms -- $holders <<'EOF'
import json, os, re, shlex, subprocess, sys, unicodedata

d, ctl, utf8, tty = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
sep = sys.argv.index("--")
comms = [bytes.fromhex(h) for h in sys.argv[5:sep]]
pids = [int(p) for p in sys.argv[sep + 1:]]
shown = [r"\x1b[2J\xff\xfe\x9b31m\x07", r"\xe2\x80\xaeevil\xc2\x9b\\x\x0az",
         "café日" + r"\xed\xa0\x80\xe2\x80", r"\xf0\x80\x80\x80\xf4\x90\x80\x80ok"]
shown_c = list(shown)
shown_c[2] = r"caf\xc3\xa9\xe6\x97\xa5\xed\xa0\x80\xe2\x80"
errors = []


def check(ok, what):
    if not ok:
        errors.append(what)


def read(name):
    with open(os.path.join(d, name), "rb") as f:
        return f.read()


def decode(raw, what):
    try:
        return raw.decode("utf-8", "strict")
    except UnicodeDecodeError as e:
        errors.append("%s is not UTF-8: %s: %r" % (what, e, raw))
        return None


for pid, comm in zip(pids, comms):  # else the kernel cleaned them and this proves nothing
    with open("/proc/%d/comm" % pid, "rb") as f:
        check(f.read()[:-1] == comm, "comm of %d is not as set" % pid)

# The tables: nothing hostile gets through, each name appears escaped.
for loc, forms in (("C.UTF-8", shown), ("C", shown_c)):
    if loc == "C.UTF-8" and not utf8:
        print("# no C.UTF-8 locale: UTF-8 table cases skipped")
        continue
    for cmd in ("list", "show", "clients"):
        raw = read("%s.%s" % (cmd, loc))
        for bad in (b"\x1b", b"\x07", b"\x9b", b"\xff", b"\xfe", b"\xc2\x9b", b"\xe2\x80\xae"):
            check(bad not in raw, "%s (%s) has raw %r" % (cmd, loc, bad))
        if loc == "C":
            check(all(c < 0x80 for c in raw), "%s (C) is not ASCII" % cmd)
        text = decode(raw, "%s (%s)" % (cmd, loc))
        if text is None:
            continue
        for pid, form in zip(pids, forms):
            want = {"list": r"\b%d\(%s\)", "show": r"^  pid %d +%s ",
                    "clients": r"^[0-9]+ +%d +%s "}[cmd] % (pid, re.escape(form))
            check(re.search(want, text, re.M), "%s (%s) lacks %r:\n%s" % (cmd, loc, want, text))


def width(s):
    return sum(0 if unicodedata.combining(c) else
               2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def column_starts(line, x):
    """The character index at display column x of line, or None."""
    w = 0
    for i, c in enumerate(line):
        if w == x:
            return i
        w += width(c)
    return None


# One row per client in spite of the newline in a comm, and the USER column aligned by
# display width (日 takes two columns).
lines = decode(read("clients.C.UTF-8"), "clients") if utf8 else None
if lines is not None:
    lines = lines.splitlines()
    check(len(lines) == len(pids) + 2, "clients: %d lines, want %d" % (len(lines), len(pids) + 2))
    x = width(lines[0][:lines[0].index("  USER ") + 2])
    for line in lines[1:]:
        i = column_starts(line, x)
        check(i is not None and line[i - 2:i] == "  " and line[i] != " ",
              "clients: USER column not at %d: %r" % (x, line))

# JSON: strict UTF-8, parses, and each process name is its bytes decoded with U+FFFD for
# every maximal ill-formed subpart; nothing escaped by the terminal's rules is raw.
docs = {}
for cmd in ("list", "show", "clients", "stats"):
    raw = read(cmd + ".json")
    check(not re.search(rb"[\x00-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80\xae", raw.rstrip(b"\n")),
          "%s --json has raw controls" % cmd)
    try:
        docs[cmd] = json.loads(raw.decode("utf-8", "strict"))
    except (UnicodeDecodeError, ValueError) as e:
        errors.append("%s --json: %s: %r" % (cmd, e, raw))
want = {pid: comm.decode("utf-8", "replace") for pid, comm in zip(pids, comms)}
if "list" in docs and "show" in docs and "clients" in docs:
    got = [{h["pid"]: h["process"] for h in docs["list"][0]["holders"]},
           {h["pid"]: h["process"] for h in docs["show"]["holders"]},
           {c["pid"]: c["process"] for c in docs["clients"] if c["pid"] in want}]
    for g in got:
        check(g == want, "--json process names %r, want %r" % (g, want))
    check(want[pids[1]] == "\u202eevil\x9b\\x\nz", "bidi and C1 must survive in JSON")
    check(want[pids[2]] == "café日\ufffd\ufffd\ufffd\ufffd", "one U+FFFD per maximal subpart")

# Prometheus: UTF-8, and every sample line in the exposition grammar.
for line in (decode(read("metrics"), "stats --prometheus") or "").splitlines():
    if not line.startswith("#"):
        check(re.fullmatch(r'[a-z_]+(\{[a-z_]+="(\\[\\"n]|[^"\\\n])*"(,[a-z_]+="(\\[\\"n]|[^"\\\n])*")*\})? [0-9.]+', line),
              "not in the exposition format: %r" % line)

# On a terminal, the last column is cut to the width: at every width, no line is wider,
# and what precedes "..." ends on a whole escape and a whole character.
unit = re.compile(r"(?:[^\\]|\\\\|\\x[0-9a-f]{2})*")
table = decode(read("list.C.UTF-8"), "list") if tty and utf8 else None
if table is not None:
    header, row = table.splitlines()[:2]
    used = header.index("HOLDERS")  # the columns before are ASCII
    cuts = 0
    for cols in range(used + 4, used + width(row[used:])):
        out = subprocess.run(["script", "-qec", "stty cols %d; %s list" % (cols, shlex.quote(ctl)), "/dev/null"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             env=dict(os.environ, LC_ALL="C.UTF-8"), check=True).stdout
        lines = (decode(out, "list on a tty") or "").replace("\r", "").splitlines()
        m = re.match(r".* AGE +", lines[0]) if lines else None
        if not m:
            errors.append("cols %d: no table: %r" % (cols, out))
            break
        start = m.end()  # not used: AGE may have grown a digit since
        for line in lines:
            check(width(line) <= cols, "cols %d: %r is wider" % (cols, line))
            if line.endswith("..."):
                cuts += 1
                check(unit.fullmatch(line[start:-3]) is not None,
                      "cols %d: cut inside an escape: %r" % (cols, line))
    check(cuts > 0, "no line was ever cut")
    print("# %d cut rows checked" % cuts)
elif not tty:
    print("# no script(1) or no pty: terminal width cases skipped")

if errors:
    print("FAIL:", *errors, sep="\n")
    sys.exit(1)
EOF
echo "gpushmctl escaping tests passed"
