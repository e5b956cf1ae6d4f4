/* SPDX-License-Identifier: MIT */
/* Frame rings (docs/rings.md): a ring's memory and ready timeline are one mapping (kind
 * RING: its fence is its control block's, as a timeline's), each consumer's done
 * timeline a timeline of its own.  What is here is the frame protocol on top: numbers,
 * slots, waiting on every attached consumer, and promises made ahead so that streams
 * never wait on the CPU for a frame to be published. */
#include "config.h"
#include "error.h"
#include "buffer.h"
#include "conn.h"
#include "sync.h"
#include "timeline.h"
#include "timeline_plane.h"
#include "device.h"
#include "graphics.h"
#include "shm_layout.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(GPUSHM_RING_SLOTS_MAX == GPUSHM_LIMIT_RING_SLOTS &&
                 GPUSHM_RING_CONSUMERS_MAX == GPUSHM_LIMIT_RING_CONSUMERS,
               "one limit, two spellings");
/* A producer's promise covers a consumer's every wait: a consumer promises at least
 * a ring's slots ahead of what it released, or a producer's stream wait on it would
 * wait on the CPU for the release to be published. */
_Static_assert(GPUSHM_RING_PROMISE_AHEAD > GPUSHM_LIMIT_RING_SLOTS, "promises cover a lap");

/* Contexts a producer remembers; one more makes it wait for the oldest's work there and
 * then, instead of when a consumer leaves (applications rarely use more than one). */
#define RING_SIGNAL_CONTEXTS 4

struct ring_consumer {
  uint64_t done_id;
  gpushm_buffer_t *done; /* opened read-only; NULL: it left before it could be opened */
  /* Its ready plane imported into CUDA (docs/rings.md#vulkan-consumers), signalled
   * beside the ready counter; NULL: it has none. */
  void *plane;
  int plane_device;
};

struct gpushm_ring {
  gpushm_buffer_t *mem; /* memory and ready timeline */
  bool producer;
  bool observer; /* attached to nothing: takes no frames */
  uint64_t promised; /* ready (a producer) or done (a consumer) promised up to; 0: none */
  /* a producer */
  uint64_t acquired;  /* a frame acquired, not presented; 0: none */
  uint64_t presented; /* by this handle */
  uint32_t table_generation; /* of the consumers' table as last read (even) */
  bool table_read;
  uint32_t n_consumers;
  struct ring_consumer consumers[GPUSHM_LIMIT_RING_CONSUMERS];
  /* the contexts of the streams that signalled consumers' planes: a plane's import goes
   * once their work is done too (the primary context's alone would not cover them) */
  void *signal_ctx[RING_SIGNAL_CONTEXTS];
  uint32_t n_signal_ctx;
  /* a consumer */
  gpushm_buffer_t *done;
  uint64_t next;     /* the next frame it takes */
  uint64_t released; /* the last it released */
  bool has_plane;    /* it registered a ready plane: producers signal it */
};

static const struct client_mapping *map_of(const gpushm_ring_t *ring)
{
  return ring->mem->map;
}

static int check_ring(const gpushm_ring_t *ring, bool producer, const char *what)
{
  if (!ring)
    return client_error(GPUSHM_E_INVAL, "ring is NULL");
  if (ring->observer)
    return client_error(GPUSHM_E_INVAL, "'%s': %s is a %s's; this handle observes "
                        "(GPUSHM_RING_OBSERVER) and takes no part", map_of(ring)->name, what,
                        producer ? "producer" : "consumer");
  if (ring->producer != producer)
    return client_error(GPUSHM_E_INVAL, "'%s': %s is a %s's; this handle is a %s's (%s)",
                        map_of(ring)->name, what, producer ? "producer" : "consumer",
                        ring->producer ? "producer" : "consumer",
                        ring->producer ? "gpushm_ring_create() or GPUSHM_RING_PRODUCER"
                                       : "gpushm_ring_open() without GPUSHM_RING_PRODUCER");
  return 0;
}

static gpushm_ring_frame_t frame_at(const gpushm_ring_t *ring, uint64_t frame)
{
  const struct client_mapping *m = map_of(ring);
  uint32_t slot = (uint32_t)((frame - 1) % m->ring_slots);

  return (gpushm_ring_frame_t){ frame, slot, m->ring_slot_stride * slot };
}

/* The counter a timeline's (or the ring's) signallers published: what numbers go on
 * from. */
static uint64_t published(const gpushm_buffer_t *h)
{
  return __atomic_load_n(&h->map->control->release_seq, __ATOMIC_ACQUIRE);
}

/* Keeps a promise of the values up to need, renewed GPUSHM_RING_PROMISE_AHEAD past it
 * once half of that is left (one round trip per half as many frames): a producer a lap
 * or two ahead of a consumer then still finds the consumer's values promised. */
