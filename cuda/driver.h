/* SPDX-License-Identifier: MIT */
/* The CUDA driver, loaded at run time: every entry point gpushm uses, resolved once
 * through cuGetProcAddress into one table shared by daemon, library and tests.
 * Nothing links against libcuda, so the same binaries run on hosts without a GPU.
 *
 * Every call goes through CU_CALL, which first consults the table's fault list:
 * GPUSHM_CUDA_FAULTS="cuMemAlloc=CUDA_ERROR_OUT_OF_MEMORY,cuMemFree=700@3" makes
 * cuMemAlloc always fail with OUT_OF_MEMORY and cuMemFree fail from its third call on
 * (error given by name or number).  Tests use it to cover error paths with and
 * without a GPU.  GPUSHM_CUDA_LIBRARY names another driver library (the test fake).
 * GPUSHM_CUDA_TRACE=1 writes each call (pid, name, result) to stderr as it returns. */
#ifndef GPUSHM_CUDA_DRIVER_H
#define GPUSHM_CUDA_DRIVER_H

#include "cuda_api.h"
#include <stdbool.h>
#include <stddef.h>

/* name, ABI version (asked of cuGetProcAddress: the version whose prototype this is),
 * parameters — as the driver API reference gives them for that version */
#define CUDA_DRIVER_FUNCS(X) \
  X(cuInit, 2000, (unsigned int flags)) \
  X(cuDriverGetVersion, 2020, (int *version)) \
  X(cuDeviceGetCount, 2000, (int *count)) \
  X(cuDeviceGet, 2000, (CUdevice *device, int ordinal)) \
  X(cuDeviceGetName, 2000, (char *name, int len, CUdevice device)) \
  X(cuDeviceGetUuid, 11040, (CUuuid *uuid, CUdevice device)) \
  X(cuDeviceTotalMem, 3020, (size_t *bytes, CUdevice device)) \
  X(cuDeviceGetAttribute, 2000, (int *value, CUdevice_attribute attribute, CUdevice device)) \
  X(cuDevicePrimaryCtxRetain, 7000, (CUcontext *ctx, CUdevice device)) \
  X(cuDevicePrimaryCtxRelease, 11000, (CUdevice device)) \
  X(cuCtxSetCurrent, 4000, (CUcontext ctx)) \
  X(cuCtxGetCurrent, 4000, (CUcontext *ctx)) \
  X(cuCtxGetDevice, 2000, (CUdevice *device)) \
  X(cuCtxPushCurrent, 4000, (CUcontext ctx)) \
  X(cuCtxPopCurrent, 4000, (CUcontext *ctx)) \
  X(cuDeviceCanAccessPeer, 4000, (int *can_access, CUdevice device, CUdevice peer)) \
  X(cuCtxEnablePeerAccess, 4000, (CUcontext peer, unsigned int flags)) \
  X(cuStreamGetCtx, 9020, (CUstream stream, CUcontext *ctx)) \
  X(cuCtxSynchronize, 2000, (void)) \
  X(cuMemAlloc, 3020, (CUdeviceptr *dptr, size_t bytes)) \
  X(cuMemFree, 3020, (CUdeviceptr dptr)) \
  X(cuMemGetInfo, 3020, (size_t *free_bytes, size_t *total_bytes)) \
  X(cuMemcpyDtoH, 3020, (void *dst, CUdeviceptr src, size_t bytes)) \
  X(cuMemcpyHtoD, 3020, (CUdeviceptr dst, const void *src, size_t bytes)) \
  X(cuMemcpyDtoD, 3020, (CUdeviceptr dst, CUdeviceptr src, size_t bytes)) \
  X(cuMemsetD32, 3020, (CUdeviceptr dst, unsigned int value, size_t count)) \
  X(cuMemsetD32Async, 3020, (CUdeviceptr dst, unsigned int value, size_t count, CUstream stream)) \
  X(cuMemcpyDtoDAsync, 3020, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)) \
  X(cuMemcpyDtoHAsync, 3020, (void *dst, CUdeviceptr src, size_t bytes, CUstream stream)) \
  X(cuMemcpyHtoDAsync, 3020, (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream)) \
  X(cuMemcpyAsync, 4000, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)) \
  X(cuIpcGetMemHandle, 4010, (CUipcMemHandle *handle, CUdeviceptr dptr)) \
  X(cuIpcOpenMemHandle, 11000, (CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)) \
  X(cuIpcCloseMemHandle, 4010, (CUdeviceptr dptr)) \
  X(cuMemGetAllocationGranularity, 10020, (size_t *granularity, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option)) \
  X(cuMemCreate, 10020, (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags)) \
  X(cuMemRelease, 10020, (CUmemGenericAllocationHandle handle)) \
  X(cuMemExportToShareableHandle, 10020, (void *shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type, unsigned long long flags)) \
  X(cuMemImportFromShareableHandle, 10020, (CUmemGenericAllocationHandle *handle, void *os_handle, CUmemAllocationHandleType type)) \
  X(cuMemAddressReserve, 10020, (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags)) \
  X(cuMemAddressFree, 10020, (CUdeviceptr ptr, size_t size)) \
  X(cuMemMap, 10020, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags)) \
  X(cuMemUnmap, 10020, (CUdeviceptr ptr, size_t size)) \
  X(cuMemSetAccess, 10020, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)) \
  X(cuMemGetHandleForAddressRange, 11070, (void *handle, CUdeviceptr dptr, size_t size, CUmemRangeHandleType type, unsigned long long flags)) \
  X(cuEventCreate, 2000, (CUevent *event, unsigned int flags)) \
  X(cuEventDestroy, 4000, (CUevent event)) \
  X(cuEventRecord, 2000, (CUevent event, CUstream stream)) \
  X(cuEventQuery, 2000, (CUevent event)) \
  X(cuEventSynchronize, 2000, (CUevent event)) \
  X(cuStreamWaitEvent, 3020, (CUstream stream, CUevent event, unsigned int flags)) \
  X(cuStreamWriteValue64, 11070, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)) \
  X(cuMemHostRegister, 6050, (void *p, size_t bytes, unsigned int flags)) \
  X(cuMemHostUnregister, 4000, (void *p)) \
  X(cuMemHostGetDevicePointer, 3020, (CUdeviceptr *dptr, void *p, unsigned int flags)) \
  X(cuStreamWaitValue64, 11070, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)) \
  X(cuIpcGetEventHandle, 4010, (CUipcEventHandle *handle, CUevent event)) \
  X(cuIpcOpenEventHandle, 4010, (CUevent *event, CUipcEventHandle handle)) \
  X(cuStreamCreate, 2000, (CUstream *stream, unsigned int flags)) \
  X(cuStreamDestroy, 4000, (CUstream stream)) \
  X(cuStreamSynchronize, 2000, (CUstream stream)) \
  X(cuModuleLoadData, 2000, (CUmodule *module, const void *image)) \
  X(cuModuleGetFunction, 2000, (CUfunction *function, CUmodule module, const char *name)) \
  X(cuModuleUnload, 2000, (CUmodule module)) \
  X(cuLaunchKernel, 4000, (CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z, unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, CUstream stream, void **params, void **extra)) \
  X(cuImportExternalMemory, 10000, (CUexternalMemory *ext, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *desc)) \
  X(cuExternalMemoryGetMappedBuffer, 10000, (CUdeviceptr *dptr, CUexternalMemory ext, const CUDA_EXTERNAL_MEMORY_BUFFER_DESC *desc)) \
  X(cuExternalMemoryGetMappedMipmappedArray, 10000, (CUmipmappedArray *mipmap, CUexternalMemory ext, const CUDA_EXTERNAL_MEMORY_MIPMAPPED_ARRAY_DESC *desc)) \
  X(cuDestroyExternalMemory, 10000, (CUexternalMemory ext)) \
  X(cuImportExternalSemaphore, 10000, (CUexternalSemaphore *sem, const CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC *desc)) \
  X(cuSignalExternalSemaphoresAsync, 10000, (const CUexternalSemaphore *sems, const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *params, unsigned int n, CUstream stream)) \
  X(cuWaitExternalSemaphoresAsync, 10000, (const CUexternalSemaphore *sems, const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS *params, unsigned int n, CUstream stream)) \
  X(cuDestroyExternalSemaphore, 10000, (CUexternalSemaphore sem)) \
  X(cuMipmappedArrayGetLevel, 5000, (CUarray *level_array, CUmipmappedArray mipmap, unsigned int level)) \
  X(cuMipmappedArrayDestroy, 5000, (CUmipmappedArray mipmap)) \
  X(cuArray3DGetDescriptor, 3020, (CUDA_ARRAY3D_DESCRIPTOR *desc, CUarray array)) \
  X(cuSurfObjectCreate, 5000, (CUsurfObject *surf, const CUDA_RESOURCE_DESC *desc)) \
  X(cuSurfObjectDestroy, 5000, (CUsurfObject surf)) \
  X(cuGetErrorName, 6000, (CUresult error, const char **name)) \
  X(cuGetErrorString, 6000, (CUresult error, const char **text))

