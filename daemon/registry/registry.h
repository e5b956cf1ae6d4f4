/* The daemon's registry, the only owner of shared objects: buffers (memory from a
 * backend) and events, by id and name (one namespace), references per client, per-uid
 * quotas, lifetimes.  Knows nothing of sockets; a client is a credential set with a
 * list of holdings. */
#ifndef GPUSHMD_REGISTRY_H
#define GPUSHMD_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "backends/backend.h"
#include "backends/event.h"
#include "util/list.h"
#include "registry/segment.h"
#include "registry/sync.h"
#include "gpushm_limits.h"

struct reg_client {
  uint32_t id;
  pid_t pid;
  uid_t uid;
  gid_t gid;
  gid_t *groups; /* supplementary groups, from SO_PEERGROUPS */
  unsigned n_groups;
  bool admin;    /* root or the admin group: may list and unlink every user's buffers */
  /* A gpushm 0.1 library (its Hello named no version range): it knows host memory only
   * when it names no backend, so the daemon's default-backend does not apply to it. */
  bool default_host_only;
  /* Its library understands carved buffers (GPUSHM_FEATURE_SEGMENTS in its Hello): only
   * such a client's creates are carved, and only such a client may open a carved one. */
  bool segments;
  struct list holdings; /* reg_holding.client_link */
  struct list mappings; /* seg_mapping.client_link: segments it maps */
};

enum reg_kind {
  REG_BUFFER = 0, /* memory from a backend */
  REG_EVENT = 1,  /* an event from the registry's event source; size 0 */
};

struct reg_object {
  enum reg_kind kind;
  uint64_t id;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  bool linked;
  uint64_t size;
  uint64_t allocated;
  const struct backend *backend; /* buffers */
  int device;
  uid_t owner_uid;
  gid_t owner_gid;
  uint32_t mode;
  int lifetime;                     /* gpushm_lifetime_t */
  const struct reg_client *creator; /* session lifetime: until it disconnects */
  pid_t creator_pid;
  uint64_t created_unix_ms;
  uint32_t refs;
  uint32_t n_holders;
  struct list holdings; /* reg_holding.buffer_link */
  struct backend_mem mem;           /* buffers with an allocation of their own */
  struct segment *segment;          /* carved buffers: their segment (mem unused) */
  uint32_t slot;                    /* and their slot in it */
  bool dirty;                       /* until its creator has it: the creator clears it */
  void *event;                      /* events: made by registry.events */
  bool sync; /* sync_state holds its control block (and event) */
  uint64_t fence_offset; /* cuda-fd sync buffers: their fence, in their allocation; else 0 */
  struct sync_state sync_state;
  struct reg_object *name_next; /* hash chain, while linked */
  bool charged_to_holders; /* unlinked while held: counts against its holders' uids */
  bool persisted; /* deposited in systemd's fd store */
  uint8_t *metadata; /* set at create, immutable; NULL when none */
  uint32_t metadata_len;
};

struct reg_holding {
  struct reg_object *buffer;
  struct reg_client *client;
  uint32_t refs;
  /* Opened read-write at least once while held: the client may have published
   * releases (read-only openers cannot), whose fence writes a death can lose. */
  bool read_write;
  struct list client_link;
  struct list buffer_link;
};

/* default-backend = auto: cuda-fd where the daemon's first GPU can share memory as fd
 * capabilities, else host.  What the system service's installed settings ask for. */
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
};

struct reg_create_args {
  enum reg_kind kind;
  const char *name;
  uint64_t size; /* events: 0 */
  int backend; /* buffers: gpushm_backend_t; 0 = host */
  int device;
  uint32_t mode; /* 0 = default */
  int lifetime;
  bool open_existing;
  bool sync;
  const uint8_t *metadata; /* copied; GPUSHM_LIMIT_METADATA bytes at most */
  size_t metadata_len;
};

struct reg_uid_usage;

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

struct registry {
  struct reg_object **by_id; /* ascending id: ids only grow, so appending keeps order */
  size_t n_buffers, cap_buffers;
  struct reg_object **names; /* hash table of linked names */
  size_t n_name_buckets;
  uint32_t n_linked;
  uint64_t next_id;
  uint64_t bytes_allocated;
  uint64_t host_bytes; /* what the host-memory budget counts */
  struct reg_uid_usage *usage;
  struct reg_limits limits;
  const struct backend *backends[GPUSHM_BACKEND_COUNT]; /* NULL = unsupported */
  const struct event_source *events;                    /* NULL = no events */
  /* Told whenever a name goes away, before the request that caused it is answered,
   * and whenever a create made a new buffer (on_unlink_ctx is passed to both). */
  void (*on_unlink)(void *ctx, struct reg_object *buffer);
  void (*on_created)(void *ctx, struct reg_object *buffer);
  void *on_unlink_ctx;
  /* Whether cuda-fd works on the first GPU (set at start): what "auto" resolves to. */
  bool cuda_fd_usable;
  struct seg_table segs;
  /* Persistent host and cuda-fd buffers go to systemd's fd store, one allocation each:
   * they are not carved while it is reachable (docs/segments.md). */
  bool persist_dedicated;
};

int registry_init(struct registry *reg, const struct reg_limits *limits);
/* Frees every buffer, whoever holds it; for shutdown. */
void registry_destroy(struct registry *reg);

void registry_client_init(struct reg_client *client, uint32_t id, pid_t pid, uid_t uid, gid_t gid);
/* Releases all the client's references and unlinks the session buffers it created. */
void registry_client_gone(struct registry *reg, struct reg_client *client);

/* All return 0 or a negative GPUSHM_E_* code with err filled in.  Create and open add
 * one reference for the client and fill out with a ready export; when they fail,
 * nothing is left behind (no reference, no name, no fd). */
int registry_create(struct registry *reg, struct reg_client *client,
                    const struct reg_create_args *args, struct reg_export *out,
                    char *err, size_t errlen);
/* kind: what the caller means to open; the other kind under that name or id is an
 * error.  A caller that may not see the object (registry_may_see, or an admin) is told
 * it does not exist. */
int registry_open(struct registry *reg, struct reg_client *client, const char *name, uint64_t id,
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

struct reg_object *registry_find_id(const struct registry *reg, uint64_t id);
/* Index of the first buffer whose id is greater than after_id (n_buffers if none). */
size_t registry_index_after(const struct registry *reg, uint64_t after_id);
uint32_t registry_client_refs(const struct reg_object *buffer, const struct reg_client *client);
bool registry_client_in_group(const struct reg_client *client, gid_t gid);
bool registry_may_access(const struct reg_client *client, const struct reg_object *buffer,
                         bool write);
/* Whether creates and opens may use this backend now (allow-legacy-ipc). */
bool registry_backend_allowed(const struct registry *reg, const struct backend *be);
/* Whether the client may learn that the buffer exists: root, the owner, whoever may
 * read it, and its holders. */
bool registry_may_see(const struct reg_client *client, const struct reg_object *buffer);

/* The backend GPUSHM_BACKEND_DEFAULT means now for client (never 0 nor auto). */
int registry_default_backend(const struct registry *reg, const struct reg_client *client);

#endif
