/* SPDX-License-Identifier: MIT */
/* Named events and acquire/release ordering on sync buffers. */
#include "config.h"
#include "error.h"
#include "device.h"
#include "buffer.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* A gpushm_event_t is a handle whose mapping is of kind GPUSHM_KIND_EVENT. */
#define EVENT_ENTRY(ev) (((const struct gpushm_buffer *)(ev))->map)

/* client_create() ignores opts->backend and refuses GPUSHM_CREATE_SYNC for events. */
int gpushm_event_create(gpushm_t *conn, const char *name, const gpushm_create_opts_t *opts,
                        gpushm_event_t **out)
{
  return client_create(conn, name, 0, opts, true, (gpushm_buffer_t **)out);
}

int gpushm_event_open(gpushm_t *conn, const char *name, gpushm_event_t **out)
{
  if (!name) {
    client_clear_error();
    return client_error(GPUSHM_E_NAME, "name is NULL");
  }
  return client_open(conn, name, 0, 0, true, (gpushm_buffer_t **)out);
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

static int check_sync(const struct client_mapping *buf, const void *stream)
{
  if (!buf)
    return client_error(GPUSHM_E_INVAL, "buffer is NULL");
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

/* The futex word is the low half of the 64-bit release sequence: it changes with every
 * release, which is all FUTEX_WAIT needs to tell "published meanwhile" from "sleep". */
static uint32_t *seq_futex_word(struct sync_control *ctl)
{
  return (uint32_t *)&ctl->release_seq + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
}

/* Shared (not private) futex operations: waiters are other processes. */
static long seq_futex(struct sync_control *ctl, int op, uint32_t val, const struct timespec *timeout)
{
  return syscall(SYS_futex, seq_futex_word(ctl), op, val, timeout, NULL, 0);
}

/* Publishes the next number after the releaser's completion marker for it is on its
 * way: ordered(n) records the event, or writes n into the fence behind stream's work.
 * A concurrent release (unsupported, but not to be made worse) can take the number
 * first; then the marker is repeated for the next one, so every published number has
 * its marker queued before anyone can see it. */
static int publish(struct client_mapping *buf, const gpushm_t *conn, const struct client_stream *s,
                   uint64_t *seq)
{
  struct sync_control *ctl = buf->control;
  uint64_t n = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE);
  int r;

  do {
    switch (buf->sync_method) {
    case GPUSHM_SYNC_IPC_EVENT:
      r = client_cuda_record(buf->sync_event, s);
      break;
    case GPUSHM_SYNC_GPU_FENCE:
      r = client_cuda_fence_write(buf->fence_dptr, n + 1, s);
      if (r == 0)
        buf->fence_written = n + 1;
      break;
    case GPUSHM_SYNC_CPU_FENCE:
      /* No stream memory operations: the CPU writes the fence once the work is done. */
      if ((r = client_cuda_stream_sync(s)) == 0)
        r = client_cuda_fence_store(buf->fence_dptr, n + 1, buf->device);
      break;
    default:
      r = 0;
    }
    if (r < 0)
      return r;
    /* Signs release n + 1 for gpushmd, which raises the fence to it should this process
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
     * forger could do directly, raise the fence to a published number. */
    __atomic_store_n(&ctl->released_by[(n + 1) % GPUSHM_LIMIT_RELEASERS_KEPT],
                     sync_releaser(sync_releaser_id(conn->instance_id, conn->client_id),
                                   n + 1), __ATOMIC_RELAXED);
  } while (!__atomic_compare_exchange_n(&ctl->release_seq, &n, n + 1, false,
                                        __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE));
  *seq = n + 1;
  return 0;
}

int gpushm_buffer_release(gpushm_buffer_t *handle, void *stream, uint64_t *seq)
{
  struct client_mapping *buf = handle ? handle->map : NULL;
  struct client_stream s;
  uint64_t n;
  int r;

  client_clear_error();
  if ((r = check_sync(buf, stream)) < 0)
    return r;
  if (buf->read_only)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only: releasing publishes a write, "
                        "open it read-write to hand it back", buf->name);
  if ((r = sync_stream(buf, stream, true, &s)) < 0 ||
      (r = publish(buf, handle->conn, &s, &n)) < 0)
    return r;
  /* Read-only openers cannot announce that they sleep (their control block is
   * read-only), so every release wakes: a few hundred ns when nobody waits. */
  seq_futex(buf->control, FUTEX_WAKE, INT_MAX, NULL);
  if (seq)
    *seq = n;
  return 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static uint64_t now_ns(void)
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
    if (timeout_ms >= 0 && now_ns() >= deadline)
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
    deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;
  for (unsigned spins = 0; (cur = __atomic_load_n(&buf->control->release_seq,
                                                  __ATOMIC_SEQ_CST)) < seq; spins++) {
    uint64_t now, slice = ACQUIRE_RECHECK_NS;
    struct timespec ts;

    if (spins < ACQUIRE_SPINS) {
      cpu_relax();
      continue;
    }
    now = now_ns();
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
