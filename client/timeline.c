/* SPDX-License-Identifier: MIT */
/* Timelines: a named counter that the CPU and CUDA streams signal and wait on.  Its
 * fence is a word of its control block (proto/shm_layout.h): the CPU reaches it in the
 * mapping, streams through the page registered with CUDA on first use.  The counter
 * (release_seq) says what was signalled, queued or done; the fence what is done.
 * Promises, signatures and losses are the sync buffers' (sync.c, docs/sync.md). */
#include "config.h"
#include "error.h"
#include "conn.h"
#include "device.h"
#include "buffer.h"
#include "sync.h"
#include "timeline.h"
#include "timeline_page.h"
#include "timeline_plane.h"
#include "shm_layout.h"

#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TIMELINE_OF(tl) ((gpushm_buffer_t *)(tl))
#define MAP_OF(tl) (((const struct gpushm_buffer *)(tl))->map)

static int check_timeline(const gpushm_timeline_t *tl)
{
  const struct client_mapping *m;

  if (!tl)
    return client_error(GPUSHM_E_INVAL, "timeline is NULL");
  m = MAP_OF(tl);
  if (m->kind != GPUSHM_KIND_TIMELINE || !m->control)
    return client_error(GPUSHM_E_INVAL, "'%s' is not a timeline", m->name);
  return 0;
}

/* Raises the fence to v (never lowers it: a later signal may have landed first).
 * Bounded: every read-write holder can write the word, and one that keeps moving it must
 * not hold a signaller here. */
static void raise_fence_on_cpu(struct sync_control *ctl, uint64_t v)
{
  uint64_t n = __atomic_load_n(&ctl->fence, __ATOMIC_ACQUIRE);

  for (int tries = 0; n < v && tries < 64; tries++)
    if (__atomic_compare_exchange_n(&ctl->fence, &n, v, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_ACQUIRE))
      break;
}

/* The completion marker of a signal: the CPU's, now (s NULL, or no stream memory
 * operations: after the stream's work), or a GPU write behind s's work. */
static int mark_cpu(struct client_mapping *buf, const struct client_stream *s, uint64_t v)
{
  int r;

  if (s && (r = client_cuda_stream_sync(s)) < 0)
    return r;
  raise_fence_on_cpu(buf->control, v);
  /* the semaphore after the fence, never before: a repair signals the fence's value */
  return buf->plane_cuda ? client_plane_signal(buf, NULL, v) : 0;
}

