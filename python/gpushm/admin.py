# SPDX-License-Identifier: MIT
"""What gpushmd reports (gpushm-admin.h), as plain dataclasses: the buffer list, the
connected clients and the daemon's statistics.  Read through the library's accessors,
never by mirroring its structs."""
from __future__ import annotations

import ctypes
from ctypes import byref, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p, create_string_buffer
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Dict, List, Optional, Tuple, Union

from ._lib import KIND_EVENT, KIND_WEIGHTS, lib, text
from .core import BACKEND_NAMES, LIFETIME_NAMES, check


@dataclass
class Holder:
    """A connection holding a buffer.  read_write: it opened it read-write (of a timeline
    or ring: it may signal or produce; read-only holders only wait); ring_consumer: one
    of a ring's attached consumers (0.8; False from older libraries and daemons)."""
    client_id: int
    pid: int
    uid: int
    refs: int
    read_write: bool = False
    ring_consumer: bool = False


@dataclass
class WeightsInfo:
    """A weight-set generation as the daemon lists it (0.8): its number, the set's newest
    generation when listed, its tensors and its manifest's bytes."""
    generation: int
    newest: int
    tensors: int
    manifest_size: int


@dataclass
class BufferInfo:
    """A buffer (or an event, kind "event") as the daemon lists it."""
    id: int
    name: str
    kind: str                     #: "buffer", "event", "image", "timeline", "ring", "weights"
    backend: str                  #: "host", "cuda-fd", "cuda-ipc", "cuda-fabric"; "" for events
    size: int
    allocated: int                #: bytes reserved for it
    device: int                   #: the daemon's ordinal; -1 for host memory
    device_uuid: Optional[bytes]  #: 16 bytes; None for host memory
    owner_uid: int
    owner_gid: int
    mode: int
    lifetime: str                 #: "persistent" or "session"
    linked: bool                  #: False: unlinked but still held
    sync: bool
    segment_id: int               #: 0: an allocation of its own
    refs: int                     #: references of all connections
    my_refs: int                  #: of the asking connection
    creator_pid: int
    created_unix_ms: int
    holders_total: int
    holders: List[Holder] = field(default_factory=list)
    metadata: Optional[bytes] = None  #: only when listed with metadata=True
    weights: Optional[WeightsInfo] = None  #: of kind "weights" (a weight-set generation)


@dataclass
class ClientInfo:
    client_id: int
    pid: int
    uid: int
    gid: int
    name: str
    connected_unix_ms: int
    buffers_held: int
    bytes_held: int
    admin: bool
    segments_mapped: int
    segment_bytes_mapped: int


@dataclass
class DeviceStats:
    ordinal: int
    name: str
    uuid: Optional[bytes]
    total_memory: int
    free_memory: int


@dataclass
class Usage:
    kind: str
    backend: str
    device: int
    buffers: int
    bytes: int


@dataclass
class Metric:
    """One sample of a gpushmd counter or gauge, as the daemon describes it (0.7): its
    Prometheus name, help text, type, unit ("bytes", "seconds" or ""), labels and value
    (exact where the daemon sent a whole number).  A histogram (0.8) is one sample per
    series: its value is the sum of what was observed, ``observations`` how many, and
    ``buckets`` each bucket's upper bound (in the unit) with the observations at or
    below it (cumulative, as Prometheus's ``le``; the +Inf bucket is ``observations``)."""
    name: str
    help: str
    type: str                     #: "counter", "gauge" or (0.8) "histogram"
    unit: str
    labels: Dict[str, str]
    value: Union[int, Fraction]
    observations: int = 0
    buckets: List[Tuple[Union[int, Fraction], int]] = field(default_factory=list)


@dataclass
class Stats:
    daemon_version: str
    instance_id: int
    uptime_ms: int
    clients: int
    buffers: int
    buffers_linked: int
    bytes_allocated: int
    requests: int
    request_errors: int
    protocol_errors: int
    clients_dropped: int
    open_fds: int
    devices: List[DeviceStats]
    requests_by_type: Dict[str, Tuple[int, int]]  #: type -> (count, errors)
    usage: List[Usage]
    detached_total: int
    bytes_pinned_after_release: int
    fences_raised: int
    oneway_errors: int
    #: Every counter and gauge as the daemon describes it (empty from daemons before 0.7).
    metrics: List[Metric] = field(default_factory=list)

    def metric(self, name: str, **labels: str) -> Optional[Metric]:
        """The sample of that name whose labels include these, or None."""
        for m in self.metrics:
            if m.name == name and all(m.labels.get(k) == v for k, v in labels.items()):
                return m
        return None


