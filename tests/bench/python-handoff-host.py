#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Row 10's Python figure (run by bench-handoff-host, which prints it beside the same hand-off
through C): a fresh 4 KiB host tensor handed from a producer process to a consumer process
through the public package, the way bench-handoff-host does it in C, over the same kind of
socketpair, so that the two differ only in the language.

Producer, per hand-off: gpushm.empty(name, 1024, "uint32") (host memory), fill it through
NumPy, send its name.  Consumer: numpy.asarray(gpushm.open(name, readonly=True)), read the
first word, check it, close, ack.  Producer, on the ack: close_unlink().  Runs in the CPU
affinity it inherits (bench-handoff-host pins everything to one CPU).  Prints
  python-handoff-host: mode=serial rounds=N median_us=X p99_us=Y
  python-handoff-host: mode=inflightD rounds=N per_handoff_us=Z
Exits non-zero on a wrong word or a failure."""
import argparse
import collections
import os
import socket
import struct
import sys
import time

WORDS = 1024  # 4 KiB of uint32
MSG = struct.Struct("=I48s")  # value, name
ACK = struct.Struct("=iI")  # status, word seen


def consumer(sock):
    import numpy

    import gpushm
    while True:
        msg = sock.recv(MSG.size)
        if len(msg) != MSG.size:
            return 0
        value, raw = MSG.unpack(msg)
        if value == 0:
            return 0
        t = gpushm.open(raw.rstrip(b"\0").decode(), readonly=True)
        seen = int(numpy.asarray(t)[0])
        t.close()
        sock.send(ACK.pack(0 if seen == value else 1, seen))


def run(sock, rounds, depth, value, per_us, tag):
    import numpy

    import gpushm
    outstanding = collections.deque()
    sent = done = 0
    t0 = time.perf_counter()
    while done < rounds:
        while sent < rounds and sent - done < depth:
            start = time.perf_counter()
            value += 1
            name = f"handoff.{tag}.{value}"
            t = gpushm.empty(name, WORDS, "uint32")
            numpy.asarray(t).fill(value)
            sock.send(MSG.pack(value, name.encode()))
            outstanding.append((start, value, t))
            sent += 1
        status, seen = ACK.unpack(sock.recv(ACK.size))
        start, want, t = outstanding.popleft()
        if status != 0:
            sys.exit(f"python-handoff-host: hand-off {want} failed (status {status}, "
                     f"word {seen:#x})")
        t.buffer.close_unlink()
        if per_us is not None:
            per_us.append((time.perf_counter() - start) * 1e6)
        done += 1
    return value, (time.perf_counter() - t0) * 1e6 / rounds


def cpu_ns(pid):
    """Nanoseconds pid has run on a CPU (0 if unknown)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--depth", type=int, default=8)
    args = parser.parse_args()
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("python-handoff-host: skipped: no NumPy for this python3")
        return 0
    import gpushm
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        mine.close()
        code = 1
        try:
            code = consumer(theirs)
        finally:
            os._exit(code)
    theirs.close()
    value, _ = run(mine, args.warmup, 1, 0, None, "w")
    serial = []
    # bench-handoff-host reads gpushmd's CPU time at these two lines
    print("python-handoff-host: serial starts", flush=True)
    before = cpu_ns(os.getpid()), cpu_ns(pid)
    value, _ = run(mine, args.rounds, 1, value, serial, "s")
    after = cpu_ns(os.getpid()), cpu_ns(pid)
    print("python-handoff-host: serial ends", flush=True)
    value, per = run(mine, args.rounds, args.depth, value, None, "p")
    mine.send(MSG.pack(0, b""))
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit(f"python-handoff-host: consumer exited with status {status:#x}")
    serial.sort()
    n = len(serial)
    print(f"python-handoff-host: mode=serial rounds={n} median_us={serial[n // 2]:.1f} "
          f"p99_us={serial[min(n - 1, n * 99 // 100)]:.1f}")
    print(f"python-handoff-host: cpu_per_serial_handoff_us "
          f"producer={(after[0] - before[0]) / 1e3 / args.rounds:.1f} "
          f"consumer={(after[1] - before[1]) / 1e3 / args.rounds:.1f}")
    print(f"python-handoff-host: mode=inflight{args.depth} rounds={args.rounds} "
          f"per_handoff_us={per:.1f}")
    print(f"python-handoff-host: gpushm {gpushm.__version__} through Python "
          f"{sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
