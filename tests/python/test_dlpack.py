# SPDX-License-Identifier: MIT
"""The DLPack and array-interface exports on host memory, read back field by field;
read-only opens; and manifests from a hostile producer, which must raise, never yield a
view past the buffer."""
import ctypes
import json

import numpy as np
import pytest

import gpushm
from conftest import daemon_refs

L = gpushm._lib


def managed(capsule, versioned):
    ptr = gpushm._capsule.pointer(capsule, "dltensor_versioned" if versioned else "dltensor")
    struct = L.DLManagedTensorVersioned if versioned else L.DLManagedTensor
    return ctypes.cast(ptr, ctypes.POINTER(struct)).contents


@pytest.mark.parametrize("versioned", [False, True])
def test_capsule_fields(name, versioned):
    t = gpushm.empty(name, (3, 4), "float32")
    t2 = t.buffer.view("int16", (2, 3), offset=8, strides=(6, 2))
    cap = t2.__dlpack__(max_version=(1, 1) if versioned else None)
    assert gpushm._capsule.name(cap) == ("dltensor_versioned" if versioned else "dltensor")
    m = managed(cap, versioned)
    if versioned:
        assert (m.version.major, m.version.minor) == (1, 0) and m.flags == 0
    dl = m.dl_tensor
    assert dl.data == t.ptr + 8 and dl.byte_offset == 0
    assert (dl.device.device_type, dl.device.device_id) == (1, 0) == t2.__dlpack_device__()
    assert dl.ndim == 2 and [dl.shape[i] for i in range(2)] == [2, 3]
    assert [dl.strides[i] for i in range(2)] == [6, 2]
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (0, 16, 1)
    del cap, t2, t


def test_numpy_from_dlpack_writes_through(name):
    t = gpushm.empty(name, 10, "int64")
    a = np.from_dlpack(t)
    b = np.asarray(t)
    b[:] = np.arange(10)
    assert np.array_equal(a, np.arange(10))
    assert a.__array_interface__["data"][0] == t.ptr


def test_dlpack_refusals(name):
    t = gpushm.empty(name, 4, "uint8")
    with pytest.raises(BufferError, match="between devices"):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="host memory"):
        t.__dlpack__(stream=5)
    t.__dlpack__(dl_device=(1, 0), copy=False, stream=None)
    assert daemon_refs(name) == 1


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_copy_is_the_consumers(name, versioned):
    """copy=True: a copy in memory of its own, writable even of a read-only open, that
    holds no open of the buffer (tests/python/test_weights.py looks at it closer)."""
    gpushm.share(name, np.arange(6, dtype=np.int32), mode=0o644).close()
    t = gpushm.open(name, readonly=True)
    cap = t.__dlpack__(max_version=(1, 0) if versioned else None, copy=True)
    m = managed(cap, versioned)
    if versioned:
        assert m.flags == L.DLPACK_FLAG_IS_COPIED  # not read-only
    dl = m.dl_tensor
    assert dl.data != t.ptr and dl.ndim == 1 and dl.shape[0] == 6
    words = (ctypes.c_int32 * 6).from_address(dl.data)
    assert list(words) == list(range(6))
    words[0] = 42
    assert np.asarray(t)[0] == 0
    assert daemon_refs(name) == 1  # t's: the copy holds none
    del words, dl, m, cap, t
    assert daemon_refs(name) == 0


