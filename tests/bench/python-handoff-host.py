#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Row 10's Python figure (run by bench-handoff-host, which prints it beside the same hand-off
through C): a fresh 4 KiB host tensor handed from a producer process to a consumer process
through the public package, the way bench-handoff-host does it in C, over the same kind of
socketpair, so that the two differ only in the language.  With --device cuda:N, rows 1 and
2's hand-off the same way (gpushm-bench runs it beside its C figures): a fresh 1 MiB tensor
of device memory filled through PyTorch, read back 4 bytes by the consumer.

Producer, per hand-off: gpushm.empty(name, 1024, "uint32") (host memory), fill it through
NumPy, send its name.  Consumer: numpy.asarray(gpushm.open(name, readonly=True)), read the
first word, check it, close, ack.  (Device memory: created uninitialized=True, as
gpushm-bench's producer does, since fill_() writes all of it; torch.from_dlpack() of
each, fill_() and a stream synchronize; the consumer reads element 0 with .item().)
Producer, on the ack: close_unlink().  The package is measured with its C speedups
(gpushm/_speedups.c, built here as pip builds them; --binding ctypes: without them).
--binding floor: the same calls through
tests/bench/python-binding-floor.c (built here, for this interpreter, against
$GPUSHM_LIBRARY) instead of the package: the Python figure's floor, host memory only.
--phases: also the serial hand-off's steps
(create, fill, hand-over, close_unlink), as bench-handoff-host --phases splits C's, and
finer: fill's view (numpy.asarray / torch.from_dlpack) and write, and the consumer's open,
view, read and close (each timed in its own process).
--profile DIR: where the Python time goes: cProfile's table (by own time, which holds the
C calls made through ctypes) of the producer's serial run and of the consumer's whole run,
in DIR/python-handoff-{producer,consumer}.txt (the profiler slows both: the figures printed
are from a run without it only when --profile is not given).  Runs
in the CPU affinity it inherits (bench-handoff-host pins everything to one CPU).  The two
processes fork before either touches CUDA.  Prints
  python-handoff-host: mode=serial rounds=N median_us=X p99_us=Y
  python-handoff-host: phase=STEP median_us=X      (with --phases)
  python-handoff-host: step=STEP median_us=X       (with --phases: the finer steps)
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
PIPELINE_DEPTH = 8  # pipelined hand-offs the consumer starts opens for, at most
DEVICE_WORDS = 262144  # 1 MiB of int32, as gpushm-bench's rows 1 and 2
MSG = struct.Struct("=I48s")  # value, name
ACK = struct.Struct("=iI")  # status, word seen
# $GPUSHM_POLL_US (the benches' --poll): the hand-over's messages are looked for that
# long before sleeping, as libgpushm looks for its replies
POLL_S = int(os.environ.get("GPUSHM_POLL_US") or 0) / 1e6


def recv(sock, size, flags=0):
    if POLL_S and not flags & socket.MSG_DONTWAIT:
        until = time.perf_counter() + POLL_S
        while True:
            try:
                return sock.recv(size, socket.MSG_DONTWAIT)
            except BlockingIOError:
                os.sched_yield()
                if time.perf_counter() >= until:
                    break
    return sock.recv(size, flags)


def build_floor():
    """tests/bench/python-binding-floor.c built for this interpreter against
    $GPUSHM_LIBRARY, imported; or a string saying why it cannot be."""
    import importlib.util
    import shutil
    import subprocess
    import sysconfig
    import tempfile
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return f"no Python.h in {include} (python3-dev)"
    lib = os.environ.get("GPUSHM_LIBRARY", "")
    if not os.path.exists(lib):
        return "GPUSHM_LIBRARY names no libgpushm"
    here = os.path.dirname(os.path.abspath(__file__))
    out = tempfile.mkdtemp(prefix="gpushm-binding-floor-")
    try:
        so = os.path.join(out, "python_binding_floor" + sysconfig.get_config_var("EXT_SUFFIX"))
        cc = subprocess.run(
            [os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-I", include,
             "-I", os.path.join(here, "..", "..", "include"), "-o", so,
             os.path.join(here, "python-binding-floor.c"), lib,
             "-Wl,-rpath," + os.path.dirname(os.path.abspath(lib))],
            capture_output=True, text=True)
        if cc.returncode != 0:
            return f"building python-binding-floor.c failed: {cc.stderr.strip()[-300:]}"
        spec = importlib.util.spec_from_file_location("python_binding_floor", so)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        shutil.rmtree(out, ignore_errors=True)


def profiled(path, function, *args):
    """function(*args) under cProfile, its table written to path; returns its value."""
    import cProfile
    import pstats
    profile = cProfile.Profile()
    try:
        return profile.runcall(function, *args)
    finally:
        with open(path, "w") as f:
            pstats.Stats(profile, stream=f).sort_stats("tottime").print_stats(40)


