/* SPDX-License-Identifier: MIT */
/* Timelines: a named 64-bit counter that CPUs and CUDA streams signal and wait on, with
 * promises and dead-signaller repair (docs/sync.md).  A timeline is a sync buffer
 * without memory: its control block (proto/shm_layout.h) is its one plane, and its
 * fence lives there, where the CPU reads and writes it directly and a GPU through the
 * page registered with CUDA.  Promises, fence raises and breaks are the buffer kind's
 * (kind_buffer.c), reaching the fence through the control block. */
#include "config.h"
#include "registry/kind.h"
#include "registry/kind_buffer.h"
#include "registry/plane.h"
#include "protocol.h"
#include "shm_layout.h"
#include "util/log.h"
#include "wire.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int timeline_check(const struct registry *reg, const struct reg_create_args *args,
                          const struct reg_policy *policy, const struct backend **be, char *err,
                          size_t errlen)
{
  (void)reg;
  (void)policy;
  *be = NULL;
  if (args->size || args->backend || args->metadata_len || args->image || args->external) {
    snprintf(err, errlen, "a timeline has no size, no backend and no metadata: its counter "
             "is all it holds");
    return PROTO_E_INVAL;
  }
  return 0;
}

/* Its control block: a page of host memory, charged as a sync buffer's is. */
static void timeline_estimate(const struct registry *reg, const struct reg_create_args *args,
                              const struct backend *be, struct quota_cost *cost)
{
  (void)reg;
  (void)args;
  (void)be;
  *cost = (struct quota_cost){ .host = SYNC_CONTROL_SIZE, .device = -1 };
}

static int timeline_alloc(struct registry *reg, struct reg_object *obj,
                          const struct reg_create_args *args, const struct backend *be,
                          const struct reg_client *client, char *err, size_t errlen)
{
  struct reg_buffer *t = reg_buffer_of(obj);
  int r;

  (void)reg;
  (void)be;
  (void)client;
  if ((r = sync_alloc(&t->sync_state, NULL, -1, args->name, err, errlen)) < 0)
    return r;
  t->sync = true;
  t->fence_in_control = true;
  obj->device = -1;
  obj->host_bytes = SYNC_CONTROL_SIZE;
  return 0;
}

static int timeline_export(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                           const struct reg_policy *policy, bool read_only,
                           struct reg_export *out, char *err, size_t errlen)
{
  struct reg_buffer *t = reg_buffer_of(obj);
  int r;

  (void)reg;
  (void)client;
  (void)policy;
  /* A read-only holder maps the block read-only: it waits, and can neither signal nor
   * forge the counter, the fence or a promise. */
  if ((r = sync_export(&t->sync_state, read_only, &out->fds[0], out->event_handle,
                       &out->event_handle_len, err, errlen)) < 0)
    return r;
  out->n_fds = 1;
  return 0;
}

/* ---- semaphore planes (docs/sync.md#semaphore-planes) -------------------------------
 * A Vulkan timeline semaphore a client minted and registered (plane.c): every signaller
 * signals it beside the fence, so that Vulkan and GL queues wait on the GPU.  A
 * semaphore takes the value signalled, not the highest (measured, probe-timeline [T4]),
 * and nobody can read it but its holders' queues, so a repair signals the fence as it
 * stands after the raise, which every signaller writes before it signals the semaphore:
 * never below a value the semaphore reached. */
static void plane_repair(struct reg_object *obj)
{
  struct reg_buffer *t = reg_buffer_of(obj);
  uint64_t fence;

  /* a detached ring consumer's done plane is signalled by its raise (kind_ring.c): the
   * fence then stands beyond what a semaphore can take */
  if (obj->ring_detached)
    return;
  if (t->plane && (fence = sync_fence(&t->sync_state)))
    reg_plane_signal(t->plane, fence, obj, "its semaphore");
}