static int promise_through(gpushm_buffer_t *h, uint64_t *promised, uint64_t need)
{
  int r;

  if (need + GPUSHM_RING_PROMISE_AHEAD / 2 <= *promised)
    return 0;
  if ((r = client_sync_promise(h, need + GPUSHM_RING_PROMISE_AHEAD)) < 0)
    return r;
  *promised = need + GPUSHM_RING_PROMISE_AHEAD;
  return 0;
}

/* ---- a producer's consumers -------------------------------------------------------- */

/* departed: the consumer left the table, and may have waits queued on its plane for
 * frames this producer promised, which nobody signals any more: its plane goes past them
 * (gpushmd's signal at the detach may have been set back by one of ours still queued). */
static void drop_consumer(gpushm_ring_t *ring, struct ring_consumer *c, bool departed)
{
  uint64_t last = ring->promised > ring->presented ? ring->promised : ring->presented;
  bool settled = true;

  /* The imports go after this process's queued signals of the ready plane and waits on
   * the done plane (a consumer that leaves is rare): on streams of the application's
   * contexts here, of the primary context in the retire and the done timeline's close. */
  if (c->plane || (c->done && c->done->map->plane_cuda))
    for (uint32_t i = 0; settled && i < ring->n_signal_ctx; i++)
      settled = client_cuda_context_synchronize(ring->signal_ctx[i]) == 0;
  if (c->done && settled)
    gpushm_buffer_close(c->done); /* else kept (a leak): undefined is worse */
  c->done = NULL;
  if (c->plane && settled)
    (void)client_cuda_semaphore_retire(c->plane, c->plane_device, NULL, 0,
                                       departed ? last : 0);
  c->plane = NULL;
}

/* A stream's context that signals ready planes or waits on done planes, remembered for
 * drop_consumer(). */
static int remember_context(gpushm_ring_t *ring, void *ctx)
{
  int r;

  for (uint32_t i = 0; i < ring->n_signal_ctx; i++)
    if (ring->signal_ctx[i] == ctx)
      return 0;
  if (ring->n_signal_ctx == RING_SIGNAL_CONTEXTS) {
    if ((r = client_cuda_context_synchronize(ring->signal_ctx[0])) < 0)
      return r;
    memmove(ring->signal_ctx, ring->signal_ctx + 1,
            sizeof ring->signal_ctx[0] * (RING_SIGNAL_CONTEXTS - 1));
    ring->n_signal_ctx--;
  }
  ring->signal_ctx[ring->n_signal_ctx++] = ctx;
  return 0;
}

/* A consumer's ready plane, asked of gpushmd and imported into CUDA; *plane NULL where
 * the consumer left meanwhile. */
static int fetch_plane(gpushm_ring_t *ring, struct ring_consumer *c)
{
  const struct client_plane_ask ask = { .id = map_of(ring)->id, .consumer = c->done_id,
                                        .register_fd = -1 };
  struct client_plane_reply got;
  int r;

  if ((r = client_plane_request(ring->mem->conn, &ask, &got)) == GPUSHM_E_NOENT) {
    client_clear_error();
    return 0;
  }
  if (r < 0)
    return r;
  r = client_cuda_semaphore_import(got.fd, got.uuid, &c->plane_device, &c->plane);
  close(got.fd);
  if (r < 0)
    return client_error(r, "'%s': consumer %llu waits on a semaphore this process cannot "
                        "signal (%s); gpushm_ring_evict() detaches it", map_of(ring)->name,
                        (unsigned long long)c->done_id, gpushm_last_error_message());
  return 0;
}

/* The table as gpushmd last wrote it (a seqlock: read again while it changes).  Bounded:
 * every producer can write the page, and one that leaves the count odd must not hold the
 * others here; -1 then (GPUSHM_E_PROTO set). */
#define TABLE_READ_TRIES 100000

static int read_table(const struct sync_control *ctl, uint64_t ids[], uint32_t *gen,
                      uint32_t *planes)
{
  const struct ring_table *t = ring_table_of((struct sync_control *)ctl);
  uint32_t n, g, p;

  for (int tries = 0;; tries++) {
    if (tries == TABLE_READ_TRIES)
      return client_error(GPUSHM_E_PROTO, "the ring's table of consumers stays in the middle "
                          "of a change (another producer scribbled on it?)");
    g = __atomic_load_n(&t->generation, __ATOMIC_ACQUIRE);
    if (g & 1u) {
      spin_wait_step((unsigned)tries);
      continue;
    }
    n = __atomic_load_n(&t->consumers, __ATOMIC_RELAXED);
    if (n > GPUSHM_LIMIT_RING_CONSUMERS)
      n = GPUSHM_LIMIT_RING_CONSUMERS;
    for (uint32_t i = 0; i < n; i++)
      ids[i] = __atomic_load_n(&t->done_id[i], __ATOMIC_RELAXED);
    p = __atomic_load_n(&t->planes, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&t->generation, __ATOMIC_RELAXED) == g)
      break;
  }
  *gen = g;
  if (planes)
    *planes = p;
  return (int)n;
}

