/* SPDX-License-Identifier: MIT */
/*
 * gpushm — share GPU (and host) memory between cooperating processes through
 * the gpushmd daemon, which owns every buffer and frees it only when no process
 * holds it any more.
 *
 * Conventions:
 *  - Every function that can fail returns 0 or a negative GPUSHM_E_* code;
 *    gpushm_strerror() names a code and gpushm_last_error_message() gives the
 *    detail (often the daemon's own words) of this thread's last failure.
 *  - Handles are opaque.  All functions are thread-safe.
 *  - The ABI grows without breaking: option structs carry their own size (see
 *    gpushm_create_opts_t) and what the daemon reports is read through accessors
 *    (gpushm-admin.h).  Within a soname, functions are only ever added.
 *  - Users need neither cuda.h nor libcuda: device pointers cross this API as
 *    void * and CUDA streams as void * (a CUstream / cudaStream_t).
 *  - After fork(), a child must not use handles its parent had; it connects anew.
 *    It may gpushm_disconnect() inherited connections to free their memory, which
 *    closes only its own copy of the socket.  Closing an inherited buffer (or a
 *    tensor's deleter doing it, gpushm-dlpack.h) is refused with GPUSHM_E_INVAL and
 *    changes nothing: garbage collectors in a child may run into one.
 */
#ifndef GPUSHM_H
#define GPUSHM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GPUSHM_API __attribute__((visibility("default")))
#else
#define GPUSHM_API
#endif

/* The one definition of the version: configure.ac reads these three lines. */
#define GPUSHM_VERSION_MAJOR 0
#define GPUSHM_VERSION_MINOR 8
#define GPUSHM_VERSION_PATCH 0
#define GPUSHM_VERSION_HEX \
  ((GPUSHM_VERSION_MAJOR << 16) | (GPUSHM_VERSION_MINOR << 8) | GPUSHM_VERSION_PATCH)

/* Socket the library and tools use unless told otherwise ($GPUSHM_SOCKET wins). */
#define GPUSHM_DEFAULT_SOCKET "/run/gpushm/gpushmd.sock"

/* One map generates the error enum, gpushm_strerror() and the wire status codes. */
#define GPUSHM_ERRNO_MAP(XX)                                              \
  XX(INVAL, 1, "invalid argument")                                        \
  XX(NOENT, 2, "no such buffer")                                          \
  XX(EXIST, 3, "buffer already exists")                                   \
  XX(PERM, 4, "permission denied")                                        \
  XX(NOMEM, 5, "out of memory")                                           \
  XX(LIMIT, 6, "limit or quota exceeded")                                 \
  XX(PROTO, 7, "protocol error")                                          \
  XX(VERSION, 8, "protocol version mismatch")                             \
  XX(CONNECT, 9, "cannot connect to gpushmd")                             \
  XX(DISCONNECTED, 10, "connection to gpushmd lost")                      \
  XX(UNSUPPORTED, 11, "operation not supported")                          \
  XX(IO, 12, "system call failed")                                        \
  XX(CUDA, 13, "CUDA driver error")                                       \
  XX(NAME, 14, "invalid buffer name")                                     \
  XX(TIMEOUT, 15, "timed out")                                           \
  XX(LOST, 16, "signaller lost")

typedef enum gpushm_error {
  GPUSHM_OK = 0,
#define GPUSHM_ERRNO_ENUM_(name, num, text) GPUSHM_E_##name = -(num),
  GPUSHM_ERRNO_MAP(GPUSHM_ERRNO_ENUM_)
#undef GPUSHM_ERRNO_ENUM_
} gpushm_error_t;

typedef enum gpushm_backend {
  GPUSHM_BACKEND_DEFAULT = 0,  /* host */
  GPUSHM_BACKEND_HOST = 1,     /* shared host memory (memfd), for CPU producers */
  GPUSHM_BACKEND_CUDA_IPC = 2, /* device memory, legacy CUDA IPC (one trust domain) */
  /* Device memory shared as a POSIX fd (cuMemCreate + cuMemExportToShareableHandle):
   * a capability only a process the daemon sent it to can import, so the mode bits
   * decide who reaches the memory, across uids and PID namespaces.  Read-only opens map
   * it read-only, which stops bugs, not a hostile holder: whoever holds the fd can map
   * the allocation read-write again.  Importers keep the memory alive while they map
   * it, even after the daemon let go. */
  GPUSHM_BACKEND_CUDA_FD = 3,
  /* 4 is reserved: it is how the wire spells an event (BACKEND_CUDA_EVENT in
   * proto/gpushm.proto, unchanged for protocol compatibility).  Events are not memory:
   * they are objects of their own kind, GPUSHM_KIND_EVENT. */
  /* cuda-fd that also has a fabric handle (CU_MEM_HANDLE_TYPE_FABRIC), which processes
   * on other nodes of an NVLink domain import: gpushm_buffer_fabric_handle().  Only
   * where the device supports fabric handles and gpushmd has an IMEX channel
   * (/dev/nvidia-caps-imex-channels/channelN), else create fails GPUSHM_E_UNSUPPORTED
   * saying which is missing.  Every buffer is an allocation of its own (never carved
   * from a segment: the handle reaches the whole allocation, beyond this host).  Not
   * kept across daemon restarts.  docs/multinode.md. */
  GPUSHM_BACKEND_CUDA_FABRIC = 5,
  /* Memory a process exported from a graphics API and registered under a name
   * (gpushm_register_memory(), gpushm-graphics.h); never a create's backend. */
  GPUSHM_BACKEND_EXTERNAL = 6
} gpushm_backend_t;

/* What a name denotes: a buffer (gpushm_buffer_t), an event (gpushm_event_t), an
 * image (a gpushm_buffer_t with an image description, gpushm-graphics.h), a timeline
 * (gpushm_timeline_t, 0.8) or a frame ring (gpushm_ring_t, 0.8). */
typedef enum gpushm_kind {
  GPUSHM_KIND_BUFFER = 1,
  GPUSHM_KIND_EVENT = 2,
  GPUSHM_KIND_IMAGE = 3,
  GPUSHM_KIND_TIMELINE = 4,
  GPUSHM_KIND_RING = 5,
  GPUSHM_KIND_WEIGHTS = 6 /* a weight-set generation (gpushm-weights.h, 0.8) */
} gpushm_kind_t;

typedef enum gpushm_lifetime {
  GPUSHM_LIFETIME_PERSISTENT = 0, /* lives until unlinked (and no longer held) */
  GPUSHM_LIFETIME_SESSION = 1     /* unlinked when the creating connection closes */
} gpushm_lifetime_t;

/* gpushm_create_opts.flags */
/* Like O_CREAT without O_EXCL, but joins only a buffer of the caller's own uid: a name
 * another user created first is GPUSHM_E_EXIST (it may be a squatter). */
#define GPUSHM_CREATE_OPEN_EXISTING 0x1u
#define GPUSHM_CREATE_SYNC 0x2u          /* give the buffer acquire/release ordering */
/* Refuse (GPUSHM_E_INVAL, saying why) mode bits the backend cannot keep: read without
 * write for group or others on cuda-ipc, cuda-fd or cuda-fabric, whose readers receive
 * a handle or fd that maps the memory read-write (docs/security.md).  The host backend
 * keeps them.  A daemon's strict-modes setting does this for every create.  Needs
 * GPUSHM_FEATURE_STRICT_MODE (GPUSHM_E_UNSUPPORTED otherwise: an older daemon would
 * ignore it).  Since 0.7. */
#define GPUSHM_CREATE_STRICT_MODE 0x4u
/* The creator writes every byte before anyone reads (torch.empty, not torch.zeros): a
 * reused slot of device memory is not cleared, and may hold what an earlier buffer of
 * the same owner, group, mode, backend and device left there (docs/segments.md), which
 * the new buffer's readers could read anyway.  Saves the create a memset and a
 * synchronize (about 10 us on an H200), and needs no CUDA in the creator.  Host memory
 * is zeroed all the same.  Buffers only: events, timelines, rings and images refuse it
 * (GPUSHM_E_INVAL).  Since 0.8. */