enum cuda_fn {
#define CUDA_FN_ENUM_(name, version, params) CUDA_FN_##name,
  CUDA_DRIVER_FUNCS(CUDA_FN_ENUM_)
#undef CUDA_FN_ENUM_
  CUDA_FN_COUNT
};

struct cuda_fault {
  CUresult error;             /* 0: none */
  unsigned long fail_from;    /* 1-based call number from which calls fail */
  unsigned long calls;
};

struct cuda_driver {
  void *lib;
  int driver_version;
  bool trace; /* GPUSHM_CUDA_TRACE=1: every call and its result to stderr */
#define CUDA_FN_FIELD_(name, version, params) CUresult (*name) params;
  CUDA_DRIVER_FUNCS(CUDA_FN_FIELD_)
#undef CUDA_FN_FIELD_
  struct cuda_fault faults[CUDA_FN_COUNT];
};

/* Calls drv->fn(...) unless a fault is injected for it. */
#define CU_CALL(drv, fn, ...)                                                          \
  ({                                                                                   \
    CUresult cu_call_r_ = cuda_fault_hit(&(drv)->faults[CUDA_FN_##fn]) ?: (drv)->fn(__VA_ARGS__); \
    if (__builtin_expect((drv)->trace, 0))                                             \
      cuda_trace(drv, CUDA_FN_##fn, cu_call_r_);                                       \
    cu_call_r_;                                                                        \
  })

/* Loads the driver library and resolves the table (does not call cuInit).  Returns 0,
 * or -1 with err saying why (no driver installed, a driver too old). */
int cuda_driver_load(struct cuda_driver *drv, char *err, size_t errlen);
void cuda_driver_unload(struct cuda_driver *drv);
/* Parses a GPUSHM_CUDA_FAULTS-style spec into drv->faults; -1 on a malformed spec. */
int cuda_driver_set_faults(struct cuda_driver *drv, const char *spec, char *err, size_t errlen);

CUresult cuda_fault_hit(struct cuda_fault *fault);
/* One line per call: what a crash inside the driver was last asked to do. */
void cuda_trace(const struct cuda_driver *drv, enum cuda_fn fn, CUresult r);
/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"-style text; never NULL. */
const char *cuda_error_text(const struct cuda_driver *drv, CUresult r, char *buf, size_t len);
/* Errors after which the context (and so the process) cannot recover. */
bool cuda_error_is_sticky(CUresult r);

#endif
