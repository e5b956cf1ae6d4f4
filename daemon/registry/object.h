/* SPDX-License-Identifier: MIT */
/* What the registry keeps: clients (a credential set with a list of holdings), the
 * objects they share, and who holds what.  The registry (registry.h) is their only
 * owner; an object's kind (kind.h) owns what the object holds outside the registry. */
#ifndef GPUSHMD_REGISTRY_OBJECT_H
#define GPUSHMD_REGISTRY_OBJECT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "backends/backend.h"
#include "hash_table.h"
#include "registry/names.h"
#include "util/list.h"

struct reg_client {
  uint32_t id;
  pid_t pid;
  uid_t uid;
  gid_t gid;
  gid_t *groups; /* supplementary groups, from SO_PEERGROUPS */
  unsigned n_groups;
  bool admin;    /* root or the admin group: may list and unlink every user's buffers */
  struct list holdings; /* reg_holding.client_link */
  struct list mappings; /* seg_mapping.client_link: segments it maps */
  struct list created;  /* reg_object.creator_link: what goes when it does */
  /* Its holdings by object id too: an open finds the connection's holding in a chain of
   * about one, however many it holds (a walk of 100,000 made opens 200 us). */
  struct hash_table holdings_by_id;
};

/* What a client's library can take, as its session negotiated it at Hello: the session
 * computes it from the features the client named, the registry applies it to what the
 * client creates and is sent. */
struct reg_policy {
  /* Its library understands carved buffers (PROTO_FEATURE_SEGMENTS): only such a
   * client's creates are carved, and only such a client may open a carved one. */
  bool carved;
  /* A gpushm 0.1 library (its Hello named no version range): it knows host memory only
   * when it names no backend, so the daemon's default-backend does not apply to it. */
  bool default_host_only;
  /* Its library orders cuda-ipc sync buffers by a fence (PROTO_FEATURE_IPC_FENCES): its
   * creates of them get one, and only such a client may open one that has one. */
  bool ipc_fences;
};

/* What a name denotes to clients; one namespace holds both. */
enum reg_kind {
  REG_BUFFER = 0, /* memory from a backend: a whole allocation, or a slot of a segment */
  REG_EVENT = 1,  /* an event from the registry's event source; size 0 */
  REG_TIMELINE = 2, /* a counter in a control block (kind_timeline.c); size 0 */
  REG_RING = 3,     /* slots of memory and a ready timeline; consumers attach (kind_ring.c) */
  REG_WEIGHTS = 4,  /* a generation of a weight set: a manifest over buffers (kind_weights.c) */
  REG_KIND_COUNT
};

struct reg_kind_ops;

/* The key's fields, twice: as struct reg_key for the indexes (names.h), and by name
 * here, so that obj->name and obj->id read as they always did. */
#define REG_KEY_FIELDS                                                                   \
  uint64_t id;                                                                           \
  bool linked;                                                                           \
  struct reg_key *name_next;                                                             \
  char name[GPUSHM_LIMIT_NAME_LEN + 1]

/* An object's header: what the registry and its callers know of every kind alike.  It
 * begins each kind's own struct (kind_*.c: a buffer's allocation and sync objects, a
 * slot's segment, an event, an image's description, registered memory), which only
 * that kind reads; others ask it through its ops (describe, export, deposit...). */
struct reg_object {
  union {
    struct reg_key key;
    struct {
      REG_KEY_FIELDS;
    };
  };
  enum reg_kind kind;
  const struct reg_kind_ops *ops; /* what holds its contents */
  uint64_t size;
  uint64_t allocated;
  uint64_t host_bytes; /* of its memory, host memory: what the host budget counts */
  const struct backend *backend; /* the allocator of its memory; NULL: none (events,
                                  * registered memfds) */
  int device;
  uid_t owner_uid;
  gid_t owner_gid;
  uint32_t mode;
  int lifetime;                     /* enum proto_lifetime */
  const struct reg_client *creator; /* session lifetime: until it disconnects */
  struct list creator_link;         /* in creator->created, while creator is set */
  pid_t creator_pid;
  uint64_t created_unix_ms;
  uint32_t refs;
  uint32_t n_holders;
  struct list holdings; /* reg_holding.buffer_link */
  bool charged_to_holders; /* unlinked while held: counts against its holders' uids */
  bool persisted; /* deposited where it outlives a restart (systemd's fd store) */
  /* A ring consumer's done timeline: that ring's id.  Whoever may write the ring (its
   * producers) may read it, whatever its mode says. */
  uint64_t ring_of;
  /* ... whose consumer let go: once its promise is broken, or at once if it has none,
   * it is raised past every frame (kind_ring.c). */
  bool ring_detached;
  uint8_t *metadata; /* set at create, immutable; NULL when none */
  uint32_t metadata_len;
  /* Objects this one keeps alive (a weight-set generation's buffers), each counting it
   * in its pins; and how many keep this one alive.  A pinned object is freed only once
   * unpinned too, stays charged to its owner while pinned, and takes no new writer:
   * what a generation names does not change under its readers. */
  struct reg_object **pinned;
  uint32_t n_pinned;
  uint32_t pins;
};

/* Memory a client exported from a graphics API and registered (kind_external.c). */
struct reg_external {
  int fd;                     /* the daemon's copy: each open gets a dup */
  uint64_t allocation_size;
  uint32_t memory_type_index;
  bool dedicated;
  bool nvidia;                /* NVIDIA memory, verified by importing it into CUDA */
  uint8_t device_uuid[16];
  uint8_t driver_uuid[16];
  char driver_info[64];
};

_Static_assert(offsetof(struct reg_object, key) == 0, "the key comes first");

struct reg_holding {
  struct reg_object *buffer;
  struct reg_client *client;
  uint32_t refs;
  /* Opened read-write at least once while held: the client may have published
   * releases (read-only openers cannot), whose fence writes a death can lose. */
  bool read_write;
  struct list client_link;
  struct list buffer_link;
  struct hash_link by_id; /* in client->holdings_by_id */
};

#endif