#define GPUSHM_CREATE_UNINITIALIZED 0x8u
/* gpushm_buffer_open() flags: the access an open asks for, as the CUDA driver's map
 * flags say it (docs/graphics.md has what each backend and API enforces). */
#define GPUSHM_OPEN_READONLY 0x1u
/* The opener will overwrite what it uses without reading it first: graphics helpers
 * import images with their contents discarded (Vulkan: from VK_IMAGE_LAYOUT_UNDEFINED;
 * GL: invalidated).  A promise, not a protection; not with GPUSHM_OPEN_READONLY. */
#define GPUSHM_OPEN_WRITE_DISCARD 0x2u
/* In gpushm_buffer_open() flags and gpushm_create_opts.flags: the device (this
 * process's ordinal) whose kernels and streams will use a device buffer, its map
 * device.  Without it: the device of the calling thread's current CUDA context, or,
 * when none is current or that device has no peer access to the memory's, the device
 * the memory lives on.  A buffer used on another device than its own is reached as a
 * peer (legacy IPC: opened in that device's context with peer access enabled;
 * cuda-fd: access granted to that device); a device named here without peer access
 * is GPUSHM_E_UNSUPPORTED at open.  The process maps a buffer once per map device
 * (and access mode): opens for the same device share one handle, opens for another
 * get their own handle and pointer.  Ignored for host buffers and events. */
#define GPUSHM_MAP_DEVICE_SHIFT 16
#define GPUSHM_MAP_DEVICE_MASK (0xffu << GPUSHM_MAP_DEVICE_SHIFT)
#define GPUSHM_MAP_DEVICE(ordinal) ((((unsigned)(ordinal)) + 1u) << GPUSHM_MAP_DEVICE_SHIFT)

typedef struct gpushm gpushm_t;               /* a connection to gpushmd */
typedef struct gpushm_buffer gpushm_buffer_t; /* an open buffer, shared process-wide */
typedef struct gpushm_event gpushm_event_t;   /* an open inter-process CUDA event */

/* Options of gpushm_buffer_create() and gpushm_event_create().  Initialise with
 * gpushm_create_opts_init(), which sets size, then change fields.  size is how the
 * library tells which version of this struct a program was compiled with, so that
 * fields can be appended later without breaking binaries built against an older or a
 * newer gpushm.h:
 *  - an older caller's smaller struct: the fields it lacks take their defaults;
 *  - a newer caller's larger struct: accepted if every field this library does not
 *    know is zero (their defaults), else GPUSHM_E_UNSUPPORTED;
 *  - size below GPUSHM_CREATE_OPTS_SIZE_V1 (0: never initialised): GPUSHM_E_INVAL.
 * This is the convention of Linux's copy_struct_from_user() (openat2(2), clone3(2)). */
typedef struct gpushm_create_opts {
  uint32_t size;      /* sizeof(gpushm_create_opts_t) when initialised */
  uint32_t backend;   /* gpushm_backend_t */
  int32_t device;     /* device ordinal for CUDA backends; ignored for host */
  uint32_t mode;      /* permission bits as for a file; 0 means 0600 */
  uint32_t lifetime;  /* gpushm_lifetime_t */
  uint32_t flags;     /* GPUSHM_CREATE_* */
  /* Bytes kept with the buffer, immutable, returned by gpushm_buffer_metadata() to every
   * process that opens it (a tensor manifest, say): at most GPUSHM_METADATA_MAX, else
   * GPUSHM_E_LIMIT; GPUSHM_E_UNSUPPORTED from a daemon without
   * GPUSHM_FEATURE_METADATA.  Events take none.  A create that joins an existing
   * buffer (GPUSHM_CREATE_OPEN_EXISTING) gets that buffer's. */
  uint32_t metadata_size;
  const void *metadata;
  /* How the creator's own open maps the buffer (its map device): NULL, as
   * gpushm_buffer_open_ex() with defaults (or GPUSHM_MAP_DEVICE in flags, the older
   * spelling; naming both is GPUSHM_E_INVAL).  Its flags must be 0: a creator opens
   * read-write.  Since 0.7. */
  const struct gpushm_open_opts *open;
  /* The buffer's group, whose members its mode's group bits are for: a group id the
   * creator belongs to (root: any; GPUSHM_E_PERM otherwise), or GPUSHM_GROUP_OF_CREATOR
   * (what init sets) for the creator's primary group.  Since 0.8
   * (GPUSHM_FEATURE_CREATE_GROUP; GPUSHM_E_UNSUPPORTED from an older gpushmd). */
  int64_t group;
  /* New fields go here, zero meaning what older libraries do. */
} gpushm_create_opts_t;

#define GPUSHM_GROUP_OF_CREATOR (-1)

/* Metadata a buffer may carry, in bytes. */
#define GPUSHM_METADATA_MAX 4096u

/* The size of the first published gpushm_create_opts_t (gpushm 0.2): up to flags. */
#define GPUSHM_CREATE_OPTS_SIZE_V1 24u

/* A map device chosen by the rule at GPUSHM_MAP_DEVICE: the current context's device,
 * else the memory's own. */
#define GPUSHM_DEVICE_AUTO (-1)
/* No CUDA mapping: the open keeps the memory's fd for a graphics API to import
 * (gpushm_buffer_memory_fd(), gpushm-graphics.h); host buffers are mapped as always. */
#define GPUSHM_DEVICE_NONE (-2)

/* Options of gpushm_buffer_open_ex(), sized as gpushm_create_opts_t is (same rules):
 * initialise with gpushm_open_opts_init(), then change fields.  Since 0.7. */
typedef struct gpushm_open_opts {
  uint32_t size;      /* sizeof(gpushm_open_opts_t) when initialised */
  uint32_t flags;     /* GPUSHM_OPEN_*; GPUSHM_MAP_DEVICE bits are GPUSHM_E_INVAL */
  /* The device (this process's ordinal, 0-31) whose kernels and
   * streams will use a device buffer, as GPUSHM_MAP_DEVICE describes; GPUSHM_DEVICE_AUTO
   * (what init sets) for the default rule; GPUSHM_DEVICE_NONE for a graphics importer.
   * Ignored for host buffers. */
  int32_t map_device;
  /* Since 0.8 (GPUSHM_FEATURE_OPEN_WAIT; GPUSHM_E_UNSUPPORTED from an older gpushmd):
   * an open by name that finds nothing this process may see by that name waits up to
   * wait_ms milliseconds for it to be made (at most GPUSHM_LIMIT_OPEN_WAIT_MS, an hour;
   * GPUSHM_TIMEOUT_INFINITE or another negative value: for ever), then fails with
   * GPUSHM_E_NOENT.  What it may see but not open as asked ends the wait as it fails a
   * plain open: GPUSHM_E_PERM where its mode denies the access, GPUSHM_E_INVAL where it
   * is another kind (a ring, a timeline, an event, a weight set).  gpushmd counts such a wait, and one that ends without the name,
   * apart from failed requests (gpushm_open_waits_total, _timeouts_total).  The
   * connection's other requests wait behind it; its timeout starts after the wait. */
  int32_t wait_ms;
  /* New fields go here, zero meaning what this version does. */
} gpushm_open_opts_t;

/* The size of the first published gpushm_open_opts_t (gpushm 0.7). */
#define GPUSHM_OPEN_OPTS_SIZE_V1 12u

/* Timeouts in milliseconds, everywhere in this API: a negative value waits for ever,
 * GPUSHM_TIMEOUT_INFINITE says so by name.  (gpushm_set_timeout() also takes 0 for
 * ever, as it did before 0.7.) */
#define GPUSHM_TIMEOUT_INFINITE (-1)

/* Backend names as configuration files, gpushmctl and Python spell them: "host",
 * "cuda-ipc", "cuda-fd", "cuda-fabric", and "cuda-event" for value 4 (what lists
 * report for events).  NULL for a value this library does not know; from_name gives
 * -1 for a name it does not know (and for "default", which is no backend).  Since 0.7. */
GPUSHM_API const char *gpushm_backend_name(int backend);
GPUSHM_API int gpushm_backend_from_name(const char *name);

