/* SPDX-License-Identifier: MIT */
/* What a buffer gives engines that move it off this host (docs/multinode.md): a dma-buf
 * of a range, for RDMA registration, and a cuda-fabric buffer's fabric handle.  Both
 * are gpushm_buffer_export() (export.c) with a type, kept as the calls they were. */
#include "config.h"
#include "error.h"
#include "buffer.h"

#include <string.h>

int gpushm_buffer_export_dmabuf(gpushm_buffer_t *handle, uint64_t offset, uint64_t size,
                                int *fd_out)
{
  gpushm_export_desc_t d = { .size = sizeof d };
  int r;

  client_clear_error();
  if (!fd_out)
    return client_error(GPUSHM_E_INVAL, "fd_out is NULL");
  *fd_out = -1;
  if (size == 0)
    return client_error(GPUSHM_E_INVAL, "a dma-buf of 0 bytes");
  if ((r = gpushm_buffer_export(handle, GPUSHM_EXPORT_DMABUF, offset, size, &d)) < 0)
    return r;
  *fd_out = d.fd;
  return 0;
}

int gpushm_buffer_fabric_handle(const gpushm_buffer_t *buffer,
                                uint8_t handle[GPUSHM_FABRIC_HANDLE_BYTES])
{
  gpushm_export_desc_t d = { .size = sizeof d };
  int r;

  client_clear_error();
  if (!handle)
    return client_error(GPUSHM_E_INVAL, "not a buffer or image, or handle is NULL");
  /* a fabric handle takes nothing from the open: the cast gives nothing away */
  if ((r = gpushm_buffer_export((gpushm_buffer_t *)buffer, GPUSHM_EXPORT_FABRIC, 0, 0, &d)) < 0)
    return r;
  memcpy(handle, d.fabric_handle, GPUSHM_FABRIC_HANDLE_BYTES);
  return 0;
}
