# SPDX-License-Identifier: MIT
"""The few-lines API: tensors in and out of named buffers.

Every function takes ``conn=`` (a Connection); without it, the process's default
connection is used, made on first use ($GPUSHM_SOCKET, else /run/gpushm/gpushmd.sock) and
made anew in a forked child.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from . import core as _core
from . import dtypes
from . import manifest as _manifest
from ._copy import describe
from ._lib import strerror
from ._accel import speedups as _SP
from ._lib import OPEN_READONLY, map_device_flag
from .core import BUNDLE_ALIGN, Buffer, Connection, DeviceLike, Tensor, check, parse_device
from .errors import CODES, NotFound, Unsupported, make_error

if TYPE_CHECKING:
    from .weights import WeightSet

_default_lock = threading.Lock()
_default: Optional[Connection] = None


def _client_name() -> str:
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    name = "python:" + "".join(c if c.isprintable() else "?" for c in prog)
    return name.encode()[:64].decode("utf-8", "ignore")


def connect(socket: Optional[Union[str, "os.PathLike[str]"]] = None, name: Optional[str] = None,
            *, timeout: Optional[float] = None) -> Connection:
    """A new connection to gpushmd (see Connection)."""
    return Connection(socket, name if name is not None else _client_name(), timeout=timeout)


def _reset_after_fork() -> None:
    # A fork while another thread held the lock (connect() runs under it) would leave it
    # held in the child for good; the parent's connection is the parent's anyway.
    global _default_lock, _default
    _default_lock = threading.Lock()
    _default = None


os.register_at_fork(after_in_child=_reset_after_fork)


def default_connection() -> Connection:
    """The process's shared connection, made on first use (and anew after fork())."""
    global _default
    made = _default
    if made is not None and made._cap is not None and made._pid == _core._PID:
        return made  # (the common case, without the lock)
    with _default_lock:
        if _default is None or _default.closed or _default._pid != _core._PID:
            _default = connect()
        return _default


def _conn(conn: Optional[Connection]) -> Connection:
    return conn if conn is not None else default_connection()


def _device_backend(conn: Connection, kind: str, backend: Optional[Union[str, int]]) -> Union[str, int]:
    """The backend for memory of a device kind: the one asked for; for CUDA memory the
    daemon's default where that is a CUDA backend, else cuda-fd; host memory for the CPU."""
    if backend is not None:
        return backend
    if kind == "cpu":
        return "host"
    default = conn.default_backend
    return default if default in ("cuda-fd", "cuda-ipc", "cuda-fabric") else "cuda-fd"


def _create_tensors(name: str, specs: Sequence[_manifest.TensorSpec], size: int, device: DeviceLike,
                    conn: Optional[Connection], backend: Optional[Union[str, int]],
                    create: Dict[str, Any]) -> Buffer:
    c = _conn(conn)
    kind, index = parse_device(device)
    if kind != "cpu" and kind != "cuda":
        raise ValueError(f"gpushm shares CPU and CUDA memory, not {kind}")
    meta = _manifest.encode(specs)
    buf = c.create(name, max(size, 1), backend=_device_backend(c, kind, backend),
                   device=index if kind == "cuda" else 0,
                   map_device=index if kind == "cuda" else None, metadata=meta, **create)
    theirs = buf.metadata
    if theirs != meta:
        # open_existing joined a buffer made with other tensors: writing ours into it
        # would have its readers misread our bytes as its dtype and shape
        buf.close()
        code = CODES["EXIST"]
        raise make_error(code, f"the existing buffer has another manifest: {theirs[:200]!r}",
                         f"create {name!r}", strerror(code))
    return buf


#: Plans a connection keeps (api._empty_plan), at most.
_EMPTY_PLANS_MAX = 64


def empty(name: str, shape: Union[int, Sequence[int]], dtype: Any = "float32", *,
          device: DeviceLike = "cpu", conn: Optional[Connection] = None,
          backend: Optional[Union[str, int]] = None, **create: Any) -> Tensor:
    """Creates a buffer holding one C-contiguous tensor (it reads as zeros unless
    ``uninitialized=True``) with its manifest, and returns it open read-write.
    ``device``: "cpu" (host memory) or "cuda:N"; ``create``: Connection.create()'s
    options (mode, lifetime, sync, uninitialized, ...)."""
    spec = _manifest.make_spec("", dtype, shape)  # (checked, and remembered by exact type)
    c = conn if conn is not None else default_connection()
    key = None
    if _SP is not None:
        # a producer's fresh tensor of the same kind each step: the plan made the first
        # time (its manifest and create options) and the create and the objects in C
        key, plan = _plan_of(c, spec, device, backend, create)
        if plan is not None:
            made = _SP.create_tensor(c, name, plan)
            if type(made) is int:
                check(made, f"create {name!r}")
            if made is not NotImplemented:
                return made
    buf = _create_tensors(name, (spec,), spec.nbytes, device, c, backend, create)
    if key is not None and not create.get("open_existing"):
        _empty_plan(c, key, spec, device, backend, create)
    return Tensor(buf, spec)


