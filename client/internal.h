/* libgpushm internals shared by its modules. */
#ifndef GPUSHM_CLIENT_INTERNAL_H
#define GPUSHM_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpushm.h"
#include "gpushm-admin.h"
#include "gpushm.pb-c.h"
#include "shm_layout.h"
#include "wire.h"

struct gpushm {
  pthread_mutex_t lock; /* one request in flight per connection */
  int fd;
  unsigned refs;        /* the user's handle + one per open buffer; atomic */
  bool broken;          /* the daemon hung up or misbehaved: every call fails */
  bool user_gone;       /* gpushm_disconnect() was called; atomic */
  int timeout_ms;       /* per request (send and reply); 0: wait for ever */
  uint64_t instance_id;
  uint32_t client_id;
  unsigned protocol_version; /* negotiated at Hello */
  uint64_t features;         /* GPUSHM_FEATURE_* the daemon offers */
  uint32_t backends;         /* 1 << gpushm_backend_t, what the daemon offers */
  gpushm_backend_t default_backend; /* 0: the daemon did not say (before 0.2) */
  uint64_t daemon_pid_namespace;    /* its PID namespace's inode; 0: unknown */
  /* SO_PEERCRED of the daemon: pid 0 when it is in a PID namespace this process
   * cannot see (another container's, or an ancestor's). */
  uint32_t daemon_pid, daemon_uid;
  Gpushm__Reply *hello; /* kept for the devices it lists */
  char daemon_version[32];
  uint64_t next_request_id;
  const struct status_page *status;
  uint8_t rx[WIRE_RECV_BUF];
  uint8_t tx[WIRE_FRAME_MAX];
};

/* What this process maps of one object: per daemon instance, object, access and map
 * device, shared by the handles of every connection that opened it (CUDA maps a handle
 * once per context and process), unmapped when the last of them closes. */
struct client_mapping {
  struct client_mapping *next; /* the process-wide table's chain */
  unsigned users; /* handles on it; under the cache lock */
  bool inherited; /* mapped by the parent of this (forked) process: never unmapped here */
  uint64_t instance_id;
  uint64_t id;
  bool read_only;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  gpushm_kind_t kind;       /* GPUSHM_KIND_EVENT: its handles are gpushm_event_t */
  gpushm_backend_t backend; /* buffers only; 0 for an event */
  uint32_t owner_uid, owner_gid;
  /* CUDA backends, this process's ordinals: where the memory (or event) lives, and
   * the device it is mapped for (ptr is that device's; events: the same). */
  int home_device;
  int device;
  /* sync buffers */
  struct sync_control *control;
  gpushm_sync_method_t sync_method;
  char sync_why[128];      /* why a fallback method was taken */
  void *sync_event;        /* GPUSHM_SYNC_IPC_EVENT: the event, on home_device */
  uint64_t fence_dptr;     /* GPU and CPU fences: the fence in the buffer's allocation */
  uint64_t fence_written;  /* the last value this process queued for the fence */
  uint64_t fence_waited;   /* the highest value a stream of this process waits for */
  uint64_t size;
  void *ptr;
  size_t map_len;       /* host and cuda-fd: what is mapped */
  /* Carved buffers: the segment mapping ptr lies in (NULL: an allocation of its own,
   * mapped for this buffer alone). */
  struct client_segment *segment;
  uint64_t cuda_handle; /* cuda-fd: the imported CUmemGenericAllocationHandle */
  /* cuda-fabric, read-write opens: what other nodes import (the reply's fabric_handle) */
  bool has_fabric_handle;
  uint8_t fabric_handle[GPUSHM_FABRIC_HANDLE_BYTES];
  /* What the buffer was created with, from the open reply. */
  size_t metadata_len;
  uint8_t metadata[];
};

/* A handle: one connection's opens of one mapping, holding that connection's daemon
 * reference (gpushm_buffer_t, gpushm_event_t). */
struct gpushm_buffer {
  struct gpushm_buffer *next_by_id, *next_by_name; /* the handle table's chains */
  struct client_mapping *map;
  gpushm_t *conn; /* holds the daemon's reference; a reference to it is held */
  unsigned refs;  /* opens through conn; under the cache lock */
  /* The daemon's unlink generation read before the name was resolved: while it is
   * unchanged, the name still means this buffer. */
  uint64_t name_generation;
  /* Opened by the parent of this (forked) process: never closed here, since its socket
   * is the parent's.  Under the cache lock. */
  bool inherited;
};

/* The wire spells an event as a backend (BACKEND_CUDA_EVENT); the API has kinds. */
static inline gpushm_kind_t client_kind_of_wire(Gpushm__Backend backend)
{
  return backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT ? GPUSHM_KIND_EVENT : GPUSHM_KIND_BUFFER;
}

/* Device memory a POSIX fd brings (cuda-fabric is cuda-fd with a fabric handle besides):
 * imported, mapped and fenced the same way. */
