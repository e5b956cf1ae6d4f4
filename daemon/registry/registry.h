/* SPDX-License-Identifier: MIT */
/* The daemon's registry, the only owner of shared objects: names and ids (names.h),
 * references per client, per-uid quotas (quota.h), lifetimes.  What an object holds
 * outside the registry (memory, segments' slots, events, sync objects) belongs to its
 * kind (kind.h), and the memory to the backends the composition root registers.  Knows
 * nothing of sockets or of the protocol; a client is a credential set with a list of
 * holdings, and what its library can take comes with each call (struct reg_policy). */
#ifndef GPUSHMD_REGISTRY_H
#define GPUSHMD_REGISTRY_H

#include "registry/backends.h"
#include "registry/types.h"

/* Opaque above the registry: its callers see objects through this file's functions and
 * types.h, never its state (state.h, private to daemon/registry/). */
struct registry;
struct segment;
struct event_source;

/* NULL: out of memory. */
struct registry *registry_new(const struct reg_limits *limits);
/* Frees every buffer, whoever holds it; for shutdown. */
void registry_free(struct registry *reg);
/* The composition root's choices: which backends and events clients may use, what
 * "auto" means, whether persistent buffers get allocations of their own, and who is
 * told of unlinks and creates. */
void registry_set_events(struct registry *reg, const struct event_source *events);
void registry_set_persist_dedicated(struct registry *reg, bool dedicated);
void registry_set_hooks(struct registry *reg, void (*on_unlink)(void *, struct reg_object *),
                        void (*on_created)(void *, struct reg_object *), void *ctx);
/* Settings a reload may change, and those in force. */
void registry_set_limits(struct registry *reg, const struct reg_limits *limits);
const struct reg_limits *registry_limits(const struct registry *reg);

void registry_client_init(struct reg_client *client, uint32_t id, pid_t pid, uid_t uid, gid_t gid);
/* Releases all the client's references and unlinks the session buffers it created. */
void registry_client_gone(struct registry *reg, struct reg_client *client);

/* All return 0 or a negative PROTO_E_* code with err filled in.  Create and open add
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
/* Opens buffer id read-only as one of weight-set generation via_id's, which the client
 * holds (unlinked or not: the generation keeps it); its own mode decides who reads it. */
int registry_open_via(struct registry *reg, struct reg_client *client,
                      const struct reg_policy *policy, uint64_t id, uint64_t via_id,
                      struct reg_export *out, char *err, size_t errlen);
/* Attaches the client, which holds ring ring_id, as one of its consumers: out is its
 * done timeline (made at the first attach, read-write, its counter at the frame last
 * presented; opened again at a later one).  It stays a consumer until its last
 * reference to the ring goes, when the timeline is raised past every frame and
 * unlinked. */
int registry_ring_attach(struct registry *reg, struct reg_client *client,
                         const struct reg_policy *policy, uint64_t ring_id,
                         struct reg_export *out, char *err, size_t errlen);
/* A semaphore plane of timeline or ring id, for client, which holds it
 * (docs/sync.md#semaphore-planes, docs/rings.md#vulkan-consumers): args.fd >= 0
 * registers that semaphore (on the device of args.uuid); out receives a new fd of the
 * plane.  args' client_id and read_write are filled here.  0 or a negative PROTO_E_*
 * with err. */
int registry_semaphore(struct registry *reg, struct reg_client *client, uint64_t id,
                       struct reg_semaphore_args args, struct reg_semaphore *out, char *err,
                       size_t errlen);
/* For a client that holds ring ring_id: detach ends its consumer's role now (whatever
 * else it holds of the ring); evict (a done timeline's id, 0: none) detaches that
 * consumer at once, its done timeline raised past every frame (read-write holders
 * alone: GPUSHM_E_PERM otherwise). */
int registry_ring_request(struct registry *reg, struct reg_client *client, uint64_t ring_id,
                          bool detach, uint64_t evict, char *err, size_t errlen);
/* Whether client_id is one of ring obj's attached consumers (false for other kinds). */
bool registry_ring_consumer(const struct reg_object *obj, uint32_t client_id);
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

