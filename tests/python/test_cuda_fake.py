# SPDX-License-Identifier: MIT
"""Device memory against the fake CUDA driver (tests/fake-cuda: its "device memory" is
shared host memory, so a test can read what a pointer points at): the CUDA array
interface, DLPack's device and streams, map devices, sync buffers and events.  The real
GPU run is tests/gpu/test-python-gpu.sh."""
import ctypes

import numpy as np
import pytest

import gpushm
from conftest import FAKE_CUDA, FAKE_CUDA_EXPECTED, daemon_refs, require_built, run_python


@pytest.fixture(autouse=True)
def fake_driver():
    # a skip only where it is not built: without CUDA headers, or outside make check
    require_built(FAKE_CUDA or "", "the fake CUDA driver", FAKE_CUDA_EXPECTED)


def test_cuda_array_interface(name):
    t = gpushm.empty(name, (4, 8), "float32", device="cuda:0", mode=0o644)
    assert t.device == "cuda:0" and t.buffer.backend == "cuda-fd"
    assert t.__dlpack_device__() == (2, 0)
    iface = t.__cuda_array_interface__
    assert iface == {"version": 3, "shape": (4, 8), "typestr": "<f4", "strides": None,
                     "data": (t.ptr, False), "stream": None}
    assert not hasattr(t, "__array_interface__")
    with pytest.raises(TypeError, match="device memory"):
        np.asarray(t)
    # the fake's device memory is this process's memory: the pointer is the buffer's
    ctypes.memmove(t.ptr, np.arange(32, dtype=np.float32).tobytes(), 128)
    run_python(f"""
import ctypes, numpy as np, gpushm
t = gpushm.open({name!r}, readonly=True)
iface = t.__cuda_array_interface__
assert iface["data"][1] is True and iface["shape"] == (4, 8)
got = np.frombuffer(ctypes.string_at(iface["data"][0], 128), dtype=np.float32)
assert np.array_equal(got, np.arange(32, dtype=np.float32)), got
""")
    # arrays made through the interface keep the tensor, which keeps an open for them
    t.close()
    assert daemon_refs(name) == 1
    del t
    assert daemon_refs(name) == 0


def test_dlpack_on_the_map_device(name):
    gpushm.empty(name, 16, "int32", device="cuda:0").close()
    for map_device in (0, 1):
        t = gpushm.open(name, device=f"cuda:{map_device}")
        assert t.__dlpack_device__() == (2, map_device)
        cap = t.__dlpack__(max_version=(1, 0), stream=None)
        dl = ctypes.cast(gpushm._capsule.pointer(cap, "dltensor_versioned"),
                         ctypes.POINTER(gpushm._lib.DLManagedTensorVersioned)).contents.dl_tensor
        assert (dl.device.device_type, dl.device.device_id) == (2, map_device)
        assert dl.data == t.ptr
        with pytest.raises(ValueError, match="ambiguous"):
            t.__dlpack__(stream=0)
        t.__dlpack__(stream=-1)
        t.__dlpack__(stream=1)
        del cap, t
    assert daemon_refs(name) == 0


def test_share_bfloat16_raw(name):
    """bfloat16 has no NumPy type: it travels as DLPack (code 4) and the manifest."""
    t = gpushm.empty(name, 8, "bfloat16", device="cuda:0")
    dl = ctypes.cast(gpushm._capsule.pointer(c := t.__dlpack__(max_version=(1, 0)), "dltensor_versioned"),
                     ctypes.POINTER(gpushm._lib.DLManagedTensorVersioned)).contents.dl_tensor
    assert (dl.dtype.code, dl.dtype.bits) == (4, 16)
    with pytest.raises(TypeError, match="no NumPy type"):
        t.__cuda_array_interface__
    del c
    assert gpushm.open(name).dtype.name == "bfloat16"


def test_sync_buffer_streams(name):
    """acquire/release with the default stream and raw stream ints; the interface's
    stream says what a consumer must synchronise with."""
    t = gpushm.empty(name, 64, "uint8", device="cuda:0", sync=True)
    b = t.buffer
    assert b.sync_method in ("gpu-fence", "cpu-fence")
    assert b.release(None) == 1
    consumer = gpushm.open(name)
    # first read: an acquire on the legacy default stream, which the consumer syncs with
    assert consumer.__cuda_array_interface__["stream"] == 1
    consumer.buffer.acquire(None, seq=1, timeout=5)
    with pytest.raises(gpushm.Timeout):
        consumer.buffer.acquire(None, seq=2, timeout=0.05)
    assert b.release(1) == 2  # CU_STREAM_LEGACY, as an int
    consumer.buffer.acquire(1, seq=2, timeout=5)
    assert consumer.__cuda_array_interface__["stream"] == 1
    consumer.__dlpack__(max_version=(1, 0), stream=1)  # DLPack's consumer stream: waits too
    with pytest.raises(gpushm.PermissionDenied):
        gpushm.open(name, readonly=True).buffer.release()