/* Whether done_id is in the table; -1 where it cannot be read. */
static int table_lists(const struct sync_control *ctl, uint64_t done_id)
{
  uint64_t ids[GPUSHM_LIMIT_RING_CONSUMERS];
  uint32_t gen;
  int n = read_table(ctl, ids, &gen, NULL);

  for (int i = 0; i < n; i++)
    if (ids[i] == done_id)
      return 1;
  return n < 0 ? -1 : 0;
}

/* Brings the producer's consumers up to the table: those that came are opened (read-
 * only: whoever may write the ring may read its consumers' done timelines), those that
 * left closed.  A consumer that left before its timeline could be opened is skipped. */
static int refresh_consumers(gpushm_ring_t *ring)
{
  uint64_t ids[GPUSHM_LIMIT_RING_CONSUMERS];
  struct ring_consumer kept[GPUSHM_LIMIT_RING_CONSUMERS];
  uint32_t gen, planes, n_kept = 0;
  int n;

  /* every acquire and present asks: the generation alone, while it stays */
  if (ring->table_read &&
      __atomic_load_n(&ring_table_of(ring->mem->map->control)->generation, __ATOMIC_ACQUIRE) ==
        ring->table_generation)
    return 0;
  if ((n = read_table(ring->mem->map->control, ids, &gen, &planes)) < 0)
    return n;
  if (ring->table_read && gen == ring->table_generation)
    return 0;
  for (uint32_t i = 0; i < (uint32_t)n; i++) {
    struct ring_consumer c = { ids[i], NULL, NULL, -1 };
    for (uint32_t j = 0; j < ring->n_consumers; j++)
      if (ring->consumers[j].done_id == ids[i]) {
        c = ring->consumers[j];
        ring->consumers[j].done = NULL;
        ring->consumers[j].plane = NULL;
        break;
      }
    if (!c.done && ids[i]) {
      int r = client_open(ring->mem->conn, NULL, ids[i], GPUSHM_OPEN_READONLY, CLIENT_TIMELINE,
                          &c.done);
      /* gone meanwhile (its consumer let go) only if the table says so now: else a slot
       * it reads would be written over */
      if (r == GPUSHM_E_NOENT && table_lists(ring->mem->map->control, ids[i]) != 0)
        r = client_error(GPUSHM_E_PROTO, "'%s': consumer %llu is attached, and its done "
                         "timeline cannot be opened", map_of(ring)->name,
                         (unsigned long long)ids[i]);
      if (r < 0 && r != GPUSHM_E_NOENT) {
        for (uint32_t k = 0; k < n_kept; k++)
          drop_consumer(ring, &kept[k], false);
        return r;
      }
    }
    if (c.done && !c.plane && (planes >> i & 1u)) {
      int r = fetch_plane(ring, &c);
      if (r < 0) {
        drop_consumer(ring, &c, false);
        for (uint32_t k = 0; k < n_kept; k++)
          drop_consumer(ring, &kept[k], false);
        return r;
      }
    }
    kept[n_kept++] = c;
  }
  for (uint32_t j = 0; j < ring->n_consumers; j++)
    drop_consumer(ring, &ring->consumers[j], true);
  memcpy(ring->consumers, kept, sizeof kept[0] * n_kept);
  ring->n_consumers = n_kept;
  ring->table_generation = gen;
  ring->table_read = true;
  client_clear_error(); /* a consumer gone meanwhile is no error */
  return 0;
}

static int remaining_ms(int timeout_ms, uint64_t deadline)
{
  uint64_t now;

  if (timeout_ms < 0)
    return -1;
  now = client_sync_now_ns();
  return now >= deadline ? 0 : (int)((deadline - now + 999999u) / 1000000u);
}

