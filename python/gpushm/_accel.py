# SPDX-License-Identifier: MIT
"""gpushm._speedups (the hand-off's hot calls in C, _speedups.c) bound to the libgpushm
that ctypes loaded, or None where it is not here.

The package works without it: every call it speeds up has its ctypes path beside it.
It is here where pip's build could compile it (a C compiler and Python's headers: the
build backend says which it built); ``GPUSHM_PURE_PYTHON=1`` leaves it unused (the
ctypes path, for comparing the two); ``GPUSHM_SPEEDUPS=FILE`` loads a module built
elsewhere (the source tree's tests and benchmarks, which run the package from python/).
``gpushm.speedups()`` says which path this process takes and why.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import sysconfig
from typing import Any, Optional, Tuple

from ._lib import (CAPSULE_BUFFER, CAPSULE_CONNECTION, CAPSULE_DLTENSOR,
                   CAPSULE_DLTENSOR_VERSIONED, lib)

#: The libgpushm functions the module calls (gpushm_buffer_describe and the pipelined
#: ones: 0.8).
FUNCTIONS = ("gpushm_buffer_open", "gpushm_buffer_create", "gpushm_buffer_close",
             "gpushm_buffer_close_unlink", "gpushm_buffer_describe", "gpushm_buffer_ref",
             "gpushm_buffer_dlpack", "gpushm_buffer_sync_method", "gpushm_capsule_destructor",
             "gpushm_buffer_open_start", "gpushm_buffer_create_start", "gpushm_pending_finish")


def _load() -> Tuple[Optional[Any], str]:
    if os.environ.get("GPUSHM_PURE_PYTHON", "") not in ("", "0"):
        return None, "GPUSHM_PURE_PYTHON is set"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        # (importing it would turn the GIL back on for the whole process; its closes are
        # the Python path's there anyway)
        return None, "a free-threaded Python: the extension is for builds with the GIL"
    path = os.environ.get("GPUSHM_SPEEDUPS")
    try:
        if path:
            spec = importlib.util.spec_from_file_location("gpushm._speedups", path)
            if spec is None or spec.loader is None:
                return None, f"GPUSHM_SPEEDUPS={path} is no extension module"
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            from . import _speedups as module  # type: ignore[attr-defined]
    except ImportError as e:
        if path:
            return None, f"GPUSHM_SPEEDUPS={path}: {e}"
        return None, f"no gpushm._speedups ({e}): this install was built without a C " \
                     f"compiler or Python's headers"
    except Exception as e:  # (a warning made an error, a broken file: the ctypes path)
        return None, f"gpushm._speedups did not load: {type(e).__name__}: {e}"
    missing = [name for name in FUNCTIONS if not hasattr(lib, name)]
    if missing:
        return None, f"the libgpushm loaded has no {missing[0]} (gpushm 0.8 has)"
    table = {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for name in FUNCTIONS}
    table.update(capsule_buffer=lib.gpushm_capsule_name(CAPSULE_BUFFER),
                 capsule_connection=lib.gpushm_capsule_name(CAPSULE_CONNECTION),
                 capsule_dltensor=lib.gpushm_capsule_name(CAPSULE_DLTENSOR),
                 capsule_dltensor_versioned=lib.gpushm_capsule_name(CAPSULE_DLTENSOR_VERSIONED))
    module.bind(table)
    return module, f"gpushm._speedups ({module.__file__})"


speedups, WHY = _load()
