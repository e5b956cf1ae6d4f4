# SPDX-License-Identifier: MIT
"""PyCapsules that own gpushm handles, closed by libgpushm's own C destructor.

A capsule made here holds one thing (gpushm-dlpack.h's GPUSHM_CAPSULE_* kinds): a
buffer's open, a connection, or a DLPack tensor not yet consumed.  When the capsule is
freed, gpushm_capsule_destructor() — C code in libgpushm — closes it.  No Python code runs
for it, so closing works the same during interpreter shutdown, from any garbage
collection, and in a forked child (where libgpushm refuses to close the parent's handles).
The names are libgpushm's own strings: PyCapsule_New() keeps the pointer, and the
capsule may outlive this module.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_void_p, py_object
from typing import Any

from ._lib import (CAPSULE_BUFFER, CAPSULE_CONNECTION, CAPSULE_DLTENSOR,
                   CAPSULE_DLTENSOR_VERSIONED, CAPSULE_RING, DLManagedTensor,
                   DLManagedTensorVersioned, LibraryError, lib)


def check_capsule_api(process: Any) -> None:
    """LibraryError unless Python's capsule API is where libgpushm's destructor looks for
    it: dlsym(RTLD_DEFAULT), the process's global symbols, which is what process
    (ctypes.CDLL(None)) sees.  Without it the destructor closes nothing, and every open,
    view and connection would leak until the process exits."""
    missing = [sym for sym in ("PyCapsule_IsValid", "PyCapsule_GetPointer")
               if not hasattr(process, sym)]
    if missing:
        raise LibraryError(
            f"gpushm: {missing[0]} is not among this process's global symbols (libpython "
            f"loaded RTLD_LOCAL, or python linked without -export-dynamic), so libgpushm "
            f"could never close a buffer, view or connection: load libpython with "
            f"RTLD_GLOBAL")


check_capsule_api(ctypes.CDLL(None))

_api = ctypes.pythonapi
_new = _api.PyCapsule_New
_new.restype = py_object
_new.argtypes = [c_void_p, c_void_p, c_void_p]
_is_valid = _api.PyCapsule_IsValid
_is_valid.restype = c_int
_is_valid.argtypes = [py_object, c_void_p]  # the name: bytes, or libgpushm's own (an address)
_get_pointer = _api.PyCapsule_GetPointer
_get_pointer.restype = c_void_p
_get_pointer.argtypes = [py_object, c_void_p]
_get_name = _api.PyCapsule_GetName
_get_name.restype = c_char_p
_get_name.argtypes = [py_object]

_DESTRUCTOR = ctypes.cast(lib.gpushm_capsule_destructor, c_void_p).value
_NAMES = {kind: lib.gpushm_capsule_name(kind) for kind in
          (CAPSULE_DLTENSOR, CAPSULE_DLTENSOR_VERSIONED, CAPSULE_BUFFER, CAPSULE_CONNECTION,
           CAPSULE_RING)}


def _release(pointer: int, kind: int) -> None:
    """Closes what pointer is, for a capsule that could not be made."""
    if kind == CAPSULE_BUFFER:
        lib.gpushm_buffer_close(pointer)
    elif kind == CAPSULE_CONNECTION:
        lib.gpushm_disconnect(pointer)
    elif kind == CAPSULE_RING:
        lib.gpushm_ring_close(pointer)
    elif kind == CAPSULE_DLTENSOR:
        m = ctypes.cast(pointer, POINTER(DLManagedTensor))
        m.contents.deleter(m)
    else:
        v = ctypes.cast(pointer, POINTER(DLManagedTensorVersioned))
        v.contents.deleter(v)


def own(pointer: int, kind: int) -> object:
    """A capsule that now owns pointer (a GPUSHM_CAPSULE_* kind); should making it fail,
    pointer is closed before the error propagates."""
    try:
        return _new(pointer, _NAMES[kind], _DESTRUCTOR)
    except BaseException:
        _release(pointer, kind)
        raise


_set_name = _api.PyCapsule_SetName
_set_name.restype = c_int
_set_name.argtypes = [py_object, c_char_p]


def close_now(capsule: object, kind: int) -> None:
    """Closes what capsule owns here and now, through ctypes.CDLL (which lets go of the
    GIL for the call), not in the destructor (which holds it).  The capsule's name is
    set to NULL first: the destructor matches no name then, so nothing closes twice.
    The caller holds the only other reference to capsule."""
    raw = _NAMES[kind]
    if not _is_valid(capsule, raw):
        return  # a DLPack consumer has taken it: the consumer's deleter closes it
    p = _get_pointer(capsule, raw)
    if _set_name(capsule, None) != 0:
        raise RuntimeError("PyCapsule_SetName failed")  # (only for an invalid capsule)
    _release(p, kind)


def close_owned(capsule: object, pointer: int, kind: int) -> None:
    """close_now() for a capsule the caller knows still owns pointer (a handle's own,
    never handed to a consumer): one call fewer into Python's C API than asking it."""
    if _set_name(capsule, None) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
    _release(pointer, kind)


def disarm(capsule: object) -> None:
    """take() for a capsule the caller knows still owns its pointer: its destructor will
    close nothing; the caller closes what it held."""
    if _set_name(capsule, None) != 0:
        raise RuntimeError("PyCapsule_SetName failed")


def take(capsule: object, kind: int) -> int:
    """What capsule owns, taken out of its hands (its name set to NULL: the destructor
    closes nothing); the caller closes it.  The caller holds the only other reference."""
    raw = _NAMES[kind]
    if not _is_valid(capsule, raw):
        raise RuntimeError("the capsule holds nothing of that kind")
    p = _get_pointer(capsule, raw)
    if _set_name(capsule, None) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
    return p


def name(capsule: object) -> str:
    """A capsule's name ("used_dltensor" once a DLPack consumer has taken it)."""
    n = _get_name(capsule)
    return n.decode() if n else ""


def pointer(capsule: object, capsule_name: str) -> int:
    """The pointer of a capsule named capsule_name (ValueError for another)."""
    raw = capsule_name.encode()
    if not _is_valid(capsule, raw):
        raise ValueError(f"not a valid capsule named {capsule_name!r}: {name(capsule)!r}")
    return _get_pointer(capsule, raw)