static int acquire_slot(gpushm_ring_t *ring, bool on_stream, void *stream, int timeout_ms,
                        gpushm_ring_frame_t *out)
{
  const struct client_mapping *m;
  uint64_t frame, deadline = 0, last;
  int r;

  client_clear_error();
  if ((r = check_ring(ring, true, "acquiring a slot")) < 0)
    return r;
  if (!out)
    return client_error(GPUSHM_E_INVAL, "out is NULL");
  m = map_of(ring);
  if (ring->acquired)
    return client_error(GPUSHM_E_INVAL, "'%s': frame %llu is acquired and not presented: "
                        "present it first (one frame at a time)", m->name,
                        (unsigned long long)ring->acquired);
  if (timeout_ms >= 0)
    deadline = client_sync_now_ns() + (uint64_t)timeout_ms * 1000000u;
  if ((r = refresh_consumers(ring)) < 0)
    return r;
  last = published(ring->mem);
  frame = (ring->presented > last ? ring->presented : last) + 1;
  /* Before any wait: consumers' streams may wait for it on the GPU from now on. */
  if ((r = promise_through(ring->mem, &ring->promised, frame)) < 0)
    return r;
  if (frame > m->ring_slots) {
    for (uint32_t i = 0; i < ring->n_consumers; i++) {
      gpushm_buffer_t *done = ring->consumers[i].done;
      struct client_stream s;
      if (!done)
        continue;
      /* on its done plane where it has one (docs/rings.md#done-planes) */
      r = client_timeline_wait_plane(done, on_stream, stream, frame - m->ring_slots,
                                     remaining_ms(timeout_ms, deadline));
      if ((r == 0 || r == GPUSHM_E_LOST) && on_stream && done->map->plane_cuda &&
          (r = client_cuda_stream_any(stream, &s)) == 0)
        r = remember_context(ring, s.ctx);
      /* A consumer that died released nothing: it is waited for no more (its value is
       * lost, not released). */
      if (r == GPUSHM_E_LOST)
        r = 0;
      if (r < 0)
        return r == GPUSHM_E_TIMEOUT
                 ? client_error(GPUSHM_E_TIMEOUT, "'%s': slot %u (frame %llu) still held by "
                                "consumer %llu (it has not released frame %llu) after %d ms; "
                                "gpushm_ring_evict() detaches it", m->name,
                                frame_at(ring, frame).slot, (unsigned long long)frame,
                                (unsigned long long)ring->consumers[i].done_id,
                                (unsigned long long)(frame - m->ring_slots), timeout_ms)
                 : r;
    }
  }
  client_clear_error();
  ring->acquired = frame;
  *out = frame_at(ring, frame);
  return 0;
}

int gpushm_ring_acquire_slot(gpushm_ring_t *ring, int timeout_ms, gpushm_ring_frame_t *out)
{
  return acquire_slot(ring, false, NULL, timeout_ms, out);
}

int gpushm_ring_acquire_slot_stream(gpushm_ring_t *ring, void *stream, int timeout_ms,
                                    gpushm_ring_frame_t *out)
{
  return acquire_slot(ring, true, stream, timeout_ms, out);
}

/* Consumers' ready planes, after the ready counter (docs/rings.md#vulkan-consumers).  The
 * table is read again after the frame's publication: a consumer whose plane gpushmd
 * listed before that read is signalled, and one listed after it read a counter that
 * includes this frame, which it then does not wait for (SemaphoreReply.from). */
static int signal_planes(gpushm_ring_t *ring, bool on_stream, void *stream, uint64_t frame)
{
  struct client_stream s;
  bool resolved = false;
  int r;

  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if ((r = refresh_consumers(ring)) < 0)
    return r;
  for (uint32_t i = 0; i < ring->n_consumers; i++) {
    struct ring_consumer *c = &ring->consumers[i];
    if (!c->plane)
      continue;
    if (on_stream && !resolved) {
      if ((r = client_cuda_stream_any(stream, &s)) < 0 || (r = remember_context(ring, s.ctx)) < 0)
        return r;
      resolved = true;
    }
    if (on_stream && s.device != c->plane_device)
      return client_error(GPUSHM_E_UNSUPPORTED, "'%s': consumer %llu waits on a semaphore of "
                          "device %d, and a stream of device %d cannot signal it (present "
                          "from the CPU or a stream of device %d)", map_of(ring)->name,
                          (unsigned long long)c->done_id, c->plane_device, s.device,
                          c->plane_device);
    /* a stream that cannot write fences was waited for by the counter's signal: now */
    if ((r = client_cuda_semaphore_signal(c->plane, c->plane_device, frame,
                                          on_stream ? &s : NULL)) < 0)
      return r;
  }
  return 0;
}

static int present(gpushm_ring_t *ring, bool on_stream, void *stream,
                   const gpushm_ring_frame_t *frame)
{
  int r;

  client_clear_error();
  if ((r = check_ring(ring, true, "presenting")) < 0)
    return r;
  if (!frame || !frame->frame || frame->frame != ring->acquired)
    return client_error(GPUSHM_E_INVAL, "'%s': frame %llu is not the one acquired (%llu)",
                        map_of(ring)->name, frame ? (unsigned long long)frame->frame : 0ull,
                        (unsigned long long)ring->acquired);
  if ((r = client_timeline_signal(ring->mem, on_stream, stream, frame->frame)) < 0)
    return r;
  /* presented, whatever a consumer's plane says: the counter has it */
  ring->presented = frame->frame;
  ring->acquired = 0;
  return signal_planes(ring, on_stream, stream, frame->frame);
}

int gpushm_ring_present(gpushm_ring_t *ring, const gpushm_ring_frame_t *frame)
{
  return present(ring, false, NULL, frame);
}

int gpushm_ring_present_stream(gpushm_ring_t *ring, void *stream, const gpushm_ring_frame_t *frame)
{
  return present(ring, true, stream, frame);
}

