# SPDX-License-Identifier: MIT
"""Pieces that need no daemon: dtypes, streams and devices as frameworks spell them, the
manifest codec, the admin dataclasses (with a daemon), and the package's own build."""
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

import gpushm
from gpushm import dtypes, manifest
from gpushm.core import parse_device, stream_handle

ROOT = Path(__file__).resolve().parents[2]


class FakeTorchDtype:
    """What torch.bfloat16 looks like to this package: only its str()."""

    def __init__(self, name):
        self.n = name

    def __str__(self):
        return "torch." + self.n


def test_dtype_spellings():
    f32 = dtypes.float32
    for spelling in ("float32", "<f4", "f4", "=f4", np.float32, np.dtype("float32"),
                     FakeTorchDtype("float32"), f32):
        assert dtypes.dtype(spelling) is f32, spelling
    assert dtypes.dtype(float) is dtypes.float64 and dtypes.dtype(bool) is dtypes.bool_
    assert dtypes.dtype(FakeTorchDtype("bfloat16")) is dtypes.bfloat16
    assert dtypes.dtype("|b1") is dtypes.bool_ and dtypes.dtype("c16") is dtypes.complex128
    assert dtypes.dtype("half") is dtypes.float16
    for bad in ("float", ">f4", "f3", "float8", object()):
        with pytest.raises(TypeError):
            dtypes.dtype(bad)
    with pytest.raises(TypeError, match="DLPack"):
        dtypes.bfloat16.typestr
    assert dtypes.from_dlpack(4, 16) is dtypes.bfloat16
    for d in dtypes.BY_NAME.values():
        if d.kind:
            assert np.dtype(d.typestr).name == d.name


def test_streams_and_devices():
    class Proto:
        def __cuda_stream__(self):
            return (0, 0x1234)

    class Attr:
        __cuda_stream__ = (0, 0x99)

    class TorchLike:
        cuda_stream = 0xABC

    class CupyLike:
        ptr = 0xDEF

    assert stream_handle(None) is None and stream_handle(0) is None and stream_handle(7) == 7
    assert stream_handle(Proto()) == 0x1234 and stream_handle(Attr()) == 0x99
    assert stream_handle(TorchLike()) == 0xABC and stream_handle(CupyLike()) == 0xDEF
    for bad in (True, "s", object()):
        with pytest.raises(TypeError):
            stream_handle(bad)

    class TorchDevice:
        type, index = "cuda", 1

    assert parse_device("cpu") == ("cpu", 0) and parse_device("cuda") == ("cuda", 0)
    assert parse_device("cuda:3") == ("cuda", 3) and parse_device(2) == ("cuda", 2)
    assert parse_device(TorchDevice()) == ("cuda", 1)
    for bad in ("gpu", "cuda:x", True):
        with pytest.raises((ValueError, TypeError)):
            parse_device(bad)


def test_manifest_codec():
    specs = [manifest.make_spec("a", "float32", (2, 3)),
             manifest.make_spec("b", "int8", 5, None, 256)]
    data = manifest.encode(specs)
    assert manifest.decode(data, 261) == specs
    with pytest.raises(gpushm.ManifestError, match="outside"):
        manifest.decode(data, 260)
    assert manifest.decode(b"", 10) is None
    assert specs[0].strides == (3, 1) and specs[0].nbytes == 24 and specs[0].contiguous
    back = manifest.make_spec("r", "int16", (4,), (-1,), 6)
    assert back.span() == (0, 8) and not back.contiguous
    assert manifest.contiguous_strides((0, 3, 2)) == (6, 2, 1)