static int timeline_semaphore(struct registry *reg, struct reg_object *obj,
                              const struct reg_semaphore_args *a, struct reg_semaphore *out,
                              char *err, size_t errlen)
{
  struct reg_buffer *t = reg_buffer_of(obj);
  const bool read_write = a->read_write;
  const int fd = a->fd;
  struct reg_plane *p;
  int r;

  (void)reg;
  if (a->consumer) {
    snprintf(err, errlen, "'%s' is a timeline: consumers' planes are rings'", obj->name);
    return PROTO_E_INVAL;
  }
  if (fd >= 0 && !read_write) {
    snprintf(err, errlen, "'%s' is open read-only here: a semaphore plane is signalled by "
             "whoever holds it, so registering one is a write; open it read-write", obj->name);
    return PROTO_E_PERM;
  }
  if (fd >= 0 && !t->plane) {
    /* A ring consumer's done plane (docs/rings.md#done-planes) is for the ring's
     * producers, its only readers, to wait on: theirs whatever the consumer asked. */
    if ((r = reg_plane_make(fd, a->uuid, a->to_readers || obj->ring_of, &p, err, errlen)) < 0)
      return r;
    if ((r = sync_mark_semaphore(&t->sync_state, true, err, errlen)) < 0) {
      reg_plane_free(p);
      return r;
    }
    t->plane = p;
    out->registered = true;
    /* where the fence stands now: it was minted at the fence its minter read */
    plane_repair(obj);
    log_msg(LOG_LEVEL_DEBUG, "'%s' (id %llu): semaphore plane on device %d%s", obj->name,
            (unsigned long long)obj->id, p->device, p->to_readers ? ", given to readers" : "");
  }
  if (!(p = t->plane)) {
    snprintf(err, errlen, "'%s' has no semaphore plane: a process with a Vulkan device and "
             "the timeline open read-write mints one (gpushm_vk_import_timeline())", obj->name);
    return PROTO_E_NOENT;
  }
  if (!read_write && !p->to_readers) {
    snprintf(err, errlen, "'%s' is open read-only here, and its semaphore can be signalled "
             "by whoever holds it: its registrar did not give it to readers (wait on the CPU "
             "or a CUDA stream, or open it read-write)", obj->name);
    return PROTO_E_PERM;
  }
  return reg_plane_hand_out(p, out, err, errlen);
}

static int timeline_raise_fence(struct registry *reg, struct reg_object *obj, uint32_t releaser,
                                bool force, struct reg_raised_fence *out, char *err, size_t errlen)
{
  int r = reg_buffer_raise_fence(reg, obj, releaser, force, out, err, errlen);

  /* also where the fence was at the value already: the dead signaller's semaphore
   * signal, queued behind its fence write, may have died with it */
  if ((r == 0 || r == 1) && out->seq)
    plane_repair(obj);
  return r;
}

static void timeline_release(struct registry *reg, struct reg_object *obj)
{
  struct reg_buffer *t = reg_buffer_of(obj);

  (void)reg;
  reg_plane_free(t->plane);
  t->plane = NULL;
  if (t->sync)
    sync_release(&t->sync_state);
  t->sync = false;
}

static void timeline_describe(const struct reg_object *obj, struct reg_description *out)
{
  const struct reg_buffer *t = reg_buffer_of_const(obj);

  memset(out, 0, sizeof *out);
  out->kind = "timeline";
  out->backend = PROTO_BACKEND_HOST; /* where its one plane lives */
  out->sync = true;
  out->fenced = true;
  out->promiser = t->sync_state.promise.client_id;
}

/* A ring consumer's done timeline goes past every frame once its consumer let go and
 * its promise is settled (kind_ring.c): broken now, found kept, or past breaking. */
static int timeline_break_promise(struct registry *reg, struct reg_object *obj,
                                  uint32_t client_id, bool force, struct reg_broken_promise *out,
                                  char *err, size_t errlen)
{
  int r = reg_buffer_break_promise(reg, obj, client_id, force, out, err, errlen);
  char why[200];

  /* not only after a break: a failed one (a scribbled header) must not leave the
   * producers' queued waits waiting (the raise needs no header) */
  if (r == 1)
    plane_repair(obj);
  if (r != 2 && obj->ring_detached && reg_ring_done_raise(reg, obj, why, sizeof why) < 0)
    log_msg(LOG_LEVEL_WARN, "'%s' (id %llu): a detached ring consumer's done timeline not "
            "raised: %s", obj->name, (unsigned long long)obj->id, why);
  return r;
}

/* ---- persistence: systemd's fd store ------------------------------------------------
 * A persistent timeline leaves its control block under "l.<id>.<uid>.<gid>.<mode>.
 * <created>.<name>" ("t." is a segment's slot table, kind_slot.c): the block holds its
 * counter, fence and promise, so the timeline comes back where it was (a promise made to
 * the previous daemon broken at once). */
static bool timeline_persists(const struct registry *reg, const struct reg_object *obj)
{
  (void)reg;
  (void)obj;
  return backend_host.adopt != NULL;
}

static unsigned timeline_deposit_records(const struct registry *reg, const struct reg_object *obj)
{
  (void)reg;
  (void)obj;
  return 1;
}

static bool timeline_record(const struct reg_object *o, char *out, size_t len)
{
  int n = snprintf(out, len, "l.%" PRIu64 ".%u.%u.%o.%" PRIu64 ".%s", o->id,
                   (unsigned)o->owner_uid, (unsigned)o->owner_gid, o->mode,
                   o->created_unix_ms, o->name);
  return n > 0 && (size_t)n < len;
}

