/* SPDX-License-Identifier: MIT */
/*
 * gpushm-admin.h — what admin tools (gpushmctl, monitoring, bindings) ask gpushmd:
 * the buffer list, the connected clients, the daemon's statistics, and ending another
 * client's connection.
 *
 * Stability: the same promise as gpushm.h.  Within a soname, functions here are only
 * ever added, never changed or removed; accessors for new fields are appended.
 *
 * Why accessors, not structs: everything here is an object the library owns, read
 * through one function per field.  When the daemon reports something new, the library
 * gains an accessor, and no struct that programs compiled earlier have baked in
 * changes size or layout, so those binaries keep working.  Bindings that load the
 * library at run time (ctypes, cffi: a Python package is coming) call functions
 * instead of mirroring struct layouts by hand, which would go stale silently.
 *
 * Conventions:
 *  - gpushm_list(), gpushm_clients() and gpushm_stats() return a new object in *out,
 *    which the caller frees with the matching *_free() (NULL is a no-op);
 *  - every object and string reached from it (an entry, a holder, a name) belongs to
 *    it and lives until it is freed; none needs freeing on its own;
 *  - an accessor given NULL returns 0 (strings: ""); an index past the count returns
 *    NULL; the two that copy a UUID out return GPUSHM_E_INVAL for NULL;
 *  - functions returning int return 0 or a negative GPUSHM_E_* code, with the detail in
 *    gpushm_last_error_message(), as in gpushm.h.
 */
#ifndef GPUSHM_ADMIN_H
#define GPUSHM_ADMIN_H

#include "gpushm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpushm_buffer_list gpushm_buffer_list_t;
typedef struct gpushm_buffer_info gpushm_buffer_info_t;     /* a buffer or an event */
typedef struct gpushm_holder gpushm_holder_t;               /* a connection holding one */
typedef struct gpushm_client_list gpushm_client_list_t;
typedef struct gpushm_client_info gpushm_client_info_t;
typedef struct gpushm_stats gpushm_stats_t;
typedef struct gpushm_device_stats gpushm_device_stats_t;   /* a GPU the daemon sees */
typedef struct gpushm_request_stats gpushm_request_stats_t; /* requests of one type */
typedef struct gpushm_usage gpushm_usage_t;                 /* memory by backend, device */
typedef struct gpushm_detached gpushm_detached_t;           /* a process that may still map */
typedef struct gpushm_detached_buffer gpushm_detached_buffer_t;
typedef struct gpushm_segment_usage gpushm_segment_usage_t; /* segments by backend, device */
typedef struct gpushm_open_stats gpushm_open_stats_t;       /* opens by backend, device */
typedef struct gpushm_metric gpushm_metric_t;               /* one sample of a counter or gauge */
typedef struct gpushm_metric_label gpushm_metric_label_t;
typedef struct gpushm_local_device_list gpushm_local_device_list_t;
typedef struct gpushm_local_device gpushm_local_device_t;   /* a GPU this process sees */

/* ---- buffers and events -------------------------------------------------------- */

/* gpushm_list() flags: every user's buffers (root or the daemon's admin group only;
 * GPUSHM_E_PERM otherwise). */
#define GPUSHM_LIST_ALL 0x1u
/* Entries carry their metadata (gpushm_buffer_info_metadata()); without it they carry
 * none, so that a long list stays cheap. */
#define GPUSHM_LIST_METADATA 0x2u

/* All buffers and events the daemon shows this connection, in id order. */
GPUSHM_API int gpushm_list(gpushm_t *conn, unsigned flags, gpushm_buffer_list_t **out);
GPUSHM_API size_t gpushm_buffer_list_count(const gpushm_buffer_list_t *list);
GPUSHM_API const gpushm_buffer_info_t *gpushm_buffer_list_get(const gpushm_buffer_list_t *list,
                                                              size_t i);
GPUSHM_API void gpushm_buffer_list_free(gpushm_buffer_list_t *list);

