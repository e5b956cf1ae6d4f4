# SPDX-License-Identifier: MIT
"""Connections, buffers, tensors and events: the C library's handles, as Python objects
that close themselves.

Lifetime rules (docs/python.md):

- Every Python object that uses a buffer's memory holds an open of its own, taken with
  gpushm_buffer_ref() and closed by libgpushm's C destructor when the object is freed:
  a ``Buffer`` handle, a ``Tensor``, each DLPack tensor a framework consumed, each
  NumPy/CuPy array made through the array interfaces (through the ``Tensor`` it keeps).
- ``close()`` (or leaving a ``with`` block) drops the handle's own open only.  Memory is
  unmapped when the last open in the process goes: the last view, not the handle.
- A closed handle refuses every further use (``ClosedError``); it never reaches memory.
"""
from __future__ import annotations

import ctypes
import dataclasses
import math
import operator
import os
import sys
from ctypes import byref, c_size_t, c_uint32, c_uint64, c_void_p
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from . import _capsule, _lib, dtypes
from . import manifest as _manifest
from ._accel import speedups as _SP
from ._lib import (CAPSULE_BUFFER, CAPSULE_CONNECTION, CAPSULE_DLTENSOR,
                   CAPSULE_DLTENSOR_VERSIONED, CAPSULE_RING, CREATE_OPEN_EXISTING,
                   CREATE_STRICT_MODE, CREATE_SYNC, CREATE_UNINITIALIZED, DLPACK_LEGACY,
                   LIBRARY_PATH, LIBRARY_VERSION, LIST_ALL, LIST_METADATA, OPEN_READONLY,
                   RING_LATEST, RING_OBSERVER, RING_PRODUCER, BufferDesc, CreateOpts, DLDataType,
                   ExportDesc, ImageDesc, RingFrame, SyncState, TensorDesc,
                   last_error_errno, last_error_message, lib, map_device_flag, strerror,
                   text)
from .errors import CODES, ClosedError, InvalidArgument, Unsupported, make_error

if TYPE_CHECKING:
    from .weights import WeightSet


def _backends() -> Dict[str, int]:
    """Backend names by value, as the library spells them (gpushm_backend_name, 0.7).  A
    library before 0.7 knows exactly the backends of 0.6.  Value 4 names what events
    report (cuda-event), no backend to create buffers with."""
    if not hasattr(lib, "gpushm_backend_name"):
        return {"default": 0, "host": 1, "cuda-ipc": 2, "cuda-fd": 3, "cuda-fabric": 5}
    names = {"default": 0}
    for value in range(1, 32):
        name = lib.gpushm_backend_name(value)
        if name and value != 4:
            names[name.decode()] = value
    return names


BACKENDS = _backends()
BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}
#: Image formats (gpushm-graphics.h) as tensors see their texels: dtype, channels.
IMAGE_FORMATS = {
    "r8-unorm": ("uint8", 1), "rg8-unorm": ("uint8", 2), "rgba8-unorm": ("uint8", 4),
    "rgba8-srgb": ("uint8", 4), "bgra8-unorm": ("uint8", 4), "r16-unorm": ("uint16", 1),
    "rgba16-unorm": ("uint16", 4), "r16-sfloat": ("float16", 1), "rg16-sfloat": ("float16", 2),
    "rgba16-sfloat": ("float16", 4), "r32-sfloat": ("float32", 1), "rg32-sfloat": ("float32", 2),
    "rgba32-sfloat": ("float32", 4), "r32-uint": ("uint32", 1), "rgba32-uint": ("uint32", 4),
    "rgb10a2-unorm": ("uint32", 1), "d32-sfloat": ("float32", 1),
}


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    """An image's description (gpushm_image_desc_t)."""
    format: str
    width: int
    height: int
    depth: int
    mip_levels: int
    array_layers: int
    tiling: str          #: "linear" (rows row_pitch bytes apart) or "optimal" (the device's)
    usage: int           #: GPUSHM_IMAGE_USAGE_* bits
    row_pitch: int       #: linear images: bytes from one row to the next


#: GPUSHM_EXPORT_* (gpushm.h), by the names Buffer.export() takes
EXPORT_TYPES = {"dmabuf": 1, "opaque-fd": 2, "host-pointer": 3, "fabric": 4, "cuda-va": 5}
EXPORT_TYPE_NAMES = {v: k for k, v in EXPORT_TYPES.items()}


@dataclasses.dataclass(frozen=True)
class Export:
    """One way to hand a buffer's memory to another engine (gpushm_export_desc_t): NIXL,
    UCX or an RDMA NIC registering it, Vulkan or GL importing it (docs/concepts.md,
    "Exporting")."""
    type: str             #: a key of EXPORT_TYPES
    fd: int               #: dmabuf, opaque-fd: a new close-on-exec fd, the caller's; else -1
    ptr: int              #: host-pointer, cuda-va: the address fd or ptr reaches from; else 0
    offset: int           #: where the range starts in what fd or ptr reaches
    length: int           #: the range's bytes
    allocation_size: int  #: what fd or ptr reaches: an engine registers or imports it whole
    device: int           #: cuda-va, dmabuf: this process's ordinal; else -1
    readonly: bool        #: the open is read-only
    dedicated: bool       #: the allocation is this buffer's alone (not a segment's slot)
    device_uuid: bytes    #: where the memory lives; zeros for host memory
    fabric_handle: bytes  #: fabric: the 64-byte handle; else zeros

    @property
    def address(self) -> int:
        """The range's first byte (ptr + offset): what NIXL and UCX register."""
        return self.ptr + self.offset


LIFETIMES = {"persistent": 0, "session": 1}
LIFETIME_NAMES = {v: k for k, v in LIFETIMES.items()}
SYNC_METHODS = {0: "none", 1: "host", 2: "ipc-event", 3: "gpu-fence", 4: "cpu-fence"}
#: DLPack device types (DLDeviceType)
DL_CPU, DL_CUDA = 1, 2

StreamLike = Any
DeviceLike = Union[None, str, int, Any]

#: Alignment of each tensor of a bundle or a weight set's buffer: what cudaMalloc gives,
#: more than any element type needs, so that every tensor starts where its framework
#: would put it.
BUNDLE_ALIGN = 256


def check(r: int, operation: str) -> int:
    """r, or the gpushm.Error for it (read right after the call, on the same thread)."""
    if r < 0:
        raise make_error(r, last_error_message(), operation, strerror(r), last_error_errno())
    return r


def _handle(out: c_void_p, operation: str) -> int:
    """The handle a successful call returned through out."""
    if not out.value:
        raise make_error(-7, "the library reported success but returned no handle", operation,
                         strerror(-7))
    return out.value


def c_string(value: Union[str, "os.PathLike[str]"], what: str, *, code: str = "NAME",
             path: bool = False) -> bytes:
    """value as the C string libgpushm gets (UTF-8; os.fsencode for paths).  ctypes ends
    a C string at its first NUL, so "a\\0b" would reach the library as "a" and act on
    another buffer: refused here, with the GPUSHM_E_<code> the library gives the same
    mistake (NAME for buffer and event names, INVAL for socket paths and client names)."""
    raw = os.fsencode(value) if path else str(value).encode()
    if b"\0" in raw:
        err = CODES[code]
        raise make_error(err, f"{what} {value!r} contains a NUL byte", "", strerror(err))
    return raw


#: The longest wait the C API's int milliseconds can say (about 24.8 days); longer
#: ones would wrap negative (for ever) or to a short wait in ctypes.
MAX_TIMEOUT_MS = 2**31 - 1


def timeout_ms(seconds: float) -> int:
    """seconds as the C API's int milliseconds, clamped to MAX_TIMEOUT_MS."""
    ms = seconds * 1000
    return MAX_TIMEOUT_MS if ms >= MAX_TIMEOUT_MS else int(ms)


def _need_numbered(what: str) -> None:
    """Caller-numbered releases and promises came with libgpushm 0.8."""
    if not hasattr(lib, "gpushm_buffer_promise"):
        raise Unsupported(f"libgpushm {'.'.join(map(str, LIBRARY_VERSION))} has no {what} "
                          f"(0.8 does)")


def _need_rings() -> None:
    """Frame rings came with libgpushm 0.8."""
    if not hasattr(lib, "gpushm_ring_create"):
        raise Unsupported(f"libgpushm {'.'.join(map(str, LIBRARY_VERSION))} has no frame rings "
                          f"(0.8 does)")


def _need_timelines() -> None:
    """Timelines came with libgpushm 0.8."""
    if not hasattr(lib, "gpushm_timeline_create"):
        raise Unsupported(f"libgpushm {'.'.join(map(str, LIBRARY_VERSION))} has no timelines "
                          f"(0.8 does)")


_U64_MAX = 2**64 - 1


def non_negative(value: int, what: str) -> int:
    """value as a non-negative int: ctypes turns -1 into 2^64-1 for an unsigned argument
    (another id, another release), and map_device -1 into "no map device"."""
    n = operator.index(value)
    if n < 0:
        raise ValueError(f"{what} {n} is negative")
    return n


#: CU_STREAM_LEGACY: the legacy default stream as DLPack and the CUDA array interface
#: spell it (PyTorch passes it for its default stream).
_LEGACY_STREAM = 1
#: CU_STREAM_PER_THREAD: the calling thread's own default stream.
_PER_THREAD_STREAM = 2


def _as_stream(value: int) -> Optional[int]:
    # NULL names the same stream as CU_STREAM_LEGACY, and lets libgpushm resolve it on the
    # buffer's map device without a current context in the calling thread
    return None if value in (0, _LEGACY_STREAM) else value


def stream_handle(stream: StreamLike) -> Optional[int]:
    """The CUstream of stream (None for NULL, the legacy default stream; 0 and 1 mean it
    too): an int, or an object of a framework: the ``__cuda_stream__`` protocol (CUDA
    Python, recent PyTorch and CuPy: ``(version, handle)``), ``.cuda_stream``
    (torch.cuda.Stream), ``.ptr`` (cupy.cuda.Stream) or ``.handle``."""
    if stream is None:
        return None
    if isinstance(stream, bool):
        raise TypeError("a stream is not a bool")
    if isinstance(stream, int):
        return _as_stream(stream)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if isinstance(value, tuple):
            value = value[1]
        return _as_stream(int(value))
    for attr in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return _as_stream(value)
    raise TypeError(f"{stream!r} is not a CUDA stream: pass an int (a CUstream), a torch or "
                    f"CuPy stream, or an object with __cuda_stream__")


