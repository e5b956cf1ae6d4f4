# SPDX-License-Identifier: MIT
"""The PEP 517 build backend of the gpushm Python package, kept in its source tree.

Why not setuptools: the package must install on GPU hosts without network access, into a
fresh virtualenv, with ``pip install --no-index ./python``.  pip builds a package in an
isolated environment into which it installs the backend the package names; with
``--no-index`` there is nowhere to get setuptools from, and the install fails.  A backend
in the tree (``backend-path``) needs nothing: building the package is zipping its files
with their metadata (PEP 427 wheels, PEP 660 editable wheels, PEP 517 sdists).  The
project's metadata is pyproject.toml's [project] table, read here.

One optional part is C: gpushm/_speedups.c, the hand-off's hot calls without ctypes.  It is
compiled with the interpreter's compiler where that, Python's headers and gpushm.h are
here (the wheel is then this interpreter's and platform's), and left out with the reason
on stderr where not (a pure wheel: the package takes its ctypes path).
``GPUSHM_PURE_PYTHON=1`` leaves it out; ``GPUSHM_INCLUDE`` names gpushm.h's directory;
``CC``, ``CPPFLAGS``, ``CFLAGS`` and ``LDFLAGS`` are honoured (a distribution's hardening).
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "gpushm"
# Fixed timestamps: the same tree builds the same wheel.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
SPEEDUPS = "_speedups.c"
# gpushm's headers the extension includes (an sdist carries them in _include/)
HEADERS = ("gpushm.h", "gpushm-dlpack.h")


def _project() -> dict:
    """The [project] table's string fields and dependency lists (a TOML subset: what
    pyproject.toml uses; tomllib is not in every Python this supports)."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not table:
        raise RuntimeError("pyproject.toml has no [project] table")
    fields = dict(re.findall(r'^(\w[\w-]*)\s*=\s*"([^"]*)"\s*$', table.group(1), re.M))
    for key, body in re.findall(r"^(\w[\w-]*)\s*=\s*\[(.*?)\]", table.group(1), re.M | re.S):
        fields[key] = re.findall(r'"([^"]*)"', body)
    with open(os.path.join(ROOT, PACKAGE, "__init__.py"), encoding="utf-8") as f:
        version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not version or fields.get("version") != version.group(1):
        raise RuntimeError("pyproject.toml's version and gpushm.__version__ differ")
    return fields


def _metadata() -> str:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}"]
    if "license" in p:
        lines.append(f"License: {p['license']}")
    for classifier in p.get("classifiers", []):
        lines.append(f"Classifier: {classifier}")
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    for dep in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {dep}")
    return "\n".join(lines) + "\n"


def _dist_info() -> str:
    p = _project()
    return f"{p['name']}-{p['version']}.dist-info"


def _wheel_name(tag: str) -> str:
    p = _project()
    return f"{p['name']}-{p['version']}-{tag}.whl"


def _platform_tag() -> str:
    """This interpreter's wheel tag (cp311-cp311-linux_x86_64): an extension is its alone."""
    version = f"{sys.version_info[0]}{sys.version_info[1]}"
    platform = re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())
    return f"cp{version}-cp{version}{getattr(sys, 'abiflags', '')}-{platform}"


def _headers_dir() -> "str | None":
    """Where gpushm.h is: $GPUSHM_INCLUDE, an sdist's _include, the source tree's include,
    or the system's."""
    for d in (os.environ.get("GPUSHM_INCLUDE", ""), os.path.join(ROOT, "_include"),
              os.path.join(os.path.dirname(ROOT), "include"), "/usr/local/include",
              "/usr/include"):
        if d and all(os.path.exists(os.path.join(d, h)) for h in HEADERS):
            return d
    return None


