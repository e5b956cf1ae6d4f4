#!/bin/sh
# SPDX-License-Identifier: MIT
# docs/grafana/gpushm-dashboard.json: valid JSON; its expressions name only metrics that
# docs/metrics.md lists, counters only under rate()/increase(), histogram buckets only
# under histogram_quantile(); and, where promtool is installed, each parses as PromQL.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
dash=$src/docs/grafana/gpushm-dashboard.json
dir=$(mktemp -d /tmp/gpushm-dashboard.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

python3 -m json.tool "$dash" > /dev/null || fail "not valid JSON: $dash"
python3 - "$dash" "$src/docs/metrics.md" "$dir/rules.yml" <<'EOS' || fail "dashboard expressions"
import json, re, sys
dash = json.load(open(sys.argv[1]))
table = set(re.findall(r"^\| `(gpushm_[a-z_]+)` \| (?:counter|gauge|histogram) \|",
                       open(sys.argv[2]).read(), re.M))
assert len(table) > 20, "docs/metrics.md's table not found"
hist = {m for m in table if m.endswith("_seconds") and "duration" in m}
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
assert exprs, "no expressions"
bad = []
for e in exprs:
    for name in re.findall(r"\bgpushm_[a-z_]+", e):
        base = re.sub(r"_(bucket|sum|count)$", "", name) if re.sub(r"_(bucket|sum|count)$", "", name) in hist else name
        if base not in table:
            bad.append("%s: %s is not in docs/metrics.md" % (e, name))
    for m in re.finditer(r"\bgpushm_[a-z_]+_total\b", e):
        if not re.search(r"(rate|increase)\(\s*$", e[:m.start()]):
            bad.append("%s: counter %s outside rate()" % (e, m.group(0)))
    for m in re.finditer(r"\bgpushm_[a-z_]+_bucket\b", e):
        if "histogram_quantile(" not in e[:m.start()]:
            bad.append("%s: %s outside histogram_quantile()" % (e, m.group(0)))
for b in bad:
    print(b)
# every expression as a recording rule, for promtool to parse
with open(sys.argv[3], "w") as f:
    f.write("groups:\n- name: dashboard\n  rules:\n")
    for i, e in enumerate(exprs):
        e = e.replace("$__rate_interval", "5m").replace("$instance", ".+")
        f.write("  - record: gpushm:dashboard_expr_%d\n    expr: %s\n" % (i, json.dumps(e)))
sys.exit(1 if bad else 0)
EOS
if command -v promtool >/dev/null; then
  promtool check rules "$dir/rules.yml" > "$dir/out" 2>&1 || fail "promtool check rules: $(cat "$dir/out")"
else
  echo "# promtool not installed (Debian: prometheus): PromQL not parsed"
fi
echo "dashboard tests passed"
