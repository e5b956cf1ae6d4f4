# SPDX-License-Identifier: MIT
"""libgpushm through ctypes: finding it, checking its version, and every prototype.

Every function this package calls is declared here with explicit ``restype`` and
``argtypes``.  ctypes' default ``restype`` is a C ``int``: a pointer returned without a
declaration is cut to 32 bits, which is how a hand-written binding once handed PyTorch a
truncated device pointer.  Pointers are ``c_void_p`` (Python ints) throughout.

The library is found through ``$GPUSHM_LIBRARY`` (a path) or else the system's dynamic
linker (``libgpushm.so.1`` on its search path: ldconfig, ``LD_LIBRARY_PATH``).
"""
from __future__ import annotations

import ctypes
import os
import re
from ctypes import (POINTER, c_char_p, c_int, c_int32, c_int64, c_size_t, c_uint, c_uint8,
                    c_uint16, c_uint32, c_uint64, c_void_p)
from typing import Any, Dict, List, Optional, Tuple

#: The soname this package is written against (libtool current - age).
SONAME = "libgpushm.so.1"
#: The oldest libgpushm with everything this package calls (metadata, DLPack, refs).
#: Its major is the only one this package knows: another has another ABI.
MIN_VERSION = (0, 4)


class CreateOpts(ctypes.Structure):
    """gpushm_create_opts_t as gpushm 0.4 lays it out.  Never initialised with
    gpushm_create_opts_init(): a newer library's init would write its own, larger
    struct into this one.  ``size`` says which layout this is, and a newer library
    reads it as an older caller's (include/gpushm.h)."""
    _fields_ = [
        ("size", c_uint32),
        ("backend", c_uint32),
        ("device", c_int32),
        ("mode", c_uint32),
        ("lifetime", c_uint32),
        ("flags", c_uint32),
        ("metadata_size", c_uint32),
        ("metadata", c_void_p),
    ]


class CreateOptsGroup(CreateOpts):
    """gpushm_create_opts_t with 0.8's group (and the open options before it, NULL here):
    used only for a create that names a group, so that every other create keeps the
    layout an older library reads."""
    _fields_ = [
        ("open", c_void_p),
        ("group", ctypes.c_int64),
    ]


FEATURE_CREATE_GROUP = 0x4000


class OpenOpts(ctypes.Structure):
    """gpushm_open_opts_t as gpushm 0.8 lays it out (wait_ms: 0.8), sized by ``size`` as
    CreateOpts is."""
    _fields_ = [
        ("size", c_uint32),
        ("flags", c_uint32),
        ("map_device", c_int32),
        ("wait_ms", c_int32),
    ]


DEVICE_AUTO = -1
FEATURE_OPEN_WAIT = 0x2000
LIMIT_OPEN_WAIT_MS = 3600000


class BufferDesc(ctypes.Structure):
    """gpushm_buffer_desc_t (gpushm 0.8, gpushm.h): what a handle is, in one call."""
    _fields_ = [
        ("size", c_uint32),
        ("kind", c_uint32),
        ("id", c_uint64),
        ("bytes", c_uint64),
        ("ptr", c_void_p),
        ("name", c_char_p),
        ("metadata", c_void_p),
        ("metadata_size", c_uint64),
        ("backend", c_uint32),
        ("device", c_int32),
        ("map_device", c_int32),
        ("read_only", c_uint32),
        ("owner_uid", c_uint32),
        ("owner_gid", c_uint32),
    ]


class SyncState(ctypes.Structure):
    """gpushm_sync_state_t (gpushm 0.8, gpushm.h)."""
    _fields_ = [
        ("counter", c_uint64),
        ("promised_upto", c_uint64),
        ("promiser_client", c_uint32),
        ("lost_client", c_uint32),
        ("lost_from", c_uint64),
        ("lost_upto", c_uint64),
    ]


class RingFrame(ctypes.Structure):
    """gpushm_ring_frame_t (gpushm 0.8, gpushm.h)."""
    _fields_ = [
        ("frame", c_uint64),
        ("slot", c_uint32),
        ("offset", c_uint64),
    ]


