/* SPDX-License-Identifier: MIT */
/* The examples' access to a buffer's bytes, wherever they live: plain loads and stores
 * for host buffers, the CUDA driver's cuMemcpy for device buffers (the driver loaded at
 * run time: devmem.c).  Each function says what failed on stderr and returns -1. */
#ifndef GPUSHM_EXAMPLE_DEVMEM_H
#define GPUSHM_EXAMPLE_DEVMEM_H

#include <stdint.h>
#include <gpushm.h>

/* Makes the buffer's device current in this thread (no-op for host buffers). */
int devmem_attach(gpushm_buffer_t *buf);
int devmem_write(gpushm_buffer_t *buf, uint64_t offset, const void *src, uint64_t n);
int devmem_read(gpushm_buffer_t *buf, uint64_t offset, void *dst, uint64_t n);
const char *devmem_where(gpushm_buffer_t *buf);

#endif
