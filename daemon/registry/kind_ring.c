/* SPDX-License-Identifier: MIT */
/* Frame rings (docs/rings.md): N slots of memory in one allocation, a ready timeline
 * (the frame last presented) and, per consumer, a done timeline (the frame it last
 * released), as one named object.  The memory and its control block are a buffer's
 * (kind_buffer.c), the control block a timeline's: its fence is the ready counter, and
 * promises, breaks and fence repair are the buffer kind's.  What is the ring's own is
 * its geometry and its consumers: each consumer's done timeline is a timeline object
 * the registry makes for it (its own to signal, the ring's writers' to read), listed in
 * the control block's table for producers to find, and, for consumers whose queues
 * wait on the GPU, a ready plane of its own (docs/rings.md#vulkan-consumers). */
#include "config.h"
#include "registry/kind_buffer.h"
#include "registry/backends.h"
#include "registry/plane.h"
#include "protocol.h"
#include "shm_layout.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ring_consumer {
  uint32_t client_id;
  uid_t uid;
  uint64_t done_id;
  /* A semaphore the consumer minted, that producers signal beside the ready counter:
   * its alone among consumers (a semaphore has no read-only handle, and one handed to
   * every reader could be signalled by any of them). */
  struct reg_plane *plane;
};

struct reg_ring {
  struct reg_buffer buf; /* first: the buffer kind's ops work on it */
  uint32_t slots;
  uint64_t slot_size, slot_stride;
  bool has_image;
  struct image_params image; /* each slot's, when has_image */
  uint32_t n_consumers;
  struct ring_consumer consumers[GPUSHM_LIMIT_RING_CONSUMERS];
};

static struct reg_ring *ring_of(struct reg_object *obj)
{
  return (struct reg_ring *)obj;
}

static const struct reg_ring *ring_of_const(const struct reg_object *obj)
{
  return (const struct reg_ring *)obj;
}

/* A slot's stride: its bytes rounded up to where the next may start. */
static uint64_t stride_of(uint64_t slot_size)
{
  return (slot_size + GPUSHM_RING_SLOT_ALIGN - 1) / GPUSHM_RING_SLOT_ALIGN *
         GPUSHM_RING_SLOT_ALIGN;
}

static int ring_check(const struct registry *reg, const struct reg_create_args *args,
                      const struct reg_policy *policy, const struct backend **be, char *err,
                      size_t errlen)
{
  int r;

  if (args->ring_slots < 2 || args->ring_slots > GPUSHM_LIMIT_RING_SLOTS) {
    snprintf(err, errlen, "a ring has 2 to %u slots (GPUSHM_LIMIT_RING_SLOTS), not %u",
             GPUSHM_LIMIT_RING_SLOTS, args->ring_slots);
    return args->ring_slots > GPUSHM_LIMIT_RING_SLOTS ? PROTO_E_LIMIT : PROTO_E_INVAL;
  }
  if (args->open_existing || args->external) {
    snprintf(err, errlen, "a ring is made once, of memory gpushmd allocates: no %s",
             args->open_existing ? "open-existing" : "registered memory");
    return PROTO_E_INVAL;
  }
  if (args->size == 0 ||
      args->size > GPUSHM_LIMIT_BUFFER_SIZE / args->ring_slots - GPUSHM_RING_SLOT_ALIGN) {
    snprintf(err, errlen, "a ring's slot is 1 byte to %llu bytes (its %u slots together "
             "within %llu)",
             (unsigned long long)(GPUSHM_LIMIT_BUFFER_SIZE / args->ring_slots -
                                  GPUSHM_RING_SLOT_ALIGN),
             args->ring_slots, (unsigned long long)GPUSHM_LIMIT_BUFFER_SIZE);
    return PROTO_E_INVAL;
  }
  if (args->image) {
    struct image_params p = *args->image;
    if ((r = image_check(&p, err, errlen)) < 0)
      return r;
    if (p.tiling != IMAGE_TILING_LINEAR || args->size != image_linear_bytes(&p)) {
      snprintf(err, errlen, "a ring's images are linear, each its rows' bytes");
      return PROTO_E_INVAL;
    }
  }
  if ((r = reg_resolve_backend(reg, args->backend, policy, be, err, errlen)) < 0)
    return r;
  if (args->image && (*be)->kind == PROTO_BACKEND_CUDA_IPC) {
    snprintf(err, errlen, "unsupported: cuda-ipc memory imports into no graphics API; a "
             "ring of images lives in host, cuda-fd or cuda-fabric memory");
    return PROTO_E_UNSUPPORTED;
  }
  return 0;
}