static int mark_gpu(struct client_mapping *buf, const struct client_stream *s, uint64_t v)
{
  int r = client_cuda_fence_write(buf->fence_dptr, v, s);

  if (r == 0 && buf->plane_cuda)
    r = client_plane_signal(buf, s, v);

  if (r == 0) {
    uint64_t was = __atomic_load_n(&buf->fence_written, __ATOMIC_RELAXED);
    while (was < v && !__atomic_compare_exchange_n(&buf->fence_written, &was, v, true,
                                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      ;
  }
  return r;
}

/* A timeline with a semaphore plane is signalled there too (timeline_plane.c): imported
 * before the first signal that needs it, for a stream of device (-1: the CPU's). */
static int prepare_plane(gpushm_buffer_t *handle, int device)
{
  return client_plane_wanted(handle->map) ? client_plane_prepare(handle->map, handle->conn, device)
                                          : 0;
}

int client_timeline_signal(gpushm_buffer_t *handle, bool on_stream, void *stream, uint64_t value)
{
  struct client_mapping *buf = handle->map;
  struct client_stream s;
  uint64_t n;
  int r;

  if (value == 0)
    return client_error(GPUSHM_E_INVAL, "signal of value 0: values start at 1");
  if (buf->read_only)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only: signalling is a write, open "
                        "it read-write to signal", buf->name);
  if (!on_stream) {
    if ((r = prepare_plane(handle, -1)) == 0)
      r = client_sync_publish(buf, handle->conn, NULL, mark_cpu, value, &n);
  } else if ((r = client_timeline_stream(buf, stream, &s)) >= 0) {
    int method = r;
    if ((r = prepare_plane(handle, method == 0 ? s.device : -1)) == 0)
      r = client_sync_publish(buf, handle->conn, &s, method == 0 ? mark_gpu : mark_cpu, value,
                              &n);
  }
  if (r < 0)
    return r;
  client_sync_wake(buf, handle->conn);
  return 0;
}

static int timeline_signal(gpushm_timeline_t *tl, bool on_stream, void *stream, uint64_t value)
{
  int r;

  client_clear_error();
  if ((r = check_timeline(tl)) < 0)
    return r;
  return client_timeline_signal(TIMELINE_OF(tl), on_stream, stream, value);
}

int gpushm_timeline_signal(gpushm_timeline_t *tl, uint64_t value)
{
  return timeline_signal(tl, false, NULL, value);
}

int gpushm_timeline_signal_stream(gpushm_timeline_t *tl, void *stream, uint64_t value)
{
  return timeline_signal(tl, true, stream, value);
}

/* A wait for the fence first spins (a pipeline that keeps pace signals within
 * microseconds), then sleeps on the wake word and the sequence (client_sync_sleep()),
 * which CPU signals, promises and gpushmd's breaks change; a GPU's write wakes nobody,
 * hence slices that grow from
 * FENCE_SLICE_MIN_NS to FENCE_SLICE_MAX_NS: the latency a CPU waiter adds to a
 * GPU-signalled value once it has slept a while. */
#define FENCE_SPIN_NS 50000ull
#define FENCE_SLICE_MIN_NS 20000ull
#define FENCE_SLICE_MAX_NS 1000000ull

static int wait_fence_on_cpu(struct client_mapping *buf, uint64_t value, int timeout_ms,
                             uint64_t deadline)
{
  struct sync_control *ctl = buf->control;
  uint64_t start = client_sync_now_ns(), slice = FENCE_SLICE_MIN_NS;

  for (unsigned spins = 0;; spins++) {
    uint32_t w = __atomic_load_n(&ctl->wake, __ATOMIC_SEQ_CST);
    uint64_t last = __atomic_load_n(&ctl->release_seq, __ATOMIC_SEQ_CST), now, nap;

    if (__atomic_load_n(&ctl->fence, __ATOMIC_ACQUIRE) >= value)
      return 0;
    now = client_sync_now_ns();
    if (timeout_ms >= 0 && now >= deadline) {
      last = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE);
      return client_error(GPUSHM_E_TIMEOUT, "value %llu of '%s' %s within %d ms (signalled up "
                          "to %llu, reached %llu)", (unsigned long long)value, buf->name,
                          last >= value ? "signalled but not reached: its signaller's work "
                                          "was not done"
                                        : "not reached",
                          timeout_ms, (unsigned long long)last,
                          (unsigned long long)__atomic_load_n(&ctl->fence, __ATOMIC_ACQUIRE));
    }
    if (now - start < FENCE_SPIN_NS) {
      spin_wait_step(spins);
      continue;
    }
    nap = slice;
    if (timeout_ms >= 0 && deadline - now < nap)
      nap = deadline - now;
    client_sync_sleep(ctl, w, last, nap);
    if (slice < FENCE_SLICE_MAX_NS)
      slice *= 2;
  }
}

/* Whether a stream of device waits on the plane: imported once, and where that cannot
 * be, never tried again for this mapping (the fence word is always right). */
static bool plane_waits(gpushm_buffer_t *handle, int device)
{
  struct client_mapping *buf = handle->map;

  if (__atomic_load_n(&buf->plane_waits_off, __ATOMIC_RELAXED) || !client_plane_wanted(buf))
    return false;
  if (client_plane_prepare(buf, handle->conn, device) == 0)
    return true;
  client_clear_error();
  __atomic_store_n(&buf->plane_waits_off, true, __ATOMIC_RELAXED);
  return false;
}

