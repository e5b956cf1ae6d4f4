#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch's peer figure for gpushm-bench rows 1 and 2 (docs/performance.md): fresh 1 MiB CUDA
tensors handed from a producer process to a consumer process through a
torch.multiprocessing queue, serially and with DEPTH in flight.  The consumer reads the
first word (4 bytes to the host), checks it, drops the tensor and acks.

Prints, for tests/bench/gpushm-bench.c to parse:
  torch-handoff: mode=serial rounds=N median_us=X p99_us=Y
  torch-handoff: mode=inflightD rounds=N per_handoff_us=Z
or "torch-handoff: skipped: WHY" (exit 0) where torch or CUDA is missing.
Exits non-zero on a wrong word or a failure.  PyTorch runs as users run it: its caching
allocator and its IPC handle cache on (that is the peer, not a floor)."""
import argparse
import collections
import sys
import time

TENSOR_WORDS = 262144  # 1 MiB of int32
WARMUP = 100


def consumer(requests, acks):
    import torch
    torch.cuda.init()
    while True:
        item = requests.get()
        if item is None:
            return
        value, tensor = item
        seen = int(tensor[0].item())  # 4 bytes device -> host
        del tensor, item
        acks.put(0 if seen == value else seen)


def run(requests, acks, rounds, depth, value, per_us):
    import torch
    outstanding = collections.deque()
    sent = done = 0
    t0 = time.perf_counter()
    while done < rounds:
        while sent < rounds and sent - done < depth:
            start = time.perf_counter()
            value += 1
            tensor = torch.empty(TENSOR_WORDS, dtype=torch.int32, device="cuda")
            tensor.fill_(value)
            torch.cuda.current_stream().synchronize()
            requests.put((value, tensor))
            outstanding.append((start, value, tensor))  # the producer keeps it until acked
            sent += 1
        status = acks.get()
        start, want, tensor = outstanding.popleft()
        if status != 0:
            sys.exit(f"torch-handoff: hand-off {want} read {status:#x}, expected {want:#x}")
        del tensor
        if per_us is not None:
            per_us.append((time.perf_counter() - start) * 1e6)
        done += 1
    return value, (time.perf_counter() - t0) * 1e6 / rounds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--depth", type=int, default=8)
    args = parser.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except Exception as e:  # noqa: BLE001 - any import failure means no peer here
        print(f"torch-handoff: skipped: import torch failed ({type(e).__name__}: {e})")
        return 0
    if not torch.cuda.is_available():
        print("torch-handoff: skipped: torch.cuda.is_available() is False")
        return 0
    ctx = mp.get_context("spawn")  # CUDA in a forked child is not supported
    requests, acks = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=consumer, args=(requests, acks))
    proc.start()
    value = 0
    value, _ = run(requests, acks, WARMUP, 1, value, None)
    serial = []
    value, _ = run(requests, acks, args.rounds, 1, value, serial)
    value, per = run(requests, acks, args.rounds, args.depth, value, None)
    requests.put(None)
    proc.join()
    if proc.exitcode != 0:
        sys.exit(f"torch-handoff: consumer exited with {proc.exitcode}")
    serial.sort()
    n = len(serial)
    print(f"torch-handoff: mode=serial rounds={n} median_us={serial[n // 2]:.1f} "
          f"p99_us={serial[min(n - 1, n * 99 // 100)]:.1f}")
    print(f"torch-handoff: mode=inflight{args.depth} rounds={args.rounds} per_handoff_us={per:.1f}")
    print(f"torch-handoff: torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
