/* SPDX-License-Identifier: MIT */
/* Named events and acquire/release ordering on sync buffers. */
#include "config.h"
#include "error.h"
#include "device.h"
#include "buffer.h"
#include "sync.h"
#include "futex.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A gpushm_event_t is a handle whose mapping is of kind GPUSHM_KIND_EVENT. */
#define EVENT_ENTRY(ev) (((const struct gpushm_buffer *)(ev))->map)

/* client_create() ignores opts->backend and refuses GPUSHM_CREATE_SYNC for events. */
int gpushm_event_create(gpushm_t *conn, const char *name, const gpushm_create_opts_t *opts,
                        gpushm_event_t **out)
{
  return client_create(conn, name, 0, opts, CLIENT_EVENT, (gpushm_buffer_t **)out);
}

int gpushm_event_open(gpushm_t *conn, const char *name, gpushm_event_t **out)
{
  if (!name) {
    client_clear_error();
    return client_error(GPUSHM_E_NAME, "name is NULL");
  }
  return client_open(conn, name, 0, 0, CLIENT_EVENT, (gpushm_buffer_t **)out);
}

int gpushm_event_close(gpushm_event_t *event)
{
  return gpushm_buffer_close((gpushm_buffer_t *)event);
}

/* An event is recorded only on streams of its own device (the driver's rule); said
 * here with both devices named instead of the driver's bare "invalid resource handle". */
static int check_record_stream(const struct client_stream *s, int event_device, const char *name)
{
  if (s->device == event_device)
    return 0;
  return client_error(GPUSHM_E_UNSUPPORTED, "'%s': its CUDA IPC event lives on device %d and "
                      "is recorded only on streams of that device, not on this stream of "
                      "device %d (a stream of any device may wait for it)", name, event_device,
                      s->device);
}

int gpushm_event_record(gpushm_event_t *event, void *stream)
{
  struct client_stream s;
  int r;

  client_clear_error();
  if (!event)
    return client_error(GPUSHM_E_INVAL, "event is NULL");
  if ((r = client_cuda_stream(stream, EVENT_ENTRY(event)->device, &s)) < 0 ||
      (r = check_record_stream(&s, EVENT_ENTRY(event)->device, EVENT_ENTRY(event)->name)) < 0)
    return r;
  return client_cuda_record(EVENT_ENTRY(event)->ptr, &s);
}

int gpushm_event_wait(gpushm_event_t *event, void *stream)
{
  struct client_stream s;
  int r;

  client_clear_error();
  if (!event)
    return client_error(GPUSHM_E_INVAL, "event is NULL");
  if ((r = client_cuda_stream(stream, EVENT_ENTRY(event)->device, &s)) < 0)
    return r;
  return client_cuda_wait(EVENT_ENTRY(event)->ptr, &s);
}

uint64_t gpushm_event_id(const gpushm_event_t *event)
{
  return event ? EVENT_ENTRY(event)->id : 0;
}

const char *gpushm_event_name(const gpushm_event_t *event)
{
  return event ? EVENT_ENTRY(event)->name : NULL;
}

/* A handle with a control block: a sync buffer, or (for what timeline.c shares) a
 * timeline. */
static int check_control(const struct client_mapping *buf)
{
  if (!buf)
    return client_error(GPUSHM_E_INVAL, "buffer is NULL");
  if (!buf->control)
    return client_error(GPUSHM_E_INVAL, "'%s' was not created with GPUSHM_CREATE_SYNC", buf->name);
  return 0;
}

static int check_sync(const struct client_mapping *buf, const void *stream)
{
  if (!buf)
    return client_error(GPUSHM_E_INVAL, "buffer is NULL");
  if (buf->kind == GPUSHM_KIND_TIMELINE)
    return client_error(GPUSHM_E_INVAL, "'%s' is a timeline: signal and wait on it with "
                        "gpushm_timeline_*()", buf->name);
  if (buf->kind == GPUSHM_KIND_RING)
    return client_error(GPUSHM_E_INVAL, "'%s' is a frame ring: its frames go round with "
                        "gpushm_ring_*()", buf->name);
  if (!buf->control)
    return client_error(GPUSHM_E_INVAL, "'%s' was not created with GPUSHM_CREATE_SYNC", buf->name);
  if (buf->sync_method == GPUSHM_SYNC_HOST && stream)
    return client_error(GPUSHM_E_INVAL, "'%s' is host memory: pass no stream", buf->name);
  return 0;
}

