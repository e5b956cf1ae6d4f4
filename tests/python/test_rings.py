# SPDX-License-Identifier: MIT
"""Frame rings through the package (docs/rings.md): a producer and a consumer on two
connections, frames written and read through slot memoryviews, a producer that waits for
its consumer, a consumer that takes the latest, a producer killed mid-stream
(SignallerLost), an observer that takes nothing, and the capsule that closes a ring."""
import os
import signal
import subprocess
import sys
import time

import pytest

import gpushm


def test_frames(conn, name):
    with conn.create_ring(name, 3, 4096, backend="host") as ring:
        assert isinstance(ring, gpushm.Ring) and ring.producer
        assert (ring.slots, ring.slot_size, ring.consumers, ring.presented) == (3, 4096, 0, 0)
        assert ring.slot_stride % 65536 == 0
        other = gpushm.connect(None, "consumer")
        cons = other.open_ring(name)
        assert not cons.producer and ring.consumers == 1 and ring.consumer_planes == 0
        for i in range(1, 4):
            f = ring.acquire_slot(timeout=1)
            assert (f.frame, f.slot) == (i, i - 1)
            ring.slot(f.slot)[:8] = i.to_bytes(8, "little")
            ring.present(f)
        with pytest.raises(gpushm.Timeout, match=r"slot 0 \(frame 4\) still held by consumer"):
            ring.acquire_slot(timeout=0.02)
        g = cons.acquire_frame(timeout=1)
        assert g == gpushm.Frame(1, 0, 0)
        view = cons.slot(g.slot)
        assert view.readonly and int.from_bytes(view[:8], "little") == 1
        with pytest.raises(TypeError):
            view[0] = 0
        cons.release(g)
        f = ring.acquire_slot(timeout=1)
        assert f.frame == 4
        ring.present(f)
        g = cons.acquire_frame(latest=True, timeout=1)
        assert g.frame == 4 and int.from_bytes(cons.slot(g.slot)[:8], "little") == 1  # slot 0
        cons.release(g)
        with pytest.raises(gpushm.InvalidArgument, match="not one this consumer holds"):
            cons.release(g)
        with pytest.raises(gpushm.InvalidArgument, match="a producer's"):
            cons.acquire_slot(timeout=0)
        st = cons.sync_state()
        assert st["counter"] == 4 and st["promised_upto"] > 4
        roles = {(h.read_write, h.ring_consumer) for b in conn.list() if b.name == name
                 for h in b.holders}
        assert roles == {(True, False), (False, True)} and \
            [b.kind for b in conn.list() if b.name == name] == ["ring"]
        watcher = conn.open_ring(name, observer=True)
        assert watcher.presented == 4 and ring.consumers == 1
        with pytest.raises(gpushm.InvalidArgument, match="observes"):
            watcher.acquire_frame(timeout=0)
        watcher.close()
        cons.close()
        other.close()
        ring.close_unlink()
    with pytest.raises(gpushm.NotFound):
        conn.open_ring(name)


def test_kinds(conn, name):
    with conn.create_ring(name, 2, 64, backend="host") as ring:
        with pytest.raises(gpushm.InvalidArgument, match="is a ring, not a buffer"):
            conn.open(name)
        with pytest.raises(gpushm.InvalidArgument, match="a ring has 2 to 64 slots"):
            conn.create_ring(name + "-x", 1, 64, backend="host")
        with pytest.raises(gpushm.LimitExceeded):
            conn.create_ring(name + "-x", 65, 64, backend="host")
        ring.close_unlink()


def test_producer_killed(conn, name):
    ring = conn.create_ring(name, 2, 64, backend="host")
    ring.close()  # persistent: the ring stays for the child to produce into
    # its creator promised the first frames; its close ends that stream (gpushmd breaks
    # the promise in its time): frames go on after those
    watch = conn.open_ring(name, observer=True)
    for _ in range(2000):
        if watch.sync_state()["promised_upto"] == 0:
            break
        time.sleep(0.001)
    base = watch.sync_state()["counter"]
    assert base == watch.sync_state()["lost_upto"] > 0
    watch.close()
    cons = conn.open_ring(name)
    code = (f"import gpushm, time\n"
            f"r = gpushm.connect(None, 'producer').open_ring({name!r}, producer=True)\n"
            f"f = r.acquire_slot(timeout=5)\n"
            f"r.present(f)\n"
            f"print('presented', flush=True)\n"
            f"time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ))
    try:
        assert p.stdout.readline().strip() == "presented"
        f = cons.acquire_frame(timeout=5)
        assert f.frame == base + 1
        cons.release(f)
        killed = time.monotonic()
        p.send_signal(signal.SIGKILL)
        with pytest.raises(gpushm.SignallerLost, match="signaller lost"):
            cons.acquire_frame(timeout=10)
        assert time.monotonic() - killed < 10
    finally:
        p.kill()
        p.wait()
    # the next producer's first frame comes through
    producer = gpushm.connect(None, "next producer")  # one role a connection
    with pytest.raises(gpushm.InvalidArgument, match="produce on a connection of its own"):
        conn.open_ring(name, producer=True)
    with producer.open_ring(name, producer=True) as again:
        f = again.acquire_slot(timeout=1)
        again.present(f)
        assert cons.acquire_frame(timeout=1).frame == f.frame
    producer.close()
    cons.close()
    conn.unlink(name)