static int timeline_deposit(struct registry *reg, struct reg_object *obj,
                            const struct reg_store *store, char *err, size_t errlen)
{
  char name[REG_RECORD_MAX];
  int r;

  (void)reg;
  if (!timeline_record(obj, name, sizeof name)) {
    snprintf(err, errlen, "its name does not fit a store record");
    return -EINVAL;
  }
  if ((r = store->add(store->ctx, name, reg_buffer_of(obj)->sync_state.control.fd)) < 0) {
    snprintf(err, errlen, "%s", strerror(-r));
    return r;
  }
  return 1;
}

static int timeline_withdraw(struct registry *reg, struct reg_object *obj,
                             const struct reg_store *store)
{
  char name[REG_RECORD_MAX];

  (void)reg;
  if (timeline_record(obj, name, sizeof name))
    store->remove(store->ctx, name);
  return 1;
}

static int timeline_adopt_record(struct registry *reg, const char *record, int fd,
                                 const struct reg_store *store,
                                 const struct reg_adopt_sink *emit, unsigned *records,
                                 char *err, size_t errlen)
{
  unsigned long long id, created;
  unsigned uid, gid, mode;
  struct reg_adopt_args a = { 0 };
  struct backend_mem control = { .fd = -1 };
  struct reg_buffer *t = NULL;
  char why[200], what[GPUSHM_LIMIT_NAME_LEN + 40];
  int used = -1, r;

  if (strncmp(record, "l.", 2) != 0)
    return 0;
  if (sscanf(record, "l.%llu.%u.%u.%o.%llu.%n", &id, &uid, &gid, &mode, &created, &used) != 5 ||
      used < 0 || !wire_name_valid(record + used)) {
    snprintf(why, sizeof why, "not a record this daemon understands");
    r = PROTO_E_INVAL;
    goto drop;
  }
  snprintf(a.name_buf, sizeof a.name_buf, "%s", record + used);
  if ((r = backend_host.adopt(&backend_host, fd, NULL, SYNC_CONTROL_SIZE, NULL, &control,
                              &(int){ 0 }, why, sizeof why)) < 0)
    goto drop;
  fd = -1; /* the control block's now */
  if (!(t = calloc(1, sizeof *t))) {
    snprintf(why, sizeof why, "daemon out of memory");
    r = PROTO_E_NOMEM;
    goto drop;
  }
  if ((r = sync_adopt(&t->sync_state, &control, a.name_buf, why, sizeof why)) < 0)
    goto drop;
  control.fd = -1;
  t->sync = true;
  t->fence_in_control = true;
  t->obj.ops = &reg_kind_timeline;
  t->obj.kind = REG_TIMELINE;
  t->obj.device = -1;
  t->obj.host_bytes = SYNC_CONTROL_SIZE;
  /* its semaphore plane did not come back (nor did its registrar's queues) */
  (void)sync_mark_semaphore(&t->sync_state, false, why, sizeof why);
  snprintf(what, sizeof what, "persistent timeline '%s'", a.name_buf);
  reg_buffer_break_adopted_promise(&t->obj, what);
  a.id = id;
  a.name = a.name_buf;
  a.owner_uid = uid;
  a.owner_gid = gid;
  a.mode = mode;
  a.created_unix_ms = created;
  if ((r = emit->emit(emit->ctx, &t->obj, &a, why, sizeof why)) < 0) {
    timeline_release(reg, &t->obj);
    free(t);
    t = NULL;
    goto drop;
  }
  *records = 1;
  return 1;

drop:
  if (used >= 0)
    snprintf(err, errlen, "persistent timeline '%s' (id %llu): %s", a.name_buf, id, why);
  else
    snprintf(err, errlen, "record '%s': %s", record, why);
  store->remove(store->ctx, record);
  if (t)
    free(t);
  if (control.fd >= 0)
    backend_host.release(&backend_host, &control);
  else if (fd >= 0)
    close(fd);
  return r;
}

const struct reg_kind_ops reg_kind_timeline = {
  .name = "timeline",
  .kind = REG_TIMELINE,
  .object_size = sizeof(struct reg_buffer),
  .memory_name = "a timeline's control block",
  .check = timeline_check,
  .estimate = timeline_estimate,
  .alloc = timeline_alloc,
  .export = timeline_export,
  .release = timeline_release,
  .describe = timeline_describe,
  .raise_fence = timeline_raise_fence,
  .promise = reg_buffer_promise,
  .break_promise = timeline_break_promise,
  .semaphore = timeline_semaphore,
  .persists = timeline_persists,
  .deposit_records = timeline_deposit_records,
  .deposit = timeline_deposit,
  .withdraw = timeline_withdraw,
  .adopt_record = timeline_adopt_record,
};