GPUSHM_API uint64_t gpushm_buffer_info_id(const gpushm_buffer_info_t *info);
GPUSHM_API const char *gpushm_buffer_info_name(const gpushm_buffer_info_t *info);
GPUSHM_API uint64_t gpushm_buffer_info_size(const gpushm_buffer_info_t *info);
/* Bytes reserved: size rounded up to the backend's granule. */
GPUSHM_API uint64_t gpushm_buffer_info_allocated(const gpushm_buffer_info_t *info);
GPUSHM_API gpushm_kind_t gpushm_buffer_info_kind(const gpushm_buffer_info_t *info);
/* 0 for an event: events have no memory backend. */
GPUSHM_API gpushm_backend_t gpushm_buffer_info_backend(const gpushm_buffer_info_t *info);
/* The daemon's device ordinal; -1 for host memory. */
GPUSHM_API int32_t gpushm_buffer_info_device(const gpushm_buffer_info_t *info);
/* Copies the device's 16-byte UUID (ordinals differ between processes under
 * CUDA_VISIBLE_DEVICES); GPUSHM_E_NOENT where there is none (host memory),
 * GPUSHM_E_INVAL for a NULL info or uuid. */
GPUSHM_API int gpushm_buffer_info_device_uuid(const gpushm_buffer_info_t *info,
                                              uint8_t uuid[16]);
GPUSHM_API uint32_t gpushm_buffer_info_owner_uid(const gpushm_buffer_info_t *info);
GPUSHM_API uint32_t gpushm_buffer_info_owner_gid(const gpushm_buffer_info_t *info);
GPUSHM_API uint32_t gpushm_buffer_info_mode(const gpushm_buffer_info_t *info);
GPUSHM_API gpushm_lifetime_t gpushm_buffer_info_lifetime(const gpushm_buffer_info_t *info);
/* 0: unlinked but still held. */
GPUSHM_API int gpushm_buffer_info_linked(const gpushm_buffer_info_t *info);
/* Created with GPUSHM_CREATE_SYNC. */
GPUSHM_API int gpushm_buffer_info_sync(const gpushm_buffer_info_t *info);
/* The segment it was carved out of (docs/segments.md); 0: an allocation of its own. */
GPUSHM_API uint64_t gpushm_buffer_info_segment_id(const gpushm_buffer_info_t *info);
/* The buffer's metadata (*size bytes; NULL and 0 if none, or if the list was made
 * without GPUSHM_LIST_METADATA); lives as long as the list. */
GPUSHM_API const void *gpushm_buffer_info_metadata(const gpushm_buffer_info_t *info,
                                                   size_t *size);
/* An image's description (gpushm-graphics.h); GPUSHM_E_INVAL for what is not one. */
struct gpushm_image_desc;
GPUSHM_API int gpushm_buffer_info_image(const gpushm_buffer_info_t *info,
                                        struct gpushm_image_desc *out);
/* A ring's geometry and the consumers attached to it when listed (each out may be
 * NULL); GPUSHM_E_INVAL for what is not a ring. */
GPUSHM_API int gpushm_buffer_info_ring(const gpushm_buffer_info_t *info, uint32_t *slots,
                                       uint64_t *slot_size, uint64_t *slot_stride,
                                       uint32_t *consumers);
/* References held by all connections, and by the asking one. */
/* A weight-set generation (gpushm-weights.h): its number, the set's newest when listed,
 * its tensors and its manifest's bytes (each out may be NULL); GPUSHM_E_INVAL for what
 * is not one. */
GPUSHM_API int gpushm_buffer_info_weights(const gpushm_buffer_info_t *info, uint64_t *generation,
                                          uint64_t *newest, uint32_t *tensors,
                                          uint64_t *manifest_size);
GPUSHM_API uint32_t gpushm_buffer_info_refs(const gpushm_buffer_info_t *info);
GPUSHM_API uint32_t gpushm_buffer_info_my_refs(const gpushm_buffer_info_t *info);
GPUSHM_API uint32_t gpushm_buffer_info_creator_pid(const gpushm_buffer_info_t *info);
GPUSHM_API uint64_t gpushm_buffer_info_created_unix_ms(const gpushm_buffer_info_t *info);
/* Connections holding it; the holders listed may be fewer (the daemon caps them). */
GPUSHM_API uint32_t gpushm_buffer_info_holders_total(const gpushm_buffer_info_t *info);
GPUSHM_API size_t gpushm_buffer_info_holder_count(const gpushm_buffer_info_t *info);
GPUSHM_API const gpushm_holder_t *gpushm_buffer_info_holder(const gpushm_buffer_info_t *info,
                                                            size_t i);

