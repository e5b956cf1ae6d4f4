/* SPDX-License-Identifier: MIT */
/* Handing a buffer's memory to another engine, every way in one call
 * (gpushm_buffer_export): a dma-buf of a range for RDMA registration, the allocation's
 * OPAQUE_FD for a graphics API or another CUDA context, the host mapping, a cuda-fabric
 * buffer's fabric handle, the device address.  What each needs of the open is checked
 * here, once; the older calls (dma-buf, fabric handle, memory fd) are this one. */
#include "config.h"
#include "error.h"
#include "device.h"
#include "segment.h"
#include "buffer.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(gpushm_export_desc_t) == GPUSHM_EXPORT_DESC_SIZE_V1,
               "the first published layout");
_Static_assert(sizeof(((gpushm_export_desc_t *)0)->fabric_handle) == GPUSHM_FABRIC_HANDLE_BYTES,
               "one size of fabric handle");

static int export_dmabuf(const struct client_mapping *m, uint64_t offset, uint64_t length,
                         gpushm_export_desc_t *d)
{
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t start;
  int r;

  if (m->backend == GPUSHM_BACKEND_HOST)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' is host memory: a dma-buf is for device "
                        "memory (register the host mapping itself: GPUSHM_EXPORT_HOST_POINTER)",
                        m->name);
  if (m->backend == GPUSHM_BACKEND_CUDA_IPC)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' is a cuda-ipc buffer: the driver gives "
                        "no dma-buf for memory opened through legacy CUDA IPC; use cuda-fd",
                        m->name);
  if (!client_backend_is_fd_device(m->backend) || !m->ptr || m->device < 0)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' has no device mapping in this process",
                        m->name);
  if (m->read_only)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only, and whoever registers a "
                        "dma-buf may write through it", m->name);
  start = (uint64_t)(uintptr_t)m->ptr + offset;
  if (start % page || length % page)
    return client_error(GPUSHM_E_INVAL, "a dma-buf range starts and ends on a page boundary "
                        "(%llu bytes): offset %llu and size %llu of '%s' do not",
                        (unsigned long long)page, (unsigned long long)offset,
                        (unsigned long long)length, m->name);
  if ((r = client_cuda_export_dmabuf((char *)m->ptr + offset, length, m->device, &d->fd)) < 0)
    return r;
  d->allocation_size = length;
  d->device = m->device;
  return 0;
}

/* The fd of an open that keeps one (map_device GPUSHM_DEVICE_NONE), a new dup of it. */
static int export_opaque_fd(const struct client_mapping *m, uint64_t offset,
                            gpushm_export_desc_t *d)
{
  int fd = m->memory_fd >= 0 ? m->memory_fd : m->segment ? client_segment_fd(m->segment) : -1;

  if (m->backend == GPUSHM_BACKEND_HOST)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' is host memory: it is exported by its "
                        "pointer (GPUSHM_EXPORT_HOST_POINTER)", m->name);
  if (m->device != GPUSHM_DEVICE_NONE || fd < 0)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' keeps no fd: open it with map_device "
                        "GPUSHM_DEVICE_NONE", m->name);
  if ((d->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0)
    return client_error(errno == EMFILE ? GPUSHM_E_LIMIT : GPUSHM_E_IO, "dup: %s",
                        strerror(errno));
  if (m->backend == GPUSHM_BACKEND_EXTERNAL) {
    d->allocation_size = m->ext_allocation_size;
    d->flags |= m->ext_dedicated ? GPUSHM_EXPORT_DEDICATED : 0;
    if ((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY)
      d->flags |= GPUSHM_EXPORT_READ_ONLY_FD;
  } else {
    d->allocation_size = m->segment ? client_segment_size(m->segment) : m->allocated;
    d->offset = m->segment ? m->slot_offset : 0;
  }
  d->offset += offset;
  return 0;
}

static int export_host_pointer(const struct client_mapping *m, uint64_t offset,
                               gpushm_export_desc_t *d)
{
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

  if (m->backend != GPUSHM_BACKEND_HOST || !m->ptr)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' is not host memory mapped in this process%s",
                        m->name, m->device == GPUSHM_DEVICE_NONE
                                   ? ": export its fd (GPUSHM_EXPORT_OPAQUE_FD)"
                                   : ": export its device address (GPUSHM_EXPORT_CUDA_VA)");
  /* whole pages, which Vulkan's host-pointer import and RDMA registration want */
  if (m->segment) {
    d->ptr = client_segment_host(m->segment);
    d->allocation_size = client_segment_size(m->segment);
  } else {
    d->ptr = m->ptr;
    d->allocation_size = (m->size + page - 1) / page * page;
  }
  d->offset = (uint64_t)((char *)m->ptr - (char *)d->ptr) + offset;
  return 0;
}