/* What the buffer kind makes of a ring: one allocation of every slot, no fence in it
 * (the ready counter is in the control block, which alloc adds). */
static struct reg_create_args memory_args(const struct reg_create_args *args)
{
  struct reg_create_args a = *args;

  a.size = stride_of(args->size) * args->ring_slots;
  a.sync = false;
  a.image = NULL;
  return a;
}

static void ring_estimate(const struct registry *reg, const struct reg_create_args *args,
                          const struct backend *be, struct quota_cost *cost)
{
  struct reg_create_args a = memory_args(args);

  a.sync = true; /* its control block */
  reg_kind_buffer.estimate(reg, &a, be, cost);
}

static int ring_alloc(struct registry *reg, struct reg_object *obj,
                      const struct reg_create_args *args, const struct backend *be,
                      const struct reg_client *client, char *err, size_t errlen)
{
  struct reg_ring *ring = ring_of(obj);
  const struct reg_create_args a = memory_args(args);
  int r;

  if ((r = reg_kind_buffer.alloc(reg, obj, &a, be, client, err, errlen)) < 0)
    return r;
  if ((r = sync_alloc(&ring->buf.sync_state, NULL, -1, args->name, err, errlen)) < 0) {
    reg_kind_buffer.release(reg, obj);
    return r;
  }
  ring->buf.sync = true;
  ring->buf.fence_in_control = true;
  obj->host_bytes += SYNC_CONTROL_SIZE;
  obj->size = a.size;
  ring->slots = args->ring_slots;
  ring->slot_size = args->size;
  ring->slot_stride = stride_of(args->size);
  if ((ring->has_image = args->image != NULL))
    ring->image = *args->image;
  return 0;
}

static int ring_export(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                       const struct reg_policy *policy, bool read_only, struct reg_export *out,
                       char *err, size_t errlen)
{
  const struct reg_ring *ring = ring_of(obj);
  int r = reg_kind_buffer.export(reg, obj, client, policy, read_only, out, err, errlen);

  out->ring_slots = ring->slots;
  out->ring_slot_size = ring->slot_size;
  out->ring_slot_stride = ring->slot_stride;
  return r;
}

static void ring_release(struct registry *reg, struct reg_object *obj)
{
  struct reg_ring *ring = ring_of(obj);

  for (uint32_t i = 0; i < ring->n_consumers; i++) {
    reg_plane_free(ring->consumers[i].plane);
    ring->consumers[i].plane = NULL;
  }
  reg_kind_buffer.release(reg, obj);
}

static void ring_describe(const struct reg_object *obj, struct reg_description *out)
{
  const struct reg_ring *ring = ring_of_const(obj);

  reg_kind_buffer.describe(obj, out);
  out->kind = "ring";
  out->fenced = true; /* its ready counter's fence, which gpushmd repairs */
  out->image = ring->has_image ? &ring->image : NULL;
  out->ring_slots = ring->slots;
  out->ring_consumers = ring->n_consumers;
  out->ring_slot_size = ring->slot_size;
  out->ring_slot_stride = ring->slot_stride;
}