def empty_start(name: str, shape: Union[int, Sequence[int]], dtype: Any = "float32", *,
                device: DeviceLike = "cpu", conn: Optional[Connection] = None,
                backend: Optional[Union[str, int]] = None, **create: Any) -> _core.Pending:
    """empty()'s create sent, without waiting for the reply: finish() on what it returns
    gives the Tensor empty() would have, or raises what empty() raises.  A producer starts
    the next tensor's create before it fills this one, and the round trip overlaps the
    fill (docs/python.md#pipelined-opens-and-creates)."""
    spec = _manifest.make_spec("", dtype, shape)
    kind, index = parse_device(device)
    if kind != "cpu" and kind != "cuda":  # (before a plan is made for it)
        raise ValueError(f"gpushm shares CPU and CUDA memory, not {kind}")
    c = _conn(conn)
    if _SP is not None:
        # empty()'s plan of this kind of tensor, made here if it is not yet: the create
        # and the Tensor in C
        key, plan = _plan_of(c, spec, device, backend, create)
        if plan is None and key is not None and not create.get("open_existing"):
            _empty_plan(c, key, spec, device, backend, create)
            plan = c._empty_plans.get(key)
        if plan is not None:
            made = _SP.create_start(c, name, plan)
            if made is not NotImplemented:
                if made < 0:
                    check(made, f"create {name!r}")
                pending = _core.Pending(made, c, f"create {name!r}")
                pending._how = spec
                return pending
    meta = _manifest.encode((spec,))
    pending = c.create_start(name, max(spec.nbytes, 1),
                             backend=_device_backend(c, kind, backend),
                             device=index if kind == "cuda" else 0,
                             map_device=index if kind == "cuda" else None, metadata=meta,
                             **create)

    def tensor(buf: Buffer) -> Tensor:
        theirs = buf.metadata
        if theirs != meta:  # (as _create_tensors(): open_existing joined another manifest)
            code = CODES["EXIST"]
            raise make_error(code, f"the existing buffer has another manifest: "
                             f"{theirs[:200]!r}", f"create {name!r}", strerror(code))
        return Tensor(buf, spec)
    pending._then = tensor
    return pending


def _plan_of(c: Connection, spec: _manifest.TensorSpec, device: DeviceLike,
             backend: Optional[Union[str, int]], create: Dict[str, Any]) -> Tuple[Any, Any]:
    """(key, plan) of empty()'s arguments on c: the plan None where none is made yet,
    both None where there can be none (an unhashable option; not our connection).  The
    key holds the arguments' types too: 0 and False, 1 and 1.0 are equal keys, and what
    the first would pass, the second must still be refused for."""
    try:
        key = (spec, device, type(device), backend, type(backend))
        if create:
            key += tuple((k, v, type(v)) for k, v in create.items())
        return key, c._empty_plans.get(key)
    except (TypeError, AttributeError):
        return None, None


def _empty_plan(c: Connection, key: Any, spec: _manifest.TensorSpec, device: DeviceLike,
                backend: Optional[Union[str, int]], create: Dict[str, Any]) -> None:
    """Remembers on c what empty() with these arguments asks gpushm_buffer_create() for,
    the way _create_tensors() and Connection.create() work it out (an open_existing
    create is never planned: it must compare the manifest it joins)."""
    kind, index = parse_device(device)
    options = dict(create)
    options.update(backend=_device_backend(c, kind, backend),
                   device=index if kind == "cuda" else 0,
                   map_device=index if kind == "cuda" else None,
                   metadata=_manifest.encode((spec,)))
    size, opts = c._create_plan(max(spec.nbytes, 1), **options)
    plans = c._empty_plans
    if len(plans) >= _EMPTY_PLANS_MAX:
        plans.clear()
    # (opts held by the plan: the address stays valid as long as it is in use)
    plans[key] = (size, _core.ctypes.addressof(opts), spec, opts)  # create_tensor's


def _sync_after_copy(tensor: Tensor, source: Any) -> None:
    """On a sync buffer the copy (already waited for) is published as release 1."""
    if tensor.buffer.sync_method != "none":
        tensor.buffer.release(None)