def _uuid(fn, obj: int) -> Optional[bytes]:
    out = (c_uint8 * 16)()
    return bytes(out) if fn(obj, byref(out)) == 0 else None


_KINDS = {2: "event", 3: "image", 4: "timeline", 5: "ring", 6: "weights"}  # gpushm_kind_t


def _kind(k: int) -> str:
    return _KINDS.get(k, "buffer")


def _weights(info: int, kind: int) -> Optional[WeightsInfo]:
    if kind != KIND_WEIGHTS or not hasattr(lib, "gpushm_buffer_info_weights"):
        return None
    generation, newest, manifest_size = c_uint64(), c_uint64(), c_uint64()
    tensors = c_uint32()
    check(lib.gpushm_buffer_info_weights(info, byref(generation), byref(newest), byref(tensors),
                                         byref(manifest_size)), "list")
    return WeightsInfo(generation.value, newest.value, tensors.value, manifest_size.value)


def list_buffers(conn: int, flags: int) -> List[BufferInfo]:
    out = c_void_p()
    check(lib.gpushm_list(conn, flags, byref(out)), "list")
    try:
        result = []
        for i in range(lib.gpushm_buffer_list_count(out)):
            b = lib.gpushm_buffer_list_get(out, i)
            n = c_size_t()
            at = lib.gpushm_buffer_info_metadata(b, byref(n))
            holders = []
            for j in range(lib.gpushm_buffer_info_holder_count(b)):
                h = lib.gpushm_buffer_info_holder(b, j)
                holders.append(Holder(
                    lib.gpushm_holder_client_id(h), lib.gpushm_holder_pid(h),
                    lib.gpushm_holder_uid(h), lib.gpushm_holder_refs(h),
                    bool(lib.gpushm_holder_read_write(h))
                    if hasattr(lib, "gpushm_holder_read_write") else False,
                    bool(lib.gpushm_holder_ring_consumer(h))
                    if hasattr(lib, "gpushm_holder_ring_consumer") else False))
            kind = lib.gpushm_buffer_info_kind(b)
            result.append(BufferInfo(
                id=lib.gpushm_buffer_info_id(b),
                name=text(lib.gpushm_buffer_info_name(b)),
                kind=_kind(kind),
                backend="" if kind == KIND_EVENT else
                BACKEND_NAMES.get(lib.gpushm_buffer_info_backend(b), "host"),
                size=lib.gpushm_buffer_info_size(b),
                allocated=lib.gpushm_buffer_info_allocated(b),
                device=lib.gpushm_buffer_info_device(b),
                device_uuid=_uuid(lib.gpushm_buffer_info_device_uuid, b),
                owner_uid=lib.gpushm_buffer_info_owner_uid(b),
                owner_gid=lib.gpushm_buffer_info_owner_gid(b),
                mode=lib.gpushm_buffer_info_mode(b),
                lifetime=LIFETIME_NAMES.get(lib.gpushm_buffer_info_lifetime(b), "persistent"),
                linked=bool(lib.gpushm_buffer_info_linked(b)),
                sync=bool(lib.gpushm_buffer_info_sync(b)),
                segment_id=lib.gpushm_buffer_info_segment_id(b),
                refs=lib.gpushm_buffer_info_refs(b),
                my_refs=lib.gpushm_buffer_info_my_refs(b),
                creator_pid=lib.gpushm_buffer_info_creator_pid(b),
                created_unix_ms=lib.gpushm_buffer_info_created_unix_ms(b),
                holders_total=lib.gpushm_buffer_info_holders_total(b),
                holders=holders,
                metadata=ctypes.string_at(at, n.value) if at else None,
                weights=_weights(b, kind),
            ))
        return result
    finally:
        lib.gpushm_buffer_list_free(out)


def list_clients(conn: int) -> List[ClientInfo]:
    out = c_void_p()
    check(lib.gpushm_clients(conn, byref(out)), "clients")
    try:
        result = []
        for i in range(lib.gpushm_client_list_count(out)):
            c = lib.gpushm_client_list_get(out, i)
            result.append(ClientInfo(
                client_id=lib.gpushm_client_info_client_id(c),
                pid=lib.gpushm_client_info_pid(c),
                uid=lib.gpushm_client_info_uid(c),
                gid=lib.gpushm_client_info_gid(c),
                name=text(lib.gpushm_client_info_name(c)),
                connected_unix_ms=lib.gpushm_client_info_connected_unix_ms(c),
                buffers_held=lib.gpushm_client_info_buffers_held(c),
                bytes_held=lib.gpushm_client_info_bytes_held(c),
                admin=bool(lib.gpushm_client_info_admin(c)),
                segments_mapped=lib.gpushm_client_info_segments_mapped(c),
                segment_bytes_mapped=lib.gpushm_client_info_segment_bytes_mapped(c),
            ))
        return result
    finally:
        lib.gpushm_client_list_free(out)


