#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gpushm's Python figure beside torch-handoff.py's (run next to it by
tests/gpu/test-python-gpu.sh): fresh 1 MiB CUDA tensors handed from a producer process to
a consumer process, serially and with DEPTH in flight, the same way — except that the
tensor goes by name through gpushm instead of through torch.multiprocessing's queue.

Producer, per hand-off: gpushm.empty() (a buffer of gpushmd's, device memory), fill it
through torch, synchronise, send its name.  Consumer: torch.from_dlpack(gpushm.open(name)),
read the first word (4 bytes to the host), check it, drop the tensor, ack.  Producer, on
the ack: close_unlink().  Prints
  python-handoff: mode=serial rounds=N median_us=X p99_us=Y
  python-handoff: mode=inflightD rounds=N per_handoff_us=Z
Exits non-zero on a wrong word or a failure."""
import argparse
import collections
import sys
import time

TENSOR_WORDS = 262144  # 1 MiB of int32
WARMUP = 100


def consumer(requests, acks):
    import torch

    import gpushm
    torch.cuda.init()
    while True:
        item = requests.get()
        if item is None:
            return
        value, name = item
        tensor = torch.from_dlpack(gpushm.open(name))
        seen = int(tensor[0].item())
        del tensor
        acks.put(0 if seen == value else seen)


def run(requests, acks, rounds, depth, value, per_us, tag):
    import torch

    import gpushm
    outstanding = collections.deque()
    sent = done = 0
    t0 = time.perf_counter()
    while done < rounds:
        while sent < rounds and sent - done < depth:
            start = time.perf_counter()
            value += 1
            name = f"handoff.{tag}.{value}"
            t = gpushm.empty(name, TENSOR_WORDS, "int32", device="cuda:0")
            torch.from_dlpack(t).fill_(value)
            torch.cuda.current_stream().synchronize()
            requests.put((value, name))
            outstanding.append((start, value, t))
            sent += 1
        status = acks.get()
        start, want, t = outstanding.popleft()
        if status != 0:
            sys.exit(f"python-handoff: hand-off {want} read {status:#x}, expected {want:#x}")
        t.buffer.close_unlink()
        if per_us is not None:
            per_us.append((time.perf_counter() - start) * 1e6)
        done += 1
    return value, (time.perf_counter() - t0) * 1e6 / rounds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=8)
    args = parser.parse_args()
    import gpushm
    import torch
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")  # CUDA in a forked child is not supported
    requests, acks = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=consumer, args=(requests, acks))
    proc.start()
    value = 0
    value, _ = run(requests, acks, WARMUP, 1, value, None, "w")
    serial = []
    value, _ = run(requests, acks, args.rounds, 1, value, serial, "s")
    value, per = run(requests, acks, args.rounds, args.depth, value, None, "p")
    requests.put(None)
    proc.join()
    if proc.exitcode != 0:
        sys.exit(f"python-handoff: consumer exited with {proc.exitcode}")
    serial.sort()
    n = len(serial)
    print(f"python-handoff: mode=serial rounds={n} median_us={serial[n // 2]:.1f} "
          f"p99_us={serial[min(n - 1, n * 99 // 100)]:.1f}")
    print(f"python-handoff: mode=inflight{args.depth} rounds={args.rounds} per_handoff_us={per:.1f}")
    on, how = gpushm.speedups()
    print(f"python-handoff: gpushm through Python ({how if on else 'ctypes: ' + how}), "
          f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
