/* SPDX-License-Identifier: MIT */
/* A timeline's semaphore plane (docs/sync.md#semaphore-planes): a Vulkan timeline
 * semaphore a client minted and registered with gpushmd, which every signaller signals
 * beside the fence so that Vulkan and GL queues can wait on the GPU.  This process
 * signals it through CUDA, imported once per mapping on the first signal that finds the
 * control block's semaphore word set; Vulkan processes import it themselves
 * (gpushm-vulkan.h) through gpushm_timeline_semaphore(). */
#include "config.h"
#include "error.h"
#include "conn.h"
#include "device.h"
#include "buffer.h"
#include "sync.h"
#include "timeline.h"
#include "timeline_plane.h"
#include "shm_layout.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#define MAP_OF(tl) (((const struct gpushm_buffer *)(tl))->map)

/* One import per mapping, whichever thread or connection signals first. */
static pthread_mutex_t plane_lock = PTHREAD_MUTEX_INITIALIZER;

bool client_plane_wanted(const struct client_mapping *buf)
{
  return buf->control && buf->kind == GPUSHM_KIND_TIMELINE &&
         __atomic_load_n(&buf->control->semaphore, __ATOMIC_ACQUIRE) != 0;
}

/* The request (docs/protocol.md): register_fd >= 0 registers it first. */
static int plane_request(gpushm_t *conn, uint64_t id, int register_fd, const uint8_t *uuid,
                         bool to_readers, int *fd_out, uint8_t uuid_out[16], bool *registered)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__SemaphoreRequest body = GPUSHM__SEMAPHORE_REQUEST__INIT;
  const Gpushm__SemaphoreReply *sr;
  Gpushm__Reply *reply;
  struct client_fds fds;
  int r;

  if ((r = client_need_feature(conn, GPUSHM_FEATURE_SEMAPHORES, "semaphore planes")) < 0)
    return r;
  body.id = id;
  if (register_fd >= 0) {
    body.device_uuid.data = (uint8_t *)uuid;
    body.device_uuid.len = 16;
    body.to_readers = to_readers;
  }
  req.body_case = GPUSHM__REQUEST__BODY_SEMAPHORE;
  req.semaphore = &body;
  pthread_mutex_lock(&conn->lock);
  r = client_call_locked_fd(conn, &req, register_fd, &reply, &fds);
  pthread_mutex_unlock(&conn->lock);
  if (r < 0)
    return r;
  sr = reply->body_case == GPUSHM__REPLY__BODY_SEMAPHORE ? reply->semaphore : NULL;
  if (!sr || sr->device_uuid.len != 16 || fds.n != 1) {
    client_close_fds(&fds);
    gpushm__reply__free_unpacked(reply, NULL);
    return client_error(GPUSHM_E_PROTO, "gpushmd's semaphore reply has no semaphore");
  }
  memcpy(uuid_out, sr->device_uuid.data, 16);
  *registered = sr->registered;
  *fd_out = fds.fd[0];
  gpushm__reply__free_unpacked(reply, NULL);
  return 0;
}

int client_plane_prepare(struct client_mapping *buf, gpushm_t *conn, int device)
{
  uint8_t uuid[16];
  bool registered;
  int fd = -1, r = 0;

  pthread_mutex_lock(&plane_lock);
  if (!buf->plane_cuda &&
      (r = plane_request(conn, buf->id, -1, NULL, false, &fd, uuid, &registered)) == 0) {
    r = client_cuda_semaphore_import(fd, uuid, &buf->plane_device, &buf->plane_cuda);
    close(fd);
  }
  if (r == 0 && device >= 0 && device != buf->plane_device)
    r = client_error(GPUSHM_E_UNSUPPORTED, "'%s': its semaphore lives on device %d, and a "
                     "stream of device %d cannot signal it (signal from a stream of device "
                     "%d, or from the CPU)", buf->name, buf->plane_device, device,
                     buf->plane_device);
  pthread_mutex_unlock(&plane_lock);
  return r;
}

int client_plane_signal(struct client_mapping *buf, const struct client_stream *s, uint64_t v)
{
  return client_cuda_semaphore_signal(buf->plane_cuda, buf->plane_device, v, s);
}

void client_plane_detach(struct client_mapping *buf)
{
  if (buf->plane_cuda)
    (void)client_cuda_semaphore_destroy(buf->plane_cuda, buf->plane_device);
  buf->plane_cuda = NULL;
  buf->plane_device = -1;
}

static int check_plain_timeline(const gpushm_timeline_t *tl)
{
  if (!tl)
    return client_error(GPUSHM_E_INVAL, "timeline is NULL");
  if (MAP_OF(tl)->kind != GPUSHM_KIND_TIMELINE || !MAP_OF(tl)->control)
    return client_error(GPUSHM_E_INVAL, "'%s' is not a timeline", MAP_OF(tl)->name);
  return 0;
}

int gpushm_timeline_semaphore(gpushm_timeline_t *tl, int register_fd, const uint8_t *device_uuid,
                              unsigned flags, int *fd_out, uint8_t uuid_out[16])
{
  const gpushm_buffer_t *handle = (const gpushm_buffer_t *)tl;
  bool registered = false;
  int r;

  client_clear_error();
  if ((r = check_plain_timeline(tl)) < 0)
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
  if ((r = plane_request(handle->conn, handle->map->id, register_fd, device_uuid,
                         (flags & GPUSHM_SEMAPHORE_TO_READERS) != 0, fd_out, uuid_out,
                         &registered)) < 0)
    return r;
  return registered ? 1 : 0;
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
  gpushm_buffer_t *handle = (gpushm_buffer_t *)tl;
  uint64_t n;
  int r;

  client_clear_error();
  if ((r = check_plain_timeline(tl)) < 0)
    return r;
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
  if ((r = check_plain_timeline(tl)) < 0)
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
  if ((r = check_plain_timeline(tl)) < 0)
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