static int timeline_wait_on(gpushm_buffer_t *handle, bool on_stream, void *stream,
                            uint64_t value, int timeout_ms, bool on_plane)
{
  struct client_mapping *buf = handle->map;
  struct client_stream s;
  uint64_t deadline = 0;
  int r, method = 1;

  if (value == 0)
    return client_error(GPUSHM_E_INVAL, "wait for value 0: values start at 1");
  /* The stream first: a wrong one fails before any wait. */
  if (on_stream && (method = client_timeline_stream(buf, stream, &s)) < 0)
    return method;
  if (timeout_ms >= 0)
    deadline = client_sync_now_ns() + (uint64_t)timeout_ms * 1000000u;
  if (method == 0) {
    /* A value signalled or promised will be reached (a promise not kept is broken): the
     * wait goes to the GPU at once. */
    if ((r = client_sync_wait_published(buf, value, true, timeout_ms, deadline)) < 0)
      return r;
    if (on_plane && plane_waits(handle, s.device))
      r = client_cuda_semaphore_wait(buf->plane_cuda, value, &s);
    else
      r = client_cuda_fence_wait(buf->fence_dptr, value, &s);
    if (r < 0)
      return r;
    uint64_t was = __atomic_load_n(&buf->fence_waited, __ATOMIC_RELAXED);
    while (was < value && !__atomic_compare_exchange_n(&buf->fence_waited, &was, value, true,
                                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      ;
  } else if ((r = wait_fence_on_cpu(buf, value, timeout_ms, deadline)) < 0) {
    return r;
  }
  if (client_sync_value_lost(handle, value) == 1)
    return client_sync_lost_error(buf, value);
  return 0;
}

int client_timeline_wait(gpushm_buffer_t *handle, bool on_stream, void *stream, uint64_t value,
                         int timeout_ms)
{
  return timeline_wait_on(handle, on_stream, stream, value, timeout_ms, false);
}

int client_timeline_wait_plane(gpushm_buffer_t *handle, bool on_stream, void *stream,
                               uint64_t value, int timeout_ms)
{
  return timeline_wait_on(handle, on_stream, stream, value, timeout_ms, true);
}

static int timeline_wait(gpushm_timeline_t *tl, bool on_stream, void *stream, uint64_t value,
                         int timeout_ms)
{
  int r;

  client_clear_error();
  if ((r = check_timeline(tl)) < 0)
    return r;
  return client_timeline_wait(TIMELINE_OF(tl), on_stream, stream, value, timeout_ms);
}

int gpushm_timeline_wait(gpushm_timeline_t *tl, uint64_t value, int timeout_ms)
{
  return timeline_wait(tl, false, NULL, value, timeout_ms);
}

int gpushm_timeline_wait_stream(gpushm_timeline_t *tl, void *stream, uint64_t value,
                                int timeout_ms)
{
  return timeline_wait(tl, true, stream, value, timeout_ms);
}

int gpushm_timeline_create(gpushm_t *conn, const char *name, const gpushm_create_opts_t *opts,
                           gpushm_timeline_t **out)
{
  int r;

  client_clear_error();
  if (conn && (r = client_need_feature(conn, GPUSHM_FEATURE_TIMELINES, "timelines")) < 0)
    return r;
  return client_create(conn, name, 0, opts, CLIENT_TIMELINE, (gpushm_buffer_t **)out);
}

int gpushm_timeline_open(gpushm_t *conn, const char *name, unsigned flags,
                         gpushm_timeline_t **out)
{
  int r;

  client_clear_error();
  if (!name)
    return client_error(GPUSHM_E_NAME, "name is NULL");
  if (conn && (r = client_need_feature(conn, GPUSHM_FEATURE_TIMELINES, "timelines")) < 0)
    return r;
  return client_open(conn, name, 0, flags, CLIENT_TIMELINE, (gpushm_buffer_t **)out);
}

int gpushm_timeline_close(gpushm_timeline_t *tl)
{
  return gpushm_buffer_close(TIMELINE_OF(tl));
}

int gpushm_timeline_close_unlink(gpushm_timeline_t *tl)
{
  return gpushm_buffer_close_unlink(TIMELINE_OF(tl));
}

int gpushm_timeline_promise(gpushm_timeline_t *tl, uint64_t upto)
{
  int r;

  client_clear_error();
  if ((r = check_timeline(tl)) < 0)
    return r;
  return client_sync_promise(TIMELINE_OF(tl), upto);
}

uint64_t gpushm_timeline_value(const gpushm_timeline_t *tl)
{
  return tl && MAP_OF(tl)->control ? __atomic_load_n(&MAP_OF(tl)->control->fence,
                                                     __ATOMIC_ACQUIRE)
                                   : 0;
}

int gpushm_timeline_value_lost(const gpushm_timeline_t *tl, uint64_t value)
{
  int r;

  client_clear_error();
  if ((r = check_timeline(tl)) < 0)
    return r;
  return client_sync_value_lost((const gpushm_buffer_t *)tl, value);
}

int gpushm_timeline_state(const gpushm_timeline_t *tl, gpushm_sync_state_t *out)
{
  int r;

  client_clear_error();
  if ((r = check_timeline(tl)) < 0)
    return r;
  return client_sync_state((const gpushm_buffer_t *)tl, out);
}

gpushm_sync_method_t gpushm_timeline_sync_method(const gpushm_timeline_t *tl, const char **why)
{
  const struct client_mapping *m = tl ? MAP_OF(tl) : NULL;

  if (why)
    *why = m ? m->sync_why : "";
  return m && m->kind == GPUSHM_KIND_TIMELINE ? m->sync_method : GPUSHM_SYNC_NONE;
}

uint64_t gpushm_timeline_id(const gpushm_timeline_t *tl)
{
  return tl ? MAP_OF(tl)->id : 0;
}

const char *gpushm_timeline_name(const gpushm_timeline_t *tl)
{
  return tl ? MAP_OF(tl)->name : NULL;
}

/* ---- semaphore planes (timeline_plane.c; docs/sync.md#semaphore-planes) ------------ */

int gpushm_timeline_semaphore(gpushm_timeline_t *tl, int register_fd, const uint8_t *device_uuid,
                              unsigned flags, int *fd_out, uint8_t uuid_out[16])
{
  const gpushm_buffer_t *handle = (const gpushm_buffer_t *)tl;
  const struct client_plane_ask ask = { .id = handle->map->id, .register_fd = register_fd,
                                        .uuid = device_uuid,
                                        .to_readers = (flags & GPUSHM_SEMAPHORE_TO_READERS) != 0 };
  struct client_plane_reply got;
  int r;

  client_clear_error();
  if ((r = check_timeline(tl)) < 0)
    return r;
  if (!fd_out || !uuid_out || (register_fd >= 0 && !device_uuid))
    return client_error(GPUSHM_E_INVAL, "fd_out and uuid_out (and, to register, device_uuid) "
                        "must not be NULL");
  if (flags & ~GPUSHM_SEMAPHORE_TO_READERS)
    return client_error(GPUSHM_E_INVAL, "unknown flags 0x%x", flags & ~GPUSHM_SEMAPHORE_TO_READERS);
  if (register_fd >= 0 && handle->map->read_only)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only: a semaphore plane is signalled "
                        "by whoever holds it, so registering one is a write; open it "
                        "read-write", handle->map->name);
  *fd_out = -1;
  if ((r = client_plane_request(handle->conn, &ask, &got)) < 0)
    return r;
  *fd_out = got.fd;
  memcpy(uuid_out, got.uuid, 16);
  return got.registered ? 1 : 0;
}

/* A signal a Vulkan queue performs: published as any signal, its marker queued by the
 * caller's submission (the fence write it records and the semaphore it signals). */
static int mark_external(struct client_mapping *buf, const struct client_stream *s, uint64_t v)
{
  (void)buf;
  (void)s;
  (void)v;
  return 0;
}

int gpushm_timeline_signal_external(gpushm_timeline_t *tl, uint64_t value)
{
  int r;

  client_clear_error();
  if ((r = check_timeline(tl)) < 0)
    return r;
  return client_timeline_signal_external((gpushm_buffer_t *)tl, value);
}

int client_timeline_signal_external(gpushm_buffer_t *handle, uint64_t value)
{
  uint64_t n;
  int r;

  if (value == 0)
    return client_error(GPUSHM_E_INVAL, "signal of value 0: values start at 1");
  if (handle->map->read_only)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only: signalling is a write, open "
                        "it read-write to signal", handle->map->name);
  if ((r = client_sync_publish(handle->map, handle->conn, NULL, mark_external, value, &n)) < 0)
    return r;
  client_sync_wake(handle->map, handle->conn);
  return 0;
}

