/* SPDX-License-Identifier: MIT */
/* Semaphore planes (docs/sync.md#semaphore-planes), what timelines and rings' consumers
 * share: gpushmd does not mint them (a Vulkan device in a root service costs ~71 MiB and
 * ~45 MiB of device memory per GPU, measured), it checks and keeps what clients minted,
 * and signals them after repairs, when no signaller is left to. */
#include "config.h"
#include "registry/plane.h"
#include "backends/backend_cuda.h"
#include "protocol.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int reg_plane_make(int fd, const uint8_t uuid[16], bool to_readers, struct reg_plane **out,
                   char *err, size_t errlen)
{
  struct reg_plane *p;
  int r;

  *out = NULL;
  if (!uuid) {
    snprintf(err, errlen, "a semaphore comes with its device's UUID (16 bytes)");
    return PROTO_E_INVAL;
  }
  if (!(p = calloc(1, sizeof *p))) {
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  p->fd = -1;
  if ((r = backend_cuda_semaphore_import(fd, uuid, &p->device, &p->cuda, err, errlen)) < 0) {
    reg_plane_free(p);
    return r;
  }
  if ((p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
    snprintf(err, errlen, "dup: %s", strerror(errno));
    reg_plane_free(p);
    return PROTO_E_IO;
  }
  p->to_readers = to_readers;
  *out = p;
  return 0;
}

void reg_plane_free(struct reg_plane *p)
{
  if (!p)
    return;
  backend_cuda_semaphore_release(p->device, p->cuda);
  if (p->fd >= 0)
    close(p->fd);
  free(p);
}

void reg_plane_signal(struct reg_plane *p, uint64_t value, const struct reg_object *obj,
                      const char *what)
{
  char err[256];

  if (p && backend_cuda_semaphore_signal(p->device, p->cuda, value, err, sizeof err) < 0)
    log_msg(LOG_LEVEL_WARN, "'%s' (id %llu): %s not signalled to %llu: %s", obj->name,
            (unsigned long long)obj->id, what, (unsigned long long)value, err);
}

int reg_plane_hand_out(const struct reg_plane *p, struct reg_semaphore *out, char *err,
                       size_t errlen)
{
  if ((out->fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 3)) < 0) {
    snprintf(err, errlen, "dup: %s", strerror(errno));
    return PROTO_E_IO;
  }
  memcpy(out->device_uuid, backend_cuda_device_uuid(p->device), 16);
  out->to_readers = p->to_readers;
  return 0;
}
