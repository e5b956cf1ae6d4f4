# SPDX-License-Identifier: MIT
"""examples/python's C halves against the package, in host memory (the GPU run with
PyTorch is tests/gpu/test-python-gpu.sh): a C producer's hand-written manifest opens as
the right NumPy array, and a NumPy producer's buffer passes the C consumer's check."""
import os
import subprocess

import numpy as np
import pytest

import gpushm
from conftest import BUILD, daemon_refs, native_env, require_built

EXAMPLES = os.path.join(BUILD, "examples", "python")


@pytest.fixture(autouse=True)
def examples_built():
    # under make check (GPUSHM_TEST_BUILDDIR) the examples are built: missing is a failure
    for program in ("c-producer", "c-consumer"):
        require_built(os.path.join(EXAMPLES, program), f"examples/python/{program}", bool(BUILD))


def test_c_producer_to_python(name):
    out = subprocess.run([os.path.join(EXAMPLES, "c-producer"), name, "1000"], check=True,
                         capture_output=True, text=True, env=native_env()).stdout
    assert "1000 floats written to host memory" in out
    t = gpushm.open(name, readonly=True)
    a = np.asarray(t)
    assert a.dtype == np.float32 and a.shape == (1000,)
    assert np.array_equal(a, np.arange(1000, dtype=np.float32) * 0.5)


def test_python_to_c_consumer(name):
    gpushm.share(name, np.arange(5000, dtype=np.float32) * 0.5).close()
    out = subprocess.run([os.path.join(EXAMPLES, "c-consumer"), name], check=True,
                         capture_output=True, text=True, env=native_env()).stdout
    assert "5000 floats verified" in out and '"dtype":"float32"' in out
    assert daemon_refs(name) is None  # the consumer removed the name and released it
    # a wrong value is caught: the consumer's check can fail
    bad = np.arange(10, dtype=np.float32) * 0.5
    bad[7] = -1
    gpushm.share(name, bad).close()
    p = subprocess.run([os.path.join(EXAMPLES, "c-consumer"), name], capture_output=True,
                       text=True, env=native_env())
    assert p.returncode == 1 and "x[7] = -1" in p.stderr
