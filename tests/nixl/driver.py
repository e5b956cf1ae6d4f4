# SPDX-License-Identifier: MIT
"""Drives tests/nixl/worker.py processes (one NIXL agent each) for nixl-check.py,
bench-nixl.py and examples that need more than one agent."""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))


class Worker:
    """A worker process; call() sends one command and returns its reply, ok() its
    result or exits with the failure."""

    def __init__(self, name, env=None, route="auto"):
        self.name = name
        self.p = subprocess.Popen([sys.executable, os.path.join(here, "worker.py")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, **(env or {})})
        self.pid = self.p.pid
        self.start = self.ok({"op": "agent", "name": name, "route": route})

    def call(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit(f"FAIL: worker {self.name} died (exit {self.p.wait()}) on {cmd}")
        return json.loads(line)

    def ok(self, cmd=None, **kw):
        r = self.call(**(cmd or kw))
        if "error" in r:
            raise SystemExit(f"FAIL: {self.name}: {cmd or kw}: {r['error']}: {r['message']}\n"
                             f"{r.get('trace', '')}")
        return r["ok"]

    def exit(self):
        try:
            self.call(op="exit")
        finally:
            self.p.stdin.close()
            self.p.wait(timeout=60)


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok: {what}", flush=True)


def connect(a, b):
    """Each loads the other's metadata: out of band, as bytes (NIXL's
    get_agent_metadata/add_remote_agent), after both have registered."""
    b.ok(op="add_peer", md=a.ok(op="metadata")["md"])
    a.ok(op="add_peer", md=b.ok(op="metadata")["md"])