class ImageDesc(ctypes.Structure):
    """gpushm_image_desc_t (gpushm 0.7, gpushm-graphics.h): sized as CreateOpts is."""
    _fields_ = [
        ("size", c_uint32),
        ("format", c_uint32),
        ("width", c_uint32),
        ("height", c_uint32),
        ("depth", c_uint32),
        ("mip_levels", c_uint32),
        ("array_layers", c_uint32),
        ("tiling", c_uint32),
        ("usage", c_uint32),
        ("reserved", c_uint32),
        ("row_pitch", c_uint64),
    ]


class ExportDesc(ctypes.Structure):
    """gpushm_export_desc_t (gpushm 0.8, gpushm.h): one way to hand memory to an engine."""
    _fields_ = [
        ("size", c_uint32),
        ("type", c_uint32),
        ("fd", c_int32),
        ("flags", c_uint32),
        ("ptr", c_void_p),
        ("offset", c_uint64),
        ("length", c_uint64),
        ("allocation_size", c_uint64),
        ("device", c_int32),
        ("access", c_uint32),
        ("device_uuid", c_uint8 * 16),
        ("fabric_handle", c_uint8 * 64),
        ("reserved", c_uint32 * 8),
    ]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor))),
]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, POINTER(DLManagedTensorVersioned))),
    ("flags", c_uint64),
    ("dl_tensor", DLTensor),
]


class TensorDesc(ctypes.Structure):
    """gpushm_tensor_desc_t (gpushm-dlpack.h), sized like CreateOpts."""
    _fields_ = [
        ("size", c_uint32),
        ("ndim", c_uint32),
        ("offset", c_uint64),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
    ]


class WeightTensor(ctypes.Structure):
    """gpushm_weight_tensor_t (gpushm 0.8, gpushm-weights.h): one tensor of a weight-set
    generation.  It has no size field and embeds a TensorDesc, which may grow at its end:
    gpushm_weights_tensor() writes the library's whole struct, so callers pass it scratch
    memory larger than this one and read this prefix of it.  ``name`` is not
    NUL-terminated for certain (``name_len`` bytes): a c_void_p, read with string_at."""
    _fields_ = [
        ("name", c_void_p),
        ("name_len", c_size_t),
        ("buffer", c_uint32),
        ("desc", TensorDesc),
    ]


class WeightsPublishOpts(ctypes.Structure):
    """gpushm_weights_publish_opts_t (gpushm 0.8), sized as CreateOpts is: never
    initialised with gpushm_weights_publish_opts_init()."""
    _fields_ = [
        ("size", c_uint32),
        ("mode", c_uint32),
        ("lifetime", c_uint32),
        ("after", c_uint64),
    ]


# Constants of the C headers this package uses (include/gpushm*.h).
OPEN_READONLY = 0x1
CREATE_OPEN_EXISTING = 0x1
CREATE_SYNC = 0x2
CREATE_STRICT_MODE = 0x4
CREATE_UNINITIALIZED = 0x8
MAP_DEVICE_SHIFT = 16
LIST_ALL = 0x1
LIST_METADATA = 0x2
FEATURE_METADATA = 0x10
METADATA_MAX = 4096
TENSOR_MAX_NDIM = 32
DLPACK_LEGACY = 0x1
DLPACK_READ_ONLY = 0x2
DLPACK_FLAG_READ_ONLY = 1
CAPSULE_DLTENSOR = 0
CAPSULE_DLTENSOR_VERSIONED = 1
CAPSULE_BUFFER = 2
CAPSULE_CONNECTION = 3
CAPSULE_RING = 4
RING_PRODUCER = 0x100
RING_OBSERVER = 0x200
RING_LATEST = 0x1
KIND_BUFFER = 1
KIND_EVENT = 2
KIND_WEIGHTS = 6
FEATURE_WEIGHTS = 0x1000
#: What gpushm_weights_newest() reads once a weight set's name is gone.
WEIGHTS_GONE = (1 << 64) - 1
DLPACK_FLAG_IS_COPIED = 2
DLPACK_MAJOR = 1
DLPACK_MINOR = 0


