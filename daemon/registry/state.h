/* SPDX-License-Identifier: MIT */
/* Private to daemon/registry/: the registry's state, which its kinds read and fill
 * (kind.h includes this, not registry.h, whose functions call the kinds), and what a
 * kind hands back when it brings an object back after a restart.  Tests may look in. */
#ifndef GPUSHMD_REGISTRY_STATE_H
#define GPUSHMD_REGISTRY_STATE_H

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
#include "registry/types.h"

struct reg_adopt_args;

/* Where a kind hands each object it brings back after a restart (its parts set, the
 * header in *a): 0, the registry has it; or a negative PROTO_E_* with err set, and the
 * object is the kind's again to release. */
struct reg_adopt_sink {
  int (*emit)(void *ctx, struct reg_object *obj, const struct reg_adopt_args *a, char *err,
              size_t errlen);
  void *ctx;
};

/* A persistent object coming back after a restart: its header, as its kind read it from
 * its records (metadata and name point into this struct). */
struct reg_adopt_args {
  uint64_t id;
  const char *name;
  uint64_t size;
  uid_t owner_uid;
  gid_t owner_gid;
  uint32_t mode;
  uint64_t created_unix_ms;
  const uint8_t *metadata; /* copied */
  size_t metadata_len;
  char name_buf[GPUSHM_LIMIT_NAME_LEN + 1];
  uint8_t metadata_buf[GPUSHM_LIMIT_METADATA];
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
  void (*closed_promiser)(void *ctx, uint64_t id, uint32_t client_id, pid_t pid, uid_t uid);
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

/* For the registry's own tests: a registry in storage of the caller's (registry_new()
 * is everyone else's). */
int registry_init(struct registry *reg, const struct reg_limits *limits);
void registry_destroy(struct registry *reg);

#endif