GPUSHM_API uint32_t gpushm_holder_client_id(const gpushm_holder_t *holder);
GPUSHM_API uint32_t gpushm_holder_pid(const gpushm_holder_t *holder);
GPUSHM_API uint32_t gpushm_holder_uid(const gpushm_holder_t *holder);
GPUSHM_API uint32_t gpushm_holder_refs(const gpushm_holder_t *holder);
/* 0.8: 1 if it opened the object read-write at least once (it may signal, release or
 * produce: read-only holders of a timeline or ring only wait), else 0; 1 if it is one of
 * a ring's attached consumers.  0 from daemons before 0.8. */
GPUSHM_API int gpushm_holder_read_write(const gpushm_holder_t *holder);
GPUSHM_API int gpushm_holder_ring_consumer(const gpushm_holder_t *holder);

/* ---- clients ------------------------------------------------------------------- */

/* Connected clients (admins see all, others those of their own uid), in id order. */
GPUSHM_API int gpushm_clients(gpushm_t *conn, gpushm_client_list_t **out);
GPUSHM_API size_t gpushm_client_list_count(const gpushm_client_list_t *list);
GPUSHM_API const gpushm_client_info_t *gpushm_client_list_get(const gpushm_client_list_t *list,
                                                              size_t i);
GPUSHM_API void gpushm_client_list_free(gpushm_client_list_t *list);

GPUSHM_API uint32_t gpushm_client_info_client_id(const gpushm_client_info_t *info);
GPUSHM_API uint32_t gpushm_client_info_pid(const gpushm_client_info_t *info);
GPUSHM_API uint32_t gpushm_client_info_uid(const gpushm_client_info_t *info);
GPUSHM_API uint32_t gpushm_client_info_gid(const gpushm_client_info_t *info);
/* What the client gave gpushm_connect(). */
GPUSHM_API const char *gpushm_client_info_name(const gpushm_client_info_t *info);
GPUSHM_API uint64_t gpushm_client_info_connected_unix_ms(const gpushm_client_info_t *info);
GPUSHM_API uint32_t gpushm_client_info_buffers_held(const gpushm_client_info_t *info);
GPUSHM_API uint64_t gpushm_client_info_bytes_held(const gpushm_client_info_t *info);
GPUSHM_API int gpushm_client_info_admin(const gpushm_client_info_t *info);
/* Segments the client maps, and their memory: a process keeps up to
 * GPUSHM_LIMIT_IDLE_SEGMENTS of them mapped with none of its buffers open in them. */
GPUSHM_API uint32_t gpushm_client_info_segments_mapped(const gpushm_client_info_t *info);
GPUSHM_API uint64_t gpushm_client_info_segment_bytes_mapped(const gpushm_client_info_t *info);

/* Ends another connection (root and the admin group: any; others: their own uid's),
 * releasing every reference it holds.  What that process has mapped stays mapped:
 * host memory stays valid for it but is no longer counted by the daemon; device memory
 * shared over legacy CUDA IPC may be freed under it.  Meant for holders that are stuck
 * or gone rogue. */
GPUSHM_API int gpushm_client_disconnect(gpushm_t *conn, uint32_t client_id);

/* ---- daemon statistics --------------------------------------------------------- */

/* The typed accessors of this section are frozen since 0.8 (the figures are all in the
 * metric rows below, gpushm_stats_metric()): they stay, and keep answering, but new
 * figures come as rows only. */

GPUSHM_API int gpushm_stats(gpushm_t *conn, gpushm_stats_t **out);
GPUSHM_API void gpushm_stats_free(gpushm_stats_t *stats);

GPUSHM_API const char *gpushm_stats_daemon_version(const gpushm_stats_t *stats);
GPUSHM_API uint64_t gpushm_stats_instance_id(const gpushm_stats_t *stats);
GPUSHM_API uint64_t gpushm_stats_uptime_ms(const gpushm_stats_t *stats);
GPUSHM_API uint32_t gpushm_stats_clients(const gpushm_stats_t *stats);
/* Buffers and events, and how many of them still have their name. */
GPUSHM_API uint32_t gpushm_stats_buffers(const gpushm_stats_t *stats);
GPUSHM_API uint32_t gpushm_stats_buffers_linked(const gpushm_stats_t *stats);
GPUSHM_API uint64_t gpushm_stats_bytes_allocated(const gpushm_stats_t *stats);
GPUSHM_API uint64_t gpushm_stats_requests(const gpushm_stats_t *stats);
GPUSHM_API uint64_t gpushm_stats_request_errors(const gpushm_stats_t *stats);
/* Clients ended for protocol errors. */
GPUSHM_API uint64_t gpushm_stats_protocol_errors(const gpushm_stats_t *stats);
/* Clients refused or dropped (limits, not reading). */
GPUSHM_API uint64_t gpushm_stats_clients_dropped(const gpushm_stats_t *stats);
GPUSHM_API uint32_t gpushm_stats_open_fds(const gpushm_stats_t *stats);