def build_speedups():
    """The package's C speedups compiled for this interpreter, as pip's build compiles
    them, and named in GPUSHM_SPEEDUPS for the package to load (a source tree holds no
    built module); where they cannot be, the package takes its ctypes path and says why."""
    import atexit
    import shutil
    import tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "python", "_build_backend"))
    try:
        import gpushm_build
    finally:
        sys.path.pop(0)
    out = tempfile.mkdtemp(prefix="gpushm-speedups-")
    atexit.register(shutil.rmtree, out, True)
    name, why = gpushm_build.compile_speedups(out)
    if name is None:
        print(f"python-handoff-host: the package's C speedups could not be built: {why}")
    else:
        os.environ["GPUSHM_SPEEDUPS"] = os.path.join(out, name)


def consumer(sock, device, floor, steps):
    """Opens, views, reads and closes each tensor it is sent, and acks; with steps (a
    list), each serial hand-off's four steps are timed and their medians printed."""
    import gpushm
    if device == "cpu":
        import numpy
        view = numpy.asarray

        def read(v):
            return int(v[0])
        if floor is not None:
            floor.connect()

            def open_(name):
                return floor.open(name)
        else:
            def open_(name):
                return gpushm.open(name, readonly=True)
    else:
        import torch
        torch.cuda.init()
        view = torch.from_dlpack

        def open_(name):
            return gpushm.open(name, device=device)

        def read(v):
            return int(v[0].item())
    readonly, where = (True, None) if device == "cpu" else (False, device)
    clock = time.perf_counter
    timed = [] if steps is not None else None
    ahead = collections.deque()  # pipelined hand-offs: (value, name, its open started)
    while True:
        # every pipelined message already here has its open started before one is read
        while len(ahead) < PIPELINE_DEPTH:
            try:
                msg = recv(sock, MSG.size, socket.MSG_DONTWAIT if ahead else 0)
            except BlockingIOError:
                break
            value, raw = MSG.unpack(msg) if len(msg) == MSG.size else (0, b"")
            name = raw.rstrip(b"\0").decode()
            if not name.startswith("handoff.q."):
                assert not ahead, "a message of another kind while pipelined ones are out"
                break
            ahead.append((value, name, gpushm.open_start(name, readonly=readonly,
                                                         device=where)))
        if ahead:
            value, name, pending = ahead.popleft()
        elif value == 0:
            break
        a = clock()
        t = pending.finish() if name.startswith("handoff.q.") else open_(name)
        b = clock()
        v = view(t)
        c = clock()
        seen = read(v)
        d = clock()
        del v
        t.close()
        e = clock()
        if timed is not None and name.startswith("handoff.s."):
            timed.append((b - a, c - b, d - c, e - d))
        sock.send(ACK.pack(0 if seen == value else 1, seen & 0xFFFFFFFF))
    if timed:
        for i, label in enumerate(CONSUMER_STEPS):
            us = sorted(row[i] * 1e6 for row in timed)
            print(f"python-handoff-host: step={label} median_us={us[len(us) // 2]:.1f}",
                  flush=True)
    return 0


def producer(device, floor):
    """(create(name), view(tensor), write(view, value), unlink(tensor)): a fresh tensor,
    its array (NumPy) or tensor (PyTorch), value written everywhere in it and visible;
    then its close_unlink()."""
    import gpushm
    if device == "cpu":
        import numpy

        def write(v, value):
            v.fill(value)
        if floor is not None:
            floor.connect()
            return (lambda name: floor.create(name, WORDS * 4), numpy.asarray, write,
                    lambda t: t.close_unlink())
        return (lambda name: gpushm.empty(name, WORDS, "uint32"), numpy.asarray, write,
                lambda t: t.buffer.close_unlink())
    import torch

    def create(name):
        return gpushm.empty(name, DEVICE_WORDS, "int32", device=device, uninitialized=True)

    def write(v, value):
        v.fill_(value)
        torch.cuda.current_stream().synchronize()
    return create, torch.from_dlpack, write, lambda t: t.buffer.close_unlink()


def pipelined(device, make):
    """make with its create pipelined: each hand-off's create finished where make's
    would have been made, the next one's started at once (its name is known), so that
    gpushmd makes it while this one is written and handed over.  Returns it, and what
    finishes the create left started after the last hand-off."""
    import gpushm
    started = {}

    def start(value):
        name = f"handoff.q.{value}"
        if device == "cpu":
            return gpushm.empty_start(name, WORDS, "uint32")
        return gpushm.empty_start(name, DEVICE_WORDS, "int32", device=device,
                                  uninitialized=True)

    def create(name):
        value = int(name.rsplit(".", 1)[1])
        pending = started.pop(value, None) or start(value)
        started[value + 1] = start(value + 1)
        return pending.finish()

    def leftover():
        for pending in started.values():
            pending.finish().buffer.close_unlink()
        started.clear()
    return (create,) + tuple(make[1:]), leftover


# --phases: the serial hand-off's steps as bench-handoff-host --phases splits C's
PHASES = ("create", "fill", "hand-over", "close_unlink")
# ... and finer (printed as step=NAME): fill's two, and the consumer's four
PRODUCER_STEPS = ("producer-view", "producer-write")
CONSUMER_STEPS = ("consumer-open", "consumer-view", "consumer-read", "consumer-close")


