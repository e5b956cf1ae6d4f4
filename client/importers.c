/* SPDX-License-Identifier: MIT */
/* One importer per backend, mirroring the daemon's backend table: what an open reply's
 * memory comes with, how this process maps it, and how it lets it go.  buffer.c does
 * what every backend shares (the fds' count, a graphics open's kept fd, a sync buffer's
 * control block and fence) and asks the importer for the rest; a new backend is a row
 * here, not a case in each of buffer.c's functions. */
#include "config.h"
#include "error.h"
#include "conn.h"
#include "device.h"
#include "importers.h"
#include "formats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int map_host_fd(struct client_mapping *buf, int fd)
{
  struct stat st;
  void *p;

  /* A short object, or one that could still be shrunk, would SIGBUS on access: check
   * instead of trusting. */
  if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < buf->size || !client_fd_sealed(fd))
    return client_error(GPUSHM_E_PROTO, "shared memory object is smaller than the buffer or "
                        "not sealed against shrinking");
  p = mmap(NULL, buf->size, PROT_READ | (buf->read_only ? 0 : PROT_WRITE), MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return client_error(errno == ENOMEM ? GPUSHM_E_NOMEM : GPUSHM_E_IO, "mmap %s: %s",
                        buf->name, strerror(errno));
  buf->ptr = p;
  buf->map_len = buf->size;
  return 0;
}

/* A read-only open keeps its fd (a read-only one), from which a DLPack export makes a
 * private view for consumers that write whatever the flag says (dlpack.c). */
static int host_map(struct client_mapping *buf, const struct client_import *in)
{
  int r = map_host_fd(buf, in->fds->fd[0]);

  if (r == 0 && buf->read_only &&
      (buf->memory_fd = fcntl(in->fds->fd[0], F_DUPFD_CLOEXEC, 3)) < 0) {
    r = client_error(errno == EMFILE ? GPUSHM_E_LIMIT : GPUSHM_E_IO, "keeping the fd of %s: %s",
                     buf->name, strerror(errno));
    munmap(buf->ptr, buf->map_len);
    buf->ptr = NULL;
  }
  return r;
}

static int host_unmap(struct client_mapping *buf)
{
  munmap(buf->ptr, buf->map_len);
  return 0;
}

static int ipc_map(struct client_mapping *buf, const struct client_import *in)
{
  const Gpushm__BufferInfo *info = in->open->info;
  struct client_devices devices;
  int r = client_cuda_import_ipc(in->open->ipc_handle.data, in->open->ipc_handle.len,
                                 info->device_uuid.data, info->device_uuid.len, info->device,
                                 in->map_request, &buf->ptr, &devices);

  if (r == GPUSHM_E_CUDA)
    r = client_explain_ipc_failure(in->conn);
  if (r == 0) {
    buf->home_device = devices.home;
    buf->device = devices.map;
    /* The handle maps the whole allocation: a sync buffer's fence lies past its data. */
    if (in->open->has_control && info->allocated >= buf->size)
      buf->map_len = info->allocated;
  }
  return r;
}

static int ipc_unmap(struct client_mapping *buf)
{
  return client_cuda_close_ipc(buf->ptr, buf->device);
}

static int fd_map(struct client_mapping *buf, const struct client_import *in)
{
  const Gpushm__BufferInfo *info = in->open->info;
  struct client_devices devices;
  int r;

  /* The whole allocation is mapped (size rounded up to the device's granule). */
  if (info->allocated < buf->size)
    return client_error(GPUSHM_E_PROTO, "daemon says %s has %llu bytes allocated for %llu",
                        buf->name, (unsigned long long)info->allocated,
                        (unsigned long long)buf->size);
  r = client_cuda_import_fd(in->fds->fd[0], info->allocated, buf->read_only,
                            info->device_uuid.data, info->device_uuid.len, info->device,
                            in->map_request, &buf->ptr, &buf->cuda_handle, &devices);
  if (r == 0) {
    buf->map_len = info->allocated;
    buf->home_device = devices.home;
    buf->device = devices.map;
  }
  return r;
}

/* Local processes map the fd; the handle is for other nodes, and only a read-write open
 * gets it (it maps read-write wherever it is imported). */
static int fabric_map(struct client_mapping *buf, const struct client_import *in)
{
  const Gpushm__OpenReply *open = in->open;

  if (open->fabric_handle.len != (buf->read_only ? 0 : GPUSHM_FABRIC_HANDLE_BYTES))
    return client_error(GPUSHM_E_PROTO, "daemon sent a fabric handle of %zu bytes for "
                        "%s, opened %s", open->fabric_handle.len, buf->name,
                        buf->read_only ? "read-only" : "read-write");
  if (!buf->read_only) {
    memcpy(buf->fabric_handle, open->fabric_handle.data, GPUSHM_FABRIC_HANDLE_BYTES);
    buf->has_fabric_handle = true;
  }
  return fd_map(buf, in);
}

