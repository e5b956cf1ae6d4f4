# SPDX-License-Identifier: MIT
"""Every failure is a gpushm.Error subclass carrying the library's code and the daemon's
words, and the built-in exception a Python program would catch: each provoked for real
where a test can, and the whole GPUSHM_E_* map checked against the library."""
import ctypes
import errno
import gc
import os
import threading
import time

import numpy as np
import pytest

import gpushm
from conftest import Daemon, daemon_refs, other_user_env, run_python


def test_not_found(conn):
    with pytest.raises(gpushm.NotFound) as e:
        conn.open("py-never-created")
    err = e.value
    assert isinstance(err, FileNotFoundError) and err.errno == errno.ENOENT
    assert err.code == gpushm.CODES["NOENT"] == -2 and err.detail
    assert "py-never-created" in str(err) and err.detail in str(err)
    with pytest.raises(FileNotFoundError):
        gpushm.open("py-never-created")


def test_messages_say_it_once(conn, name):
    """Issue 42: each message names the failure once, without OSError's "[Errno N]"
    (the errno stays on the exception), and a near miss of a name this uid may see is
    offered."""
    conn.create(name, 16).close()
    with pytest.raises(gpushm.NotFound) as e:
        gpushm.open(name[:-1] + "X" + name[-1])  # a typo: one letter off
    text = str(e.value)
    assert e.value.errno == errno.ENOENT and "[Errno" not in text, text
    assert "no such buffer" not in text and f"(did you mean {name!r}?)" in text, text
    with pytest.raises(gpushm.NotFound) as e:
        gpushm.open("py-nothing-like-it")
    assert "did you mean" not in str(e.value)
    with pytest.raises(gpushm.Exists) as e:
        conn.create(name, 16)
    assert str(e.value) == f"create {name!r}: {name!r} already exists", str(e.value)
    with pytest.raises(gpushm.InvalidName) as e:
        conn.create("bad name!", 16)
    assert str(e.value).lower().count("invalid buffer name") == 1, str(e.value)
    # the library's and gpushmd's own "unsupported: ..." (no daemon here refuses a backend
    # for certain: the words are checked as the package composes them)
    err = gpushm.errors.make_error(gpushm.CODES["UNSUPPORTED"], "unsupported: cuda-fd backend "
                                   "unavailable: no CUDA driver", "create 'x'",
                                   gpushm._lib.strerror(gpushm.CODES["UNSUPPORTED"]))
    assert str(err) == "create 'x': unsupported: cuda-fd backend unavailable: no CUDA driver", err


def test_no_suggestion_of_what_this_uid_cannot_see(conn, name):
    """The near miss is looked for among what this uid may list: a buffer of root's that
    uid 65534 may not read is not offered, nor said to exist."""
    conn.create(name, 16, mode=0o600).close()
    run_python(f"""
import gpushm
try:
    gpushm.open({(name[:-1] + "X" + name[-1])!r})
    raise SystemExit("opened")
except gpushm.NotFound as e:
    assert "did you mean" not in str(e), str(e)
""", user=65534, env=other_user_env(65534))


def test_device_open_of_host_memory_says_so(conn, name):
    gpushm.share(name, np.arange(4, dtype=np.int32)).close()
    with pytest.raises(gpushm.InvalidArgument, match="host memory"):
        gpushm.open(name, device="cuda")
    assert daemon_refs(name) == 0  # what it opened, closed
    with gpushm.open(name, device="cpu") as t:
        assert t.device == "cpu"


def test_exists(conn, name):
    conn.create(name, 16).close()
    with pytest.raises(gpushm.Exists) as e:
        conn.create(name, 16)
    assert isinstance(e.value, FileExistsError) and e.value.errno == errno.EEXIST
    with pytest.raises(FileExistsError):
        gpushm.share(name, np.zeros(2))
    # open-or-create joins it
    conn.create(name, 16, open_existing=True).close()


