# SPDX-License-Identifier: MIT
"""Weight sets (gpushm-weights.h, docs/weights.md): a whole model shared by name, in
immutable generations.

A publisher's state dict goes into a few gpushm buffers (one per device) and is published
as the set's next generation; a reader's ``open_weights()`` holds the generation the
name denotes then, unchanged, however many are published after it, until it closes it.
Its tensors are read-only ``Tensor`` views, which keep the generation held as long as
they (or the NumPy arrays and memoryviews made of them) live, whoever closed the
``WeightSet``.  DLPack tensors a framework imported hold the memory itself (an open of
its buffer, closed by libgpushm's C deleter, no Python code), not the generation: what
they read stays mapped, and the generation may be let go of before them — unchanged
unless its publisher recycles buffers (``wait_released()``: docs/weights.md#recycling),
which may write the next generation into them once the generation is let go of.
"""
from __future__ import annotations

import ctypes
import os
import re
import secrets
import sys
import time
import weakref
from ctypes import byref, c_uint32, c_void_p
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from . import dtypes
from . import manifest as _manifest
from ._copy import describe
from ._lib import (LIBRARY_VERSION, WEIGHTS_GONE, WeightsPublishOpts, WeightTensor, lib,
                   text)
from .api import _device_backend
from .core import (_GIL_ENABLED, BUNDLE_ALIGN, Buffer, Connection, DeviceLike, Tensor, _handle,
                   _lifetime_value, c_string, check, non_negative, parse_device, timeout_ms)
from .errors import CODES, ClosedError, Unsupported, make_error

#: Room for what gpushm_weights_tensor() writes: today's 64-byte gpushm_weight_tensor_t,
#: its desc in its first layout (the header promises that much never grows), with margin.
_TENSOR_SCRATCH = 1024
#: How long one wait of wait_newer() lasts in C before Python looks again: a close() on
#: another thread and Ctrl-C are noticed within it (a C wait cannot be interrupted).
_WAIT_SLICE = 0.25
#: The most bytes publish_weights() puts in one buffer (a larger tensor gets one of its
#: own): a reader's copy_into() maps each buffer while the one before is copied
#: (docs/weights.md#measured says what that saves, and what it does not).
BUCKET_BYTES = 1 << 30
#: What gpushm.errors.InvalidName says names are (proto/wire.c's wire_name_valid()).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,126}")


def _need_weights() -> None:
    """Weight sets came with libgpushm 0.8."""
    if not hasattr(lib, "gpushm_weights_open"):
        raise Unsupported(f"libgpushm {'.'.join(map(str, LIBRARY_VERSION))} has no weight sets "
                          f"(0.8 does)")


def _check_set_name(name: str) -> None:
    # checked before anything is created or copied: publishing would refuse it only at
    # the end, after the copies
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        code = CODES["NAME"]
        raise make_error(code, f"weight set name {name!r}: names are 1-127 bytes of "
                         f"[A-Za-z0-9._-], not starting with '.' or '-'", "publish weights",
                         "invalid name")


def _close_generation(pointer: int, pid: int) -> None:
    # A forked child's copy of the parent's handle talks on the parent's socket: only
    # the process that opened it closes it (the child's copy goes with the child).
    if os.getpid() == pid:
        lib.gpushm_weights_close(pointer)


#: A tensor of a generation: name, buffer index, DLPack dtype (code, bits, lanes), shape,
#: strides (elements), offset (bytes).
_Entry = Tuple[str, int, Tuple[int, int, int], List[int], List[int], int]


class _Generation:
    """The hold of a generation (a gpushm_weights_t), let go of when the last Python
    object referring to it goes: the WeightSet until its close(), and every view made of
    it (their buffers' ``_keep``), as a buffer's opens are.  A method using the handle
    keeps this object in a local meanwhile, so another thread's close() cannot free it
    under the call."""

    __slots__ = ("pointer", "finalizer", "__weakref__")

    def __init__(self, pointer: int) -> None:
        self.pointer = pointer
        self.finalizer = weakref.finalize(self, _close_generation, pointer, os.getpid())