def parse_device(device: DeviceLike) -> Tuple[str, int]:
    """("cpu", 0) or ("cuda", ordinal) for "cpu", "cuda", "cuda:N", N, a torch.device
    or a cupy.cuda.Device."""
    if device is None or (type(device) is str and device == "cpu"):
        return "cpu", 0
    if isinstance(device, bool):
        raise TypeError("a device is not a bool")
    if isinstance(device, int):
        return "cuda", non_negative(device, "device")
    kind = getattr(device, "type", None)
    if isinstance(kind, str):  # torch.device
        index = getattr(device, "index", None)
        return ("cpu", 0) if kind == "cpu" else (kind, non_negative(index or 0, "device"))
    device_id = getattr(device, "id", None)
    if isinstance(device_id, int):  # cupy.cuda.Device
        return "cuda", non_negative(device_id, "device")
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind == "cpu" and not index:
            return "cpu", 0
        if kind == "cuda" and (not index or index.isdigit()):
            return "cuda", int(index or 0)
    raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda' or 'cuda:N'")


def _backend_value(backend: Union[str, int]) -> int:
    if isinstance(backend, int):
        return backend
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}: one of {', '.join(BACKENDS)}") from None


def _lifetime_value(lifetime: Union[str, int]) -> int:
    if isinstance(lifetime, int):
        return lifetime
    try:
        return LIFETIMES[lifetime]
    except KeyError:
        raise ValueError(f"unknown lifetime {lifetime!r}: 'persistent' or 'session'") from None


_DESCRIBE = getattr(lib, "gpushm_buffer_describe", None)
_BUFFER_DESC_SIZE = ctypes.sizeof(BufferDesc)

#: Create options already made, by what they say: a producer making fresh buffers of one
#: kind reuses one (filling the ctypes structure and copying the metadata was a tenth of
#: a create's Python).  Never changed once made: the C call only reads them.
_CREATE_OPTS: Dict[Tuple[int, int, int, int, int, bytes], Any] = {}
_CREATE_OPTS_MAX = 64


def _group_id(group: Optional[Union[int, str]]) -> Optional[int]:
    """A group name or id as the gid a create names (None: the creator's primary).  A
    string of digits that names no group is a gid, as gpushmctl --group and chgrp take
    it; True and False are no gids (group=False would have been group 0)."""
    if group is None:
        return None
    if isinstance(group, bool):
        raise TypeError(f"group={group!r}: a group name or gid")
    if isinstance(group, str):
        import grp
        try:
            return grp.getgrnam(group).gr_gid
        except KeyError:
            digits = group.isascii() and group.isdigit() and len(group) <= 10
            if digits and int(group) < 2**32 - 1:
                return int(group)
            raise make_error(CODES["INVAL"], f"no group named {group!r} here",
                             "create", strerror(CODES["INVAL"])) from None
    return non_negative(group, "group")


def _create_opts(backend: int, device: int, mode: int, lifetime: int, flags: int,
                 metadata: bytes, group: Optional[int] = None) -> Any:
    key = (backend, device, mode, lifetime, flags, metadata, group)
    opts = _CREATE_OPTS.get(key)
    if opts is None:
        kind = CreateOpts if group is None else _lib.CreateOptsGroup
        opts = kind()
        opts.size = ctypes.sizeof(kind)
        if group is not None:
            opts.group = group
        opts.backend = backend
        opts.device = device
        opts.mode = mode
        opts.lifetime = lifetime
        opts.flags = flags
        if metadata:
            # (its own copy, kept by the structure: ctypes holds what is assigned to it)
            meta = ctypes.create_string_buffer(metadata, len(metadata))
            opts.metadata_size = min(len(metadata), 0xFFFFFFFF)  # past the limit anyway
            opts.metadata = ctypes.addressof(meta)
            opts._metadata_copy = meta
        if len(_CREATE_OPTS) >= _CREATE_OPTS_MAX:
            _CREATE_OPTS.clear()  # (a process with that many kinds of create starts over)
        _CREATE_OPTS[key] = opts
    return opts


#: This process, for the handles' fork check: os.getpid() is a system call, and a handle
#: checks it in every method (a tenth of a Python hand-off's calls into the kernel).
_PID = os.getpid()


def _forked() -> None:
    global _PID
    _PID = os.getpid()


os.register_at_fork(after_in_child=_forked)

#: Free-threaded builds count references differently, so close() leaves closing to
#: the capsule there (sys._is_gil_enabled: Python 3.13 and later).
_GIL_ENABLED = getattr(sys, "_is_gil_enabled", lambda: True)()


class _Handle:
    """A C handle owned by a capsule (libgpushm's destructor closes it).  Methods take
    (capsule, pointer) through _live() and keep the capsule in a local while they call
    C, so a close() on another thread cannot free the handle under them."""

    _what = "handle"

    def __init__(self, pointer: int, kind: int) -> None:
        self._pid = _PID
        self._ptr = pointer
        self._kind = kind
        self._cap: Optional[object] = _capsule.own(pointer, kind)

    def _live(self) -> Tuple[object, int]:
        cap = self._cap
        if cap is None:
            raise ClosedError(f"the {self._what} is closed")
        if self._pid != _PID:
            raise ClosedError(f"the {self._what} belongs to the parent of this process "
                              f"(opened before fork()): open it again here")
        return cap, self._ptr

    @property
    def closed(self) -> bool:
        return self._cap is None

    def close(self) -> None:
        """Drops this handle (its open, or the connection).  Idempotent.  The C close
        runs without the GIL, so other threads go on while it waits (a last close of a
        cuda-fd buffer waits for this process's queued fence operations, and for the
        connection while another thread's request is out on it)."""
        cap, self._cap = self._cap, None
        # Only where no other thread holds the capsule (a method's local: then its
        # reference is counted here too) is it taken out of the capsule's hands; else
        # the last of them to drop it closes it, in the destructor, with the GIL.
        if (cap is not None and self._pid == _PID and _GIL_ENABLED
                and sys.getrefcount(cap) <= 2):
            # a handle's capsule is never handed to anyone: it still owns the pointer
            if _SP is not None and self._kind == CAPSULE_BUFFER:
                _SP.close(cap, self._ptr)
            else:
                _capsule.close_owned(cap, self._ptr, self._kind)

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Named(_Handle):
    """A handle on a named object (an event, a timeline, a ring): its connection, and its
    name and id, read once as it is opened."""

    def __init__(self, pointer: int, kind: int, connection: "Connection", name: str,
                 object_id: int) -> None:
        super().__init__(pointer, kind)
        self._connection = connection
        self._name = name
        self._id = object_id

    @property
    def connection(self) -> "Connection":
        return self._connection

    @property
    def name(self) -> str:
        return self._name

    @property
    def id(self) -> int:
        return self._id