def test_read_only_views(name):
    gpushm.share(name, np.arange(8, dtype=np.uint32), mode=0o644).close()
    t = gpushm.open(name, readonly=True)
    assert t.readonly
    a = np.asarray(t)
    assert not a.flags.writeable and a[7] == 7
    with pytest.raises(ValueError):
        a[0] = 1
    mv = t.memoryview()
    assert mv.readonly
    with pytest.raises(TypeError):
        mv[0] = 1
    m = managed(cap := t.__dlpack__(max_version=(1, 0)), True)
    assert m.flags & L.DLPACK_FLAG_READ_ONLY
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()  # legacy DLPack cannot say read-only
    if int(np.__version__.split(".")[0]) >= 2:
        r = np.from_dlpack(t)  # NumPy 2 asks for DLPack 1.0, which says read-only
        assert not r.flags.writeable and r[7] == 7
        del r
    else:
        with pytest.raises(BufferError, match="read-only"):
            np.from_dlpack(t)  # NumPy 1.x asks for legacy DLPack
    # the C library refuses it too, should anyone ask it directly
    desc, keep = t._desc()
    out = ctypes.c_void_p()
    r = L.lib.gpushm_buffer_dlpack(t.buffer._live()[1], ctypes.byref(desc), L.DLPACK_LEGACY,
                                   ctypes.byref(out))
    assert r == gpushm.CODES["PERM"] and out.value is None
    del cap, a, mv, t


@pytest.mark.parametrize("size", [8 << 10, 2 << 20])  # a segment's slot; memory of its own
def test_read_only_written_anyway_stays_private(name, size):
    """A consumer that ignores DLPack's read-only flag (PyTorch: torch.from_dlpack(t) and
    a write) writes a private copy of what it writes: no SIGSEGV, and the producer and
    everyone else see the buffer unchanged; the producer's later writes show through the
    pages the consumer did not write."""
    producer = gpushm.share(name, np.full(size, 0x11, dtype=np.uint8), mode=0o644)
    t = gpushm.open(name, readonly=True)
    m = managed(cap := t.__dlpack__(max_version=(1, 0)), True)
    assert m.flags & L.DLPACK_FLAG_READ_ONLY
    view = (ctypes.c_uint8 * size).from_address(m.dl_tensor.data)
    assert view[0] == view[size - 1] == 0x11
    ctypes.memset(m.dl_tensor.data, 0x22, 4096)  # what torch's add_() would do
    assert view[0] == 0x22
    assert np.asarray(t)[0] == 0x11 and np.asarray(producer)[0] == 0x11
    np.asarray(producer)[size - 1] = 0x44
    assert view[size - 1] == 0x44
    with gpushm.Connection() as other:
        seen = gpushm.open(name, readonly=True, conn=other)
        assert bytes(seen.memoryview()[:2]) == b"\x11\x11"
        seen.close()
    del view, m, cap, t
    producer.close()


