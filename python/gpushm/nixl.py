# SPDX-License-Identifier: MIT
"""gpushm memory moved by NIXL (docs/multinode.md, "NIXL").

NIXL (ai-dynamo/nixl) moves memory between agents; its UCX backend picks a transport for
each transfer by itself, and where no fast one fits it takes a slow one without a word
(READ over TCP at 0.3-0.5 GB/s beside WRITE at 49 GB/s: vllm #52607, nixl #1754).  This
module puts gpushm buffers and weight sets in front of an agent and keeps it honest:

- ``Agent.register()`` / ``register_weights()``: one descriptor per buffer, built from the
  buffer's export descriptor (``Buffer.export``), refusing what UCX cannot register, or
  must not, with the reason (``descriptor()``);
- ``Agent.transfer()`` runs a transfer and reads which UCX transport took it (the
  ``UCX_PROTO_INFO`` tables, written to a log file of the process's own), and raises
  ``TransportError`` unless it is a CUDA or an RDMA one (or, between host memory on both
  ends, a shared-memory one);
- remote memory goes between processes as numbers (``describe()`` / ``remote()``), not
  NIXL's pickled descriptor lists: whatever a peer sends is data, not code.

NIXL itself comes from the ``nixl-cu13`` (``nixl_cu13``) or ``nixl`` package; this module
imports it when an ``Agent`` is made.
"""
from __future__ import annotations

import atexit
import collections
import ctypes
import dataclasses
import importlib
import os
import re
import shutil
import tempfile
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .core import Buffer
from .errors import Error, InvalidArgument, NotFound, PermissionDenied, Unsupported
from .weights import WeightSet

#: UCX transports that move device memory without staging it through the host: CUDA's
#: own (same host) and RDMA NICs' (GPUDirect; any host).
CUDA_TRANSPORTS = frozenset({"cuda_ipc", "cuda_copy", "gdr_copy"})
RDMA_TRANSPORTS = frozenset({"rc_verbs", "rc_mlx5", "dc_mlx5", "ud_verbs", "ud_mlx5", "srd"})
#: Transports that move host memory between processes of one host without a socket.
SHM_TRANSPORTS = frozenset({"cma", "knem", "xpmem", "sysv", "posix"})

#: NIXL's names for the memory types gpushm buffers have.
VRAM, DRAM = "VRAM", "DRAM"

_OPS = {"READ": "get", "WRITE": "put"}
#: how many of peers' buffers an Agent keeps open for its gpushm route (least recently
#: used closed first): each open holds the peer's memory alive until closed
ROUTE_OPENS_MAX = 64
_libc = ctypes.CDLL(None)
_libc.fflush.argtypes = [ctypes.c_void_p]


class TransportError(Error):
    """A transfer went, or would go, over a transport other than a CUDA or an RDMA one
    (a shared-memory one between host memory): ``lanes`` says which UCX chose."""

    def __init__(self, message: str, lanes: Sequence["Lane"] = ()) -> None:
        super().__init__(message)
        self.detail = message
        self.lanes = tuple(lanes)
        #: the transfer, done, that took the refused path (Agent.transfer())
        self.transfer: Optional["Transfer"] = None


# --- what UCX chose ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Lane:
    """One row of a UCX_PROTO_INFO table: for transfers of ``low``..``high`` bytes
    (``high`` None: no end) of ``op`` ("READ": ucp_get, "WRITE": ucp_put) between
    ``local`` and ``remote`` memory ("cuda", "host", ...), on an endpoint of ``scope``
    ("self", "intra-node", "inter-node"), UCX uses ``config`` (e.g. "cuda_ipc/cuda")."""
    op: str
    local: str
    remote: str
    scope: str
    low: int
    high: Optional[int]
    description: str
    config: str

    @property
    def transports(self) -> Tuple[str, ...]:
        """The transports config names ("cuda_ipc/cuda" -> "cuda_ipc")."""
        return tuple(dict.fromkeys(re.findall(r"([a-z][a-z0-9_]*)/", self.config)))

    def covers(self, length: int) -> bool:
        return self.low <= length and (self.high is None or length <= self.high)


