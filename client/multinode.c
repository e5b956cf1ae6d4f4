/* SPDX-License-Identifier: MIT */
/* What a buffer gives engines that move it off this host (docs/multinode.md): a dma-buf
 * of a range, for RDMA registration, and a cuda-fabric buffer's fabric handle.  Both
 * are read-write access wherever they go, so read-only opens get neither. */
#include "config.h"
#include "error.h"
#include "device.h"
#include "buffer.h"

#include <string.h>
#include <unistd.h>

int gpushm_buffer_export_dmabuf(gpushm_buffer_t *handle, uint64_t offset, uint64_t size,
                                int *fd_out)
{
  const struct client_mapping *buf = handle ? handle->map : NULL;
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), span, start;

  client_clear_error();
  if (!fd_out)
    return client_error(GPUSHM_E_INVAL, "fd_out is NULL");
  *fd_out = -1;
  /* A linear image is memory with a row pitch, as a buffer is. */
  if (!buf || (buf->kind != GPUSHM_KIND_BUFFER && buf->kind != GPUSHM_KIND_IMAGE))
    return client_error(GPUSHM_E_INVAL, "not a buffer or image");
  if (handle->inherited)
    return client_error(GPUSHM_E_INVAL, "'%s' was opened by the parent of this process: CUDA "
                        "does not carry over fork()", buf->name);
  if (buf->backend == GPUSHM_BACKEND_HOST)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' is host memory: a dma-buf is for device "
                        "memory (register the host mapping itself)", buf->name);
  if (buf->backend == GPUSHM_BACKEND_CUDA_IPC)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' is a cuda-ipc buffer: the driver gives "
                        "no dma-buf for memory opened through legacy CUDA IPC; use cuda-fd",
                        buf->name);
  if (!client_backend_is_fd_device(buf->backend) || !buf->ptr)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' has no device mapping in this process",
                        buf->name);
  if (buf->read_only)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only, and whoever registers a "
                        "dma-buf may write through it", buf->name);
  /* A buffer's slot or allocation is whole pages, so the page its last byte is in is
   * its own: a range may end there. */
  span = (buf->size + page - 1) / page * page;
  if (size == 0 || offset > span || size > span - offset)
    return client_error(GPUSHM_E_INVAL, "range of %llu bytes at offset %llu is outside '%s' "
                        "(%llu bytes, %llu in whole pages)", (unsigned long long)size,
                        (unsigned long long)offset, buf->name, (unsigned long long)buf->size,
                        (unsigned long long)span);
  start = (uint64_t)(uintptr_t)buf->ptr + offset;
  if (start % page || size % page)
    return client_error(GPUSHM_E_INVAL, "a dma-buf range starts and ends on a page boundary "
                        "(%llu bytes): offset %llu and size %llu of '%s' do not",
                        (unsigned long long)page, (unsigned long long)offset,
                        (unsigned long long)size, buf->name);
  return client_cuda_export_dmabuf((char *)buf->ptr + offset, size, buf->device, fd_out);
}

int gpushm_buffer_fabric_handle(const gpushm_buffer_t *buffer,
                                uint8_t handle[GPUSHM_FABRIC_HANDLE_BYTES])
{
  const struct client_mapping *buf = buffer ? buffer->map : NULL;

  client_clear_error();
  if (!buf || !handle || (buf->kind != GPUSHM_KIND_BUFFER && buf->kind != GPUSHM_KIND_IMAGE))
    return client_error(GPUSHM_E_INVAL, "not a buffer or image, or handle is NULL");
  if (buf->backend != GPUSHM_BACKEND_CUDA_FABRIC)
    return client_error(GPUSHM_E_INVAL, "'%s' is not a cuda-fabric buffer", buf->name);
  if (!buf->has_fabric_handle)
    return client_error(GPUSHM_E_PERM, "'%s' is open read-only: a fabric handle maps the "
                        "memory read-write wherever it is imported", buf->name);
  memcpy(handle, buf->fabric_handle, GPUSHM_FABRIC_HANDLE_BYTES);
  return 0;
}
