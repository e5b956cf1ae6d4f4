# SPDX-License-Identifier: MIT
"""Fixtures of the Python package's tests: a real gpushmd on a temporary socket (the
tests/integration pattern), connections, unique names, and the daemon's view of a
buffer's references.  Run by tests/python/test-python.sh, which sets GPUSHMD,
GPUSHM_LIBRARY (the built libgpushm) and PYTHONPATH (python/)."""
from __future__ import annotations

import atexit
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

GPUSHMD = os.environ.get("GPUSHMD")
#: The build directory under make check (and scripts that run the tests like it).
BUILD = os.environ.get("GPUSHM_TEST_BUILDDIR", "")
FAKE_CUDA = os.environ.get("GPUSHM_FAKE_CUDA_LIB")
HAVE_FAKE_CUDA = bool(FAKE_CUDA and os.access(FAKE_CUDA, os.R_OK))


#: make check names the fake driver (GPUSHM_FAKE_CUDA_LIB) and every build makes it:
#: missing there, it is a build regression, not a skip.
FAKE_CUDA_EXPECTED = bool(BUILD and FAKE_CUDA)


def require_built(path: str, what: str, expected: bool) -> None:
    """Skips the test without path, unless it should have been built (expected): then a
    missing one fails, as a skip would hide the regression."""
    if os.access(path, os.R_OK):
        return
    if expected:
        pytest.fail(f"{what} is not built ({path}), though this build makes it")
    pytest.skip(f"{what} not built")


def native_env(env: dict | None = None) -> dict:
    """The environment for a program of the build (gpushmd, the examples): without the
    sanitizer runtime test-python.sh preloads into Python for a sanitizer build's
    libgpushm, since those programs carry their own."""
    env = dict(os.environ if env is None else env)
    preload = os.environ.get("GPUSHM_TEST_PYTHON_PRELOAD")
    if preload and env.get("LD_PRELOAD") == preload:
        del env["LD_PRELOAD"]
        # and with their own leak checking, which Python's exit would have drowned
        env["ASAN_OPTIONS"] = os.environ.get("GPUSHM_TEST_NATIVE_ASAN_OPTIONS", "")
    return env


class Daemon:
    """gpushmd on a socket of its own; stop() checks it exits 0 and removes its socket."""

    def __init__(self, *args: str, env: dict | None = None) -> None:
        if not GPUSHMD:
            pytest.fail("GPUSHMD is not set (run through tests/python/test-python.sh)")
        self.dir = tempfile.mkdtemp(prefix="gpushm-py.")
        os.chmod(self.dir, 0o755)  # other uids (the permission tests) reach the socket
        self.socket = os.path.join(self.dir, "gpushmd.sock")
        # CI's valgrind stage runs the daemon under valgrind, as tests/harness.c does
        # (Python itself is left out: valgrind over CPython would take the stage's time)
        wrap = (["valgrind", "-q", "--error-exitcode=99", "--leak-check=full",
                 "--errors-for-leak-kinds=definite"]
                if os.environ.get("GPUSHM_TEST_VALGRIND") else [])
        # other uids connect in some tests, whatever groups this machine has
        self.proc = subprocess.Popen([*wrap, GPUSHMD, "--socket", self.socket, "--socket-group",
                                      "none", "--socket-mode", "0666", "--log-level", "warn",
                                      *args], env=native_env(env))
        import gpushm
        deadline = time.monotonic() + 20
        while True:
            try:
                gpushm.connect(self.socket, "fixture").close()
                return
            except gpushm.Error:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    pytest.fail(f"gpushmd did not start (exit {self.proc.poll()})")
                time.sleep(0.01)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                pytest.fail("gpushmd did not stop on SIGTERM")
            assert rc == 0, f"gpushmd exited {rc}"
            assert not os.path.exists(self.socket), "gpushmd left its socket behind"
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon():
    """The session's gpushmd, with the fake CUDA driver where it is built (two fake
    GPUs); GPUSHM_SOCKET points at it, so gpushm's default connection finds it."""
    if HAVE_FAKE_CUDA:
        os.environ["GPUSHM_CUDA_LIBRARY"] = FAKE_CUDA
        os.environ["GPUSHM_FAKE_CUDA_DEVICES"] = "2"
    d = Daemon("--allow-legacy-ipc", "yes")
    os.environ["GPUSHM_SOCKET"] = d.socket
    yield d
    import gpushm.api
    if gpushm.api._default is not None:
        gpushm.api._default.close()
    gc.collect()
    d.stop()


@pytest.fixture
def conn(daemon):
    import gpushm
    with gpushm.connect(daemon.socket, "pytest") as c:
        yield c


@pytest.fixture
def name(request, daemon):
    """A buffer name of this test's own, unlinked (if it still exists) afterwards."""
    import gpushm
    import re
    import zlib
    # names are [A-Za-z0-9._-]; the id's checksum keeps parametrised ones apart
    n = "py-%s-%08x" % (re.sub(r"[^A-Za-z0-9._-]", "-", request.node.originalname)[:90],
                        zlib.crc32(request.node.nodeid.encode()))
    yield n
    gc.collect()
    try:
        gpushm.unlink(n)
    except gpushm.NotFound:
        pass


def daemon_refs(buffer_name: str, conn=None) -> int | None:
    """The daemon's references to a buffer (None: it is gone), asked on conn (default: the
    default connection).  Ask on the connection the last close went through: closes do
    not wait for the daemon, and only later requests on that connection are sure to see
    them."""
    import gpushm
    gc.collect()
    for info in (conn.list() if conn is not None else gpushm.list()):
        if info.name == buffer_name:
            return info.refs
    return None


def run_python(code: str, *, user: int | None = None, check: bool = True,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter (this one), optionally as another uid (setpriv;
    root only), with this process's environment."""
    argv = [sys.executable, "-c", code]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + argv
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                       env={**os.environ, **(env or {})})
    if check and p.returncode != 0:
        raise AssertionError(f"child exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def can_switch_user() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def other_user_env(user: int = 65534) -> dict:
    """What run_python(user=...) needs so that user can import the package and load the
    library under test: nothing more where the tree is readable to it; a world-readable
    copy of both where it is not (a checkout in a 0700 home).  Skips, saying why,
    without root and setpriv, or where user cannot run this Python at all."""
    if not can_switch_user():
        pytest.skip("needs root and setpriv")
    import gpushm
    package = os.path.dirname(gpushm.__file__)
    library = os.environ.get("GPUSHM_LIBRARY", "")
    probe = ("import os, sys; print(' '.join(p for p in sys.argv[1:] "
             "if p and not os.access(p, os.R_OK | (os.X_OK if os.path.isdir(p) else 0))))")
    p = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups",
                        sys.executable, "-c", probe, package, library],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        pytest.skip(f"uid {user} cannot run {sys.executable} here: {p.stderr.strip()[-200:]}")
    if not p.stdout.strip():
        return {}
    copy = tempfile.mkdtemp(prefix="gpushm-other-user-")
    atexit.register(shutil.rmtree, copy, True)
    os.chmod(copy, 0o755)
    shutil.copytree(package, os.path.join(copy, "gpushm"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PYTHONPATH": copy}
    if library:
        env["GPUSHM_LIBRARY"] = os.path.join(copy, os.path.basename(library))
        shutil.copy(os.path.realpath(library), env["GPUSHM_LIBRARY"])
    for root, dirs, files in os.walk(copy):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    return env
