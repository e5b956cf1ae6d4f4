# SPDX-License-Identifier: MIT
"""Caller-numbered releases and promises through the package (docs/sync.md): values above
the counter only, waits for a value, a promise that makes its connection the only
signaller, and a promiser killed while a waiter waits: SignallerLost."""
import os
import signal
import subprocess
import sys
import time

import pytest

import gpushm


def test_values(conn, name):
    with conn.create(name, 64, sync=True) as b:
        assert b.release(value=7) == 7 and b.release_seq == 7
        with pytest.raises(gpushm.InvalidArgument, match="not above its counter, 7"):
            b.release(value=7)
        with pytest.raises(ValueError):
            b.release(value=-1)
        b.acquire(value=7, timeout=0)
        with pytest.raises(gpushm.Timeout, match="value 8 of .* neither released nor promised"):
            b.acquire(value=8, timeout=0.02)
        with pytest.raises(gpushm.InvalidArgument, match="seq or value"):
            b.acquire(seq=3, value=3)
        assert b.release() == 8  # numbered after a caller's number
        assert not b.value_lost(8)


def test_promise_and_lost(conn, name):
    with conn.create(name, 64, sync=True, mode=0o600) as b:
        code = (f"import gpushm, sys, time\n"
                f"b = gpushm.connect(None, 'promiser').open({name!r})\n"
                f"b.promise(5)\n"
                f"print('promised', flush=True)\n"
                f"time.sleep(60)\n")
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ))
        try:
            assert p.stdout.readline().strip() == "promised"
            with pytest.raises(gpushm.InvalidArgument, match="another connection promised"):
                b.release(value=2)
            with pytest.raises(gpushm.InvalidArgument, match="one promiser at a time"):
                b.promise(9)
            killed = time.monotonic()
            p.send_signal(signal.SIGKILL)
            with pytest.raises(gpushm.SignallerLost, match="value 4 was reached because"):
                b.acquire(value=4, timeout=10)
            assert time.monotonic() - killed < 10
        finally:
            p.kill()
            p.wait()
        assert b.release_seq == 5 and b.value_lost(1) and b.value_lost(5)
        assert not b.value_lost(6)
        st = b.sync_state()
        assert st["counter"] == 5 and st["promised_upto"] == 0
        assert (st["lost_from"], st["lost_upto"]) == (0, 5) and st["lost_client"] > 0
        assert isinstance(gpushm.SignallerLost("x"), gpushm.Error)
        b.promise(6)  # the place is free again
        assert b.sync_state()["promised_upto"] == 6
        b.release(value=6)
        b.acquire(value=6, timeout=0)
