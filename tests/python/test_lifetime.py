# SPDX-License-Identifier: MIT
"""Who keeps a buffer open: every view holds an open of its own, and the last one to go
— not the Python handle — releases the daemon's reference.  Checked on the daemon's
side (gpushm.list(): references), with each way a view is made; closed handles refuse
use; forked children and interpreter shutdown close nothing they must not."""
import ctypes
import gc
import os

import numpy as np
import pytest

import gpushm
from conftest import daemon_refs, run_python


def _consumed_by_fake_consumer(capsule, versioned):
    """What a DLPack consumer does: rename the capsule, own the tensor, later call its
    deleter."""
    api = ctypes.pythonapi
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.restype = ctypes.c_int
    name = "dltensor_versioned" if versioned else "dltensor"
    ptr = gpushm._capsule.pointer(capsule, name)
    assert api.PyCapsule_SetName(capsule, USED[versioned]) == 0
    struct = gpushm._lib.DLManagedTensorVersioned if versioned else gpushm._lib.DLManagedTensor
    return ctypes.cast(ptr, ctypes.POINTER(struct))


# static: PyCapsule_SetName keeps the pointer
USED = {True: ctypes.c_char_p(b"used_dltensor_versioned"), False: ctypes.c_char_p(b"used_dltensor")}


@pytest.mark.parametrize("how", ["asarray", "from_dlpack", "memoryview", "view_of_view"])
def test_view_outlives_handle(name, how):
    gpushm.share(name, np.arange(1000, dtype=np.int64)).close()
    assert daemon_refs(name) == 0
    t = gpushm.open(name)
    if how == "asarray":
        view = np.asarray(t)
    elif how == "from_dlpack":
        view = np.from_dlpack(t)
    elif how == "memoryview":
        view = np.frombuffer(t.memoryview(), dtype=np.int64)
    else:
        view = np.asarray(t)[10:20][::2]
    assert daemon_refs(name) == 1
    t.close()
    del t
    gc.collect()
    # the handle is gone; the view keeps the buffer mapped and the daemon's reference
    assert daemon_refs(name) == 1
    assert int(view.sum()) == (sum(range(1000)) if how != "view_of_view" else 10 + 12 + 14 + 16 + 18)
    del view
    assert daemon_refs(name) == 0


def test_handle_and_views_in_any_order(name):
    gpushm.empty(name, 16, "float32").close()
    t = gpushm.open(name)
    a = np.asarray(t)
    b = np.from_dlpack(t)
    c = t.memoryview()
    del a, t, c
    assert daemon_refs(name) == 1  # b's
    assert b.shape == (16,) and not b.any()
    del b
    assert daemon_refs(name) == 0


def test_with_block_closes_at_its_end(name):
    """A host tensor's arrays keep their own opens (not the Tensor): leaving the with
    block releases the handle's at once, and the arrays' go with them."""
    gpushm.empty(name, 8, "int8").close()
    with gpushm.open(name) as t:
        copy = np.asarray(t).copy()
        kept = np.asarray(t)
    assert daemon_refs(name) == 1  # kept's
    del kept
    assert daemon_refs(name) == 0
    assert copy.shape == (8,) and t.closed


def test_unconsumed_capsule_releases(name):
    gpushm.empty(name, 4, "int32").close()
    t = gpushm.open(name)
    caps = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]
    t.close()
    assert daemon_refs(name) == 1
    del caps  # never consumed: libgpushm's destructor deletes the tensors
    assert daemon_refs(name) == 0


@pytest.mark.parametrize("versioned", [False, True])
def test_consumed_capsule_belongs_to_its_consumer(name, versioned):
    gpushm.empty(name, 4, "int32").close()
    t = gpushm.open(name)
    cap = t.__dlpack__(max_version=(1, 0) if versioned else None)
    managed = _consumed_by_fake_consumer(cap, versioned)
    del cap, t
    assert daemon_refs(name) == 1  # the consumer owns the tensor now
    managed.contents.deleter(managed)
    assert daemon_refs(name) == 0


def test_close_unlink_with_a_view_alive(name):
    t = gpushm.empty(name, 8, "uint8")
    a = np.asarray(t)
    t.buffer.close_unlink()
    assert t.closed
    info = [i for i in gpushm.list() if i.name == name]
    assert len(info) == 1 and not info[0].linked and info[0].refs == 1
    a[:] = 9  # still mapped
    with pytest.raises(gpushm.NotFound):
        gpushm.open(name)
    del a, t
    assert daemon_refs(name) is None  # unlinked and released: gone