/* Library version at run time, as GPUSHM_VERSION_HEX. */
GPUSHM_API unsigned gpushm_version(void);
GPUSHM_API const char *gpushm_version_string(void);
GPUSHM_API const char *gpushm_strerror(int err);
/* Detail of the calling thread's last failure ("" if none); valid until its next call. */
GPUSHM_API const char *gpushm_last_error_message(void);
/* The system error (an errno value) behind the calling thread's last failure where the
 * library knows one — ENOENT, ECONNREFUSED, EACCES, ... for a connect that failed —
 * else 0.  Since 0.7. */
GPUSHM_API int gpushm_last_error_errno(void);

/* Connect and every request time out after this long unless $GPUSHM_TIMEOUT_MS (a
 * negative number: never) or gpushm_set_timeout() say otherwise.  $GPUSHM_POLL_US
 * (0 to 10000, default 0; read at connect, another value fails it) has a connection
 * look for each reply that long without sleeping first: a reply within it costs no
 * wake-up, a CPU kept busy meanwhile (gpushmd's side: --busy-poll).  The library reads
 * its environment ($GPUSHM_SOCKET, $GPUSHM_DAEMON_UID, $GPUSHM_TIMEOUT_MS,
 * $GPUSHM_POLL_US, $GPUSHM_CUDA_LIBRARY) with secure_getenv(): a setuid or setgid
 * program, or one that gained capabilities, ignores them and uses the defaults. */
#define GPUSHM_DEFAULT_TIMEOUT_MS 10000

/* socket_path NULL: $GPUSHM_SOCKET, else GPUSHM_DEFAULT_SOCKET.  client_name (may be
 * NULL; printable UTF-8, at most 64 bytes) is shown by admin tools.  The daemon must
 * run as root, as the caller's uid, or as the uid (or user name) in $GPUSHM_DAEMON_UID:
 * anything else on the socket is refused with GPUSHM_E_PERM.  A daemon that does not
 * accept or answer within the timeout gives GPUSHM_E_TIMEOUT. */
GPUSHM_API int gpushm_connect(const char *socket_path, const char *client_name, gpushm_t **out);
/* What a daemon offers, negotiated at connect (Hello).  A call that needs a feature
 * the daemon lacks fails with GPUSHM_E_UNSUPPORTED, naming it, without a round trip. */
#define GPUSHM_FEATURE_DISCONNECT 0x1ull /* gpushm_client_disconnect() */
#define GPUSHM_FEATURE_FDSTORE 0x2ull    /* persistent buffers survive restarts (systemd) */
/* Small buffers are carved out of shared segments (docs/segments.md): opening one in a
 * segment this process maps already costs one round trip and no driver call. */
#define GPUSHM_FEATURE_SEGMENTS 0x4ull
/* Last closes (and gpushm_buffer_close_unlink()) do not wait for the daemon's reply. */
#define GPUSHM_FEATURE_ONEWAY 0x8ull
/* Buffers carry the metadata they were created with (gpushm_create_opts.metadata). */
#define GPUSHM_FEATURE_METADATA 0x10ull
/* Images and registered graphics memory (gpushm-graphics.h). */
#define GPUSHM_FEATURE_GRAPHICS 0x20ull
/* Creates may ask for their mode bits to be kept as written (GPUSHM_CREATE_STRICT_MODE). */
#define GPUSHM_FEATURE_STRICT_MODE 0x40ull
/* cuda-ipc sync buffers are ordered by a memory fence in their allocation, which gpushmd
 * raises when a releaser dies with its write queued (docs/sync.md), instead of an IPC
 * event, which such a death leaves incomplete for ever. */
#define GPUSHM_FEATURE_IPC_FENCES 0x80ull
/* Caller-numbered releases and promises on sync buffers (gpushm_buffer_release_value(),
 * gpushm_buffer_promise()): gpushmd finds their signatures and breaks the promises of a
 * promiser whose process is gone (docs/sync.md). */
#define GPUSHM_FEATURE_PROMISES 0x100ull
/* Timelines (gpushm_timeline_create()). */
#define GPUSHM_FEATURE_TIMELINES 0x200ull
/* Frame rings (0.8): gpushm_ring_*(). */
#define GPUSHM_FEATURE_RINGS 0x400ull
/* Timelines' semaphore planes (0.8): gpushm_timeline_semaphore() and the Vulkan helpers
 * that wait and signal on the GPU (docs/sync.md#semaphore-planes). */
#define GPUSHM_FEATURE_SEMAPHORES 0x800ull
/* Weight sets (0.8): gpushm-weights.h. */
#define GPUSHM_FEATURE_WEIGHTS 0x1000ull
/* Opens that wait for their name to be made (0.8, gpushm_open_opts_t.wait_ms). */
#define GPUSHM_FEATURE_OPEN_WAIT 0x2000ull
/* Creates that name the new object's group (0.8, gpushm_create_opts_t.group). */
#define GPUSHM_FEATURE_CREATE_GROUP 0x4000ull
GPUSHM_API int gpushm_daemon_has(const gpushm_t *conn, uint64_t feature);
/* Backends the daemon can use now (bit 1 << gpushm_backend_t); creating with another
 * is answered by the daemon with the reason it lacks it.  Bit 4, the reserved backend
 * value, is set when the daemon can make events (gpushm_event_create()). */
GPUSHM_API uint32_t gpushm_daemon_backends(const gpushm_t *conn);
/* What a create naming GPUSHM_BACKEND_DEFAULT gets from this daemon (its
 * default-backend setting); GPUSHM_BACKEND_DEFAULT itself where the daemon does not say
 * (gpushmd before 0.2, whose default is host). */
GPUSHM_API gpushm_backend_t gpushm_daemon_default_backend(const gpushm_t *conn);
/* The protocol version negotiated with the daemon, and the daemon's package version. */
GPUSHM_API unsigned gpushm_protocol_version(const gpushm_t *conn);
GPUSHM_API const char *gpushm_daemon_version(const gpushm_t *conn);
/* The version of a request family ("core", "admin", "graphics", ...) the daemon serves:
 * it rises when the family gains a request or a request a field (docs/protocol.md lists
 * what each version brought).  0 for a family the daemon does not have, and for every
 * family of a daemon before 0.8, which did not say: ask gpushm_daemon_has() there. */
GPUSHM_API unsigned gpushm_daemon_family_version(const gpushm_t *conn, const char *family);

/* Bounds each later request on conn (sending it and waiting for the reply); a negative
 * timeout (GPUSHM_TIMEOUT_INFINITE), or 0, waits for ever.  A request that times out
 * leaves the connection unusable (GPUSHM_E_DISCONNECTED
 * after it): its reply could still arrive and answer the wrong request. */
GPUSHM_API int gpushm_set_timeout(gpushm_t *conn, int timeout_ms);
/* Drops the caller's handle.  The socket stays open while buffers opened through it
 * are still open; their references are released as they are closed. */
GPUSHM_API void gpushm_disconnect(gpushm_t *conn);
GPUSHM_API uint64_t gpushm_instance_id(const gpushm_t *conn);
GPUSHM_API int gpushm_ping(gpushm_t *conn);

/* Defaults (host backend, mode 0600, persistent, no flags) and opts->size. */
GPUSHM_API void gpushm_create_opts_init(gpushm_create_opts_t *opts);
/* Creates a buffer named `name` and opens it read-write.  opts NULL: defaults.
 * Fails with GPUSHM_E_EXIST if the name exists, unless GPUSHM_CREATE_OPEN_EXISTING. */
GPUSHM_API int gpushm_buffer_create(gpushm_t *conn, const char *name, uint64_t size,
                                    const gpushm_create_opts_t *opts, gpushm_buffer_t **out);
/* Opens a buffer by name or id.  Opening one this process already has open (same
 * access) returns the same handle without a round trip to the daemon. */
GPUSHM_API int gpushm_buffer_open(gpushm_t *conn, const char *name, unsigned flags,
                                  gpushm_buffer_t **out);
GPUSHM_API int gpushm_buffer_open_id(gpushm_t *conn, uint64_t id, unsigned flags,
                                     gpushm_buffer_t **out);
/* Defaults (read-write, GPUSHM_DEVICE_AUTO) and opts->size. */
GPUSHM_API void gpushm_open_opts_init(gpushm_open_opts_t *opts);
/* Opens a buffer by name, or by id where name is NULL, as gpushm_buffer_open() does;
 * opts NULL: defaults.  Since 0.7. */