def map_device_flag(ordinal: int) -> int:
    """GPUSHM_MAP_DEVICE(ordinal)."""
    return (ordinal + 1) << MAP_DEVICE_SHIFT


_P = c_void_p
_U32P = POINTER(c_uint32)

# name: (restype, argtypes).  Handles and pointers are c_void_p; strings the library
# returns are c_char_p (bytes); streams are c_void_p (a CUstream, None for NULL).
PROTOTYPES: Dict[str, Tuple[Any, List[Any]]] = {
    # gpushm.h
    "gpushm_version": (c_uint, []),
    "gpushm_version_string": (c_char_p, []),
    "gpushm_strerror": (c_char_p, [c_int]),
    "gpushm_last_error_message": (c_char_p, []),
    "gpushm_connect": (c_int, [c_char_p, c_char_p, POINTER(c_void_p)]),
    "gpushm_daemon_has": (c_int, [_P, c_uint64]),
    "gpushm_daemon_backends": (c_uint32, [_P]),
    "gpushm_daemon_default_backend": (c_int, [_P]),
    "gpushm_protocol_version": (c_uint, [_P]),
    "gpushm_daemon_version": (c_char_p, [_P]),
    "gpushm_daemon_family_version": (c_uint, [_P, c_char_p]),
    "gpushm_set_timeout": (c_int, [_P, c_int]),
    "gpushm_disconnect": (None, [_P]),
    "gpushm_instance_id": (c_uint64, [_P]),
    "gpushm_ping": (c_int, [_P]),
    "gpushm_buffer_create": (c_int, [_P, c_char_p, c_uint64, POINTER(CreateOpts),
                                     POINTER(c_void_p)]),
    "gpushm_buffer_open": (c_int, [_P, c_char_p, c_uint, POINTER(c_void_p)]),
    "gpushm_buffer_open_id": (c_int, [_P, c_uint64, c_uint, POINTER(c_void_p)]),
    "gpushm_buffer_close": (c_int, [_P]),
    "gpushm_buffer_ref": (c_int, [_P]),
    "gpushm_unlink": (c_int, [_P, c_char_p]),
    "gpushm_buffer_close_unlink": (c_int, [_P]),
    "gpushm_buffer_ptr": (c_void_p, [_P]),
    "gpushm_buffer_size": (c_uint64, [_P]),
    "gpushm_buffer_id": (c_uint64, [_P]),
    "gpushm_buffer_name": (c_char_p, [_P]),
    "gpushm_buffer_device": (c_int, [_P]),
    "gpushm_buffer_map_device": (c_int, [_P]),
    "gpushm_buffer_backend": (c_int, [_P]),
    "gpushm_buffer_is_readonly": (c_int, [_P]),
    "gpushm_buffer_owner": (c_int, [_P, _U32P, _U32P]),
    "gpushm_buffer_metadata": (c_void_p, [_P, POINTER(c_size_t)]),
    "gpushm_event_create": (c_int, [_P, c_char_p, POINTER(CreateOpts), POINTER(c_void_p)]),
    "gpushm_event_open": (c_int, [_P, c_char_p, POINTER(c_void_p)]),
    "gpushm_event_close": (c_int, [_P]),
    "gpushm_event_record": (c_int, [_P, c_void_p]),
    "gpushm_event_wait": (c_int, [_P, c_void_p]),
    "gpushm_event_id": (c_uint64, [_P]),
    "gpushm_event_name": (c_char_p, [_P]),
    "gpushm_buffer_release": (c_int, [_P, c_void_p, POINTER(c_uint64)]),
    "gpushm_buffer_acquire": (c_int, [_P, c_void_p, c_uint64, c_int]),
    "gpushm_buffer_release_seq": (c_uint64, [_P]),
    "gpushm_buffer_sync_method": (c_int, [_P, POINTER(c_char_p)]),
    # gpushm-dlpack.h
    "gpushm_buffer_dlpack": (c_int, [_P, POINTER(TensorDesc), c_uint, POINTER(c_void_p)]),
    "gpushm_capsule_name": (c_void_p, [c_uint]),
    "gpushm_capsule_destructor": (None, [_P]),
    # gpushm-admin.h: buffers
    "gpushm_list": (c_int, [_P, c_uint, POINTER(c_void_p)]),
    "gpushm_buffer_list_count": (c_size_t, [_P]),
    "gpushm_buffer_list_get": (c_void_p, [_P, c_size_t]),
    "gpushm_buffer_list_free": (None, [_P]),
    "gpushm_buffer_info_id": (c_uint64, [_P]),
    "gpushm_buffer_info_name": (c_char_p, [_P]),
    "gpushm_buffer_info_size": (c_uint64, [_P]),
    "gpushm_buffer_info_allocated": (c_uint64, [_P]),
    "gpushm_buffer_info_kind": (c_int, [_P]),
    "gpushm_buffer_info_backend": (c_int, [_P]),
    "gpushm_buffer_info_device": (c_int32, [_P]),
    "gpushm_buffer_info_device_uuid": (c_int, [_P, POINTER(c_uint8 * 16)]),
    "gpushm_buffer_info_owner_uid": (c_uint32, [_P]),
    "gpushm_buffer_info_owner_gid": (c_uint32, [_P]),
    "gpushm_buffer_info_mode": (c_uint32, [_P]),
    "gpushm_buffer_info_lifetime": (c_int, [_P]),
    "gpushm_buffer_info_linked": (c_int, [_P]),
    "gpushm_buffer_info_sync": (c_int, [_P]),
    "gpushm_buffer_info_segment_id": (c_uint64, [_P]),
    "gpushm_buffer_info_metadata": (c_void_p, [_P, POINTER(c_size_t)]),
    "gpushm_buffer_info_refs": (c_uint32, [_P]),
    "gpushm_buffer_info_my_refs": (c_uint32, [_P]),
    "gpushm_buffer_info_creator_pid": (c_uint32, [_P]),
    "gpushm_buffer_info_created_unix_ms": (c_uint64, [_P]),
    "gpushm_buffer_info_holders_total": (c_uint32, [_P]),
    "gpushm_buffer_info_holder_count": (c_size_t, [_P]),
    "gpushm_buffer_info_holder": (c_void_p, [_P, c_size_t]),
    "gpushm_holder_client_id": (c_uint32, [_P]),
    "gpushm_holder_pid": (c_uint32, [_P]),
    "gpushm_holder_uid": (c_uint32, [_P]),
    "gpushm_holder_refs": (c_uint32, [_P]),
    # clients
    "gpushm_clients": (c_int, [_P, POINTER(c_void_p)]),
    "gpushm_client_list_count": (c_size_t, [_P]),
    "gpushm_client_list_get": (c_void_p, [_P, c_size_t]),
    "gpushm_client_list_free": (None, [_P]),
    "gpushm_client_info_client_id": (c_uint32, [_P]),
    "gpushm_client_info_pid": (c_uint32, [_P]),
    "gpushm_client_info_uid": (c_uint32, [_P]),
    "gpushm_client_info_gid": (c_uint32, [_P]),
    "gpushm_client_info_name": (c_char_p, [_P]),
    "gpushm_client_info_connected_unix_ms": (c_uint64, [_P]),
    "gpushm_client_info_buffers_held": (c_uint32, [_P]),
    "gpushm_client_info_bytes_held": (c_uint64, [_P]),
    "gpushm_client_info_admin": (c_int, [_P]),
    "gpushm_client_info_segments_mapped": (c_uint32, [_P]),
    "gpushm_client_info_segment_bytes_mapped": (c_uint64, [_P]),
    "gpushm_client_disconnect": (c_int, [_P, c_uint32]),
    # statistics
    "gpushm_stats": (c_int, [_P, POINTER(c_void_p)]),
    "gpushm_stats_free": (None, [_P]),
    "gpushm_stats_daemon_version": (c_char_p, [_P]),
    "gpushm_stats_instance_id": (c_uint64, [_P]),
    "gpushm_stats_uptime_ms": (c_uint64, [_P]),
    "gpushm_stats_clients": (c_uint32, [_P]),
    "gpushm_stats_buffers": (c_uint32, [_P]),
    "gpushm_stats_buffers_linked": (c_uint32, [_P]),
    "gpushm_stats_bytes_allocated": (c_uint64, [_P]),
    "gpushm_stats_requests": (c_uint64, [_P]),
    "gpushm_stats_request_errors": (c_uint64, [_P]),
    "gpushm_stats_protocol_errors": (c_uint64, [_P]),
    "gpushm_stats_clients_dropped": (c_uint64, [_P]),
    "gpushm_stats_open_fds": (c_uint32, [_P]),
    "gpushm_stats_device_count": (c_size_t, [_P]),
    "gpushm_stats_device": (c_void_p, [_P, c_size_t]),
    "gpushm_device_stats_ordinal": (c_int32, [_P]),
    "gpushm_device_stats_name": (c_char_p, [_P]),
    "gpushm_device_stats_uuid": (c_int, [_P, POINTER(c_uint8 * 16)]),
    "gpushm_device_stats_total_memory": (c_uint64, [_P]),
    "gpushm_device_stats_free_memory": (c_uint64, [_P]),
    "gpushm_stats_request_type_count": (c_size_t, [_P]),
    "gpushm_stats_request_type": (c_void_p, [_P, c_size_t]),
    "gpushm_request_stats_type": (c_char_p, [_P]),
    "gpushm_request_stats_count": (c_uint64, [_P]),
    "gpushm_request_stats_errors": (c_uint64, [_P]),
    "gpushm_stats_usage_count": (c_size_t, [_P]),
    "gpushm_stats_usage": (c_void_p, [_P, c_size_t]),
    "gpushm_usage_kind": (c_int, [_P]),
    "gpushm_usage_backend": (c_int, [_P]),
    "gpushm_usage_device": (c_int32, [_P]),
    "gpushm_usage_buffers": (c_uint32, [_P]),
    "gpushm_usage_bytes": (c_uint64, [_P]),
    "gpushm_stats_detached_total": (c_uint32, [_P]),
    "gpushm_stats_bytes_pinned_after_release": (c_uint64, [_P]),
    "gpushm_stats_fences_raised": (c_uint64, [_P]),
    "gpushm_stats_oneway_errors": (c_uint64, [_P]),
}