HOSTILE = {
    "past the end": {"dtype": "float32", "shape": [17], "offset": 0},
    "offset past the end": {"dtype": "uint8", "shape": [0], "offset": 65},
    "one element past": {"dtype": "float64", "shape": [8], "offset": 8},
    "backwards before the start": {"dtype": "float32", "shape": [2], "strides": [-1], "offset": 0},
    "huge stride": {"dtype": "uint8", "shape": [2], "strides": [1 << 40], "offset": 0},
    "wrap around": {"dtype": "uint8", "shape": [1 << 62, 4], "offset": 0},
    "past int64": {"dtype": "uint8", "shape": [1 << 64], "offset": 0},
    "negative extent": {"dtype": "uint8", "shape": [-1], "offset": 0},
    "misaligned": {"dtype": "float32", "shape": [2], "offset": 2},
    "float extent": {"dtype": "uint8", "shape": [2.0], "offset": 0},
    "bool extent": {"dtype": "uint8", "shape": [True], "offset": 0},
    "unknown dtype": {"dtype": "float8", "shape": [2], "offset": 0},
    "strides of another rank": {"dtype": "uint8", "shape": [2, 2], "strides": [1], "offset": 0},
    "too many dimensions": {"dtype": "uint8", "shape": [1] * 33, "offset": 0},
    "string offset": {"dtype": "uint8", "shape": [2], "offset": "0"},
    "empty dtype": {"dtype": "", "shape": [2], "offset": 0},
    "blank dtype": {"dtype": " ", "shape": [2], "offset": 0},
    # deeper than Python's recursion limit, within the 4096 bytes of metadata: raw JSON
    "nesting past the recursion limit":
        b'{"gpushm":1,"tensors":[{"name":"t","dtype":"uint8","shape":'
        + b"[" * 2000 + b"]" * 2000 + b"}]}",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_manifest_never_maps_outside(conn, name, case):
    metadata = HOSTILE[case]
    if not isinstance(metadata, bytes):
        metadata = json.dumps({"gpushm": 1, "tensors": [dict(name="t", **metadata)]}).encode()
    conn.create(name, 64, metadata=metadata, mode=0o644).close()
    with pytest.raises(gpushm.ManifestError) as e:
        gpushm.open(name, conn=conn)
    assert isinstance(e.value, ValueError)
    with pytest.raises(gpushm.ManifestError):
        gpushm.open_bundle(name, conn=conn)
    assert daemon_refs(name, conn) == 0  # the failed opens closed what they opened


@pytest.mark.parametrize("metadata,match", [
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a gpushm manifest"),
    (b'{"tensors": []}', "not a gpushm manifest"),
    (b'{"gpushm": 2, "tensors": []}', "newer than this package"),
    (b'{"gpushm": 1, "tensors": []}', "non-empty"),
    (b'{"gpushm": 1, "tensors": [1]}', "not an object"),
    (b'{"gpushm": 1, "tensors": [{"name": "a", "dtype": "uint8", "shape": [1]},'
     b' {"name": "a", "dtype": "uint8", "shape": [1]}]}', "repeat"),
])
def test_malformed_manifests(conn, name, metadata, match):
    conn.create(name, 64, metadata=metadata).close()
    with pytest.raises(gpushm.ManifestError, match=match):
        gpushm.open(name, conn=conn)
    # the consumer can still say what the buffer holds
    with gpushm.open(name, dtype="uint8", shape=(64,), conn=conn) as t:
        assert t.shape == (64,)


def test_c_library_checks_what_python_let_through(name):
    """A Tensor's spec is checked when it is made; libgpushm checks again at export,
    whatever reaches it, and the array interfaces check again before each view."""
    t = gpushm.empty(name, 4, "float32")
    bad = gpushm.manifest.TensorSpec("x", gpushm.dtype("float32"), (5,), (1,), 0)
    object.__setattr__(t, "_spec", bad)  # as if the Python check had been skipped
    with pytest.raises(gpushm.InvalidArgument, match="beyond the buffer"):
        t.__dlpack__(max_version=(1, 0))
    with pytest.raises(gpushm.ManifestError, match="outside the buffer"):
        np.asarray(t)
    with pytest.raises(gpushm.ManifestError, match="outside the buffer"):
        t.memoryview()
    assert daemon_refs(name) == 1  # the refusals took no reference


def test_identity_attributes_are_read_only(conn, name):
    """What guards a view (a tensor's spec, a buffer's size and read-only flag) and what
    says which buffer a handle is cannot be set; the views' read-only flag comes from
    the C handle, so a private field changed anyway cannot make a read-only mapping
    writable (a write there is SIGSEGV)."""
    gpushm.share(name, np.arange(16, dtype=np.uint8), mode=0o644).close()
    t = gpushm.open(name, readonly=True, conn=conn)
    b = t.buffer
    with pytest.raises(AttributeError):
        t.spec = gpushm.manifest.make_spec("", "uint8", (1 << 20,))
    for attr, value in [("size", 1 << 20), ("readonly", False), ("name", "other"), ("id", 1),
                        ("backend", "cuda-fd"), ("device", 0), ("map_device", 1),
                        ("owner", (0, 0)), ("metadata", b"{}"), ("connection", None)]:
        with pytest.raises(AttributeError):
            setattr(b, attr, value)
    assert b.size == 16 and b.readonly and b.name == name
    object.__setattr__(b, "_readonly", False)
    object.__setattr__(t.buffer, "_size", 1 << 20)
    assert t.memoryview().readonly and not np.asarray(t).flags.writeable
    with pytest.raises(gpushm.ManifestError, match="outside the buffer"):
        b.view("uint8", 1 << 20).memoryview()  # checked against the C handle's size
    del t, b
