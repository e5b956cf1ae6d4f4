# SPDX-License-Identifier: MIT
"""Tensors in and out of host buffers with NumPy: share/open round trips through another
process, every dtype, the manifest as written, empty(), raw buffers of C producers,
bundles."""
import ctypes
import json
import os
import signal

import numpy as np
import pytest

import gpushm
from conftest import daemon_refs, run_python

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float16", "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("dt", NUMPY_DTYPES)
def test_share_open_every_dtype(name, dt):
    rng = np.random.default_rng(len(dt))
    src = (rng.standard_normal((3, 5, 7)) * 100).astype(dt)
    with gpushm.share(name, src) as t:
        assert t.dtype.name == dt and t.shape == (3, 5, 7) and t.device == "cpu"
        with gpushm.open(name, readonly=True) as again:
            got = np.asarray(again)
            assert got.dtype == np.dtype(dt) and got.shape == src.shape
            assert np.array_equal(got, src)
            del got


def test_round_trip_through_another_process(name):
    src = np.arange(4096, dtype=np.float32).reshape(64, 64)
    producer = gpushm.share(name, src, mode=0o644)
    # the consumer is another process: it reads the producer's data and writes its answer
    run_python(f"""
import numpy as np, gpushm
t = gpushm.open({name!r})
a = np.asarray(t)
assert a.dtype == np.float32 and a.shape == (64, 64), (a.dtype, a.shape)
assert np.array_equal(a, np.arange(4096, dtype=np.float32).reshape(64, 64))
a *= -1
""")
    assert np.array_equal(np.asarray(producer), -src)
    producer.close()


def test_manifest_as_written(name):
    src = np.zeros((2, 3), dtype=np.int16)
    t = gpushm.share(name, src)
    doc = json.loads(t.buffer.metadata)
    assert doc == {"gpushm": 1, "tensors": [{"name": "", "dtype": "int16", "shape": [2, 3],
                                             "strides": [3, 1], "offset": 0}]}
    info = [i for i in gpushm.list(metadata=True) if i.name == name][0]
    assert info.metadata == t.buffer.metadata and info.size == 12
    assert [i for i in gpushm.list() if i.name == name][0].metadata is None
    t.close()


def test_non_contiguous_and_odd_shapes(name):
    base = np.arange(60, dtype=np.int32).reshape(6, 10)
    strided = base[::2, ::3]
    assert not strided.flags.c_contiguous
    with gpushm.share(name + "-s", strided) as t:
        assert t.spec.contiguous and t.shape == strided.shape
        assert np.array_equal(np.asarray(gpushm.open(name + "-s")), strided)
    gpushm.unlink(name + "-s")
    scalar = np.array(3.5, dtype=np.float64)
    with gpushm.share(name + "-0d", scalar) as t:
        assert t.shape == () and np.asarray(gpushm.open(name + "-0d"))[()] == 3.5
    gpushm.unlink(name + "-0d")
    empty = np.zeros((0, 4), dtype=np.float32)
    with gpushm.share(name + "-e", empty) as t:
        assert t.shape == (0, 4) and np.asarray(gpushm.open(name + "-e")).shape == (0, 4)
    gpushm.unlink(name + "-e")


def test_empty_reads_zeros_and_is_writable(name):
    t = gpushm.empty(name, (128, 3), "uint16")
    a = np.asarray(t)
    assert a.shape == (128, 3) and a.dtype == np.uint16 and not a.any()
    a[:] = 7
    assert np.asarray(gpushm.open(name, readonly=True)).sum() == 7 * 128 * 3
    del a
    t.close()


def test_share_from_buffer_protocol_without_numpy_types(name):
    import array
    src = array.array("d", [1.5, 2.5, 3.5])
    with gpushm.share(name, src) as t:
        assert t.dtype.name == "float64" and t.shape == (3,)
        assert bytes(t.memoryview()) == src.tobytes()


