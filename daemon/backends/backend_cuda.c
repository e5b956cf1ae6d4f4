/* SPDX-License-Identifier: MIT */
/* The daemon's CUDA side: the driver, devices and their primary contexts; the legacy
 * IPC backend (cuMemAlloc in the device's primary context, exported with
 * cuIpcGetMemHandle when first handed to a client, freed with cuMemFree when the
 * registry drops the last reference); and inter-process events. */
#include "config.h"
#include "backends/backend.h"
#include "backends/backend_cuda.h"
#include "backends/event.h"
#include "driver.h"
#include "protocol.h"
#include "gpushm_limits.h"
#include "util/log.h"
#include "shm_layout.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whole 2 MiB blocks: two buffers never share an exported allocation, so one
 * client's handle never reaches another buffer's memory. */
#define CUDA_IPC_GRANULE (2ull << 20)

struct cuda_device {
  CUdevice dev;
  CUcontext ctx; /* retained primary context, NULL until first use */
  char name[256];
  uint8_t uuid[16];
  size_t total;
  const char *no_fd_memory; /* why cuda-fd cannot allocate here, or NULL */
  const char *no_fabric;    /* why cuda-fabric cannot, as far as attributes tell, or NULL */
};

struct cuda_mem {
  CUdeviceptr ptr;
  uint64_t size; /* as allocated */
  int device;
  bool exported;
  CUipcMemHandle handle;
};

static struct {
  bool loaded;
  struct cuda_driver drv;
  char unavailable[320];
  int n_devices;
  struct cuda_device devices[GPUSHM_LIMIT_DEVICES];
  char driver_version[32]; /* the NVIDIA kernel driver's, "" where unknown */
  void (*fatal_hook)(void *ctx, const char *why);
  void *fatal_ctx;
} cuda = { .unavailable = "CUDA support not initialised" };

void backend_cuda_set_fatal_hook(void (*hook)(void *ctx, const char *why), void *ctx)
{
  cuda.fatal_hook = hook;
  cuda.fatal_ctx = ctx;
}

/* The driver's own name for r (CUDA_ERROR_...), what operators search for. */
static const char *cuda_error_name(CUresult r, char *buf, size_t len)
{
  const char *name = NULL;

  if (cuda.drv.cuGetErrorName && cuda.drv.cuGetErrorName(r, &name) == CUDA_SUCCESS && name)
    return name;
  snprintf(buf, len, "%d", (int)r);
  return buf;
}

static int cuda_failure(CUresult r, const char *what, char *err, size_t errlen)
{
  char text[160], name[32];

  cuda_error_text(&cuda.drv, r, text, sizeof text);
  snprintf(err, errlen, "%s: %s", what, text);
  if (cuda_error_is_sticky(r)) {
    log_event(LOG_LEVEL_ERROR,
              LOG_FIELDS(.cuda_error = cuda_error_name(r, name, sizeof name), .reason = what),
              "sticky CUDA error, the daemon cannot go on: %s", err);
    if (cuda.fatal_hook)
      cuda.fatal_hook(cuda.fatal_ctx, err);
  }
  return r == CUDA_ERROR_OUT_OF_MEMORY ? PROTO_E_NOMEM : PROTO_E_CUDA;
}