/* ---- a consumer ----------------------------------------------------------------------- */

/* What a consumer's acquire checks first, and the frame it takes (*frame): the next, or
 * with GPUSHM_RING_LATEST the newest presented.  external: its queue waits on a plane. */
static int frame_to_take(gpushm_ring_t *ring, unsigned flags, const gpushm_ring_frame_t *out,
                         bool external, uint64_t *frame)
{
  uint64_t reached;
  int r;

  client_clear_error();
  if ((r = check_ring(ring, false, "acquiring a frame")) < 0)
    return r;
  if (!out)
    return client_error(GPUSHM_E_INVAL, "out is NULL");
  if (flags & ~GPUSHM_RING_LATEST)
    return client_error(GPUSHM_E_INVAL, "unknown acquire flags 0x%x", flags);
  if (external && !ring->has_plane)
    return client_error(GPUSHM_E_INVAL, "'%s': a queue waits for frames on a semaphore this "
                        "consumer registered (gpushm_ring_register_semaphore()), and it has "
                        "none", map_of(ring)->name);
  /* evicted by a producer: the slots are no longer kept for it */
  if ((r = table_lists(map_of(ring)->control,
                       gpushm_timeline_id((gpushm_timeline_t *)ring->done))) <= 0)
    return r < 0 ? r
                 : client_error(GPUSHM_E_PERM, "'%s': this consumer was evicted by a producer "
                                "(or has let go): open the ring again to take frames",
                                map_of(ring)->name);
  *frame = ring->next;
  if ((flags & GPUSHM_RING_LATEST) && (reached = gpushm_ring_presented(ring)) > *frame)
    *frame = reached;
  return 0;
}

static int acquire_frame(gpushm_ring_t *ring, bool on_stream, void *stream, unsigned flags,
                         int timeout_ms, gpushm_ring_frame_t *out)
{
  uint64_t frame;
  int r;

  if ((r = frame_to_take(ring, flags, out, false, &frame)) < 0)
    return r;
  if ((r = client_timeline_wait(ring->mem, on_stream, stream, frame, timeout_ms)) < 0) {
    /* Reached by its producer's loss, as is every value it promised: the next frame is
     * a next producer's first, and those lost are released (none will be read), so
     * that the next producer does not wait for them.  The loss's message is kept. */
    if (r == GPUSHM_E_LOST) {
      /* the end of the lost values: a next producer's frames after it are not skipped */
      uint64_t lost = __atomic_load_n(&map_of(ring)->control->lost_upto, __ATOMIC_ACQUIRE);
      char why[256];
      snprintf(why, sizeof why, "%s", gpushm_last_error_message());
      if (lost < frame)
        lost = frame;
      ring->next = lost + 1;
      if (lost > ring->released &&
          promise_through(ring->done, &ring->promised, lost + map_of(ring)->ring_slots) == 0 &&
          client_timeline_signal(ring->done, on_stream, stream, lost) == 0)
        ring->released = lost;
      client_error(GPUSHM_E_LOST, "%s", why);
    }
    return r;
  }
  ring->next = frame + 1;
  *out = frame_at(ring, frame);
  return 0;
}

int gpushm_ring_acquire_frame(gpushm_ring_t *ring, unsigned flags, int timeout_ms,
                              gpushm_ring_frame_t *out)
{
  return acquire_frame(ring, false, NULL, flags, timeout_ms, out);
}

int gpushm_ring_acquire_frame_stream(gpushm_ring_t *ring, void *stream, unsigned flags,
                                     int timeout_ms, gpushm_ring_frame_t *out)
{
  return acquire_frame(ring, true, stream, flags, timeout_ms, out);
}

static int check_release(const gpushm_ring_t *ring, const gpushm_ring_frame_t *frame)
{
  int r;

  if ((r = check_ring(ring, false, "releasing")) < 0)
    return r;
  if (!frame || frame->frame <= ring->released || frame->frame >= ring->next)
    return client_error(GPUSHM_E_INVAL, "'%s': frame %llu is not one this consumer holds "
                        "(it released up to %llu and acquired up to %llu)", map_of(ring)->name,
                        frame ? (unsigned long long)frame->frame : 0ull,
                        (unsigned long long)ring->released,
                        (unsigned long long)(ring->next - 1));
  return 0;
}

/* How a consumer's done timeline is signalled: an external release is its done plane's
 * signal, which the consumer's queue made (or will make). */
enum release_by { RELEASE_CPU, RELEASE_STREAM, RELEASE_EXTERNAL };

/* Releases up to frame: promises a ring's worth past it (so that producers' waits on the
 * slots it frees are promised), then signals it. */