def share(name: str, array: Any, *, device: DeviceLike = None, conn: Optional[Connection] = None,
          backend: Optional[Union[str, int]] = None, **create: Any) -> Tensor:
    """Copies array (NumPy, PyTorch, CuPy, or a buffer-protocol object) into a new
    buffer with a manifest of its dtype and shape, on array's device unless ``device``
    says otherwise, and returns the new tensor (open read-write).  Returns once the copy
    is done; on a sync buffer (sync=True) it is also published as a release."""
    shape, dt, where = describe(array)
    spec = _manifest.make_spec("", dt, shape)
    target = device if device is not None else (where[0] if where[0] == "cpu" else f"cuda:{where[1]}")
    create.setdefault("uninitialized", True)  # the copy writes every byte
    buf = _create_tensors(name, [spec], spec.nbytes, target, conn, backend, create)
    tensor = Tensor(buf, spec)
    try:
        tensor.copy_from(array)
        _sync_after_copy(tensor, array)
    except BaseException:
        _discard(buf)
        raise
    return tensor


def _discard(buf: Buffer) -> None:
    """A buffer made for a share that failed: unlinked and closed."""
    try:
        buf.close_unlink()
    except Exception:
        buf.close()


def share_bundle(name: str, arrays: Mapping[str, Any], *, device: DeviceLike = None,
                 conn: Optional[Connection] = None, backend: Optional[Union[str, int]] = None,
                 align: int = BUNDLE_ALIGN, **create: Any) -> Dict[str, Tensor]:
    """Copies several named arrays into one new buffer, each at an offset aligned to
    ``align`` bytes, with one manifest naming them all (one create, one open for the
    consumer).  The arrays must live on one device.  Returns the tensors by name."""
    if not arrays:
        raise ValueError("share_bundle needs at least one array")
    if align <= 0 or align & (align - 1):
        raise ValueError(f"align {align} is not a power of two")
    specs, places = [], set()
    offset = 0
    for key, array in arrays.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"bundle names must be non-empty strings, not {key!r}")
        shape, dt, where = describe(array)
        places.add(where)
        offset = (offset + align - 1) // align * align
        spec = _manifest.make_spec(key, dt, shape, None, offset)
        specs.append(spec)
        offset += spec.nbytes
    if len(places) > 1 and device is None:
        raise ValueError(f"the arrays live on several devices ({sorted(places)}): move them "
                         f"to one, or name the bundle's device=")
    where = places.pop()
    target = device if device is not None else (where[0] if where[0] == "cpu" else f"cuda:{where[1]}")
    buf = _create_tensors(name, specs, offset, target, conn, backend, create)
    try:
        tensors = {spec.name: Tensor(buf.dup(), spec) for spec in specs}
        for key, array in arrays.items():
            tensors[key].copy_from(array)
        if buf.sync_method != "none":
            buf.release(None)
    except BaseException:
        _discard(buf)
        raise
    buf.close()  # each tensor holds an open of its own
    return tensors


def open(name: str, *, dtype: Any = None, shape: Optional[Union[int, Sequence[int]]] = None,
         offset: int = 0, strides: Optional[Sequence[int]] = None, tensor: Optional[str] = None,
         readonly: bool = False, device: DeviceLike = None, wait: Optional[float] = None,
         conn: Optional[Connection] = None) -> Tensor:
    """Opens a buffer as a tensor: the one its manifest describes (``tensor=``: the one
    of that name in a bundle), or what ``dtype``/``shape``/``offset``/``strides`` say (for
    buffers of C producers without a manifest).  A buffer with neither opens as its bytes
    (uint8).  ``device``: the CUDA device whose streams will use it (its map device).
    ``wait``: seconds to wait for a name not there yet to be made (math.inf: for ever),
    then NotFound; gpushmd counts such waits apart from failed opens.  Other calls on the
    same connection (other threads' too) wait behind it: give a waiting thread a
    Connection of its own (``conn=``)."""
    c = conn if conn is not None else default_connection()
    map_device = None
    if device is not None:
        kind, index = parse_device(device)
        map_device = index if kind == "cuda" else None
    try:
        if wait is not None:
            buf = c.open(name, readonly=readonly, map_device=map_device, wait=wait)
            t = _tensor_of(buf, name, dtype, shape, offset, strides, tensor)
        else:
            t = _open(c, name, dtype, shape, offset, strides, tensor, readonly, map_device)
    except NotFound as e:
        e._hint = lambda: _did_you_mean(c, name)
        raise
    except Unsupported as e:
        if "no CUDA driver" not in e.detail:
            raise
        raise _no_driver(c, name, e) from e
    if map_device is not None and not t.buffer.is_device:
        where = t.device
        t.close()
        raise make_error(CODES["INVAL"], f"{name!r} is host memory, not device memory: open it "
                         f"without device= for a tensor on the CPU ({where}), and copy it to "
                         f"the GPU there if it must be", f"open {name!r}", strerror(CODES["INVAL"]))
    return t