static int fd_unmap(struct client_mapping *buf)
{
  return client_cuda_close_fd(buf->ptr, buf->map_len, buf->cuda_handle, buf->device);
}

/* Registered memory in CUDA: imported on the device of its UUID; a buffer or linear
 * image mapped whole, an optimal image as a mipmapped array (no pointer). */
static int map_external_fd(struct client_mapping *buf, int fd, int map_request)
{
  const struct format_info *f = format_info(buf->image.format);
  struct client_devices devices;
  int r;

  if (buf->is_image && buf->image.tiling == GPUSHM_TILING_OPTIMAL && (!f || !f->cuda_format))
    return client_error(GPUSHM_E_UNSUPPORTED, "%s is a %s image, which no CUDA array can "
                        "hold: open it with GPUSHM_DEVICE_NONE for a graphics API", buf->name,
                        f ? f->name : "unknown-format");
  r = client_cuda_import_external(fd, buf->ext_allocation_size, buf->ext_dedicated,
                                  buf->device_uuid, map_request, &buf->cuda_external, &devices);
  if (r < 0)
    return r;
  buf->home_device = devices.home;
  buf->device = devices.map;
  if (buf->is_image && buf->image.tiling == GPUSHM_TILING_OPTIMAL)
    r = client_cuda_external_mipmap(buf->cuda_external, &buf->image, f->cuda_format,
                                    f->cuda_channels, buf->device, &buf->cuda_mipmap);
  else
    r = client_cuda_external_buffer(buf->cuda_external, buf->size, buf->device, &buf->ptr);
  if (r < 0) {
    client_cuda_external_destroy(buf->cuda_external, NULL, NULL, buf->device);
    buf->cuda_external = NULL;
    return r;
  }
  buf->map_len = buf->size;
  return 0;
}

static int external_map(struct client_mapping *buf, const struct client_import *in)
{
  return map_external_fd(buf, in->fds->fd[0], in->map_request);
}

static int external_unmap(struct client_mapping *buf)
{
  return client_cuda_external_destroy(buf->cuda_external, buf->ptr, buf->cuda_mipmap,
                                      buf->device);
}

/* An event is no memory: its handle, imported on the device it lives on. */
static int event_map(struct client_mapping *buf, const struct client_import *in)
{
  const Gpushm__BufferInfo *info = in->open->info;
  int r = client_cuda_import_event(in->open->ipc_handle.data, in->open->ipc_handle.len,
                                   info->device_uuid.data, info->device_uuid.len,
                                   info->device, &buf->ptr, &buf->device);

  buf->home_device = buf->device;
  return r;
}

static int event_unmap(struct client_mapping *buf)
{
  return client_cuda_destroy_event(buf->ptr);
}

static const struct client_importer importers[] = {
  [GPUSHM_BACKEND_HOST] = { .name = "host", .memory_fds = 1, .map = host_map,
                            .unmap = host_unmap },
  [GPUSHM_BACKEND_CUDA_IPC] = { .name = "cuda-ipc", .memory_fds = 0, .map = ipc_map,
                                .unmap = ipc_unmap },
  [GPUSHM_BACKEND_CUDA_FD] = { .name = "cuda-fd", .memory_fds = 1, .keeps_fd = true,
                               .map = fd_map, .unmap = fd_unmap },
  [GPUSHM_BACKEND_CUDA_FABRIC] = { .name = "cuda-fabric", .memory_fds = 1, .keeps_fd = true,
                                   .map = fabric_map, .unmap = fd_unmap },
  [GPUSHM_BACKEND_EXTERNAL] = { .name = "registered memory", .memory_fds = 1, .keeps_fd = true,
                                .map = external_map, .unmap = external_unmap },
};

/* A timeline brings no memory: its control block is all it is (buffer.c maps it). */
static int timeline_map(struct client_mapping *buf, const struct client_import *in)
{
  (void)in;
  buf->device = buf->home_device = -1;
  return 0;
}

static int timeline_unmap(struct client_mapping *buf)
{
  (void)buf;
  return 0;
}

static const struct client_importer timeline_importer = {
  .name = "timeline", .memory_fds = 0, .map = timeline_map, .unmap = timeline_unmap,
};

static const struct client_importer event_importer = {
  .name = "event", .memory_fds = 0, .map = event_map, .unmap = event_unmap,
};

const struct client_importer *client_importer_of(const struct client_mapping *m)
{
  const struct client_importer *imp;

  if (m->kind == GPUSHM_KIND_EVENT)
    return &event_importer;
  if (m->kind == GPUSHM_KIND_TIMELINE)
    return &timeline_importer;
  if ((unsigned)m->backend >= sizeof importers / sizeof importers[0])
    return NULL;
  imp = &importers[m->backend];
  return imp->map ? imp : NULL;
}