#: Declared where the library has them (newer than the package's minimum); callers
#: check with hasattr(lib, name).
OPTIONAL_PROTOTYPES = {
    # 0.8: pipelined opens and creates (Connection.open_start, create_start)
    "gpushm_buffer_open_start": (c_int, [_P, c_char_p, c_uint, POINTER(c_void_p)]),
    "gpushm_buffer_create_start": (c_int, [_P, c_char_p, c_uint64, POINTER(CreateOpts),
                                           POINTER(c_void_p)]),
    "gpushm_pending_finish": (c_int, [_P, POINTER(c_void_p)]),
    # 0.8: opens that wait for their name (Connection.open(wait=))
    "gpushm_buffer_open_ex": (c_int, [_P, c_char_p, c_uint64, POINTER(OpenOpts),
                                      POINTER(c_void_p)]),
    # 0.8: the one export descriptor (Buffer.export)
    "gpushm_buffer_export": (c_int, [_P, c_uint32, c_uint64, c_uint64, POINTER(ExportDesc)]),
    # 0.7: the system error behind a failure (a connect's ENOENT, ECONNREFUSED, EACCES)
    "gpushm_last_error_errno": (c_int, []),
    # 0.7: images (gpushm-graphics.h)
    "gpushm_buffer_kind": (c_int, [_P]),
    "gpushm_buffer_image_desc": (c_int, [_P, ctypes.POINTER(ImageDesc)]),
    "gpushm_image_create": (c_int, [_P, c_char_p, ctypes.POINTER(ImageDesc),
                                    ctypes.POINTER(CreateOpts), ctypes.POINTER(c_void_p)]),
    "gpushm_format_name": (c_char_p, [c_int]),
    "gpushm_format_from_name": (c_int, [c_char_p]),
    # 0.7: one table of backend names, the library's
    "gpushm_backend_name": (c_char_p, [c_int]),
    "gpushm_backend_from_name": (c_int, [c_char_p]),
    # 0.7: metric rows that describe themselves
    "gpushm_stats_metric_count": (c_size_t, [_P]),
    "gpushm_stats_metric": (c_void_p, [_P, c_size_t]),
    "gpushm_metric_name": (c_char_p, [_P]),
    "gpushm_metric_help": (c_char_p, [_P]),
    "gpushm_metric_type": (c_int, [_P]),
    "gpushm_metric_unit": (c_char_p, [_P]),
    "gpushm_metric_value": (c_uint64, [_P]),
    "gpushm_metric_exponent": (c_int32, [_P]),
    "gpushm_metric_label_count": (c_size_t, [_P]),
    "gpushm_metric_label": (c_void_p, [_P, c_size_t]),
    "gpushm_metric_label_name": (c_char_p, [_P]),
    "gpushm_metric_label_value": (c_char_p, [_P]),
    "gpushm_metric_observations": (c_uint64, [_P]),
    "gpushm_metric_bucket_count": (c_size_t, [_P]),
    "gpushm_metric_bucket_le_text": (c_char_p, [_P, c_size_t, c_char_p, c_size_t]),
    "gpushm_metric_bucket_observations": (c_uint64, [_P, c_size_t]),
    # 0.8: caller-numbered releases and promises
    "gpushm_buffer_release_value": (c_int, [_P, c_void_p, c_uint64]),
    "gpushm_buffer_acquire_value": (c_int, [_P, c_void_p, c_uint64, c_int]),
    "gpushm_buffer_promise": (c_int, [_P, c_uint64]),
    "gpushm_buffer_value_lost": (c_int, [_P, c_uint64]),
    "gpushm_buffer_sync_state": (c_int, [_P, ctypes.POINTER(SyncState)]),
    # 0.8: timelines
    "gpushm_timeline_create": (c_int, [_P, c_char_p, POINTER(CreateOpts), POINTER(c_void_p)]),
    "gpushm_timeline_open": (c_int, [_P, c_char_p, ctypes.c_uint, POINTER(c_void_p)]),
    "gpushm_timeline_close": (c_int, [_P]),
    "gpushm_timeline_close_unlink": (c_int, [_P]),
    "gpushm_timeline_signal": (c_int, [_P, c_uint64]),
    "gpushm_timeline_signal_stream": (c_int, [_P, c_void_p, c_uint64]),
    "gpushm_timeline_wait": (c_int, [_P, c_uint64, c_int]),
    "gpushm_timeline_wait_stream": (c_int, [_P, c_void_p, c_uint64, c_int]),
    "gpushm_timeline_promise": (c_int, [_P, c_uint64]),
    "gpushm_timeline_value": (c_uint64, [_P]),
    "gpushm_timeline_value_lost": (c_int, [_P, c_uint64]),
    "gpushm_timeline_state": (c_int, [_P, ctypes.POINTER(SyncState)]),
    "gpushm_timeline_sync_method": (c_int, [_P, c_void_p]),
    "gpushm_timeline_id": (c_uint64, [_P]),
    "gpushm_timeline_name": (c_char_p, [_P]),
    "gpushm_holder_read_write": (c_int, [_P]),
    "gpushm_holder_ring_consumer": (c_int, [_P]),
    # 0.8: frame rings
    "gpushm_ring_create": (c_int, [_P, c_char_p, c_uint32, c_uint64, POINTER(CreateOpts),
                                   POINTER(c_void_p)]),
    "gpushm_ring_open": (c_int, [_P, c_char_p, ctypes.c_uint, POINTER(c_void_p)]),
    "gpushm_ring_close": (c_int, [_P]),
    "gpushm_ring_close_unlink": (c_int, [_P]),
    "gpushm_ring_evict": (c_int, [_P, c_uint64]),
    "gpushm_ring_acquire_slot": (c_int, [_P, c_int, POINTER(RingFrame)]),
    "gpushm_ring_acquire_slot_stream": (c_int, [_P, c_void_p, c_int, POINTER(RingFrame)]),
    "gpushm_ring_present": (c_int, [_P, POINTER(RingFrame)]),
    "gpushm_ring_present_stream": (c_int, [_P, c_void_p, POINTER(RingFrame)]),
    "gpushm_ring_acquire_frame": (c_int, [_P, ctypes.c_uint, c_int, POINTER(RingFrame)]),
    "gpushm_ring_acquire_frame_stream": (c_int, [_P, c_void_p, ctypes.c_uint, c_int,
                                                 POINTER(RingFrame)]),
    "gpushm_ring_release": (c_int, [_P, POINTER(RingFrame)]),
    "gpushm_ring_release_stream": (c_int, [_P, c_void_p, POINTER(RingFrame)]),
    "gpushm_ring_slots": (c_uint32, [_P]),
    "gpushm_ring_slot_size": (c_uint64, [_P]),
    "gpushm_ring_slot_stride": (c_uint64, [_P]),
    "gpushm_ring_slot_ptr": (c_void_p, [_P, c_uint32]),
    "gpushm_ring_buffer": (c_void_p, [_P]),
    "gpushm_ring_presented": (c_uint64, [_P]),
    "gpushm_ring_consumers": (c_uint32, [_P]),
    "gpushm_ring_consumer_planes": (c_uint32, [_P]),
    "gpushm_ring_is_producer": (c_int, [_P]),
    "gpushm_ring_state": (c_int, [_P, POINTER(SyncState)]),
    "gpushm_ring_id": (c_uint64, [_P]),
    "gpushm_ring_name": (c_char_p, [_P]),
    # 0.8: weight sets (gpushm-weights.h)
    "gpushm_weights_builder_new": (c_int, [POINTER(c_void_p)]),
    "gpushm_weights_builder_free": (None, [_P]),
    "gpushm_weights_builder_add_buffer": (c_int, [_P, _P, _U32P]),
    "gpushm_weights_builder_add_tensor": (c_int, [_P, c_char_p, c_uint32, POINTER(TensorDesc)]),
    # declared for completeness, never called: it would write the library's struct,
    # perhaps larger than WeightsPublishOpts, into ours
    "gpushm_weights_publish_opts_init": (None, [POINTER(WeightsPublishOpts)]),
    "gpushm_weights_publish": (c_int, [_P, c_char_p, _P, POINTER(WeightsPublishOpts),
                                       POINTER(c_void_p)]),
    "gpushm_weights_open": (c_int, [_P, c_char_p, POINTER(c_void_p)]),
    "gpushm_weights_close": (c_int, [_P]),
    "gpushm_weights_name": (c_char_p, [_P]),
    "gpushm_weights_id": (c_uint64, [_P]),
    "gpushm_weights_generation": (c_uint64, [_P]),
    "gpushm_weights_newest": (c_uint64, [_P]),
    "gpushm_weights_wait_newer": (c_int, [_P, c_int]),
    "gpushm_weights_oldest": (c_uint64, [_P]),
    # 0.8: a handle described in one call (Buffer.__init__)
    "gpushm_buffer_describe": (c_int, [_P, ctypes.POINTER(BufferDesc)]),
    "gpushm_weights_wait_released": (c_int, [_P, c_uint64, c_int]),
    "gpushm_weights_tensor_count": (c_size_t, [_P]),
    # (scratch memory larger than WeightTensor: see its documentation)
    "gpushm_weights_tensor": (c_int, [_P, c_size_t, _P]),
    "gpushm_weights_find": (ctypes.c_long, [_P, c_char_p]),
    "gpushm_weights_buffer_count": (c_uint32, [_P]),
    "gpushm_weights_buffer": (c_int, [_P, c_uint32, POINTER(c_void_p)]),
    "gpushm_weights_tensor_ptr": (c_int, [_P, c_size_t, POINTER(c_void_p)]),
    "gpushm_weights_copy": (c_int, [_P, POINTER(c_void_p), c_size_t, c_void_p]),
    "gpushm_buffer_info_weights": (c_int, [_P, POINTER(c_uint64), POINTER(c_uint64), _U32P,
                                           POINTER(c_uint64)]),
}


