# SPDX-License-Identifier: MIT
"""Copies from a framework's array into a gpushm tensor, with that framework's own copy.

The package has no CUDA runtime of its own: a device copy is done by PyTorch or CuPy,
into a view of the destination they get through DLPack, and waited for on their current
stream.  Host copies use NumPy where it is importable, else the buffer protocol.
"""
from __future__ import annotations

import struct
from typing import Any, Tuple

from . import dtypes

_SIGNED, _UNSIGNED, _FLOAT = "bhilqn", "BHILQN", "efd"


def framework(obj: Any) -> str:
    """The top-level package an array comes from ("numpy", "torch", "cupy", ...)."""
    return type(obj).__module__.split(".")[0]


def _dtype_of_format(fmt: str) -> dtypes.DType:
    """The DType of a buffer-protocol format ("<f", "@i", "B", ...)."""
    code = fmt.lstrip("@=<!")
    if fmt[:1] in (">", "!") or len(code) != 1:
        raise TypeError(f"unsupported buffer format {fmt!r}")
    size = struct.calcsize(fmt)
    if code == "?":
        return dtypes.bool_
    kind = ("i" if code in _SIGNED else "u" if code in _UNSIGNED or code == "c"
            else "f" if code in _FLOAT else None)
    if kind is None:
        raise TypeError(f"unsupported buffer format {fmt!r}")
    return dtypes.dtype(f"{kind}{size}")


def describe(source: Any) -> Tuple[Tuple[int, ...], dtypes.DType, Tuple[str, int]]:
    """(shape, dtype, (device kind, index)) of an array: NumPy, PyTorch, CuPy, anything
    with shape, dtype and __dlpack_device__, or a buffer-protocol object (host)."""
    if hasattr(source, "shape") and hasattr(source, "dtype"):
        shape = tuple(int(x) for x in source.shape)
        dt = dtypes.dtype(source.dtype)
    else:
        try:
            view = memoryview(source)
        except TypeError:
            raise TypeError(f"cannot share {type(source).__name__}: pass a NumPy, PyTorch or "
                            f"CuPy array, or a buffer-protocol object") from None
        shape, dt = tuple(view.shape or ()), _dtype_of_format(view.format)
    device = ("cpu", 0)
    if hasattr(source, "__dlpack_device__"):
        kind, index = source.__dlpack_device__()
        if int(kind) == 2:
            device = ("cuda", int(index))
        elif int(kind) not in (1, 3):
            raise TypeError(f"{type(source).__name__} lives on DLPack device type {kind}: "
                            f"only CPU and CUDA memory are shared")
    return shape, dt, device


def copy_into(dst: Any, source: Any) -> None:
    """Copies source into the gpushm Tensor dst (same shape and dtype) and waits for it."""
    shape, dt, (kind, _) = describe(source)
    if shape != dst.shape or dt != dst.dtype:
        raise ValueError(f"cannot copy a {dt.name}{list(shape)} array into {dst!r}")
    fw = framework(source)
    if fw == "torch":
        import torch
        view = torch.from_dlpack(dst)
        view.copy_(source)
        if view.is_cuda:
            torch.cuda.current_stream(view.device).synchronize()
        elif source.is_cuda:
            torch.cuda.current_stream(source.device).synchronize()
        return
    if fw == "cupy":
        import cupy
        if dst.buffer.is_device:
            view = cupy.from_dlpack(dst)
            view[...] = source
        else:
            import numpy
            numpy.asarray(dst)[...] = cupy.asnumpy(source)
        cupy.cuda.get_current_stream().synchronize()
        return
    if kind != "cpu" or dst.buffer.is_device:
        raise TypeError(f"copying {type(source).__name__} to or from device memory needs "
                        f"PyTorch or CuPy: gpushm has no CUDA runtime of its own")
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None and (fw == "numpy" or hasattr(source, "__array_interface__")
                              or hasattr(source, "__array__")):
        numpy.copyto(numpy.asarray(dst), numpy.asarray(source))
        return
    view = memoryview(source)
    if not view.c_contiguous:
        raise ValueError("a non-contiguous buffer-protocol source needs NumPy to be copied")
    dst.memoryview()[:] = view.cast("B")