class Connection(_Handle):
    """A connection to gpushmd (gpushm_connect).  ``socket``: the daemon's socket
    ($GPUSHM_SOCKET, else /run/gpushm/gpushmd.sock); ``name``: what admin tools show;
    ``timeout``: seconds for connecting and each request (default 10, $GPUSHM_TIMEOUT_MS).
    Buffers opened through it keep it alive after close()."""

    _what = "connection"

    def __init__(self, socket: Optional[Union[str, "os.PathLike[str]"]] = None,
                 name: Optional[str] = None, *, timeout: Optional[float] = None) -> None:
        path = None if socket is None else c_string(socket, "socket path", code="INVAL", path=True)
        client = None if name is None else c_string(name, "client name", code="INVAL")
        out = c_void_p()
        check(lib.gpushm_connect(path, client, byref(out)), "connect")
        super().__init__(_handle(out, "connect"), CAPSULE_CONNECTION)
        # gpushm.empty()'s work for one kind of tensor, done once (api._empty_plan)
        self._empty_plans: Dict[Any, Any] = {}
        if timeout is not None:
            self.set_timeout(timeout)

    # --- what the daemon is -------------------------------------------------------
    @property
    def instance_id(self) -> int:
        _, c = self._live()
        return lib.gpushm_instance_id(c)

    @property
    def daemon_version(self) -> str:
        _, c = self._live()
        return text(lib.gpushm_daemon_version(c))

    @property
    def protocol_version(self) -> int:
        _, c = self._live()
        return lib.gpushm_protocol_version(c)

    @property
    def backends(self) -> List[str]:
        """Memory backends the daemon can use now."""
        _, c = self._live()
        mask = lib.gpushm_daemon_backends(c)
        return [name for name, v in BACKENDS.items() if v and mask & (1 << v)]

    @property
    def default_backend(self) -> str:
        """What a create naming no backend gets ("default": the daemon does not say)."""
        _, c = self._live()
        return BACKEND_NAMES.get(lib.gpushm_daemon_default_backend(c), "default")

    def family_version(self, family: str) -> int:
        """The version of a request family ("core", "admin", "graphics", ...) the daemon
        serves; 0 for one it lacks, and for every family of a daemon before 0.8."""
        _, c = self._live()
        return lib.gpushm_daemon_family_version(c, family.encode())

    def has_feature(self, feature: int) -> bool:
        """Whether the daemon offers a GPUSHM_FEATURE_* bit."""
        _, c = self._live()
        return bool(lib.gpushm_daemon_has(c, feature))

    def set_timeout(self, seconds: float) -> None:
        """Bounds each later request (0: wait for ever; at most MAX_TIMEOUT_MS)."""
        cap, c = self._live()
        check(lib.gpushm_set_timeout(c, timeout_ms(seconds)), "set_timeout")

    def ping(self) -> None:
        _, c = self._live()
        check(lib.gpushm_ping(c), "ping")

    # --- buffers ------------------------------------------------------------------
    def create(self, name: str, size: int, *, backend: Union[str, int] = "default",
               device: int = 0, mode: int = 0o600, lifetime: Union[str, int] = "persistent",
               sync: bool = False, open_existing: bool = False,
               metadata: Optional[bytes] = None, map_device: Optional[int] = None,
               strict_mode: bool = False, uninitialized: bool = False,
               group: Optional[Union[int, str]] = None) -> "Buffer":
        """Creates a buffer and opens it read-write (gpushm_buffer_create).  ``metadata``:
        up to 4096 immutable bytes every opener gets (LimitExceeded above).  ``strict_mode``:
        refuse a mode the backend cannot keep (read-only for group or others on device
        memory, docs/security.md).  ``uninitialized``: the caller writes all of it before
        anyone reads, so device memory is not zeroed (it may hold what a buffer of the
        same owner, group and mode left; docs/segments.md#zeroing).  ``group``: the
        buffer's group (a name or gid the caller belongs to; default its primary group),
        whose members ``mode``'s group bits are for."""
        cap, c = self._live()
        raw = c_string(name, "name")
        if group is not None and not lib.gpushm_daemon_has(c, _lib.FEATURE_CREATE_GROUP):
            raise make_error(CODES["UNSUPPORTED"], "this gpushmd gives every buffer its "
                             "creator's primary group (no GPUSHM_FEATURE_CREATE_GROUP): run the "
                             "creator with that group (sg GROUP)", f"create {name!r}",
                             strerror(CODES["UNSUPPORTED"]))
        size, opts = self._create_plan(size, backend=backend, device=device, mode=mode,
                                       lifetime=lifetime, sync=sync,
                                       open_existing=open_existing, metadata=metadata,
                                       map_device=map_device, strict_mode=strict_mode,
                                       uninitialized=uninitialized, group=group)
        if _SP is not None:
            made = _SP.create(c, raw, size, ctypes.addressof(opts))
            if type(made) is int:
                check(made, f"create {name!r}")
            return Buffer._described(made, self)
        out = c_void_p()
        r = lib.gpushm_buffer_create(c, raw, size, byref(opts), byref(out))
        if r < 0:  # (the operation's text only then: it is most of a create's Python)
            check(r, f"create {name!r}")
        return Buffer(_handle(out, "create"), self)

    @staticmethod
    def _create_plan(size: int, *, backend: Union[str, int] = "default", device: int = 0,
                     mode: int = 0o600, lifetime: Union[str, int] = "persistent",
                     sync: bool = False, open_existing: bool = False,
                     metadata: Optional[bytes] = None, map_device: Optional[int] = None,
                     strict_mode: bool = False, uninitialized: bool = False,
                     group: Optional[Union[int, str]] = None) -> Tuple[int, CreateOpts]:
        """What create() hands gpushm_buffer_create() besides the name: the size and
        the options, checked (gpushm.empty() remembers them per kind of tensor)."""
        size = non_negative(size, "size")
        if size > _U64_MAX:
            size = _U64_MAX  # (not wrapped to a small size: refused, with the size limit)
        flags = ((CREATE_SYNC if sync else 0) | (CREATE_OPEN_EXISTING if open_existing else 0)
                 | (CREATE_STRICT_MODE if strict_mode else 0)
                 | (CREATE_UNINITIALIZED if uninitialized else 0)
                 | (map_device_flag(non_negative(map_device, "map_device"))
                    if map_device is not None else 0))
        return size, _create_opts(_backend_value(backend), non_negative(device, "device"), mode,
                                  _lifetime_value(lifetime), flags,
                                  bytes(metadata) if metadata else b"", _group_id(group))

    def create_image(self, name: str, width: int, height: int, *, format: str = "rgba8-unorm",
                     backend: Union[str, int] = "default", device: int = 0, mode: int = 0o600,
                     lifetime: Union[str, int] = "persistent", row_pitch: int = 0,
                     usage: int = 0x19) -> "Buffer":
        """Creates a linear image (gpushm_image_create: rows row_pitch bytes apart, 0 for
        the default) and opens it read-write.  Optimal-tiling images come from a Vulkan
        process (gpushm_vk_create_image)."""
        cap, c = self._live()
        if not hasattr(lib, "gpushm_image_create"):
            raise Unsupported(f"libgpushm {'.'.join(map(str, LIBRARY_VERSION))} makes no "
                              f"images (0.7 does)")
        fmt = lib.gpushm_format_from_name(c_string(format, "format"))
        if not fmt:
            raise InvalidArgument(f"unknown image format {format!r}: one of "
                                  f"{', '.join(IMAGE_FORMATS)}")
        d = ImageDesc(size=ctypes.sizeof(ImageDesc), format=fmt, width=width, height=height,
                      depth=1, mip_levels=1, array_layers=1, tiling=0, usage=usage,
                      row_pitch=row_pitch)
        opts = CreateOpts()
        opts.size = ctypes.sizeof(CreateOpts)
        opts.backend = _backend_value(backend)
        opts.device = non_negative(device, "device")
        opts.mode = mode
        opts.lifetime = _lifetime_value(lifetime)
        out = c_void_p()
        check(lib.gpushm_image_create(c, c_string(name, "name"), byref(d), byref(opts), byref(out)),
              f"create image {name!r}")
        return Buffer(_handle(out, "create image"), self)

    def open_start(self, name: str, *, readonly: bool = False,
                   map_device: Optional[int] = None) -> "Pending":
        """Sends the open of a buffer by name and returns without waiting for the reply
        (gpushm_buffer_open_start): Pending.finish() returns what open() would have.
        Work done in between overlaps the round trip (docs/python.md#pipelined-opens-and-creates)."""
        cap, c = self._live()
        flags = (OPEN_READONLY if readonly else 0) | (
            map_device_flag(non_negative(map_device, "map_device")) if map_device is not None else 0)
        _need_pipelining()
        if _SP is not None:
            made = _SP.open_start(self, name, flags)
            if made is not NotImplemented:
                if made < 0:
                    check(made, f"open {name!r}")
                return Pending(made, self, f"open {name!r}")
        out = c_void_p()
        check(lib.gpushm_buffer_open_start(c, c_string(name, "name"), flags, byref(out)),
              f"open {name!r}")
        return Pending(out.value, self, f"open {name!r}")

    def create_start(self, name: str, size: int, **options: Any) -> "Pending":
        """Sends a create, with create()'s options, and returns without waiting for the
        reply (gpushm_buffer_create_start): Pending.finish() returns what create() would
        have."""
        cap, c = self._live()
        raw = c_string(name, "name")
        size, opts = self._create_plan(size, **options)
        _need_pipelining()
        out = c_void_p()
        check(lib.gpushm_buffer_create_start(c, raw, size, byref(opts), byref(out)),
              f"create {name!r}")
        return Pending(out.value, self, f"create {name!r}")

    def open(self, name: Union[str, int], *, readonly: bool = False,
             map_device: Optional[int] = None, wait: Optional[float] = None) -> "Buffer":
        """Opens a buffer by name (str) or id (int) (gpushm_buffer_open).  ``wait``:
        seconds gpushmd waits for a name that is not there (yet) to be made before the
        open raises NotFound (``math.inf``: for ever; gpushm_open_opts_t.wait_ms).  This
        connection's other calls wait behind it."""
        cap, c = self._live()
        if wait is not None:
            return self._open_waiting(c, name, readonly, map_device, wait)
        flags = (OPEN_READONLY if readonly else 0) | (
            map_device_flag(non_negative(map_device, "map_device")) if map_device is not None else 0)
        out = c_void_p()
        if isinstance(name, int) and not isinstance(name, bool):
            check(lib.gpushm_buffer_open_id(c, non_negative(name, "id"), flags, byref(out)),
                  f"open id {name}")
        elif _SP is not None:
            made = _SP.open(c, c_string(name, "name"), flags)
            if type(made) is int:
                check(made, f"open {name!r}")
            return Buffer._described(made, self)
        else:
            r = lib.gpushm_buffer_open(c, c_string(name, "name"), flags, byref(out))
            if r < 0:
                check(r, f"open {name!r}")
        return Buffer(_handle(out, "open"), self)

    def _open_waiting(self, c: int, name: Union[str, int], readonly: bool,
                      map_device: Optional[int], wait: float) -> "Buffer":
        if not isinstance(name, str):
            raise make_error(CODES["INVAL"], "only an open by name waits for its name",
                             f"open {name!r}", strerror(CODES["INVAL"]))
        if not (wait >= 0):  # (NaN too)
            raise make_error(CODES["INVAL"], f"wait={wait!r}: seconds, 0 or more (math.inf: "
                             f"for ever)", f"open {name!r}", strerror(CODES["INVAL"]))
        if not hasattr(lib, "gpushm_buffer_open_ex") or not lib.gpushm_daemon_has(
                c, _lib.FEATURE_OPEN_WAIT):
            raise make_error(CODES["UNSUPPORTED"], "this libgpushm or gpushmd does not wait for "
                             "names (0.8, GPUSHM_FEATURE_OPEN_WAIT): open again until it is "
                             "there", f"open {name!r}", strerror(CODES["UNSUPPORTED"]))
        opts = _lib.OpenOpts()
        opts.size = ctypes.sizeof(_lib.OpenOpts)
        opts.flags = OPEN_READONLY if readonly else 0
        opts.map_device = (non_negative(map_device, "map_device") if map_device is not None
                           else _lib.DEVICE_AUTO)
        ms = wait * 1000
        if ms > _lib.LIMIT_OPEN_WAIT_MS and ms != float("inf"):
            raise make_error(CODES["INVAL"], f"wait={wait!r}: an open waits at most "
                             f"{_lib.LIMIT_OPEN_WAIT_MS // 1000} s at a time "
                             f"(GPUSHM_LIMIT_OPEN_WAIT_MS; math.inf: for ever)",
                             f"open {name!r}", strerror(CODES["INVAL"]))
        opts.wait_ms = -1 if ms == float("inf") else max(1, int(math.ceil(ms))) if ms else 0
        out = c_void_p()
        check(lib.gpushm_buffer_open_ex(c, c_string(name, "name"), 0, byref(opts), byref(out)),
              f"open {name!r}")
        return Buffer(_handle(out, "open"), self)

    def unlink(self, name: str) -> None:
        """Removes a name; the memory lives on until its last holder closes."""
        cap, c = self._live()
        check(lib.gpushm_unlink(c, c_string(name, "name")), f"unlink {name!r}")

    # --- events -------------------------------------------------------------------
    def create_event(self, name: str, *, device: int = 0, mode: int = 0o600,
                     lifetime: Union[str, int] = "persistent") -> "Event":
        """A named inter-process CUDA event on device (gpushm_event_create)."""
        cap, c = self._live()
        raw = c_string(name, "event name")
        opts = CreateOpts()
        opts.size = ctypes.sizeof(CreateOpts)
        opts.device = non_negative(device, "device")
        opts.mode = mode
        opts.lifetime = _lifetime_value(lifetime)
        out = c_void_p()
        check(lib.gpushm_event_create(c, raw, byref(opts), byref(out)),
              f"create event {name!r}")
        return Event(_handle(out, "create event"), self)

    def open_event(self, name: str) -> "Event":
        cap, c = self._live()
        out = c_void_p()
        check(lib.gpushm_event_open(c, c_string(name, "event name"), byref(out)),
              f"open event {name!r}")
        return Event(_handle(out, "open event"), self)

    # --- timelines ----------------------------------------------------------------
    def create_timeline(self, name: str, *, mode: int = 0o600,
                        lifetime: Union[str, int] = "persistent",
                        exist_ok: bool = False) -> "Timeline":
        """A named 64-bit counter that CPUs and CUDA streams of any process signal and
        wait on (gpushm_timeline_create; docs/sync.md).  exist_ok: join one this uid made
        already instead of raising Exists."""
        cap, c = self._live()
        _need_timelines()
        raw = c_string(name, "timeline name")
        opts = CreateOpts()
        opts.size = ctypes.sizeof(CreateOpts)
        opts.mode = mode
        opts.lifetime = _lifetime_value(lifetime)
        opts.flags = CREATE_OPEN_EXISTING if exist_ok else 0
        out = c_void_p()
        check(lib.gpushm_timeline_create(c, raw, byref(opts), byref(out)),
              f"create timeline {name!r}")
        return Timeline(_handle(out, "create timeline"), self)

    def open_timeline(self, name: str, *, readonly: bool = False) -> "Timeline":
        """Opens a timeline; readonly: to wait only (its mode may allow no more)."""
        cap, c = self._live()
        _need_timelines()
        out = c_void_p()
        check(lib.gpushm_timeline_open(c, c_string(name, "timeline name"),
                                       OPEN_READONLY if readonly else 0, byref(out)),
              f"open timeline {name!r}")
        return Timeline(_handle(out, "open timeline"), self)

    def create_ring(self, name: str, slots: int, slot_size: int, *,
                    backend: Union[str, int] = "default", device: int = 0, mode: int = 0o600,
                    lifetime: Union[str, int] = "persistent",
                    metadata: Optional[bytes] = None,
                    map_device: Optional[int] = None) -> "Ring":
        """A frame ring of ``slots`` slots of ``slot_size`` bytes (gpushm_ring_create;
        docs/rings.md), opened as its producer.  mode 0o644 lets other users consume it
        (they need read access only)."""
        cap, c = self._live()
        _need_rings()
        raw = c_string(name, "ring name")
        opts = CreateOpts()
        opts.size = ctypes.sizeof(CreateOpts)
        opts.backend = _backend_value(backend)
        opts.device = non_negative(device, "device")
        opts.mode = mode
        opts.lifetime = _lifetime_value(lifetime)
        opts.flags = (map_device_flag(non_negative(map_device, "map_device"))
                      if map_device is not None else 0)
        meta = None
        if metadata:
            meta = ctypes.create_string_buffer(bytes(metadata), len(metadata))
            opts.metadata_size = min(len(metadata), 0xFFFFFFFF)
            opts.metadata = ctypes.cast(meta, c_void_p)
        out = c_void_p()
        check(lib.gpushm_ring_create(c, raw, non_negative(slots, "slots"),
                                     non_negative(slot_size, "slot_size"), byref(opts),
                                     byref(out)),
              f"create ring {name!r}")
        return Ring(_handle(out, "create ring"), self)

    def open_ring(self, name: str, *, producer: bool = False, observer: bool = False,
                  map_device: Optional[int] = None) -> "Ring":
        """Opens a frame ring: as a consumer (read access, a done timeline of its own),
        ``producer`` (read-write), or ``observer`` (counters only: takes no frames,
        nobody waits for it)."""
        cap, c = self._live()
        _need_rings()
        flags = ((RING_PRODUCER if producer else 0) | (RING_OBSERVER if observer else 0)
                 | (map_device_flag(non_negative(map_device, "map_device"))
                    if map_device is not None else 0))
        out = c_void_p()
        check(lib.gpushm_ring_open(c, c_string(name, "ring name"), flags, byref(out)),
              f"open ring {name!r}")
        return Ring(_handle(out, "open ring"), self)

    # --- weight sets (0.8, docs/weights.md) ---------------------------------------
    def publish_weights(self, name: str, tensors: "Mapping[str, Any]", *, mode: int = 0o600,
                        lifetime: Union[str, int] = "persistent", after: int = 0,
                        device: DeviceLike = None, backend: Optional[Union[str, int]] = None,
                        align: int = BUNDLE_ALIGN, bucket: Optional[int] = None) -> "WeightSet":
        """Publishes ``tensors`` (name -> NumPy/PyTorch/CuPy array) as the next generation
        of weight set ``name``: copied, once each, into new buffers of each device of at
        most ``bucket`` bytes (1 GiB: a larger tensor gets one of its own; readers'
        ``copy_into()`` maps one while copying the one before), each tensor at an offset
        aligned to ``align``, and returns the new generation, held.  ``device``: put
        every tensor there instead of on its array's device; ``mode`` and ``lifetime``:
        the set's, at its first publish; ``after``: publish only if the set is at that
        generation now (Exists otherwise)."""
        from . import weights
        return weights.publish(self, name, tensors, mode=mode, lifetime=lifetime, after=after,
                               device=device, backend=backend, align=align,
                               bucket=weights.BUCKET_BYTES if bucket is None else bucket)

    def publish_weights_from(self, name: str, tensors: "Mapping[str, Tensor]", *,
                             mode: int = 0o600, lifetime: Union[str, int] = "persistent",
                             after: int = 0) -> "WeightSet":
        """Publishes gpushm Tensors the caller already wrote, without copying them, as the
        next generation of weight set ``name``: each names its buffer and its place in it
        (``empty()``, ``share_bundle()``, ``Buffer.view()``), and each buffer must be open
        read-write on this connection only.  Publish only what you are done writing."""
        from . import weights
        return weights.publish_from(self, name, tensors, mode=mode, lifetime=lifetime,
                                    after=after)

    def open_weights(self, name: str) -> "WeightSet":
        """The generation weight set ``name`` denotes now, held until closed."""
        from . import weights
        return weights.open_set(self, name)

    # --- admin --------------------------------------------------------------------
    def list(self, *, all: bool = False, metadata: bool = False) -> "List[Any]":
        """Buffers and events the daemon shows this connection (admin.BufferInfo)."""
        from . import admin
        cap, c = self._live()
        return admin.list_buffers(c, (LIST_ALL if all else 0) | (LIST_METADATA if metadata else 0))

    def clients(self) -> "List[Any]":
        from . import admin
        cap, c = self._live()
        return admin.list_clients(c)

    def stats(self) -> Any:
        from . import admin
        cap, c = self._live()
        return admin.daemon_stats(c)

    def disconnect_client(self, client_id: int) -> None:
        """Ends another connection (gpushm_client_disconnect)."""
        cap, c = self._live()
        check(lib.gpushm_client_disconnect(c, non_negative(client_id, "client id")),
              f"disconnect client {client_id}")

    def __repr__(self) -> str:
        if self.closed:
            return "<gpushm.Connection closed>"
        return f"<gpushm.Connection to gpushmd {self.daemon_version}>"