def test_closed_handles_refuse_use(conn, name):
    b = conn.create(name, 64)
    t = b.view("uint8")
    b.close()
    assert b.closed and not t.closed  # the view has its own open
    for use in (lambda: b.ptr, lambda: b.view(), lambda: b.release(),
                lambda: b.close_unlink(), lambda: b.dup()):
        with pytest.raises(gpushm.ClosedError):
            use()
    t.close()
    for use in (lambda: t.ptr, lambda: t.__dlpack__(), lambda: np.asarray(t),
                lambda: t.memoryview(), lambda: t.__array_interface__, lambda: t.buffer.view()):
        with pytest.raises(gpushm.ClosedError):
            use()
    b.close()  # idempotent
    conn.close()
    with pytest.raises(gpushm.ClosedError, match="connection is closed"):
        conn.open(name)
    assert isinstance(gpushm.ClosedError("x"), ValueError)


def test_dup_is_independent(name):
    t = gpushm.empty(name, 4, "float64")
    b2 = t.buffer.dup()
    t.close()
    assert not b2.closed and daemon_refs(name) == 1
    b2.view("float64")
    b2.close()
    assert daemon_refs(name) == 0


def test_forked_child_closes_nothing_of_its_parent(name):
    t = gpushm.empty(name, 32, "uint8")
    a = np.asarray(t)
    cap = t.__dlpack__(max_version=(1, 0))
    pid = os.fork()
    if pid == 0:
        # the child's garbage collector meets the parent's handles: refused in C, nothing
        # sent on the parent's socket
        status = 0
        try:
            try:
                t.buffer.ptr
                status = 3
            except gpushm.ClosedError:
                pass
            del a, cap
            t.close()
            del t
            gc.collect()
        except BaseException:
            status = 4
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert daemon_refs(name) == 1
    a[:] = 1  # still mapped in the parent
    t.close()
    assert daemon_refs(name) == 1
    del a, cap
    assert daemon_refs(name) == 0


def test_interpreter_shutdown_with_live_views(name):
    """Views, handles and unconsumed capsules alive at exit: the interpreter tears them
    down (C destructors, no Python callbacks) and exits cleanly; the daemon drops the
    references with the connection."""
    gpushm.empty(name, 64, "float32", mode=0o644).close()
    p = run_python(f"""
import numpy as np, gpushm
t = gpushm.open({name!r})
KEEP = [np.asarray(t), np.from_dlpack(t), t.__dlpack__(), t.__dlpack__(max_version=(1, 0)),
        t.memoryview(), t]
import gc; gc.collect()
print("ok")
""")
    assert p.stdout.strip() == "ok" and p.stderr == ""
    assert daemon_refs(name) == 0


def test_close_is_once_and_waits_for_other_holders(conn, name):
    """close() closes its own open once: a second handle of the same buffer in this
    process still reads it; a capsule another thread still holds (a method's local)
    keeps its open until that thread lets go."""
    a = conn.create(name, 4096, mode=0o600)
    b = conn.open(name)
    b.view("uint8")  # (a view of its own, dropped: exercises the same counters)
    a.view("uint8").memoryview()[0] = 42
    a.close()
    assert daemon_refs(name, conn) == 1
    assert np.asarray(b.view("uint8"))[0] == 42
    held = b._cap  # as a method running on another thread holds it
    b.close()
    assert daemon_refs(name, conn) == 1, "closed under a holder"
    del held
    assert daemon_refs(name, conn) == 0
    conn.unlink(name)


def test_close_lets_other_threads_run(name):
    """A close that has to wait (here: for the connection, which another thread's
    request holds while gpushmd is stopped) leaves the GIL to other threads."""
    import signal
    import threading
    import time

    from conftest import Daemon
    d = Daemon()
    try:
        c = gpushm.connect(d.socket, timeout=1.5)
        b = c.create(name, 4096)
        os.kill(d.proc.pid, signal.SIGSTOP)
        stuck = threading.Thread(target=lambda: pytest.raises(gpushm.Error, c.stats))
        stuck.start()
        time.sleep(0.3)  # the request is out; its thread holds the connection
        ticks = []
        stop = threading.Event()

        def ticker():
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.01)
        t = threading.Thread(target=ticker)
        t.start()
        time.sleep(0.05)
        t0 = time.monotonic()
        b.close()
        t1 = time.monotonic()
        stop.set()
        t.join()
        os.kill(d.proc.pid, signal.SIGCONT)
        stuck.join()
        assert t1 - t0 > 0.3, "close() did not wait: the test shows nothing"
        during = [x for x in ticks if t0 < x < t1]
        assert len(during) >= 10, f"other threads stalled for {t1 - t0:.2f} s during close()"
        c.close()
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
        d.stop()
