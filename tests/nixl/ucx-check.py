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
import atexit
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import gpushm.nixl as gnixl


def dump_logs(d, everything=False):
    """UCX says why in its log, not in the status string the programs print."""
    for path in sorted(glob.glob(os.path.join(d, "ucx.*.log"))):
        with open(path, errors="replace") as f:
            lines = [line for line in f if everything or not line.startswith("[") or
                     any(w in line for w in (" ERROR ", " WARN ", " DIAG ", " DEBUG "))]
        print(f"# {os.path.basename(path)} (last {min(len(lines), 80)} lines):")
        print("".join("#   " + line for line in lines[-80:]), end="")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--memory", choices=("host", "device"), required=True)
    ap.add_argument("--size", type=int, default=(64 << 20) + 4096)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--expect-refusal", action="store_true")
    ap.add_argument("--timeout", type=float,
                    default=float(os.environ.get("GPUSHM_TEST_UCX_TIMEOUT", 600)))
    args = ap.parse_args()
    backend = "cuda-fd" if args.memory == "device" else "host"
    d = tempfile.mkdtemp(prefix="gpushm-ucx-")
    atexit.register(shutil.rmtree, d, True)
    env = {**os.environ, "UCX_PROTO_INFO": "y", "UCX_LOG_FILE": os.path.join(d, "ucx.%p.log")}
    if os.environ.get("GPUSHM_TEST_UCX_LOG_LEVEL"):
        env["UCX_LOG_LEVEL"] = os.environ["GPUSHM_TEST_UCX_LOG_LEVEL"]
    if args.memory == "device":
        # as gpushm.nixl.Agent does: UCX turns cuda_ipc's GET off on hosts without NVLink
        env.setdefault("UCX_CUDA_IPC_ENABLE_GET_ZCOPY", "y")
        # UCX's memory-type cache knows only what its hooks saw mapped after ucp_init;
        # a gpushm buffer mapped before (or through a dlsym'd driver) is taken for host
        # memory, and ucp_mem_map of it fails ("failed to insert region [0x0..0x0]:
        # Invalid parameter", libucx-cu13 1.22.0 on the H200): ask the driver instead
        env.setdefault("UCX_MEMTYPE_CACHE", "n")
    sock = os.path.join(d, "rma.sock")
    tag = f"ucx-check-{os.getpid()}"
    target = subprocess.Popen([args.binary, "target", sock, tag + ".t", str(args.size), backend,
                               "7"], env=env, stdout=subprocess.PIPE, text=True)
    init = subprocess.Popen([args.binary, "initiator", sock, tag + ".i", str(args.size),
                             backend, str(args.runs)], env=env, stdout=subprocess.PIPE,
                            text=True)
    try:
        i_out, _ = init.communicate(timeout=args.timeout)
        t_out, _ = target.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        for p in (init, target):
            p.kill()
        i_out, t_out = init.communicate()[0], target.communicate()[0]
        print(i_out + t_out, end="")
        dump_logs(d, everything=True)
        sys.exit(f"FAIL: no end within {args.timeout} s")
    print(i_out + t_out, end="")
    if init.returncode or target.returncode:
        dump_logs(d)
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
            sys.exit("FAIL: a slow path was expected here, yet no lane was refused")
        print(f"ok: the slow path is named: {refused[0]}")
    elif refused:
        sys.exit(f"FAIL: {'; '.join(refused)}")
    print("PASS")


if __name__ == "__main__":
    main()