def _image_info(pointer: int) -> Optional[ImageInfo]:
    """The image a handle is, or None (a buffer, or a library before 0.7)."""
    if not hasattr(lib, "gpushm_buffer_kind") or lib.gpushm_buffer_kind(pointer) != 3:
        return None
    d = ImageDesc()
    d.size = ctypes.sizeof(ImageDesc)
    check(lib.gpushm_buffer_image_desc(pointer, byref(d)), "image description")
    name = lib.gpushm_format_name(d.format)
    return ImageInfo(text(name) if name else f"format-{d.format}", d.width, d.height, d.depth,
                     d.mip_levels, d.array_layers, "linear" if d.tiling == 0 else "optimal",
                     d.usage, d.row_pitch)


def _need_pipelining() -> None:
    if not hasattr(lib, "gpushm_pending_finish"):
        raise Unsupported(f"libgpushm {'.'.join(map(str, LIBRARY_VERSION))} has no pipelined "
                          f"opens and creates (0.8 does)")


class Pending:
    """A pipelined open or create (Connection.open_start(), create_start(),
    gpushm.open_start(), gpushm.empty_start()): the request is out; finish() waits for
    the reply unless it came already and returns what the open or create returns, or
    raises what it raises.  Finish each once.  One garbage collected unfinished is
    finished then, and what it opened closed."""

    __slots__ = ("_ptr", "_connection", "_pid", "_what", "_how", "_then")

    def __init__(self, pointer: int, connection: "Connection", what: str) -> None:
        self._ptr = pointer
        self._connection = connection
        self._pid = _PID
        self._what = what
        # What the finish makes of the buffer: in C (the speedups' finish(): None, the
        # Buffer; a TensorSpec, its Tensor; True, the manifest's), then in Python (_then,
        # given the Buffer wherever C left one).
        self._how: Any = None
        self._then: Optional[Callable[["Buffer"], Any]] = None

    @property
    def finished(self) -> bool:
        return self._ptr is None

    def finish(self) -> Any:
        p, self._ptr = self._ptr, None
        if p is None:
            raise ClosedError(f"{self._what}: finished already")
        if self._pid != _PID:
            raise ClosedError(f"{self._what}: started before fork(), in the parent")
        if _SP is not None:
            buf = _SP.finish(self._connection, p, self._how)
            if type(buf) is int:
                check(buf, self._what)
            if type(buf) is Tensor:
                return buf
        else:
            out = c_void_p()
            r = lib.gpushm_pending_finish(p, byref(out))
            if r < 0:
                check(r, self._what)
            buf = Buffer(_handle(out, self._what), self._connection)
        if self._then is None:
            return buf
        try:
            return self._then(buf)
        except BaseException:
            buf.close()
            raise

    def __del__(self) -> None:
        p = getattr(self, "_ptr", None)
        if p is not None and self._pid == _PID:
            self._ptr = None
            try:
                lib.gpushm_pending_finish(p, None)
            except Exception:  # (at interpreter exit the library may be gone)
                pass

    def __repr__(self) -> str:
        return f"<gpushm.Pending {self._what}{' (finished)' if self._ptr is None else ''}>"