class LibraryError(ImportError):
    """libgpushm could not be loaded, or is too old for this package."""


def _describe(lib: ctypes.CDLL) -> str:
    """Where the loaded library lies (dladdr through a known symbol), for messages."""
    class _DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", c_char_p), ("dli_fbase", c_void_p),
                    ("dli_sname", c_char_p), ("dli_saddr", c_void_p)]
    try:
        libc = ctypes.CDLL(None)
        dladdr = libc.dladdr
        dladdr.restype = c_int
        dladdr.argtypes = [c_void_p, POINTER(_DlInfo)]
        info = _DlInfo()
        if dladdr(ctypes.cast(lib.gpushm_version, c_void_p), ctypes.byref(info)) and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    except (OSError, AttributeError):
        pass
    return str(lib._name)


def parse_version(version: str) -> Tuple[int, int, int]:
    """(major, minor, patch) of a version string; what follows the three numbers (a
    distribution's "+dfsg", "~rc1") is ignored."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if not m:
        raise LibraryError(f"gpushm: libgpushm's version {version!r} is not major.minor.patch")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def check_version(have: Tuple[int, int, int], where: str) -> None:
    """LibraryError unless have is a version this package can use: MIN_VERSION or later,
    of its major."""
    shown = ".".join(map(str, have))
    if have[0] != MIN_VERSION[0]:
        raise LibraryError(
            f"gpushm: {where} is libgpushm {shown}, of another major version than the "
            f"{MIN_VERSION[0]}.x this package is written for (another ABI). Install the "
            f"gpushm Python package of that release, or set GPUSHM_LIBRARY.")
    if have[:2] < MIN_VERSION:
        raise LibraryError(
            f"gpushm: {where} is libgpushm {shown}; this package needs "
            f"{MIN_VERSION[0]}.{MIN_VERSION[1]} or later (buffer metadata, DLPack tensors). "
            f"Install a newer gpushm or set GPUSHM_LIBRARY.")


def load(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads libgpushm from path, $GPUSHM_LIBRARY or the linker's search path, checks its
    version and declares every prototype."""
    where = path or os.environ.get("GPUSHM_LIBRARY") or SONAME
    try:
        lib = ctypes.CDLL(where)
    except OSError as e:
        raise LibraryError(
            f"gpushm: cannot load {where} ({e}). Install gpushm (libgpushm.so.1 on the "
            f"dynamic linker's path: make install, then ldconfig) or point GPUSHM_LIBRARY "
            f"at the library file.") from e
    try:
        version_fn = lib.gpushm_version
    except AttributeError as e:
        raise LibraryError(f"gpushm: {where} is not libgpushm (no gpushm_version)") from e
    version_fn.restype = c_uint
    version_fn.argtypes = []
    v = version_fn()
    have = (v >> 16, (v >> 8) & 0xFF, v & 0xFF)
    check_version(have, _describe(lib))
    missing = [name for name in PROTOTYPES if not hasattr(lib, name)]
    if missing:
        raise LibraryError(f"gpushm: {_describe(lib)} (version {have[0]}.{have[1]}) lacks "
                           f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    for name, (restype, argtypes) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, argtypes) in OPTIONAL_PROTOTYPES.items():
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
    return lib


lib = load()

#: The library's own version, as (major, minor, patch).
LIBRARY_VERSION = parse_version(lib.gpushm_version_string().decode("utf-8", "replace"))
#: Where the library was loaded from.
LIBRARY_PATH = _describe(lib)


def last_error_message() -> str:
    msg = lib.gpushm_last_error_message()
    return msg.decode("utf-8", "replace") if msg else ""


def last_error_errno() -> int:
    """The errno behind the last failure, where the library knows one (else 0)."""
    return lib.gpushm_last_error_errno() if hasattr(lib, "gpushm_last_error_errno") else 0


def strerror(code: int) -> str:
    return lib.gpushm_strerror(code).decode()


def text(value: Optional[bytes]) -> str:
    """A string the library returned (NULL: "")."""
    return value.decode("utf-8", "replace") if value else ""