/* Persistence (server/persist.c keeps the store).  Whether obj outlives gpushmd (not
 * a session object, nor a kind or backend that dies with the daemon); deposit it (the
 * store records that added, obj->persisted set; or a negative errno, err saying why,
 * nothing left behind); withdraw it (the records that removed, obj->persisted
 * cleared). */
bool registry_persists(const struct registry *reg, const struct reg_object *obj);
int registry_deposit(struct registry *reg, struct reg_object *obj, const struct reg_store *store,
                     char *err, size_t errlen);
int registry_withdraw(struct registry *reg, struct reg_object *obj, const struct reg_store *store);
/* How many store records depositing obj would add now (for the store's room). */
unsigned registry_deposit_records(const struct registry *reg, const struct reg_object *obj);
/* A record from the store after a restart, with its fd: 1, a kind took it (fd and its
 * companions are its own now), the objects it names back (those that could not come
 * back logged and dropped), *records the store records they hold; 0, no kind knows it
 * (fd left to the caller); or a negative PROTO_E_* with err saying why nothing came
 * back (its records removed from the store, fd closed). */
int registry_adopt_record(struct registry *reg, const char *record, int fd,
                          const struct reg_store *store, unsigned *records, char *err,
                          size_t errlen);
/* A sync buffer whose releaser died: raises its fence to that releaser's last published
 * release where its GPU never wrote it, once the release before has landed (force: at
 * once).  1 raised, 0 nothing to raise, 2 not yet, or a negative PROTO_E_* with err set
 * (out: struct reg_raised_fence). */
int registry_raise_fence(struct registry *reg, struct reg_object *obj, uint32_t releaser,
                         bool force, struct reg_raised_fence *out, char *err, size_t errlen);
/* client's promise to release every value of buffer id up to upto, signing as releaser
 * (a read-write holding of it is needed): see struct reg_kind_ops.promise. */
int registry_promise(struct registry *reg, struct reg_client *client, uint64_t id,
                     uint32_t releaser, uint64_t upto, char *err, size_t errlen);
/* client_id's promise not kept: see struct reg_kind_ops.break_promise. */
int registry_break_promise(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                           bool force, struct reg_broken_promise *out, char *err, size_t errlen);
/* Told when a client closes its last handle of a buffer whose last promise it made
 * (registry_close), which it may owe values of: id, the client, its process and uid. */
void registry_set_promise_hook(struct registry *reg,
                               void (*closed_promiser)(void *ctx, uint64_t id, uint32_t client_id,
                                                       pid_t pid, uid_t uid));/* What a uid is charged with now. */
void registry_uid_usage(const struct registry *reg, uid_t uid, uint32_t *buffers, uint64_t *bytes,
                        uint64_t *host_bytes);
void registry_totals(const struct registry *reg, struct reg_totals *out);
const struct reg_tally *registry_tally(const struct registry *reg);
/* The backend as listings spell it (enum proto_backend, REG_EVENT_BACKEND for an event). */
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
/* Whether events can be made now. */
bool registry_events_available(const struct registry *reg);
/* Whether the client may learn that the buffer exists: root, the owner, whoever may
 * read it, and its holders. */
bool registry_may_see(const struct reg_client *client, const struct reg_object *buffer);
/* Segments by (backend, device), for stats: rows into out (at most max), their count. */
size_t registry_segment_usage(const struct registry *reg, struct reg_segment_usage *out,
                              size_t max);
/* The segments a client maps over its connection: how many, and their bytes. */
void registry_client_mapped(const struct reg_client *client, uint32_t *segments, uint64_t *bytes);
/* A connection ends while its process, which held buffers, lives on (detached.h): its
 * mappings turn into holds on their segments until registry_undetach_segment() (its
 * exit); *segs (malloc'ed, one per mapping, to hand back) says which.  Returns the
 * count, or a negative PROTO_E_NOMEM, after which they are retired instead.  Where the
 * process cannot be watched, registry_retire_segments() retires what it maps. */
ssize_t registry_detach_segments(struct registry *reg, struct reg_client *client,
                                 struct segment ***segs);
void registry_undetach_segment(struct registry *reg, struct segment *seg);
void registry_retire_segments(struct registry *reg, struct reg_client *client);



#endif