def test_open_existing_with_another_manifest(name):
    """open_existing joins a buffer as it is: one made with other tensors is refused,
    never written with ours (its readers would misread our bytes as its dtype)."""
    gpushm.share(name, np.arange(1024, dtype=np.float32)).close()
    with pytest.raises(gpushm.Exists, match="another manifest") as e:
        gpushm.share(name, np.arange(256, dtype=np.int64) * 7, open_existing=True)
    assert isinstance(e.value, FileExistsError) and e.value.code == gpushm.CODES["EXIST"]
    with pytest.raises(gpushm.Exists, match="another manifest"):
        gpushm.empty(name, 256, "int64", open_existing=True)
    with pytest.raises(gpushm.Exists, match="another manifest"):
        gpushm.share_bundle(name, {"a": np.zeros(4)}, open_existing=True)
    assert daemon_refs(name) == 0  # each refusal closed what it joined
    with gpushm.open(name) as t:  # untouched
        assert t.dtype.name == "float32"
        assert np.array_equal(np.asarray(t), np.arange(1024, dtype=np.float32))
    # the same manifest joins it
    with gpushm.empty(name, 1024, "float32", open_existing=True) as t:
        assert np.asarray(t)[5] == 5


def test_limit_exceeded_by_metadata(conn, name):
    conn.create(name, 16, metadata=b"m" * 4096).close()  # at the limit
    conn.unlink(name)
    with pytest.raises(gpushm.LimitExceeded) as e:
        conn.create(name, 16, metadata=b"m" * 4097)
    assert e.value.code == gpushm.CODES["LIMIT"] and "4097" in e.value.detail
    with pytest.raises(gpushm.NotFound):
        conn.open(name)  # nothing was created


def test_nul_bytes_are_refused(daemon, conn, name):
    """C strings end at a NUL: "name\\0.tmp" would reach the library as "name" and act
    on that buffer.  Refused with the code the library gives a bad name or argument."""
    conn.create(name, 64).close()
    bad = name + "\0.tmp"
    calls = [lambda: conn.unlink(bad), lambda: gpushm.unlink(bad), lambda: conn.open(bad),
             lambda: conn.create(bad, 64), lambda: conn.create_event(bad),
             lambda: conn.open_event(bad), lambda: gpushm.open(bad),
             lambda: gpushm.share(bad, np.zeros(1)), lambda: gpushm.open_bundle(bad)]
    for call in calls:
        with pytest.raises(gpushm.InvalidName, match="NUL") as e:
            call()
        assert isinstance(e.value, ValueError) and e.value.code == gpushm.CODES["NAME"]
    assert daemon_refs(name, conn) == 0  # still there: nothing acted on it
    for socket, client in ((daemon.socket + "\0x", None), (daemon.socket, "client\0x")):
        with pytest.raises(gpushm.InvalidArgument, match="NUL") as e:
            gpushm.connect(socket, client)
        assert e.value.code == gpushm.CODES["INVAL"]


def test_integer_arguments_do_not_wrap(daemon, conn, name, monkeypatch):
    """ctypes wraps ints silently: a timeout past 2^31 ms became a short wait (or for
    ever), and -1 an id, a release number or "no map device".  Timeouts are clamped,
    negative numbers refused."""
    b = conn.create(name, 64, sync=True)
    producer = gpushm.connect(daemon.socket)
    pb = producer.open(name)
    releaser = threading.Timer(0.3, pb.release)
    releaser.start()
    try:
        start = time.monotonic()
        b.acquire(seq=1, timeout=4294967.346)  # 2^32 ms + 50: wrapped to 50 ms before
        assert time.monotonic() - start >= 0.25
    finally:
        releaser.join()
    for seconds in (4294967.346, float("inf"), 1e300):
        b.acquire(seq=1, timeout=seconds)
    with pytest.raises(ValueError, match="negative"):
        b.acquire(seq=-1, timeout=0.05)
    with pytest.raises(ValueError, match="negative"):
        conn.open(-1)
    with pytest.raises(ValueError, match="negative"):
        conn.open(name, map_device=-1)
    with pytest.raises(ValueError, match="negative"):
        conn.create(name + ".2", 64, map_device=-1)
    with pytest.raises(ValueError, match="negative"):
        conn.create(name + ".2", 64, device=-1)
    with pytest.raises(ValueError, match="negative"):
        gpushm.empty(name + ".2", 4, device=-1)
    with pytest.raises(ValueError, match="negative"):
        conn.create(name + ".2", -1)
    with pytest.raises(gpushm.InvalidArgument, match="size must be"):
        conn.create(name + ".2", 2**64 + 64)  # not a 64-byte buffer
    with pytest.raises(ValueError, match="negative"):
        conn.disconnect_client(-1)
    # the connection's request timeout: what reaches the C call
    seen = []
    monkeypatch.setattr(gpushm.core.lib, "gpushm_set_timeout", lambda c, ms: seen.append(ms) or 0)
    conn.set_timeout(4294967.346)
    gpushm.connect(daemon.socket, timeout=1e12).close()
    assert seen == [2**31 - 1, 2**31 - 1]
    monkeypatch.undo()
    pb.close()
    producer.close()
    b.close()