static inline bool client_backend_is_fd_device(gpushm_backend_t backend)
{
  return backend == GPUSHM_BACKEND_CUDA_FD || backend == GPUSHM_BACKEND_CUDA_FABRIC;
}

/* A buffer's memory backend; 0 for an event, which has none. */
static inline gpushm_backend_t client_backend_of_wire(Gpushm__Backend backend)
{
  return backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT ? GPUSHM_BACKEND_DEFAULT
                                                        : (gpushm_backend_t)backend;
}

/* Reads a caller's sized option struct (its first member: uint32_t size) into known, the
 * library's own layout of known_size bytes, which holds the defaults; min_size is the
 * first published layout's size.  what names the struct in error messages. */
int client_copy_opts(void *known, size_t known_size, const void *user, size_t min_size,
                     const char *what);

/* Records the detail for gpushm_last_error_message() and returns err. */
int client_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void client_clear_error(void);

/* fds that came with a reply; the receiver owns them */
struct client_fds {
  int fd[GPUSHM_LIMIT_FDS_PER_FRAME];
  unsigned n;
};
void client_close_fds(struct client_fds *fds);
/* Whether fd cannot shrink any more: a shared object that still could would turn a
 * later access to a mapping of it into a SIGBUS, at a peer's whim. */
bool client_fd_sealed(int fd);

/* One request/reply exchange.  On success *reply is the daemon's reply (free with
 * gpushm__reply__free_unpacked) and *fds, when given, the fds it carried; without
 * fds, any that came are closed. */
int client_call(gpushm_t *conn, Gpushm__Request *req, Gpushm__Reply **reply,
                struct client_fds *fds);
/* The same with conn->lock held by the caller (segments: a reply that says "you map
 * this segment already" must be acted on before anyone can unmap it). */
int client_call_locked(gpushm_t *conn, Gpushm__Request *req, Gpushm__Reply **reply,
                       struct client_fds *fds);
/* A request the daemon does not answer (GPUSHM_FEATURE_ONEWAY): sent, not waited for. */
int client_send_oneway(gpushm_t *conn, Gpushm__Request *req);
int client_send_oneway_locked(gpushm_t *conn, Gpushm__Request *req);
/* The same, the reply unpacked with alloc (NULL: malloc; free it with the same). */
int client_call_alloc(gpushm_t *conn, Gpushm__Request *req, Gpushm__Reply **reply,
                      struct client_fds *fds, ProtobufCAllocator *alloc);
/* Walks the pages of a list request (req->list->after_id is where it starts, and moves
 * on): each reply is unpacked by list_codec_unpack_reply() into arena (an allocator
 * whose free does nothing; see list_codec.h) and handed to take(), which returns < 0
 * to stop with that error, 0 after the last page, 1 for more, setting *after_id to the
 * page's last id.  The next page is asked for before the last is decoded. */
int client_call_list_walk(gpushm_t *conn, Gpushm__Request *req, ProtobufCAllocator *arena,
                          int (*take)(void *ctx, Gpushm__Reply *page, uint64_t *after_id),
                          void *ctx);
void client_conn_ref(gpushm_t *conn);
void client_conn_unref(gpushm_t *conn);
uint64_t client_unlink_generation(const gpushm_t *conn);
/* The inode of this process's PID namespace (0: /proc is not mounted). */
uint64_t client_pid_namespace(void);
/* Whether this process and the daemon are in different PID namespaces of which neither
 * is the host's, where legacy CUDA IPC handles cannot be opened; why says so, for an
 * error message.  False where it cannot be told. */
bool client_ipc_namespace_problem(const gpushm_t *conn, char *why, size_t len);
/* GPUSHM_E_UNSUPPORTED, naming what, unless the daemon offers feature. */
int client_need_feature(const gpushm_t *conn, uint64_t feature, const char *what);

/* Create and open as buffers or (event true) events, through the process cache. */
int client_create(gpushm_t *conn, const char *name, uint64_t size,
                  const gpushm_create_opts_t *opts, bool event, gpushm_buffer_t **out);
int client_open(gpushm_t *conn, const char *name, uint64_t id, unsigned flags, bool event,
                gpushm_buffer_t **out);

/* Segments (client/segment.c): mapped once per process and access, whichever
 * connection and buffer brought them, per map device for device memory.  With
 * conn->lock held: takes a use of the segment a carved open reply names (mapping it
 * from the reply's fds or handle, or from the mapping this process has), mapped for
 * the map device; *ptr is the buffer's address, *devices where it lives and is mapped.
 * fds are consumed.  read_only: the access the reply grants. */
struct client_segment;
struct client_devices;
int client_segment_attach(gpushm_t *conn, const Gpushm__OpenReply *open, bool read_only,
                          struct client_fds *fds, int map_request, struct client_segment **out,
                          void **ptr, struct client_devices *devices);
/* A buffer in it was closed (its daemon reference released): the segment stays mapped
 * while idle, up to GPUSHM_LIMIT_IDLE_SEGMENTS per process, least recently used out. */