/* cuda-fd needs virtual memory management and POSIX-fd shareable handles. */
static const char *fd_memory_unsupported(CUdevice dev)
{
  int vmm = 0, posix_fd = 0;

  if (CU_CALL(&cuda.drv, cuDeviceGetAttribute, &vmm,
              CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS || !vmm)
    return "the device does not support virtual memory management";
  if (CU_CALL(&cuda.drv, cuDeviceGetAttribute, &posix_fd,
              CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) != CUDA_SUCCESS ||
      !posix_fd)
    return "the device does not support POSIX file descriptor handles";
  return NULL;
}

/* cuda-fabric is cuda-fd with a fabric handle besides.  Whether an IMEX channel lets
 * gpushmd make fabric memory only the driver knows (cuMemCreate says NOT_PERMITTED). */
static const char *fabric_unsupported(CUdevice dev, const char *no_fd_memory)
{
  int fabric = 0;

  if (no_fd_memory)
    return no_fd_memory;
  if (CU_CALL(&cuda.drv, cuDeviceGetAttribute, &fabric,
              CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, dev) != CUDA_SUCCESS || !fabric)
    return "the device does not support fabric handles";
  return NULL;
}

bool backend_cuda_fd_usable(const char **why)
{
  const char *no;

  if (cuda.unavailable[0])
    no = cuda.unavailable;
  else if (!cuda.loaded)
    no = "no CUDA driver";
  else if (cuda.n_devices == 0)
    no = "no CUDA device";
  else
    no = cuda.devices[0].no_fd_memory;
  if (why)
    *why = no;
  return no == NULL;
}

/* The NVIDIA kernel driver's version, which graphics importers of cuda-fd memory compare
 * with their own (OPAQUE_FD memory imports only into the driver that made it; CUDA's API
 * reports no driver UUID).  $GPUSHM_NVIDIA_VERSION_FILE stands in for it in tests. */
static void read_driver_version(void)
{
  const char *path = getenv("GPUSHM_NVIDIA_VERSION_FILE");
  FILE *f = fopen(path && *path ? path : "/sys/module/nvidia/version", "re");
  size_t n;

  cuda.driver_version[0] = '\0';
  if (!f)
    return;
  n = fread(cuda.driver_version, 1, sizeof cuda.driver_version - 1, f);
  fclose(f);
  while (n && (cuda.driver_version[n - 1] == '\n' || cuda.driver_version[n - 1] == ' '))
    n--;
  cuda.driver_version[n] = '\0';
}

const char *backend_cuda_driver_version(void)
{
  return cuda.driver_version;
}

void backend_cuda_init(void)
{
  char err[256];
  CUresult r;
  int count = 0;

  if (cuda_driver_load(&cuda.drv, err, sizeof err) < 0) {
    snprintf(cuda.unavailable, sizeof cuda.unavailable, "%s", err);
    log_info("CUDA backends unavailable: %s", err);
    return;
  }
  cuda.loaded = true;
  if ((r = CU_CALL(&cuda.drv, cuInit, 0)) != CUDA_SUCCESS ||
      (r = CU_CALL(&cuda.drv, cuDeviceGetCount, &count)) != CUDA_SUCCESS) {
    char text[160];
    snprintf(cuda.unavailable, sizeof cuda.unavailable, "CUDA driver failed to initialise: %s",
             cuda_error_text(&cuda.drv, r, text, sizeof text));
    log_warn("CUDA backends unavailable: %s", cuda.unavailable);
    return;
  }
  if (count == 0) {
    snprintf(cuda.unavailable, sizeof cuda.unavailable, "no CUDA device on this host");
    log_info("CUDA backends unavailable: %s", cuda.unavailable);
    return;
  }
  if (count > (int)GPUSHM_LIMIT_DEVICES) {
    log_warn("this host has %d CUDA devices; gpushmd uses the first %u", count,
             GPUSHM_LIMIT_DEVICES);
    count = GPUSHM_LIMIT_DEVICES;
  }
  for (int i = 0; i < count; i++) {
    struct cuda_device *d = &cuda.devices[i];
    CUuuid uuid;
    if ((r = CU_CALL(&cuda.drv, cuDeviceGet, &d->dev, i)) != CUDA_SUCCESS ||
        (r = CU_CALL(&cuda.drv, cuDeviceGetName, d->name, (int)sizeof d->name, d->dev)) != CUDA_SUCCESS ||
        (r = CU_CALL(&cuda.drv, cuDeviceGetUuid, &uuid, d->dev)) != CUDA_SUCCESS ||
        (r = CU_CALL(&cuda.drv, cuDeviceTotalMem, &d->total, d->dev)) != CUDA_SUCCESS) {
      char text[160];
      snprintf(cuda.unavailable, sizeof cuda.unavailable, "querying CUDA device %d: %s", i,
               cuda_error_text(&cuda.drv, r, text, sizeof text));
      log_warn("CUDA backends unavailable: %s", cuda.unavailable);
      return;
    }
    memcpy(d->uuid, uuid.bytes, sizeof d->uuid);
    d->no_fd_memory = fd_memory_unsupported(d->dev);
    d->no_fabric = fabric_unsupported(d->dev, d->no_fd_memory);
    log_info("CUDA device %d: %s, %zu MiB%s%s", i, d->name, d->total >> 20,
             d->no_fd_memory ? "; cuda-fd unavailable: " : "",
             d->no_fd_memory ? d->no_fd_memory : "");
  }
  cuda.n_devices = count;
  cuda.unavailable[0] = '\0';
  read_driver_version();
}

void backend_cuda_shutdown(void)
{
  for (int i = 0; i < cuda.n_devices; i++)
    if (cuda.devices[i].ctx)
      CU_CALL(&cuda.drv, cuDevicePrimaryCtxRelease, cuda.devices[i].dev);
  if (cuda.loaded)
    cuda_driver_unload(&cuda.drv);
  memset(&cuda.devices, 0, sizeof cuda.devices);
  cuda.n_devices = 0;
  cuda.loaded = false;
}

const char *backend_cuda_unavailable_reason(void)
{
  return cuda.unavailable[0] ? cuda.unavailable : NULL;
}

int backend_cuda_device_count(void)
{
  return cuda.n_devices;
}

bool backend_cuda_device_ready(int i)
{
  return i >= 0 && i < cuda.n_devices &&
         __atomic_load_n(&cuda.devices[i].ctx, __ATOMIC_ACQUIRE) != NULL;
}

int backend_cuda_warm(int i)
{
  struct cuda_device *d = &cuda.devices[i];
  CUcontext ctx = NULL;
  CUresult r;

  if (__atomic_load_n(&d->ctx, __ATOMIC_ACQUIRE))
    return CUDA_SUCCESS;
  r = CU_CALL(&cuda.drv, cuDevicePrimaryCtxRetain, &ctx, d->dev);
  if (r == CUDA_SUCCESS)
    __atomic_store_n(&d->ctx, ctx, __ATOMIC_RELEASE);
  return (int)r;
}

int backend_cuda_warm_result(int i, int cu_result, char *err, size_t errlen)
{
  char what[64];

  if (cu_result == CUDA_SUCCESS)
    return 0;
  snprintf(what, sizeof what, "cuDevicePrimaryCtxRetain on device %d", i);
  return cuda_failure((CUresult)cu_result, what, err, errlen);
}

/* Makes device i's primary context current, retaining it the first time (the daemon
 * warms devices on a worker thread first, see backend_cuda_warm; this retain is for
 * callers that have none). */
static int use_device(int i, char *err, size_t errlen)
{
  struct cuda_device *d = &cuda.devices[i];
  CUresult r;

  if (!backend_cuda_device_ready(i) && (r = (CUresult)backend_cuda_warm(i)) != CUDA_SUCCESS)
    return cuda_failure(r, "cuDevicePrimaryCtxRetain", err, errlen);
  r = CU_CALL(&cuda.drv, cuCtxSetCurrent, d->ctx);
  return r == CUDA_SUCCESS ? 0 : cuda_failure(r, "cuCtxSetCurrent", err, errlen);
}

const uint8_t *backend_cuda_device_uuid(int i)
{
  return i >= 0 && i < cuda.n_devices ? cuda.devices[i].uuid : NULL;
}

int backend_cuda_device_info(int i, struct cuda_device_info *info)
{
  const struct cuda_device *d;
  char err[64];

  if (i < 0 || i >= cuda.n_devices)
    return PROTO_E_INVAL;
  d = &cuda.devices[i];
  memset(info, 0, sizeof *info);
  info->ordinal = i;
  memcpy(info->name, d->name, sizeof info->name);
  memcpy(info->uuid, d->uuid, sizeof info->uuid);
  info->total_memory = d->total;
  info->in_use = d->ctx != NULL;
  if (d->ctx && use_device(i, err, sizeof err) == 0) {
    size_t free_bytes = 0, total = 0;
    if (CU_CALL(&cuda.drv, cuMemGetInfo, &free_bytes, &total) == CUDA_SUCCESS)
      info->free_memory = free_bytes;
  }
  return 0;
}

/* A device ordinal from a client, checked, with its context made current. */
static int enter_client_device(int device, char *err, size_t errlen)
{
  if (device < 0 || device >= cuda.n_devices) {
    snprintf(err, errlen, "no CUDA device %d (this host has %d)", device, cuda.n_devices);
    return PROTO_E_INVAL;
  }
  return use_device(device, err, errlen);
}

/* Runs a release-time driver call on device; a failure is logged (and a sticky one
 * stops the daemon), since nobody is left to tell. */
static void release_on_device(int device, CUresult (*call)(void *), void *arg, const char *what)
{
  char err[256], name[32];
  CUresult r;

  if (use_device(device, err, sizeof err) < 0) {
    log_event(LOG_LEVEL_ERROR, LOG_FIELDS(.device = device, .has_device = true, .reason = what),
              "%s: %s", what, err);
    return;
  }
  if ((r = call(arg)) != CUDA_SUCCESS) {
    cuda_failure(r, what, err, sizeof err);
    log_event(LOG_LEVEL_ERROR,
              LOG_FIELDS(.device = device, .has_device = true, .reason = what,
                         .cuda_error = cuda_error_name(r, name, sizeof name)),
              "%s", err);
  }
}

static const char *cuda_unavailable(const struct backend *be)
{
  return backend_cuda_unavailable_reason();
}

static int ipc_alloc(const struct backend *be, uint64_t size, int device, const char *label,
                     struct backend_mem *mem, uint64_t *allocated, char *err, size_t errlen)
{
  uint64_t rounded = (size + CUDA_IPC_GRANULE - 1) / CUDA_IPC_GRANULE * CUDA_IPC_GRANULE;
  struct cuda_mem *cm;
  char what[96];
  CUresult r;
  int ret;

  if ((ret = enter_client_device(device, err, errlen)) < 0)
    return ret;
  if (!(cm = calloc(1, sizeof *cm))) {
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  r = CU_CALL(&cuda.drv, cuMemAlloc, &cm->ptr, rounded);
  if (r != CUDA_SUCCESS) {
    free(cm);
    snprintf(what, sizeof what, "cuMemAlloc of %llu bytes on device %d",
             (unsigned long long)rounded, device);
    return cuda_failure(r, what, err, errlen);
  }
  /* cuMemAlloc recycles what the daemon's context freed, data and all: another
   * buffer's, maybe another user's.  The memset is queued: wait for it before any
   * client (another context) can reach the memory. */
  if ((r = CU_CALL(&cuda.drv, cuMemsetD32, cm->ptr, 0, (size_t)(rounded / 4))) != CUDA_SUCCESS ||
      (r = CU_CALL(&cuda.drv, cuCtxSynchronize)) != CUDA_SUCCESS) {
    CU_CALL(&cuda.drv, cuMemFree, cm->ptr);
    free(cm);
    return cuda_failure(r, "zeroing a new allocation", err, errlen);
  }
  cm->device = device;
  cm->size = rounded;
  mem->fd = -1;
  mem->priv = cm;
  *allocated = rounded;
  log_debug("'%s': %llu bytes at 0x%llx on device %d", label, (unsigned long long)rounded,
            (unsigned long long)cm->ptr, device);
  return 0;
}

/* Legacy handles are bearer tokens: exported only once somebody authorised opens
 * the buffer, and never shown by list or stats.  Read-only cannot be enforced on
 * them (the cuda-fd backend can); the registry's mode check is the only gate. */
static int ipc_export(const struct backend *be, struct backend_mem *mem, bool read_only,
                      struct backend_export *out, char *err, size_t errlen)
{
  struct cuda_mem *cm = mem->priv;
  int ret;

  if (!cm->exported) {
    CUresult r;
    if ((ret = use_device(cm->device, err, errlen)) < 0)
      return ret;
    r = CU_CALL(&cuda.drv, cuIpcGetMemHandle, &cm->handle, cm->ptr);
    if (r != CUDA_SUCCESS)
      return cuda_failure(r, "cuIpcGetMemHandle", err, errlen);
    cm->exported = true;
  }
  out->fd = -1;
  memcpy(out->handle, cm->handle.reserved, sizeof cm->handle.reserved);
  out->handle_len = sizeof cm->handle.reserved;
  return 0;
}

/* A freed slot's memory is cleared for its next holder: queued, then waited for, since a
 * client's context may touch the slot as soon as the create is answered. */
static int clear_device_range(int device, CUdeviceptr at, uint64_t len, char *err, size_t errlen)
{
  const char *what = "cuMemsetD32";
  CUresult r;
  int ret;

  if ((ret = use_device(device, err, errlen)) < 0)
    return ret;
  if ((r = CU_CALL(&cuda.drv, cuMemsetD32, at, 0, (size_t)(len / 4))) == CUDA_SUCCESS) {
    what = "cuCtxSynchronize";
    r = CU_CALL(&cuda.drv, cuCtxSynchronize);
  }
  return r == CUDA_SUCCESS ? 0 : cuda_failure(r, what, err, errlen);
}

static int ipc_zero_range(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                          uint64_t len, bool known_zero, char *err, size_t errlen)
{
  struct cuda_mem *cm = mem->priv;

  (void)be;
  return known_zero ? 0 : clear_device_range(cm->device, cm->ptr + offset, len, err, errlen);
}

static CUresult free_memory(void *arg)
{
  return CU_CALL(&cuda.drv, cuMemFree, ((struct cuda_mem *)arg)->ptr);
}

static void ipc_release(const struct backend *be, struct backend_mem *mem)
{
  struct cuda_mem *cm = mem->priv;

  if (!cm)
    return;
  release_on_device(cm->device, free_memory, cm, "cuMemFree");
  free(cm);
  mem->priv = NULL;
}

static int ipc_fence_raise(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                           uint64_t value, uint64_t after, uint64_t *was, char *err,
                           size_t errlen);

const struct backend backend_cuda_ipc = {
  .name = "cuda-ipc",
  .kind = PROTO_BACKEND_CUDA_IPC,
  .alloc = ipc_alloc,
  .export = ipc_export,
  .release = ipc_release,
  .alloc_segment = ipc_alloc,
  .zero_range = ipc_zero_range,
  .granule = CUDA_IPC_GRANULE,
  /* for creators that know it (PROTO_FEATURE_IPC_FENCES); others get an IPC event */
  .fence_in_allocation = true,
  .fence_raise = ipc_fence_raise,
  .unavailable = cuda_unavailable,
};

/* Inter-process events: created in the device's primary context with timing off (as
 * CUDA requires for CU_EVENT_INTERPROCESS), exported lazily. */
struct cuda_event {
  CUevent event;
  int device;
  bool exported;
  CUipcEventHandle handle;
};

static int event_alloc(const struct event_source *src, int device, const char *label,
                       void **event, char *err, size_t errlen)
{
  struct cuda_event *ce;
  CUresult r;
  int ret;

  (void)src;
  if ((ret = enter_client_device(device, err, errlen)) < 0)
    return ret;
  if (!(ce = calloc(1, sizeof *ce))) {
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  r = CU_CALL(&cuda.drv, cuEventCreate, &ce->event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    free(ce);
    return cuda_failure(r, "cuEventCreate", err, errlen);
  }
  ce->device = device;
  *event = ce;
  log_debug("'%s': inter-process event on device %d", label, device);
  return 0;
}

static int event_export(const struct event_source *src, void *event, uint8_t handle[64],
                        size_t *handle_len, char *err, size_t errlen)
{
  struct cuda_event *ce = event;
  int ret;

  (void)src;
  if (!ce->exported) {
    CUresult r;
    if ((ret = use_device(ce->device, err, errlen)) < 0)
      return ret;
    r = CU_CALL(&cuda.drv, cuIpcGetEventHandle, &ce->handle, ce->event);
    if (r != CUDA_SUCCESS)
      return cuda_failure(r, "cuIpcGetEventHandle", err, errlen);
    ce->exported = true;
  }
  _Static_assert(sizeof ce->handle.reserved <= 64, "an event handle fits the export");
  memcpy(handle, ce->handle.reserved, sizeof ce->handle.reserved);
  *handle_len = sizeof ce->handle.reserved;
  return 0;
}

static CUresult destroy_event(void *arg)
{
  return CU_CALL(&cuda.drv, cuEventDestroy, ((struct cuda_event *)arg)->event);
}

static void event_release(const struct event_source *src, void *event)
{
  struct cuda_event *ce = event;

  (void)src;
  if (!ce)
    return;
  release_on_device(ce->device, destroy_event, ce, "cuEventDestroy");
  free(ce);
}

static const char *event_unavailable(const struct event_source *src)
{
  (void)src;
  return backend_cuda_unavailable_reason();
}

const struct event_source event_cuda_ipc = {
  .name = "cuda-ipc-event",
  .alloc = event_alloc,
  .export = event_export,
  .release = event_release,
  .unavailable = event_unavailable,
};

/* cuda-fd: cuMemCreate with a POSIX-fd handle type, exported once at allocation
 * (0.7-1 ms: never per open); every authorised open gets a dup of that fd, a
 * capability only its receiver can import.  The daemon keeps the allocation handle and
 * the fd; importers keep the physical memory alive after the daemon lets go. */
struct cuda_vmm {
  CUmemGenericAllocationHandle handle;
  int device;
  size_t size; /* the whole allocation */
  CUdeviceptr va; /* a segment's, mapped in the daemon's context to clear slots; else 0 */
  bool has_fabric; /* cuda-fabric: fabric is the handle other nodes import */
  CUmemFabricHandle fabric;
};

static CUmemAllocationProp fd_memory_props(int device, bool fabric)
{
  CUmemAllocationProp prop;

  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR |
                              (fabric ? CU_MEM_HANDLE_TYPE_FABRIC : 0);
  return prop;
}

/* The daemon maps an allocation only for a moment, to zero it or to raise its fence:
 * all of it, since cuMemMap maps from offset 0 only.  *what names the call that failed. */
static CUresult fd_map(const struct cuda_vmm *vm, CUdeviceptr *va, const char **what)
{
  CUmemAccessDesc access = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
                                           .id = cuda.devices[vm->device].dev },
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
  CUresult r;

  *va = 0;
  *what = "cuMemAddressReserve";
  if ((r = CU_CALL(&cuda.drv, cuMemAddressReserve, va, vm->size, 0, 0, 0)) != CUDA_SUCCESS)
    return r;
  *what = "cuMemMap";
  if ((r = CU_CALL(&cuda.drv, cuMemMap, *va, vm->size, 0, vm->handle, 0)) == CUDA_SUCCESS) {
    *what = "cuMemSetAccess";
    if ((r = CU_CALL(&cuda.drv, cuMemSetAccess, *va, vm->size, &access, 1)) == CUDA_SUCCESS)
      return r;
    CU_CALL(&cuda.drv, cuMemUnmap, *va, vm->size);
  }
  CU_CALL(&cuda.drv, cuMemAddressFree, *va, vm->size);
  *va = 0;
  return r;
}

/* A device operation on the mapping may still be queued when its call returns:
 * unmapping under it is an MMU fault, and a sticky error for the daemon's context
 * (Xid 31, seen).  Callers synchronise first. */
static void fd_unmap(const struct cuda_vmm *vm, CUdeviceptr va)
{
  CU_CALL(&cuda.drv, cuMemUnmap, va, vm->size);
  CU_CALL(&cuda.drv, cuMemAddressFree, va, vm->size);
}

/* Zero-fills a new allocation (the daemon maps nothing otherwise): the physical memory
 * cuMemCreate hands out may have held another buffer's data, and its last bytes are a
 * sync buffer's fence, which starts at 0. */
static int fd_zero(struct cuda_vmm *vm, char *err, size_t errlen)
{
  const char *what;
  CUdeviceptr va;
  CUresult r;
  int ret;

  if ((ret = use_device(vm->device, err, errlen)) < 0)
    return ret;
  if ((r = fd_map(vm, &va, &what)) == CUDA_SUCCESS) {
    what = "cuMemsetD32";
    if ((r = CU_CALL(&cuda.drv, cuMemsetD32, va, 0, vm->size / 4)) == CUDA_SUCCESS) {
      what = "cuCtxSynchronize";
      r = CU_CALL(&cuda.drv, cuCtxSynchronize);
    }
    fd_unmap(vm, va);
  }
  return r == CUDA_SUCCESS ? 0 : cuda_failure(r, what, err, errlen);
}

/* Eight bytes each way, synchronous, on the loop: this runs only for a release whose
 * releaser has exited, and costs two small copies, not worth a thread.  Read first, so
 * that a fence already at or past value (the write landed after all, or a later
 * release's did) is never lowered, nor one still below after written.  The fence's device
 * context is current.  *raised: 1 (raised), 0 (it was there already), 2 (below after);
 * returns a driver error, *what naming the call. */
static CUresult raise_fence_at(CUdeviceptr fence, uint64_t value, uint64_t after, uint64_t *was,
                               int *raised, const char **what)
{
  CUresult r;

  *raised = 0;
  *what = "cuMemcpyDtoH";
  if ((r = CU_CALL(&cuda.drv, cuMemcpyDtoH, was, fence, sizeof *was)) != CUDA_SUCCESS ||
      *was >= value)
    return r;
  if (*was < after) {
    *raised = 2;
    return r;
  }
  /* From pageable memory the copy may still be on its way when the call returns. */
  *what = "cuMemcpyHtoD";
  if ((r = CU_CALL(&cuda.drv, cuMemcpyHtoD, fence, &value, sizeof value)) != CUDA_SUCCESS)
    return r;
  *what = "cuCtxSynchronize";
  if ((r = CU_CALL(&cuda.drv, cuCtxSynchronize)) == CUDA_SUCCESS)
    *raised = 1;
  return r;
}

static int no_fence_at(uint64_t offset, uint64_t size, char *err, size_t errlen)
{
  if (offset % 8 == 0 && size >= SYNC_DEVICE_FENCE_BYTES &&
      offset <= size - SYNC_DEVICE_FENCE_BYTES)
    return 0;
  snprintf(err, errlen, "no fence at offset %llu of the allocation", (unsigned long long)offset);
  return PROTO_E_INVAL;
}

/* cuda-fd memory is mapped in the daemon only while the fence is raised. */
static int fd_fence_raise(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                          uint64_t value, uint64_t after, uint64_t *was, char *err,
                          size_t errlen)
{
  struct cuda_vmm *vm = mem->priv;
  const char *what;
  CUdeviceptr va;
  CUresult r;
  int ret, raised;

  (void)be;
  if (!vm)
    return no_fence_at(offset, 0, err, errlen);
  if ((ret = no_fence_at(offset, vm->size, err, errlen)) < 0 ||
      (ret = use_device(vm->device, err, errlen)) < 0)
    return ret;
  if ((r = fd_map(vm, &va, &what)) != CUDA_SUCCESS)
    return cuda_failure(r, what, err, errlen);
  r = raise_fence_at(va + offset, value, after, was, &raised, &what);
  fd_unmap(vm, va);
  return r == CUDA_SUCCESS ? raised : cuda_failure(r, what, err, errlen);
}

/* cuda-ipc memory is the daemon's own allocation, mapped in its context for good. */
static int ipc_fence_raise(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                           uint64_t value, uint64_t after, uint64_t *was, char *err,
                           size_t errlen)
{
  struct cuda_mem *cm = mem->priv;
  const char *what;
  CUresult r;
  int ret, raised;

  (void)be;
  if (!cm)
    return no_fence_at(offset, 0, err, errlen);
  if ((ret = no_fence_at(offset, cm->size, err, errlen)) < 0 ||
      (ret = use_device(cm->device, err, errlen)) < 0)
    return ret;
  r = raise_fence_at(cm->ptr + offset, value, after, was, &raised, &what);
  return r == CUDA_SUCCESS ? raised : cuda_failure(r, what, err, errlen);
}

static int vmm_alloc(uint64_t size, int device, const char *label, bool fabric,
                     struct backend_mem *mem, uint64_t *allocated, char *err, size_t errlen)
{
  CUmemAllocationProp prop = fd_memory_props(device, fabric);
  struct cuda_vmm *vm;
  size_t granule = 0;
  uint64_t rounded;
  char what[96];
  CUresult r;
  int ret, fd = -1;

  if ((ret = enter_client_device(device, err, errlen)) < 0)
    return ret;
  if (cuda.devices[device].no_fd_memory) {
    snprintf(err, errlen, "unsupported: cuda-fd on device %d: %s", device,
             cuda.devices[device].no_fd_memory);
    return PROTO_E_UNSUPPORTED;
  }
  if (fabric && cuda.devices[device].no_fabric) {
    snprintf(err, errlen, "unsupported: cuda-fabric on device %d: %s", device,
             cuda.devices[device].no_fabric);
    return PROTO_E_UNSUPPORTED;
  }
  r = CU_CALL(&cuda.drv, cuMemGetAllocationGranularity, &granule, &prop,
              CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS)
    return cuda_failure(r, "cuMemGetAllocationGranularity", err, errlen);
  if (granule == 0 || size > UINT64_MAX - granule) {
    snprintf(err, errlen, "cannot round %llu bytes to the device's granule of %zu",
             (unsigned long long)size, granule);
    return PROTO_E_INVAL;
  }
  rounded = (size + granule - 1) / granule * granule;
  if (!(vm = calloc(1, sizeof *vm))) {
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  r = CU_CALL(&cuda.drv, cuMemCreate, &vm->handle, (size_t)rounded, &prop, 0);
  if (r == CUDA_ERROR_NOT_PERMITTED && fabric) {
    /* What the driver answers without an IMEX channel gpushmd may use. */
    free(vm);
    snprintf(err, errlen, "unsupported: cuda-fabric on device %d: no IMEX channel: the driver "
             "makes fabric memory only for a process that can open an IMEX channel (%s/"
             "channelN; %s)", device, PROTO_IMEX_CHANNELS_DIR,
             access(PROTO_IMEX_CHANNELS_DIR, F_OK) == 0 ? "gpushmd may use none there"
                                                         : "there is no such directory here");
    return PROTO_E_UNSUPPORTED;
  }
  if (r != CUDA_SUCCESS) {
    free(vm);
    snprintf(what, sizeof what, "cuMemCreate of %llu bytes on device %d",
             (unsigned long long)rounded, device);
    return cuda_failure(r, what, err, errlen);
  }
  r = CU_CALL(&cuda.drv, cuMemExportToShareableHandle, &fd, vm->handle,
              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS || fd < 0) {
    CU_CALL(&cuda.drv, cuMemRelease, vm->handle);
    free(vm);
    return cuda_failure(r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_HANDLE,
                        "cuMemExportToShareableHandle", err, errlen);
  }
  /* The driver's fd may lack close-on-exec; the daemon's must not leak into children. */
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (fabric) {
    /* Exported once, as the fd: the handle never changes for the allocation's life. */
    r = CU_CALL(&cuda.drv, cuMemExportToShareableHandle, &vm->fabric, vm->handle,
                CU_MEM_HANDLE_TYPE_FABRIC, 0);
    if (r != CUDA_SUCCESS) {
      close(fd);
      CU_CALL(&cuda.drv, cuMemRelease, vm->handle);
      free(vm);
      return cuda_failure(r, "cuMemExportToShareableHandle(FABRIC)", err, errlen);
    }
    vm->has_fabric = true;
  }
  vm->device = device;
  vm->size = (size_t)rounded;
  if ((ret = fd_zero(vm, err, errlen)) < 0) {
    close(fd);
    CU_CALL(&cuda.drv, cuMemRelease, vm->handle);
    free(vm);
    return ret;
  }
  mem->fd = fd;
  mem->priv = vm;
  *allocated = rounded;
  log_debug("'%s': %llu bytes of fd-shareable%s memory on device %d", label,
            (unsigned long long)rounded, fabric ? " and fabric" : "", device);
  return 0;
}

static int fd_alloc(const struct backend *be, uint64_t size, int device, const char *label,
                    struct backend_mem *mem, uint64_t *allocated, char *err, size_t errlen)
{
  (void)be;
  return vmm_alloc(size, device, label, false, mem, allocated, err, errlen);
}

static int fabric_alloc(const struct backend *be, uint64_t size, int device, const char *label,
                        struct backend_mem *mem, uint64_t *allocated, char *err, size_t errlen)
{
  (void)be;
  return vmm_alloc(size, device, label, true, mem, allocated, err, errlen);
}

/* A dup of the exported fd.  Read-only is the client's mapping (PROT_READ access);
 * an fd holder can always map the allocation read-write again, so the mode bits, which
 * decide who gets the fd at all, are the real gate. */
static int fd_export(const struct backend *be, struct backend_mem *mem, bool read_only,
                     struct backend_export *out, char *err, size_t errlen)
{
  (void)be, (void)read_only;
  out->handle_len = 0;
  if ((out->fd = fcntl(mem->fd, F_DUPFD_CLOEXEC, 0)) < 0) {
    snprintf(err, errlen, "dup of a cuda-fd handle: %s", strerror(errno));
    return errno == EMFILE || errno == ENFILE ? PROTO_E_LIMIT : PROTO_E_IO;
  }
  return 0;
}

/* The fd as cuda-fd, and for read-write opens the fabric handle: it maps the memory
 * read-write wherever it is imported, and cannot be taken back. */
static int fabric_export(const struct backend *be, struct backend_mem *mem, bool read_only,
                         struct backend_export *out, char *err, size_t errlen)
{
  const struct cuda_vmm *vm = mem->priv;
  int r = fd_export(be, mem, read_only, out, err, errlen);

  if (r == 0 && !read_only && vm && vm->has_fabric) {
    _Static_assert(sizeof vm->fabric.data <= sizeof out->handle, "a fabric handle fits");
    memcpy(out->handle, vm->fabric.data, sizeof vm->fabric.data);
    out->handle_len = sizeof vm->fabric.data;
  }
  return r;
}

/* A segment stays mapped in the daemon from its first cleared slot on: clearing is on
 * the create path, and a mapping per create would cost three driver calls each. */
static int fd_zero_range(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                         uint64_t len, bool known_zero, char *err, size_t errlen)
{
  struct cuda_vmm *vm = mem->priv;
  const char *what;
  CUresult r;
  int ret;

  (void)be;
  if (known_zero)
    return 0;
  if (!vm->va) {
    if ((ret = use_device(vm->device, err, errlen)) < 0)
      return ret;
    if ((r = fd_map(vm, &vm->va, &what)) != CUDA_SUCCESS)
      return cuda_failure(r, what, err, errlen);
  }
  return clear_device_range(vm->device, vm->va + offset, len, err, errlen);
}

static CUresult release_vmm(void *arg)
{
  struct cuda_vmm *vm = arg;

  /* Nothing is queued on the mapping: every clear was waited for. */
  if (vm->va)
    fd_unmap(vm, vm->va);
  return CU_CALL(&cuda.drv, cuMemRelease, vm->handle);
}

static void fd_release(const struct backend *be, struct backend_mem *mem)
{
  struct cuda_vmm *vm = mem->priv;

  (void)be;
  if (mem->fd >= 0)
    close(mem->fd);
  mem->fd = -1;
  if (!vm)
    return;
  release_on_device(vm->device, release_vmm, vm, "cuMemRelease");
  free(vm);
  mem->priv = NULL;
}

int backend_cuda_fd_adopt(int fd, const uint8_t uuid[16], uint64_t size, uint64_t allocated,
                          struct backend_mem *mem, int *device, char *err, size_t errlen)
{
  CUmemAllocationProp prop;
  struct cuda_vmm *vm;
  size_t granule = 0;
  char name[WIRE_UUID_TEXT_LEN], what[128];
  CUresult r;
  int i, ret;

  wire_uuid_text(uuid, false, name);
  if (cuda.n_devices == 0) {
    snprintf(err, errlen, "its device %s is unreachable: %s", name,
             cuda.unavailable[0] ? cuda.unavailable : "no CUDA device");
    return PROTO_E_UNSUPPORTED;
  }
  /* By UUID: CUDA_VISIBLE_DEVICES or a changed PCI order renumbers devices between starts. */
  for (i = 0; i < cuda.n_devices && memcmp(cuda.devices[i].uuid, uuid, 16) != 0; i++)
    ;
  if (i == cuda.n_devices) {
    snprintf(err, errlen, "its device %s is not on this host (or not visible to gpushmd)", name);
    return PROTO_E_NOENT;
  }
  if (cuda.devices[i].no_fd_memory) {
    snprintf(err, errlen, "device %d (%s): %s", i, name, cuda.devices[i].no_fd_memory);
    return PROTO_E_UNSUPPORTED;
  }
  /* Creates retain a device's context on a worker thread so that the loop never waits
   * 100-350 ms; adoption runs before the loop serves anyone, so it retains it here, at
   * start-up, once per device that has buffers to take back. */
  if ((ret = use_device(i, err, errlen)) < 0)
    return ret;
  prop = fd_memory_props(i, false);
  r = CU_CALL(&cuda.drv, cuMemGetAllocationGranularity, &granule, &prop,
              CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS)
    return cuda_failure(r, "cuMemGetAllocationGranularity", err, errlen);
  /* Clients map all of allocated: it must be whole granules and cover the buffer. */
  if (size == 0 || size > GPUSHM_LIMIT_BUFFER_SIZE || allocated < size || granule == 0 ||
      allocated % granule != 0) {
    snprintf(err, errlen, "%llu bytes allocated for %llu is not a whole number of the device's "
             "%zu-byte granules covering the buffer", (unsigned long long)allocated,
             (unsigned long long)size, granule);
    return PROTO_E_INVAL;
  }
  if (!(vm = calloc(1, sizeof *vm))) {
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  /* The imported handle keeps the allocation alive while the daemon has it; the fd stays
   * the daemon's, to hand out dups of, as fd_alloc keeps the one it exported. */
  r = CU_CALL(&cuda.drv, cuMemImportFromShareableHandle, &vm->handle, (void *)(intptr_t)fd,
              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) {
    free(vm);
    snprintf(what, sizeof what, "cuMemImportFromShareableHandle on device %d (%s)", i, name);
    return cuda_failure(r, what, err, errlen);
  }
  vm->device = i;
  vm->size = (size_t)allocated;
  mem->fd = fd;
  mem->priv = vm;
  *device = i;
  return 0;
}

static const char *fabric_unavailable(const struct backend *be)
{
  const char *why = backend_cuda_unavailable_reason();

  (void)be;
  if (why)
    return why;
  for (int i = 0; i < cuda.n_devices; i++)
    if (!cuda.devices[i].no_fabric)
      return NULL;
  return cuda.n_devices ? cuda.devices[0].no_fabric : "no CUDA device";
}

/* Never carved (no alloc_segment): a fabric handle reaches its whole allocation, and
 * travels beyond this host, so an allocation holds one buffer. */
/* Registered memory (kind_external.c): imported into CUDA on the device of its UUID and
 * mapped whole, which the driver refuses for an fd that is not an allocation of at
 * least size bytes; then let go.  The import takes its own dup (CUDA owns an fd it
 * imported), so the caller's stays open. */
static int fd_verify_external(const struct backend *be, int fd, uint64_t size, bool dedicated,
                              const uint8_t device_uuid[16], int *device, char *err,
                              size_t errlen)
{
  CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc = { .type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD };
  CUDA_EXTERNAL_MEMORY_BUFFER_DESC whole = { .offset = 0, .size = size };
  CUexternalMemory ext = NULL;
  CUdeviceptr ptr = 0;
  char name[WIRE_UUID_TEXT_LEN], what[160];
  CUresult r;
  int i, ret;

  (void)be;
  wire_uuid_text(device_uuid, false, name);
  for (i = 0; i < cuda.n_devices && memcmp(cuda.devices[i].uuid, device_uuid, 16) != 0; i++)
    ;
  if (i == cuda.n_devices) {
    snprintf(err, errlen, "the memory's device %s is not one of gpushmd's", name);
    return PROTO_E_INVAL;
  }
  if ((ret = use_device(i, err, errlen)) < 0)
    return ret;
  if ((desc.handle.fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
    snprintf(err, errlen, "dup: %s", strerror(errno));
    return PROTO_E_IO;
  }
  desc.size = size;
  desc.flags = dedicated ? CUDA_EXTERNAL_MEMORY_DEDICATED : 0;
  if ((r = CU_CALL(&cuda.drv, cuImportExternalMemory, &ext, &desc)) != CUDA_SUCCESS) {
    close(desc.handle.fd);
    snprintf(what, sizeof what, "the fd is not memory of %llu bytes on device %d (%s): "
             "cuImportExternalMemory", (unsigned long long)size, i, name);
    cuda_failure(r, what, err, errlen);
    return PROTO_E_INVAL;
  }
  r = CU_CALL(&cuda.drv, cuExternalMemoryGetMappedBuffer, &ptr, ext, &whole);
  if (r == CUDA_SUCCESS)
    CU_CALL(&cuda.drv, cuMemFree, ptr);
  CU_CALL(&cuda.drv, cuDestroyExternalMemory, ext);
  if (r != CUDA_SUCCESS) {
    snprintf(what, sizeof what, "the fd's memory on device %d (%s) is smaller than the %llu "
             "bytes claimed: cuExternalMemoryGetMappedBuffer", i, name, (unsigned long long)size);
    cuda_failure(r, what, err, errlen);
    return PROTO_E_INVAL;
  }
  *device = i;
  return 0;
}

int backend_cuda_semaphore_import(int fd, const uint8_t uuid[16], int *device, void **sem,
                                  char *err, size_t errlen)
{
  CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC desc = {
    .type = CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD };
  CUexternalSemaphore ext = NULL;
  char name[WIRE_UUID_TEXT_LEN], what[160];
  CUresult r;
  int i, ret;

  wire_uuid_text(uuid, false, name);
  if ((i = backend_cuda_device_of_uuid(uuid)) < 0) {
    snprintf(err, errlen, "the semaphore's device %s is not one of gpushmd's", name);
    return PROTO_E_INVAL;
  }
  if ((ret = use_device(i, err, errlen)) < 0)
    return ret;
  if ((desc.handle.fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
    snprintf(err, errlen, "dup: %s", strerror(errno));
    return PROTO_E_IO;
  }
  if ((r = CU_CALL(&cuda.drv, cuImportExternalSemaphore, &ext, &desc)) != CUDA_SUCCESS) {
    close(desc.handle.fd); /* CUDA owns an fd it imported, and only then */
    snprintf(what, sizeof what, "the fd is not a timeline semaphore of device %d (%s): "
             "cuImportExternalSemaphore", i, name);
    cuda_failure(r, what, err, errlen);
    return PROTO_E_INVAL;
  }
  *device = i;
  *sem = ext;
  return 0;
}

int backend_cuda_semaphore_signal(int device, void *sem, uint64_t value, char *err,
                                  size_t errlen)
{
  CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS p = { .params.fence.value = value };
  CUexternalSemaphore ext = sem;
  CUresult r;
  int ret;

  if ((ret = enter_client_device(device, err, errlen)) < 0)
    return ret;
  /* the legacy stream of gpushmd's own context, which runs nothing long */
  if ((r = CU_CALL(&cuda.drv, cuSignalExternalSemaphoresAsync, &ext, &p, 1, NULL)) !=
      CUDA_SUCCESS)
    return cuda_failure(r, "cuSignalExternalSemaphoresAsync", err, errlen);
  return 0;
}

/* A repair's signal may still be queued on gpushmd's stream, and the driver wants no
 * signal pending on a semaphore it destroys: gpushmd's context runs nothing long. */
static CUresult destroy_semaphore(void *arg)
{
  CUresult r = CU_CALL(&cuda.drv, cuCtxSynchronize);

  if (r != CUDA_SUCCESS)
    return r; /* kept (a leak, logged): destroying it now is undefined */
  return CU_CALL(&cuda.drv, cuDestroyExternalSemaphore, (CUexternalSemaphore)arg);
}

void backend_cuda_semaphore_release(int device, void *sem)
{
  if (sem)
    release_on_device(device, destroy_semaphore, sem, "cuDestroyExternalSemaphore");
}

int backend_cuda_device_of_uuid(const uint8_t uuid[16])
{
  for (int i = 0; i < cuda.n_devices; i++)
    if (memcmp(cuda.devices[i].uuid, uuid, 16) == 0)
      return i;
  return -1;
}

const struct backend backend_cuda_fabric = {
  .name = "cuda-fabric",
  .kind = PROTO_BACKEND_CUDA_FABRIC,
  .alloc = fabric_alloc,
  .export = fabric_export,
  .release = fd_release,
  .granule = 2ull << 20,
  .fence_in_allocation = true,
  .fence_raise = fd_fence_raise,
  .unavailable = fabric_unavailable,
};

static const uint8_t *fd_device_uuid(const struct backend *be, int device)
{
  (void)be;
  return backend_cuda_device_uuid(device);
}

static int fd_adopt(const struct backend *be, int fd, const uint8_t uuid[16], uint64_t size,
                    uint64_t *allocated, struct backend_mem *mem, int *device, char *err,
                    size_t errlen)
{
  (void)be;
  return backend_cuda_fd_adopt(fd, uuid, size, *allocated, mem, device, err, errlen);
}

const struct backend backend_cuda_fd = {
  .name = "cuda-fd",
  .kind = PROTO_BACKEND_CUDA_FD,
  .alloc = fd_alloc,
  .export = fd_export,
  .release = fd_release,
  .alloc_segment = fd_alloc,
  .zero_range = fd_zero_range,
  .granule = 2ull << 20, /* what H100/H200 report; the backend rounds to the device's own */
  .fence_in_allocation = true,
  .fence_raise = fd_fence_raise,
  .unavailable = cuda_unavailable,
  .verify_external = fd_verify_external,
  .device_uuid = fd_device_uuid,
  .adopt = fd_adopt,
};