GPUSHM_API size_t gpushm_stats_device_count(const gpushm_stats_t *stats);
GPUSHM_API const gpushm_device_stats_t *gpushm_stats_device(const gpushm_stats_t *stats, size_t i);
GPUSHM_API int32_t gpushm_device_stats_ordinal(const gpushm_device_stats_t *dev);
GPUSHM_API const char *gpushm_device_stats_name(const gpushm_device_stats_t *dev);
/* Copies the device's 16-byte UUID; GPUSHM_E_NOENT if the daemon gave none,
 * GPUSHM_E_INVAL for a NULL dev or uuid. */
GPUSHM_API int gpushm_device_stats_uuid(const gpushm_device_stats_t *dev, uint8_t uuid[16]);
GPUSHM_API uint64_t gpushm_device_stats_total_memory(const gpushm_device_stats_t *dev);
/* 0 unless the daemon has a context on the device. */
GPUSHM_API uint64_t gpushm_device_stats_free_memory(const gpushm_device_stats_t *dev);

/* Requests handled, by type ("create", "open", ...). */
GPUSHM_API size_t gpushm_stats_request_type_count(const gpushm_stats_t *stats);
GPUSHM_API const gpushm_request_stats_t *gpushm_stats_request_type(const gpushm_stats_t *stats,
                                                                   size_t i);
GPUSHM_API const char *gpushm_request_stats_type(const gpushm_request_stats_t *req);
GPUSHM_API uint64_t gpushm_request_stats_count(const gpushm_request_stats_t *req);
GPUSHM_API uint64_t gpushm_request_stats_errors(const gpushm_request_stats_t *req);

/* Buffers and bytes by kind, backend and device. */
GPUSHM_API size_t gpushm_stats_usage_count(const gpushm_stats_t *stats);
GPUSHM_API const gpushm_usage_t *gpushm_stats_usage(const gpushm_stats_t *stats, size_t i);
GPUSHM_API gpushm_kind_t gpushm_usage_kind(const gpushm_usage_t *usage);
/* 0 for events: they have no memory backend. */
GPUSHM_API gpushm_backend_t gpushm_usage_backend(const gpushm_usage_t *usage);
/* -1 for host memory. */
GPUSHM_API int32_t gpushm_usage_device(const gpushm_usage_t *usage);
GPUSHM_API uint32_t gpushm_usage_buffers(const gpushm_usage_t *usage);
GPUSHM_API uint64_t gpushm_usage_bytes(const gpushm_usage_t *usage);

/* Live processes whose connection ended (gpushm_client_disconnect, a protocol error, a
 * closed socket) while they held buffers.  Their mappings keep the memory allocated
 * whatever the counts above say, until they unmap it or exit; the daemon cannot see
 * unmaps, so it lists a process until it exits.  Listed: the first
 * GPUSHM_LIMIT_DETACHED_LISTED, each with its first GPUSHM_LIMIT_DETACHED_BUFFERS_LISTED
 * buffers; the totals count them all. */
GPUSHM_API size_t gpushm_stats_detached_count(const gpushm_stats_t *stats);
GPUSHM_API const gpushm_detached_t *gpushm_stats_detached(const gpushm_stats_t *stats, size_t i);
GPUSHM_API uint32_t gpushm_stats_detached_total(const gpushm_stats_t *stats);
/* Memory the daemon has freed that such processes still map (each allocation once). */
GPUSHM_API uint64_t gpushm_stats_bytes_pinned_after_release(const gpushm_stats_t *stats);
/* cuda-fd sync buffers' fences the daemon raised since it started, each for a release
 * whose process exited before its GPU wrote the fence (docs/sync.md); 0 from a daemon
 * that does not report it. */
GPUSHM_API uint64_t gpushm_stats_fences_raised(const gpushm_stats_t *stats);
/* One-way requests (last closes, gpushm_buffer_close_unlink) the daemon refused: nobody
 * waited for the answer, so they are logged and counted here. */
