/* SPDX-License-Identifier: MIT */
/* What the registry's callers pass it and get back: the settings, a create's arguments,
 * a ready export, an object's description, totals, and the store persistent objects
 * wait in.  The registry itself is opaque to them (registry.h). */
#ifndef GPUSHMD_REGISTRY_TYPES_H
#define GPUSHMD_REGISTRY_TYPES_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "backends/backend.h"
#include "formats.h"
#include "gpushm_limits.h"
#include "registry/object.h"

/* default-backend = auto: what registry_set_auto_backend() said (cuda-fd where the
 * daemon's first GPU can share memory as fd capabilities, else host).  What the system
 * service's installed settings ask for. */
#define REG_DEFAULT_BACKEND_AUTO (-1)

struct reg_limits {
  uint32_t max_buffers_per_uid;
  uint64_t max_bytes_per_uid; /* 0: none */
  uint32_t default_mode;
  uint64_t host_budget;       /* host memory of all buffers together; 0: none */
  uint64_t max_host_bytes_per_uid; /* 0: none */
  int default_backend;        /* what PROTO_BACKEND_DEFAULT means; 0: host;
                               * REG_DEFAULT_BACKEND_AUTO: see registry_default_backend() */
  /* Legacy CUDA IPC handles are bearer tokens any local process can forge: off, they
   * are neither created nor exported. */
  bool allow_legacy_ipc;
  uint64_t pool_bytes; /* empty segments kept warm per class */
  bool strict_modes;   /* every create as if it asked for strict_mode */
  /* device memory one uid may hold on each device, by ordinal; 0: none (the composition
   * root derives it from each device's size: max-device-bytes-per-uid) */
  uint64_t max_device_bytes_per_uid[GPUSHM_LIMIT_DEVICES];
};

struct reg_create_args {
  enum reg_kind kind;
  const char *name;
  uint64_t size; /* events: 0 */
  int backend; /* buffers: enum proto_backend; 0 = the default backend */
  int device;
  uint32_t mode; /* 0 = default */
  int lifetime;
  bool open_existing;
  bool sync;
  bool strict_mode; /* refuse mode bits the backend cannot keep (check_mode_kept) */
  bool has_group;   /* the object's group is group (one the creator belongs to) */
  gid_t group;
  /* A cuda-ipc sync buffer gets a fence, not an IPC event (reg_policy.ipc_fences). */
  bool ipc_fence;
  const uint8_t *metadata; /* copied; GPUSHM_LIMIT_METADATA bytes at most */
  size_t metadata_len;
  /* An image (kind_image.c): its description, checked and completed (image_check());
   * size is its linear bytes. */
  const struct image_params *image;
  /* Registering (kind_external.c): the memory, whose fd (the request's) stays the
   * caller's, and what an importer must repeat; image as above, any tiling. */
  const struct reg_external *external;
  /* A ring (kind_ring.c): its slots; size is one slot's (or its image's) bytes. */
  uint32_t ring_slots;
  /* The registry's own creates (a ring consumer's done timeline): a name clients cannot
   * spell, so that none can take it first or open it by name. */
  bool reserved_name;
  /* A weight-set generation (kind_weights.c), published under name. */
  struct reg_weights_args *weights;
};

/* A publish (PublishRequest): the manifest (the request's fd, the caller's), the buffers
 * by id, and what the registry found for them. */
struct reg_weights_args {
  int manifest_fd;
  uint64_t manifest_size;
  uint32_t n_tensors;
  const uint64_t *buffer_ids;
  uint32_t n_buffers;
  uint64_t after; /* nonzero: only if the name denotes this generation now */
  /* the registry's: the generation the name denotes now (NULL: the first), and the
   * buffers buffer_ids name */
  struct reg_object *previous;
  struct reg_object **buffers;
};

/* A weight-set generation as listings and opens show it. */
struct reg_weights_info {
  uint64_t generation, newest, manifest_size;
  uint32_t n_tensors;
};

/* A ready export: what a client is sent to reach an object it now holds a reference
 * to.  The fds are the caller's: the memory's own (if its backend has one), then the
 * control block's for a sync buffer. */
struct reg_export {
  struct reg_object *buffer;
  bool created; /* by this create, not joined */
  bool read_only;
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME];
  unsigned n_fds;
  uint8_t handle[64]; /* the memory's handle bytes (backends that have them), or the event's */
  size_t handle_len;
  uint8_t event_handle[64]; /* a device sync buffer's inter-process event */
  size_t event_handle_len;
  uint64_t fence_offset; /* a cuda-fd sync buffer's fence in its allocation */
  /* Carved buffers: where in its segment; fds and handle are the segment's, and come
   * only when attached (the client did not map it, with this access, over this
   * connection: it is counted as mapping it from here on). */
  uint64_t segment_id, segment_offset, segment_size;
  /* A ring's geometry (slot i at ring_slot_stride * i). */
  uint32_t ring_slots;
  uint64_t ring_slot_size, ring_slot_stride;
  bool segment_attached;
  bool clear; /* created in a slot of device memory that the creator clears */
};

