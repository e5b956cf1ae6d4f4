# SPDX-License-Identifier: MIT
"""``__dlpack__(copy=True)``: a DLPack tensor that is a copy of a gpushm tensor, owned by
its consumer alone (DLPACK_FLAG_BITMASK_IS_COPIED), writable whatever the original is.

Host memory is copied here, into one block of the C heap that holds the managed tensor,
its shape and strides and the bytes, and whose deleter is libc's ``free()``: as for
gpushm's own tensors, no Python code runs when the consumer lets go of it (at
interpreter shutdown, in any thread).  The package has no CUDA runtime of its own, so
device memory is copied by the framework the process imported (PyTorch, else CuPy).
"""
from __future__ import annotations

import ctypes
import sys
from ctypes import POINTER, c_int, c_int64, c_size_t, c_void_p
from typing import TYPE_CHECKING, Optional, Tuple

from . import _capsule
from ._lib import (CAPSULE_DLTENSOR, CAPSULE_DLTENSOR_VERSIONED, DLPACK_FLAG_IS_COPIED,
                   DLPACK_MAJOR, DLPACK_MINOR, DLManagedTensor, DLManagedTensorVersioned, lib)

if TYPE_CHECKING:
    from .core import Tensor

_libc = ctypes.CDLL(None)
_posix_memalign = _libc.posix_memalign
_posix_memalign.restype = c_int
_posix_memalign.argtypes = [POINTER(c_void_p), c_size_t, c_size_t]
# The deleter gets the managed tensor's address, which is the block's: free() is a
# deleter (a pointer argument is passed alike whatever it points to).
_FREE = ctypes.cast(_libc.free, c_void_p).value
#: Where the copy's bytes start in the block, and their alignment: a cache line, more
#: than any element needs.
_ALIGN = 64
_DL_CPU = 1


def _round(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _host_copy(tensor: "Tensor", versioned: bool) -> int:
    """A managed tensor (versioned or legacy) of a copy of tensor's bytes: its address."""
    tensor.buffer._sync_for_consumer(None)
    cap, b, spec, _ = tensor._checked()
    first, end = spec.span()
    struct = DLManagedTensorVersioned if versioned else DLManagedTensor
    ndim = spec.ndim
    arrays_at = _round(ctypes.sizeof(struct))
    data_at = _round(arrays_at + 2 * 8 * max(ndim, 1))
    block = c_void_p()
    if _posix_memalign(ctypes.byref(block), _ALIGN, data_at + max(end - first, 1)) != 0:
        raise MemoryError(f"no memory for a {end - first}-byte copy of {tensor!r}")
    base = block.value or 0
    ctypes.memset(base, 0, data_at)
    # the copy keeps the tensor's strides: the span its elements occupy, byte for byte
    ctypes.memmove(base + data_at, lib.gpushm_buffer_ptr(b) + first, end - first)
    del cap
    m = struct.from_address(base)
    if versioned:
        m.version.major, m.version.minor = DLPACK_MAJOR, DLPACK_MINOR
        m.flags = DLPACK_FLAG_IS_COPIED
    c_void_p.from_address(base + struct.deleter.offset).value = _FREE
    shape = (c_int64 * max(ndim, 1)).from_address(base + arrays_at)
    strides = (c_int64 * max(ndim, 1)).from_address(base + arrays_at + 8 * max(ndim, 1))
    for i in range(ndim):
        shape[i], strides[i] = spec.shape[i], spec.strides[i]
    dl = m.dl_tensor
    dl.data = base + data_at + (spec.offset - first)
    dl.device.device_type, dl.device.device_id = _DL_CPU, 0
    dl.ndim = ndim
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = spec.dtype.code, spec.dtype.bits, 1
    dl.shape = ctypes.cast(shape, POINTER(c_int64))
    dl.strides = ctypes.cast(strides, POINTER(c_int64))
    dl.byte_offset = 0
    return base


def _device_copy(tensor: "Tensor", stream: Optional[int],
                 max_version: Optional[Tuple[int, int]]) -> object:
    """A framework's own copy of a device tensor, exported to the consumer on stream."""
    kwargs: dict = {} if stream is None else {"stream": stream}
    if max_version is not None:
        kwargs["max_version"] = tuple(max_version)
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        copied = torch.from_dlpack(tensor).clone()
    elif "cupy" in sys.modules:
        copied = sys.modules["cupy"].from_dlpack(tensor).copy()
    else:
        raise BufferError(f"copy=True of device memory ({tensor!r}) needs PyTorch or CuPy "
                          f"imported: gpushm has no CUDA runtime of its own (or copy in "
                          f"your framework: torch.from_dlpack(t).clone())")
    try:
        return copied.__dlpack__(**kwargs)
    except TypeError:
        if "max_version" not in kwargs:
            raise
        # a framework older than DLPack 1.0's keywords: its legacy capsule, which a
        # consumer asking for max_version accepts as well (the array API's rule)
        del kwargs["max_version"]
        return copied.__dlpack__(**kwargs)


def capsule(tensor: "Tensor", stream: Optional[int], max_version: Optional[Tuple[int, int]],
            versioned: bool) -> object:
    """What Tensor.__dlpack__(copy=True) returns."""
    if tensor.buffer.is_device:
        return _device_copy(tensor, stream, max_version)
    if stream is not None and stream != -1:
        raise BufferError(f"stream {stream!r} for host memory: pass none")
    base = _host_copy(tensor, versioned)
    return _capsule.own(base, CAPSULE_DLTENSOR_VERSIONED if versioned else CAPSULE_DLTENSOR)
