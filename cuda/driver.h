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

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdbool.h>
#include <stddef.h>

/* name, ABI version of the PFN typedef (and the version asked of cuGetProcAddress) */
#define CUDA_DRIVER_FUNCS(X)            \
  X(cuInit, 2000)                       \
  X(cuDriverGetVersion, 2020)           \
  X(cuDeviceGetCount, 2000)             \
  X(cuDeviceGet, 2000)                  \
  X(cuDeviceGetName, 2000)              \
  X(cuDeviceGetUuid, 11040)             \
  X(cuDeviceTotalMem, 3020)             \
  X(cuDeviceGetAttribute, 2000)         \
  X(cuDevicePrimaryCtxRetain, 7000)     \
  X(cuDevicePrimaryCtxRelease, 11000)   \
  X(cuCtxSetCurrent, 4000)              \
  X(cuCtxGetCurrent, 4000)              \
  X(cuCtxGetDevice, 2000)               \
  X(cuCtxPushCurrent, 4000)             \
  X(cuCtxPopCurrent, 4000)              \
  X(cuDeviceCanAccessPeer, 4000)        \
  X(cuCtxEnablePeerAccess, 4000)        \
  X(cuStreamGetCtx, 9020)               \
  X(cuCtxSynchronize, 2000)             \
  X(cuMemAlloc, 3020)                   \
  X(cuMemFree, 3020)                    \
  X(cuMemGetInfo, 3020)                 \
  X(cuMemcpyDtoH, 3020)                 \
  X(cuMemcpyHtoD, 3020)                 \
  X(cuMemcpyDtoD, 3020)                 \
  X(cuMemsetD32, 3020)                  \
  X(cuMemsetD32Async, 3020)             \
  X(cuMemcpyDtoDAsync, 3020)            \
  X(cuMemcpyDtoHAsync, 3020)            \
  X(cuMemcpyHtoDAsync, 3020)            \
  X(cuIpcGetMemHandle, 4010)            \
  X(cuIpcOpenMemHandle, 11000)          \
  X(cuIpcCloseMemHandle, 4010)          \
  X(cuMemGetAllocationGranularity, 10020) \
  X(cuMemCreate, 10020)                 \
  X(cuMemRelease, 10020)                \
  X(cuMemExportToShareableHandle, 10020) \
  X(cuMemImportFromShareableHandle, 10020) \
  X(cuMemAddressReserve, 10020)         \
  X(cuMemAddressFree, 10020)            \
  X(cuMemMap, 10020)                    \
  X(cuMemUnmap, 10020)                  \
  X(cuMemSetAccess, 10020)              \
  X(cuMemGetHandleForAddressRange, 11070) \
  X(cuEventCreate, 2000)                \
  X(cuEventDestroy, 4000)               \
  X(cuEventRecord, 2000)                \
  X(cuEventQuery, 2000)                 \
  X(cuEventSynchronize, 2000)           \
  X(cuStreamWaitEvent, 3020)            \
  X(cuStreamWriteValue64, 11070)        \
  X(cuStreamWaitValue64, 11070)         \
  X(cuIpcGetEventHandle, 4010)          \
  X(cuIpcOpenEventHandle, 4010)         \
  X(cuStreamCreate, 2000)               \
  X(cuStreamDestroy, 4000)              \
  X(cuStreamSynchronize, 2000)          \
  X(cuModuleLoadData, 2000)             \
  X(cuModuleGetFunction, 2000)          \
  X(cuModuleUnload, 2000)               \
  X(cuLaunchKernel, 4000)               \
  X(cuGetErrorName, 6000)               \
  X(cuGetErrorString, 6000)

enum cuda_fn {
#define CUDA_FN_ENUM_(name, version) CUDA_FN_##name,
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
#define CUDA_FN_FIELD_(name, version) PFN_##name##_v##version name;
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