int gpushm_timeline_wait_signalled(gpushm_timeline_t *tl, uint64_t value, int timeout_ms)
{
  uint64_t deadline = 0;
  int r;

  client_clear_error();
  if ((r = check_timeline(tl)) < 0)
    return r;
  if (value == 0)
    return client_error(GPUSHM_E_INVAL, "wait for value 0: values start at 1");
  if (timeout_ms >= 0)
    deadline = client_sync_now_ns() + (uint64_t)timeout_ms * 1000000u;
  return client_sync_wait_published(((gpushm_buffer_t *)tl)->map, value, true, timeout_ms,
                                    deadline);
}

int gpushm_timeline_fence_page(gpushm_timeline_t *tl, void **page, size_t *fence_offset)
{
  int r;

  client_clear_error();
  if ((r = check_timeline(tl)) < 0)
    return r;
  if (!page || !fence_offset)
    return client_error(GPUSHM_E_INVAL, "page and fence_offset must not be NULL");
  if (MAP_OF(tl)->read_only)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only: its page is mapped read-only, "
                        "and only signallers write the fence", MAP_OF(tl)->name);
  *page = MAP_OF(tl)->control;
  *fence_offset = offsetof(struct sync_control, fence);
  return 0;
}

int gpushm_timeline_has_semaphore(const gpushm_timeline_t *tl)
{
  return tl && client_plane_wanted(MAP_OF(tl)) ? 1 : 0;
}