GPUSHM_API int gpushm_buffer_open_ex(gpushm_t *conn, const char *name, uint64_t id,
                                     const gpushm_open_opts_t *opts, gpushm_buffer_t **out);
/* Pipelined opens and creates (since 0.8): the request goes out now and the call
 * returns; gpushm_pending_finish() takes its reply, and makes of it what
 * gpushm_buffer_open() or gpushm_buffer_create() would have returned.  Between the two
 * the caller does other work (writes the last buffer, reads the next) while the daemon
 * answers: a stream of hand-offs pays the round trips side by side, not one after the
 * other.  The daemon answers a connection's requests in the order they came; any later
 * call on the connection reads past the replies still out (keeping them for their
 * finish), so finishing out of order, or from another thread, is fine.  At most
 * GPUSHM_PENDING_MAX started and not finished on a connection at once (GPUSHM_E_LIMIT
 * past it).  Every start is finished, exactly once: it holds a reference to the
 * connection (and, once answered, to the buffer) until then.  An open of a name this
 * connection has open (same access) is answered at once, without a request.  A start
 * fails for what it checks (the arguments, the limit, a lost connection) and where the
 * request cannot be sent (GPUSHM_E_TIMEOUT, as a call's send); the daemon's answer, a
 * refusal included, comes from the finish.  The default map device is the starting
 * thread's current one, whichever thread takes the reply.  A start made before fork()
 * is the parent's: its finish in the child fails with GPUSHM_E_INVAL.  While any is out
 * in the process, idle segments are kept mapped past their limit (a reply on its way
 * may name one), and trimmed once none is. */
typedef struct gpushm_pending gpushm_pending_t;
#define GPUSHM_PENDING_MAX 16u /* GPUSHM_LIMIT_PENDING_PER_CONN */
GPUSHM_API int gpushm_buffer_open_start(gpushm_t *conn, const char *name, unsigned flags,
                                        gpushm_pending_t **out);
GPUSHM_API int gpushm_buffer_create_start(gpushm_t *conn, const char *name, uint64_t size,
                                          const gpushm_create_opts_t *opts,
                                          gpushm_pending_t **out);
/* Waits for pending's reply unless it came already, frees pending, and returns what the
 * open or create returns, the handle in *out; out NULL: the handle is closed at once
 * (a start given up on). */
GPUSHM_API int gpushm_pending_finish(gpushm_pending_t *pending, gpushm_buffer_t **out);
/* Drops one open.  The last close in the process unmaps (a carved buffer's segment stays
 * mapped while idle, see GPUSHM_FEATURE_SEGMENTS), then releases the daemon's reference
 * without waiting for its reply where the daemon offers GPUSHM_FEATURE_ONEWAY (a failure
 * is logged and counted there; older daemons answer, and the answer is returned).
 * Returns an unmap's failure, or the connection's. */
GPUSHM_API int gpushm_buffer_close(gpushm_buffer_t *buf);
/* One more open of buf, which the caller has open: what a second gpushm_buffer_open()
 * of it returns, without a round trip or a name, closed by one more
 * gpushm_buffer_close().  For whatever uses the memory after the code that opened it is
 * done with its handle: a tensor made from it (gpushm-dlpack.h), a view held by another
 * language.  GPUSHM_E_INVAL for NULL or an event; GPUSHM_E_LIMIT past
 * GPUSHM_BUFFER_REFS_MAX opens of buf in this process at once. */
GPUSHM_API int gpushm_buffer_ref(gpushm_buffer_t *buf);
#define GPUSHM_BUFFER_REFS_MAX (1u << 20)
/* Removes a name; the memory lives on until its last holder closes. */
GPUSHM_API int gpushm_unlink(gpushm_t *conn, const char *name);
/* gpushm_unlink() of buf's name — only while it still names buf — and
 * gpushm_buffer_close(), in one request.  Like the last close, it does not wait for the
 * daemon (GPUSHM_FEATURE_ONEWAY): a refusal (buf belongs to another user) is logged and
 * counted by gpushmd, not returned.  The producer's end of a hand-off. */
GPUSHM_API int gpushm_buffer_close_unlink(gpushm_buffer_t *buf);

/* Host address (host backend) or device pointer (CUDA backends). */
/* The connection buf was opened through, which holds its daemon reference (since 0.7):
 * each connection of a process has handles of its own, on the mappings they share. */
GPUSHM_API gpushm_t *gpushm_buffer_connection(const gpushm_buffer_t *buf);
GPUSHM_API void *gpushm_buffer_ptr(const gpushm_buffer_t *buf);
GPUSHM_API uint64_t gpushm_buffer_size(const gpushm_buffer_t *buf);
GPUSHM_API uint64_t gpushm_buffer_id(const gpushm_buffer_t *buf);
GPUSHM_API const char *gpushm_buffer_name(const gpushm_buffer_t *buf);
/* The device (this process's ordinal) the memory lives on, and the one it is mapped
 * for: gpushm_buffer_ptr() is for kernels and streams of the map device. */
GPUSHM_API int gpushm_buffer_device(const gpushm_buffer_t *buf);
GPUSHM_API int gpushm_buffer_map_device(const gpushm_buffer_t *buf);
GPUSHM_API gpushm_backend_t gpushm_buffer_backend(const gpushm_buffer_t *buf);
/* GPUSHM_KIND_BUFFER, or GPUSHM_KIND_IMAGE for an image (gpushm-graphics.h).  Since 0.7. */
GPUSHM_API gpushm_kind_t gpushm_buffer_kind(const gpushm_buffer_t *buf);
GPUSHM_API int gpushm_buffer_is_readonly(const gpushm_buffer_t *buf);
/* The buffer's owner (its creator's uid and gid).  Names are global: a consumer that
 * opens a name another user could have created first checks who owns what it got. */
GPUSHM_API int gpushm_buffer_owner(const gpushm_buffer_t *buf, uint32_t *uid, uint32_t *gid);
/* The metadata buf was created with (*size bytes; NULL and 0 if none), valid while buf
 * is open.  It came with the open: no round trip. */
GPUSHM_API const void *gpushm_buffer_metadata(const gpushm_buffer_t *buf, size_t *size);

/* All of the above in one call, for bindings that pay per call into C (Python's ctypes:
 * a dozen calls were a tenth of a host hand-off's Python).  The caller sets size to
 * sizeof(gpushm_buffer_desc_t) (a smaller, older struct gets the fields it has); the
 * pointers stay valid while buf is open.  Since 0.8. */
typedef struct gpushm_buffer_desc {
  uint32_t size;           /* sizeof(gpushm_buffer_desc_t), set by the caller */
  uint32_t kind;           /* gpushm_kind_t */
  uint64_t id;
  uint64_t bytes;          /* gpushm_buffer_size() */
  void *ptr;               /* gpushm_buffer_ptr() */
  const char *name;
  const void *metadata;    /* NULL if none */
  uint64_t metadata_size;
  uint32_t backend;        /* gpushm_backend_t */
  int32_t device;          /* gpushm_buffer_device() */
  int32_t map_device;      /* gpushm_buffer_map_device() */
  uint32_t read_only;      /* 1 for a read-only open */
  uint32_t owner_uid;
  uint32_t owner_gid;
} gpushm_buffer_desc_t;
#define GPUSHM_BUFFER_DESC_SIZE_V1 80u
GPUSHM_API int gpushm_buffer_describe(const gpushm_buffer_t *buf, gpushm_buffer_desc_t *desc);

/* Handing memory to another engine (NIXL/UCX registration, Vulkan and GL through the
 * graphics helpers, RDMA): one descriptor for every way, since 0.8 (docs/concepts.md,
 * "Exporting").  The calls below it (dma-buf, fabric handle, and gpushm-graphics.h's
 * memory fd) are this one with a type. */
#define GPUSHM_EXPORT_DMABUF 1u       /* fd: a dma-buf of the range (a read-write CUDA open
                                       * of cuda-fd or cuda-fabric memory) */
