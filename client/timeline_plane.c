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
#include "timeline_plane.h"
#include "shm_layout.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

/* One import per mapping, whichever thread or connection signals first. */
static pthread_mutex_t plane_lock = PTHREAD_MUTEX_INITIALIZER;

bool client_plane_wanted(const struct client_mapping *buf)
{
  return buf->control && buf->kind == GPUSHM_KIND_TIMELINE &&
         __atomic_load_n(&buf->control->semaphore, __ATOMIC_ACQUIRE) != 0;
}

int client_plane_request(gpushm_t *conn, const struct client_plane_ask *ask,
                         struct client_plane_reply *out)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__SemaphoreRequest body = GPUSHM__SEMAPHORE_REQUEST__INIT;
  const Gpushm__SemaphoreReply *sr;
  Gpushm__Reply *reply;
  struct client_fds fds;
  int r;

  out->fd = -1;
  if ((r = client_need_feature(conn, GPUSHM_FEATURE_SEMAPHORES, "semaphore planes")) < 0)
    return r;
  body.id = ask->id;
  body.consumer = ask->consumer;
  if (ask->register_fd >= 0) {
    body.device_uuid.data = (uint8_t *)ask->uuid;
    body.device_uuid.len = 16;
    body.to_readers = ask->to_readers;
  }
  req.body_case = GPUSHM__REQUEST__BODY_SEMAPHORE;
  req.semaphore = &body;
  pthread_mutex_lock(&conn->lock);
  r = client_call_locked_fd(conn, &req, ask->register_fd, &reply, &fds);
  pthread_mutex_unlock(&conn->lock);
  if (r < 0)
    return r;
  sr = reply->body_case == GPUSHM__REPLY__BODY_SEMAPHORE ? reply->semaphore : NULL;
  if (!sr || sr->device_uuid.len != 16 || fds.n != 1) {
    client_close_fds(&fds);
    gpushm__reply__free_unpacked(reply, NULL);
    return client_error(GPUSHM_E_PROTO, "gpushmd's semaphore reply has no semaphore");
  }
  memcpy(out->uuid, sr->device_uuid.data, 16);
  out->registered = sr->registered;
  out->from = sr->from;
  out->fd = fds.fd[0];
  gpushm__reply__free_unpacked(reply, NULL);
  return 0;
}

int client_plane_prepare(struct client_mapping *buf, gpushm_t *conn, int device)
{
  const struct client_plane_ask ask = { .id = buf->id, .register_fd = -1 };
  struct client_plane_reply got;
  int r = 0;

  pthread_mutex_lock(&plane_lock);
  if (!buf->plane_cuda && (r = client_plane_request(conn, &ask, &got)) == 0) {
    r = client_cuda_semaphore_import(got.fd, got.uuid, &buf->plane_device, &buf->plane_cuda);
    close(got.fd);
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
  /* a stream's signal of it may be queued still (the primary context's streams; the
   * application's own contexts are its to synchronise before its last close) */
  if (buf->plane_cuda)
    (void)client_cuda_semaphore_retire(buf->plane_cuda, buf->plane_device, NULL, 0, 0);
  buf->plane_cuda = NULL;
  buf->plane_device = -1;
}
