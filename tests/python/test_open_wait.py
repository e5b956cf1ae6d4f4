# SPDX-License-Identifier: MIT
"""open(wait=): an open that waits for its name (gpushm_open_opts_t.wait_ms), through the
package: the name made during the wait is opened then; one never made raises NotFound at
the deadline, saying so; a wait that is no number of seconds, or longer than gpushmd
grants, is refused before anything is sent."""
import math
import threading
import time

import numpy as np
import pytest

import gpushm


def make_later(name, delay):
    def run():
        time.sleep(delay)
        with gpushm.connect() as c:
            gpushm.share(name, np.arange(6, dtype=np.int16), conn=c).close()
    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize("wait", [5, math.inf])
def test_made_during_the_wait(name, wait):
    maker = make_later(name, 0.3)
    start = time.monotonic()
    t = gpushm.open(name, wait=wait)
    took = time.monotonic() - start
    maker.join()
    assert 0.25 <= took < 4, took
    assert np.asarray(t).tolist() == list(range(6)) and t.dtype.name == "int16"
    t.close()
    gpushm.unlink(name)


def test_there_already_is_not_waited_for(name):
    gpushm.share(name, np.zeros(2)).close()
    start = time.monotonic()
    gpushm.open(name, wait=30).close()
    assert time.monotonic() - start < 2


def test_never_made(name):
    start = time.monotonic()
    with pytest.raises(gpushm.NotFound, match=r"was made within 200 ms"):
        gpushm.open(name, wait=0.2)
    assert time.monotonic() - start >= 0.19


@pytest.mark.parametrize("wait", [-1, float("nan"), 3601])
def test_refused_waits(conn, name, wait):
    with pytest.raises(gpushm.InvalidArgument):
        conn.open(name, wait=wait)


def test_only_by_name(conn):
    with pytest.raises(gpushm.InvalidArgument, match="by name"):
        conn.open(7, wait=1)