# "remote memory read by ucp_get*(multi) into host memory from host", "... into
# cuda/GPU0 from cuda", "remote memory write by ucp_put* from host memory to cuda/dev[1]"
_TITLE = re.compile(r"remote memory (read|write) by ucp_(get|put)\*(?:\([^)]*\))? "
                    r"(?:into|from) ([\w-]+)(?:/\S+)?(?: memory)? (?:from|to) ([\w-]+)")
_SCOPE = re.compile(r"\b(self|intra-node|inter-node)\b")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _size(text: str) -> Optional[int]:
    if text == "inf":
        return None
    m = re.fullmatch(r"(\d+)([KMGT]?)B?", text)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * _UNITS[m.group(2)]


def parse_proto_info(text: str) -> List[Lane]:
    """Every ucp_get/ucp_put row of the UCX_PROTO_INFO tables in text (a UCX log)."""
    lanes: List[Lane] = []
    scope, title = "", None
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 3:                  # a border, or not a table line
            continue
        cells = cells[1:-1]
        if len(cells) == 1:                 # a heading: the endpoint, then the operation
            m = _TITLE.search(cells[0])
            if m:
                title = m
            else:
                s = _SCOPE.search(cells[0])
                scope, title = (s.group(1) if s else ""), None
            continue
        if title is None or len(cells) != 3 or cells[0] == "Range":
            continue
        low_high = cells[0].split("..")
        try:
            low = _size(low_high[0]) or 0
            high = _size(low_high[-1])
        except ValueError:
            continue
        op = "READ" if title.group(2) == "get" else "WRITE"
        lanes.append(Lane(op, title.group(3), title.group(4), scope, low, high, cells[1],
                          cells[2]))
    return lanes


def judge(lane: Lane) -> Optional[str]:
    """Why lane is not a path this module lets a transfer take (None: it is)."""
    names = lane.transports
    if not names:
        return f"UCX names no transport for it ({lane.config!r})"
    host_only = lane.local == "host" and lane.remote == "host"
    for t in names:
        if t in CUDA_TRANSPORTS or t in RDMA_TRANSPORTS:
            continue
        if t in SHM_TRANSPORTS and host_only:
            continue
        if t == "tcp":
            why = "TCP sockets (a copy through the host and the kernel)"
        elif t in SHM_TRANSPORTS:
            why = "a host shared-memory copy of device memory"
        else:
            why = "neither a CUDA nor an RDMA transport"
        return f"{t}: {why}"
    return None


# --- what a buffer is to NIXL --------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Descriptor:
    """A buffer's range as NIXL takes it: (address, length, device) of mem_type, and what
    a registration of it reaches (UCX registers, and a peer may map, the whole
    allocation: a carved buffer's whole segment)."""
    name: str
    address: int
    length: int
    device: int
    mem_type: str
    allocation_size: int
    #: where the range lies in gpushm: the buffer's id at its daemon (instance), and the
    #: range's first byte in the buffer; what a peer of the same daemon opens itself
    buffer_id: int = 0
    offset: int = 0
    instance: int = 0

    def tuple(self) -> Tuple[int, int, int]:
        return (self.address, self.length, self.device)


BufferRange = Union[Buffer, Tuple[Buffer, int, int]]


