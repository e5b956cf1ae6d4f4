/* SPDX-License-Identifier: MIT */
/* The daemon's registry, the only owner of shared objects: names and ids (names.h),
 * references per client, per-uid quotas (quota.h), lifetimes.  What an object holds
 * outside the registry (memory, segments' slots, events, sync objects) belongs to its
 * kind (kind.h), and the memory to the backends the composition root registers.  Knows
 * nothing of sockets or of the protocol; a client is a credential set with a list of
 * holdings, and what its library can take comes with each call (struct reg_policy). */
#ifndef GPUSHMD_REGISTRY_H
#define GPUSHMD_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "backends/backend.h"
#include "backends/event.h"
#include "gpushm_limits.h"
#include "registry/names.h"
#include "registry/object.h"
#include "registry/quota.h"
#include "registry/segment.h"

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
  int default_backend;        /* what GPUSHM_BACKEND_DEFAULT means; 0: host;
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
  int backend; /* buffers: gpushm_backend_t; 0 = the default backend */
  int device;
  uint32_t mode; /* 0 = default */
  int lifetime;
  bool open_existing;
  bool sync;
  bool strict_mode; /* refuse mode bits the backend cannot keep (check_mode_kept) */
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
  bool segment_attached;
  bool clear; /* created in a slot of device memory that the creator clears */
};

/* A persistent buffer coming back from systemd's fd store after a restart. */
struct reg_adopt_args {
  uint64_t id;
  const char *name;
  int backend;
  int device; /* the device's ordinal now; -1 for host memory */
  uint64_t size, allocated;
  uid_t owner_uid;
  gid_t owner_gid;
  uint32_t mode;
  uint64_t created_unix_ms;
  const uint8_t *metadata; /* copied */
  size_t metadata_len;
};

