# SPDX-License-Identifier: MIT
"""The PEP 517 build backend of the gpushm Python package, kept in its source tree.

Why not setuptools: the package must install on GPU hosts without network access, into a
fresh virtualenv, with ``pip install --no-index ./python``.  pip builds a package in an
isolated environment into which it installs the backend the package names; with
``--no-index`` there is nowhere to get setuptools from, and the install fails.  A backend
in the tree (``backend-path``) needs nothing: the package is pure Python, so building it is
zipping its files with their metadata (PEP 427 wheels, PEP 660 editable wheels, PEP 517
sdists).  The project's metadata is pyproject.toml's [project] table, read here.
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "gpushm"
# Fixed timestamps: the same tree builds the same wheel.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


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


def _wheel_name() -> str:
    p = _project()
    return f"{p['name']}-{p['version']}-py3-none-any.whl"


def _package_files():
    """(path in the wheel, path on disk) of every file of the package."""
    base = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py") or name == "py.typed":
                disk = os.path.join(dirpath, name)
                yield os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk


def _write_wheel(directory: str, entries) -> str:
    """A wheel of entries ((name, bytes) pairs) plus its dist-info; returns its name."""
    dist_info = _dist_info()
    entries = list(entries) + [
        (f"{dist_info}/METADATA", _metadata().encode()),
        (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: gpushm_build\n"
                               b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = io.StringIO()
    for name, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{name},sha256={digest},{len(data)}\n")
    record.write(f"{dist_info}/RECORD,,\n")
    entries.append((f"{dist_info}/RECORD", record.getvalue().encode()))
    wheel = _wheel_name()
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
    return _write_wheel(wheel_directory, ((name, _read(disk)) for name, disk in _package_files()))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file puts the source tree on sys.path: edits take effect without reinstalling.
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{p['name']}-{p['version']}"
    name = f"{base}.tar.gz"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
             ("_build_backend/gpushm_build.py", os.path.abspath(__file__))]
    files += list(_package_files())
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        pkg_info = _metadata().encode()
        for arcname, data in [("PKG-INFO", pkg_info)] + [(a, _read(d)) for a, d in files]:
            info = tarfile.TarInfo(f"{base}/{arcname}")
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return name