class Buffer(_Handle):
    """An open buffer, holding one open of it (gpushm_buffer_open/create).  Its memory
    stays mapped while this handle or any view made from it is open."""

    _what = "buffer"

    def __init__(self, pointer: int, connection: Optional[Connection]) -> None:
        super().__init__(pointer, CAPSULE_BUFFER)
        # What the handle is, read once and exposed read-only: size and readonly guard
        # the array interfaces, and the others say which buffer this is.
        self._connection = connection
        if _DESCRIBE:
            # one call into C instead of a dozen (libgpushm 0.8)
            d = BufferDesc()
            d.size = _BUFFER_DESC_SIZE
            check(_DESCRIBE(pointer, byref(d)), "describe")
            self._name = text(d.name)
            self._id: int = d.id
            self._size: int = d.bytes
            self._backend = BACKEND_NAMES.get(d.backend, "host")
            self._device: int = d.device
            self._map_device: int = d.map_device
            self._readonly = bool(d.read_only)
            self._owner = (d.owner_uid, d.owner_gid)
            at, n = d.metadata, d.metadata_size
            self._metadata = ctypes.string_at(at, n) if at else b""
            self._data = d.ptr or 0
            self._image = _image_info(pointer) if d.kind == 3 else None
        else:
            self._name = text(lib.gpushm_buffer_name(pointer))
            self._id = lib.gpushm_buffer_id(pointer)
            self._size = lib.gpushm_buffer_size(pointer)
            self._backend = BACKEND_NAMES.get(lib.gpushm_buffer_backend(pointer), "host")
            self._device = lib.gpushm_buffer_device(pointer)
            self._map_device = lib.gpushm_buffer_map_device(pointer)
            self._readonly = bool(lib.gpushm_buffer_is_readonly(pointer))
            uid, gid = c_uint32(), c_uint32()
            check(lib.gpushm_buffer_owner(pointer, byref(uid), byref(gid)), "owner")
            self._owner = (uid.value, gid.value)
            n = c_size_t()
            at = lib.gpushm_buffer_metadata(pointer, byref(n))
            self._metadata = ctypes.string_at(at, n.value) if at else b""
            self._data = lib.gpushm_buffer_ptr(pointer) or 0
            self._image = _image_info(pointer)
        self._sync: Optional[bool] = None  # a sync buffer's? (_is_sync: asked once)
        # the stream of the last acquire() through this handle (CUDA array interface)
        self._acquired_stream: Optional[int] = None
        self._acquired = False
        # What views of this handle keep alive besides its open (a weight set's generation,
        # which pins the buffer in the daemon); dup() passes it on.
        self._keep: Optional[object] = None

    @classmethod
    def _described(cls, d: Tuple[Any, ...], connection: Optional[Connection]) -> "Buffer":
        """A Buffer of what gpushm._speedups' open() or create() returned: the handle, the
        capsule that owns it, and what __init__ reads through gpushm_buffer_describe()."""
        self = cls.__new__(cls)
        (self._ptr, self._cap, self._name, self._id, self._size, backend, self._device,
         self._map_device, self._readonly, uid, gid, self._metadata, self._data, kind) = d
        self._pid = _PID
        self._kind = CAPSULE_BUFFER
        self._backend = BACKEND_NAMES.get(backend, "host")
        self._owner = (uid, gid)
        self._connection = connection
        self._image = _image_info(self._ptr) if kind == 3 else None
        self._sync = None
        self._acquired_stream = None
        self._acquired = False
        self._keep = None
        return self

    @property
    def connection(self) -> Optional[Connection]:
        return self._connection

    @property
    def name(self) -> str:
        return self._name

    @property
    def id(self) -> int:
        return self._id

    @property
    def image(self) -> Optional[ImageInfo]:
        """What image this is (None: a buffer)."""
        return self._image

    def image_spec(self) -> _manifest.TensorSpec:
        """A linear image's texels as a tensor: (height, width, channels) of its format's
        dtype, rows row_pitch bytes apart.  An optimal-tiling image has no such layout:
        Unsupported, saying what reads it."""
        img = self._image
        if img is None:
            raise InvalidArgument(f"{self.name!r} is not an image")
        if img.tiling != "linear":
            raise Unsupported(f"{self.name!r} is an optimal-tiling image, laid out as its "
                              f"device likes: no pointer or strides describe it.  CUDA reads it "
                              f"as a CUarray (gpushm_image_cuda_array() in C), Vulkan and GL "
                              f"import it (gpushm-vulkan.h, gpushm-gl.h)")
        if img.format not in IMAGE_FORMATS:
            raise Unsupported(f"{self.name!r}: no tensor dtype for image format {img.format}")
        name, channels = IMAGE_FORMATS[img.format]
        dt = dtypes.dtype(name)
        return _manifest.make_spec("", dt, (img.height, img.width, channels),
                                   (img.row_pitch // dt.itemsize, channels, 1), 0)

    @property
    def size(self) -> int:
        """Bytes."""
        return self._size

    @property
    def backend(self) -> str:
        return self._backend

    @property
    def device(self) -> int:
        """The device the memory lives on (this process's ordinal; -1 for host memory)."""
        return self._device

    @property
    def map_device(self) -> int:
        """The device whose kernels and streams use the pointer."""
        return self._map_device

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def owner(self) -> Tuple[int, int]:
        """(uid, gid)."""
        return self._owner

    @property
    def metadata(self) -> bytes:
        """What the buffer was created with (a tensor manifest, for this package)."""
        return self._metadata

    @property
    def is_device(self) -> bool:
        return self.backend != "host"

    @property
    def ptr(self) -> int:
        """The address (host) or device pointer of the data, valid while this handle is
        open (or a view made from it lives)."""
        self._live()
        return self._data

    def dlpack_device(self) -> Tuple[int, int]:
        return (DL_CUDA, self.map_device) if self.is_device else (DL_CPU, 0)

    def export(self, kind: str, offset: int = 0, length: int = 0) -> Export:
        """[offset, offset + length) of the buffer (length 0: to its end) as kind says:
        "cuda-va" (its device address here), "host-pointer", "dmabuf", "opaque-fd" or
        "fabric" (gpushm_buffer_export).  An fd in the result is the caller's to close."""
        code = EXPORT_TYPES.get(kind)
        if code is None:
            raise InvalidArgument(f"export type {kind!r}: one of {', '.join(EXPORT_TYPES)}")
        fn = getattr(lib, "gpushm_buffer_export", None)
        if fn is None:
            raise Unsupported(f"{LIBRARY_PATH} predates gpushm_buffer_export (gpushm 0.8)")
        cap, b = self._live()
        d = ExportDesc()
        d.size = ctypes.sizeof(ExportDesc)
        check(fn(b, code, offset, length, byref(d)), f"export {self.name!r} as {kind}")
        return Export(type=EXPORT_TYPE_NAMES.get(d.type, kind), fd=d.fd, ptr=d.ptr or 0,
                      offset=d.offset, length=d.length, allocation_size=d.allocation_size,
                      device=d.device, readonly=bool(d.access & OPEN_READONLY),
                      dedicated=bool(d.flags & 0x1), device_uuid=bytes(d.device_uuid),
                      fabric_handle=bytes(d.fabric_handle))

    def dup(self) -> "Buffer":
        """Another handle of the same buffer, with an open of its own (gpushm_buffer_ref):
        closing either leaves the other usable."""
        cap, b = self._live()
        check(lib.gpushm_buffer_ref(b), f"ref {self.name!r}")
        other = Buffer.__new__(Buffer)
        other.__dict__.update(self.__dict__)
        other._pid = _PID
        other._cap = _capsule.own(b, CAPSULE_BUFFER)
        other._acquired_stream, other._acquired = None, False
        return other

    def _export_ref(self) -> object:
        """An open for a view to keep (a capsule; freeing it closes the open)."""
        cap, b = self._live()
        check(lib.gpushm_buffer_ref(b), f"ref {self.name!r}")
        return _capsule.own(b, CAPSULE_BUFFER)

    def close(self) -> None:
        """Drops this handle's open (see _Handle.close); idempotent."""
        if _SP is None or _SP.close_handle(self) is NotImplemented:
            _Handle.close(self)

    def close_unlink(self) -> None:
        """Removes the buffer's name, while it still names this buffer, and closes this
        handle: the producer's end of a hand-off (gpushm_buffer_close_unlink)."""
        if _SP is not None:
            r = _SP.close_unlink_handle(self)
            if r is not NotImplemented:
                if r < 0:
                    check(r, f"close_unlink {self.name!r}")
                return
        cap, b = self._live()
        if _GIL_ENABLED and sys.getrefcount(cap) <= 3:  # here, self._cap, the call's
            # Nobody else uses the capsule: its open is the one the C call closes, so
            # the unlink and the close go to gpushmd as one request, not two.
            self._cap = None
            if _SP is not None:
                r = _SP.close_unlink(cap, b)
                if r < 0:
                    check(r, f"close_unlink {self.name!r}")
                return
            _capsule.disarm(cap)
        else:
            # an open of its own for the C call to close, so that this handle's goes the
            # usual way (its capsule, when the other thread lets go of it)
            r = lib.gpushm_buffer_ref(b)
            if r < 0:
                check(r, f"ref {self.name!r}")
            self._cap = None
        r = lib.gpushm_buffer_close_unlink(b)
        if r < 0:
            check(r, f"close_unlink {self.name!r}")

    # --- sync ---------------------------------------------------------------------
    @property
    def sync_method(self) -> str:
        """How releases and acquires are ordered here ("none": not a sync buffer)."""
        cap, b = self._live()
        return SYNC_METHODS.get(lib.gpushm_buffer_sync_method(b, None), "none")

    @property
    def release_seq(self) -> int:
        """The number of the latest published release (0: none yet)."""
        cap, b = self._live()
        return lib.gpushm_buffer_release_seq(b)

    def release(self, stream: StreamLike = None, value: Optional[int] = None) -> int:
        """Publishes a release ordered behind the work queued on stream (None: the legacy
        default stream; host buffers take no stream); returns its number: the next one,
        or value, a number of the caller's above the counter (0.8, docs/sync.md)."""
        cap, b = self._live()
        if value is not None:
            _need_numbered("caller-numbered releases")
            value = non_negative(value, "value")
            check(lib.gpushm_buffer_release_value(b, stream_handle(stream), value),
                  f"release {self.name!r} at {value}")
            return value
        seq = c_uint64()
        check(lib.gpushm_buffer_release(b, stream_handle(stream), byref(seq)),
              f"release {self.name!r}")
        return seq.value

    def acquire(self, stream: StreamLike = None, seq: int = 0,
                timeout: Optional[float] = None, value: Optional[int] = None) -> None:
        """Waits (in this thread) until release seq is published (0: the latest, if any),
        then makes stream wait until its work is done.  timeout in seconds (None: for
        ever); Timeout if seq is not published in time.

        With value (0.8, not with seq): makes stream wait until the counter reaches
        value; a fence buffer's wait goes to the GPU at once if value is released or
        promised, else this thread waits up to timeout for one of the two.
        SignallerLost if value was reached because its promiser is gone (the stream is
        ordered all the same)."""
        cap, b = self._live()
        handle = stream_handle(stream)
        ms = -1 if timeout is None else max(0, timeout_ms(timeout))
        if value is not None:
            if seq:
                raise InvalidArgument("acquire takes seq or value, not both")
            _need_numbered("waits for a value")
            check(lib.gpushm_buffer_acquire_value(b, handle, non_negative(value, "value"), ms),
                  f"acquire {self.name!r} at {value}")
        else:
            check(lib.gpushm_buffer_acquire(b, handle, non_negative(seq, "seq"), ms),
                  f"acquire {self.name!r}")
        self._acquired, self._acquired_stream = True, handle

    def promise(self, upto: int) -> None:
        """Promises that this connection will release every value up to upto (above the
        counter), which makes it their only signaller and lets waiters queue their GPU
        waits at once.  Broken (the values count as lost) should this process die or
        close the buffer owing them (docs/sync.md)."""
        cap, b = self._live()
        _need_numbered("promises")
        check(lib.gpushm_buffer_promise(b, non_negative(upto, "upto")),
              f"promise {self.name!r} up to {upto}")

    def sync_state(self) -> Dict[str, int]:
        """What the control block says now: counter, promised_upto (0: no live promise),
        promiser_client, lost_from and lost_upto (values lost_from < v <= lost_upto were
        lost; both 0: none) and lost_client, as gpushmctl show prints them."""
        cap, b = self._live()
        _need_numbered("promises")
        st = SyncState()
        check(lib.gpushm_buffer_sync_state(b, byref(st)), f"sync_state {self.name!r}")
        return {name: getattr(st, name) for name, _ in SyncState._fields_}

    def value_lost(self, value: int) -> bool:
        """Whether value was reached because its promiser is gone, not released."""
        cap, b = self._live()
        _need_numbered("promises")
        r = lib.gpushm_buffer_value_lost(b, non_negative(value, "value"))
        check(min(r, 0), f"value_lost {self.name!r}")
        return r == 1

    def _is_sync(self) -> bool:
        """Whether the buffer is a sync buffer (fixed at its creation: asked once)."""
        if self._sync is None:
            _, b = self._live()
            self._sync = lib.gpushm_buffer_sync_method(b, None) != 0
        return self._sync

    def _sync_for_consumer(self, stream: Optional[int]) -> None:
        """A consumer is about to use the memory on stream (None: the legacy default
        stream): on a sync buffer, order it after the latest release published so far
        (a release published is waited for on the GPU, or by the CPU for host memory
        and CPU fences)."""
        cap, b = self._live()
        if lib.gpushm_buffer_sync_method(b, None) == 0:
            return
        check(lib.gpushm_buffer_acquire(b, stream, 0, -1), f"acquire {self.name!r}")

    # --- tensors ------------------------------------------------------------------
    @property
    def manifest(self) -> Optional[List[_manifest.TensorSpec]]:
        """The tensors the metadata describes, checked against the buffer (ManifestError
        if malformed); None without metadata."""
        return _manifest.decode(self.metadata, self.size)

    def view(self, dtype: Any = "uint8", shape: Optional[Union[int, Sequence[int]]] = None,
             offset: int = 0, strides: Optional[Sequence[int]] = None, name: str = "") -> "Tensor":
        """A tensor of this buffer's memory (with an open of its own).  shape None: as
        many elements as fit after offset, in one dimension."""
        self._live()
        dt = dtypes.dtype(dtype)
        if shape is None:
            shape = (max(self.size - offset, 0) // dt.itemsize,)
        return Tensor(self.dup(), _manifest.make_spec(name, dt, shape, strides, offset))

    def tensors(self) -> Dict[str, "Tensor"]:
        """Every tensor of the manifest, by name, each with an open of its own."""
        specs = self.manifest
        if specs is None:
            raise _manifest.ManifestError(f"{self.name!r} carries no tensor manifest")
        return {s.name: Tensor(self.dup(), s) for s in specs}

    def tensor(self, name: Optional[str] = None) -> "Tensor":
        """The manifest's tensor of that name, or its only tensor."""
        specs = self.manifest
        if specs is None:
            raise _manifest.ManifestError(f"{self.name!r} carries no tensor manifest: "
                                          f"use view(dtype, shape)")
        if name is None:
            if len(specs) != 1:
                raise _manifest.ManifestError(
                    f"{self.name!r} holds {len(specs)} tensors "
                    f"({', '.join(repr(s.name) for s in specs)}): name one, or use tensors()")
            return Tensor(self.dup(), specs[0])
        for s in specs:
            if s.name == name:
                return Tensor(self.dup(), s)
        raise KeyError(f"{self.name!r} has no tensor {name!r}")

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.size} bytes"
        return (f"<gpushm.Buffer {self.name!r} id {self.id} {self.backend} "
                f"{'read-only' if self.readonly else 'read-write'}, {state}>")


#: Tensor._desc()'s C descriptions by spec, and how many it keeps.
_DESCS: Dict[_manifest.TensorSpec, Tuple[TensorDesc, object]] = {}
_DESCS_MAX = 256


class Tensor:
    """A tensor in a gpushm buffer: an array of one dtype and shape at an offset.  It
    converts without a copy through the standard protocols:

    - ``torch.from_dlpack(t)``, ``cupy.from_dlpack(t)``, ``numpy.from_dlpack(t)``
      (``__dlpack__``: a versioned DLPack capsule when the consumer asks for DLPack 1.0,
      read-only on read-only opens; a legacy one otherwise, refused for read-only memory);
    - ``cupy.asarray(t)``, Numba (``__cuda_array_interface__`` v3, device memory);
    - ``numpy.asarray(t)`` (``__array_interface__``, host memory), ``t.memoryview()``.

    Every view holds an open of the buffer: a DLPack tensor's is closed by its consumer
    when the tensor goes, a NumPy array's by the memoryview it keeps; CUDA-array-interface
    consumers keep this object, which then holds one for them.  ``close()`` drops only
    this object's handle: the memory stays until the last view is gone."""

    def __init__(self, buffer: Buffer, spec: _manifest.TensorSpec) -> None:
        _manifest.check_bounds(spec, buffer.size)
        self._buffer = buffer
        self._spec = spec
        self._view_open: Optional[object] = None

    # --- what it is ---------------------------------------------------------------
    @property
    def buffer(self) -> Buffer:
        return self._buffer

    @property
    def spec(self) -> _manifest.TensorSpec:
        """Where the tensor lies in the buffer (fixed: checked when the Tensor was made)."""
        return self._spec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dtype(self) -> dtypes.DType:
        return self.spec.dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        return self.spec.shape

    @property
    def strides(self) -> Tuple[int, ...]:
        """In elements."""
        return self.spec.strides

    @property
    def offset(self) -> int:
        return self.spec.offset

    @property
    def ndim(self) -> int:
        return self.spec.ndim

    @property
    def nbytes(self) -> int:
        return self.spec.nbytes

    @property
    def readonly(self) -> bool:
        return self._buffer.readonly

    @property
    def device(self) -> str:
        """"cpu" or "cuda:N" (N: the map device)."""
        return f"cuda:{self._buffer.map_device}" if self._buffer.is_device else "cpu"

    @property
    def ptr(self) -> int:
        """Address of element [0, ..., 0]."""
        return self._buffer.ptr + self.spec.offset

    @property
    def closed(self) -> bool:
        return self._buffer.closed

    def close(self) -> None:
        """Drops this object's handle; views made from it keep the memory."""
        b = self._buffer
        if _SP is None or _SP.close_handle(b) is NotImplemented:
            _Handle.close(b)

    def __enter__(self) -> "Tensor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<gpushm.Tensor {self._buffer.name!r}"
                f"{'[' + repr(self.name) + ']' if self.name else ''} {self.dtype.name}"
                f"{list(self.shape)} on {self.device}"
                f"{', read-only' if self.readonly else ''}{', closed' if self.closed else ''}>")

    # --- DLPack -------------------------------------------------------------------
    def __dlpack_device__(self) -> Tuple[int, int]:
        return self._buffer.dlpack_device()

    def __dlpack__(self, stream: Optional[int] = None, *,
                   max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> object:
        """A DLPack capsule of this tensor (the array API's __dlpack__).  ``stream``: the
        consumer's CUDA stream (None or 1: the legacy default stream, 2: per-thread, -1:
        no synchronisation); on a sync buffer it is made to wait for the latest release.
        Without ``copy=True`` it is the buffer's memory, no copy (another ``dl_device``
        raises BufferError); with it, a writable copy of the tensor that the consumer
        owns alone (host memory: made here; device memory: by PyTorch or CuPy, whichever
        the process imported).  ``stream`` may come by position, as consumers before the
        array API's keywords passed it."""
        cap, b = self._buffer._live()
        device = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != device:
            raise BufferError(f"{self!r} lives on DLPack device {device}, not {tuple(dl_device)}: "
                              f"gpushm does not move memory between devices (copy it in your "
                              f"framework)")
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        if copy:
            from . import _dlpack_copy
            return _dlpack_copy.capsule(self, stream, max_version, versioned)
        if not versioned and self.readonly:
            raise BufferError(f"{self!r} is read-only, and the legacy DLPack this consumer asks "
                              f"for cannot say so: use a consumer of DLPack 1.0 (max_version), "
                              f"or numpy.asarray() for host memory")
        if device[0] == DL_CPU:
            if stream is not None and stream != -1:
                raise BufferError(f"stream {stream!r} for host memory: pass none")
            if self._buffer._is_sync():
                self._buffer._sync_for_consumer(None)
        else:
            if stream == 0:
                raise ValueError("stream 0 is ambiguous in DLPack: pass 1 for the legacy "
                                 "default stream")
            if stream != -1 and self._buffer._is_sync():
                self._buffer._sync_for_consumer(None if stream in (None, 1) else int(stream))
        desc, keep = self._desc()
        if _SP is not None:
            made = _SP.dlpack(b, ctypes.addressof(desc), 0 if versioned else DLPACK_LEGACY)
            if type(made) is int:
                check(made, f"DLPack export of {self._buffer.name!r}")
            return made
        out = c_void_p()
        check(lib.gpushm_buffer_dlpack(b, byref(desc), 0 if versioned else DLPACK_LEGACY,
                                       byref(out)), f"DLPack export of {self._buffer.name!r}")
        del keep
        return _capsule.own(_handle(out, "DLPack export"),
                            CAPSULE_DLTENSOR_VERSIONED if versioned else CAPSULE_DLTENSOR)

    def _desc(self) -> Tuple[TensorDesc, object]:
        """The C description of this tensor's spec, and what must live while C reads it.
        Remembered per spec (a spec is immutable, and C only reads the description): a
        consumer of a fresh tensor of the same shape each step builds it once."""
        spec = self._spec
        made = _DESCS.get(spec)
        if made is None:
            arrays = (ctypes.c_int64 * max(spec.ndim, 1))(*spec.shape), \
                (ctypes.c_int64 * max(spec.ndim, 1))(*spec.strides)
            desc = TensorDesc()
            desc.size = ctypes.sizeof(TensorDesc)
            desc.ndim = spec.ndim
            desc.offset = spec.offset
            desc.dtype = DLDataType(spec.dtype.code, spec.dtype.bits, 1)
            desc.shape = ctypes.cast(arrays[0], ctypes.POINTER(ctypes.c_int64))
            desc.strides = ctypes.cast(arrays[1], ctypes.POINTER(ctypes.c_int64))
            made = desc, arrays
            if len(_DESCS) >= _DESCS_MAX:
                _DESCS.clear()  # (a process with that many shapes starts over)
            _DESCS[spec] = made
        return made

    # --- array interfaces ---------------------------------------------------------
    def _checked(self) -> Tuple[object, int, _manifest.TensorSpec, bool]:
        """(capsule, pointer, spec, read-only) for a view about to be made without
        libgpushm's own checks (the array interfaces, memoryview): the spec checked again
        against the size and the read-only flag read from the live C handle, so that
        nothing set on the Python objects can widen a view past the buffer or make a
        read-only mapping writable (a write there is SIGSEGV)."""
        cap, b = self._buffer._live()
        spec = self._spec
        _manifest.check_bounds(spec, lib.gpushm_buffer_size(b))
        return cap, b, spec, bool(lib.gpushm_buffer_is_readonly(b))

    def _host_view(self) -> Tuple[memoryview, int, _manifest.TensorSpec]:
        """A flat memoryview of the bytes the tensor's elements span, holding an open of
        its own for as long as it (or an array made from it) lives, read-only on
        read-only opens; the offset of element [0, ..., 0] in it; and the spec it is of."""
        if _SP is not None:
            # the bounds and the read-only flag from the live C handle, in C
            cap, b = self._buffer._live()
            spec = self._spec
            first, end = spec.span()
            if self._buffer._is_sync():
                check(lib.gpushm_buffer_acquire(b, None, 0, -1),
                      f"acquire {self._buffer.name!r}")
            try:
                view = _SP.host_view(b, first, end - first, self._buffer._keep)
            except ValueError:
                _manifest.check_bounds(spec, lib.gpushm_buffer_size(b))  # says which
                raise
            if type(view) is int:
                check(view, f"ref {self._buffer.name!r}")
            return view, spec.offset - first, spec
        cap, b, spec, readonly = self._checked()
        first, end = spec.span()
        # Buffer._export_ref() and _sync_for_consumer() inline: every asarray() comes here
        r = lib.gpushm_buffer_ref(b)
        if r < 0:
            check(r, f"ref {self._buffer.name!r}")
        keep = _capsule.own(b, CAPSULE_BUFFER)
        if self._buffer._is_sync():
            check(lib.gpushm_buffer_acquire(b, None, 0, -1), f"acquire {self._buffer.name!r}")
        raw = (ctypes.c_ubyte * (end - first)).from_address(lib.gpushm_buffer_ptr(b) + first)
        setattr(raw, "_gpushm_open", keep)  # closed by libgpushm when the ctypes array goes
        if self._buffer._keep is not None:
            setattr(raw, "_gpushm_keep", self._buffer._keep)
        view = memoryview(raw).cast("B")
        return (view.toreadonly() if readonly else view), spec.offset - first, spec

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        """NumPy's array interface (v3), for host memory.  Its data is a memoryview that
        holds an open of its own: NumPy keeps that, not this Tensor, so close() here is
        final for this handle while the arrays keep the memory."""
        if self._buffer.is_device:
            raise AttributeError(f"{self!r} is device memory: no __array_interface__ "
                                 f"(use torch.from_dlpack or cupy.from_dlpack)")
        typestr = self._spec.dtype.typestr
        data, offset, spec = self._host_view()
        return {
            "version": 3,
            "shape": spec.shape,
            "typestr": typestr,
            "data": data,
            "offset": offset,
            "strides": None if spec.contiguous else
            tuple(s * spec.dtype.itemsize for s in spec.strides),
        }

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """CUDA Array Interface v3, for device memory.  Its consumers (CuPy, Numba) keep
        this Tensor as the memory's owner, so from the first read the Tensor holds an
        open for them, until it is itself garbage; close() drops only its handle's.
        ``stream``: None; on a sync buffer, the stream of the last acquire() through this
        handle, or without one (or if that was the per-thread stream, 2, which names
        another stream in each thread) 1, the legacy default stream, which each read then
        makes wait for the latest release: the consumer synchronises with it before use
        (v3)."""
        if not self._buffer.is_device:
            raise AttributeError(f"{self!r} is host memory: no __cuda_array_interface__ "
                                 f"(use numpy.asarray or DLPack)")
        cap, b, spec, readonly = self._checked()
        typestr = spec.dtype.typestr
        if self._view_open is None:
            self._view_open = self._buffer._export_ref()
        stream = None
        if self._buffer.sync_method != "none":
            acquired = self._buffer._acquired_stream
            if self._buffer._acquired and acquired != _PER_THREAD_STREAM:
                stream = acquired or _LEGACY_STREAM
            else:
                # the per-thread stream is each thread's own: a consumer on another thread
                # would synchronise with its stream, which waited for nothing
                self._buffer._sync_for_consumer(None)
                stream = _LEGACY_STREAM
        return {
            "version": 3,
            "shape": spec.shape,
            "typestr": typestr,
            "data": (lib.gpushm_buffer_ptr(b) + spec.offset, readonly),
            "strides": None if spec.contiguous else
            tuple(s * spec.dtype.itemsize for s in spec.strides),
            "stream": stream,
        }

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> Any:
        # reached only when __array_interface__ is absent: device memory
        raise TypeError(f"{self!r} is device memory: NumPy cannot read it in place; use "
                        f"torch.from_dlpack / cupy.from_dlpack (and copy to the host there)")

    def memoryview(self) -> memoryview:
        """The tensor's bytes as a flat memoryview (host memory, contiguous tensors),
        read-only on read-only opens; it holds an open of its own."""
        if self._buffer.is_device:
            raise TypeError(f"{self!r} is device memory: no memoryview")
        if not self._spec.contiguous:
            raise ValueError(f"{self!r} is not contiguous: no flat memoryview")
        return self._host_view()[0]

    # --- copies in ----------------------------------------------------------------
    def copy_from(self, source: Any) -> None:
        """Copies source (a NumPy, PyTorch or CuPy array of this shape; on the host,
        anything with the buffer protocol) into this tensor with the source framework's
        own copy, and waits for it to finish."""
        from . import _copy
        _copy.copy_into(self, source)


class Event(_Named):
    """A named inter-process CUDA event (gpushm_event_create/open)."""

    _what = "event"

    def __init__(self, pointer: int, connection: Connection) -> None:
        # an event is closed like a buffer
        super().__init__(pointer, CAPSULE_BUFFER, connection,
                         text(lib.gpushm_event_name(pointer)), lib.gpushm_event_id(pointer))

    def record(self, stream: StreamLike = None) -> None:
        """Records the event on stream (a stream of the event's own device)."""
        cap, e = self._live()
        check(lib.gpushm_event_record(e, stream_handle(stream)), f"record {self.name!r}")

    def wait(self, stream: StreamLike = None) -> None:
        """Makes stream wait for the event's most recent record, by any process."""
        cap, e = self._live()
        check(lib.gpushm_event_wait(e, stream_handle(stream)), f"wait {self.name!r}")

    def __repr__(self) -> str:
        return f"<gpushm.Event {self.name!r} id {self.id}{' closed' if self.closed else ''}>"



class Timeline(_Named):
    """A named 64-bit counter that CPUs and CUDA streams of any process signal and wait
    on (gpushm_timeline_*; docs/sync.md).  Values only grow; a wait for v ends once the
    counter is at least v.  signal()/wait() are the CPU's; signal_stream()/wait_stream()
    queue on a CUDA stream (None: the legacy default stream; a torch or CuPy stream)."""

    _what = "timeline"

    def __init__(self, pointer: int, connection: Connection) -> None:
        # closed like a buffer
        super().__init__(pointer, CAPSULE_BUFFER, connection,
                         text(lib.gpushm_timeline_name(pointer)), lib.gpushm_timeline_id(pointer))

    @property
    def value(self) -> int:
        """The value the counter has reached (what signallers' work has done)."""
        cap, t = self._live()
        return lib.gpushm_timeline_value(t)

    @property
    def sync_method(self) -> str:
        """How this process's streams reach it: "host" before any stream use, then
        "gpu-fence", or "cpu-fence" where the CPU stands in (the device cannot)."""
        cap, t = self._live()
        return SYNC_METHODS.get(lib.gpushm_timeline_sync_method(t, None), "none")

    def signal(self, value: int) -> None:
        """Signals value now, from the CPU (above every value signalled before)."""
        cap, t = self._live()
        check(lib.gpushm_timeline_signal(t, non_negative(value, "value")),
              f"signal {self.name!r} at {value}")

    def signal_stream(self, value: int, stream: StreamLike = None) -> None:
        """Signals value once the work queued on stream is done."""
        cap, t = self._live()
        check(lib.gpushm_timeline_signal_stream(t, stream_handle(stream),
                                                non_negative(value, "value")),
              f"signal {self.name!r} at {value}")

    def wait(self, value: int, timeout: Optional[float] = None) -> None:
        """Waits in this thread until the counter reaches value; timeout in seconds
        (None: for ever), Timeout after it.  SignallerLost if value was reached because
        its promiser is gone."""
        cap, t = self._live()
        ms = -1 if timeout is None else max(0, timeout_ms(timeout))
        check(lib.gpushm_timeline_wait(t, non_negative(value, "value"), ms),
              f"wait {self.name!r} for {value}")

    def wait_stream(self, value: int, stream: StreamLike = None,
                    timeout: Optional[float] = None) -> None:
        """Makes stream wait on the GPU until the counter reaches value: queued at once
        if value is signalled or promised, else this thread first waits up to timeout
        for one of the two."""
        cap, t = self._live()
        ms = -1 if timeout is None else max(0, timeout_ms(timeout))
        check(lib.gpushm_timeline_wait_stream(t, stream_handle(stream),
                                              non_negative(value, "value"), ms),
              f"wait {self.name!r} for {value}")

    def promise(self, upto: int) -> None:
        """Promises that this connection will signal every value up to upto, which
        makes it their only signaller and lets waiters queue their GPU waits at once.
        Broken (the values count as lost) should this process die or close the
        timeline owing them."""
        cap, t = self._live()
        check(lib.gpushm_timeline_promise(t, non_negative(upto, "upto")),
              f"promise {self.name!r} up to {upto}")

    def value_lost(self, value: int) -> bool:
        """Whether value was reached because its promiser is gone, not signalled."""
        cap, t = self._live()
        r = lib.gpushm_timeline_value_lost(t, non_negative(value, "value"))
        check(min(r, 0), f"value_lost {self.name!r}")
        return r == 1

    def sync_state(self) -> Dict[str, int]:
        """counter (the latest value signalled, its work perhaps still queued),
        promised_upto, promiser_client, lost_from, lost_upto, lost_client; the reached
        value is .value."""
        cap, t = self._live()
        st = SyncState()
        check(lib.gpushm_timeline_state(t, byref(st)), f"sync_state {self.name!r}")
        return {name: getattr(st, name) for name, _ in SyncState._fields_}

    def close_unlink(self) -> None:
        """Removes the timeline's name, while it still names this one, and closes."""
        cap, t = self._live()
        check(lib.gpushm_buffer_ref(t), f"ref {self.name!r}")
        r = lib.gpushm_timeline_close_unlink(t)
        self._cap = None
        check(r, f"close_unlink {self.name!r}")

    def __repr__(self) -> str:
        return f"<gpushm.Timeline {self.name!r} id {self.id}{' closed' if self.closed else ''}>"


@dataclasses.dataclass(frozen=True)
class Frame:
    """A frame of a ring: its number (from 1), its slot and the slot's byte offset in the
    ring's memory."""
    frame: int
    slot: int
    offset: int

    def _c(self) -> RingFrame:
        return RingFrame(self.frame, self.slot, self.offset)


class Ring(_Named):
    """A frame ring (gpushm_ring_*; docs/rings.md): slots a producer fills and consumers
    read in turn, ordered by timelines.  A producer: ``f = ring.acquire_slot()``, write
    ``ring.slot(f.slot)``, ``ring.present(f)``; a consumer: ``f = ring.acquire_frame()``,
    read, ``ring.release(f)``.  The ``_stream`` forms queue on a CUDA stream (None: the
    legacy default stream; a torch or CuPy stream) instead of waiting in this thread.
    Timeouts are in seconds (None: for ever); Timeout after one, SignallerLost when the
    producer went (the next frame is a next producer's)."""

    _what = "ring"

    def __init__(self, pointer: int, connection: Connection) -> None:
        super().__init__(pointer, CAPSULE_RING, connection,
                         text(lib.gpushm_ring_name(pointer)), lib.gpushm_ring_id(pointer))

    @property
    def slots(self) -> int:
        cap, r = self._live()
        return lib.gpushm_ring_slots(r)

    @property
    def slot_size(self) -> int:
        cap, r = self._live()
        return lib.gpushm_ring_slot_size(r)

    @property
    def slot_stride(self) -> int:
        cap, r = self._live()
        return lib.gpushm_ring_slot_stride(r)

    @property
    def producer(self) -> bool:
        cap, r = self._live()
        return bool(lib.gpushm_ring_is_producer(r))

    @property
    def presented(self) -> int:
        """The frame last presented and reached (0: none yet)."""
        cap, r = self._live()
        return lib.gpushm_ring_presented(r)

    @property
    def consumers(self) -> int:
        """Consumers attached now."""
        cap, r = self._live()
        return lib.gpushm_ring_consumers(r)

    @property
    def consumer_planes(self) -> int:
        """Consumers attached now with a ready plane (Vulkan queues waiting on the GPU)."""
        cap, r = self._live()
        return lib.gpushm_ring_consumer_planes(r)

    def sync_state(self) -> Dict[str, int]:
        """The ready timeline's state: counter (the frame last presented), promised_upto,
        promiser_client, lost_from, lost_upto, lost_client."""
        cap, r = self._live()
        st = SyncState()
        check(lib.gpushm_ring_state(r, byref(st)), f"sync_state {self.name!r}")
        return {name: getattr(st, name) for name, _ in SyncState._fields_}

    def slot_ptr(self, slot: int) -> int:
        """Where a slot's bytes are in this process: a host address (host backend) or a
        device pointer (CUDA backends)."""
        cap, r = self._live()
        p = lib.gpushm_ring_slot_ptr(r, non_negative(slot, "slot"))
        if not p:
            raise InvalidArgument(f"{self.name!r} has no mapped slot {slot} "
                                  f"({self.slots} slots)")
        return p

    def slot(self, slot: int) -> memoryview:
        """A slot's bytes as a memoryview (host memory; read-only for a consumer).  Valid
        while the ring is open."""
        cap, r = self._live()
        buf = lib.gpushm_ring_buffer(r)
        if lib.gpushm_buffer_backend(buf) != 1:  # GPUSHM_BACKEND_HOST
            raise TypeError(f"{self.name!r} is device memory: no memoryview "
                            f"(slot_ptr() is its device pointer)")
        raw = (ctypes.c_ubyte * self.slot_size).from_address(self.slot_ptr(slot))
        view = memoryview(raw).cast("B")
        return view if self.producer else view.toreadonly()

    def _frame(self, fn: Any, what: str, *args: Any) -> Frame:
        cap, r = self._live()
        out = RingFrame()
        check(fn(r, *args, byref(out)), f"{what} {self.name!r}")
        return Frame(out.frame, out.slot, out.offset)

    def acquire_slot(self, timeout: Optional[float] = None) -> Frame:
        """The next frame's slot, once every consumer let go of it."""
        return self._frame(lib.gpushm_ring_acquire_slot, "acquire_slot", _ms(timeout))

    def acquire_slot_stream(self, stream: StreamLike = None,
                            timeout: Optional[float] = None) -> Frame:
        return self._frame(lib.gpushm_ring_acquire_slot_stream, "acquire_slot",
                           stream_handle(stream), _ms(timeout))

    def present(self, frame: Frame) -> None:
        cap, r = self._live()
        check(lib.gpushm_ring_present(r, byref(frame._c())), f"present {self.name!r}")

    def present_stream(self, frame: Frame, stream: StreamLike = None) -> None:
        cap, r = self._live()
        check(lib.gpushm_ring_present_stream(r, stream_handle(stream), byref(frame._c())),
              f"present {self.name!r}")

    def acquire_frame(self, latest: bool = False, timeout: Optional[float] = None) -> Frame:
        """The next frame presented (latest: the latest, skipping older ones)."""
        return self._frame(lib.gpushm_ring_acquire_frame, "acquire_frame",
                           RING_LATEST if latest else 0, _ms(timeout))

    def acquire_frame_stream(self, stream: StreamLike = None, latest: bool = False,
                             timeout: Optional[float] = None) -> Frame:
        return self._frame(lib.gpushm_ring_acquire_frame_stream, "acquire_frame",
                           stream_handle(stream), RING_LATEST if latest else 0, _ms(timeout))

    def release(self, frame: Frame) -> None:
        """Lets go of frame and every one before it."""
        cap, r = self._live()
        check(lib.gpushm_ring_release(r, byref(frame._c())), f"release {self.name!r}")

    def release_stream(self, frame: Frame, stream: StreamLike = None) -> None:
        cap, r = self._live()
        check(lib.gpushm_ring_release_stream(r, stream_handle(stream), byref(frame._c())),
              f"release {self.name!r}")

    def evict(self, consumer: int) -> None:
        """Detaches a consumer that holds frames too long (a producer's; consumer: the
        number a Timeout of acquire_slot names): it is waited for no more."""
        cap, r = self._live()
        check(lib.gpushm_ring_evict(r, non_negative(consumer, "consumer")),
              f"evict from {self.name!r}")

    def close_unlink(self) -> None:
        """Removes the ring's name, while it still names this one, and closes."""
        self._live()
        cap, self._cap = self._cap, None
        # As close(): taken out of the capsule's hands only where no other thread holds
        # it; else unlinked by name (the ring's, while it is this one) and left to close.
        if _GIL_ENABLED and sys.getrefcount(cap) <= 2:
            check(lib.gpushm_ring_close_unlink(_capsule.take(cap, CAPSULE_RING)),
                  f"close_unlink {self.name!r}")
        else:
            self._connection.unlink(self.name)

    def __repr__(self) -> str:
        role = "closed" if self.closed else ("producer" if self.producer else "consumer")
        return f"<gpushm.Ring {self.name!r} id {self.id} {role}>"


def _ms(timeout: Optional[float]) -> int:
    return -1 if timeout is None else max(0, timeout_ms(timeout))


if _SP is not None:
    # gpushm.open() and gpushm.empty() build these classes in C on their common path, and
    # a host tensor's NumPy interface is made there (the getter below, where it cannot)
    _SP.bind_classes(Buffer, Tensor, _manifest._decode, globals(), CAPSULE_BUFFER,
                     Tensor.__array_interface__.fget)
    Tensor.__array_interface__ = property(_SP.array_interface,
                                          doc=Tensor.__array_interface__.__doc__)