static int release_through(gpushm_ring_t *ring, enum release_by by, void *stream, uint64_t frame)
{
  int r;

  if ((r = promise_through(ring->done, &ring->promised, frame + map_of(ring)->ring_slots)) < 0)
    return r;
  r = by == RELEASE_EXTERNAL
        ? client_timeline_signal_external(ring->done, frame)
        : client_timeline_signal(ring->done, by == RELEASE_STREAM, stream, frame);
  if (r < 0)
    return r;
  ring->released = frame;
  return 0;
}

static int release(gpushm_ring_t *ring, enum release_by by, void *stream,
                   const gpushm_ring_frame_t *frame)
{
  int r;

  client_clear_error();
  if ((r = check_release(ring, frame)) < 0)
    return r;
  return release_through(ring, by, stream, frame->frame);
}

int gpushm_ring_release(gpushm_ring_t *ring, const gpushm_ring_frame_t *frame)
{
  return release(ring, RELEASE_CPU, NULL, frame);
}

int gpushm_ring_release_stream(gpushm_ring_t *ring, void *stream, const gpushm_ring_frame_t *frame)
{
  return release(ring, RELEASE_STREAM, stream, frame);
}

/* ---- a consumer on the GPU (docs/rings.md#vulkan-consumers) ------------------------------- */

int gpushm_ring_register_semaphore(gpushm_ring_t *ring, int fd, const uint8_t device_uuid[16])
{
  struct client_plane_ask ask = { .register_fd = fd, .uuid = device_uuid };
  struct client_plane_reply got;
  int r;

  client_clear_error();
  if ((r = check_ring(ring, false, "registering a ready semaphore")) < 0)
    return r;
  if (fd < 0 || !device_uuid)
    return client_error(GPUSHM_E_INVAL, "a semaphore's fd and its device's UUID, please");
  if (ring->next != ring->released + 1)
    return client_error(GPUSHM_E_INVAL, "'%s': this consumer holds frames %llu to %llu: "
                        "release them before registering a semaphore", map_of(ring)->name,
                        (unsigned long long)(ring->released + 1),
                        (unsigned long long)(ring->next - 1));
  ask.id = map_of(ring)->id;
  if ((r = client_plane_request(ring->mem->conn, &ask, &got)) < 0)
    return r;
  close(got.fd); /* the caller has its own */
  ring->has_plane = true;
  /* frames up to from may have been presented without a signal of it: not taken */
  if (got.from > ring->released) {
    if ((r = release_through(ring, RELEASE_CPU, NULL, got.from)) < 0)
      return r;
    ring->next = got.from + 1;
  }
  return 0;
}

int gpushm_ring_acquire_frame_external(gpushm_ring_t *ring, unsigned flags, int timeout_ms,
                                       gpushm_ring_frame_t *out)
{
  const struct sync_control *ctl;
  uint64_t frame, deadline = 0;
  int r;

  if ((r = frame_to_take(ring, flags, out, true, &frame)) < 0)
    return r;
  ctl = map_of(ring)->control;
  if (timeout_ms >= 0)
    deadline = client_sync_now_ns() + (uint64_t)timeout_ms * 1000000u;
  if ((r = client_sync_wait_published(ring->mem->map, frame, true, timeout_ms, deadline)) < 0)
    return r;
  if (sync_value_lost(ctl, frame)) {
    /* reached by its producer's loss: the caller releases up to the loss's end, so that a
     * next producer's first frame is not skipped nor waited for */
    uint64_t lost = __atomic_load_n(&ctl->lost_upto, __ATOMIC_ACQUIRE);
    if (lost < frame)
      lost = frame;
    ring->next = lost + 1;
    *out = frame_at(ring, lost);
    return client_error(GPUSHM_E_LOST, "'%s': frames up to %llu were lost with their "
                        "producer (signaller lost): release frame %llu, then take the next "
                        "producer's", map_of(ring)->name, (unsigned long long)lost,
                        (unsigned long long)lost);
  }
  ring->next = frame + 1;
  *out = frame_at(ring, frame);
  return 0;
}

int gpushm_ring_release_external(gpushm_ring_t *ring, const gpushm_ring_frame_t *frame)
{
  return release(ring, RELEASE_EXTERNAL, NULL, frame);
}

gpushm_timeline_t *gpushm_ring_done_timeline(gpushm_ring_t *ring)
{
  return ring ? (gpushm_timeline_t *)ring->done : NULL;
}

/* ---- making, opening, closing ---------------------------------------------------------- */

static int need_rings(gpushm_t *conn)
{
  return conn ? client_need_feature(conn, GPUSHM_FEATURE_RINGS, "frame rings") : 0;
}

static int wrap(gpushm_buffer_t *mem, bool producer, gpushm_ring_t **out)
{
  gpushm_ring_t *ring = calloc(1, sizeof *ring);

  if (!ring) {
    gpushm_buffer_close(mem);
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  }
  ring->mem = mem;
  ring->producer = producer;
  *out = ring;
  return 0;
}

/* A creator is the ring's producer from the start: it promises the first frames at once,
 * so that consumers' streams queue their waits for frame 1 without a CPU wait, however
 * soon they come. */