def compile_speedups(directory: str) -> "tuple[str | None, str]":
    """gpushm/_speedups.c compiled into directory: (the file's name, "") or (None, why)."""
    if os.environ.get("GPUSHM_PURE_PYTHON", "") not in ("", "0"):
        return None, "GPUSHM_PURE_PYTHON is set"
    if sys.implementation.name != "cpython":
        return None, f"{sys.implementation.name} is not CPython"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None, "a free-threaded Python (the extension is for builds with the GIL)"
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return None, f"no Python.h in {include} (Debian: apt-get install python3-dev)"
    headers = _headers_dir()
    if headers is None:
        return None, "no gpushm.h (Debian: libgpushm-dev; or GPUSHM_INCLUDE=DIR)"
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not cc or not shutil.which(cc[0]):
        cc = ["cc"]
    if not shutil.which(cc[0]):
        return None, "no C compiler (Debian: apt-get install gcc)"
    name = "_speedups" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    out = os.path.join(directory, name)
    flags = [f for var in ("CPPFLAGS", "CFLAGS") for f in shlex.split(os.environ.get(var, ""))]
    command = cc + ["-O2", "-DNDEBUG", "-shared", "-fPIC"] + flags + [
        "-I", include, "-I", headers, "-o", out, os.path.join(ROOT, PACKAGE, SPEEDUPS)] + \
        shlex.split(os.environ.get("LDFLAGS", ""))
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{shlex.join(command)}: {e}"
    if run.returncode != 0:
        return None, f"{shlex.join(command)} failed: {run.stderr.strip()[-600:]}"
    return name, ""


def _speedups_entry() -> "tuple[tuple[str, bytes] | None, str]":
    """The compiled extension as a wheel entry, or None and why."""
    with tempfile.TemporaryDirectory(prefix="gpushm-build-") as d:
        name, why = compile_speedups(d)
        if name is None:
            print(f"gpushm: building without gpushm._speedups (the package takes its "
                  f"ctypes path, slower per call): {why}", file=sys.stderr)
            return None, why
        return (f"{PACKAGE}/{name}", _read(os.path.join(d, name))), ""


def _package_files():
    """(path in the wheel, path on disk) of every file of the package."""
    base = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py") or name == "py.typed":
                disk = os.path.join(dirpath, name)
                yield os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk


def _write_wheel(directory: str, entries, tag: str = "py3-none-any") -> str:
    """A wheel of entries ((name, bytes) pairs) plus its dist-info; returns its name."""
    dist_info = _dist_info()
    purelib = "true" if tag == "py3-none-any" else "false"
    entries = list(entries) + [
        (f"{dist_info}/METADATA", _metadata().encode()),
        (f"{dist_info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: gpushm_build\n"
                               f"Root-Is-Purelib: {purelib}\nTag: {tag}\n".encode()),
    ]
    record = io.StringIO()
    for name, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{name},sha256={digest},{len(data)}\n")
    record.write(f"{dist_info}/RECORD,,\n")
    entries.append((f"{dist_info}/RECORD", record.getvalue().encode()))
    wheel = _wheel_name(tag)
    with zipfile.ZipFile(os.path.join(directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- PEP 517 / PEP 660 hooks ---------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist_info = _dist_info()
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    with open(os.path.join(metadata_directory, dist_info, "METADATA"), "w") as f:
        f.write(_metadata())
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = [(name, _read(disk)) for name, disk in _package_files()]
    speedups, _ = _speedups_entry()
    if speedups is None:
        return _write_wheel(wheel_directory, entries)
    return _write_wheel(wheel_directory, entries + [speedups], _platform_tag())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file puts the source tree on sys.path: edits take effect without reinstalling
    # (the extension is compiled into the tree, as setuptools' build_ext --inplace does:
    # rebuild it after editing _speedups.c).
    name, why = compile_speedups(os.path.join(ROOT, PACKAGE))
    if name is None:
        print(f"gpushm: without gpushm._speedups: {why}", file=sys.stderr)
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth", (ROOT + "\n").encode())],
                        "py3-none-any" if name is None else _platform_tag())


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{p['name']}-{p['version']}"
    name = f"{base}.tar.gz"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
             ("_build_backend/gpushm_build.py", os.path.abspath(__file__)),
             (f"{PACKAGE}/{SPEEDUPS}", os.path.join(ROOT, PACKAGE, SPEEDUPS))]
    headers = _headers_dir()
    if headers is not None:  # (a build from the sdist finds them without libgpushm-dev)
        files += [(f"_include/{h}", os.path.join(headers, h)) for h in HEADERS]
    files += list(_package_files())
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        pkg_info = _metadata().encode()
        for arcname, data in [("PKG-INFO", pkg_info)] + [(a, _read(d)) for a, d in files]:
            info = tarfile.TarInfo(f"{base}/{arcname}")
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return name