def test_admin_dataclasses(conn, name):
    with conn.create(name, 100, mode=0o640, lifetime="session", metadata=b"hello") as b:
        info = [i for i in conn.list(metadata=True) if i.name == name][0]
        assert isinstance(info, gpushm.BufferInfo)
        assert (info.size, info.mode, info.lifetime, info.kind, info.backend) == \
            (100, 0o640, "session", "buffer", "host")
        assert info.id == b.id and info.refs == 1 and info.my_refs == 1 and info.linked
        assert info.metadata == b"hello" and info.device == -1 and info.device_uuid is None
        assert [h.refs for h in info.holders] == [1] and info.holders_total == 1
        import os
        assert info.holders[0].pid == os.getpid() == info.creator_pid
        me = [c for c in conn.clients() if c.name == "pytest"]
        assert me and me[0].pid == os.getpid() and me[0].buffers_held >= 1
        s = conn.stats()
        assert isinstance(s, gpushm.Stats) and s.buffers >= 1 and s.clients >= 1
        assert s.requests_by_type["create"][0] >= 1 and s.daemon_version == conn.daemon_version
        assert s.instance_id == conn.instance_id
        assert conn.family_version("core") >= 1 and conn.family_version("admin") >= 1
        assert conn.family_version("no such family") == 0
        assert any(u.backend == "host" and u.buffers >= 1 for u in s.usage)
        # The rows that describe themselves: the same figures, by Prometheus's names.
        assert s.metric("gpushm_clients").value == s.clients
        assert s.metric("gpushm_buffers", state="linked").type == "gauge"
        assert s.metric("gpushm_requests_total", type="create").value >= 1
        assert s.metric("gpushm_creates_total", backend="host", device="-1").type == "counter"
        up = s.metric("gpushm_uptime_seconds")
        assert up.unit == "seconds" and abs(float(up.value) - s.uptime_ms / 1000) < 5
        assert s.metric("gpushm_no_such_metric") is None
        # 0.8: the latency histogram, a row a request type: cumulative buckets in seconds
        h = s.metric("gpushm_request_duration_seconds", type="create")
        assert h.type == "histogram" and h.unit == "seconds" and h.help
        assert h.observations >= 1 and 0 < h.value
        assert len(h.buckets) >= 2 and h.buckets[0][0] < h.buckets[-1][0] < 1000
        counts = [n for _, n in h.buckets]
        assert counts == sorted(counts) and counts[-1] <= h.observations
        assert s.metric("gpushm_backend_buffers", backend="host", device="-1").value >= 1


def _backend():
    sys.path.insert(0, str(ROOT / "python" / "_build_backend"))
    try:
        import gpushm_build
    finally:
        sys.path.pop(0)
    return gpushm_build


def test_package_builds_offline(tmp_path, monkeypatch):
    """What `pip install --no-index ./python` runs: the in-tree backend, no index; a pure
    wheel where the C speedups are not to be built (GPUSHM_PURE_PYTHON, or no compiler)."""
    gpushm_build = _backend()
    assert gpushm_build.get_requires_for_build_wheel() == []
    monkeypatch.setenv("GPUSHM_PURE_PYTHON", "1")
    wheel = gpushm_build.build_wheel(str(tmp_path))
    assert wheel == f"gpushm-{gpushm.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(tmp_path / wheel) as z:
        names = set(z.namelist())
        record = z.read(f"gpushm-{gpushm.__version__}.dist-info/RECORD").decode()
        assert b"Root-Is-Purelib: true" in z.read(f"gpushm-{gpushm.__version__}.dist-info/WHEEL")
    sources = {f"gpushm/{p.name}" for p in (ROOT / "python" / "gpushm").iterdir()
               if p.suffix == ".py" or p.name == "py.typed"}
    assert sources <= names and "gpushm/py.typed" in names
    assert all(n in record for n in sources)
    assert not any("_speedups" in n for n in names)
    monkeypatch.delenv("GPUSHM_PURE_PYTHON")
    monkeypatch.setenv("CC", "false")  # a compiler that fails: still a (pure) wheel
    (tmp_path / "failed").mkdir()
    assert gpushm_build.build_wheel(str(tmp_path / "failed")).endswith("-py3-none-any.whl")
    sdist = gpushm_build.build_sdist(str(tmp_path))
    assert sdist.endswith(".tar.gz")
    with tarfile.open(tmp_path / sdist) as t:
        names = t.getnames()
    base = f"gpushm-{gpushm.__version__}"
    assert f"{base}/gpushm/_speedups.c" in names
    assert {f"{base}/_include/gpushm.h", f"{base}/_include/gpushm-dlpack.h"} <= set(names)