def run(sock, make, rounds, depth, value, per_us, tag, phases=None):
    create, view, write, unlink = make
    clock = time.perf_counter
    outstanding = collections.deque()
    sent = done = 0
    t0 = clock()
    while done < rounds:
        while sent < rounds and sent - done < depth:
            start = clock()
            value += 1
            name = f"handoff.{tag}.{value}"
            t = create(name)
            viewing = clock()
            v = view(t)
            writing = clock()
            write(v, value)
            del v
            handing = clock()
            sock.send(MSG.pack(value, name.encode()))
            outstanding.append((start, value, t, viewing, writing, handing))
            sent += 1
        status, seen = ACK.unpack(recv(sock, ACK.size))
        acked = clock()
        start, want, t, viewing, writing, handing = outstanding.popleft()
        if status != 0:
            sys.exit(f"python-handoff-host: hand-off {want} failed (status {status}, "
                     f"word {seen:#x})")
        unlink(t)
        end = clock()
        if per_us is not None:
            per_us.append((end - start) * 1e6)
        if phases is not None:
            for i, us in enumerate((viewing - start, handing - viewing, acked - handing,
                                    end - acked, writing - viewing, handing - writing)):
                phases[i].append(us * 1e6)
        done += 1
    return value, (clock() - t0) * 1e6 / rounds


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
    parser.add_argument("--device", default="cpu", help="cpu (host memory) or cuda:N")
    parser.add_argument("--binding", choices=("package", "ctypes", "floor"), default="package",
                        help="the package (with its C speedups, built here where they can "
                             "be), the package without them, or the thinnest binding of its "
                             "calls (host memory)")
    parser.add_argument("--phases", action="store_true",
                        help="also each step of the serial hand-off, as medians")
    parser.add_argument("--profile", metavar="DIR",
                        help="cProfile tables of the producer and the consumer into DIR")
    args = parser.parse_args()
    try:
        if args.device == "cpu":
            import numpy  # noqa: F401
        else:
            import torch  # noqa: F401
    except ImportError as e:
        print(f"python-handoff-host: skipped: no {e.name} for this python3")
        return 0
    if args.binding == "ctypes":
        os.environ["GPUSHM_PURE_PYTHON"] = "1"
    elif args.binding == "package" and not os.environ.get("GPUSHM_SPEEDUPS"):
        build_speedups()
    import gpushm
    from gpushm import _accel
    floor = None
    if args.binding == "floor":
        if args.device != "cpu":
            sys.exit("python-handoff-host: --binding floor hands off host memory only")
        floor = build_floor()
        if isinstance(floor, str):
            print(f"python-handoff-host: skipped: {floor}")
            return 0
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        mine.close()
        code = 1
        try:
            steps = [] if args.phases else None
            if args.profile:
                code = profiled(os.path.join(args.profile, "python-handoff-consumer.txt"),
                                consumer, theirs, args.device, floor, steps)
            else:
                code = consumer(theirs, args.device, floor, steps)
        finally:
            os._exit(code)
    theirs.close()
    make = producer(args.device, floor)
    value, _ = run(mine, make, args.warmup, 1, 0, None, "w")
    serial = []
    # bench-handoff-host reads gpushmd's CPU time at these two lines
    print("python-handoff-host: serial starts", flush=True)
    before = cpu_ns(os.getpid()), cpu_ns(pid)
    phases = [[] for _ in PHASES + PRODUCER_STEPS] if args.phases else None
    if args.profile:
        value, _ = profiled(os.path.join(args.profile, "python-handoff-producer.txt"),
                            run, mine, make, args.rounds, 1, value, serial, "s", phases)
    else:
        value, _ = run(mine, make, args.rounds, 1, value, serial, "s", phases)
    after = cpu_ns(os.getpid()), cpu_ns(pid)
    print("python-handoff-host: serial ends", flush=True)
    value, per = run(mine, make, args.rounds, args.depth, value, None, "p")
    piped = None
    if floor is None and hasattr(gpushm, "empty_start"):
        # the consumer starts each open as its message comes (names handoff.q.*)
        make_q, leftover = pipelined(args.device, make)
        value, _ = run(mine, make_q, args.warmup, args.depth, value, None, "q")
        value, piped = run(mine, make_q, args.rounds, args.depth, value, None, "q")
        leftover()
        value += 1  # (the leftover's)
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
    for i, us in enumerate(phases or ()):
        us.sort()
        what = (f"phase={PHASES[i]}" if i < len(PHASES)
                else f"step={PRODUCER_STEPS[i - len(PHASES)]}")
        print(f"python-handoff-host: {what} median_us={us[len(us) // 2]:.1f}")
    print(f"python-handoff-host: mode=inflight{args.depth} rounds={args.rounds} "
          f"per_handoff_us={per:.1f}")
    if piped is not None:
        print(f"python-handoff-host: mode=pipelined{args.depth} rounds={args.rounds} "
              f"per_handoff_us={piped:.1f}")
    print(f"python-handoff-host: gpushm {gpushm.__version__} through Python "
          f"{sys.version.split()[0]}, {'with' if _accel.speedups else 'without'} its C "
          f"speedups ({_accel.WHY})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
