/* SPDX-License-Identifier: MIT */
/* A buffer's bytes as any program outside gpushm reaches them: host buffers are plain
 * memory; device buffers go through the CUDA driver's cuMemcpyHtoD/DtoH.
 *
 * The driver is loaded at run time, as libgpushm loads it, so the examples build without
 * a CUDA toolkit and run on machines without a GPU.  A program built with the toolkit
 * includes <cuda.h>, links -lcuda and calls the same functions directly. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* secure_getenv */
#endif
#include "devmem.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The few driver API types used here, as cuda.h (12.0 and later) defines them on 64-bit
 * Linux: CUresult and CUdriverProcAddressQueryResult are enums, which are ints in this
 * ABI, and the driver returns CUDA_SUCCESS (0) or an error code. */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef int CUdriverProcAddressQueryResult;
#define CUDA_SUCCESS 0
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_SUCCESS 0

/* cuGetProcAddress_v2: the entry point of the exact ABI version asked for, so that each
 * pointer below matches the prototype it is called through, whatever newer versions of
 * the same name the installed driver also has. */
typedef CUresult (*get_proc_address_fn)(const char *symbol, void **pfn, int cuda_version,
                                        uint64_t flags, CUdriverProcAddressQueryResult *status);

static struct {
  CUresult (*cuInit)(unsigned int flags);
  CUresult (*cuDeviceGet)(CUdevice *device, int ordinal);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);
  CUresult (*cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuGetErrorName)(CUresult error, const char **name);
} cu;
static int loaded;

/* Name and the CUDA version whose prototype the member above is (the _v2 copies with
 * size_t counts are 3.2's). */
static const struct {
  const char *name;
  int version;
  void **slot;
} entries[] = {
  { "cuInit", 2000, (void **)&cu.cuInit },
  { "cuDeviceGet", 2000, (void **)&cu.cuDeviceGet },
  { "cuDevicePrimaryCtxRetain", 7000, (void **)&cu.cuDevicePrimaryCtxRetain },
  { "cuCtxSetCurrent", 4000, (void **)&cu.cuCtxSetCurrent },
  { "cuMemcpyHtoD", 3020, (void **)&cu.cuMemcpyHtoD },
  { "cuMemcpyDtoH", 3020, (void **)&cu.cuMemcpyDtoH },
  { "cuCtxSynchronize", 2000, (void **)&cu.cuCtxSynchronize },
  { "cuGetErrorName", 6000, (void **)&cu.cuGetErrorName },
};

static int cuda_failed(const char *call, CUresult r)
{
  const char *name = NULL;
  if (cu.cuGetErrorName)
    cu.cuGetErrorName(r, &name);
  fprintf(stderr, "devmem: %s: %s (%d)\n", call, name ? name : "CUDA error", r);
  return -1;
}

static int load_driver(void)
{
  /* The same library libgpushm loaded (it reads the same variable, the same way): a
   * second dlopen of one path is the same copy of the driver, which knows the mappings
   * libgpushm made.  GPUSHM_CUDA_LIBRARY is how gpushm's tests put a fake driver there. */
  const char *path = secure_getenv("GPUSHM_CUDA_LIBRARY");
  get_proc_address_fn get_proc;
  void *lib;

  if (!path || !*path)
    path = "libcuda.so.1";
  /* Never closed: the driver keeps threads and exit handlers of its own. */
  if (!(lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE))) {
    fprintf(stderr, "devmem: no CUDA driver: %s\n", dlerror());
    return -1;
  }
  if (!(get_proc = (get_proc_address_fn)dlsym(lib, "cuGetProcAddress_v2"))) {
    fprintf(stderr, "devmem: %s is older than CUDA 12.0 (no cuGetProcAddress_v2)\n", path);
    return -1;
  }
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    void **slot = entries[i].slot;
    CUdriverProcAddressQueryResult found = -1;
    CUresult r = get_proc(entries[i].name, slot, entries[i].version, CU_GET_PROC_ADDRESS_DEFAULT,
                          &found);
    if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !*slot) {
      fprintf(stderr, "devmem: %s has no %s (version %d)\n", path, entries[i].name,
              entries[i].version);
      return -1;
    }
  }
  loaded = 1;
  return 0;
}

int devmem_attach(gpushm_buffer_t *buf)
{
  CUcontext ctx;
  CUdevice dev;
  CUresult r;

  if (gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST)
    return 0;
  if (!loaded && load_driver() < 0)
    return -1;
  if ((r = cu.cuInit(0)) != CUDA_SUCCESS)
    return cuda_failed("cuInit", r);
  /* The device libgpushm mapped the buffer for: its pointer is valid in that device's
   * contexts, and the primary context is the one libgpushm and the runtime use too. */
  if ((r = cu.cuDeviceGet(&dev, gpushm_buffer_map_device(buf))) != CUDA_SUCCESS)
    return cuda_failed("cuDeviceGet", r);
  if ((r = cu.cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
    return cuda_failed("cuDevicePrimaryCtxRetain", r);
  if ((r = cu.cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
    return cuda_failed("cuCtxSetCurrent", r);
  return 0;
}

int devmem_write(gpushm_buffer_t *buf, uint64_t offset, const void *src, uint64_t n)
{
  CUresult r;

  if (gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST) {
    memcpy((char *)gpushm_buffer_ptr(buf) + offset, src, n);
    return 0;
  }
  if ((r = cu.cuMemcpyHtoD((CUdeviceptr)(uintptr_t)gpushm_buffer_ptr(buf) + offset, src, n)) !=
      CUDA_SUCCESS)
    return cuda_failed("cuMemcpyHtoD", r);
  /* From pageable memory cuMemcpyHtoD returns once the bytes are staged, before the DMA
   * lands: another process told "written" now could read the old bytes. */
  if ((r = cu.cuCtxSynchronize()) != CUDA_SUCCESS)
    return cuda_failed("cuCtxSynchronize", r);
  return 0;
}

int devmem_read(gpushm_buffer_t *buf, uint64_t offset, void *dst, uint64_t n)
{
  CUresult r;

  if (gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST) {
    memcpy(dst, (const char *)gpushm_buffer_ptr(buf) + offset, n);
    return 0;
  }
  if ((r = cu.cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)gpushm_buffer_ptr(buf) + offset, n)) !=
      CUDA_SUCCESS)
    return cuda_failed("cuMemcpyDtoH", r);
  return 0;
}

const char *devmem_where(gpushm_buffer_t *buf)
{
  return gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST ? "host memory" : "GPU memory";
}