#define GPUSHM_EXPORT_OPAQUE_FD 2u    /* fd: the whole allocation's OPAQUE_FD (an open with
                                       * map_device GPUSHM_DEVICE_NONE of device or registered
                                       * memory); the range lies at offset in it */
#define GPUSHM_EXPORT_HOST_POINTER 3u /* ptr: this process's mapping of host memory (its
                                       * first page); the range lies at offset from it */
#define GPUSHM_EXPORT_FABRIC 4u       /* fabric_handle: a cuda-fabric buffer's (read-write) */
#define GPUSHM_EXPORT_CUDA_VA 5u      /* ptr: the buffer's device address in this process (a
                                       * CUDA open); the range lies at offset from it */
/* flags */
#define GPUSHM_EXPORT_DEDICATED 0x1u    /* the allocation is the object's alone */
#define GPUSHM_EXPORT_READ_ONLY_FD 0x2u /* the fd is open for reading only (the kernel keeps
                                         * it so: a registered memfd's read-only open) */

typedef struct gpushm_export_desc {
  uint32_t size;            /* sizeof(gpushm_export_desc_t), set by the caller */
  uint32_t type;            /* GPUSHM_EXPORT_* */
  int32_t fd;               /* DMABUF, OPAQUE_FD: new, close-on-exec, the caller's; else -1 */
  uint32_t flags;           /* GPUSHM_EXPORT_DEDICATED, _READ_ONLY_FD */
  void *ptr;                /* HOST_POINTER, CUDA_VA; else NULL */
  uint64_t offset;          /* where the range starts in what fd or ptr reaches */
  uint64_t length;          /* the range's bytes */
  uint64_t allocation_size; /* what fd or ptr reaches: import or register it whole */
  int32_t device;           /* CUDA_VA, DMABUF: this process's ordinal; else -1 */
  uint32_t access;          /* the open's GPUSHM_OPEN_READONLY / _WRITE_DISCARD */
  uint8_t device_uuid[16];  /* where the memory lives; zero for host memory */
  uint8_t fabric_handle[64]; /* FABRIC */
  uint32_t reserved[8];
} gpushm_export_desc_t;
#define GPUSHM_EXPORT_DESC_SIZE_V1 168u

/* [offset, offset + length) of buf (length 0: to its end; a dma-buf's, to the end of
 * its last page) as type says, in *out (its size set).  GPUSHM_E_UNSUPPORTED for a type
 * buf's memory or open cannot give (naming the one that can), GPUSHM_E_PERM for a
 * writable export of a read-only open, GPUSHM_E_INVAL for an empty range, one outside buf,
 * an alignment the type needs (dma-buf: whole pages), or, in a child after fork(), a
 * type other than GPUSHM_EXPORT_OPAQUE_FD and GPUSHM_EXPORT_FABRIC (the parent's
 * mappings).  Nothing is sent to the daemon. */
GPUSHM_API int gpushm_buffer_export(gpushm_buffer_t *buf, uint32_t type, uint64_t offset,
                                    uint64_t length, gpushm_export_desc_t *out);

/* Beyond one host (docs/multinode.md).  A dma-buf fd (close-on-exec, the caller's)
 * for [offset, offset + size) of a cuda-fd or cuda-fabric buffer this process has open
 * read-write: what ibv_reg_dmabuf_mr() takes (UCX and NIXL register the device pointer
 * and make their own dma-buf from it).  offset and size are multiples of the host page size, and the range lies in
 * the buffer's size rounded up to a page.  The dma-buf keeps the memory allocated
 * until it is closed, after the buffer is closed and freed too, and a carved buffer's
 * slot then goes to the next buffer of its class: deregister and close the fd before
 * closing the buffer.  GPUSHM_E_PERM on a read-only open (whoever registers a dma-buf
 * may write); GPUSHM_E_UNSUPPORTED for host and cuda-ipc buffers (the driver gives no
 * dma-buf for memory opened through legacy IPC) and devices without dma-buf support;
 * GPUSHM_E_INVAL for a range that is misaligned or outside the buffer. */
GPUSHM_API int gpushm_buffer_export_dmabuf(gpushm_buffer_t *buf, uint64_t offset, uint64_t size,
                                           int *fd_out);
#define GPUSHM_FABRIC_HANDLE_BYTES 64
/* Where the NVIDIA driver's IMEX channels are (channel0, channel1, ...): a process makes
 * or imports fabric memory only if it can open one. */
#define GPUSHM_IMEX_CHANNELS_DIR "/dev/nvidia-caps-imex-channels"
/* A cuda-fabric buffer's fabric handle, which came with a read-write open: another node
 * of the NVLink domain imports it with cuMemImportFromShareableHandle(...,
 * CU_MEM_HANDLE_TYPE_FABRIC) and maps the whole allocation read-write.  It is a bearer
 * token within an IMEX channel: whoever has the bytes and the channel has the memory.
 * GPUSHM_E_PERM on a read-only open, GPUSHM_E_INVAL for other backends. */
GPUSHM_API int gpushm_buffer_fabric_handle(const gpushm_buffer_t *buf,
                                           uint8_t handle[GPUSHM_FABRIC_HANDLE_BYTES]);

/* Named inter-process events (CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) owned
 * by the daemon on device opts->device (opts NULL: device 0, mode 0600, persistent;
 * opts->backend is ignored).  Like buffers, they are opened once per process and
 * kept while anyone holds them.  Streams are CUstream values (NULL: the legacy
 * default stream). */
GPUSHM_API int gpushm_event_create(gpushm_t *conn, const char *name,
                                   const gpushm_create_opts_t *opts, gpushm_event_t **out);
GPUSHM_API int gpushm_event_open(gpushm_t *conn, const char *name, gpushm_event_t **out);
GPUSHM_API int gpushm_event_close(gpushm_event_t *event);
/* Records the event on stream (cuEventRecord), which must be a stream of the event's
 * own device (GPUSHM_E_UNSUPPORTED otherwise, naming both). */
GPUSHM_API int gpushm_event_record(gpushm_event_t *event, void *stream);
/* Makes stream wait for the event's most recent record, by any process
 * (cuStreamWaitEvent); an event never recorded does not hold the stream. */
GPUSHM_API int gpushm_event_wait(gpushm_event_t *event, void *stream);
GPUSHM_API uint64_t gpushm_event_id(const gpushm_event_t *event);
GPUSHM_API const char *gpushm_event_name(const gpushm_event_t *event);

/* Acquire/release on buffers created with GPUSHM_CREATE_SYNC, modelled on
 * cuGraphicsMapResources/UnmapResources, stream-ordered without a CPU round trip to
 * the daemon.  Each release is numbered 1, 2, 3, ... per buffer, across processes.
 *
 * gpushm_buffer_release() orders the release behind the work already queued on
 * stream, then publishes the next number, returned in *seq (may be NULL).
 * gpushm_buffer_acquire(buf, stream, seq, timeout_ms) waits in this thread until
 * release number seq has been published (queued by its releaser, not done by the
 * GPU), then makes stream wait until that release's work is done.  seq 0 means "the
 * latest release, if any": nothing released yet means nothing to wait for.
 * timeout_ms < 0 waits for ever; GPUSHM_E_TIMEOUT if seq is not published in time.
 *
 * How the GPU side is ordered depends on the backend (gpushm_buffer_sync_method()):
 *  - cuda-fd, and cuda-ipc since 0.7.1: a memory fence, 8 bytes of the buffer's own
 *    allocation past its data.  Release enqueues a write of its number there
 *    (cuStreamWriteValue64); acquire makes stream wait until it reaches seq
 *    (cuStreamWaitValue64).  A cuda-fd buffer's works for every uid its mode admits and
 *    across PID namespaces; a cuda-ipc buffer's for whoever its memory opens for
 *    (legacy IPC: one trust domain).  Where the device lacks 64-bit stream memory
 *    operations, the fence is written and waited on by the CPU instead: release waits
 *    for stream to finish, acquire for the fence — correct, not asynchronous.  A
 *    releaser whose process dies with its fence write still queued (SIGKILL, a crash)
 *    takes the write with it; once that process has exited, gpushmd raises the fence
 *    to the dead releaser's release number (never higher, and only if it is below), so
 *    streams that acquire it go on, with whatever the dead releaser's work left in the
 *    buffer.  A releaser whose connection ended while its process lives is waited for:
 *    its write still lands.  Limits and the rest in docs/sync.md.
 *    Close a buffer only after the streams that used it are done; the last close waits
 *    for this process's own queued fence operations.
 *  - cuda-ipc buffers created by a library before 0.7.1: an inter-process event,
 *    recorded by release and waited on by acquire (cuStreamWaitEvent); only the
 *    daemon's uid (or root) can open it.  Not repaired: a releaser that dies before its
 *    record runs leaves the event incomplete for ever, later records too.
 *  - host: stream must be NULL; release publishes with release ordering and acquire
 *    waits with acquire ordering (a CPU fence).
 *
 * Streams and devices: NULL means the legacy default stream of the buffer's map
 * device.  Fences are reached only from the map device: a stream of another device is
 * refused (GPUSHM_E_UNSUPPORTED, naming both devices) before anything is queued — open
 * the buffer for that device too and use that handle.  An IPC event (cuda-ipc buffers
 * made by a library before 0.7.1) is recorded only on streams of the device the memory
 * lives on, and waited on by streams of any.
 *
 * Releasing is a write: it needs a read-write open (GPUSHM_E_PERM on a read-only one,
 * whose control block is mapped read-only so that it cannot forge the sequence).
 *
 * One releaser at a time: a release by another process between your acquire's
 * check and its wait is waited for too (harmless), but two producers releasing
 * concurrently leave only the later record in the event (or the fence), so serialise
 * producers (an acquire before each write does). */