def descriptor(buf: Buffer, offset: int = 0, length: int = 0, *,
               serve_read_only: bool = False) -> Descriptor:
    """The descriptor of [offset, offset + length) of buf (length 0: to its end), from its
    export descriptor.  Refused, with the reason, where UCX cannot register the memory or
    a peer could do more with it than this open may:

    - a read-only open (PermissionDenied) unless serve_read_only: NIXL has no read-only
      registration, and any agent given the metadata may WRITE into it.  serve_read_only
      says the caller knows: the kernel still refuses peers' writes to host memory (sealed,
      mapped read-only), but not to device memory, which no open keeps read-only against
      its own process either (docs/security.md);
    - cuda-ipc buffers (Unsupported): every process maps them through legacy CUDA IPC
      (``cuIpcOpenMemHandle``), and UCX cannot register imported legacy-IPC memory;
    - device memory mapped for another device than its own (Unsupported: not tried)."""
    if buf.readonly and not serve_read_only:
        raise PermissionDenied(
            f"{buf.name!r} is open read-only: NIXL has no read-only registration, and any "
            f"agent given this one's metadata could WRITE into it. Open it read-write (as a "
            f"writer may), or copy it into a buffer of the caller's own")
    if buf.backend == "cuda-ipc":
        raise Unsupported(
            f"{buf.name!r} is a cuda-ipc buffer: this process maps it through legacy CUDA IPC "
            f"(cuIpcOpenMemHandle), and UCX cannot register memory a process imported that "
            f"way (its cuda_ipc transport cannot export it again). Create it with "
            f"backend='cuda-fd'")
    if buf.is_device and buf.map_device != buf.device:
        raise Unsupported(
            f"{buf.name!r} lives on device {buf.device} but is mapped here for device "
            f"{buf.map_device}: register it in a process that maps it on its own device")
    e = buf.export("cuda-va" if buf.is_device else "host-pointer", offset, length)
    conn = buf.connection
    return Descriptor(buf.name, e.address, e.length, e.device if buf.is_device else 0,
                      VRAM if buf.is_device else DRAM, e.allocation_size, buf.id, offset,
                      conn.instance_id if conn is not None and not conn.closed else 0)


def _descriptors(items: Iterable[BufferRange], serve_read_only: bool = False) -> List[Descriptor]:
    out = []
    for item in items:
        buf, offset, length = item if isinstance(item, tuple) else (item, 0, 0)
        out.append(descriptor(buf, offset, length, serve_read_only=serve_read_only))
    if not out:
        raise InvalidArgument("no buffers given")
    types = {d.mem_type for d in out}
    if len(types) > 1:
        raise InvalidArgument("host and device memory in one list: NIXL takes one memory type "
                              "per list (register or move them as two)")
    return out


def describe(items: Iterable[BufferRange], *, serve_read_only: bool = False) -> Dict[str, Any]:
    """What a peer needs to move data to or from these ranges of this process's buffers
    (after it has the metadata of the agent that registered them): plain numbers,
    JSON-ready."""
    descs = _descriptors(items, serve_read_only)
    out: Dict[str, Any] = {"mem_type": descs[0].mem_type,
                           "descs": [list(d.tuple()) for d in descs],
                           "names": [d.name for d in descs]}
    instances = {d.instance for d in descs}
    if len(instances) == 1 and 0 not in instances:
        # a peer of the same gpushmd may open these itself (Agent.transfer's gpushm
        # route): each range as buffer id and offset, and the descriptor it goes with
        out["gpushm"] = {"instance": descs[0].instance,
                         "ranges": [[d.buffer_id, d.offset, d.address, d.length]
                                    for d in descs]}
    return out


def describe_weights(ws: WeightSet) -> Dict[str, Any]:
    """describe() of a weight set's generation, buffer by buffer: what a peer READs to
    pull it whole (Agent.register_weights registers it)."""
    return describe(ws.buffers(), serve_read_only=True)


# --- the gpushm route's copies ---------------------------------------------------------------

def _device_copier() -> Any:
    """PyTorch with CUDA (which NIXL's wheels require), else CuPy: whichever can be
    imported; None where neither can (the package has no CUDA runtime of its own)."""
    for name in ("torch", "cupy"):
        try:
            fw = importlib.import_module(name)
        except ImportError:
            continue
        if name == "cupy" or fw.cuda.is_available():
            return fw
    return None