static int write_table(struct reg_ring *ring, char *err, size_t errlen)
{
  uint64_t ids[GPUSHM_LIMIT_RING_CONSUMERS];
  uint32_t planes = 0;

  for (uint32_t i = 0; i < ring->n_consumers; i++) {
    ids[i] = ring->consumers[i].done_id;
    planes |= ring->consumers[i].plane ? UINT32_C(1) << i : 0;
  }
  return sync_ring_table_write(&ring->buf.sync_state, ids, ring->n_consumers, planes, err,
                               errlen);
}

/* After a repair of the ready counter (its producer lost, a fence a dead producer left
 * behind): every consumer's plane to the fence as it then stands, as a timeline's. */
static void planes_repair(struct reg_object *obj)
{
  struct reg_ring *ring = ring_of(obj);
  uint64_t fence = sync_fence(&ring->buf.sync_state);

  for (uint32_t i = 0; fence && i < ring->n_consumers; i++)
    reg_plane_signal(ring->consumers[i].plane, fence, obj, "a consumer's ready plane");
}

/* The last frame a consumer can have taken: presented (the counter, which any producer
 * can raise, and the fence) or promised by the live producer (gpushmd's record). */
static uint64_t frames_owed(const struct reg_ring *ring)
{
  const struct sync_state *s = &ring->buf.sync_state;
  uint64_t owed = sync_fence(s), counter = sync_counter(s);

  if (counter > owed)
    owed = counter;
  if (s->promise.client_id && s->promise.upto > owed)
    owed = s->promise.upto;
  return owed;
}

static int ring_raise_fence(struct registry *reg, struct reg_object *obj, uint32_t releaser,
                            bool force, struct reg_raised_fence *out, char *err, size_t errlen)
{
  int r = reg_buffer_raise_fence(reg, obj, releaser, force, out, err, errlen);

  if ((r == 0 || r == 1) && out->seq)
    planes_repair(obj);
  return r;
}

static int ring_break_promise(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                              bool force, struct reg_broken_promise *out, char *err,
                              size_t errlen)
{
  int r = reg_buffer_break_promise(reg, obj, client_id, force, out, err, errlen);

  if (r == 1)
    planes_repair(obj);
  return r;
}

/* A consumer's ready plane (docs/rings.md#vulkan-consumers): registered by the consumer
 * itself, handed to it and to the ring's writers, who signal it. */