GPUSHM_API uint64_t gpushm_stats_oneway_errors(const gpushm_stats_t *stats);
/* Segments (docs/segments.md) by backend and device: those holding buffers or mapped by
 * a client, their bytes and how many of them hold buffers, the (connection, segment,
 * access) mappings clients hold; the warm pools (empty segments kept for their class);
 * buffers carved and segment allocations (driver calls) since the daemon started. */
GPUSHM_API size_t gpushm_stats_segment_usage_count(const gpushm_stats_t *stats);
GPUSHM_API const gpushm_segment_usage_t *gpushm_stats_segment_usage(const gpushm_stats_t *stats,
                                                                    size_t i);
GPUSHM_API gpushm_backend_t gpushm_segment_usage_backend(const gpushm_segment_usage_t *u);
GPUSHM_API int32_t gpushm_segment_usage_device(const gpushm_segment_usage_t *u);
GPUSHM_API uint32_t gpushm_segment_usage_segments(const gpushm_segment_usage_t *u);
GPUSHM_API uint64_t gpushm_segment_usage_bytes(const gpushm_segment_usage_t *u);
GPUSHM_API uint64_t gpushm_segment_usage_bytes_used(const gpushm_segment_usage_t *u);
GPUSHM_API uint32_t gpushm_segment_usage_mappings(const gpushm_segment_usage_t *u);
GPUSHM_API uint32_t gpushm_segment_usage_pooled(const gpushm_segment_usage_t *u);
GPUSHM_API uint64_t gpushm_segment_usage_pooled_bytes(const gpushm_segment_usage_t *u);
GPUSHM_API uint64_t gpushm_segment_usage_carved(const gpushm_segment_usage_t *u);
GPUSHM_API uint64_t gpushm_segment_usage_driver_allocs(const gpushm_segment_usage_t *u);
GPUSHM_API uint32_t gpushm_detached_pid(const gpushm_detached_t *d);
GPUSHM_API uint32_t gpushm_detached_uid(const gpushm_detached_t *d);
GPUSHM_API uint32_t gpushm_detached_client_id(const gpushm_detached_t *d);
GPUSHM_API uint64_t gpushm_detached_since_unix_ms(const gpushm_detached_t *d);
GPUSHM_API uint32_t gpushm_detached_buffers_total(const gpushm_detached_t *d);
GPUSHM_API uint64_t gpushm_detached_bytes_total(const gpushm_detached_t *d);
/* Of bytes_total, what the daemon has freed since: only such processes keep it. */
GPUSHM_API uint64_t gpushm_detached_bytes_released(const gpushm_detached_t *d);
GPUSHM_API size_t gpushm_detached_buffer_count(const gpushm_detached_t *d);
GPUSHM_API const gpushm_detached_buffer_t *gpushm_detached_buffer(const gpushm_detached_t *d,
                                                                  size_t i);
GPUSHM_API uint64_t gpushm_detached_buffer_id(const gpushm_detached_buffer_t *b);
GPUSHM_API const char *gpushm_detached_buffer_name(const gpushm_detached_buffer_t *b);
GPUSHM_API gpushm_backend_t gpushm_detached_buffer_backend(const gpushm_detached_buffer_t *b);
GPUSHM_API int32_t gpushm_detached_buffer_device(const gpushm_detached_buffer_t *b);
GPUSHM_API uint64_t gpushm_detached_buffer_allocated(const gpushm_detached_buffer_t *b);
/* Whether the daemon has freed it (only holders like this one keep it). */
GPUSHM_API int gpushm_detached_buffer_released(const gpushm_detached_buffer_t *b);

/* Since 0.5 (0 and empty from older daemons).  Request latency, per request type, as a
 * histogram: the time gpushmd spent on each request, from its arrival to its reply's
 * hand-off to the socket (a create that waited for a device's first context counts the
 * wait).  The buckets' upper bounds, ascending, in nanoseconds, are the daemon's (the
 * same for every type): */