static int created(gpushm_buffer_t *mem, gpushm_ring_t **out)
{
  int r;

  if ((r = wrap(mem, true, out)) < 0)
    return r;
  if ((r = promise_through(mem, &(*out)->promised, 1)) < 0) {
    char why[256];
    snprintf(why, sizeof why, "%s", gpushm_last_error_message());
    gpushm_ring_close_unlink(*out);
    *out = NULL;
    return client_error(r, "%s", why);
  }
  return 0;
}

int gpushm_ring_create(gpushm_t *conn, const char *name, uint32_t slots, uint64_t slot_size,
                       const gpushm_create_opts_t *opts, gpushm_ring_t **out)
{
  gpushm_buffer_t *mem;
  int r;

  client_clear_error();
  if (!out)
    return client_error(GPUSHM_E_INVAL, "out is NULL");
  *out = NULL;
  if ((r = need_rings(conn)) < 0 ||
      (r = client_create_ring(conn, name, slot_size, slots, NULL, opts, &mem)) < 0)
    return r;
  return created(mem, out);
}

int gpushm_ring_create_images(gpushm_t *conn, const char *name, uint32_t slots,
                              const gpushm_image_desc_t *desc, const gpushm_create_opts_t *opts,
                              gpushm_ring_t **out)
{
  Gpushm__ImageDesc wire;
  gpushm_buffer_t *mem;
  int r;

  client_clear_error();
  if (!out)
    return client_error(GPUSHM_E_INVAL, "out is NULL");
  *out = NULL;
  if ((r = need_rings(conn)) < 0 || (r = client_image_desc_wire(desc, &wire)) < 0 ||
      (r = client_create_ring(conn, name, 0, slots, &wire, opts, &mem)) < 0)
    return r;
  return created(mem, out);
}

int gpushm_ring_open(gpushm_t *conn, const char *name, unsigned flags, gpushm_ring_t **out)
{
  const bool producer = (flags & GPUSHM_RING_PRODUCER) != 0;
  const bool observer = (flags & GPUSHM_RING_OBSERVER) != 0;
  const bool unmapped = (flags & GPUSHM_RING_UNMAPPED) != 0;
  gpushm_buffer_t *mem;
  gpushm_ring_t *ring = NULL;
  int r;

  client_clear_error();
  if (!out)
    return client_error(GPUSHM_E_INVAL, "out is NULL");
  *out = NULL;
  if (!name)
    return client_error(GPUSHM_E_NAME, "name is NULL");
  if (flags & ~(GPUSHM_RING_PRODUCER | GPUSHM_RING_OBSERVER | GPUSHM_RING_UNMAPPED |
                GPUSHM_MAP_DEVICE_MASK))
    return client_error(GPUSHM_E_INVAL, "unknown ring open flags 0x%x", flags);
  if (unmapped && (flags & GPUSHM_MAP_DEVICE_MASK))
    return client_error(GPUSHM_E_INVAL, "GPUSHM_RING_UNMAPPED or a map device, not both");
  if (producer && observer)
    return client_error(GPUSHM_E_INVAL, "GPUSHM_RING_PRODUCER or GPUSHM_RING_OBSERVER, not both");
  if ((r = need_rings(conn)) < 0 ||
      (r = observer || unmapped
             ? client_open_unmapped(conn, name, !producer, CLIENT_RING, &mem)
                    : client_open(conn, name, 0,
                                  (flags & GPUSHM_MAP_DEVICE_MASK) |
                                    (producer ? 0 : GPUSHM_OPEN_READONLY),
                                  CLIENT_RING, &mem)) < 0 ||
      (r = wrap(mem, producer, &ring)) < 0)
    return r;
  ring->observer = observer;
  if (!producer && !observer) {
    /* Its done timeline starts at the frame last presented: it takes those after.  A
     * promise a lap ahead lets producers' streams wait on it without a CPU wait. */
    if ((r = client_ring_attach(conn, map_of(ring)->id, &ring->done)) < 0 ||
        (r = promise_through(ring->done, &ring->promised,
                             published(ring->done) + map_of(ring)->ring_slots)) < 0) {
      char why[256];
      snprintf(why, sizeof why, "%s", gpushm_last_error_message());
      gpushm_ring_close(ring);
      return client_error(r, "%s", why);
    }
    ring->released = published(ring->done);
    ring->next = ring->released + 1;
  }
  *out = ring;
  return 0;
}