/* A record's name, NUL included: systemd's FDNAME takes 255 characters, less the
 * store's own prefix (server/persist.c). */
#define REG_RECORD_MAX 248

/* Where persistent objects wait out a restart of gpushmd (systemd's fd store, which
 * server/persist.c speaks to): records, each a name a kind makes up and one fd. */
struct reg_store {
  void *ctx;
  /* Keeps a copy of fd under record (fd stays the caller's): 0 or a negative errno. */
  int (*add)(void *ctx, const char *record, int fd);
  void (*remove)(void *ctx, const char *record);
  /* After a restart: the fd kept under record, now the caller's (its record stays until
   * removed); -1 when there is none. */
  int (*take)(void *ctx, const char *record);
};


/* How an object presents itself in listings, replies and logs, whatever its kind. */
struct reg_description {
  const char *kind;  /* "buffer", "sync buffer", "event" */
  int backend;       /* enum proto_backend, as listings spell it (an event: REG_EVENT_BACKEND) */
  bool sync;
  bool fenced;       /* a sync buffer ordered by a fence in its memory (fence repair) */
  uint32_t promiser; /* the client whose promise it recorded last (0: none) */
  uint64_t segment_id; /* 0: not carved */
  const struct image_params *image;       /* an image's description; NULL otherwise */
  const struct reg_external *external;    /* registered memory; NULL otherwise */
  uint32_t ring_slots, ring_consumers;    /* a ring's; 0 otherwise */
  uint64_t ring_slot_size, ring_slot_stride;
  const struct reg_weights_info *weights; /* a weight-set generation's; NULL otherwise */
};

/* A promise gpushmd broke for a promiser that is gone: the values (lost_from, upto]
 * count as lost; the fence held fence_was (0 with no fence, or where it was there). */
struct reg_broken_promise {
  uint64_t lost_from, upto, fence_was;
};

/* A dead releaser's fence repair (registry_raise_fence()). */
struct reg_raised_fence {
  uint64_t seq;    /* its latest published release (0: none of the kept ones) */
  uint64_t was;    /* the fence before the raise, or as it stands when not yet */
  uint64_t before; /* the latest release before seq by another releaser, waited for (0: none
                    * the control block still shows) */
};

/* A semaphore plane, as a holder receives it (registry_semaphore()). */
/* A holder's request for a semaphore plane (SemaphoreRequest). */
struct reg_semaphore_args {
  uint32_t client_id;
  bool read_write;     /* the holder's access */
  int fd;              /* >= 0: register that semaphore */
  const uint8_t *uuid; /* with fd: its device's (16 bytes) */
  bool to_readers;
  uint64_t consumer;   /* a ring's producer: that consumer's plane (its done timeline's id) */
};

struct reg_semaphore {
  int fd; /* the caller's to send or close */
  uint8_t device_uuid[16];
  bool to_readers, registered;
  uint64_t from; /* a ring consumer's registration: producers signal frames above it */
};

/* Segments of one (backend, device), as stats shows them. */
struct reg_segment_usage {
  int backend, device;
  uint64_t segments, bytes, bytes_used, mappings; /* holding buffers or mapped */
  uint64_t pooled, pooled_bytes;                  /* empty ones kept warm */
  uint64_t carved, driver_allocs;                 /* buffers carved; segment allocations */
};

/* The registry's totals, for stats and status lines. */
struct reg_totals {
  size_t objects;
  uint32_t linked;
  uint64_t bytes_allocated;
  uint64_t host_bytes;
  uint64_t next_id;
};

/* Objects and their bytes by where they are (listed backend, device) and, for images,
 * by format and tiling: kept as objects come and go, since summing them for each stats
 * request took ~2.7 ms of the only thread with 100,000 buffers (issue 36).  An event's
 * listed backend is REG_EVENT_BACKEND; device -1 (host) is place[.][0]. */
#define REG_EVENT_BACKEND 4 /* the wire's BACKEND_CUDA_EVENT */
#define REG_TALLY_BACKENDS ((int)GPUSHM_BACKEND_COUNT + 1)
#define REG_TALLY_DEVICES ((int)GPUSHM_LIMIT_DEVICES + 1)
#define REG_TALLY_FORMATS 32
struct reg_count {
  uint64_t objects, bytes;
};
struct reg_tally {
  struct reg_count place[REG_TALLY_BACKENDS][REG_TALLY_DEVICES];
  struct reg_count image[REG_TALLY_FORMATS][2]; /* [format][IMAGE_TILING_*] */
};

#endif
