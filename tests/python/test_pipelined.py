# SPDX-License-Identifier: MIT
"""Pipelined opens and creates through the package (gpushm.open_start(),
gpushm.empty_start(), Connection.open_start()/create_start(), Pending.finish()): each
finish gives what the blocking call gives, in any order and after other calls on the
connection; refusals come from the finish, with their own message; a Pending finishes
once; one dropped unfinished closes what it opened; the limit; uid 65534 gets no more
than gpushm.open() gives it."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import daemon_refs, other_user_env, run_python

import gpushm


def test_stream_in_and_out_of_order(conn, name):
    starts = [gpushm.empty_start(f"{name}-{i}", (4, 8), "int32", conn=conn) for i in range(8)]
    conn.ping()  # reads past all eight replies, keeping them for their finish
    tensors = [None] * 8
    for i in (7, 0, 3, 1, 2, 6, 4, 5):
        tensors[i] = starts[i].finish()
        assert starts[i].finished
    for i, t in enumerate(tensors):
        assert isinstance(t, gpushm.Tensor) and t.shape == (4, 8) and t.buffer.name == f"{name}-{i}"
        np.asarray(t)[:] = i
    opens = [gpushm.open_start(f"{name}-{i}", readonly=True) for i in range(8)]
    for i in reversed(range(8)):
        t = opens[i].finish()
        a = np.asarray(t)
        assert a.dtype == np.int32 and a.shape == (4, 8) and (a == i).all()
        assert t.readonly and not a.flags.writeable
        del a
        t.close()
    for t in tensors:
        t.buffer.close_unlink()


def test_connection_level(conn, name):
    p = conn.create_start(name, 64, mode=0o640, metadata=b"meta")
    b = p.finish()
    assert isinstance(b, gpushm.Buffer) and b.size == 64 and b.metadata == b"meta"
    q = conn.open_start(name)  # this connection has it open: answered at once, same open
    again = q.finish()
    assert again.id == b.id
    again.close()
    b.close_unlink()


def test_refusals_come_from_the_finish(conn, name):
    conn.create(name, 64).close()
    dup = conn.create_start(name, 64)
    missing = gpushm.open_start(f"{name}-missing", conn=conn)
    with pytest.raises(gpushm.NotFound):
        conn.unlink(f"{name}-nor-this")  # a failure between start and finish
    with pytest.raises(gpushm.NotFound, match=f"{name}-missing"):
        missing.finish()
    with pytest.raises(gpushm.Exists, match=name):
        dup.finish()
    with pytest.raises(gpushm.ClosedError, match="finished already"):
        dup.finish()
    # what the start checks itself
    with pytest.raises(gpushm.InvalidName):
        gpushm.open_start("-bad", conn=conn)
    with pytest.raises(gpushm.ManifestError):
        gpushm.empty_start(name, (-1,), "int32", conn=conn)

    class Mps:  # (a torch.device of another kind: refused as empty() refuses it)
        type, index = "mps", 0
    for call in (gpushm.empty, gpushm.empty_start):
        with pytest.raises(ValueError, match="not mps"):
            call(f"{name}-mps", (4,), "int32", device=Mps(), conn=conn)
    assert daemon_refs(f"{name}-mps", conn) is None  # nothing made
    conn.unlink(name)


def test_wrong_manifest_joined(conn, name):
    gpushm.empty(name, (2,), "int32", conn=conn).close()
    p = gpushm.empty_start(name, (4,), "float32", conn=conn, open_existing=True)
    with pytest.raises(gpushm.Exists, match="another manifest"):
        p.finish()
    assert daemon_refs(name, conn) == 0  # the open it made was closed
    conn.unlink(name)


def test_dropped_unfinished_closes(conn, name):
    p = conn.create_start(name, 64)
    del p
    gc.collect()
    assert daemon_refs(name, conn) == 0
    conn.unlink(name)


def test_limit(conn, name):
    starts = [conn.create_start(f"{name}-{i}", 64) for i in range(16)]
    with pytest.raises(gpushm.LimitExceeded, match="GPUSHM_PENDING_MAX"):
        conn.create_start(f"{name}-17", 64)
    for p in starts:
        p.finish().close_unlink()


def test_other_uid_gets_no_more(conn, name):
    env = other_user_env(65534)
    conn.create(name, 64, mode=0o644).close()
    conn.create(f"{name}-private", 64, mode=0o600).close()
    run_python(f"""
import gpushm
rw = gpushm.open_start({name!r})
private = gpushm.open_start({name!r} + "-private", readonly=True)
ro = gpushm.open_start({name!r}, readonly=True)
for p in (rw, private):
    try:
        p.finish()
        raise SystemExit("opened what gpushm.open() refuses")
    except (gpushm.PermissionDenied, gpushm.NotFound):
        pass
t = ro.finish()
assert t.readonly
t.close()
""", user=65534, env=env)
    conn.unlink(name)
    conn.unlink(f"{name}-private")