def _no_driver(conn: Connection, name: str, err: Unsupported) -> Unsupported:
    """err, saying what the buffer is and what to do: an open of device memory in a
    process with no CUDA driver (a machine without the GPU, a container without its
    driver)."""
    info = next((b for b in conn.list() if b.name == name), None)
    what = (f"{name!r} is {info.backend} memory on GPU {info.device} of gpushmd's host"
            if info is not None else f"{name!r} is device memory")
    return make_error(err.code, f"{what}, and this process has no CUDA driver to map it "
                      f"({err.detail.split('no CUDA driver', 1)[1].strip(' ()') or 'none'}): "
                      f"run it where that GPU and its driver are (in a container: with the "
                      f"NVIDIA runtime), or take the memory unmapped in C "
                      f"(gpushm_open_opts_t.map_device = GPUSHM_DEVICE_NONE, for an engine of "
                      f"its own)", f"open {name!r}")


def _did_you_mean(conn: Connection, name: str) -> str:
    """" (did you mean 'weights'?)" for a name this uid may see that is close to name; ""
    for none."""
    import difflib
    names = [b.name for b in conn.list()]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _open(c: Connection, name: str, dtype: Any, shape: Optional[Union[int, Sequence[int]]],
          offset: int, strides: Optional[Sequence[int]], tensor: Optional[str], readonly: bool,
          map_device: Optional[int]) -> Tensor:
    if (_SP is not None and dtype is None and shape is None and strides is None
            and tensor is None):
        # the common open in C: the Tensor of a buffer with one tensor in its manifest;
        # anything else comes back as the Buffer, or NotImplemented, for the path below
        flags = (OPEN_READONLY if readonly else 0) | (
            map_device_flag(_core.non_negative(map_device, "map_device"))
            if map_device is not None else 0)
        made = _SP.open_tensor(c, name, flags)
        if type(made) is Tensor:
            return made
        if type(made) is int:
            check(made, f"open {name!r}")
        buf = made if type(made) is Buffer else c.open(name, readonly=readonly,
                                                      map_device=map_device)
    else:
        buf = c.open(name, readonly=readonly, map_device=map_device)
    return _tensor_of(buf, name, dtype, shape, offset, strides, tensor)


def open_start(name: str, *, readonly: bool = False, device: DeviceLike = None,
               conn: Optional[Connection] = None) -> _core.Pending:
    """open()'s request sent, without waiting for the reply: finish() on what it returns
    gives the Tensor open() would have (its manifest's), or raises what open() raises.
    Start the opens of the next buffers before finishing (and reading) this one, and their
    round trips overlap (docs/python.md#pipelined-opens-and-creates)."""
    c = conn if conn is not None else default_connection()
    map_device = None
    if device is not None:
        kind, index = parse_device(device)
        map_device = index if kind == "cuda" else None
    pending = c.open_start(name, readonly=readonly, map_device=map_device)
    pending._how = True  # (the speedups make the manifest's Tensor, as open_tensor() does)
    pending._then = lambda buf: _tensor_of(buf, name, None, None, 0, None, None)
    return pending


