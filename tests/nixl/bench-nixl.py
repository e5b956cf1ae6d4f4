# SPDX-License-Identifier: MIT
"""NIXL (UCX backend) moving --size bytes (1 GiB) between two agents' gpushm cuda-fd
buffers, beside the same between PyTorch cudaMalloc tensors registered with NIXL, in the
same run (issue 40's target: gpushm >= 0.95 x cudaMalloc, for WRITE and for READ), each
transfer's transports read from UCX.  Medians of --runs transfers after one warm-up.
gpushm <-> gpushm goes both of gpushm.nixl's routes: "gpushm" (the peer's buffer opened
by the initiator, kept open, and copied by it: the first transfer's open shown apart, and
a second ratio of whole transfer() calls against the floor's) and "nixl" (to the peer's
own registration, as from another host: one run, refused where UCX takes TCP).
Also the agents' start, a buffer's registration, and, for a weight-set-shaped buffer,
how long registration takes.  Prints; asserts nothing but that the transfers ran."""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver import Worker, connect  # noqa: E402

TARGET = 0.95


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1 << 30)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    # B moves its memory to and from T's cudaMalloc tensor, then G's gpushm buffer:
    # gpushm.nixl judges every protocol UCX chose for an operation on B's endpoints, and
    # UCX chooses per remote registration when B loads a peer's metadata, so G (whose
    # registration UCX reaches only over TCP with some builds) comes last.
    b, t, g = Worker("B"), Worker("T"), Worker("G")
    print(f"nixl: agents started in {b.start['seconds'] * 1e3:.0f} / "
          f"{t.start['seconds'] * 1e3:.0f} / {g.start['seconds'] * 1e3:.0f} ms")
    b.ok(op="create", name="bench.b", size=args.size, backend="cuda-fd")
    b.ok(op="torch", name="torch.b", size=args.size)
    t.ok(op="torch", name="torch.t", size=args.size)
    g.ok(op="create", name="bench.g", size=args.size, backend="cuda-fd")
    for w, n in ((b, "bench.b"), (b, "torch.b"), (t, "torch.t"), (g, "bench.g")):
        w.ok(op="fill", name=n, seed=1)
        r = w.ok(op="register", names=[n], **{"as": n})
        print(f"nixl: {w.name} registered {args.size >> 20} MiB ({n}) in "
              f"{r['seconds'] * 1e3:.2f} ms")
    gib = args.size / (1 << 30)

    def rate(kind, local, peer, remote, runs, refusal=False, elsewhere=False):
        desc = peer.ok(op="describe", names=[remote])["desc"]
        if elsewhere and "gpushm" in desc:  # as a peer of another gpushmd describes it
            desc["gpushm"]["instance"] ^= 1
        x = b.ok(op="transfer", kind=kind, local=[local], remote=desc, peer=peer.name,
                 repeat=runs + 1, report_refusal=refusal)
        x["call_rate"] = gib / statistics.median(x["wall_seconds"][1:])
        return gib / statistics.median(x["seconds"][1:]), x

    connect(b, t)
    floors = {}
    for kind in ("WRITE", "READ"):
        floor, fx = rate(kind, "torch.b", t, "torch.t", args.runs)
        floors[kind] = floor, fx["call_rate"]
        print(f"nixl {args.size >> 20} MiB {kind}, cudaMalloc <-> cudaMalloc (floor): "
              f"{floor:.1f} GiB/s over {', '.join(fx['lanes'])}")
        got, gx = rate(kind, "bench.b", t, "torch.t", args.runs)
        ratio = got / floor
        met = "met" if ratio >= TARGET else "NOT met"
        print(f"nixl {args.size >> 20} MiB {kind}, gpushm buffer (local) <-> cudaMalloc: "
              f"{got:.1f} GiB/s over {', '.join(gx['lanes'])}: {ratio:.3f} x the floor "
              f"(target >= {TARGET}: {met})")
    connect(b, g)
    for kind in ("WRITE", "READ"):
        both, bx = rate(kind, "bench.b", g, "bench.g", args.runs)
        floor, floor_calls = floors[kind]
        ratio, calls = both / floor, bx["call_rate"] / floor_calls
        print(f"nixl {args.size >> 20} MiB {kind}, gpushm <-> gpushm, route {bx['route']}: "
              f"{both:.1f} GiB/s, {bx['path'] or ', '.join(bx['lanes'])}: {ratio:.3f} x the "
              f"floor (target >= {TARGET}: {'met' if ratio >= TARGET else 'NOT met'}); "
              f"whole transfer() calls {bx['call_rate']:.1f} GiB/s vs the floor's "
              f"{floor_calls:.1f}: {calls:.3f} x ({'met' if calls >= TARGET else 'NOT met'}); "
              f"the first call's open {bx['setup_seconds'][0] * 1e3:.2f} ms, later ones "
              f"{statistics.median(bx['setup_seconds'][1:]) * 1e6:.0f} us (kept open)")
    for kind in ("WRITE", "READ"):
        both, bx = rate(kind, "bench.b", g, "bench.g", 1, refusal=True, elsewhere=True)
        print(f"nixl {args.size >> 20} MiB {kind}, gpushm <-> gpushm, route {bx['route']}: "
              f"{both:.2f} GiB/s ({both / floors[kind][0]:.4f} x the floor) over "
              f"{', '.join(bx['lanes'])}{': refused by gpushm.nixl' if bx['refused'] else ''}")
    for w in (b, t, g):
        w.exit()


if __name__ == "__main__":
    main()