/* A fence is reachable only from the device the buffer is mapped for: stream work of
 * another device on it would fault (a sticky error for the whole process), so such a
 * stream is refused before anything is queued. */
static int check_fence_stream(const struct client_mapping *buf, const struct client_stream *s)
{
  if (s->device == buf->device)
    return 0;
  return client_error(GPUSHM_E_UNSUPPORTED, "'%s' is mapped for device %d, and this stream is "
                      "on device %d: open it for that device too (GPUSHM_MAP_DEVICE(%d)) and "
                      "release or acquire through that handle", buf->name, buf->device,
                      s->device, s->device);
}

/* Resolves stream for a release (record true) or an acquire of buf's sync method. */
static int sync_stream(const struct client_mapping *buf, void *stream, bool record,
                       struct client_stream *s)
{
  int r;

  if (buf->sync_method == GPUSHM_SYNC_HOST ||
      (buf->sync_method == GPUSHM_SYNC_CPU_FENCE && !record))
    return 0; /* no stream work */
  if ((r = client_cuda_stream(stream, buf->device, s)) < 0)
    return r;
  switch (buf->sync_method) {
  case GPUSHM_SYNC_IPC_EVENT:
    return record ? check_record_stream(s, buf->home_device, buf->name) : 0;
  case GPUSHM_SYNC_GPU_FENCE:
    return check_fence_stream(buf, s);
  default:
    return 0;
  }
}

gpushm_sync_method_t gpushm_buffer_sync_method(const gpushm_buffer_t *handle, const char **why)
{
  const struct client_mapping *buf = handle ? handle->map : NULL;

  if (why)
    *why = buf ? buf->sync_why : "";
  return buf && buf->control ? buf->sync_method : GPUSHM_SYNC_NONE;
}

/* Shared (not private) futex operations: waiters are other processes. */
static long seq_futex(struct sync_control *ctl, int op, uint32_t val, const struct timespec *timeout)
{
  return syscall(SYS_futex, sync_seq_futex_word(ctl), op, val, timeout, NULL, 0);
}

/* Caller-numbered releases, promises and waits for a value need a daemon that repairs
 * them, and a fence or the host counter: an IPC event carries no number. */
static int check_numbered(const gpushm_buffer_t *handle, const char *what)
{
  int r;

  if ((r = client_need_feature(handle->conn, GPUSHM_FEATURE_PROMISES, what)) < 0)
    return r;
  if (handle->map->sync_method == GPUSHM_SYNC_IPC_EVENT)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' is ordered by a CUDA IPC event (a "
                        "library before 0.7.1 created it), which carries no number: %s need "
                        "a fence; recreate it", handle->map->name, what);
  return 0;
}

static uint32_t releaser_id_of(const gpushm_t *conn)
{
  return sync_releaser_id(conn->instance_id, conn->client_id);
}

/* Whether buf's control block has the 0.8 fields: the daemon lays them out in every
 * block it makes or adopts when it offers the feature (proto/shm_layout.h). */
static bool has_promises(const gpushm_t *conn)
{
  return (conn->features & GPUSHM_FEATURE_PROMISES) != 0;
}

/* And whether they are believed: not under a header a holder scribbled over. */
static bool promises_believed(const struct client_mapping *buf, const gpushm_t *conn)
{
  return has_promises(conn) && sync_control_intact(buf->control);
}

/* Whether this kernel has futex_waitv: then every waiter of this library sleeps on the
 * wake word and the sequence's word at once (client_sync_sleep()), and a signal, which
 * always changes the sequence, wakes them all through that word alone.  Probed once. */
static bool kernel_waits_on_both(void)
{
  static int known; /* 0: not yet; 1: it has; 2: it has not */
  int k = __atomic_load_n(&known, __ATOMIC_RELAXED);

  if (!k) {
    k = syscall(SYS_futex_waitv, NULL, 0, 0, NULL, 0) < 0 && errno == ENOSYS ? 2 : 1;
    __atomic_store_n(&known, k, __ATOMIC_RELAXED);
  }
  return k == 1;
}