GPUSHM_API int gpushm_buffer_release(gpushm_buffer_t *buf, void *stream, uint64_t *seq);
GPUSHM_API int gpushm_buffer_acquire(gpushm_buffer_t *buf, void *stream, uint64_t seq,
                                     int timeout_ms);
/* The number of the latest published release (0: none yet, or not a sync buffer). */
GPUSHM_API uint64_t gpushm_buffer_release_seq(const gpushm_buffer_t *buf);

/* Caller-numbered releases and promises (0.8, GPUSHM_FEATURE_PROMISES; fence and host
 * sync buffers, not those ordered by an IPC event: GPUSHM_E_UNSUPPORTED).  The buffer's
 * counter is the release sequence above: the releaser picks the value instead of taking
 * the next number, and a waiter waits for "counter >= value".  Both kinds of release
 * mix on one buffer.  docs/sync.md has the whole contract.
 *
 * gpushm_buffer_release_value() is gpushm_buffer_release() with value as the number:
 * GPUSHM_E_INVAL if value is not above the counter (values only grow), while another
 * connection's promise is live, or when another release overtook it (one releaser at a
 * time: its fence write is queued all the same).
 *
 * gpushm_buffer_acquire_value() makes stream wait until the counter reaches value.  A
 * fence buffer's wait is queued on the GPU at once if value is released or promised
 * (no CPU wait, no round trip); otherwise this thread first waits, up to timeout_ms
 * (< 0: for ever), for one of the two, then GPUSHM_E_TIMEOUT.  A host buffer's acquire
 * (and the CPU-fence fallback's) waits in this thread until the counter (the fence)
 * reaches value, up to timeout_ms.  GPUSHM_E_LOST if value was
 * reached because its promiser is gone (see below): the stream is ordered all the
 * same, and the buffer holds whatever the lost promiser's work left.
 *
 * gpushm_buffer_promise(buf, upto) promises that this connection will release every
 * value up to upto (above the counter), which makes it the counter's only signaller
 * while the promise is live: others' releases are refused, and waits for promised values
 * go to the GPU at once.  One round trip: gpushmd records it.  A promise only grows
 * (GPUSHM_E_INVAL otherwise, while another connection's promise is live — one promiser
 * at a time — and under a control block whose header a holder overwrote); GPUSHM_E_PERM
 * on a read-only open.  gpushmd breaks a promise not kept — the counter is raised to
 * upto, and values above what was released count as lost — once the promiser's process
 * has exited (a crash, SIGKILL) or its connection closed its last handle of the buffer.
 *
 * gpushm_buffer_value_lost() says whether value was reached through a broken promise
 * (1) or not (0), for a wait queued before the break; a negative GPUSHM_E_* for what is
 * not a sync buffer. */
GPUSHM_API int gpushm_buffer_release_value(gpushm_buffer_t *buf, void *stream, uint64_t value);
GPUSHM_API int gpushm_buffer_acquire_value(gpushm_buffer_t *buf, void *stream, uint64_t value,
                                           int timeout_ms);
GPUSHM_API int gpushm_buffer_promise(gpushm_buffer_t *buf, uint64_t upto);
GPUSHM_API int gpushm_buffer_value_lost(const gpushm_buffer_t *buf, uint64_t value);

/* What a sync buffer's control block says now (0.8, GPUSHM_FEATURE_PROMISES; gpushmctl
 * show prints it): the counter; the live promise (promised_upto 0: none) and its
 * promiser's client id (as gpushm_clients() lists it); the latest broken promise's lost
 * values (lost_from < v <= lost_upto; both 0: none) and its promiser.  Read from memory
 * every read-write holder can write: what it says, not what gpushmd recorded.
 * GPUSHM_E_INVAL for what is not a sync buffer, GPUSHM_E_UNSUPPORTED from a daemon
 * without the feature. */
typedef struct gpushm_sync_state {
  uint64_t counter;
  uint64_t promised_upto;
  uint32_t promiser_client;
  uint32_t lost_client;
  uint64_t lost_from;
  uint64_t lost_upto;
} gpushm_sync_state_t;
GPUSHM_API int gpushm_buffer_sync_state(const gpushm_buffer_t *buf, gpushm_sync_state_t *out);

typedef enum {
  GPUSHM_SYNC_NONE = 0,  /* not a sync buffer */
  GPUSHM_SYNC_HOST,      /* host memory: CPU release/acquire ordering */
  GPUSHM_SYNC_IPC_EVENT, /* an inter-process CUDA event: cuda-ipc buffers made by a
                          * library before 0.7.1 */
  GPUSHM_SYNC_GPU_FENCE, /* cuda-fd, cuda-ipc: GPU-written, GPU-waited memory fence */
  GPUSHM_SYNC_CPU_FENCE, /* fallback: the same fence written/waited by the CPU */
} gpushm_sync_method_t;

/* How this process orders releases and acquires of buf; *why (may be NULL) receives
 * why a fallback was taken ("" otherwise), valid while buf is open. */
GPUSHM_API gpushm_sync_method_t gpushm_buffer_sync_method(const gpushm_buffer_t *buf,
                                                          const char **why);

/* Timelines (0.8, GPUSHM_FEATURE_TIMELINES; docs/sync.md): a named 64-bit counter
 * that the CPU and CUDA streams of any process signal and wait on, with an owner and a
 * mode like every object.  Values only grow; a wait for v ends once the counter is at
 * least v.  The counter is a fence in the timeline's control block (one page of host
 * memory): the CPU reads and writes it, and a CUDA stream writes it behind its work
 * (cuStreamWriteValue64) and waits on it (cuStreamWaitValue64) through the page,
 * registered with CUDA in this process on first use.  No round trip to gpushmd per
 * value, and no CPU wait for a value that is signalled or promised.
 *
 * Signalling is a write: it needs a read-write open (GPUSHM_E_PERM on a read-only one,
 * whose control block is mapped read-only, to the CPU and to CUDA).
 *
 * gpushm_timeline_signal() signals value now, from the CPU; _signal_stream() once the
 * work queued on stream is done.  value must be above every value signalled before
 * (GPUSHM_E_INVAL: values only grow), and not owed by another connection's promise.
 * One signaller at a time, and a stream's signals in order.
 *
 * gpushm_timeline_wait() waits in this thread until the counter reaches value, up to
 * timeout_ms (< 0: for ever; GPUSHM_E_TIMEOUT).  _wait_stream() makes stream wait for
 * it on the GPU; it is queued at once if value is signalled or promised, else this
 * thread first waits, up to timeout_ms, for one of the two.  Either returns
 * GPUSHM_E_LOST when value was reached because the connection that promised it is gone
 * (gpushm_timeline_value_lost() says so later too): ordered all the same.
 *
 * gpushm_timeline_promise() promises every value up to upto, as
 * gpushm_buffer_promise() does for sync buffers: waits for those values go to the GPU
 * at once, others' signals are refused while it is live, and gpushmd raises the counter
 * to upto, marking the values not signalled lost, once the promiser's process exits or
 * its connection closes its last handle of the timeline.
 *
 * Streams: NULL is the legacy default stream of the current context's device (of device
 * 0 without one).  Where a device lacks 64-bit stream memory operations or cannot map
 * the page, a stream signal waits for its stream on the CPU and a stream wait waits on
 * the CPU (gpushm_timeline_sync_method() says which and why): correct, not
 * asynchronous.  Close a timeline only after the streams that used it are done; the
 * last close waits for this process's own queued operations. */
