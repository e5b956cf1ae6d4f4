# SPDX-License-Identifier: MIT
"""Weight sets from Python (docs/weights.md), on host memory: a state dict published and
read back from another connection and another process, generations held while newer
ones are published, waiting for a newer one, compare-and-swap publishes, read-only views,
DLPack copies, publishing buffers written in place, and a PyTorch load_state_dict round
trip where PyTorch is importable.  A lying manifest is tests/integration/test-weights'."""
import ctypes
import gc
import os
import sys
import threading
import time

import numpy as np
import pytest

import gpushm
from conftest import (FAKE_CUDA, FAKE_CUDA_EXPECTED, HAVE_FAKE_CUDA, daemon_refs, other_user_env,
                      require_built, run_python)

L = gpushm._lib

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not importable here")
needs_torch_cuda = pytest.mark.skipif(
    torch is None or HAVE_FAKE_CUDA or not torch.cuda.is_available(),
    reason="needs PyTorch with a CUDA GPU, and gpushmd on the real driver (not the fake one)")


@pytest.fixture
def reader(daemon):
    """A second connection: what another process's open would be."""
    with gpushm.connect(daemon.socket, "pytest-reader") as c:
        yield c


@pytest.fixture
def set_name(name, conn):
    """The test's weight set, unlinked afterwards (generations still held go with their
    holders)."""
    yield name + "-ws"
    gc.collect()
    try:
        conn.unlink(name + "-ws")
    except gpushm.NotFound:
        pass