def test_raw_buffer_of_a_c_producer(conn, name):
    """A C producer's buffer: no manifest.  It opens as its bytes, or as what the
    consumer says it holds."""
    with conn.create(name, 64, mode=0o644) as raw:
        ctypes.memmove(raw.ptr, np.arange(16, dtype=np.int32).tobytes(), 64)
        assert raw.metadata == b"" and raw.manifest is None
        t = gpushm.open(name, conn=conn)
        assert t.dtype.name == "uint8" and t.shape == (64,)
        t.close()
        t = gpushm.open(name, dtype="int32", shape=(4, 4), conn=conn)
        assert np.array_equal(np.asarray(t), np.arange(16).reshape(4, 4))
        t = gpushm.open(name, dtype="<i4", offset=8, conn=conn)  # as many as fit
        assert np.array_equal(np.asarray(t), np.arange(2, 16))
        t = gpushm.open(name, dtype=np.int32, shape=(4,), strides=(4,), conn=conn)
        assert np.array_equal(np.asarray(t), [0, 4, 8, 12])
        v = raw.view("int32", (2, 8))
        assert np.asarray(v)[1, 7] == 15


def test_pointer_is_not_truncated(conn, name):
    """The bug this package exists for: a device pointer cut to 32 bits by ctypes'
    default restype.  Host mappings live above 4 GiB on x86-64 Linux too."""
    with conn.create(name, 4096) as b:
        ptr = b.ptr
        assert ptr > 2 ** 32, hex(ptr)
        ctypes.memmove(ptr, b"pointer!", 8)
        assert bytes(np.asarray(b.view())[:8]) == b"pointer!"
        for fn, (restype, _) in gpushm._lib.PROTOTYPES.items():
            assert getattr(gpushm._lib.lib, fn).restype is restype, fn


def test_bundle_round_trip(name):
    arrays = {"w": np.arange(300, dtype=np.float32).reshape(10, 30),
              "b": np.arange(7, dtype=np.int8),
              "flags": np.array([True, False, True]),
              "z": np.ones((2, 2), dtype=np.complex128)}
    tensors = gpushm.share_bundle(name, arrays, mode=0o644)
    assert set(tensors) == set(arrays)
    for t in tensors.values():
        assert t.offset % gpushm.BUNDLE_ALIGN == 0
    doc = json.loads(tensors["w"].buffer.metadata)
    assert [t["name"] for t in doc["tensors"]] == ["w", "b", "flags", "z"]
    assert [t["offset"] for t in doc["tensors"]] == [0, 1280, 1536, 1792]
    before = daemon_refs(name)  # the producer's tensors' (read-write) open
    opened = gpushm.open_bundle(name, readonly=True)
    for key, src in arrays.items():
        got = np.asarray(opened[key])
        assert got.dtype == src.dtype and np.array_equal(got, src), key
    # one read-only open of the buffer for all its tensors: one more daemon reference
    assert (before, daemon_refs(name)) == (1, 2)
    one = gpushm.open(name, tensor="b")
    assert np.array_equal(np.asarray(one), arrays["b"])
    with pytest.raises(gpushm.ManifestError, match="holds 4 tensors"):
        gpushm.open(name)
    with pytest.raises(KeyError):
        gpushm.open(name, tensor="nope")
    del opened, one, tensors


def test_bundle_limits(name):
    with pytest.raises(ValueError):
        gpushm.share_bundle(name, {})
    with pytest.raises(ValueError):
        gpushm.share_bundle(name, {"": np.zeros(1)})
    with pytest.raises(ValueError, match="power of two"):
        gpushm.share_bundle(name, {"a": np.zeros(1)}, align=24)
    # a manifest past 4096 bytes: refused before anything is created
    many = {f"tensor-number-{i:04d}": np.zeros(1, dtype=np.uint8) for i in range(60)}
    with pytest.raises(gpushm.LimitExceeded, match="4096"):
        gpushm.share_bundle(name, many)
    assert daemon_refs(name) is None


def test_default_connection_is_per_process(name):
    c = gpushm.default_connection()
    assert c is gpushm.default_connection()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if gpushm.default_connection() is not c else 2
            gpushm.share(name, np.zeros(1))
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"\x00"
    assert daemon_refs(name) == 0  # the child's connection ended with it


def test_default_connection_after_fork_with_its_lock_held(name):
    """A fork while another thread is inside default_connection(), whose connect() runs
    under its lock: the child gets a lock of its own, and its first use connects."""
    gpushm.share(name, np.arange(4, dtype=np.int32)).close()
    lock = gpushm.api._default_lock
    with lock:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.alarm(5)  # the parent's lock, held for good, would hang here
                with gpushm.open(name) as t:
                    code = 0 if np.asarray(t)[3] == 3 else 2
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
