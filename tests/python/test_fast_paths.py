# SPDX-License-Identifier: MIT
"""What makes a hand-off through Python cheap (issue 41; bench-handoff-host's row 10) keeps
it right: remembered specs, manifests and create options never pass for what they are not
and stay within their bounds; a Buffer read in one call says what a dozen calls said; a
close_unlink() is one request to gpushmd, as in C."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import daemon_refs

import gpushm
from gpushm import core, manifest
from gpushm._lib import lib


def test_remembered_spec_is_exact():
    spec = manifest.make_spec("", "uint32", (4, 8))
    assert manifest.make_spec("", "uint32", (4, 8)) is spec  # remembered
    assert manifest.make_spec("", "uint32", [4, 8]) == spec  # a list: made, equal
    # equal keys of other types never hit it: refused as before
    for shape in ((4.0, 8), (True, 8)):
        with pytest.raises(gpushm.ManifestError):
            manifest.make_spec("", "uint32", shape)
    with pytest.raises(gpushm.ManifestError):
        manifest.make_spec("", "uint32", (4, 8), offset=1.0)
    assert spec.contiguous and spec.span() == (0, 128) and spec.nbytes == 128


def test_remembered_manifests_are_bounded_and_never_malformed():
    manifest._decode.cache_clear()
    for i in range(manifest._CACHED + 50):
        data = manifest.encode([manifest.make_spec("", "uint8", (i + 1,))])
        assert manifest.decode(data, 4096)[0].shape == (i + 1,)
    assert manifest._decode.cache_info().currsize == manifest._CACHED
    assert manifest._encode.cache_info().currsize <= manifest._CACHED
    assert manifest._contiguous_spec.cache_info().currsize <= manifest._CACHED
    # a manifest that fits one buffer and not a smaller one: each size checked
    data = manifest.encode([manifest.make_spec("", "uint8", (64,))])
    assert manifest.decode(data, 64)
    with pytest.raises(gpushm.ManifestError):
        manifest.decode(data, 63)
    with pytest.raises(gpushm.ManifestError):
        manifest.decode(data, 63)  # refused again: a refusal is not remembered
    # the list decode() returns is the caller's own
    got = manifest.decode(data, 64)
    got.clear()
    assert manifest.decode(data, 64)


def test_create_options_remembered_within_bound(conn, name):
    core._CREATE_OPTS.clear()
    made = []
    for i in range(core._CREATE_OPTS_MAX + 6):
        b = conn.create(f"{name}-{i}", 64, mode=0o600, metadata=b"m%d" % i)
        assert b.metadata == b"m%d" % i  # each its own metadata, not a remembered one's
        made.append(b)
        assert len(core._CREATE_OPTS) <= core._CREATE_OPTS_MAX
    again = conn.create(f"{name}-again", 64, mode=0o640, metadata=b"m1")
    assert again.metadata == b"m1" and again.owner == made[1].owner
    for b in made + [again]:
        b.close_unlink()


def test_described_in_one_call(conn, name):
    if not hasattr(lib, "gpushm_buffer_describe"):
        pytest.fail("the libgpushm under test is this tree's: it has gpushm_buffer_describe")
    b = conn.create(name, 4096, metadata=b"{}")
    r = conn.open(name, readonly=True)
    for h in (b, r):
        raw = core._DESCRIBE
        try:  # the accessors one by one, as a library before 0.8 is read
            core._DESCRIBE = None
            slow = core.Buffer(lib.gpushm_buffer_ref(h._live()[1]) or h._live()[1], conn)
        finally:
            core._DESCRIBE = raw
        for field in ("name", "id", "size", "backend", "device", "map_device", "readonly",
                      "owner", "metadata", "ptr", "image"):
            assert getattr(slow, field) == getattr(h, field), field
        slow.close()
    assert r.readonly and not b.readonly and b.metadata == b"{}"
    r.close()
    b.close_unlink()


def test_close_unlink_is_one_request(conn, name):
    def requests():  # what a close and an unlink are to gpushmd
        stats = conn.stats()
        rows = (stats.metric("gpushm_requests_total", type=t) for t in ("close", "unlink"))
        return sum(row.value for row in rows if row is not None)  # (none counted yet: no row)

    b = conn.create(name, 4096)
    before = requests()
    b.close_unlink()
    conn.ping()  # after the one-way close
    assert requests() - before == 1
    with pytest.raises(gpushm.NotFound):
        conn.open(name)
    # a view's open keeps the memory; the name goes at once, the rest with the view
    t = gpushm.empty(name, 4, "uint32", conn=conn)
    view = t.memoryview()
    before = requests()
    t.buffer.close_unlink()
    conn.ping()
    assert requests() - before == 1
    with pytest.raises(gpushm.NotFound):
        conn.open(name)
    assert len(view) == 16
    del view


def test_empty_plans_are_exact_and_bounded(conn, name):
    """gpushm.empty() with the C speedups plans each kind of tensor once per connection:
    every tensor still gets its own buffer, size and manifest; a plan is per connection
    and per argument, bounded; an open_existing create is never planned (it compares the
    manifest it joins); arguments that cannot key a plan go the Python way."""
    from gpushm import _accel, api
    conn._empty_plans.clear()
    made = [gpushm.empty(f"{name}.{i}", (2, 3), "float32", conn=conn) for i in range(3)]
    other = gpushm.empty(f"{name}.u8", 5, "uint8", conn=conn)
    listed = gpushm.empty(f"{name}.list", [4], "int16", conn=conn)  # planned by its spec
    planned = len(conn._empty_plans)
    assert planned == (3 if _accel.speedups is not None else 0)
    # an argument equal to a planned one, of a type the Python path refuses, is refused
    with pytest.raises(gpushm.ManifestError, match="not an integer"):
        gpushm.empty(f"{name}.f", (2.0, 3.0), "float32", conn=conn)
    for mode in (0o600, 0o640, 0o600):  # each mode its own plan, and the mode it asked
        t = gpushm.empty(f"{name}.m", 5, "uint8", conn=conn, mode=mode)
        info = [b for b in gpushm.list_buffers(conn=conn) if b.name == f"{name}.m"][0]
        assert info.mode & 0o777 == mode
        t.buffer.close_unlink()
    with pytest.raises(TypeError, match="bool"):
        gpushm.empty(f"{name}.d", 5, "uint8", conn=conn, device=False)
    planned = len(conn._empty_plans)
    for i, t in enumerate(made):
        assert t.buffer.name == f"{name}.{i}" and t.shape == (2, 3) and t.buffer.size == 24
        assert t.buffer.metadata == made[0].buffer.metadata and t.dtype.name == "float32"
        with gpushm.open(f"{name}.{i}", conn=conn) as again:
            assert again.shape == (2, 3) and again.dtype.name == "float32"
    assert other.buffer.size == 5 and other.dtype.name == "uint8"
    assert listed.shape == (4,) and listed.dtype.name == "int16"
    assert len({t.buffer.id for t in made + [other, listed]}) == 5
    # open_existing: never planned, and a join of another manifest still refused
    with pytest.raises(gpushm.Exists, match="another manifest"):
        gpushm.empty(f"{name}.u8", 5, "int8", conn=conn, open_existing=True)
    joined = gpushm.empty(f"{name}.u8", 5, "uint8", conn=conn, open_existing=True)
    assert joined.buffer.id == other.buffer.id
    assert len(conn._empty_plans) == planned
    # another connection plans its own
    c2 = gpushm.connect()
    t2 = gpushm.empty(f"{name}.c2", (2, 3), "float32", conn=c2)
    assert t2.buffer.connection is c2
    assert len(c2._empty_plans) == (1 if _accel.speedups is not None else 0)
    # bounded
    if _accel.speedups is not None:
        for i in range(api._EMPTY_PLANS_MAX + 5):
            gpushm.empty(f"{name}.b{i}", i + 1, "uint8", conn=conn).buffer.close_unlink()
        assert 0 < len(conn._empty_plans) <= api._EMPTY_PLANS_MAX
    joined.close()
    for t in made + [other, listed, t2]:
        t.buffer.close_unlink()
    c2.close()


def test_open_in_c_falls_back_where_it_should(conn, name):
    """gpushm.open()'s C path hands back what it does not make (a bundle, bytes without a
    manifest, a closed connection, a name with a NUL) to the Python path, which answers as
    it always did."""
    for t in gpushm.share_bundle(name, {"a": np.zeros(2, np.uint8),
                                        "b": np.ones(3, np.int32)}, conn=conn).values():
        t.close()
    with pytest.raises(gpushm.ManifestError, match="holds 2 tensors"):
        gpushm.open(name, conn=conn)
    conn.create(name + ".raw", 7).close()
    with gpushm.open(name + ".raw", conn=conn) as raw:
        assert raw.dtype.name == "uint8" and raw.shape == (7,)
    with pytest.raises(gpushm.InvalidName):
        gpushm.open(name + "\0x", conn=conn)
    # a str subclass is what str() makes of it, as on the Python path
    class Named(str):
        def __str__(self):
            return "other-" + super().__str__()
    with pytest.raises(gpushm.NotFound, match="other-"):
        gpushm.open(Named(name + ".raw"), conn=conn)
    # another kind of handle passed as the connection is refused, never used as one
    with conn.create(name + ".h", 8) as handle:
        with pytest.raises(AttributeError):
            gpushm.open(name + ".raw", conn=handle)
        with pytest.raises(AttributeError):
            gpushm.empty(name + ".x", 4, conn=handle)
    conn.unlink(name + ".h")
    closed = gpushm.connect()
    closed.close()
    with pytest.raises(gpushm.ClosedError):
        gpushm.open(name + ".raw", conn=closed)
    with pytest.raises(gpushm.ClosedError):
        gpushm.empty(name + ".new", 4, conn=closed)
    assert daemon_refs(name, conn) == 0 and daemon_refs(name + ".raw", conn) == 0


def test_dlpack_descriptions_remembered_within_bound(conn, name):
    """core._DESCS_MAX crossed: each DLPack export still describes its own spec, and what
    is remembered stays within the bound."""
    core._DESCS.clear()
    with conn.create(name, 4096) as b:
        np.asarray(b.view("uint8", (4096,)))[:] = np.arange(4096) % 251
    for i in range(core._DESCS_MAX + 10):
        n = i + 1
        t = gpushm.open(name, dtype="uint8", shape=(n,), conn=conn)
        a = np.from_dlpack(t)
        assert a.shape == (n,) and int(a[-1]) == (n - 1) % 251, (i, a.shape)
        assert len(core._DESCS) <= core._DESCS_MAX
        del a
        t.close()
    assert 0 < len(core._DESCS) <= 10  # (started over once the bound was reached)
    conn.unlink(name)