def _wait_for(done: Any, timeout: float, what: str) -> None:
    """Polls done() until it is true; Error after timeout seconds (the copies go on).
    The first millisecond spins: a sleep costs a copy of a GiB (0.7 ms on an H200) a
    tenth of its time in timer slack alone."""
    start = time.perf_counter()
    while not done():
        waited = time.perf_counter() - start
        if waited > timeout:
            raise Error(f"{what} not done after {timeout} s")
        if waited > 1e-3:
            time.sleep(100e-6)


def _copy(op: str, local: List[Tuple[Buffer, int, int]], opened: List[Tuple[Buffer, int]],
          timeout: float) -> str:
    """Copies each range (READ: the opened buffer's into the local one; WRITE: the other
    way), waits for the copies (device memory: timeout seconds at most); says what
    copied them."""
    pairs = [((rb, roff, lb, loff) if op == "READ" else (lb, loff, rb, roff)) + (n,)
             for (lb, loff, n), (rb, roff) in zip(local, opened)]
    if not local[0][0].is_device:
        for src, soff, dst, doff, n in pairs:
            ctypes.memmove(dst.ptr + doff, src.ptr + soff, n)
        return "memmove (host memory)"
    fw = _device_copier()
    views: List[Tuple[Any, Any]] = []
    try:
        for src, soff, dst, doff, n in pairs:
            s = src.view("uint8", n, soff)
            try:
                views.append((s, dst.view("uint8", n, doff)))
            except BaseException:
                s.close()
                raise
        what = f"{op} of {sum(n for _, _, n in local)} bytes (gpushm route)"
        if fw.__name__ == "torch":
            with fw.cuda.device(local[0][0].map_device):
                for s, d in views:
                    fw.from_dlpack(d).copy_(fw.from_dlpack(s))
                done = fw.cuda.Event()
                done.record()
                _wait_for(done.query, timeout, what)
            return "device-to-device copy (PyTorch copy_)"
        with fw.cuda.Device(local[0][0].map_device):
            for s, d in views:
                fw.from_dlpack(d)[...] = fw.from_dlpack(s)
            done = fw.cuda.Event()
            done.record()
            _wait_for(lambda: done.done, timeout, what)
        return "device-to-device copy (CuPy)"
    finally:
        for s, d in views:
            s.close()
            d.close()


# --- the agent ------------------------------------------------------------------------------

def _nixl() -> Any:
    """The NIXL package: nixl_cu13 (the nixl-cu13 wheel) or nixl."""
    errors = []
    for name in ("nixl_cu13", "nixl"):
        try:
            return importlib.import_module(name)
        except ImportError as e:
            errors.append(f"{name}: {e}")
    raise Unsupported("NIXL is not installed (pip install nixl-cu13): " + "; ".join(errors))


@dataclasses.dataclass
class Registration:
    """Buffers registered with an agent: deregister (or close the Agent) before closing
    them."""
    descriptors: List[Descriptor]
    seconds: float
    _handle: Any
    _buffers: List[Buffer]

    @property
    def mem_type(self) -> str:
        return self.descriptors[0].mem_type


@dataclasses.dataclass(frozen=True)
class Transfer:
    """A finished transfer: bytes moved, seconds from post to done, the UCX lanes that
    carried it, and its route: "nixl" (to the peer's registration) or "gpushm" (the
    peer's buffers opened here, through this process's own gpushmd connection, and
    copied by this process: path says how; setup_seconds, how long the opens took, and
    the first time importing the device copier)."""
    op: str
    bytes: int
    seconds: float
    lanes: Tuple[Lane, ...]
    route: str = "nixl"
    setup_seconds: float = 0.0
    #: the gpushm route: what copied the bytes
    path: str = ""

    @property
    def transports(self) -> Tuple[str, ...]:
        return tuple(dict.fromkeys(t for lane in self.lanes for t in lane.transports))