void client_sync_wake(struct client_mapping *buf, const gpushm_t *conn)
{
  struct sync_control *ctl = buf->control;

  /* Read-only openers cannot announce that they sleep (their control block is
   * read-only), so every release wakes: one syscall, ~0.5 us on a VM when nobody waits
   * (two before 0.8.0's last changes: a tenth of a 100k-frames/s ring's budget). */
  if (has_promises(conn))
    __atomic_add_fetch(&ctl->wake, 1, __ATOMIC_SEQ_CST);
  seq_futex(ctl, FUTEX_WAKE, INT_MAX, NULL);
  if (has_promises(conn) && !kernel_waits_on_both())
    syscall(SYS_futex, &ctl->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Another connection's live promise makes it the only signaller: of the values it
 * covers, and of every value above them too, since a release of one of those would
 * reach them all. */
static int check_unpromised(const struct client_mapping *buf, const gpushm_t *conn,
                            uint64_t value, uint64_t last)
{
  const struct sync_promise *p;

  if (!promises_believed(buf, conn) ||
      !(p = sync_promise_covering(buf->control, last + 1, last,
                                  sync_promise_owner(releaser_id_of(conn)))))
    return 0;
  return client_error(GPUSHM_E_INVAL, "'%s': %s %llu refused: another connection "
                      "promised the values up to %llu, which makes it their only signaller",
                      buf->name, buf->kind == GPUSHM_KIND_TIMELINE ? "signal" : "release",
                      (unsigned long long)value,
                      (unsigned long long)__atomic_load_n(&p->upto, __ATOMIC_RELAXED));
}

/* Publishes a release after the releaser's completion marker for it is on its way:
 * mark() records the event, or writes n into the fence behind stream's work.  The
 * number is the next one (want 0), or want, which must be above the counter.  A
 * concurrent release (unsupported, but not to be made worse) can take the next number
 * first; then the marker is repeated for the one after, so every published number has
 * its marker queued before anyone can see it (a caller-chosen number that another
 * release overtook is refused, its marker queued already). */
/* A sync buffer's completion marker for release v, by its sync method. */
static int mark_by_method(struct client_mapping *buf, const struct client_stream *s, uint64_t v)
{
  int r;

  switch (buf->sync_method) {
  case GPUSHM_SYNC_IPC_EVENT:
    return client_cuda_record(buf->sync_event, s);
  case GPUSHM_SYNC_GPU_FENCE:
    if ((r = client_cuda_fence_write(buf->fence_dptr, v, s)) == 0)
      buf->fence_written = v;
    return r;
  case GPUSHM_SYNC_CPU_FENCE:
    /* No stream memory operations: the CPU writes the fence once the work is done. */
    if ((r = client_cuda_stream_sync(s)) == 0)
      r = client_cuda_fence_store(buf->fence_dptr, v, buf->device);
    return r;
  default:
    return 0;
  }
}

int client_sync_publish(struct client_mapping *buf, const gpushm_t *conn,
                        const struct client_stream *s, client_sync_mark_fn mark, uint64_t want,
                        uint64_t *seq)
{
  struct sync_control *ctl = buf->control;
  uint64_t n = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE), v;
  int r;

  do {
    v = want ? want : n + 1;
    if (v <= n)
      return client_error(GPUSHM_E_INVAL, "'%s': %s %llu is not above its counter, %llu "
                          "(values only grow)", buf->name,
                          buf->kind == GPUSHM_KIND_TIMELINE ? "signal" : "release",
                          (unsigned long long)v, (unsigned long long)n);
    if ((r = check_unpromised(buf, conn, v, n)) < 0)
      return r;
    if ((r = mark(buf, s, v)) < 0)
      return r;
    /* Signs release v for gpushmd, which raises the fence to it should this process
     * die before its GPU runs the write (docs/sync.md).  After the marker is queued: a
     * slot naming this connection names a number it queued a write of, and the daemon
     * writes nothing else.  Before the CAS: its release half orders this store before
     * the number, so no published number lacks its signature (after it, a death in
     * between would leave one unsigned, its write lost for good).  Relaxed is enough
     * for that, and the daemon reads only once this process is gone.  A concurrent
     * releaser (unsupported) may sign the same slot for the same number; it queued that
     * write too, so whichever name is left, a raise is one of a write its signer
     * queued: not worse.  Every read-write holder can scribble the slots, as it can the
     * data and the fence itself: a forged one makes the daemon do no more than the
     * forger could do directly, raise the fence to a published number.  A daemon that
     * scans every slot gets the next slot in turn; an older one looks for release v
     * in slot v % GPUSHM_LIMIT_RELEASERS_KEPT. */
    if (has_promises(conn)) {
      uint64_t slot = __atomic_fetch_add(&ctl->releases_signed, 1, __ATOMIC_RELAXED) %
                      GPUSHM_LIMIT_RELEASERS_KEPT;
      __atomic_store_n(&ctl->released_value[slot], v, __ATOMIC_RELAXED);
      __atomic_store_n(&ctl->released_by[slot], sync_releaser(releaser_id_of(conn), v),
                       __ATOMIC_RELAXED);
    } else {
      __atomic_store_n(&ctl->released_by[v % GPUSHM_LIMIT_RELEASERS_KEPT],
                       sync_releaser(releaser_id_of(conn), v), __ATOMIC_RELAXED);
    }
    /* A caller's number stays its number: published once the counter is below it,
     * however often a concurrent release (unsupported) moved the counter meanwhile. */
    if (want) {
      while (n < v && !__atomic_compare_exchange_n(&ctl->release_seq, &n, v, false,
                                                   __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
        ;
      if (n >= v)
        return client_error(GPUSHM_E_INVAL, "'%s': release %llu was overtaken by another "
                            "releaser's %llu while its fence write was queued (one releaser "
                            "at a time)", buf->name, (unsigned long long)v,
                            (unsigned long long)n);
      break;
    }
  } while (!__atomic_compare_exchange_n(&ctl->release_seq, &n, v, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_ACQUIRE));
  *seq = v;
  return 0;
}

/* Release (want 0: the next number) or caller-numbered release of handle. */
static int release(gpushm_buffer_t *handle, void *stream, uint64_t want, uint64_t *seq)
{
  struct client_mapping *buf = handle ? handle->map : NULL;
  struct client_stream s;
  uint64_t n = 0;
  int r;

  client_clear_error();
  if ((r = check_sync(buf, stream)) < 0)
    return r;
  if (buf->read_only)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only: releasing publishes a write, "
                        "open it read-write to hand it back", buf->name);
  if (want && (r = check_numbered(handle, "caller-numbered releases")) < 0)
    return r;
  if ((r = sync_stream(buf, stream, true, &s)) < 0 ||
      (r = client_sync_publish(buf, handle->conn, &s, mark_by_method, want, &n)) < 0)
    return r;
  client_sync_wake(buf, handle->conn);
  if (seq)
    *seq = n;
  return 0;
}

int gpushm_buffer_release(gpushm_buffer_t *handle, void *stream, uint64_t *seq)
{
  return release(handle, stream, 0, seq);
}

int gpushm_buffer_release_value(gpushm_buffer_t *handle, void *stream, uint64_t value)
{
  if (value == 0) {
    client_clear_error();
    return client_error(GPUSHM_E_INVAL, "release value 0: values start at 1");
  }
  return release(handle, stream, value, NULL);
}

uint64_t client_sync_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spins first: in a pipeline that keeps pace the release is usually microseconds away,
 * and a sleep costs more than that. */
#define ACQUIRE_SPINS 1000
/* Then sleeps on the futex, rechecking at least this often: a releaser linked against
 * libgpushm 0.1 publishes without waking anyone. */
#define ACQUIRE_RECHECK_NS 200000000ull

/* GPUSHM_SYNC_CPU_FENCE: release n is published before a GPU-fence releaser's work is
 * done, so the data is ready only once the fence itself reaches n.  Nobody wakes a
 * futex for a device write: poll. */
#define FENCE_POLL_NS 20000

static int wait_fence_on_cpu(struct client_mapping *buf, uint64_t target, int timeout_ms,
                             uint64_t deadline)
{
  uint64_t value;
  int r;

  while ((r = client_cuda_fence_read(buf->fence_dptr, &value, buf->device)) == 0 &&
         value < target) {
    struct timespec ts = { 0, FENCE_POLL_NS };
    if (timeout_ms >= 0 && client_sync_now_ns() >= deadline)
      return client_error(GPUSHM_E_TIMEOUT, "release %llu of '%s' published but not done "
                          "within %d ms", (unsigned long long)target, buf->name, timeout_ms);
    nanosleep(&ts, NULL);
  }
  return r;
}

int gpushm_buffer_acquire(gpushm_buffer_t *handle, void *stream, uint64_t seq, int timeout_ms)
{
  struct client_mapping *buf = handle ? handle->map : NULL;
  struct client_stream s;
  uint64_t deadline = 0, cur;
  int r;

  client_clear_error();
  /* The stream is checked before any wait: a wrong one fails at once. */
  if ((r = check_sync(buf, stream)) < 0 || (r = sync_stream(buf, stream, false, &s)) < 0)
    return r;
  if (seq == 0 && (seq = __atomic_load_n(&buf->control->release_seq, __ATOMIC_ACQUIRE)) == 0)
    return 0; /* nothing released yet: nothing to wait for */
  if (timeout_ms >= 0)
    deadline = client_sync_now_ns() + (uint64_t)timeout_ms * 1000000u;
  for (unsigned spins = 0; (cur = __atomic_load_n(&buf->control->release_seq,
                                                  __ATOMIC_SEQ_CST)) < seq; spins++) {
    uint64_t now, slice = ACQUIRE_RECHECK_NS;
    struct timespec ts;

    if (spins < ACQUIRE_SPINS) {
      spin_wait_step(spins);
      continue;
    }
    now = client_sync_now_ns();
    if (timeout_ms >= 0 && now >= deadline)
      return client_error(GPUSHM_E_TIMEOUT, "release %llu of '%s' not published within %d ms",
                          (unsigned long long)seq, buf->name, timeout_ms);
    if (timeout_ms >= 0 && deadline - now < slice)
      slice = deadline - now;
    ts.tv_sec = (time_t)(slice / 1000000000u);
    ts.tv_nsec = (long)(slice % 1000000000u);
    /* Returns at once if a release changed the word since cur was read. */
    seq_futex(buf->control, FUTEX_WAIT, (uint32_t)cur, &ts);
  }
  switch (buf->sync_method) {
  case GPUSHM_SYNC_IPC_EVENT:
    return client_cuda_wait(buf->sync_event, &s);
  case GPUSHM_SYNC_GPU_FENCE:
    /* The fence reaches seq once release seq's work is done (a later release only
     * raises it): waiting for >= seq, not == seq, never waits too little. */
    if ((r = client_cuda_fence_wait(buf->fence_dptr, seq, &s)) == 0) {
      uint64_t was = __atomic_load_n(&buf->fence_waited, __ATOMIC_RELAXED);
      while (was < seq && !__atomic_compare_exchange_n(&buf->fence_waited, &was, seq, true,
                                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    }
    return r;
  case GPUSHM_SYNC_CPU_FENCE:
    return wait_fence_on_cpu(buf, seq, timeout_ms, deadline);
  default:
    return 0;
  }
}

uint64_t gpushm_buffer_release_seq(const gpushm_buffer_t *handle)
{
  const struct client_mapping *buf = handle ? handle->map : NULL;

  return buf && buf->control ? __atomic_load_n(&buf->control->release_seq, __ATOMIC_ACQUIRE) : 0;
}

/* Sleeps until the wake word or the release sequence's word changes from what was
 * read (w, last), or for slice_ns at most.  0.8 promisers and gpushmd's breaks change
 * the wake word; releasers the sequence (and libraries before 0.8 only that), hence
 * both (futex_waitv).  Without it (a kernel before 5.16, whose releasers then wake the
 * wake word too, or valgrind, which does not know the call while the kernel and other
 * processes' releasers do) it sleeps on the wake word for 1 ms at most: a wake it misses
 * costs that much, not a slice. */
#define SLEEP_WITHOUT_WAITV_NS 1000000ull

void client_sync_sleep(struct sync_control *ctl, uint32_t w, uint64_t last, uint64_t slice_ns)
{
  struct futex_waitv waiters[2] = {
    { .val = w, .uaddr = (uintptr_t)&ctl->wake, .flags = FUTEX_32 },
    { .val = (uint32_t)last, .uaddr = (uintptr_t)sync_seq_futex_word(ctl), .flags = FUTEX_32 },
  };
  struct timespec at, ts = { (time_t)(slice_ns / 1000000000u), (long)(slice_ns % 1000000000u) };
  uint64_t until = client_sync_now_ns() + slice_ns;

  at.tv_sec = (time_t)(until / 1000000000u);
  at.tv_nsec = (long)(until % 1000000000u);
  if (syscall(SYS_futex_waitv, waiters, 2, 0, &at, CLOCK_MONOTONIC) >= 0 || errno != ENOSYS)
    return;
  if (slice_ns > SLEEP_WITHOUT_WAITV_NS)
    ts = (struct timespec){ 0, (long)SLEEP_WITHOUT_WAITV_NS };
  syscall(SYS_futex, &ctl->wake, FUTEX_WAIT, w, &ts, NULL, 0);
}

int client_sync_wait_published(struct client_mapping *buf, uint64_t value, bool promised_enough,
                               int timeout_ms, uint64_t deadline)
{
  struct sync_control *ctl = buf->control;

  for (unsigned spins = 0;; spins++) {
    uint32_t w = __atomic_load_n(&ctl->wake, __ATOMIC_SEQ_CST);
    uint64_t last = __atomic_load_n(&ctl->release_seq, __ATOMIC_SEQ_CST), now, slice;

    if (value <= last || (promised_enough && sync_control_intact(ctl) &&
                          sync_promise_covering(ctl, value, last, 0)))
      return 0;
    if (spins < ACQUIRE_SPINS) {
      spin_wait_step(spins);
      continue;
    }
    now = client_sync_now_ns();
    if (timeout_ms >= 0 && now >= deadline)
      return client_error(GPUSHM_E_TIMEOUT, "value %llu of '%s' neither %s nor promised "
                          "within %d ms (its counter is at %llu)", (unsigned long long)value,
                          buf->name, buf->kind == GPUSHM_KIND_TIMELINE ? "signalled" : "released",
                          timeout_ms, (unsigned long long)last);
    slice = ACQUIRE_RECHECK_NS;
    if (timeout_ms >= 0 && deadline - now < slice)
      slice = deadline - now;
    client_sync_sleep(ctl, w, last, slice);
  }
}

int client_sync_lost_error(const struct client_mapping *buf, uint64_t value)
{
  const bool timeline = buf->kind == GPUSHM_KIND_TIMELINE;

  return client_error(GPUSHM_E_LOST, "'%s': value %llu was reached because the connection "
                      "that promised it (releaser %u) is gone, not because it was %s: "
                      "%s", buf->name, (unsigned long long)value,
                      __atomic_load_n(&buf->control->lost_by, __ATOMIC_RELAXED),
                      timeline ? "signalled" : "released",
                      timeline ? "signaller lost, what it ordered may be unfinished"
                               : "the buffer holds what its work left");
}

int gpushm_buffer_acquire_value(gpushm_buffer_t *handle, void *stream, uint64_t value,
                                int timeout_ms)
{
  struct client_mapping *buf = handle ? handle->map : NULL;
  struct client_stream s;
  uint64_t deadline = 0;
  int r;

  client_clear_error();
  if ((r = check_sync(buf, stream)) < 0)
    return r;
  if (value == 0)
    return client_error(GPUSHM_E_INVAL, "acquire of value 0: values start at 1");
  if ((r = check_numbered(handle, "waits for a value")) < 0 ||
      (r = sync_stream(buf, stream, false, &s)) < 0)
    return r;
  if (timeout_ms >= 0)
    deadline = client_sync_now_ns() + (uint64_t)timeout_ms * 1000000u;
  /* The host counter is the data's only order: it must be reached.  A fence may be
   * waited for on the GPU once the value is released or promised. */
  if ((r = client_sync_wait_published(buf, value, buf->sync_method != GPUSHM_SYNC_HOST,
                                      timeout_ms, deadline)) < 0)
    return r;
  /* A value reached through a broken promise is waited for all the same: its break may
   * still wait for releases published before the promise (docs/sync.md). */
  switch (buf->sync_method) {
  case GPUSHM_SYNC_GPU_FENCE:
    if ((r = client_cuda_fence_wait(buf->fence_dptr, value, &s)) == 0) {
      uint64_t was = __atomic_load_n(&buf->fence_waited, __ATOMIC_RELAXED);
      while (was < value && !__atomic_compare_exchange_n(&buf->fence_waited, &was, value, true,
                                                         __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    }
    break;
  case GPUSHM_SYNC_CPU_FENCE:
    r = wait_fence_on_cpu(buf, value, timeout_ms, deadline);
    break;
  default:
    r = 0;
  }
  if (r == 0 && sync_control_intact(buf->control) && sync_value_lost(buf->control, value))
    return client_sync_lost_error(buf, value);
  return r;
}

int gpushm_buffer_promise(gpushm_buffer_t *handle, uint64_t upto)
{
  int r;

  client_clear_error();
  if ((r = check_sync(handle ? handle->map : NULL, NULL)) < 0)
    return r;
  return client_sync_promise(handle, upto);
}

int client_sync_promise(gpushm_buffer_t *handle, uint64_t upto)
{
  struct client_mapping *buf = handle ? handle->map : NULL;
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__PromiseRequest body = GPUSHM__PROMISE_REQUEST__INIT;
  Gpushm__Reply *reply;
  int r;

  if ((r = check_control(buf)) < 0)
    return r;
  if (buf->read_only)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only: a promise is of %s, "
                        "which are writes; open it read-write", buf->name,
                        buf->kind == GPUSHM_KIND_TIMELINE ? "signals" : "releases");
  if ((r = check_numbered(handle, "promises")) < 0)
    return r;
  /* gpushmd records it (it breaks what a gone promiser owes) and writes it into the
   * control block for waiters: one round trip, then none per value. */
  body.id = buf->id;
  body.upto = upto;
  req.body_case = GPUSHM__REQUEST__BODY_PROMISE;
  req.promise = &body;
  if ((r = client_call(handle->conn, &req, &reply, NULL)) < 0)
    return r;
  gpushm__reply__free_unpacked(reply, NULL);
  return 0;
}

int gpushm_buffer_value_lost(const gpushm_buffer_t *handle, uint64_t value)
{
  int r;

  client_clear_error();
  if ((r = check_sync(handle ? handle->map : NULL, NULL)) < 0)
    return r;
  return client_sync_value_lost(handle, value);
}

int client_sync_value_lost(const gpushm_buffer_t *handle, uint64_t value)
{
  const struct client_mapping *buf = handle ? handle->map : NULL;
  int r;

  if ((r = check_control(buf)) < 0)
    return r;
  return promises_believed(buf, handle->conn) && sync_value_lost(buf->control, value);
}

int gpushm_buffer_sync_state(const gpushm_buffer_t *handle, gpushm_sync_state_t *out)
{
  int r;

  client_clear_error();
  if (out)
    memset(out, 0, sizeof *out);
  if ((r = check_sync(handle ? handle->map : NULL, NULL)) < 0)
    return r;
  return client_sync_state(handle, out);
}

int client_sync_state(const gpushm_buffer_t *handle, gpushm_sync_state_t *out)
{
  const struct client_mapping *buf = handle ? handle->map : NULL;
  const struct sync_control *ctl;
  uint32_t salt;
  int r;

  if (!out)
    return client_error(GPUSHM_E_INVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  if ((r = check_control(buf)) < 0 ||
      (r = client_need_feature(handle->conn, GPUSHM_FEATURE_PROMISES, "promises")) < 0)
    return r;
  ctl = buf->control;
  out->counter = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE);
  if (!sync_control_intact(ctl))
    return 0; /* its 0.8 fields are not believed */
  /* Releaser ids are client ids salted with the daemon's instance (proto/shm_layout.h). */
  salt = sync_releaser_id(handle->conn->instance_id, 0);
  if (sync_promise_covering(ctl, out->counter + 1, out->counter, 0)) {
    out->promised_upto = __atomic_load_n(&ctl->promise.upto, __ATOMIC_RELAXED);
    out->promiser_client = (uint32_t)(__atomic_load_n(&ctl->promise.owner, __ATOMIC_RELAXED) >> 32) ^
                           salt;
  }
  out->lost_upto = __atomic_load_n(&ctl->lost_upto, __ATOMIC_ACQUIRE);
  if (out->lost_upto) {
    out->lost_from = __atomic_load_n(&ctl->lost_from, __ATOMIC_RELAXED);
    out->lost_client = __atomic_load_n(&ctl->lost_by, __ATOMIC_RELAXED) ^ salt;
  }
  return 0;
}