def test_gc_of_a_connection_keeps_the_error_message(conn):
    """A connection freed between a failed call and the reading of its message (a GC)
    disconnects, which on a lost connection fails to send its unmaps: the thread's
    message stays the failed call's."""
    d = Daemon()
    try:
        lost = gpushm.connect(d.socket)
        lost.create("py-gc-message", 64).close()  # leaves its segment mapped, idle
    finally:
        d.stop()
    with pytest.raises(gpushm.Disconnected):
        lost.ping()
    L = gpushm._lib
    out = ctypes.c_void_p()
    r = L.lib.gpushm_buffer_open(conn._live()[1], b"py-never-created", 0, ctypes.byref(out))
    assert r == gpushm.CODES["NOENT"]
    message = L.last_error_message()
    assert "py-never-created" in message
    del lost
    gc.collect()
    assert L.last_error_message() == message


def test_invalid_name_and_argument(conn):
    with pytest.raises(gpushm.InvalidName) as e:
        conn.create("../etc", 16)
    assert isinstance(e.value, ValueError) and isinstance(e.value, gpushm.InvalidArgument)
    with pytest.raises(gpushm.InvalidArgument):
        conn.create("py-too-big", 1 << 50)  # past GPUSHM_LIMIT_BUFFER_SIZE


def test_permission_denied_as_another_user(conn, name):
    env = other_user_env(65534)
    conn.create(name, 64, mode=0o644).close()
    run_python(f"""
import errno, gpushm
t = gpushm.open({name!r}, readonly=True)        # r for others: allowed
assert t.readonly
try:
    gpushm.open({name!r})                       # rw: not for others
    raise SystemExit("opened read-write")
except PermissionError as e:
    assert isinstance(e, gpushm.PermissionDenied) and e.errno == errno.EACCES, e
    assert e.code == gpushm.CODES["PERM"]
try:
    gpushm.unlink({name!r})                     # only the owner or root
    raise SystemExit("unlinked")
except gpushm.PermissionDenied:
    pass
""", user=65534, env=env)


def test_timeout_on_acquire(conn, name):
    with conn.create(name, 64, sync=True) as b:
        assert b.sync_method == "host" and b.release_seq == 0
        b.acquire()  # nothing released: nothing to wait for
        with pytest.raises(gpushm.Timeout) as e:
            b.acquire(seq=1, timeout=0.05)
        assert isinstance(e.value, TimeoutError) and e.value.errno == errno.ETIMEDOUT
        assert b.release() == 1 and b.release_seq == 1
        b.acquire(seq=1, timeout=0)
        with pytest.raises(gpushm.InvalidArgument, match="host memory"):
            b.release(stream=1234)


def test_connect_failed_and_disconnected(tmp_path):
    with pytest.raises(gpushm.ConnectFailed) as e:
        gpushm.connect(str(tmp_path / "nobody.sock"))
    assert isinstance(e.value, ConnectionError)
    # the system's errno, not one for the code: each cause says what it is and what to do
    assert e.value.errno == errno.ENOENT and "no gpushmd socket at" in str(e.value), e.value
    with pytest.raises(gpushm.ConnectFailed) as e:
        gpushm.connect(str(tmp_path))
    assert e.value.errno == errno.ECONNREFUSED and "is a directory" in str(e.value), e.value
    d = Daemon()
    try:
        c = gpushm.connect(d.socket)
        c.ping()
    finally:
        d.stop()
    with pytest.raises(gpushm.Disconnected) as e:
        c.ping()
    assert isinstance(e.value, ConnectionError)
    c.close()