static int close_ring(gpushm_ring_t *ring, bool unlink)
{
  int r = 0, r2;

  client_clear_error();
  if (!ring)
    return client_error(GPUSHM_E_INVAL, "ring is NULL");
  for (uint32_t i = 0; i < ring->n_consumers; i++)
    drop_consumer(ring, &ring->consumers[i], false);
  /* The done timeline first: its close lets this process's queued releases land, and
   * breaks its promise, before the detach makes gpushmd raise it past every frame (a
   * release landing after that would lower it under producers' waits).  The detach is
   * said, not left to the ring's last close: this connection may hold the ring
   * otherwise too (an observer's handle). */
  if (ring->done) {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__RingRequest body = GPUSHM__RING_REQUEST__INIT;
    r = gpushm_buffer_close(ring->done);
    body.id = map_of(ring)->id;
    body.detach = true;
    req.body_case = GPUSHM__REQUEST__BODY_RING;
    req.ring = &body;
    pthread_mutex_lock(&ring->mem->conn->lock);
    r2 = client_send_oneway_locked(ring->mem->conn, &req);
    pthread_mutex_unlock(&ring->mem->conn->lock);
    if (r == 0 && r2 < 0)
      r = r2;
  }
  r2 = unlink ? gpushm_buffer_close_unlink(ring->mem) : gpushm_buffer_close(ring->mem);
  free(ring);
  return r < 0 ? r : r2;
}

int gpushm_ring_evict(gpushm_ring_t *ring, uint64_t consumer)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__RingRequest body = GPUSHM__RING_REQUEST__INIT;
  Gpushm__Reply *reply;
  int r;

  client_clear_error();
  if ((r = check_ring(ring, true, "evicting a consumer")) < 0)
    return r;
  if (!consumer)
    return client_error(GPUSHM_E_INVAL, "consumer 0: none is numbered so");
  body.id = map_of(ring)->id;
  body.evict = consumer;
  req.body_case = GPUSHM__REQUEST__BODY_RING;
  req.ring = &body;
  if ((r = client_call(ring->mem->conn, &req, &reply, NULL)) < 0)
    return r;
  gpushm__reply__free_unpacked(reply, NULL);
  return 0;
}

int gpushm_ring_close(gpushm_ring_t *ring)
{
  return close_ring(ring, false);
}

int gpushm_ring_close_unlink(gpushm_ring_t *ring)
{
  return close_ring(ring, true);
}

/* ---- what it is ------------------------------------------------------------------------ */

uint32_t gpushm_ring_slots(const gpushm_ring_t *ring)
{
  return ring ? map_of(ring)->ring_slots : 0;
}

uint64_t gpushm_ring_slot_size(const gpushm_ring_t *ring)
{
  return ring ? map_of(ring)->ring_slot_size : 0;
}

uint64_t gpushm_ring_slot_stride(const gpushm_ring_t *ring)
{
  return ring ? map_of(ring)->ring_slot_stride : 0;
}

void *gpushm_ring_slot_ptr(const gpushm_ring_t *ring, uint32_t slot)
{
  const struct client_mapping *m = ring ? map_of(ring) : NULL;

  if (!m || slot >= m->ring_slots || !m->ptr)
    return NULL;
  return (char *)m->ptr + m->ring_slot_stride * slot;
}

gpushm_buffer_t *gpushm_ring_buffer(gpushm_ring_t *ring)
{
  return ring ? ring->mem : NULL;
}

uint64_t gpushm_ring_presented(const gpushm_ring_t *ring)
{
  return ring ? __atomic_load_n(&map_of(ring)->control->fence, __ATOMIC_ACQUIRE) : 0;
}

uint32_t gpushm_ring_consumers(const gpushm_ring_t *ring)
{
  uint64_t ids[GPUSHM_LIMIT_RING_CONSUMERS];
  uint32_t gen;
  int n = ring ? read_table(map_of(ring)->control, ids, &gen, NULL) : 0;

  return n > 0 ? (uint32_t)n : 0;
}

uint32_t gpushm_ring_consumer_planes(const gpushm_ring_t *ring)
{
  uint64_t ids[GPUSHM_LIMIT_RING_CONSUMERS];
  uint32_t gen, planes = 0;
  int n = ring ? read_table(map_of(ring)->control, ids, &gen, &planes) : 0;

  /* bits past the count are a scribbling producer's, not consumers' */
  if (n <= 0)
    return 0;
  if (n < 32)
    planes &= (UINT32_C(1) << n) - 1;
  return (uint32_t)__builtin_popcount(planes);
}

int gpushm_ring_is_producer(const gpushm_ring_t *ring)
{
  return ring && ring->producer;
}

int gpushm_ring_state(const gpushm_ring_t *ring, gpushm_sync_state_t *out)
{
  client_clear_error();
  if (out)
    memset(out, 0, sizeof *out);
  if (!ring || !out)
    return client_error(GPUSHM_E_INVAL, "ring and out must not be NULL");
  return client_sync_state(ring->mem, out);
}

uint64_t gpushm_ring_id(const gpushm_ring_t *ring)
{
  return ring ? map_of(ring)->id : 0;
}

const char *gpushm_ring_name(const gpushm_ring_t *ring)
{
  return ring ? map_of(ring)->name : NULL;
}