class WeightSet:
    """One generation of a weight set, held (gpushm_weights_open/publish): it and its
    buffers stay as they are until it is closed, whatever is published meanwhile.

    ``keys()``, ``len()``, ``in``, iteration and ``ws[name]`` as a mapping of tensor
    names; ``tensor(name)`` / ``tensors()`` give read-only ``Tensor`` views (DLPack,
    ``__array_interface__``, ``__cuda_array_interface__``); ``to_torch()`` a
    ``load_state_dict``-ready dict.  ``generation`` is this one's number, ``newest`` the
    set's newest now, ``wait_newer()`` sleeps until a newer one is published: then open
    the name again.  A context manager; ``close()`` drops this object's hold: views made
    before keep the generation until they go."""

    def __init__(self, pointer: int, connection: Connection) -> None:
        # first: whatever fails below, the generation is let go of with this object
        self._gen: Optional[_Generation] = _Generation(pointer)
        self._pid = os.getpid()
        self._connection = connection
        self._name = text(lib.gpushm_weights_name(pointer))
        self._id: int = lib.gpushm_weights_id(pointer)
        self._generation: int = lib.gpushm_weights_generation(pointer)
        self._count: int = lib.gpushm_weights_tensor_count(pointer)
        self._names: Optional[List[str]] = None
        self._entries: Dict[int, _Entry] = {}
        # one read-only handle per buffer of the generation, each view a dup() of it
        self._buffers: Dict[int, Buffer] = {}

    def _live(self) -> Tuple[_Generation, int]:
        gen = self._gen
        if gen is None:
            raise ClosedError(f"weight set {self._name!r} generation {self._generation} is "
                              f"closed")
        if self._pid != os.getpid():
            raise ClosedError(f"weight set {self._name!r} belongs to the parent of this "
                              f"process (opened before fork()): open it again here")
        return gen, gen.pointer

    # --- what it is ---------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def id(self) -> int:
        """The generation's id (gpushmctl show lists it)."""
        return self._id

    @property
    def generation(self) -> int:
        """This generation's number (1 for a set's first)."""
        return self._generation

    @property
    def connection(self) -> Connection:
        return self._connection

    @property
    def closed(self) -> bool:
        return self._gen is None

    @property
    def newest(self) -> Optional[int]:
        """The set's newest generation now (read from shared memory, no round trip);
        None once the set's name is gone (unlinked, or a session set's creator gone):
        no generation will come after this one."""
        gen, w = self._live()
        n = lib.gpushm_weights_newest(w)
        return None if n == WEIGHTS_GONE else n

    def wait_newer(self, timeout: Optional[float] = None) -> bool:
        """Sleeps until a generation newer than this one is published (no polling of
        gpushmd): True then (open the name again to get it), False after ``timeout``
        seconds (None: for ever; 0: only looks).  NotFound if the set's name goes
        instead; ClosedError if this object is closed meanwhile."""
        return self._wait(timeout, lib.gpushm_weights_wait_newer, "wait_newer")

    def _wait(self, timeout: Optional[float], wait: Any, what: str) -> bool:
        """wait(handle, ms) in slices of _WAIT_SLICE until it returns 0 (True) or timeout
        seconds have passed (False; None: for ever)."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            left = _WAIT_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            gen, w = self._live()
            r = wait(w, timeout_ms(min(left, _WAIT_SLICE)))
            if r == CODES["TIMEOUT"]:
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                continue
            check(r, f"{what} {self._name!r}")
            return True

    @property
    def oldest(self) -> Optional[int]:
        """The oldest generation of the set that anyone still holds (this one's at most;
        read from shared memory, no round trip); None from a gpushmd that does not say."""
        gen, w = self._live()
        return lib.gpushm_weights_oldest(w) or None

    def wait_released(self, generation: int, timeout: Optional[float] = None) -> bool:
        """Sleeps (no polling of gpushmd) until every generation of the set up to
        ``generation`` (older than this one) is let go of by all its holders: True then
        — a publisher may write the next generation into their buffers (recycling,
        docs/weights.md#recycling) — False after ``timeout`` seconds (None: for ever; 0:
        only looks).  ValueError for a generation not older than this one."""
        if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
            raise TypeError(f"generation must be a non-negative int, not {generation!r}")
        if generation >= self._generation:
            raise ValueError(f"generation {generation} of {self._name!r} is held by this "
                             f"object (generation {self._generation}): wait for older ones")
        return self._wait(timeout,
                          lambda w, ms: lib.gpushm_weights_wait_released(w, generation, ms),
                          "wait_released")

    # --- tensors ------------------------------------------------------------------
    def _entry(self, w: int, index: int) -> _Entry:
        """(name, buffer index, DLPack dtype, shape, strides, offset) of tensor index, as
        libgpushm checked it at open."""
        got = self._entries.get(index)
        if got is not None:
            return got
        scratch = ctypes.create_string_buffer(_TENSOR_SCRATCH)
        check(lib.gpushm_weights_tensor(w, index, scratch),
              f"weights {self._name!r}: tensor {index}")
        t = WeightTensor.from_buffer(scratch)
        d = t.desc
        got = (ctypes.string_at(t.name, t.name_len).decode("utf-8"), t.buffer,
               (d.dtype.code, d.dtype.bits, d.dtype.lanes),
               [d.shape[i] for i in range(d.ndim)], [d.strides[i] for i in range(d.ndim)],
               d.offset)
        self._entries[index] = got
        return got

    def _spec(self, w: int, index: int) -> Tuple[_manifest.TensorSpec, int]:
        """(spec, buffer index) of tensor index: TypeError for a dtype this package has
        no name for (its name is listed all the same)."""
        name, buffer_index, dlpack, shape, strides, offset = self._entry(w, index)
        try:
            dt = dtypes.from_dlpack(*dlpack)
        except TypeError as e:
            raise TypeError(f"weight set {self._name!r} tensor {name!r}: {e}") from None
        return _manifest.make_spec(name, dt, shape, strides, offset), buffer_index

    def _buffer(self, w: int, index: int) -> Buffer:
        b = self._buffers.get(index)
        if b is not None and not b.closed:
            return b
        out = c_void_p()
        check(lib.gpushm_weights_buffer(w, index, byref(out)),
              f"weights {self._name!r}: buffer {index}")
        # the generation's handle is its own (closed with it): ours takes an open of it
        check(lib.gpushm_buffer_ref(out.value), f"weights {self._name!r}: buffer {index}")
        made = Buffer(out.value, self._connection)
        b = self._buffers.setdefault(index, made)
        if b is not made:
            made.close()  # another thread made it first
        return b

    def buffers(self) -> List[Buffer]:
        """The buffers this generation's tensors lie in, each open read-only through this
        set (closed with it): what an engine that moves the set whole registers."""
        _, w = self._live()
        return [self._buffer(w, i) for i in range(lib.gpushm_weights_buffer_count(w))]

    def _view(self, gen: _Generation, w: int, index: int) -> Tensor:
        spec, buffer_index = self._spec(w, index)
        handle = self._buffer(w, buffer_index).dup()
        handle._keep = gen
        return Tensor(handle, spec)

    def _index(self, w: int, key: str) -> int:
        """The index of tensor key, or -1."""
        if not isinstance(key, str) or "\0" in key:
            return -1
        r = lib.gpushm_weights_find(w, key.encode())
        if r == CODES["NOENT"]:
            return -1
        return check(r, f"weights {self._name!r}: find {key!r}")

    def keys(self) -> List[str]:
        """The tensors' names, in the manifest's order."""
        names = self._names
        if names is None:
            gen, w = self._live()
            names = [self._entry(w, i)[0] for i in range(self._count)]
            self._names = names
        return list(names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        gen, w = self._live()
        return self._index(w, key) >= 0

    def tensor(self, key: str) -> Tensor:
        """The tensor named key: a read-only view of the generation's memory (KeyError
        if there is none)."""
        gen, w = self._live()
        index = self._index(w, key)
        if index < 0:
            raise KeyError(f"weight set {self._name!r} generation {self._generation} has "
                           f"no tensor {key!r}")
        return self._view(gen, w, index)

    __getitem__ = tensor

    def tensors(self) -> Dict[str, Tensor]:
        """Every tensor by name, as read-only views."""
        gen, w = self._live()
        views = [self._view(gen, w, i) for i in range(self._count)]
        return {v.name: v for v in views}

    def to_torch(self, copy: bool = False) -> Dict[str, Any]:
        """``{name: torch.Tensor}`` for ``model.load_state_dict()``: without ``copy``,
        the generation's memory itself, read-only (PyTorch has no read-only tensors: a
        write faults, or on legacy cuda-ipc memory lands in every reader's weights), so
        load with the default ``assign=False``, which copies into the model's own
        parameters; with ``copy``, writable copies of this process's own."""
        import torch
        out = {}
        for key, view in self.tensors().items():
            t = torch.from_dlpack(view)
            out[key] = t.clone() if copy else t
        return out

    # --- copying into the caller's own memory ----------------------------------------
    def copy_into(self, dst: Any, *, stream: Any = None, strict: bool = True) -> None:
        """Copies this generation into memory of the caller's own (an engine that keeps
        its own parameters): ``dst`` a ``torch.nn.Module`` (its ``state_dict()``) or a
        mapping of names to PyTorch, CuPy or NumPy arrays (or anything with
        ``__cuda_array_interface__`` or ``__array_interface__``), each of its tensor's
        dtype, shape and strides.  One device copy a tensor (neighbours in both memories
        merged), buffer after buffer, each mapped while the one before is copied
        (gpushm_weights_copy).  Copies into CUDA memory are queued on ``stream`` (a
        ``torch.cuda.Stream``, CuPy stream or raw handle; None: PyTorch's or CuPy's
        current stream of the destination, else the legacy default stream), ordered
        with the work there as ``Tensor.copy_`` would be; copies into pageable host
        memory are done on return (into page-locked memory, a pinned tensor, they are
        queued as CUDA's are: synchronise the stream before reading them).  ``close()``
        waits for queued copies before it unmaps anything.
        ``strict``: every tensor of the set has a place in ``dst`` and every place a
        tensor (KeyError naming the first few otherwise), as ``load_state_dict``'s."""
        gen, w = self._live()
        if hasattr(dst, "state_dict") and callable(dst.state_dict):
            dst = dst.state_dict()
        places = (ctypes.c_void_p * max(self._count, 1))()
        unexpected: List[str] = []
        found = 0
        any_cuda = False
        hint = None  # the first CUDA destination: its framework's current stream the default
        for key, array in dst.items():
            index = self._index(w, key) if isinstance(key, str) else -1
            if index < 0:
                unexpected.append(str(key))
                continue
            spec, _ = self._spec(w, index)
            address, cuda = _destination(self._name, spec, array)
            places[index] = address
            any_cuda = any_cuda or cuda
            if cuda and hint is None:
                hint = array
            found += 1
        if strict and (unexpected or found != self._count):
            missing = [k for k in self.keys() if k not in dst][:5]
            raise KeyError(f"weight set {self._name!r} generation {self._generation} and the "
                           f"destination differ: missing {missing}, unexpected "
                           f"{unexpected[:5]} (strict=False copies what both name)")
        handle = _stream_handle(stream, hint)
        if handle == 0 and any_cuda:
            # NULL would have the CPU copy host memory of the set into device memory
            handle = _CU_STREAM_LEGACY
        check(lib.gpushm_weights_copy(w, places, self._count, c_void_p(handle or None)),
              f"copy weights {self._name!r} generation {self._generation}")

    # --- closing ------------------------------------------------------------------
    def close(self) -> None:
        """Drops this object's hold of the generation: views made of it keep theirs
        until they go (the last one lets go of it).  Idempotent.  The C close runs
        without the GIL where nothing else holds the generation."""
        gen, self._gen = self._gen, None
        buffers, self._buffers = self._buffers, {}
        for b in buffers.values():
            b.close()
        # Only where no view or other thread holds it (then the local here and
        # getrefcount's argument are all) is it closed here; else the last of them to
        # let go closes it, in the garbage collector, with the GIL.
        if (gen is not None and self._pid == os.getpid() and _GIL_ENABLED
                and sys.getrefcount(gen) <= 2):
            gen.finalizer()

    def __enter__(self) -> "WeightSet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<gpushm.WeightSet {self._name!r} generation {self._generation}, "
                f"{self._count} tensors{', closed' if self.closed else ''}>")