def test_package_builds_its_speedups(tmp_path, name):
    """Where a compiler and Python's headers are, the wheel carries gpushm._speedups and is
    this interpreter's; installed, the package takes the C path, and without the
    extension (GPUSHM_PURE_PYTHON) the ctypes path."""
    gpushm_build = _backend()
    if os.environ.get("GPUSHM_TEST_SPEEDUPS") != "1":
        pytest.skip("test-python.sh built no speedups here (see its first line)")
    wheel = gpushm_build.build_wheel(str(tmp_path))
    assert wheel == f"gpushm-{gpushm.__version__}-{gpushm_build._platform_tag()}.whl"
    site = tmp_path / "site"
    with zipfile.ZipFile(tmp_path / wheel) as z:
        assert b"Root-Is-Purelib: false" in z.read(f"gpushm-{gpushm.__version__}.dist-info/WHEEL")
        assert any(n.startswith("gpushm/_speedups.") and n.endswith(".so") for n in z.namelist())
        z.extractall(site)
    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop("GPUSHM_SPEEDUPS", None)
    probe = ("import gpushm, gpushm._accel as a; print(a.speedups is not None, a.WHY); "
             f"t = gpushm.empty({name!r}, 4, 'int32'); import numpy; "
             f"numpy.asarray(t)[:] = 7; print(int(numpy.asarray(gpushm.open({name!r}))[3])); "
             "t.buffer.close_unlink()")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    first, value = out.stdout.split("\n")[:2]
    assert first.startswith("True gpushm._speedups") and str(site) in first and value == "7"
    env["GPUSHM_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("False GPUSHM_PURE_PYTHON is set")


def test_the_path_this_suite_takes():
    """test-python.sh runs the suite with the speedups it built, then without: each run
    takes the path it says (a fast path that failed to load would fall back silently)."""
    from gpushm import _accel
    used, why = gpushm.speedups()
    assert used == (_accel.speedups is not None) and why == _accel.WHY
    if os.environ.get("GPUSHM_PURE_PYTHON") == "1":
        assert not used and "GPUSHM_PURE_PYTHON" in why
    elif os.environ.get("GPUSHM_TEST_SPEEDUPS") == "1":
        assert used, why
        assert _accel.speedups.__file__ == os.environ["GPUSHM_SPEEDUPS"] in why


def test_star_import_shadows_no_builtin():
    """`from gpushm import *` must not replace open() or list() in the importer."""
    import builtins
    shadowing = [n for n in gpushm.__all__ if hasattr(builtins, n)]
    assert shadowing == [], shadowing
    assert all(hasattr(gpushm, n) for n in gpushm.__all__)
    assert gpushm.open and gpushm.list is gpushm.list_buffers


def test_constants_match_the_headers():
    """The package spells a few of libgpushm's numbers itself (features it asks the
    daemon for, the open-wait limit, the default map device): they are the headers'."""
    import pathlib
    import re
    src = pathlib.Path(__file__).resolve().parents[2]
    text = ((src / "include" / "gpushm.h").read_text()
            + (src / "proto" / "gpushm_limits.h").read_text())

    def define(name):
        m = re.search(rf"#define {name}\s+\(?(-?(?:0x)?[0-9a-fA-F]+)", text)
        assert m, name
        return int(m.group(1).rstrip("uUlL"), 0)

    L = gpushm._lib
    assert L.FEATURE_OPEN_WAIT == define("GPUSHM_FEATURE_OPEN_WAIT")
    assert L.FEATURE_CREATE_GROUP == define("GPUSHM_FEATURE_CREATE_GROUP")
    assert L.LIMIT_OPEN_WAIT_MS == define("GPUSHM_LIMIT_OPEN_WAIT_MS")
    assert L.DEVICE_AUTO == define("GPUSHM_DEVICE_AUTO")