GPUSHM_API size_t gpushm_stats_latency_bound_count(const gpushm_stats_t *stats);
GPUSHM_API uint64_t gpushm_stats_latency_bound_ns(const gpushm_stats_t *stats, size_t i);
/* Buckets of one type: bound count + 1 (the last is +Inf), or 0 from an older daemon. */
GPUSHM_API size_t gpushm_request_stats_latency_bucket_count(const gpushm_request_stats_t *req);
/* Cumulative: requests that took at most bound i; for the last bucket, all of them. */
GPUSHM_API uint64_t gpushm_request_stats_latency_le(const gpushm_request_stats_t *req, size_t i);
GPUSHM_API uint64_t gpushm_request_stats_latency_sum_ns(const gpushm_request_stats_t *req);
/* Buffers and events opened (opens, and creates that found an existing one) and created,
 * since the daemon started, by kind, backend and device (rows where either happened). */
GPUSHM_API size_t gpushm_stats_opens_count(const gpushm_stats_t *stats);
GPUSHM_API const gpushm_open_stats_t *gpushm_stats_opens(const gpushm_stats_t *stats, size_t i);
GPUSHM_API gpushm_kind_t gpushm_open_stats_kind(const gpushm_open_stats_t *o);
/* 0 for events; the device -1 for host memory. */
GPUSHM_API gpushm_backend_t gpushm_open_stats_backend(const gpushm_open_stats_t *o);
GPUSHM_API int32_t gpushm_open_stats_device(const gpushm_open_stats_t *o);
GPUSHM_API uint64_t gpushm_open_stats_opens(const gpushm_open_stats_t *o);
GPUSHM_API uint64_t gpushm_open_stats_creates(const gpushm_open_stats_t *o);

/* Since 0.7: every counter and gauge of the daemon as a row that describes itself, in
 * the daemon's order (samples of one metric together), so that a tool shows the rows
 * it does not know.  Names follow Prometheus's rules (gpushm_<what>[_<unit>][_total]);
 * empty from older daemons, whose figures are in the accessors above.  From a 0.8
 * daemon the rows carry everything the typed accessors above do (the latency histogram,
 * device memory, buffers by backend; docs/metrics.md): those accessors are frozen, kept
 * for the ABI and for daemons before 0.8, and gain no siblings; read new figures here.
 * The daemon's identity (version, instance) and the detached processes' listing are
 * not figures and stay where they are. */
typedef enum {
  GPUSHM_METRIC_GAUGE = 0,
  GPUSHM_METRIC_COUNTER = 1,
  /* 0.8: a histogram, one row per series: gpushm_metric_value() is the sum of what was
   * observed; gpushm_metric_observations() how many, and the buckets below. */
  GPUSHM_METRIC_HISTOGRAM = 2,
} gpushm_metric_type_t;
GPUSHM_API size_t gpushm_stats_metric_count(const gpushm_stats_t *stats);
GPUSHM_API const gpushm_metric_t *gpushm_stats_metric(const gpushm_stats_t *stats, size_t i);
GPUSHM_API const char *gpushm_metric_name(const gpushm_metric_t *m);
GPUSHM_API const char *gpushm_metric_help(const gpushm_metric_t *m);
GPUSHM_API gpushm_metric_type_t gpushm_metric_type(const gpushm_metric_t *m);
/* "bytes", "seconds" or "": how a reader shows the value. */
GPUSHM_API const char *gpushm_metric_unit(const gpushm_metric_t *m);
/* The value is value * 10^exponent (exact: uptime in ms is exponent -3 of seconds). */
GPUSHM_API uint64_t gpushm_metric_value(const gpushm_metric_t *m);
GPUSHM_API int32_t gpushm_metric_exponent(const gpushm_metric_t *m);
/* The value as exact decimal text ("12.345"); returns out (empty for NULL m). */
GPUSHM_API const char *gpushm_metric_value_text(const gpushm_metric_t *m, char *out, size_t len);
/* GPUSHM_METRIC_HISTOGRAM rows (0.8; 0 and "" for others): how many observations, how
 * many buckets (their bounds; the +Inf bucket, which holds them all, is not counted),
 * bucket i's upper bound as gpushm_metric_value_text() writes a value (Prometheus's
 * le), and how many observations were at most that (cumulative, as Prometheus's). */
GPUSHM_API uint64_t gpushm_metric_observations(const gpushm_metric_t *m);
GPUSHM_API size_t gpushm_metric_bucket_count(const gpushm_metric_t *m);
GPUSHM_API const char *gpushm_metric_bucket_le_text(const gpushm_metric_t *m, size_t i,
                                                    char *out, size_t len);
