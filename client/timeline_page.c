/* SPDX-License-Identifier: MIT */
/* A timeline's control block page as this process's GPUs reach it: registered with
 * CUDA on a stream's first use, unregistered when the mapping goes (buffer.c), and the
 * CPU standing in where a device cannot (docs/sync.md). */
#include "config.h"
#include "error.h"
#include "device.h"
#include "mapping.h"
#include "shm_layout.h"
#include "timeline_page.h"
#include "timeline_plane.h"

#include <pthread.h>
#include <stddef.h>

/* Registration is once per mapping (process-wide), whichever thread or connection
 * comes first. */
static pthread_mutex_t register_lock = PTHREAD_MUTEX_INITIALIZER;

int client_timeline_attach(struct client_mapping *buf)
{
  buf->sync_method = GPUSHM_SYNC_HOST; /* until a stream uses it */
  buf->timeline_tried = false;
  buf->timeline_device = -1;
  buf->fence_dptr = 0;
  buf->plane_cuda = NULL;
  buf->plane_device = -1;
  buf->plane_waits_off = false;
  return 0;
}

int client_timeline_detach(struct client_mapping *buf)
{
  int r = 0;

  client_plane_detach(buf);
  if (buf->timeline_device >= 0)
    r = client_cuda_host_unregister(buf->control, buf->timeline_device);
  buf->timeline_device = -1;
  return r;
}

int client_timeline_stream(struct client_mapping *buf, void *stream, struct client_stream *s)
{
  int r;

  if ((r = client_cuda_stream_any(stream, s)) < 0)
    return r;
  pthread_mutex_lock(&register_lock);
  if (!buf->timeline_tried) {
    uint64_t dptr = 0;
    buf->timeline_tried = true;
    r = client_cuda_fence_support(s->device, buf->sync_why, sizeof buf->sync_why);
    if (r == 0)
      r = client_cuda_host_register(buf->control, SYNC_CONTROL_SIZE, buf->read_only, s, &dptr,
                                    buf->sync_why, sizeof buf->sync_why);
    if (r == 0) {
      buf->fence_dptr = dptr + offsetof(struct sync_control, fence);
      buf->timeline_device = s->device;
      buf->sync_method = GPUSHM_SYNC_GPU_FENCE;
    } else if (r == 1) {
      buf->sync_method = GPUSHM_SYNC_CPU_FENCE;
    } else {
      buf->timeline_tried = false; /* a driver failure: tried again next time */
    }
  } else if (buf->sync_method == GPUSHM_SYNC_GPU_FENCE && s->device != buf->timeline_device &&
             (r = client_cuda_fence_support(s->device, buf->sync_why,
                                            sizeof buf->sync_why)) == 1) {
    /* Registered through another device; this one cannot run the operations. */
    r = client_error(GPUSHM_E_UNSUPPORTED, "'%s': device %d %s; its streams cannot signal "
                     "or wait on a timeline other devices of this process use on the GPU",
                     buf->name, s->device, buf->sync_why);
    buf->sync_why[0] = '\0';
  }
  if (r >= 0)
    r = buf->sync_method == GPUSHM_SYNC_GPU_FENCE ? 0 : 1;
  pthread_mutex_unlock(&register_lock);
  return r;
}

