# SPDX-License-Identifier: MIT
"""Timelines through the package (docs/sync.md): CPU signals and waits, values that only
grow, read-only opens that wait and cannot signal, a promiser killed while a waiter
waits (SignallerLost), and the state gpushmctl show prints."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import gpushm


def test_signal_and_wait(conn, name):
    with conn.create_timeline(name) as tl:
        assert isinstance(tl, gpushm.Timeline) and tl.value == 0 and tl.sync_method == "host"
        tl.signal(3)
        assert tl.value == 3
        with pytest.raises(gpushm.InvalidArgument, match="signal 3 is not above its counter, 3"):
            tl.signal(3)
        with pytest.raises(ValueError):
            tl.signal(-1)
        tl.wait(3, timeout=0)
        with pytest.raises(gpushm.Timeout, match="value 4 of .* not reached within"):
            tl.wait(4, timeout=0.02)
        # another connection's waiter, woken by this one's signal
        other = gpushm.connect(None, "waiter").open_timeline(name)
        got = []
        t = threading.Thread(target=lambda: got.append(other.wait(9, timeout=10) or "ok"))
        t.start()
        time.sleep(0.02)
        tl.signal(9)
        t.join()
        assert got == ["ok"] and other.value == 9
        other.close()
        with pytest.raises(gpushm.Exists):
            conn.create_timeline(name)
        with conn.create_timeline(name, exist_ok=True) as same:
            assert same.id == tl.id
        with pytest.raises(gpushm.InvalidArgument, match="is a timeline, not a buffer"):
            conn.open(name)
        tl.close_unlink()
    with pytest.raises(gpushm.NotFound):
        conn.open_timeline(name)


def test_read_only(conn, name):
    with conn.create_timeline(name, mode=0o644) as tl:
        tl.signal(2)
        with conn.open_timeline(name, readonly=True) as ro:
            ro.wait(2, timeout=0)
            with pytest.raises(gpushm.PermissionDenied, match="open read-only"):
                ro.signal(3)
            with pytest.raises(gpushm.PermissionDenied):
                ro.promise(5)
        conn.unlink(name)


def test_promiser_killed(conn, name):
    with conn.create_timeline(name) as tl:
        code = (f"import gpushm, time\n"
                f"t = gpushm.connect(None, 'promiser').open_timeline({name!r})\n"
                f"t.signal(1)\n"
                f"t.promise(6)\n"
                f"print('promised', flush=True)\n"
                f"time.sleep(60)\n")
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ))
        try:
            assert p.stdout.readline().strip() == "promised"
            with pytest.raises(gpushm.InvalidArgument, match="another connection promised"):
                tl.signal(2)
            st = tl.sync_state()
            assert st["counter"] == 1 and st["promised_upto"] == 6
            killed = time.monotonic()
            p.send_signal(signal.SIGKILL)
            with pytest.raises(gpushm.SignallerLost, match="signaller lost"):
                tl.wait(5, timeout=10)
            assert time.monotonic() - killed < 10
        finally:
            p.kill()
            p.wait()
        assert tl.value == 6 and tl.value_lost(2) and not tl.value_lost(1)
        st = tl.sync_state()
        assert (st["lost_from"], st["lost_upto"]) == (1, 6) and st["promised_upto"] == 0
        tl.signal(7)  # the place is free
        conn.unlink(name)
