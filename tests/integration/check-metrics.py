#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Holds a Prometheus text exposition (the file named, or stdin) to the format's grammar
(prometheus.io/docs/instrumenting/exposition_formats) and to the naming rules gpushm
follows (README.md, "Metrics").  Prints what is wrong and exits 1; exits 0 if nothing is.

Independent of promtool, which the test also runs where it is installed: this one runs
everywhere, and checks what promtool's linter does not (histogram consistency, units,
families contiguous, the gpushm_ prefix)."""
import math
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
VALUE = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+|Inf|NaN)"
SAMPLE = re.compile(r"^(%s)(?:\{(%s(?:,%s)*)?\})? (%s)$" % (NAME, LABEL, LABEL, VALUE))
HELP = re.compile(r"^# HELP (%s) (.+)$" % NAME)
TYPE = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % NAME)
LABEL_SPLIT = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
# units that are not base units, or abbreviated: Prometheus wants _seconds and _bytes
BAD_UNIT = re.compile(r"_(ms|us|ns|msec|usec|nsec|milliseconds|microseconds|nanoseconds|"
                      r"minutes|hours|days|kb|mb|gb|kib|mib|gib|kilobytes|megabytes)(_|$)")


def main(path):
    text = open(path, encoding="utf-8").read() if path != "-" else sys.stdin.read()
    errors = []
    types, helps, done = {}, set(), set()
    current = None
    series = set()
    hist = {}  # (family, labels without le) -> {"buckets": [(le, v)], "count": v}

    def err(n, msg):
        errors.append("line %d: %s" % (n, msg))

    if not text.endswith("\n"):
        errors.append("the exposition does not end with a newline")
    for n, line in enumerate(text.split("\n")[:-1], 1):
        m = HELP.match(line)
        if m:
            if m.group(1) in helps:
                err(n, "second HELP for " + m.group(1))
            helps.add(m.group(1))
            continue
        m = TYPE.match(line)
        if m:
            name, kind = m.groups()
            if name in types:
                err(n, "second TYPE for " + name)
            if name not in helps:
                err(n, name + " has no HELP before its TYPE")
            if current:
                done.add(current)
            types[name], current = kind, name
            if not name.startswith("gpushm_"):
                err(n, name + " lacks the gpushm_ prefix")
            if kind == "counter" and not name.endswith("_total"):
                err(n, "counter %s does not end in _total" % name)
            if kind != "counter" and name.endswith("_total"):
                err(n, "%s %s ends in _total, which only counters do" % (kind, name))
            if BAD_UNIT.search(name):
                err(n, name + " has a unit that is not a base unit (_seconds, _bytes)")
            if kind == "histogram" and not name.endswith("_seconds") and not name.endswith("_bytes"):
                err(n, "histogram %s names no unit" % name)
            continue
        if line.startswith("#"):
            err(n, "a comment that is neither HELP nor TYPE: " + line)
            continue
        m = SAMPLE.match(line)
        if not m:
            err(n, "not a sample line: " + line)
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        pairs = LABEL_SPLIT.findall(labels)
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            err(n, "a label twice: " + line)
        family, suffix = name, ""
        if current and types.get(current) == "histogram":
            for sfx in ("_bucket", "_sum", "_count"):
                if name == current + sfx:
                    family, suffix = current, sfx
        if family != current:
            err(n, "%s is not in the family of the TYPE line above it (%s)" % (name, current))
            continue
        if family in done:
            err(n, family + "'s samples are not contiguous")
        key = (name, tuple(sorted(pairs)))
        if key in series:
            err(n, "a series twice: " + line)
        series.add(key)
        v = float(value)
        if "le" in keys and suffix != "_bucket":
            err(n, "le is a label of histogram buckets only: " + line)
        if types[family] in ("counter", "gauge") and not (v >= 0 and math.isfinite(v)):
            err(n, "a negative or non-finite value: " + line)
        if types[family] == "histogram":
            if not suffix:
                err(n, "a histogram sample without _bucket, _sum or _count: " + line)
                continue
            rest = tuple(sorted(p for p in pairs if p[0] != "le"))
            h = hist.setdefault((family, rest), {"buckets": [], "count": None, "sum": None})
            if suffix == "_bucket":
                if "le" not in keys:
                    err(n, "a bucket without le: " + line)
                    continue
                h["buckets"].append((float(dict(pairs)["le"]), v, n))
            else:
                h[suffix[1:]] = v
    for (family, rest), h in hist.items():
        where = "%s%s" % (family, dict(rest))
        b = h["buckets"]
        if not b or b[-1][0] != math.inf:
            errors.append(where + ": the last bucket is not le=\"+Inf\"")
            continue
        for (le0, v0, _), (le1, v1, n1) in zip(b, b[1:]):
            if le1 <= le0:
                errors.append("line %d: %s: le not ascending" % (n1, where))
            if v1 < v0:
                errors.append("line %d: %s: buckets decrease (cumulative counts)" % (n1, where))
        if h["count"] is None or h["sum"] is None:
            errors.append(where + ": _sum or _count missing")
        elif h["count"] != b[-1][1]:
            errors.append("%s: _count %g != +Inf bucket %g" % (where, h["count"], b[-1][1]))
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "-"))
