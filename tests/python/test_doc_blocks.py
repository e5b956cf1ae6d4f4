# SPDX-License-Identifier: MIT
"""Every Python block of the README and docs/ runs as printed, each in a fresh
interpreter against a gpushmd of its own (issue 42): a plain ```python block anywhere,
```python needs-torch where PyTorch is importable, ```python needs-gpu where PyTorch
has a GPU (tests/gpu/test-python-gpu.sh runs those on the GPU host).  A ```python fragment
must say so in its first line (it names what the reader brings), and is not run."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import HAVE_FAKE_CUDA, Daemon

SRC = pathlib.Path(__file__).resolve().parents[2]
PAGES = [SRC / "README.md"] + sorted((SRC / "docs").glob("*.md"))
BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)


def blocks():
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            yield pytest.param(m.group(1).strip(), m.group(2),
                               id=f"{page.relative_to(SRC)}:{line}")


def torch_state():
    p = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                       capture_output=True, text=True)
    return None if p.returncode else p.stdout.strip() == "True"


TORCH = torch_state()  # None: no PyTorch; False: no GPU for it; True: both


def test_there_are_blocks():
    assert len(list(blocks())) >= 10


@pytest.mark.parametrize("kind,code", blocks())
def test_block(kind, code, tmp_path):
    assert kind in ("", "needs-torch", "needs-gpu", "fragment"), f"unknown block kind {kind!r}"
    if kind == "fragment":
        assert code.startswith("# (a fragment: "), "a fragment says so in its first line"
        return
    if kind == "needs-torch" and TORCH is None:
        pytest.skip("needs PyTorch, which this Python lacks")
    if kind == "needs-gpu" and (not TORCH or HAVE_FAKE_CUDA):
        # A gpushmd on the fake driver hands out device memory no real GPU can touch.
        pytest.skip("needs PyTorch with a GPU, and gpushmd on the real driver")
    d = Daemon()
    try:
        import gpushm  # (the package under test, wherever this run imports it from)
        here = os.path.dirname(os.path.dirname(os.path.abspath(gpushm.__file__)))
        env = {**os.environ, "GPUSHM_SOCKET": d.socket,
               "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
        p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    finally:
        d.stop()
    assert p.returncode == 0, f"the block failed:\n{code}\n--- its output:\n{p.stdout}{p.stderr}"
