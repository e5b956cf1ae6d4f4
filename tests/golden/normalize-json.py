"""Parses gpushmctl --json output (so it must be valid JSON) and replaces what varies
from run to run with placeholders, for comparison with a golden file.
Usage: normalize-json.py PID1 PID2 < output"""
import json
import sys

pids = {int(p): "PID%d" % (i + 1) for i, p in enumerate(sys.argv[1:])}
data = json.load(sys.stdin)


def fix(v, key=None):
    if isinstance(v, list):
        return [fix(x) for x in v]
    if isinstance(v, dict):
        return {k: fix(x, k) for k, x in v.items()}
    if key in ("id",):
        return "ID"
    if key in ("client_id",):
        return "CLIENT"
    if key in ("owner_uid", "uid"):
        return "UID"
    if key == "owner_gid":
        return "GID"
    if key == "owner":
        return "USER"
    if key == "created_unix_ms":
        return "TIME"
    if key == "age_s":
        return "AGE"
    if key == "pid":
        return pids.get(v, "PID?")
    return v


json.dump(fix(data), sys.stdout, indent=2)
sys.stdout.write("\n")