GPUSHM_API uint64_t gpushm_metric_bucket_observations(const gpushm_metric_t *m, size_t i);
GPUSHM_API size_t gpushm_metric_label_count(const gpushm_metric_t *m);
GPUSHM_API const gpushm_metric_label_t *gpushm_metric_label(const gpushm_metric_t *m, size_t i);
GPUSHM_API const char *gpushm_metric_label_name(const gpushm_metric_label_t *l);
GPUSHM_API const char *gpushm_metric_label_value(const gpushm_metric_label_t *l);

/* ---- the daemon as this connection met it (gpushmctl doctor) ------------------- */

/* Who answers on the socket (SO_PEERCRED, read at connect).  The pid is as this process
 * sees it: 0 when gpushmd runs in a PID namespace this process cannot see (another
 * container's, or the host's seen from a container). */
GPUSHM_API uint32_t gpushm_daemon_pid(const gpushm_t *conn);
GPUSHM_API uint32_t gpushm_daemon_uid(const gpushm_t *conn);
/* The inode of gpushmd's PID namespace (what /proc/PID/ns/pid names), 0 where the
 * daemon does not say.  Legacy CUDA IPC (cuda-ipc) fails between two different PID
 * namespaces of which neither is the host's; cuda-fd works across them. */
GPUSHM_API uint64_t gpushm_daemon_pid_namespace(const gpushm_t *conn);
/* The GPUs the daemon's CUDA backends use, as its Hello listed them (read with the
 * gpushm_device_stats_* accessors; they live as long as conn).  Match them with this
 * process's devices by UUID: ordinals differ under CUDA_VISIBLE_DEVICES. */
GPUSHM_API size_t gpushm_daemon_device_count(const gpushm_t *conn);
GPUSHM_API const gpushm_device_stats_t *gpushm_daemon_device(const gpushm_t *conn, size_t i);

/* ---- the GPUs this process sees (gpushmctl doctor) ------------------------------ */

/* gpushm_local_device_flags() bits: what a device offers gpushm in this process. */
#define GPUSHM_DEVICE_VMM 0x1u            /* virtual memory management (cuMemCreate, cuMemMap) */
#define GPUSHM_DEVICE_POSIX_FD 0x2u       /* POSIX-fd shareable handles: cuda-fd needs both */
#define GPUSHM_DEVICE_STREAM_MEMOPS64 0x4u /* 64-bit stream memory operations (fences) */
#define GPUSHM_DEVICE_IPC_EVENTS 0x8u     /* inter-process events */
/* A MIG instance (by its name, or a MIG- entry in CUDA_VISIBLE_DEVICES): nothing is
 * shared with other GPU instances, so only buffers on this very instance open. */
#define GPUSHM_DEVICE_MIG 0x10u
#define GPUSHM_DEVICE_MPS 0x20u           /* contexts on it would run through MPS */

/* Loads the CUDA driver in this process (if the library has not yet) and lists the
 * devices it sees, without creating a context.  GPUSHM_E_UNSUPPORTED, with the reason,
 * where there is no usable driver (or libgpushm was built without CUDA). */
GPUSHM_API int gpushm_local_devices(gpushm_local_device_list_t **out);
GPUSHM_API void gpushm_local_device_list_free(gpushm_local_device_list_t *list);
/* The driver's CUDA version, as cuDriverGetVersion() gives it (13000 for 13.0). */
GPUSHM_API int gpushm_local_device_list_driver_version(const gpushm_local_device_list_t *list);
GPUSHM_API size_t gpushm_local_device_list_count(const gpushm_local_device_list_t *list);
GPUSHM_API const gpushm_local_device_t *gpushm_local_device_list_get(
  const gpushm_local_device_list_t *list, size_t i);
/* This process's ordinal for it. */
GPUSHM_API int32_t gpushm_local_device_ordinal(const gpushm_local_device_t *dev);
GPUSHM_API const char *gpushm_local_device_name(const gpushm_local_device_t *dev);
/* Copies its 16-byte UUID (a MIG instance's own where it is one); GPUSHM_E_INVAL for a
 * NULL dev or uuid. */
GPUSHM_API int gpushm_local_device_uuid(const gpushm_local_device_t *dev, uint8_t uuid[16]);
/* GPUSHM_DEVICE_* bits. */
GPUSHM_API uint32_t gpushm_local_device_flags(const gpushm_local_device_t *dev);

#ifdef __cplusplus
}
#endif
#endif /* GPUSHM_ADMIN_H */