typedef struct gpushm_timeline gpushm_timeline_t;
/* opts: mode, lifetime, GPUSHM_CREATE_OPEN_EXISTING; no backend, size or metadata. */
GPUSHM_API int gpushm_timeline_create(gpushm_t *conn, const char *name,
                                      const gpushm_create_opts_t *opts, gpushm_timeline_t **out);
/* flags: GPUSHM_OPEN_READONLY or 0. */
GPUSHM_API int gpushm_timeline_open(gpushm_t *conn, const char *name, unsigned flags,
                                    gpushm_timeline_t **out);
GPUSHM_API int gpushm_timeline_close(gpushm_timeline_t *tl);
/* Removes its name (if it still names this timeline and the caller may), then closes. */
GPUSHM_API int gpushm_timeline_close_unlink(gpushm_timeline_t *tl);
GPUSHM_API int gpushm_timeline_signal(gpushm_timeline_t *tl, uint64_t value);
GPUSHM_API int gpushm_timeline_signal_stream(gpushm_timeline_t *tl, void *stream, uint64_t value);
GPUSHM_API int gpushm_timeline_wait(gpushm_timeline_t *tl, uint64_t value, int timeout_ms);
GPUSHM_API int gpushm_timeline_wait_stream(gpushm_timeline_t *tl, void *stream, uint64_t value,
                                           int timeout_ms);
GPUSHM_API int gpushm_timeline_promise(gpushm_timeline_t *tl, uint64_t upto);
/* The value the counter has reached (0 for NULL). */
GPUSHM_API uint64_t gpushm_timeline_value(const gpushm_timeline_t *tl);
/* 1 if value was reached through a broken promise, 0 if not, or a negative GPUSHM_E_*. */
GPUSHM_API int gpushm_timeline_value_lost(const gpushm_timeline_t *tl, uint64_t value);
/* As gpushm_buffer_sync_state(): counter is the latest value signalled (queued: a
 * stream's work may still be running), promise and losses; the reached value is
 * gpushm_timeline_value(). */
GPUSHM_API int gpushm_timeline_state(const gpushm_timeline_t *tl, gpushm_sync_state_t *out);
/* How this process's streams signal and wait on tl: GPUSHM_SYNC_GPU_FENCE, or
 * GPUSHM_SYNC_CPU_FENCE with *why saying why (GPUSHM_SYNC_HOST before any stream use). */
GPUSHM_API gpushm_sync_method_t gpushm_timeline_sync_method(const gpushm_timeline_t *tl,
                                                            const char **why);
GPUSHM_API uint64_t gpushm_timeline_id(const gpushm_timeline_t *tl);
GPUSHM_API const char *gpushm_timeline_name(const gpushm_timeline_t *tl);

/* Semaphore planes (0.8, GPUSHM_FEATURE_SEMAPHORES; docs/sync.md#semaphore-planes): a
 * Vulkan timeline semaphore (exported as OPAQUE_FD) that every signaller of the timeline
 * signals beside its counter, so that Vulkan queues wait for values on the GPU.
 * CUDA cannot make one: a process with a VkDevice mints it and registers it
 * (gpushm_vk_import_timeline() in gpushm-vulkan.h does all of this); from then on
 * gpushm_timeline_signal[_stream]() signal it too, in any process.
 *
 * gpushm_timeline_semaphore(): *fd_out a new fd of the plane (each import into Vulkan or
 * GL consumes one) and *uuid_out the GPU it lives on; GPUSHM_E_NOENT where there is
 * none, GPUSHM_E_PERM for a read-only open unless its registrar gave it to readers
 * (flags GPUSHM_SEMAPHORE_TO_READERS: they can then signal it too, as a semaphore has no
 * read-only handle).  register_fd >= 0 (with device_uuid, the GPU it lives on; the fd
 * stays the caller's) first makes that semaphore the plane: returns 1 when it did, 0
 * when the timeline had one already, whose fd comes back instead.
 *
 * A Vulkan queue signals value itself: gpushm_timeline_signal_external() publishes it
 * (as a signal does; refused as a signal would be), for a submission that writes the
 * fence (gpushm_timeline_fence_page(): the control block's page, 4096 bytes, and the
 * fence's offset in it; GPUSHM_E_PERM for a read-only open) and signals the semaphore.
 * gpushm_timeline_wait_signalled() returns once value is signalled or promised, so that
 * a GPU wait for it will end: what to call before queuing one. */
#define GPUSHM_SEMAPHORE_TO_READERS 0x1u
GPUSHM_API int gpushm_timeline_semaphore(gpushm_timeline_t *tl, int register_fd,
                                         const uint8_t *device_uuid, unsigned flags,
                                         int *fd_out, uint8_t uuid_out[16]);
GPUSHM_API int gpushm_timeline_signal_external(gpushm_timeline_t *tl, uint64_t value);
GPUSHM_API int gpushm_timeline_wait_signalled(gpushm_timeline_t *tl, uint64_t value,
                                              int timeout_ms);
GPUSHM_API int gpushm_timeline_fence_page(gpushm_timeline_t *tl, void **page,
                                          size_t *fence_offset);
/* 1 if tl has a semaphore plane now (its control block says so), 0 if not or NULL. */
GPUSHM_API int gpushm_timeline_has_semaphore(const gpushm_timeline_t *tl);

/* Frame rings (0.8, GPUSHM_FEATURE_RINGS; docs/rings.md): slots of memory that a
 * producer fills and consumers read in turn, as one named object, ordered by timelines
 * with no round trip to gpushmd per frame and, on CUDA streams, no CPU wait.
 *
 * Frames are numbered from 1; frame f lives in slot (f - 1) % slots.  The ring's ready
 * timeline is the frame last presented; each consumer has a done timeline of its own
 * (made by gpushmd when it opens the ring, its alone to signal, its producers' to read),
 * the frame it last released.  A producer fills frame f only once every consumer
 * attached has released frame f - slots: a slow consumer slows the producer, none is
 * skipped.  A consumer takes frames presented after it opened the ring.
 *
 * The producer: gpushm_ring_acquire_slot() waits (up to timeout_ms, < 0 for ever) until
 * the next frame's slot is free of every consumer; _stream() makes stream wait for it
 * on the GPU instead.  Write the slot, then gpushm_ring_present() (now, from the CPU) or
 * _present_stream() (once stream's work is done).  One frame acquired at a time, and
 * one producer at a time: the first that acquires promises the frames ahead
 * (GPUSHM_RING_PROMISE_AHEAD), and others' presents are refused while it lives.
 *
 * A consumer: gpushm_ring_acquire_frame() waits until the next frame is presented
 * (flags GPUSHM_RING_LATEST: the latest presented, skipping older ones); _stream()
 * makes stream wait for it on the GPU.  Read the slot, then gpushm_ring_release() or
 * _release_stream(): that frame and every one before it are free to fill again.
 *
 * A producer that dies or closes its last handle: its consumers' waits end within
 * milliseconds with GPUSHM_E_LOST ("signaller lost").  A consumer that dies or closes
 * the ring is no longer waited for.  Open a ring read-write to produce, read-only to
 * consume: consumers need read access alone, and no consumer can signal another's done
 * timeline or the ready one.  A ring is used by one thread at a time; it lives until
 * unlinked (or its creator's session ends), and not across a restart of gpushmd. */
typedef struct gpushm_ring gpushm_ring_t;