# gpushm_metric_type_t; a type newer than this reads as a gauge, as it always has.
_METRIC_TYPES = {0: "gauge", 1: "counter", 2: "histogram"}


def _metrics(s: int) -> List[Metric]:
    if not hasattr(lib, "gpushm_stats_metric_count"):
        return []  # a library older than 0.7
    out = []
    for i in range(lib.gpushm_stats_metric_count(s)):
        m = lib.gpushm_stats_metric(s, i)
        labels = {}
        for k in range(lib.gpushm_metric_label_count(m)):
            lb = lib.gpushm_metric_label(m, k)
            labels[text(lib.gpushm_metric_label_name(lb))] = text(lib.gpushm_metric_label_value(lb))
        value, exponent = lib.gpushm_metric_value(m), lib.gpushm_metric_exponent(m)
        exact: Union[int, Fraction] = (value * 10 ** exponent if exponent >= 0
                                       else Fraction(value, 10 ** -exponent))
        if isinstance(exact, Fraction) and exact.denominator == 1:
            exact = exact.numerator
        metric = Metric(text(lib.gpushm_metric_name(m)), text(lib.gpushm_metric_help(m)),
                        _METRIC_TYPES.get(lib.gpushm_metric_type(m), "gauge"),
                        text(lib.gpushm_metric_unit(m)), labels, exact)
        if metric.type == "histogram":
            metric.observations = lib.gpushm_metric_observations(m)
            le = create_string_buffer(48)
            for b in range(lib.gpushm_metric_bucket_count(m)):
                bound = Fraction(text(lib.gpushm_metric_bucket_le_text(m, b, le, len(le))))
                metric.buckets.append((bound.numerator if bound.denominator == 1 else bound,
                                       lib.gpushm_metric_bucket_observations(m, b)))
        out.append(metric)
    return out


def daemon_stats(conn: int) -> Stats:
    out = c_void_p()
    check(lib.gpushm_stats(conn, byref(out)), "stats")
    s = out.value
    try:
        devices = []
        for i in range(lib.gpushm_stats_device_count(s)):
            d = lib.gpushm_stats_device(s, i)
            devices.append(DeviceStats(lib.gpushm_device_stats_ordinal(d),
                                       text(lib.gpushm_device_stats_name(d)),
                                       _uuid(lib.gpushm_device_stats_uuid, d),
                                       lib.gpushm_device_stats_total_memory(d),
                                       lib.gpushm_device_stats_free_memory(d)))
        requests = {}
        for i in range(lib.gpushm_stats_request_type_count(s)):
            r = lib.gpushm_stats_request_type(s, i)
            requests[text(lib.gpushm_request_stats_type(r))] = (
                lib.gpushm_request_stats_count(r), lib.gpushm_request_stats_errors(r))
        usage = []
        for i in range(lib.gpushm_stats_usage_count(s)):
            u = lib.gpushm_stats_usage(s, i)
            kind = lib.gpushm_usage_kind(u)
            usage.append(Usage(_kind(kind), "" if kind == KIND_EVENT else
                               BACKEND_NAMES.get(lib.gpushm_usage_backend(u), "host"),
                               lib.gpushm_usage_device(u), lib.gpushm_usage_buffers(u),
                               lib.gpushm_usage_bytes(u)))
        return Stats(
            daemon_version=text(lib.gpushm_stats_daemon_version(s)),
            instance_id=lib.gpushm_stats_instance_id(s),
            uptime_ms=lib.gpushm_stats_uptime_ms(s),
            clients=lib.gpushm_stats_clients(s),
            buffers=lib.gpushm_stats_buffers(s),
            buffers_linked=lib.gpushm_stats_buffers_linked(s),
            bytes_allocated=lib.gpushm_stats_bytes_allocated(s),
            requests=lib.gpushm_stats_requests(s),
            request_errors=lib.gpushm_stats_request_errors(s),
            protocol_errors=lib.gpushm_stats_protocol_errors(s),
            clients_dropped=lib.gpushm_stats_clients_dropped(s),
            open_fds=lib.gpushm_stats_open_fds(s),
            devices=devices,
            requests_by_type=requests,
            usage=usage,
            detached_total=lib.gpushm_stats_detached_total(s),
            bytes_pinned_after_release=lib.gpushm_stats_bytes_pinned_after_release(s),
            fences_raised=lib.gpushm_stats_fences_raised(s),
            oneway_errors=lib.gpushm_stats_oneway_errors(s),
            metrics=_metrics(s),
        )
    finally:
        lib.gpushm_stats_free(s)
