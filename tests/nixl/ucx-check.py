# SPDX-License-Identifier: MIT
"""UCX's own RMA API between two processes' gpushm buffers (tests/nixl/ucx-rma.c, built
against a UCX of one's choosing: libucx-cu13's), on one gpushmd ($GPUSHM_SOCKET): the
initiator GETs the target's buffer and PUTs into it, both sides check the bytes, and the
transports UCX took are read from its UCX_PROTO_INFO log and judged as gpushm.nixl judges
NIXL's (a CUDA or RDMA transport; between host memory, shared memory too).

  ucx-check.py --binary ucx-rma --memory host|device [--size N] [--runs N]
               [--expect-refusal]   (UCX_TLS forces a slow path: the judgement must say so)
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import gpushm.nixl as gnixl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--memory", choices=("host", "device"), required=True)
    ap.add_argument("--size", type=int, default=(64 << 20) + 4096)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--expect-refusal", action="store_true")
    args = ap.parse_args()
    backend = "cuda-fd" if args.memory == "device" else "host"
    d = tempfile.mkdtemp(prefix="gpushm-ucx-")
    env = {**os.environ, "UCX_PROTO_INFO": "y", "UCX_LOG_FILE": os.path.join(d, "ucx.%p.log")}
    if args.memory == "device":
        # as gpushm.nixl.Agent does: UCX turns cuda_ipc's GET off on hosts without NVLink
        env.setdefault("UCX_CUDA_IPC_ENABLE_GET_ZCOPY", "y")
    sock = os.path.join(d, "rma.sock")
    tag = f"ucx-check-{os.getpid()}"
    target = subprocess.Popen([args.binary, "target", sock, tag + ".t", str(args.size), backend,
                               "7"], env=env, stdout=subprocess.PIPE, text=True)
    init = subprocess.run([args.binary, "initiator", sock, tag + ".i", str(args.size), backend,
                           str(args.runs)], env=env, stdout=subprocess.PIPE, text=True,
                          timeout=600)
    t_out, _ = target.communicate(timeout=60)
    print(init.stdout + t_out, end="")
    if init.returncode or target.returncode:
        sys.exit(f"FAIL: initiator exit {init.returncode}, target exit {target.returncode}")
    # both processes' logs: only the initiator's name gets and puts it made
    lanes = []
    for path in glob.glob(os.path.join(d, "ucx.*.log")):
        with open(path, errors="replace") as f:
            lanes += [lane for lane in gnixl.parse_proto_info(f.read()) if lane.scope != "self"]
    mem = "cuda" if args.memory == "device" else "host"
    refused = []
    for op in ("READ", "WRITE"):
        found = [lane for lane in lanes if lane.op == op and lane.local == mem
                 and lane.remote == mem and lane.covers(args.size)]
        if not found:
            sys.exit(f"FAIL: UCX printed no protocol for {op} between {mem} memory")
        for lane in found:
            why = gnixl.judge(lane)
            print(f"# {op} {args.size} bytes, {mem} memory: {lane.config} ({lane.description})"
                  f"{': ' + why if why else ''}")
            if why:
                refused.append(f"{op}: {why}")
    if args.expect_refusal:
        if not refused:
            sys.exit("FAIL: UCX_TLS left no fast path, yet no lane was refused")
        print(f"ok: the slow path is named: {refused[0]}")
    elif refused:
        sys.exit(f"FAIL: {'; '.join(refused)}")
    print("PASS")


if __name__ == "__main__":
    main()