def test_unsupported_without_a_gpu(tmp_path):
    # a daemon that finds no CUDA driver: device memory is unsupported, said so
    d = Daemon(env={**os.environ, "GPUSHM_CUDA_LIBRARY": str(tmp_path / "no-libcuda.so")})
    try:
        with gpushm.connect(d.socket) as c:
            assert c.backends == ["host"]
            with pytest.raises(gpushm.Unsupported) as e:
                c.create("py-device", 4096, backend="cuda-fd")
            assert e.value.code == gpushm.CODES["UNSUPPORTED"] and e.value.detail
    finally:
        d.stop()


def test_every_code_maps_to_its_class():
    lib = gpushm._lib.lib
    classes = set()
    builtin = {"NOENT": FileNotFoundError, "EXIST": FileExistsError, "PERM": PermissionError,
               "TIMEOUT": TimeoutError, "DISCONNECTED": ConnectionError,
               "CONNECT": ConnectionError, "INVAL": ValueError, "NAME": ValueError,
               "NOMEM": MemoryError, "IO": OSError}
    for name, code in gpushm.CODES.items():
        text = lib.gpushm_strerror(code).decode()
        assert text != "unknown error", name
        err = gpushm.errors.make_error(code, "detail", "op", text)
        assert isinstance(err, gpushm.Error) and err.code == code and err.detail == "detail"
        assert type(err) is not gpushm.Error, f"GPUSHM_E_{name} has no class of its own"
        classes.add(type(err))
        if name in builtin:
            assert isinstance(err, builtin[name]), name
        assert "op" in str(err) and "detail" in str(err) and text in str(err)
    assert len(classes) == len(gpushm.CODES)
    # the library knows no code this package does not
    assert lib.gpushm_strerror(-(len(gpushm.CODES) + 1)).decode() == "unknown error"


def test_library_errors_are_clear(tmp_path):
    bogus = tmp_path / "libnot.so"
    bogus.write_bytes(b"not a library")
    p = run_python("import gpushm", env={"GPUSHM_LIBRARY": str(bogus)}, check=False)
    assert p.returncode != 0 and "cannot load" in p.stderr and "GPUSHM_LIBRARY" in p.stderr
    p = run_python("import gpushm", env={"GPUSHM_LIBRARY": "libc.so.6"}, check=False)
    assert "is not libgpushm" in p.stderr


def _import_with(patch: str) -> str:
    """stderr of "import gpushm" in a child whose ctypes.CDLL is patched first."""
    p = run_python(f"""
import ctypes
class CDLL(ctypes.CDLL):
    def __init__(self, name, *args, **kwargs):
        super().__init__(name, *args, **kwargs)
{patch}
ctypes.CDLL = CDLL
import gpushm
""", check=False)
    assert p.returncode != 0, p.stdout
    return p.stderr


@pytest.mark.parametrize("version,match", [
    (0x000300, "needs 0.4 or later"),
    (0x010000, "another major version"),
])
def test_library_version_errors_are_clear(version, match):
    stderr = _import_with(f"""
        if name and "gpushm" in str(name):
            self.gpushm_version = ctypes.CFUNCTYPE(ctypes.c_uint)(lambda: {version})
""")
    assert "LibraryError" in stderr and match in stderr and "GPUSHM_LIBRARY" in stderr


def test_library_version_strings():
    parse = gpushm._lib.parse_version
    assert parse("0.4.0") == (0, 4, 0) and parse("0.4.1+dfsg") == (0, 4, 1)
    assert parse("0.10.2~rc1") == (0, 10, 2)
    with pytest.raises(gpushm.LibraryError, match="major.minor.patch"):
        parse("four")
    assert gpushm.LIBRARY_VERSION[:2] >= gpushm._lib.MIN_VERSION


def test_capsule_api_must_be_visible():
    """libgpushm's capsule destructor finds Python's capsule API through
    dlsym(RTLD_DEFAULT): where it cannot, nothing would ever be closed, so the import
    fails, saying why."""
    with pytest.raises(gpushm.LibraryError, match="could never close"):
        gpushm._capsule.check_capsule_api(object())
    gpushm._capsule.check_capsule_api(ctypes.CDLL(None))
    stderr = _import_with("""
    def __getattr__(self, symbol):
        if self._name is None and symbol.startswith("PyCapsule_"):
            raise AttributeError(symbol)
        return super().__getattr__(symbol)
""")
    assert "LibraryError" in stderr and "PyCapsule_IsValid" in stderr