#: CUDA's CU_STREAM_LEGACY: the legacy default stream as a handle any call takes.
_CU_STREAM_LEGACY = 0x1


def _stream_handle(stream: Any, hint: Any) -> int:
    """A CUstream handle of stream (a raw int, a torch.cuda.Stream, a CuPy stream), or
    with none the current stream of hint's framework on its device (0: the legacy
    default stream)."""
    if stream is None:
        if hint is None:
            return 0
        module = type(hint).__module__.split(".")[0]
        if module == "torch":
            import torch
            return int(torch.cuda.current_stream(hint.device).cuda_stream)
        if module == "cupy":
            import cupy
            with cupy.cuda.Device(hint.device.id):
                return int(cupy.cuda.get_current_stream().ptr)
        return 0
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise TypeError(f"stream is a {type(stream).__name__}: pass a torch.cuda.Stream, a CuPy "
                    f"stream or a CUstream handle (int)")


def _destination(set_name: str, spec: _manifest.TensorSpec, array: Any) -> Tuple[int, bool]:
    """(where element [0, ..., 0] of array is, whether that is CUDA memory), once array
    is checked to take spec's tensor: its dtype, shape and strides, writable."""
    what = f"weight set {set_name!r} tensor {spec.name!r}"
    shape, dt, (kind, _) = describe(array)
    if dt != spec.dtype or shape != tuple(spec.shape):
        raise ValueError(f"{what} is {spec.dtype.name}{list(spec.shape)}, its destination "
                         f"{dt.name}{list(shape)}")
    module = type(array).__module__.split(".")[0]
    if module == "torch":
        address, strides, writable = array.data_ptr(), tuple(array.stride()), True
    elif module == "cupy":
        address, writable = int(array.data.ptr), True
        strides = tuple(x // dt.itemsize for x in array.strides)
    else:
        iface = getattr(array, "__cuda_array_interface__", None)
        if iface is None:
            iface = getattr(array, "__array_interface__", None)
        if iface is None:
            raise TypeError(f"{what}: a {type(array).__name__} shows no memory to copy into "
                            f"(no __cuda_array_interface__ or __array_interface__)")
        address, readonly = iface["data"]
        writable = not readonly
        raw = iface.get("strides")
        strides = (tuple(x // dt.itemsize for x in raw) if raw is not None
                   else _manifest.contiguous_strides(shape))
    if not writable:
        raise ValueError(f"{what}: its destination is read-only")
    if any(n > 1 and a != b for n, a, b in zip(shape, strides, spec.strides)):
        raise ValueError(f"{what} has strides {list(spec.strides)}, its destination "
                         f"{list(strides)}: copy into a tensor of the same layout")
    return int(address), kind == "cuda"


# --- publishing --------------------------------------------------------------------
def _publish(conn: Connection, name: str, tensors: List[Tuple[str, Tensor]], *, mode: int,
             lifetime: Union[str, int], after: int) -> WeightSet:
    """Publishes tensors (gpushm Tensors, their buffers open read-write on conn) as the
    next generation of weight set name."""
    raw = c_string(name, "weight set name")
    opts = WeightsPublishOpts()
    opts.size = ctypes.sizeof(WeightsPublishOpts)
    opts.mode = non_negative(mode, "mode")
    opts.lifetime = _lifetime_value(lifetime)
    opts.after = non_negative(after, "after")
    ccap, c = conn._live()
    builder = c_void_p()
    check(lib.gpushm_weights_builder_new(byref(builder)), f"publish weights {name!r}")
    # The builder keeps the buffers' C handles, not opens of them: their capsules stay
    # referenced here until the publish is done.
    held: List[object] = []
    try:
        index = c_uint32()
        for key, t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"tensor {key!r} is a {type(t).__name__}, not a gpushm Tensor "
                                f"(gpushm.empty(), share_bundle(), Buffer.view()): "
                                f"publish_weights() copies arrays of other kinds")
            bcap, b = t.buffer._live()
            held.append(bcap)
            check(lib.gpushm_weights_builder_add_buffer(builder, b, byref(index)),
                  f"publish weights {name!r}: buffer {t.buffer.name!r}")
            desc, keep = t._desc()
            check(lib.gpushm_weights_builder_add_tensor(
                builder, c_string(key, "tensor name", code="INVAL"), index.value, byref(desc)),
                f"publish weights {name!r}: tensor {key!r}")
            del keep
        out = c_void_p()
        check(lib.gpushm_weights_publish(c, raw, builder, byref(opts), byref(out)),
              f"publish weights {name!r}")
    finally:
        lib.gpushm_weights_builder_free(builder)
        del held
    return WeightSet(_handle(out, "publish weights"), conn)


def publish_from(conn: Connection, name: str, tensors: Mapping[str, Tensor], *, mode: int,
                 lifetime: Union[str, int], after: int) -> WeightSet:
    """Connection.publish_weights_from()."""
    _need_weights()
    if not tensors:
        raise ValueError("a weight set's generation names at least one tensor")
    items = list(tensors.items())
    for key, _ in items:
        if not isinstance(key, str) or not key:
            raise ValueError(f"tensor names must be non-empty strings, not {key!r}")
    return _publish(conn, name, items, mode=mode, lifetime=lifetime, after=after)


def _buffer_mode(conn: Connection, name: str, mode: int) -> int:
    """The mode of a buffer made for a generation of set name: as readable as the set —
    its own mode where it exists (a later generation keeps it; a buffer less readable is
    refused), else mode — and writable by its owner only, so that no other writer can
    open it before it is published."""
    for info in conn.list():
        if info.name == name and info.kind == "weights":
            mode = info.mode
            break
    return (non_negative(mode, "mode") & 0o444) | 0o600


def _buffer_name(name: str, place: Tuple[str, int]) -> str:
    """A name of its own for a generation's buffer, saying which set it is for (shown by
    gpushmctl until the publish unlinks it)."""
    where = "cpu" if place[0] == "cpu" else f"cuda{place[1]}"
    return f"w.{name[:96]}.{secrets.token_hex(6)}.{where}"


def _discard(buf: Buffer) -> None:
    try:
        buf.close_unlink()
    except Exception:
        buf.close()


def publish(conn: Connection, name: str, arrays: Mapping[str, Any], *, mode: int,
            lifetime: Union[str, int], after: int, device: DeviceLike,
            backend: Optional[Union[str, int]], align: int = BUNDLE_ALIGN,
            bucket: int = BUCKET_BYTES) -> WeightSet:
    """Connection.publish_weights()."""
    _need_weights()
    _check_set_name(name)
    if not arrays:
        raise ValueError("a weight set's generation names at least one tensor")
    if align <= 0 or align & (align - 1):
        raise ValueError(f"align {align} is not a power of two")
    if bucket <= 0:
        raise ValueError(f"bucket {bucket} is not a positive number of bytes")
    target = parse_device(device) if device is not None else None
    # each tensor's place: a buffer of its device's (a new one where the next tensor
    # would take the last past bucket bytes), at an aligned offset
    groups: Dict[Tuple[str, int, int], List[Tuple[str, Any, _manifest.TensorSpec]]] = {}
    ends: Dict[Tuple[str, int, int], int] = {}
    current: Dict[Tuple[str, int], int] = {}
    for key, array in arrays.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"tensor names must be non-empty strings, not {key!r}")
        shape, dt, where = describe(array)
        place = target or where
        if place[0] not in ("cpu", "cuda"):
            raise ValueError(f"gpushm shares CPU and CUDA memory, not {place[0]}")
        step = max(align, _manifest.alignment(dt))
        slot = (place[0], place[1], current.get(place, 0))
        offset = (ends.get(slot, 0) + step - 1) // step * step
        spec = _manifest.make_spec(key, dt, shape, None, offset)
        if offset and offset + spec.nbytes > bucket:
            slot = (place[0], place[1], slot[2] + 1)
            current[place] = slot[2]
            spec = _manifest.make_spec(key, dt, shape, None, 0)
        groups.setdefault(slot, []).append((key, array, spec))
        ends[slot] = spec.offset + spec.nbytes
    buffer_mode = _buffer_mode(conn, name, mode)
    made: List[Buffer] = []
    try:
        tensors: List[Tuple[str, Tensor]] = []
        for slot, items in groups.items():
            place = (slot[0], slot[1])
            cuda = place[0] == "cuda"
            # session buffers: should this process die before publishing, they go
            buf = conn.create(_buffer_name(name, place), max(ends[slot], 1),
                              backend=_device_backend(conn, place[0], backend),
                              device=place[1] if cuda else 0,
                              map_device=place[1] if cuda else None, mode=buffer_mode,
                              lifetime="session")
            made.append(buf)
            for key, array, spec in items:
                t = Tensor(buf, spec)
                t.copy_from(array)
                tensors.append((key, t))
        ws = _publish(conn, name, tensors, mode=mode, lifetime=lifetime, after=after)
    except BaseException:
        for buf in made:
            _discard(buf)
        raise
    try:
        # the generation pins them now: the names and the writer's handles go
        for buf in made:
            buf.close_unlink()
    except BaseException:
        ws.close()
        raise
    return ws


def open_set(conn: Connection, name: str) -> WeightSet:
    """Connection.open_weights()."""
    _need_weights()
    cap, c = conn._live()
    out = c_void_p()
    check(lib.gpushm_weights_open(c, c_string(name, "weight set name"), byref(out)),
          f"open weights {name!r}")
    return WeightSet(_handle(out, "open weights"), conn)
