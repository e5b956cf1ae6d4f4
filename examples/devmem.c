/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "devmem.h"

#include <stdio.h>
#include <string.h>

#include "driver.h"
static struct cuda_driver drv;
static int loaded;

int devmem_attach(gpushm_buffer_t *buf)
{
  if (gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST)
    return 0;
  char err[256];
  CUcontext ctx;
  CUdevice dev;
  if (!loaded) {
    if (cuda_driver_load(&drv, err, sizeof err) < 0 || CU_CALL(&drv, cuInit, 0) != CUDA_SUCCESS) {
      fprintf(stderr, "demo: %s\n", err);
      return -1;
    }
    loaded = 1;
  }
  if (CU_CALL(&drv, cuDeviceGet, &dev, gpushm_buffer_map_device(buf)) != CUDA_SUCCESS ||
      CU_CALL(&drv, cuDevicePrimaryCtxRetain, &ctx, dev) != CUDA_SUCCESS ||
      CU_CALL(&drv, cuCtxSetCurrent, ctx) != CUDA_SUCCESS)
    return -1;
  return 0;
}

int devmem_write(gpushm_buffer_t *buf, uint64_t offset, const void *src, uint64_t n)
{
  if (gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST) {
    memcpy((char *)gpushm_buffer_ptr(buf) + offset, src, n);
    return 0;
  }
  return CU_CALL(&drv, cuMemcpyHtoD, (CUdeviceptr)(uintptr_t)gpushm_buffer_ptr(buf) + offset,
                 src, n) == CUDA_SUCCESS ? 0 : -1;
}

int devmem_read(gpushm_buffer_t *buf, uint64_t offset, void *dst, uint64_t n)
{
  if (gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST) {
    memcpy(dst, (const char *)gpushm_buffer_ptr(buf) + offset, n);
    return 0;
  }
  return CU_CALL(&drv, cuMemcpyDtoH, dst, (CUdeviceptr)(uintptr_t)gpushm_buffer_ptr(buf) + offset,
                 n) == CUDA_SUCCESS ? 0 : -1;
}

const char *devmem_where(gpushm_buffer_t *buf)
{
  return gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST ? "host memory" : "GPU memory";
}
