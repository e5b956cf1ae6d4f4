/* SPDX-License-Identifier: MIT */
/* Private to daemon/registry/.  Kinds of objects: what each holds outside the registry and how it is made, sent,
 * described, adopted after a restart and given back.  The registry does names, ids,
 * references, quotas and lifetimes for every kind alike and calls these for the rest.
 * A new kind is a file with one of these and an entry in registry.c's table (or, for a
 * more particular form of a requested kind, its select()).  Kinds see the registry's
 * state (state.h) and ask backends.h which backend a create means; registry.c, which
 * calls them, they never call. */
#ifndef GPUSHMD_REGISTRY_KIND_H
#define GPUSHMD_REGISTRY_KIND_H

#include "registry/quota.h"
#include "registry/state.h"

struct reg_kind_ops {
  const char *name; /* in errors: "buffer" */
  enum reg_kind kind; /* what clients know it as */
  size_t object_size; /* its own struct, which begins with struct reg_object */
  /* How refusals name its memory where not by its backend's name ("registered NVIDIA
   * memory"); NULL: the backend's name. */
  const char *memory_name;
  /* A create's arguments, before any lookup or allocation: 0, or a PROTO_E_* with err
   * set.  *be: the backend its memory will come from (NULL for kinds without one). */
  int (*check)(const struct registry *reg, const struct reg_create_args *args,
               const struct reg_policy *policy, const struct backend **be, char *err,
               size_t errlen);
  /* The kind that will hold this create: itself (NULL select), or a more particular one
   * (a buffer that is carved is a slot). */
  const struct reg_kind_ops *(*select)(const struct registry *reg,
                                       const struct reg_create_args *args,
                                       const struct reg_policy *policy,
                                       const struct backend *be);
  /* What the create will cost its uid before anything is allocated (device memory
   * included, where it is known and charged to the object itself); the registry checks
   * the quota with it, and again with what alloc() set. */
  void (*estimate)(const struct registry *reg, const struct reg_create_args *args,
                   const struct backend *be, struct quota_cost *cost);
  /* Fills obj's contents (memory, sync objects, slot, event) and obj->allocated,
   * obj->host_bytes, obj->backend, obj->device; on failure nothing is left allocated. */
  int (*alloc)(struct registry *reg, struct reg_object *obj, const struct reg_create_args *args,
               const struct backend *be, const struct reg_client *client, char *err,
               size_t errlen);
  /* obj's name was just linked to it, or unlinked (NULL: nothing to do): a weight-set
   * generation tells its older ones' holders of it. */
  void (*linked)(struct registry *reg, struct reg_object *obj);
  void (*unlinked)(struct registry *reg, struct reg_object *obj);
  /* Fills out with what the client needs to reach obj; on failure no fd is left open. */
  int (*export)(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                const struct reg_policy *policy, bool read_only, struct reg_export *out,
                char *err, size_t errlen);
  /* Gives back what obj holds outside the registry. */
  void (*release)(struct registry *reg, struct reg_object *obj);
  void (*describe)(const struct reg_object *obj, struct reg_description *out);
  /* A sync buffer whose releaser died (releaser: its id in the control block): raises
   * its fence to that releaser's last published release if its GPU never wrote it,
   * once the fence holds the release published before it (unless force).
   * 1 raised, 0 nothing to raise, 2 not yet, or a negative PROTO_E_* with err set
   * (out: struct reg_raised_fence).  NULL: the kind has no fence. */
  int (*raise_fence)(struct registry *reg, struct reg_object *obj, uint32_t releaser,
                     bool force, struct reg_raised_fence *out, char *err, size_t errlen);
  /* Promises (docs/sync.md; NULL: the kind takes none).  promise: client_id (signing
   * as releaser) promises every value up to upto; 0 or a negative PROTO_E_* with err
   * set.  break_promise: client_id's promise not kept: raises the counter (and the
   * fence, once it holds the counter, unless force) to what it promised and marks the
   * values lost.  1 broken (out filled), 0 no promise, 2 not yet (the fence is below the
   * counter: releases' writes are queued), or a negative PROTO_E_* with err set. */
  int (*promise)(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                 uint32_t releaser, uint64_t upto, char *err, size_t errlen);
  int (*break_promise)(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                       bool force, struct reg_broken_promise *out, char *err, size_t errlen);
  /* Frame rings' consumers (NULL: the kind takes none).  attach: done, a timeline the
   * registry just made for client_id of uid, becomes that consumer's, its counter
   * starting at the frame last presented (done NULL: whether it could, limits counted);
   * 0 or a negative PROTO_E_* with err set.  consumer: the id of client_id's done
   * timeline, 0 if it has none; consumer_of: the client whose done timeline done_id is,
   * 0 if none.  detach: client_id lets go of the ring (or is evicted: now): its done
   * timeline leaves the table and is raised past every frame (RING_DONE_DETACHED), at
   * once where now or where it holds no promise, else once its promise's break lets
   * its queued releases land; returns its id, 0 if it had none. */
  int (*attach)(struct registry *reg, struct reg_object *obj, uint32_t client_id, uid_t uid,
                struct reg_object *done, char *err, size_t errlen);
  uint64_t (*consumer)(const struct reg_object *obj, uint32_t client_id);
  uint32_t (*consumer_of)(const struct reg_object *obj, uint64_t done_id);
  uint64_t (*detach)(struct registry *reg, struct reg_object *obj, uint32_t client_id, bool now);
  /* Semaphore planes (NULL: the kind has none; docs/sync.md#semaphore-planes), asked
   * for by a holder (struct reg_semaphore_args).  fd >= 0: make that semaphore (on the
   * device of uuid) the plane, unless obj has one already (a timeline's read-write
   * holders; a ring's consumer, its own).  Then out->fd is a new fd of the plane, for a
   * holder that may have it; 0 or a negative PROTO_E_* with err set. */
  int (*semaphore)(struct registry *reg, struct reg_object *obj,
                   const struct reg_semaphore_args *args, struct reg_semaphore *out,
                   char *err, size_t errlen);
  /* Persistence (NULL: the kind never outlives the daemon).  persists: whether obj
   * would (its backend's memory outlives the daemon).  deposit: adds what brings obj
   * back to store; the number of store records that added (0: it rides on records it
   * shares, a segment's), or a negative errno with nothing left behind.  withdraw:
   * takes it out again; the number of records that removed.  adopt_record: record
   * (with fd) came back after a restart: 0, not this kind's (fd untouched); 1, it was
   * (fd and its companion records are the kind's, or gone from the store), each object
   * it brings back handed to emit (which inserts it; on its refusal the kind releases
   * the object and forgets it), *records the store records it holds now; or a negative
   * PROTO_E_* with err saying why nothing came back, its records removed and fd
   * closed. */
  bool (*persists)(const struct registry *reg, const struct reg_object *obj);
  /* How many store records deposit() would add now (what the store's room is checked
   * against). */
  unsigned (*deposit_records)(const struct registry *reg, const struct reg_object *obj);
  int (*deposit)(struct registry *reg, struct reg_object *obj, const struct reg_store *store,
                 char *err, size_t errlen);
  int (*withdraw)(struct registry *reg, struct reg_object *obj, const struct reg_store *store);
  int (*adopt_record)(struct registry *reg, const char *record, int fd,
                      const struct reg_store *store, const struct reg_adopt_sink *emit,
                      unsigned *records, char *err, size_t errlen);
};

extern const struct reg_kind_ops reg_kind_buffer; /* kind_buffer.c: an allocation of its own */
extern const struct reg_kind_ops reg_kind_slot;   /* kind_slot.c: a slot of a segment */
extern const struct reg_kind_ops reg_kind_event;  /* kind_event.c */
extern const struct reg_kind_ops reg_kind_image;  /* kind_image.c: a linear image */
extern const struct reg_kind_ops reg_kind_external; /* kind_external.c: registered memory */
extern const struct reg_kind_ops reg_kind_timeline; /* kind_timeline.c */
extern const struct reg_kind_ops reg_kind_ring;     /* kind_ring.c */
extern const struct reg_kind_ops reg_kind_weights;  /* kind_weights.c */

/* The table (kinds.c): the kind a create starts from (args->kind checked valid), and
 * the kinds whose objects outlive the daemon, asked in turn whose a record is
 * (NULL-terminated). */
const struct reg_kind_ops *reg_kind_for(const struct reg_create_args *args);
extern const struct reg_kind_ops *const reg_persistent_kinds[];

#endif
