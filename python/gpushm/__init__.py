# SPDX-License-Identifier: MIT
"""gpushm: share tensors between processes through gpushmd, without copies.

    import gpushm, torch
    gpushm.share("weights", torch.randn(1024, 1024, device="cuda"))   # producer
    w = torch.from_dlpack(gpushm.open("weights"))                     # consumer

Buffers are owned by the gpushmd daemon, not by the producer: they outlive it and are
freed when nobody holds them any more.  See docs/python.md for the API, the lifetime
rules, the manifest format, DLPack and CUDA-array-interface semantics, and sync.
"""
from __future__ import annotations

from ._lib import LIBRARY_PATH, LIBRARY_VERSION, LibraryError
from .admin import BufferInfo, ClientInfo, DeviceStats, Holder, Metric, Stats, Usage, WeightsInfo
from .api import (BUNDLE_ALIGN, clients, connect, create_image, default_connection, empty,
                  empty_start, open, open_bundle, open_start, open_weights, publish_weights,
                  publish_weights_from, share, share_bundle, stats, unlink)
from .api import list_buffers
from .api import list_buffers as list  # gpushm.list(); not in __all__: it would shadow list()
from .core import (Buffer, Connection, Event, Frame, ImageInfo, Pending, Ring, Tensor, Timeline,
                   stream_handle)
from .dtypes import DType, dtype
from .errors import (CODES, ClosedError, ConnectFailed, CudaError, Disconnected, Error, Exists,
                     InvalidArgument, InvalidName, LimitExceeded, ManifestError, NotFound,
                     OutOfMemory, PermissionDenied, ProtocolError, SignallerLost, SystemCallFailed,
                     Timeout, Unsupported, VersionMismatch)
from .manifest import TensorSpec
from .weights import WeightSet

__version__ = "0.8.0"


def speedups() -> "tuple[bool, str]":
    """Whether this process calls libgpushm's hot paths (open, create, close, views,
    DLPack) through the package's C extension, and which file or why not (no compiler or
    Python headers where it was installed, GPUSHM_PURE_PYTHON; docs/python.md)."""
    from . import _accel
    return _accel.speedups is not None, _accel.WHY


#: GPUSHM_FEATURE_* bits (Connection.has_feature)
FEATURE_DISCONNECT = 0x1
FEATURE_FDSTORE = 0x2
FEATURE_SEGMENTS = 0x4
FEATURE_ONEWAY = 0x8
FEATURE_METADATA = 0x10
FEATURE_GRAPHICS = 0x20
FEATURE_STRICT_MODE = 0x40
FEATURE_IPC_FENCES = 0x80
FEATURE_PROMISES = 0x100
FEATURE_WEIGHTS = 0x1000

# What `from gpushm import *` brings: never a name that would shadow a builtin there
# (gpushm.open and gpushm.list stay, spelt with their module; list_buffers is list).
__all__ = [
    "Buffer", "BufferInfo", "BUNDLE_ALIGN", "ClientInfo", "ClosedError", "CODES", "ConnectFailed",
    "Connection", "CudaError", "DeviceStats", "Disconnected", "DType", "Error", "Event", "Exists",
    "Holder", "ImageInfo", "InvalidArgument", "InvalidName", "LIBRARY_PATH", "LIBRARY_VERSION", "LibraryError",
    "LimitExceeded", "ManifestError", "Metric", "NotFound", "OutOfMemory", "PermissionDenied",
    "ProtocolError", "Ring", "Frame", "SignallerLost", "Stats", "SystemCallFailed", "Tensor", "TensorSpec", "Timeline",
    "Timeout",
    "Unsupported", "Usage", "VersionMismatch", "WeightSet", "WeightsInfo", "clients", "connect",
    "default_connection", "create_image", "dtype", "empty", "empty_start", "list_buffers",
    "open_bundle", "open_start", "Pending",
    "open_weights", "publish_weights", "publish_weights_from", "share", "share_bundle", "speedups",
    "stats", "stream_handle", "unlink",
]