class Agent:
    """A NIXL agent (``.nixl``: the nixl_agent itself, for everything not wrapped here)
    whose UCX writes its protocol choices where ``transfer()`` can read them.

    UCX reads its settings once per process, when its first agent starts: make this one
    the process's first (``UCX_PROTO_INFO`` and ``UCX_LOG_FILE`` are set here unless
    the environment sets them), or set ``UCX_PROTO_INFO=y`` and ``UCX_LOG_FILE`` for the
    process yourself.  cuda_ipc_get: let READs of device memory use cuda_ipc
    (``UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y`` unless the environment sets it), which UCX turns
    off by itself on hosts without NVLink, leaving READs to TCP.

    route: "nixl" (the default) always goes to the peer's registration; "auto" lets
    transfer() copy data between buffers of one gpushmd itself, the peer's buffers
    opened here ("gpushm" route).  Why: a gpushm cuda-fd buffer is VMM memory that its
    process imported from a POSIX fd, and the driver lets no importer export it again,
    so UCX (any build: it exports from the registering process) cannot hand it to
    another process: a peer reaches it over TCP or a host copy, and a loopback transfer
    of this agent over TCP as well (measured, docs/multinode.md).  gpushmd, which
    created it, hands its fd to whoever may open it: opened here it is device memory
    like any other.
    Opt in only with peers trusted to name buffers: a description names them by id,
    unchecked against what the peer holds, so under "auto" a peer may point this
    process's READ or WRITE at any buffer this process may open so, its own private
    ones included (NIXL lets a peer name only memory it registered).

    The route keeps what it opened (route_opens_max, ROUTE_OPENS_MAX by default, least
    recently used closed first) so that a transfer after the first costs the copy alone:
    until remove_peer() or close() this process holds those buffers, their memory alive
    after the peer closes or unlinks them."""

    def __init__(self, name: str, *, backends: Sequence[str] = ("UCX",),
                 log_dir: Optional[str] = None, cuda_ipc_get: bool = True,
                 route: str = "nixl", route_opens_max: int = ROUTE_OPENS_MAX,
                 **config: Any) -> None:
        self._init_route(route, route_opens_max)
        nixl = _nixl()
        if os.environ.get("UCX_PROTO_INFO", "y").lower() not in ("y", "yes", "1", "on"):
            raise InvalidArgument("UCX_PROTO_INFO is set off in the environment: without its "
                                  "tables no transfer's transport can be checked")
        os.environ["UCX_PROTO_INFO"] = "y"
        # UCX turns cuda_ipc's GET off ("auto") on hosts without NVLink, and READ then
        # falls back to TCP (vllm #52607, nixl #1754; measured on an H200 alone: WRITE
        # over cuda_ipc, READ over tcp/lo): a copy by the GPU is faster than any socket
        if cuda_ipc_get:
            os.environ.setdefault("UCX_CUDA_IPC_ENABLE_GET_ZCOPY", "y")
        log = os.environ.get("UCX_LOG_FILE")
        if not log:
            where = log_dir
            if where is None:
                # UCX writes there for the rest of the process, and later agents read
                # it too: removed as the process exits, not when this agent closes
                where = tempfile.mkdtemp(prefix="gpushm-nixl-")
                atexit.register(shutil.rmtree, where, ignore_errors=True)
            log = os.path.join(where, "ucx.%p.log")
            os.environ["UCX_LOG_FILE"] = log
        self._log_path = log.replace("%p", str(os.getpid())).replace("%h", os.uname().nodename)
        self._log_pos = 0
        self.lanes: List[Lane] = []
        self.name = name
        t0 = time.perf_counter()
        self.nixl = nixl.nixl_agent(name, nixl.nixl_agent_config(backends=list(backends),
                                                                 **config))
        #: seconds the agent (and UCX, if this is the process's first) took to start
        self.start_seconds = time.perf_counter() - t0
        self._registrations: List[Registration] = []

    def _init_route(self, route: str, route_opens_max: int) -> None:
        if route not in ("auto", "nixl"):
            raise InvalidArgument(f"route {route!r}: 'auto' or 'nixl'")
        if type(route_opens_max) is not int or route_opens_max < 0:
            raise InvalidArgument(f"route_opens_max {route_opens_max!r}: a count >= 0")
        self.route = route
        self.route_opens_max = route_opens_max
        # (peer, buffer id, read-only) -> the peer's buffer, opened here by the route
        self._route_opens: "collections.OrderedDict[Tuple[str, int, bool], Buffer]" = (
            collections.OrderedDict())

    # --- memory -------------------------------------------------------------------------
    def register(self, *items: BufferRange) -> Registration:
        """Registers each buffer (or (buffer, offset, length)) as one descriptor."""
        descs = _descriptors(items)
        buffers = [i[0] if isinstance(i, tuple) else i for i in items]
        return self._register(descs, buffers)

    def register_weights(self, ws: WeightSet) -> Registration:
        """Registers a weight set's generation for peers to READ: one descriptor per
        buffer it lies in, however many tensors those hold.  Its buffers are open
        read-only (a published generation takes no writer): give this agent's metadata
        only to peers you would let write its device memory (descriptor())."""
        buffers = ws.buffers()
        return self._register(_descriptors(buffers, serve_read_only=True), buffers)

    def _register(self, descs: List[Descriptor], buffers: List[Buffer]) -> Registration:
        t0 = time.perf_counter()
        handle = self.nixl.register_memory([d.tuple() + ("",) for d in descs], descs[0].mem_type)
        if handle is None:
            raise Error(f"NIXL registered none of {', '.join(repr(d.name) for d in descs)}")
        reg = Registration(descs, time.perf_counter() - t0, handle, list(buffers))
        self._registrations.append(reg)
        return reg

    def deregister(self, reg: Registration) -> None:
        if reg in self._registrations:
            self._registrations.remove(reg)
            self.nixl.deregister_memory(reg._handle)

    # --- peers --------------------------------------------------------------------------
    def metadata(self) -> bytes:
        """This agent's metadata (its backends' connection info and registrations), for
        a peer's add_peer(): register first."""
        return bytes(self.nixl.get_agent_metadata())

    def add_peer(self, metadata: bytes) -> str:
        """Loads a peer's metadata; returns its name."""
        name = self.nixl.add_remote_agent(metadata)
        return name.decode() if isinstance(name, bytes) else str(name)

    def remove_peer(self, name: str) -> None:
        """Forgets a peer: its metadata, and its buffers the gpushm route opened."""
        self._close_route_opens(lambda key: key[0] == name)
        self.nixl.remove_remote_agent(name)

    # --- transfers ----------------------------------------------------------------------
    def transfer(self, op: str, local: Iterable[BufferRange], remote: Dict[str, Any], peer: str,
                 *, notify: bytes = b"", timeout: float = 60.0) -> Transfer:
        """op ("READ": remote into local, "WRITE": local into remote) between local
        ranges and a peer's remote ones (what its describe() gave), descriptor by
        descriptor; returns when done, the peer notified (notify) when it is.
        TransportError, after the transfer, if UCX took a path judge() refuses: the data
        moved, but not as it must.

        With route="auto" (class doc), where the remote ranges are buffers of this
        process's gpushmd of the local ranges' memory type, within what the peer
        described, and this process may open them as op needs (read-only for READ,
        read-write for WRITE: gpushmd's permissions), the route is "gpushm": opened
        here and copied by this process (memmove for host memory, PyTorch, else CuPy, for
        device memory, waited for up to timeout), kept open for the next transfer (class doc),
        and the peer notified through NIXL.  Otherwise the peer's registration ("nixl")."""
        if op not in _OPS:
            raise InvalidArgument(f"op {op!r}: READ or WRITE")
        items = [i if isinstance(i, tuple) else (i, 0, 0) for i in local]
        mine = _descriptors(items)
        theirs = [tuple(int(x) for x in d) for d in remote.get("descs", ())]
        if len(theirs) != len(mine) or any(len(d) != 3 for d in theirs):
            raise InvalidArgument(f"{len(mine)} local ranges and {len(theirs)} remote ones: "
                                  f"a transfer pairs them one to one")
        for d, (_, length, _) in zip(mine, theirs):
            if d.length != length:
                raise InvalidArgument(f"{d.name!r}: {d.length} bytes here, {length} there")
        kind = remote.get("mem_type")
        if kind not in (VRAM, DRAM):
            raise InvalidArgument(f"remote memory type {kind!r}: {VRAM} or {DRAM}")
        total = sum(d.length for d in mine)
        t_setup = time.perf_counter()
        opened = self._open_route(op, remote, items[0][0], mine, kind, theirs, peer)
        if opened is None:
            self._trim_route_opens()        # what a partly taken route opened
        else:
            setup = time.perf_counter() - t_setup
            ranges = [(b, off, d.length) for (b, off, _), d in zip(items, mine)]
            t0 = time.perf_counter()
            # a copy that failed or timed out may still run on the GPU: what it uses
            # stays open (until remove_peer() or close())
            path = _copy(op, ranges, opened, timeout)
            self._trim_route_opens()
            seconds = time.perf_counter() - t0
            if notify:
                self.nixl.send_notif(peer, notify)
            return Transfer(op, total, seconds, (), "gpushm", setup, path)
        seconds = self._move(op, mine, theirs, kind, peer, notify, timeout)
        try:
            lanes = self.lanes_for(op, mine[0].mem_type, kind, max(d.length for d in mine))
        except TransportError as e:
            if kind == VRAM and isinstance(remote.get("gpushm"), dict):
                e = TransportError(
                    f"{e.detail}. The remote end is gpushm device memory: its holder "
                    f"imported it, and the driver lets no process export memory it "
                    f"imported, so no UCX has CUDA IPC for it within one host; between "
                    f"processes of one gpushmd, Agent(route='auto') copies it itself "
                    f"(docs/multinode.md)", e.lanes)
            e.transfer = Transfer(op, total, seconds, e.lanes)
            raise e from None
        return Transfer(op, total, seconds, tuple(lanes))

    def _open_route(self, op: str, remote: Dict[str, Any], first: Buffer,
                    mine: List[Descriptor], kind: str, theirs: List[Tuple[int, int, int]],
                    peer: str) -> Optional[List[Tuple[Buffer, int]]]:
        """The remote ranges' buffers open here, each with the range's offset, where
        the route may be "gpushm"; None where it may not."""
        g = remote.get("gpushm")
        conn = first.connection
        if (self.route != "auto" or not isinstance(g, dict) or conn is None or conn.closed
                or mine[0].mem_type != kind):
            return None
        if g.get("instance") != conn.instance_id:
            return None                     # another gpushmd: another host, or container
        ranges = g.get("ranges")
        if (not isinstance(ranges, list) or len(ranges) != len(mine) or
                any(not isinstance(r, list) or len(r) != 4 or
                    not all(type(x) is int and x >= 0 for x in r) for r in ranges)):
            raise InvalidArgument(f"remote gpushm ranges {ranges!r}: one [buffer id, offset, "
                                  f"address, length] per descriptor")
        # a caller may narrow a description's descriptors (a block of a pool): the
        # route follows, within what was described; anything else is NIXL's to judge
        offsets = []
        for (_, offset, address, length), (where, n, _) in zip(ranges, theirs):
            if not (address <= where and where + n <= address + length):
                return None
            offsets.append(offset + where - address)
        if kind == VRAM and _device_copier() is None:
            return None
        readonly = op == "READ"
        opened: List[Tuple[Buffer, int]] = []
        for (buffer_id, _, _, _), offset, d in zip(ranges, offsets, mine):
            key = (peer, buffer_id, readonly)
            b = self._route_opens.get(key)
            if b is not None and (b.closed or b.connection is not conn):
                self._close_route_opens(lambda k: k == key)
                b = None
            if b is None:
                try:
                    b = conn.open(buffer_id, readonly=readonly)
                except (NotFound, PermissionDenied, Unsupported):
                    # not this process's to open as op needs: the peer's registration
                    return None
                if ((VRAM if b.is_device else DRAM) != kind or
                        (b.is_device and b.map_device != b.device)):
                    b.close()
                    return None
                self._route_opens[key] = b
            else:
                self._route_opens.move_to_end(key)
            if offset + d.length > b.size:
                return None
            opened.append((b, offset))
        return opened

    def _close_route_opens(self, which: Any) -> None:
        for key in [k for k in self._route_opens if which(k)]:
            self._route_opens.pop(key).close()

    def _trim_route_opens(self) -> None:
        """Closes the least recently used opens past route_opens_max: after a copy, as
        it may need more than the maximum (0: keep none)."""
        while len(self._route_opens) > self.route_opens_max:
            self._route_opens.popitem(last=False)[1].close()

    def _move(self, op: str, mine: List[Descriptor], theirs: List[Tuple[int, int, int]],
              kind: str, target: str, notify: bytes, timeout: float) -> float:
        """Posts op between the lists, with target's registrations; seconds from post to
        done."""
        n = self.nixl
        local_list = n.get_xfer_descs([d.tuple() for d in mine], mine[0].mem_type)
        remote_list = n.get_xfer_descs(theirs, kind)
        handle = n.initialize_xfer(op, local_list, remote_list, target, notify)
        try:
            t0 = time.perf_counter()
            state = n.transfer(handle)
            deadline = t0 + timeout
            while state == "PROC":
                if time.perf_counter() > deadline:
                    raise Error(f"{op} of {sum(d.length for d in mine)} bytes with {target!r} "
                                f"not done after {timeout} s")
                state = n.check_xfer_state(handle)
            if state != "DONE":
                raise Error(f"{op} with {target!r} failed (NIXL state {state})")
            return time.perf_counter() - t0
        finally:
            n.release_xfer_handle(handle)

    def lanes_for(self, op: str, local: str, remote: str, length: int) -> List[Lane]:
        """The lanes UCX chose for op of length bytes between local and remote memory
        (NIXL's types), as its log says now; TransportError if there are none, or one
        judge() refuses."""
        self._read_log()
        mem = {VRAM: "cuda", DRAM: "host"}
        want_local, want_remote = mem[local], mem[remote]
        found = [lane for lane in self.lanes
                 if lane.op == op and lane.local == want_local and lane.remote == want_remote
                 and lane.covers(length) and lane.scope != "self"]
        if not found:
            raise TransportError(
                f"UCX reported no protocol for {op} of {length} bytes into {want_local} memory "
                f"from {want_remote} in {self._log_path}: UCX_PROTO_INFO must be on when the "
                f"process's first agent starts (make gpushm.nixl.Agent that agent)")
        for lane in found:
            why = judge(lane)
            if why:
                raise TransportError(
                    f"{op} of {length} bytes into {want_local} memory from {want_remote} went "
                    f"over {lane.config} ({lane.description}): {why}. UCX found no CUDA or "
                    f"RDMA path between these agents (UCX_TLS, the peers' devices, "
                    f"docs/multinode.md)", found)
        return found

    def _read_log(self) -> None:
        # UCX writes its log through a stdio stream of this process, buffered: what it
        # printed for the transfer just done may still be in the buffer
        _libc.fflush(None)
        try:
            with open(self._log_path, "rb") as f:
                f.seek(self._log_pos)
                raw = f.read()
        except FileNotFoundError:
            return
        # only whole lines: a table being written is read on the next call
        raw = raw[:raw.rfind(b"\n") + 1]
        self._log_pos += len(raw)
        self.lanes.extend(parse_proto_info(raw.decode("utf-8", "replace")))

    def close(self) -> None:
        """Deregisters what this agent registered, closes what its route opened."""
        self._close_route_opens(lambda key: True)
        for reg in list(self._registrations):
            self.deregister(reg)

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
