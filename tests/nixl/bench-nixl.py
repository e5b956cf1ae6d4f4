# SPDX-License-Identifier: MIT
"""NIXL (UCX backend) moving --size bytes (1 GiB) between two agents' gpushm cuda-fd
buffers, beside the same between PyTorch cudaMalloc tensors registered with NIXL, in the
same run (issue 40's target: gpushm >= 0.95 x cudaMalloc, for WRITE and for READ), each
transfer's transports read from UCX.  Medians of --runs transfers after one warm-up.
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
    a, b = Worker("A"), Worker("B")
    print(f"nixl: agents started in {a.start['seconds'] * 1e3:.0f} / "
          f"{b.start['seconds'] * 1e3:.0f} ms")
    for w, tag in ((a, "a"), (b, "b")):
        w.ok(op="create", name=f"bench.{tag}", size=args.size, backend="cuda-fd")
        w.ok(op="torch", name=f"torch.{tag}", size=args.size)
        w.ok(op="fill", name=f"bench.{tag}", seed=1)
        w.ok(op="fill", name=f"torch.{tag}", seed=1)
        r = w.ok(op="register", names=[f"bench.{tag}"], **{"as": "g"})
        t = w.ok(op="register", names=[f"torch.{tag}"], **{"as": "t"})
        print(f"nixl: {tag.upper()} registered {args.size >> 20} MiB: gpushm buffer "
              f"{r['seconds'] * 1e3:.2f} ms, cudaMalloc tensor {t['seconds'] * 1e3:.2f} ms")
    connect(a, b)
    gib = args.size / (1 << 30)

    def rate(kind, local, remote, runs, refusal=False):
        desc = a.ok(op="describe", names=[remote])["desc"]
        x = b.ok(op="transfer", kind=kind, local=[local], remote=desc, peer="A",
                 repeat=runs + 1, report_refusal=refusal)
        return gib / statistics.median(x["seconds"][1:]), x

    for kind in ("WRITE", "READ"):
        floor, fx = rate(kind, "torch.b", "torch.a", args.runs)
        print(f"nixl {args.size >> 20} MiB {kind}, cudaMalloc <-> cudaMalloc (floor): "
              f"{floor:.1f} GiB/s over {', '.join(fx['lanes'])}")
        got, gx = rate(kind, "bench.b", "torch.a", args.runs)
        ratio = got / floor
        met = "met" if ratio >= TARGET else "NOT met"
        print(f"nixl {args.size >> 20} MiB {kind}, gpushm buffer (local) <-> cudaMalloc: "
              f"{got:.1f} GiB/s over {', '.join(gx['lanes'])}: {ratio:.3f} x the floor "
              f"(target >= {TARGET}: {met})")
        both, bx = rate(kind, "bench.b", "bench.a", 1, refusal=True)
        print(f"nixl {args.size >> 20} MiB {kind}, gpushm <-> gpushm: {both:.2f} GiB/s "
              f"({both / floor:.3f} x the floor) over {', '.join(bx['lanes'])}"
              f"{': refused by gpushm.nixl' if bx['refused'] else ''}")
    a.exit()
    b.exit()


if __name__ == "__main__":
    main()