void client_segment_put(struct client_segment *seg);
/* Unmaps the idle segments conn brought (gpushm_disconnect). */
void client_segment_disconnect(gpushm_t *conn);
/* With conn->lock held, where evicting could take it again: drops a use without
 * unmapping anything (the next client_segment_put trims the idle list). */
void client_segment_unuse(struct client_segment *seg);
/* With conn->lock held: a reply attached a segment this process does not keep (it could
 * not make an entry for the buffer): the daemon is told it is not mapped. */
void client_segment_attach_refused(gpushm_t *conn, uint64_t segment_id, bool read_only);
/* CUDA_ERROR_INVALID_CONTEXT from a legacy IPC open, explained where PID namespaces are
 * the cause; returns the error to report. */
int client_explain_ipc_failure(gpushm_t *conn);

/* CUDA (client/cuda.c).  A device buffer lives on its home device and is mapped for
 * its map device, whose kernels and streams use the pointer: by default the calling
 * thread's current context's device, else home; map_request >= 0 names it
 * (GPUSHM_MAP_DEVICE).  Devices are this process's ordinals. */
struct client_devices {
  int home, map;
};
/* The device of the calling thread's current context; -1 when none is current or
 * CUDA was never needed by this process (the driver is not loaded for this). */
int client_cuda_current_device(void);
/* Legacy IPC: maps a daemon-exported handle of the device with that UUID (or ordinal,
 * when no UUID is given), and unmaps it. */
int client_cuda_import_ipc(const uint8_t *handle, size_t handle_len, const uint8_t *uuid,
                           size_t uuid_len, int ordinal, int map_request, void **ptr,
                           struct client_devices *devices);
int client_cuda_close_ipc(void *ptr, int map_device);
/* cuda-fd: imports the fd (the caller still closes it), maps size bytes for the map
 * device read-only or read-write; *handle receives the imported allocation handle. */
int client_cuda_import_fd(int fd, uint64_t size, bool read_only, const uint8_t *uuid,
                          size_t uuid_len, int ordinal, int map_request, void **ptr,
                          uint64_t *handle, struct client_devices *devices);
int client_cuda_close_fd(void *ptr, uint64_t size, uint64_t handle, int map_device);
/* The pieces of the above, for segments (one import, a mapping per map device):
 * resolve where a buffer lives and is to be mapped; import an fd; map an imported
 * allocation for a device; unmap it; release the import. */
int client_cuda_resolve(const uint8_t *uuid, size_t uuid_len, int ordinal, int map_request,
                        struct client_devices *devices);
int client_cuda_fd_import(int fd, int device, uint64_t *handle);
int client_cuda_fd_map(uint64_t handle, uint64_t size, bool read_only, int map_device, void **ptr);
int client_cuda_fd_unmap(void *ptr, uint64_t size, int map_device);
int client_cuda_fd_release(uint64_t handle);
/* A dma-buf fd for [dptr, dptr + size) of memory mapped for device (page-aligned, the
 * caller checked); GPUSHM_E_UNSUPPORTED where the device has no dma-buf support. */
int client_cuda_export_dmabuf(void *dptr, uint64_t size, int device, int *fd_out);
/* Zeroes len bytes of device memory (a carved slot the daemon said to clear), through the
 * library's own stream on map_device, and waits for it. */
int client_cuda_clear(void *dptr, uint64_t len, int map_device);
/* Events live on their own device (*event_device), where they are recorded; a stream of
 * any device may wait on them (client_cuda_wait opens them there as needed). */
int client_cuda_import_event(const uint8_t *handle, size_t handle_len, const uint8_t *uuid,
                             size_t uuid_len, int ordinal, void **event, int *event_device);
int client_cuda_destroy_event(void *event);
/* A caller's stream, resolved once per call: its context and device (NULL: the
 * legacy default stream of map_device's primary context). */
struct client_stream {
  void *stream;
  void *ctx; /* CUcontext */
  int device;
};
int client_cuda_stream(void *stream, int map_device, struct client_stream *out);
/* Fences of cuda-fd sync buffers (8 bytes of device memory at fence_dptr, in the
 * mapping for map_device).  support: 0 when the device's streams can write and wait
 * on them, 1 (why says what is missing: the caller falls back to the CPU) or a
 * GPUSHM_E_*.  read/store: by the CPU, through the library's own stream, never
 * waiting for the caller's. */
int client_cuda_fence_support(int local_device, char *why, size_t why_len);
int client_cuda_fence_read(uint64_t fence_dptr, uint64_t *value, int map_device);
int client_cuda_fence_store(uint64_t fence_dptr, uint64_t value, int map_device);
int client_cuda_fence_write(uint64_t fence_dptr, uint64_t value, const struct client_stream *s);
int client_cuda_fence_wait(uint64_t fence_dptr, uint64_t value, const struct client_stream *s);
int client_cuda_stream_sync(const struct client_stream *s);
int client_cuda_record(void *event, const struct client_stream *s);
int client_cuda_wait(void *event, const struct client_stream *s);

#endif