def state_dict(scale=1):
    rng = np.random.default_rng(scale)
    return {
        "embed.weight": (rng.standard_normal((17, 8)) * scale).astype(np.float32),
        "layers.0.attn.qkv": (rng.standard_normal((8, 24)) * scale).astype(np.float32),
        "layers.0.norm.eps": np.array([1e-5 * scale], dtype=np.float64),
        "position_ids": np.arange(32, dtype=np.int64) * scale,
        "mask": np.array([True, False, True]),
        "half": (rng.standard_normal(5) * scale).astype(np.float16),
        "scalar": np.array(7 * scale, dtype=np.int32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def weight_buffers(conn, set_name):
    """The daemon's buffers made for set_name's generations (those the generations pin
    are unlinked); with_names: only those that still have a name."""
    return [i for i in conn.list(all=True) if i.name.startswith(f"w.{set_name}.")]


def named_weight_buffers(conn, set_name):
    return [i for i in weight_buffers(conn, set_name) if i.linked]


def generations(conn, set_name):
    return [i for i in conn.list(all=True) if i.kind == "weights" and i.name == set_name]


def test_publish_and_open(conn, reader, set_name):
    sd = state_dict()
    ws = conn.publish_weights(set_name, sd)
    assert (ws.name, ws.generation, ws.newest, len(ws)) == (set_name, 1, 1, len(sd))
    assert ws.keys() == list(sd) and list(ws) == list(sd)
    assert "embed.weight" in ws and "nope" not in ws and 3 not in ws
    # one host buffer for all of them, every tensor at an aligned offset; its name went
    # with the publish (the generation pins it)
    views = ws.tensors()
    assert len({v.buffer.id for v in views.values()}) == 1
    assert all(v.offset % gpushm.BUNDLE_ALIGN == 0 for v in views.values())
    assert named_weight_buffers(conn, set_name) == []
    assert [i.id for i in weight_buffers(conn, set_name)] == [views["mask"].buffer.id]
    del views

    got = reader.open_weights(set_name)
    assert (got.generation, got.id, len(got)) == (1, ws.id, len(sd))
    for key, src in sd.items():
        t = got.tensor(key)
        assert t.readonly and t.name == key and t.device == "cpu"
        a = np.asarray(t)
        assert a.dtype == src.dtype and a.shape == src.shape and np.array_equal(a, src), key
    assert {k: np.asarray(v).tolist() for k, v in got.tensors().items()} == \
        {k: v.tolist() for k, v in sd.items()}
    with pytest.raises(KeyError, match="no tensor 'nope'"):
        got["nope"]
    info = generations(conn, set_name)
    assert len(info) == 1 and info[0].weights == gpushm.WeightsInfo(1, 1, len(sd),
                                                                    info[0].weights.manifest_size)
    got.close()
    ws.close()
    with pytest.raises(gpushm.ClosedError):
        got.tensor("mask")
    assert got.closed and "closed" in repr(got)


def test_read_by_another_process(daemon, set_name):
    """Read after its publisher is gone: the generation keeps its buffers (made with the
    publisher's connection, for its life only)."""
    sd = state_dict()
    with gpushm.connect(daemon.socket, "pytest-publisher") as publisher:
        publisher.publish_weights(set_name, sd, mode=0o644).close()
    run_python(f"""
import numpy as np, gpushm
with gpushm.open_weights({set_name!r}) as ws:
    assert ws.generation == 1
    a = np.asarray(ws["layers.0.attn.qkv"])
    assert a.shape == (8, 24) and a.dtype == np.float32
    assert np.array_equal(a, np.array({sd["layers.0.attn.qkv"].tolist()!r}, dtype=np.float32))
    assert np.asarray(ws["position_ids"]).tolist() == list(range(32))
""")


def test_later_generations_keep_the_sets_mode(conn, set_name):
    """The set's mode is its first publish's; a later publish's buffers are made as
    readable as the set, whatever mode it passes (a buffer less readable than its set
    would be refused), and never writable by others."""
    conn.publish_weights(set_name, {"w": np.zeros(2, np.float32)}, mode=0o664).close()
    conn.publish_weights(set_name, {"w": np.ones(2, np.float32)}).close()  # mode=0o600
    assert [i.mode for i in generations(conn, set_name)] == [0o664]
    assert sorted(i.mode for i in weight_buffers(conn, set_name)) == [0o644]


def test_another_user_reads_what_the_mode_allows(conn, name, set_name):
    env = other_user_env(65534)
    conn.publish_weights(set_name, {"w": np.arange(4, dtype=np.int32)}, mode=0o644).close()
    conn.publish_weights(name + "-private", {"w": np.arange(4, dtype=np.int32)}).close()
    try:
        run_python(f"""
import gpushm, numpy as np
with gpushm.open_weights({set_name!r}) as ws:
    assert np.asarray(ws["w"]).tolist() == [0, 1, 2, 3]
    assert ws["w"].readonly
    try:
        gpushm.open(ws["w"].buffer.id)          # a writer of a published buffer: never
        raise SystemExit("opened read-write")
    except (gpushm.PermissionDenied, gpushm.NotFound):
        pass
try:
    gpushm.open_weights({name + "-private"!r})
    raise SystemExit("opened a 0600 set")
except (gpushm.PermissionDenied, gpushm.NotFound):
    pass
""", user=65534, env=env)
    finally:
        conn.unlink(name + "-private")


def test_session_set_goes_with_its_publisher(daemon, reader, set_name):
    with gpushm.connect(daemon.socket, "pytest-publisher") as publisher:
        publisher.publish_weights(set_name, {"w": np.ones(3, np.float32)}, mode=0o644,
                                  lifetime="session").close()
        ws = reader.open_weights(set_name)
        assert ws.newest == 1
    with pytest.raises(gpushm.NotFound):
        ws.wait_newer(10)
    assert ws.newest is None
    assert np.asarray(ws["w"]).tolist() == [1.0, 1.0, 1.0]  # what it holds stays
    with pytest.raises(gpushm.NotFound):
        reader.open_weights(set_name)
    ws.close()


def test_forked_child_lets_go_of_nothing(conn, set_name):
    conn.publish_weights(set_name, {"w": np.arange(3, dtype=np.int64)}).close()
    ws = conn.open_weights(set_name)
    view = ws["w"]
    pid = os.fork()
    if pid == 0:
        # the child's garbage collector meets the parent's generation: nothing is closed,
        # nothing sent on the parent's socket
        status = 0
        try:
            try:
                ws.newest
                status = 3
            except gpushm.ClosedError:
                pass
            del view
            ws.close()
            del ws
            gc.collect()
        except BaseException:
            status = 4
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert ws.newest == 1 and np.asarray(view).tolist() == [0, 1, 2]
    assert [i.weights.generation for i in generations(conn, set_name)] == [1]
    ws.close()


def test_generations(conn, reader, set_name):
    first, second = state_dict(1), state_dict(2)
    conn.publish_weights(set_name, first).close()
    held = reader.open_weights(set_name)
    kept = np.asarray(held["embed.weight"])
    assert held.newest == 1 and not held.wait_newer(0)

    new = conn.publish_weights(set_name, second, after=1)
    assert new.generation == 2
    # the holder keeps generation 1, unchanged; the name denotes 2
    assert held.generation == 1 and held.newest == 2 and held.wait_newer(0)
    for key, src in first.items():
        assert np.array_equal(np.asarray(held[key]), src), key
    assert np.array_equal(kept, first["embed.weight"])
    with reader.open_weights(set_name) as fresh:
        assert fresh.generation == 2 and fresh.newest == 2
        for key, src in second.items():
            assert np.array_equal(np.asarray(fresh[key]), src), key
    # both alive (2 named, 1 held), as gpushmctl would show them
    assert sorted(i.weights.generation for i in generations(conn, set_name)) == [1, 2]
    held.close()
    new.close()
    del kept
    gc.collect()
    assert [i.weights.generation for i in generations(conn, set_name)] == [2]


def test_wait_newer_wakes_on_publish(conn, reader, set_name):
    conn.publish_weights(set_name, {"w": np.zeros(4, np.float32)}).close()
    ws = reader.open_weights(set_name)
    t0 = time.monotonic()
    assert ws.wait_newer(0.2) is False
    assert time.monotonic() - t0 >= 0.19
    result = []
    waiter = threading.Thread(target=lambda: result.append(ws.wait_newer(30)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and not result
    conn.publish_weights(set_name, {"w": np.ones(4, np.float32)}, after=1).close()
    waiter.join(10)
    assert result == [True]
    # a wait for ever also wakes (Python waits in slices: Ctrl-C and close() get in)
    with reader.open_weights(set_name) as g2:
        forever = threading.Thread(target=lambda: result.append(g2.wait_newer()))
        forever.start()
        time.sleep(0.6)
        conn.publish_weights(set_name, {"w": np.full(4, 2, np.float32)}, after=2).close()
        forever.join(10)
        assert result == [True, True]
    ws.close()


def test_wait_newer_when_the_set_goes(conn, reader, set_name):
    conn.publish_weights(set_name, {"w": np.zeros(4, np.float32)}).close()
    ws = reader.open_weights(set_name)
    threading.Timer(0.3, conn.unlink, (set_name,)).start()
    with pytest.raises(gpushm.NotFound, match="gone"):
        ws.wait_newer(30)
    assert ws.newest is None
    # the holder still reads what it holds
    assert np.array_equal(np.asarray(ws["w"]), np.zeros(4, np.float32))
    with pytest.raises(gpushm.NotFound):
        reader.open_weights(set_name)
    ws.close()


def test_close_from_another_thread_ends_a_wait(conn, reader, set_name):
    conn.publish_weights(set_name, {"w": np.zeros(4, np.float32)}).close()
    ws = reader.open_weights(set_name)
    errors = []

    def wait():
        try:
            ws.wait_newer()
        except gpushm.ClosedError as e:
            errors.append(e)
    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    ws.close()
    waiter.join(10)
    assert not waiter.is_alive() and len(errors) == 1


def test_after_mismatch(conn, set_name):
    conn.publish_weights(set_name, {"w": np.zeros(4, np.float32)}).close()
    with pytest.raises(gpushm.Exists, match="generation 1, not 5"):
        conn.publish_weights(set_name, {"w": np.ones(4, np.float32)}, after=5)
    # nothing of the refused publish is left (generation 1's buffer only), and the set
    # is as it was
    assert len(weight_buffers(conn, set_name)) == 1
    with conn.open_weights(set_name) as ws:
        assert ws.generation == 1 and not np.asarray(ws["w"]).any()
    with conn.publish_weights(set_name, {"w": np.ones(4, np.float32)}, after=1) as ws:
        assert ws.generation == 2


def test_publish_refusals(conn, set_name):
    with pytest.raises(ValueError, match="at least one"):
        conn.publish_weights(set_name, {})
    with pytest.raises(ValueError, match="non-empty strings"):
        conn.publish_weights(set_name, {"": np.zeros(1)})
    with pytest.raises(ValueError, match="power of two"):
        conn.publish_weights(set_name, {"a": np.zeros(1)}, align=24)
    with pytest.raises(gpushm.InvalidName):
        conn.publish_weights("no spaces", {"a": np.zeros(1)})
    with pytest.raises(gpushm.InvalidArgument, match="control character"):
        conn.publish_weights(set_name, {"a\n": np.zeros(1)})
    with pytest.raises(gpushm.NotFound):
        conn.open_weights(set_name)
    assert weight_buffers(conn, set_name) == []  # the refused publishes' are gone
    # a name that denotes a buffer is no weight set
    conn.create(set_name, 64).close()
    with pytest.raises(gpushm.Exists):
        conn.publish_weights(set_name, {"a": np.zeros(1)})
    assert weight_buffers(conn, set_name) == []


def test_read_only_views(conn, reader, set_name):
    conn.publish_weights(set_name, {"w": np.arange(8, dtype=np.uint32)}).close()
    ws = reader.open_weights(set_name)
    t = ws["w"]
    assert t.readonly and t.buffer.readonly
    a = np.asarray(t)
    assert not a.flags.writeable and a[7] == 7
    with pytest.raises(ValueError):
        a[0] = 1
    mv = t.memoryview()
    assert mv.readonly
    with pytest.raises(TypeError):
        mv[0] = 1
    cap = t.__dlpack__(max_version=(1, 0))
    m = ctypes.cast(gpushm._capsule.pointer(cap, "dltensor_versioned"),
                    ctypes.POINTER(L.DLManagedTensorVersioned)).contents
    assert m.flags & L.DLPACK_FLAG_READ_ONLY
    # a private view of the generation: what it reads is the set's, what a consumer that
    # ignores the flag writes (PyTorch) is its own
    words = (ctypes.c_uint32 * 8).from_address(m.dl_tensor.data)
    assert list(words) == list(range(8))
    words[0] = 99
    assert np.asarray(t)[0] == 0
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()  # legacy DLPack cannot say read-only
    del words, cap, m, a, mv, t
    ws.close()


def test_views_keep_the_generation(conn, reader, set_name):
    conn.publish_weights(set_name, {"w": np.arange(6, dtype=np.int16)}).close()
    ws = reader.open_weights(set_name)
    arr = np.asarray(ws["w"])
    view = ws["w"]
    conn.publish_weights(set_name, {"w": np.zeros(6, dtype=np.int16)}, after=1).close()
    ws.close()
    del ws
    gc.collect()
    # generation 1 is held by the views still: the array's and the Tensor's
    assert sorted(i.weights.generation for i in generations(conn, set_name)) == [1, 2]
    assert arr.tolist() == list(range(6)) and np.asarray(view).tolist() == list(range(6))
    del view
    gc.collect()
    assert sorted(i.weights.generation for i in generations(conn, set_name)) == [1, 2]
    del arr
    gc.collect()
    assert [i.weights.generation for i in generations(conn, set_name)] == [2]


def versioned_of(capsule):
    return ctypes.cast(gpushm._capsule.pointer(capsule, "dltensor_versioned"),
                       ctypes.POINTER(L.DLManagedTensorVersioned)).contents


def test_dlpack_copy(conn, reader, set_name):
    src = np.arange(24, dtype=np.float32).reshape(4, 6)
    conn.publish_weights(set_name, {"w": src}).close()
    ws = reader.open_weights(set_name)
    t = ws["w"]
    refs = daemon_refs(t.buffer.name, reader)
    cap = t.__dlpack__(max_version=(1, 0), copy=True)
    m = versioned_of(cap)
    dl = m.dl_tensor
    # the consumer's alone: copied, writable, in memory of its own
    assert m.flags == L.DLPACK_FLAG_IS_COPIED
    assert (m.version.major, m.version.minor) == (1, 0)
    assert dl.data != t.ptr and dl.data % 64 == 0 and dl.byte_offset == 0
    assert (dl.device.device_type, dl.device.device_id) == (1, 0)
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (2, 32, 1)
    assert [dl.shape[i] for i in range(2)] == [4, 6] and [dl.strides[i] for i in range(2)] == [6, 1]
    copied = np.ctypeslib.as_array(ctypes.cast(dl.data, ctypes.POINTER(ctypes.c_float)), (4, 6))
    assert np.array_equal(copied, src)
    copied[0, 0] = -1.0
    assert np.asarray(t)[0, 0] == 0.0  # the generation's memory is untouched
    del copied, dl, m
    # a copy holds no open of the buffer
    assert daemon_refs(t.buffer.name, reader) == refs
    del cap  # freed by its deleter, libc's free(), with no consumer having taken it

    # a legacy copy is allowed for read-only memory: it is writable
    legacy = t.__dlpack__(copy=True)
    assert gpushm._capsule.name(legacy) == "dltensor"
    got = np.from_dlpack(_Capsule(legacy))
    assert np.array_equal(got, src)
    del got, legacy

    # a strided view is copied as it lies: its strides kept, element [0, 0] where it is
    strided = t.buffer.view("float32", (2, 3), offset=4 * 7, strides=(12, -2))
    want = np.asarray(strided).copy()
    c2 = versioned_of(cap2 := strided.__dlpack__(max_version=(1, 1), copy=True)).dl_tensor
    assert [c2.strides[i] for i in range(2)] == [12, -2]
    got = np.array([[ctypes.c_float.from_address(c2.data + 4 * (12 * i - 2 * j)).value
                     for j in range(3)] for i in range(2)], dtype=np.float32)
    assert np.array_equal(got, want)
    del c2, cap2, strided

    with pytest.raises(BufferError, match="host memory"):
        t.__dlpack__(copy=True, stream=5)
    with pytest.raises(BufferError, match="between devices"):
        t.__dlpack__(copy=True, dl_device=(2, 0))
    del t
    ws.close()


class _Capsule:
    """A DLPack producer that hands out a capsule made before (what NumPy and PyTorch
    consume)."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule = capsule
        self.device = device

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def test_publish_from_buffers_written_in_place(conn, reader, set_name, name):
    """A trainer's generation written into buffers it made, published without a copy,
    bfloat16 among them (NumPy has none: its bits are written as uint16)."""
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.arange(3, dtype=np.int64)}
    # as readable as the set: the daemon refuses a buffer its readers could not read
    with pytest.raises(gpushm.InvalidArgument, match="less readable"):
        conn.publish_weights_from(set_name, gpushm.share_bundle(name + "-0600", arrays,
                                                                conn=conn), mode=0o644)
    conn.unlink(name + "-0600")
    bundle = gpushm.share_bundle(name, arrays, conn=conn, mode=0o644)
    buf = bundle["w"].buffer
    bf16_bits = np.array([0x3F80, 0x4000, 0xBF80, 0x0000], dtype=np.uint16)  # 1, 2, -1, 0
    other = conn.create(name + "-bf16", 64, mode=0o644)
    np.asarray(other.view("uint16", 4))[:] = bf16_bits
    tensors = dict(bundle)
    tensors["bf16"] = other.view("bfloat16", (2, 2))
    ws = gpushm.publish_weights_from(set_name, tensors, mode=0o644, conn=conn)  # the module's
    assert ws.generation == 1 and ws.keys() == ["w", "b", "bf16"]

    got = reader.open_weights(set_name)
    # no copy: the reader's views are of the trainer's buffers
    assert got["w"].buffer.id == buf.id and got["bf16"].buffer.id == other.id
    assert np.array_equal(np.asarray(got["w"]), np.arange(12, dtype=np.float32).reshape(3, 4))
    assert np.asarray(got["b"]).tolist() == [0, 1, 2]
    bf = got["bf16"]
    assert bf.dtype.name == "bfloat16" and bf.shape == (2, 2)
    assert bytes(bf.memoryview()) == bf16_bits.tobytes()
    with pytest.raises(TypeError, match="bfloat16"):
        np.asarray(bf)
    dl = versioned_of(cap := bf.__dlpack__(max_version=(1, 0))).dl_tensor
    assert (dl.dtype.code, dl.dtype.bits) == (4, 16)
    del dl, cap, bf
    # a published buffer takes no new writer; the trainer's own handles stay its own
    with pytest.raises(gpushm.PermissionDenied):
        reader.open(name)
    assert not buf.readonly
    got.close()
    ws.close()
    other.close()
    for t in bundle.values():
        t.close()


def test_recycling_double_buffered(conn, reader, set_name, name):
    """A trainer double-buffering in place: generation g written into the buffers of
    g - 2 once no reader holds g - 2 (wait_released), a reader following it; each
    generation reads as it was published while held."""
    bufs = [gpushm.share_bundle(f"{name}-{k}", {"w": np.zeros(8, np.float32)}, conn=conn,
                                mode=0o644) for k in range(2)]

    def write(g):
        np.asarray(bufs[g % 2]["w"])[:] = g
        return gpushm.publish_weights_from(set_name, bufs[g % 2], mode=0o644, conn=conn)

    pub = write(1)
    assert pub.oldest == 1
    held = reader.open_weights(set_name)
    for g in range(2, 7):
        if g >= 3:
            assert pub.wait_released(g - 2, 5) is True
            assert pub.oldest == g - 1
        new = write(g)
        pub.close()
        pub = new
        assert held.wait_newer(5) is True
        got = reader.open_weights(set_name)
        assert got.generation == g and np.asarray(got["w"]).tolist() == [g] * 8
        assert np.asarray(held["w"]).tolist() == [g - 1] * 8
        assert pub.wait_released(g - 1, 0) is False  # the reader holds it
        held.close()
        held = got
    with pytest.raises(ValueError, match="held by this object"):
        pub.wait_released(pub.generation)
    held.close()
    pub.close()
    for b in bufs:
        for t in b.values():
            t.close()


def test_publish_from_refusals(conn, reader, set_name, name):
    t = gpushm.empty(name, 4, "float32", conn=conn)
    with pytest.raises(TypeError, match="not a gpushm Tensor"):
        conn.publish_weights_from(set_name, {"w": np.zeros(4, np.float32)})
    with pytest.raises(ValueError, match="at least one"):
        conn.publish_weights_from(set_name, {})
    # the buffers must be the publishing connection's
    with pytest.raises(gpushm.InvalidArgument, match="another connection"):
        reader.publish_weights_from(set_name, {"w": t})
    # overlapping tensors are refused; an exact alias (tied weights) is not one
    with pytest.raises(gpushm.InvalidArgument, match="overlap"):
        conn.publish_weights_from(set_name, {"a": t, "b": t.buffer.view("float32", 2, offset=4)})
    with conn.publish_weights_from(set_name, {"embed": t, "lm_head": t}) as ws:
        assert ws.keys() == ["embed", "lm_head"]
        assert ws["embed"].ptr == ws["lm_head"].ptr
    t.close()


def test_a_dtype_the_package_lacks(conn, reader, set_name, name):
    """A C publisher's tensor of a dtype gpushm.dtypes has no name for (8-bit floats):
    listed, and refused by name when asked for; the others read as ever."""
    buf = conn.create(name, 64)
    np.asarray(buf.view("uint8", 64))[:] = np.arange(64, dtype=np.uint8)
    builder = ctypes.c_void_p()
    assert L.lib.gpushm_weights_builder_new(ctypes.byref(builder)) == 0
    try:
        index = ctypes.c_uint32()
        cap, b = buf._live()
        assert L.lib.gpushm_weights_builder_add_buffer(builder, b, ctypes.byref(index)) == 0
        for key, code, bits, offset in [("fp8", 2, 8, 0), ("u8", 1, 8, 16)]:
            shape = (ctypes.c_int64 * 1)(16)
            desc = L.TensorDesc(size=ctypes.sizeof(L.TensorDesc), ndim=1, offset=offset,
                                dtype=L.DLDataType(code, bits, 1),
                                shape=ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)))
            assert L.lib.gpushm_weights_builder_add_tensor(builder, key.encode(), index.value,
                                                           ctypes.byref(desc)) == 0
        opts = L.WeightsPublishOpts(size=ctypes.sizeof(L.WeightsPublishOpts))
        assert L.lib.gpushm_weights_publish(conn._live()[1], set_name.encode(), builder,
                                            ctypes.byref(opts), None) == 0
    finally:
        L.lib.gpushm_weights_builder_free(builder)
    with reader.open_weights(set_name) as ws:
        assert ws.keys() == ["fp8", "u8"] and "fp8" in ws
        with pytest.raises(TypeError, match="'fp8'.*code 2, 8 bits"):
            ws["fp8"]
        assert np.asarray(ws["u8"]).tolist() == list(range(16, 32))
    buf.close()


def test_device_memory_against_the_fake_driver(conn, reader, set_name, name):
    """A generation of device memory (the fake driver's, which this process can read at
    its pointers): read-only views on the map device through the CUDA array interface and
    DLPack, and copy=True refused without a framework to copy device memory."""
    require_built(FAKE_CUDA or "", "the fake CUDA driver", FAKE_CUDA_EXPECTED)
    t = gpushm.empty(name, (4, 8), "float32", device="cuda:0", conn=conn)
    ctypes.memmove(t.ptr, np.arange(32, dtype=np.float32).tobytes(), 128)
    with conn.publish_weights_from(set_name, {"w": t}), reader.open_weights(set_name) as ws:
        v = ws["w"]
        assert v.device == "cuda:0" and v.readonly and v.buffer.id == t.buffer.id
        iface = v.__cuda_array_interface__
        assert iface["data"][1] is True and iface["shape"] == (4, 8)
        got = np.frombuffer(ctypes.string_at(iface["data"][0], 128), dtype=np.float32)
        assert got.tolist() == list(range(32))
        m = versioned_of(cap := v.__dlpack__(max_version=(1, 0)))
        assert m.flags & L.DLPACK_FLAG_READ_ONLY
        assert (m.dl_tensor.device.device_type, m.dl_tensor.device.device_id) == (2, 0)
        del m, cap
        if "torch" not in sys.modules and "cupy" not in sys.modules:
            with pytest.raises(BufferError, match="needs PyTorch or CuPy"):
                v.__dlpack__(max_version=(1, 0), copy=True)
        del v, iface
        mine = {"w": np.zeros((4, 8), np.float32)}
        ws.copy_into(mine)  # through the driver's copy, on the legacy default stream
        assert mine["w"].ravel().tolist() == list(range(32))
    t.close()


def test_copy_into(conn, reader, set_name):
    """copy_into() of a generation in several buffers (bucket of 256 bytes) into arrays of
    the reader's own: every tensor equal; a tensor the destination lacks, one the set
    lacks, a wrong dtype, shape or layout and a read-only destination refused, naming the
    tensor; strict=False copies what both name and leaves the rest alone."""
    sd = state_dict(5)
    conn.publish_weights(set_name, sd, bucket=256).close()
    with reader.open_weights(set_name) as ws:
        assert len({ws[k].buffer.id for k in ws}) > 2
        mine = {k: np.zeros_like(v) for k, v in sd.items()}
        ws.copy_into(mine)
        for key, value in sd.items():
            assert mine[key].dtype == value.dtype and np.array_equal(mine[key], value), key
        del mine["half"]
        with pytest.raises(KeyError, match=r"missing \['half'\]"):
            ws.copy_into(mine)
        mine["half"] = np.zeros(5, np.float16)
        mine["extra"] = np.zeros(3)
        with pytest.raises(KeyError, match=r"unexpected \['extra'\]"):
            ws.copy_into(mine)
        part = {"embed.weight": np.zeros((17, 8), np.float32), "extra": np.zeros(3)}
        ws.copy_into(part, strict=False)
        assert np.array_equal(part["embed.weight"], sd["embed.weight"])
        assert not part["extra"].any()
        with pytest.raises(ValueError, match="'half' is float16\\[5\\], its destination "
                                             "float32\\[5\\]"):
            ws.copy_into({"half": np.zeros(5, np.float32)}, strict=False)
        with pytest.raises(ValueError, match="is float32\\[17, 8\\], its destination "
                                             "float32\\[8, 17\\]"):
            ws.copy_into({"embed.weight": np.zeros((8, 17), np.float32)}, strict=False)
        with pytest.raises(ValueError, match="same layout"):
            ws.copy_into({"embed.weight": np.zeros((17, 8), np.float32, order="F")},
                         strict=False)
        frozen = np.zeros((17, 8), np.float32)
        frozen.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            ws.copy_into({"embed.weight": frozen}, strict=False)
        assert not frozen.any()


def test_publish_buckets(conn, set_name):
    """publish_weights() puts at most bucket bytes in a buffer; a tensor larger than
    that gets one of its own."""
    sd = {"a": np.zeros(64, np.float32), "b": np.zeros(64, np.float32),
          "big": np.zeros(1024, np.float32), "c": np.zeros(16, np.float32)}
    with conn.publish_weights(set_name, sd, bucket=512) as ws:
        ids = {k: ws[k].buffer.id for k in sd}
        assert ids["a"] == ids["b"] and len({ids["a"], ids["big"], ids["c"]}) == 3
        assert ws["big"].buffer.size == 4096
    with pytest.raises(ValueError, match="bucket 0"):
        conn.publish_weights(set_name, sd, bucket=0)


def test_module_helpers_and_default_connection(daemon, set_name):
    ws = gpushm.publish_weights(set_name, {"x": np.ones(3, np.float64)})
    with gpushm.open_weights(set_name) as got:
        assert got.generation == 1 and np.asarray(got["x"]).tolist() == [1.0, 1.0, 1.0]
    ws.close()
    gpushm.unlink(set_name)


@needs_torch
def test_torch_tensors(conn, reader, set_name):
    sd = {"w": torch.randn(16, 8), "ids": torch.arange(10), "bf": torch.randn(4, 4).bfloat16()}
    conn.publish_weights(set_name, sd).close()
    with reader.open_weights(set_name) as ws:
        got = {k: torch.from_dlpack(v) for k, v in ws.tensors().items()}
        for key, src in sd.items():
            assert got[key].dtype == src.dtype and torch.equal(got[key], src), key
        copies = ws.to_torch(copy=True)
        copies["w"].add_(1)  # the process's own
        assert torch.equal(torch.from_dlpack(ws["w"]), sd["w"])
        assert torch.equal(copies["w"], sd["w"] + 1)


@needs_torch
def test_load_state_dict_round_trip(conn, reader, set_name):
    torch.manual_seed(0)
    trained = torch.nn.Linear(8, 4)
    conn.publish_weights(set_name, {k: v.detach() for k, v in trained.state_dict().items()}).close()
    fresh = torch.nn.Linear(8, 4)
    with reader.open_weights(set_name) as ws:
        fresh.load_state_dict(ws.to_torch())
    x = torch.randn(3, 8)
    assert torch.equal(fresh(x), trained(x))


@needs_torch
def test_copy_into_a_module(conn, reader, set_name):
    torch.manual_seed(1)
    trained = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16))
    conn.publish_weights(set_name, {k: v.detach() for k, v in trained.state_dict().items()},
                         bucket=256).close()
    engine = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16))
    with reader.open_weights(set_name) as ws:
        ws.copy_into(engine)
    x = torch.randn(3, 8)
    assert torch.equal(engine(x), trained(x))


@needs_torch_cuda
def test_copy_into_cuda(conn, reader, set_name):
    """A generation on the GPU and the host copied into an engine's CUDA parameters, on
    a stream of its own and on PyTorch's current one; its close waits for the copies."""
    torch.manual_seed(2)
    sd = {"w": torch.randn(256, 64, device="cuda"), "b": torch.randn(64, device="cuda"),
          "host": torch.randn(5)}
    conn.publish_weights(set_name, sd, bucket=4096).close()
    mine = {k: torch.zeros_like(v, device="cuda") for k, v in sd.items()}
    side = torch.cuda.Stream()
    with reader.open_weights(set_name) as ws:
        ws.copy_into(mine, stream=side)
    side.synchronize()
    for key, src in sd.items():
        assert torch.equal(mine[key].cpu(), src.cpu()), key
    again = {k: torch.zeros_like(v, device="cuda") for k, v in sd.items()}
    with reader.open_weights(set_name) as ws:
        ws.copy_into(again)
    for key, src in sd.items():  # PyTorch's current stream: ordered before this read
        assert torch.equal(again[key].cpu(), src.cpu()), key


@needs_torch_cuda
def test_torch_cuda_state_dict(conn, reader, set_name):
    """Device memory for real: a state dict on the GPU and the host, one buffer per
    device, read back on the GPU; copy=True of device memory is PyTorch's copy."""
    sd = {"w": torch.randn(64, 32, device="cuda"), "ids": torch.arange(7, device="cuda"),
          "bf": torch.randn(5, device="cuda").bfloat16(), "host": torch.ones(3)}
    with conn.publish_weights(set_name, sd) as ws:
        views = ws.tensors()
        assert {k: v.device for k, v in views.items()} == \
            {"w": "cuda:0", "ids": "cuda:0", "bf": "cuda:0", "host": "cpu"}
        assert len({v.buffer.id for v in views.values()}) == 2
        del views
    with reader.open_weights(set_name) as got:
        loaded = got.to_torch()
        for key, src in sd.items():
            assert loaded[key].device == src.device and torch.equal(loaded[key], src), key
        copies = got.to_torch(copy=True)
        copies["w"].add_(1)
        assert torch.equal(torch.from_dlpack(got["w"]), sd["w"])
        cap = got["w"].__dlpack__(max_version=(1, 0), copy=True)
        copied = torch.from_dlpack(_Capsule(cap, (2, 0)))
        assert copied.data_ptr() != got["w"].ptr and torch.equal(copied, sd["w"])
        iface = got["w"].__cuda_array_interface__
        assert iface["data"][1] is True
        del loaded, copies, copied, cap