def _tensor_of(buf: Buffer, name: str, dtype: Any, shape: Optional[Union[int, Sequence[int]]],
               offset: int, strides: Optional[Sequence[int]], tensor: Optional[str]) -> Tensor:
    """open()'s Tensor of the buffer it opened (closed on error)."""
    try:
        if buf.image is not None and dtype is None and shape is None and strides is None:
            # a linear image is (height, width, channels) of its format, rows apart by its
            # pitch; an optimal one has no pointer: a clear error, not bytes
            return Tensor(buf, buf.image_spec())
        if dtype is not None or shape is not None or strides is not None:
            dt = dtypes.dtype(dtype if dtype is not None else "uint8")
            if shape is None:
                shape = (max(buf.size - offset, 0) // dt.itemsize,)
            spec = _manifest.make_spec(tensor or "", dt, shape, strides, offset)
            return Tensor(buf, spec)
        specs = buf.manifest
        if specs is None:
            return Tensor(buf, _manifest.make_spec("", dtypes.uint8, (buf.size,)))
        if tensor is None and len(specs) > 1:
            raise _manifest.ManifestError(
                f"{name!r} holds {len(specs)} tensors ({', '.join(repr(s.name) for s in specs)}): "
                f"use open_bundle(), or open(name, tensor=...)")
        for spec in specs:
            if tensor is None or spec.name == tensor:
                return Tensor(buf, spec)
        raise KeyError(f"{name!r} has no tensor {tensor!r}")
    except BaseException:
        buf.close()
        raise


def create_image(name: str, width: int, height: int, *, format: str = "rgba8-unorm",
                 device: DeviceLike = None, mode: int = 0o600,
                 lifetime: Union[str, int] = "persistent",
                 conn: Optional[Connection] = None) -> Tensor:
    """Creates a linear image (docs/graphics.md) and returns it as a tensor of
    (height, width, channels) texels, its rows as the image's pitch lays them: in device
    memory (cuda-fd) for ``device="cuda"`` or ``"cuda:N"``, else in host memory.  Vulkan
    and GL processes import it; CUDA kernels, PyTorch and CuPy write it in place."""
    c = _conn(conn)
    backend, index = "host", 0
    if device is not None:
        kind, idx = parse_device(device)
        if kind == "cuda":
            backend, index = "cuda-fd", idx or 0
    buf = c.create_image(name, width, height, format=format, backend=backend, device=index,
                         mode=mode, lifetime=lifetime)
    try:
        return Tensor(buf, buf.image_spec())
    except BaseException:
        buf.close()
        raise


def open_bundle(name: str, *, readonly: bool = False, device: DeviceLike = None,
                conn: Optional[Connection] = None) -> Dict[str, Tensor]:
    """Opens a buffer and returns every tensor of its manifest by name, each holding an
    open of its own (one round trip to the daemon for all of them)."""
    c = _conn(conn)
    map_device = None
    if device is not None:
        kind, index = parse_device(device)
        map_device = index if kind == "cuda" else None
    with c.open(name, readonly=readonly, map_device=map_device) as buf:
        return buf.tensors()


def publish_weights(name: str, tensors: Mapping[str, Any], *, mode: int = 0o600,
                    lifetime: Union[str, int] = "persistent", after: int = 0,
                    device: DeviceLike = None, backend: Optional[Union[str, int]] = None,
                    align: int = BUNDLE_ALIGN, bucket: Optional[int] = None,
                    conn: Optional[Connection] = None) -> "WeightSet":
    """Publishes a state dict (name -> NumPy/PyTorch/CuPy array) as the next generation of
    weight set ``name`` (docs/weights.md), copied into new buffers of each device of at
    most ``bucket`` bytes (1 GiB), and returns the new generation
    (Connection.publish_weights)."""
    return _conn(conn).publish_weights(name, tensors, mode=mode, lifetime=lifetime, after=after,
                                       device=device, backend=backend, align=align,
                                       bucket=bucket)


def publish_weights_from(name: str, tensors: Mapping[str, Tensor], *, mode: int = 0o600,
                         lifetime: Union[str, int] = "persistent", after: int = 0,
                         conn: Optional[Connection] = None) -> "WeightSet":
    """Publishes gpushm tensors already written in place (``empty()``, ``share_bundle()``,
    ``Buffer.view()``), without copying them, as the next generation of weight set
    ``name`` (Connection.publish_weights_from)."""
    return _conn(conn).publish_weights_from(name, tensors, mode=mode, lifetime=lifetime,
                                            after=after)


def open_weights(name: str, *, conn: Optional[Connection] = None) -> "WeightSet":
    """The generation weight set ``name`` denotes now, held until closed: its tensors,
    read-only, by name (WeightSet.tensors(); ``to_torch()`` for load_state_dict)."""
    return _conn(conn).open_weights(name)


def unlink(name: str, *, conn: Optional[Connection] = None) -> None:
    """Removes a name; the memory lives on until its last holder closes."""
    _conn(conn).unlink(name)


def list_buffers(*, all: bool = False, metadata: bool = False,
                 conn: Optional[Connection] = None) -> Any:
    """The buffers (and events) the daemon shows (admin.BufferInfo dataclasses)."""
    return _conn(conn).list(all=all, metadata=metadata)


def clients(*, conn: Optional[Connection] = None) -> Any:
    """The connected clients (admin.ClientInfo)."""
    return _conn(conn).clients()


def stats(*, conn: Optional[Connection] = None) -> Any:
    """The daemon's statistics (admin.Stats)."""
    return _conn(conn).stats()