typedef struct gpushm_ring_frame {
  uint64_t frame;  /* its number, from 1 */
  uint32_t slot;   /* (frame - 1) % slots */
  uint64_t offset; /* of its slot, in the ring's memory */
} gpushm_ring_frame_t;

#define GPUSHM_RING_SLOTS_MAX 64u    /* GPUSHM_LIMIT_RING_SLOTS */
#define GPUSHM_RING_CONSUMERS_MAX 32u /* GPUSHM_LIMIT_RING_CONSUMERS */
#define GPUSHM_RING_PROMISE_AHEAD 4096u
/* gpushm_ring_open() flags: produce (the ring opened read-write), else consume
 * (read-only); observe: read-only, attached to nothing (its counters and state, for
 * tools: it takes no frames, and nobody waits for it), the memory not mapped. */
#define GPUSHM_RING_PRODUCER 0x100u
#define GPUSHM_RING_OBSERVER 0x200u
/* ... and the memory left unmapped (map device GPUSHM_DEVICE_NONE) for a graphics API
 * to import: gpushm_buffer_memory_info() of gpushm_ring_buffer(), slots at
 * gpushm_ring_frame_t.offset (host memory is mapped all the same). */
#define GPUSHM_RING_UNMAPPED 0x400u
/* gpushm_ring_acquire_frame() flags */
#define GPUSHM_RING_LATEST 0x1u

/* slots of slot_size bytes each (a slot starts every gpushm_ring_slot_stride() bytes).
 * opts: backend, device, mode, lifetime, metadata, map device; no sync, no
 * open-existing.  The creator is a producer. */
GPUSHM_API int gpushm_ring_create(gpushm_t *conn, const char *name, uint32_t slots,
                                  uint64_t slot_size, const gpushm_create_opts_t *opts,
                                  gpushm_ring_t **out);
/* flags: GPUSHM_RING_PRODUCER or 0 (a consumer), and GPUSHM_MAP_DEVICE(n). */
GPUSHM_API int gpushm_ring_open(gpushm_t *conn, const char *name, unsigned flags,
                                gpushm_ring_t **out);
/* A consumer's close: its queued releases are let finish first (as a timeline's close
 * does), then it stops being waited for. */
GPUSHM_API int gpushm_ring_close(gpushm_ring_t *ring);
GPUSHM_API int gpushm_ring_close_unlink(gpushm_ring_t *ring);
/* A producer detaches a consumer that holds frames too long: consumer is the number a
 * timed-out gpushm_ring_acquire_slot() names (its done timeline's id).  It is waited
 * for no more, at once; its next acquire fails with GPUSHM_E_PERM ("evicted"). */
GPUSHM_API int gpushm_ring_evict(gpushm_ring_t *ring, uint64_t consumer);
GPUSHM_API int gpushm_ring_acquire_slot(gpushm_ring_t *ring, int timeout_ms,
                                        gpushm_ring_frame_t *out);
GPUSHM_API int gpushm_ring_acquire_slot_stream(gpushm_ring_t *ring, void *stream, int timeout_ms,
                                               gpushm_ring_frame_t *out);
GPUSHM_API int gpushm_ring_present(gpushm_ring_t *ring, const gpushm_ring_frame_t *frame);
GPUSHM_API int gpushm_ring_present_stream(gpushm_ring_t *ring, void *stream,
                                          const gpushm_ring_frame_t *frame);
GPUSHM_API int gpushm_ring_acquire_frame(gpushm_ring_t *ring, unsigned flags, int timeout_ms,
                                         gpushm_ring_frame_t *out);
GPUSHM_API int gpushm_ring_acquire_frame_stream(gpushm_ring_t *ring, void *stream,
                                                unsigned flags, int timeout_ms,
                                                gpushm_ring_frame_t *out);
GPUSHM_API int gpushm_ring_release(gpushm_ring_t *ring, const gpushm_ring_frame_t *frame);
GPUSHM_API int gpushm_ring_release_stream(gpushm_ring_t *ring, void *stream,
                                          const gpushm_ring_frame_t *frame);
GPUSHM_API uint32_t gpushm_ring_slots(const gpushm_ring_t *ring);
GPUSHM_API uint64_t gpushm_ring_slot_size(const gpushm_ring_t *ring);
GPUSHM_API uint64_t gpushm_ring_slot_stride(const gpushm_ring_t *ring);
/* Where slot's bytes are, for this process: a host address (host backend) or a device
 * pointer on the map device (CUDA backends); NULL for a slot out of range or memory
 * opened unmapped (GPUSHM_DEVICE_NONE, a graphics importer's). */
GPUSHM_API void *gpushm_ring_slot_ptr(const gpushm_ring_t *ring, uint32_t slot);
/* The ring's memory as a buffer handle, the ring's (not to be closed): for
 * gpushm_buffer_export(), DLPack and the graphics helpers, which take slots at
 * gpushm_ring_frame_t.offset. */
GPUSHM_API gpushm_buffer_t *gpushm_ring_buffer(gpushm_ring_t *ring);
/* The frame last presented and reached (0: none yet); consumers attached now, and how
 * many of them registered a ready plane (their queues wait on the GPU). */
GPUSHM_API uint64_t gpushm_ring_presented(const gpushm_ring_t *ring);
GPUSHM_API uint32_t gpushm_ring_consumers(const gpushm_ring_t *ring);
GPUSHM_API uint32_t gpushm_ring_consumer_planes(const gpushm_ring_t *ring);
GPUSHM_API int gpushm_ring_is_producer(const gpushm_ring_t *ring);
/* The ready timeline's state, as gpushm_timeline_state(): the frame last presented
 * (counter), the producer's promise, frames lost with a producer. */
GPUSHM_API int gpushm_ring_state(const gpushm_ring_t *ring, gpushm_sync_state_t *out);
GPUSHM_API uint64_t gpushm_ring_id(const gpushm_ring_t *ring);
GPUSHM_API const char *gpushm_ring_name(const gpushm_ring_t *ring);

/* Consumers whose queues wait on the GPU (0.8, GPUSHM_FEATURE_SEMAPHORES;
 * docs/rings.md#vulkan-consumers; gpushm_vk_attach_ring() in gpushm-vulkan.h does the
 * registration).  A consumer registers a Vulkan timeline semaphore of its own (fd, an
 * OPAQUE_FD export; the fd stays the caller's) on the GPU device_uuid names, before it
 * holds a frame: the ring's producers signal it to every frame they present beside the
 * ready counter (through CUDA, on their stream), and gpushmd to what a lost producer
 * promised.  Frames presented before it was registered are skipped (released).  Mint
 * it at gpushm_ring_presented() or below.  No other consumer can signal it; producers
 * can, as they can the ready counter.  Once: GPUSHM_E_EXIST for a second.
 *
 * gpushm_ring_acquire_frame_external() returns the next frame once it is presented or
 * promised (no CPU wait while a producer keeps ahead): the caller's queue waits for the
 * semaphore to reach out->frame.  GPUSHM_E_LOST: out is the last frame its producer's
 * loss covers; release it as any other.  gpushm_ring_release_external() publishes a
 * release that the caller's queue performs: a signal of the done timeline's plane
 * (docs/rings.md#done-planes; gpushm_vk_attach_ring() registers it, and mirrors it into
 * the fence), or a write of frame into the done timeline's fence
 * (gpushm_timeline_fence_page() of gpushm_ring_done_timeline(), the consumer's own, not
 * to be closed) after its reads of the slot. */
GPUSHM_API int gpushm_ring_register_semaphore(gpushm_ring_t *ring, int fd,
                                              const uint8_t device_uuid[16]);
GPUSHM_API int gpushm_ring_acquire_frame_external(gpushm_ring_t *ring, unsigned flags,
                                                  int timeout_ms, gpushm_ring_frame_t *out);
GPUSHM_API int gpushm_ring_release_external(gpushm_ring_t *ring,
                                            const gpushm_ring_frame_t *frame);
GPUSHM_API gpushm_timeline_t *gpushm_ring_done_timeline(gpushm_ring_t *ring);

/* The buffer list, connected clients, statistics and gpushm_client_disconnect() are
 * in gpushm-admin.h. */

#ifdef __cplusplus
}
#endif
#endif /* GPUSHM_H */