def test_events(conn, name):
    with conn.create_event(name) as ev:
        assert ev.name == name and ev.id > 0
        ev.record(None)
        ev.wait(None)
        with conn.open_event(name) as again:
            again.wait(1)
    info = [i for i in conn.list() if i.name == name][0]
    assert info.kind == "event" and info.backend == ""
    conn.unlink(name)


def test_share_to_device_needs_a_gpu_framework(name):
    """No CUDA runtime in the package: a NumPy array cannot be copied to device memory,
    said so, and the buffer made for it is gone again."""
    with pytest.raises(TypeError, match="PyTorch or CuPy"):
        gpushm.share(name, np.zeros(4, dtype=np.float32), device="cuda:0")
    assert daemon_refs(name) is None


def test_cuda_array_interface_never_says_per_thread(name, monkeypatch):
    """The per-thread stream (2) is each thread's own: a consumer on another thread would
    synchronise with its own.  After an acquire on it, the interface acquires on the
    legacy default stream and says 1."""
    t = gpushm.empty(name, 64, "uint8", device="cuda:0", sync=True)
    assert t.buffer.release(None) == 1
    consumer = gpushm.open(name)
    lib = gpushm.core.lib
    streams = []
    acquire = lib.gpushm_buffer_acquire
    monkeypatch.setattr(lib, "gpushm_buffer_acquire",
                        lambda b, stream, seq, ms: streams.append(stream) or acquire(b, stream, seq, ms))
    # the fake driver has no per-thread stream outside a current context: the state an
    # acquire(2) leaves, set as it sets it
    consumer.buffer._acquired, consumer.buffer._acquired_stream = True, 2
    assert consumer.__cuda_array_interface__["stream"] == 1
    assert streams == [None]  # the legacy default stream waited for the release
    consumer.buffer.acquire(None, seq=1, timeout=5)
    assert consumer.__cuda_array_interface__["stream"] == 1
    monkeypatch.undo()


def test_strict_mode(conn, name):
    # read-only for others is what device memory cannot keep: refused when asked for
    with pytest.raises(gpushm.InvalidArgument, match="gives group and others read-only access"):
        conn.create(name, 4096, backend="cuda-fd", mode=0o644, strict_mode=True)
    with conn.create(name, 4096, backend="cuda-fd", mode=0o666, strict_mode=True):
        pass
    with conn.create(name + "-host", 4096, backend="host", mode=0o644, strict_mode=True):
        pass
    conn.unlink(name)
    conn.unlink(name + "-host")
    # joining an existing buffer asks the same of the mode it finds
    with conn.create(name, 4096, backend="cuda-fd", mode=0o644):
        with pytest.raises(gpushm.InvalidArgument, match="cannot keep"):
            conn.create(name, 4096, backend="cuda-fd", mode=0o644, open_existing=True,
                        strict_mode=True)
        conn.create(name, 4096, backend="cuda-fd", mode=0o644, open_existing=True).close()
    conn.unlink(name)


def test_uninitialized_skips_the_clear(name):
    """A reused slot of device memory is zeroed for gpushm.empty(), not with
    uninitialized=True, whose caller writes it all (the same slot comes back: one class)."""
    t = gpushm.empty(name, 1024, "uint32", device="cuda:0")
    ptr = t.ptr
    ctypes.memset(ptr, 0xcd, 4096)
    t.buffer.close_unlink()
    u = gpushm.empty(name, 1024, "uint32", device="cuda:0", uninitialized=True)
    assert u.ptr == ptr and ctypes.string_at(ptr, 4096) == b"\xcd" * 4096
    u.buffer.close_unlink()
    z = gpushm.empty(name, 1024, "uint32", device="cuda:0")
    assert z.ptr == ptr and ctypes.string_at(ptr, 4096) == bytes(4096)
    z.buffer.close_unlink()


def test_device_memory_without_a_driver_says_what_to_do(name):
    """Issue 42: a process with no CUDA driver opening device memory is told what the
    buffer is (backend, GPU) and what to do, not only that CUDA is missing."""
    gpushm.empty(name, 16, "float32", device="cuda:0", mode=0o644).close()
    run_python(f"""
import gpushm
try:
    gpushm.open({name!r}, readonly=True)
    raise SystemExit("opened device memory without a driver")
except gpushm.Unsupported as e:
    text = str(e)
    assert "is cuda-fd memory on GPU 0" in text and "run it where that GPU" in text, text
    assert "no CUDA driver to map it" in text and "no-such-libcuda" in text, text
""", env={"GPUSHM_CUDA_LIBRARY": "/nonexistent/no-such-libcuda.so"})