static int ring_semaphore(struct registry *reg, struct reg_object *obj,
                          const struct reg_semaphore_args *a, struct reg_semaphore *out,
                          char *err, size_t errlen)
{
  struct reg_ring *ring = ring_of(obj);
  struct ring_consumer *c = NULL;
  int r;

  (void)reg;
  if (a->read_write) {
    if (a->fd >= 0 || !a->consumer) {
      snprintf(err, errlen, "'%s' is a ring, open read-write here: a producer registers no "
               "plane, it asks for a consumer's (by its done timeline's id)", obj->name);
      return PROTO_E_INVAL;
    }
    for (uint32_t i = 0; i < ring->n_consumers && !c; i++)
      if (ring->consumers[i].done_id == a->consumer)
        c = &ring->consumers[i];
    if (!c) {
      snprintf(err, errlen, "no consumer of '%s' has done timeline %llu (any more)", obj->name,
               (unsigned long long)a->consumer);
      return PROTO_E_NOENT;
    }
  } else {
    for (uint32_t i = 0; i < ring->n_consumers && !c; i++)
      if (ring->consumers[i].client_id == a->client_id)
        c = &ring->consumers[i];
    if (!c || a->consumer) {
      snprintf(err, errlen, "'%s' is open read-only here%s: a consumer's plane is its own, "
               "and others' are its producers' to signal", obj->name,
               c ? "" : " by no consumer (gpushm_ring_open(), then the plane)");
      return PROTO_E_PERM;
    }
  }
  if (a->fd >= 0) {
    if (c->plane) {
      snprintf(err, errlen, "this consumer of '%s' has a ready plane already", obj->name);
      return PROTO_E_EXIST;
    }
    if ((r = reg_plane_make(a->fd, a->uuid, false, &c->plane, err, errlen)) < 0)
      return r;
    /* Listed first, the counter read after: a producer that publishes a frame after
     * this read finds the bit when it reads the table next (it reads it after each
     * publication), so that every frame above from is signalled by a producer; those
     * up to it the consumer skips.  No signal from here: the fence lags the counter, and
     * a signal of a lower value landing after a producer's would set the semaphore
     * back under a frame already presented. */
    if ((r = write_table(ring, err, errlen)) < 0) {
      reg_plane_free(c->plane);
      c->plane = NULL;
      return r;
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    out->from = sync_counter(&ring->buf.sync_state);
    out->registered = true;
    log_msg(LOG_LEVEL_DEBUG, "ring '%s' (id %llu): consumer client %u has a ready plane on "
            "device %d, frames above %llu", obj->name, (unsigned long long)obj->id,
            c->client_id, c->plane->device, (unsigned long long)out->from);
  }
  if (!c->plane) {
    snprintf(err, errlen, "this consumer of '%s' has no ready plane: its process registers "
             "one (gpushm_vk_attach_ring())", obj->name);
    return PROTO_E_NOENT;
  }
  return reg_plane_hand_out(c->plane, out, err, errlen);
}

static int ring_attach(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                       uid_t uid, struct reg_object *done, char *err, size_t errlen)
{
  struct reg_ring *ring = ring_of(obj);
  uint32_t of_uid = 0;
  int r;

  (void)reg;
  if (ring->n_consumers == GPUSHM_LIMIT_RING_CONSUMERS) {
    snprintf(err, errlen, "ring '%s' has %u consumers attached, its most "
             "(GPUSHM_LIMIT_RING_CONSUMERS)", obj->name, ring->n_consumers);
    return PROTO_E_LIMIT;
  }
  for (uint32_t i = 0; i < ring->n_consumers; i++)
    of_uid += ring->consumers[i].uid == uid;
  /* Every consumer holds the producer back: one uid that may read the ring must not take
   * every place in it (its owner's consumers are its own business). */
  if (uid != obj->owner_uid && of_uid >= GPUSHM_LIMIT_RING_CONSUMERS_PER_UID) {
    snprintf(err, errlen, "ring '%s' has %u consumers of uid %u attached, the most one uid "
             "may have (GPUSHM_LIMIT_RING_CONSUMERS_PER_UID)", obj->name, of_uid,
             (unsigned)uid);
    return PROTO_E_LIMIT;
  }
  if (!done)
    return 0;
  /* A consumer takes frames presented after it came: the one last presented may be
   * written over already (a producer's wait on the table did not count it yet). */
  if ((r = sync_start_at(&reg_buffer_of(done)->sync_state,
                         sync_counter(&ring->buf.sync_state), err, errlen)) < 0)
    return r;
  ring->consumers[ring->n_consumers++] = (struct ring_consumer){ client_id, uid, done->id, NULL };
  if ((r = write_table(ring, err, errlen)) < 0) {
    ring->n_consumers--;
    return r;
  }
  return 0;
}

static uint64_t ring_consumer(const struct reg_object *obj, uint32_t client_id)
{
  const struct reg_ring *ring = ring_of_const(obj);

  for (uint32_t i = 0; i < ring->n_consumers; i++)
    if (ring->consumers[i].client_id == client_id)
      return ring->consumers[i].done_id;
  return 0;
}

static uint32_t ring_consumer_of(const struct reg_object *obj, uint64_t done_id)
{
  const struct reg_ring *ring = ring_of_const(obj);

  for (uint32_t i = 0; i < ring->n_consumers; i++)
    if (done_id && ring->consumers[i].done_id == done_id)
      return ring->consumers[i].client_id;
  return 0;
}

static uint64_t ring_detach(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                            bool now)
{
  struct reg_ring *ring = ring_of(obj);
  struct reg_key *key;
  uint64_t id = 0;
  char err[200];

  for (uint32_t i = 0; i < ring->n_consumers; i++) {
    if (ring->consumers[i].client_id != client_id)
      continue;
    id = ring->consumers[i].done_id;
    /* Its process may have queued waits on it for frames presented or promised, which no
     * producer signals once it reads the table: past all of them first (producers signal
     * their own promise at least, once their queued signals of it landed, client/ring.c).
     * gpushmd's import then goes, its signal waited for. */
    if (ring->consumers[i].plane)
      reg_plane_signal(ring->consumers[i].plane, frames_owed(ring), obj,
                       "a departing consumer's ready plane");
    reg_plane_free(ring->consumers[i].plane);
    ring->consumers[i] = ring->consumers[--ring->n_consumers];
    break;
  }
  if (!id)
    return 0;
  /* Out of the table first, then past every frame: a producer that read the table
   * before may be waiting on it already, on a stream too. */
  if (write_table(ring, err, sizeof err) < 0)
    log_msg(LOG_LEVEL_WARN, "ring '%s' (id %llu): consumers' table not rewritten: %s",
            obj->name, (unsigned long long)obj->id, err);
  if ((key = ids_find(&reg->names, id)) && ((struct reg_object *)key)->kind == REG_TIMELINE) {
    struct reg_object *done = (struct reg_object *)key;
    struct reg_description d;

    done->ops->describe(done, &d);
    done->ring_detached = true;
    /* A consumer that promised done values may have writes of them queued on its GPU,
     * which would lower a counter raised now: its promise's break (fence_repair.h, once
     * its process is gone or its last handle closed, and those writes landed) raises
     * it instead (kind_timeline.c). */
    if ((now || d.promiser != client_id) && reg_ring_done_raise(reg, done, err, sizeof err) < 0)
      log_msg(LOG_LEVEL_WARN, "ring '%s' (id %llu): a detached consumer's done timeline (id "
              "%llu) not raised: %s", obj->name, (unsigned long long)obj->id,
              (unsigned long long)id, err);
  }
  return id;
}

int reg_ring_done_raise(struct registry *reg, struct reg_object *done, char *err,
                        size_t errlen)
{
  struct reg_buffer *t = reg_buffer_of(done);
  int r = sync_raise_all(&t->sync_state, RING_DONE_DETACHED, err, errlen);
  struct reg_key *key;

  /* Producers' queued waits on its plane too: each for a frame they acquired, never past
   * what the ring promised or reached, which a semaphore can take (RING_DONE_DETACHED is
   * beyond a Vulkan driver's maxTimelineSemaphoreValueDifference).  With the ring gone,
   * so are its producers. */
  if (r >= 0 && t->plane && (key = ids_find(&reg->names, done->ring_of)) &&
      ((struct reg_object *)key)->kind == REG_RING)
    reg_plane_signal(t->plane, frames_owed(ring_of((struct reg_object *)key)), done,
                     "a detached consumer's done plane");
  return r;
}

/* No persistence: a ring, like an image, does not come back after a restart. */
const struct reg_kind_ops reg_kind_ring = {
  .name = "ring",
  .kind = REG_RING,
  .object_size = sizeof(struct reg_ring),
  .check = ring_check,
  .estimate = ring_estimate,
  .alloc = ring_alloc,
  .export = ring_export,
  .release = ring_release,
  .describe = ring_describe,
  .raise_fence = ring_raise_fence,
  .promise = reg_buffer_promise,
  .break_promise = ring_break_promise,
  .semaphore = ring_semaphore,
  .attach = ring_attach,
  .consumer = ring_consumer,
  .consumer_of = ring_consumer_of,
  .detach = ring_detach,
};