/* How an object presents itself in listings and logs, whatever its kind. */
struct reg_description {
  const char *kind;  /* "buffer", "sync buffer", "event" */
  int backend;       /* gpushm_backend_t; 0 for an event */
  bool sync;
  uint64_t segment_id; /* 0: not carved */
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

struct registry {
  struct names names;
  struct reg_tally tally;
  struct quota quota;
  uint64_t next_id;
  uint64_t bytes_allocated;
  struct reg_limits limits;
  const struct backend *backends[GPUSHM_BACKEND_COUNT]; /* NULL = not offered */
  const struct event_source *events;                    /* NULL = no events */
  /* Told whenever a name goes away, before the request that caused it is answered,
   * and whenever a create made a new buffer (hooks_ctx is passed to both). */
  void (*on_unlink)(void *ctx, struct reg_object *buffer);
  void (*on_created)(void *ctx, struct reg_object *buffer);
  void *hooks_ctx;
  /* What default-backend = auto resolves to (registry_set_auto_backend). */
  int auto_backend;
  struct seg_table segs;
  /* Persistent host and cuda-fd buffers go to systemd's fd store, one allocation each:
   * they are not carved while it is reachable (docs/segments.md). */
  bool persist_dedicated;
  /* registry_destroy is freeing everything: memory persists for the next daemon rather
   * than being taken back (kind_buffer.c). */
  bool stopping;
};

int registry_init(struct registry *reg, const struct reg_limits *limits);
/* Frees every buffer, whoever holds it; for shutdown. */
void registry_destroy(struct registry *reg);
/* The composition root's choices: which backends and events clients may use, what
 * "auto" means, whether persistent buffers get allocations of their own, and who is
 * told of unlinks and creates. */
void registry_add_backend(struct registry *reg, const struct backend *be);
void registry_set_events(struct registry *reg, const struct event_source *events);
void registry_set_auto_backend(struct registry *reg, int backend);
void registry_set_persist_dedicated(struct registry *reg, bool dedicated);
void registry_set_hooks(struct registry *reg, void (*on_unlink)(void *, struct reg_object *),
                        void (*on_created)(void *, struct reg_object *), void *ctx);
/* Settings a reload may change. */
void registry_set_limits(struct registry *reg, const struct reg_limits *limits);

void registry_client_init(struct reg_client *client, uint32_t id, pid_t pid, uid_t uid, gid_t gid);
/* Releases all the client's references and unlinks the session buffers it created. */
void registry_client_gone(struct registry *reg, struct reg_client *client);

/* All return 0 or a negative GPUSHM_E_* code with err filled in.  Create and open add
 * one reference for the client and fill out with a ready export for a library that can
 * take what policy says; when they fail, nothing is left behind (no reference, no
 * name, no fd). */
int registry_create(struct registry *reg, struct reg_client *client,
                    const struct reg_policy *policy, const struct reg_create_args *args,
                    struct reg_export *out, char *err, size_t errlen);
/* kind: what the caller means to open; the other kind under that name or id is an
 * error.  A caller that may not see the object (registry_may_see, or an admin) is told
 * it does not exist. */
int registry_open(struct registry *reg, struct reg_client *client,
                  const struct reg_policy *policy, const char *name, uint64_t id,
                  bool read_only, enum reg_kind kind, struct reg_export *out, char *err,
                  size_t errlen);
/* Closes the export's fds (those not sent). */
void registry_export_close_fds(struct reg_export *e);
/* Drops one of the client's references to buffer id.  unlink: its name goes first, if
 * it still names it and the client may remove it (as registry_unlink).  unmap_segment:
 * the client no longer maps the buffer's segment with that access (registry_unmap). */
int registry_close(struct registry *reg, struct reg_client *client, uint64_t id, bool unlink,
                   bool unmap_segment, bool read_only, char *err, size_t errlen);
/* The client unmapped a segment it was sent over this connection. */
int registry_unmap(struct registry *reg, struct reg_client *client, uint64_t segment_id,
                   bool read_only, char *err, size_t errlen);
int registry_unlink(struct registry *reg, struct reg_client *client, const char *name,
                    char *err, size_t errlen);

/* Takes the buffer back under its old id and name, unheld; mem (and control, for a sync
 * buffer) become the registry's on success only. */
int registry_adopt(struct registry *reg, const struct reg_adopt_args *args, struct backend_mem *mem,
                   struct backend_mem *control, char *err, size_t errlen);
/* What a uid is charged with now. */
void registry_uid_usage(const struct registry *reg, uid_t uid, uint32_t *buffers, uint64_t *bytes,
                        uint64_t *host_bytes);
void registry_totals(const struct registry *reg, struct reg_totals *out);
const struct reg_tally *registry_tally(const struct registry *reg);
/* The backend as listings spell it (gpushm_backend_t, REG_EVENT_BACKEND for an event). */
int registry_listed_backend(const struct reg_object *obj);
void registry_describe(const struct reg_object *obj, struct reg_description *out);

/* Objects in ascending id order: the count, the one at index i, the index of the first
 * whose id is greater than after_id (the count if none). */
size_t registry_count(const struct registry *reg);
struct reg_object *registry_at(const struct registry *reg, size_t i);
size_t registry_index_after(const struct registry *reg, uint64_t after_id);
struct reg_object *registry_find_id(const struct registry *reg, uint64_t id);
uint32_t registry_client_refs(const struct reg_object *buffer, const struct reg_client *client);
bool registry_client_in_group(const struct reg_client *client, gid_t gid);
bool registry_may_access(const struct reg_client *client, const struct reg_object *buffer,
                         bool write);
/* The backend of that kind clients may be offered (NULL: none), and whether creates and
 * opens may use it now (allow-legacy-ipc). */
const struct backend *registry_backend(const struct registry *reg, int kind);
bool registry_backend_allowed(const struct registry *reg, const struct backend *be);
/* Whether events can be made now. */
bool registry_events_available(const struct registry *reg);
/* Whether the client may learn that the buffer exists: root, the owner, whoever may
 * read it, and its holders. */
bool registry_may_see(const struct reg_client *client, const struct reg_object *buffer);
/* The segments, for stats and for the processes that keep mapping them (detached.h). */
struct seg_table *registry_segments(struct registry *reg);

/* Whether obj's kind can be adopted after a restart (registry_adopt()), so worth
 * keeping across one. */
bool registry_can_adopt(const struct reg_object *obj);

/* The backend GPUSHM_BACKEND_DEFAULT means now for a library with that policy (NULL:
 * any recent one); never 0 nor auto. */
int registry_default_backend(const struct registry *reg, const struct reg_policy *policy);

#endif