static int export_fabric(const struct client_mapping *m, gpushm_export_desc_t *d)
{
  if (m->backend != GPUSHM_BACKEND_CUDA_FABRIC)
    return client_error(GPUSHM_E_INVAL, "'%s' is not a cuda-fabric buffer", m->name);
  if (!m->has_fabric_handle)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only: a fabric handle maps the "
                        "memory read-write wherever it is imported", m->name);
  memcpy(d->fabric_handle, m->fabric_handle, sizeof d->fabric_handle);
  d->allocation_size = m->allocated;
  return 0;
}

static int export_cuda_va(const struct client_mapping *m, uint64_t offset, gpushm_export_desc_t *d)
{
  if (m->backend == GPUSHM_BACKEND_HOST || m->device < 0 || !m->ptr)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' has no device mapping in this process%s",
                        m->name, m->backend == GPUSHM_BACKEND_HOST
                                   ? " (host memory: GPUSHM_EXPORT_HOST_POINTER)"
                                   : ": open it with a CUDA map device");
  d->ptr = m->ptr;
  d->allocation_size = m->map_len ? m->map_len : m->size;
  d->offset = offset;
  d->device = m->device;
  return 0;
}

int gpushm_buffer_export(gpushm_buffer_t *handle, uint32_t type, uint64_t offset,
                         uint64_t length, gpushm_export_desc_t *out)
{
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  const struct client_mapping *m = handle ? handle->map : NULL;
  gpushm_export_desc_t d;
  uint64_t limit;
  uint32_t size;
  int r;

  client_clear_error();
  if (!out || out->size < offsetof(gpushm_export_desc_t, reserved))
    return client_error(GPUSHM_E_INVAL, "out is NULL or out->size (%u) is not set to sizeof",
                        out ? out->size : 0);
  size = out->size < sizeof d ? out->size : (uint32_t)sizeof d;
  /* A linear image is memory with a row pitch, as a buffer is, and a ring's memory is
   * its slots. */
  if (!m || (m->kind != GPUSHM_KIND_BUFFER && m->kind != GPUSHM_KIND_IMAGE &&
             m->kind != GPUSHM_KIND_RING))
    return client_error(GPUSHM_E_INVAL, "not a buffer, image or ring");
  /* A fabric handle is bytes and a kept memory fd is inherited with the others: both
   * stay good in a child (as they were before this call existed); the rest are this
   * process's mappings. */
  if (handle->inherited && type != GPUSHM_EXPORT_FABRIC && type != GPUSHM_EXPORT_OPAQUE_FD)
    return client_error(GPUSHM_E_INVAL, "'%s' was opened by the parent of this process: what "
                        "it maps does not carry over fork()", m->name);
  /* A buffer's slot or allocation is whole pages, so the page its last byte is in is its
   * own: a dma-buf range may end there. */
  limit = type == GPUSHM_EXPORT_DMABUF ? (m->size + page - 1) / page * page : m->size;
  if (offset > limit || length > limit - offset)
    return client_error(GPUSHM_E_INVAL, "range of %llu bytes at offset %llu is outside '%s' "
                        "(%llu bytes)", (unsigned long long)length, (unsigned long long)offset,
                        m->name, (unsigned long long)m->size);
  /* To its end: for a dma-buf the page's end, as a range must end on a page. */
  if (!length)
    length = (type == GPUSHM_EXPORT_DMABUF ? limit : m->size) - offset;
  if (!length)
    return client_error(GPUSHM_E_INVAL, "offset %llu is the end of '%s': nothing to export",
                        (unsigned long long)offset, m->name);
  memset(&d, 0, sizeof d);
  d.size = size;
  d.type = type;
  d.fd = -1;
  d.device = -1;
  d.length = length;
  d.access = (m->read_only ? GPUSHM_OPEN_READONLY : 0) |
             (handle->write_discard ? GPUSHM_OPEN_WRITE_DISCARD : 0);
  memcpy(d.device_uuid, m->device_uuid, sizeof d.device_uuid);
  switch (type) {
  case GPUSHM_EXPORT_DMABUF: r = export_dmabuf(m, offset, length, &d); break;
  case GPUSHM_EXPORT_OPAQUE_FD: r = export_opaque_fd(m, offset, &d); break;
  case GPUSHM_EXPORT_HOST_POINTER: r = export_host_pointer(m, offset, &d); break;
  case GPUSHM_EXPORT_FABRIC: r = export_fabric(m, &d); break;
  case GPUSHM_EXPORT_CUDA_VA: r = export_cuda_va(m, offset, &d); break;
  default: r = client_error(GPUSHM_E_INVAL, "%u is no GPUSHM_EXPORT_* type", type); break;
  }
  if (r < 0)
    return r;
  memcpy(out, &d, size);
  return 0;
}
