/* SPDX-License-Identifier: MIT */
/* The library's CUDA side: the driver, loaded on first need; devices matched by UUID
 * (ordinals differ between processes under CUDA_VISIBLE_DEVICES); IPC handles opened
 * and fd handles imported and mapped for the device whose kernels will use them (the
 * map device: it may differ from the device the memory lives on, which it then
 * reaches as a peer), in that device's primary context, leaving the caller's current
 * context as it was; stream work run in the stream's own context. */
#include "config.h"
#include "error.h"
#include "device.h"
#include "gpushm.h"
#include "gpushm-admin.h"
#include "gpushm_limits.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* gpushm_local_devices(): a snapshot, owned by the caller. */
struct gpushm_local_device {
  int32_t ordinal;
  uint32_t flags;
  uint8_t uuid[16];
  char name[256];
};

struct gpushm_local_device_list {
  int driver_version;
  size_t n;
  struct gpushm_local_device devices[];
};

#include "driver.h"


static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  bool loaded; /* load() ran and succeeded; atomic */
  int status;  /* 0 or the GPUSHM_E_* every CUDA call fails with */
  char why[256];
  struct cuda_driver drv;
  int n_devices;
  struct {
    CUdevice dev;
    CUcontext ctx; /* retained on first use, kept for the process's lifetime */
    CUstream stream; /* the library's own, for fence reads and writes; made on first use */
    uint8_t uuid[16];
  } devices[GPUSHM_LIMIT_DEVICES];
} cl;

static void load(void)
{
  char text[160];
  CUresult r;
  int count = 0;

  if (cuda_driver_load(&cl.drv, cl.why, sizeof cl.why) < 0) {
    cl.status = GPUSHM_E_UNSUPPORTED;
    return;
  }
  if ((r = CU_CALL(&cl.drv, cuInit, 0)) != CUDA_SUCCESS ||
      (r = CU_CALL(&cl.drv, cuDeviceGetCount, &count)) != CUDA_SUCCESS) {
    snprintf(cl.why, sizeof cl.why, "CUDA driver failed to initialise: %s",
             cuda_error_text(&cl.drv, r, text, sizeof text));
    cl.status = GPUSHM_E_UNSUPPORTED;
    return;
  }
  if (count > (int)GPUSHM_LIMIT_DEVICES)
    count = GPUSHM_LIMIT_DEVICES;
  for (int i = 0; i < count; i++) {
    CUuuid uuid;
    if (CU_CALL(&cl.drv, cuDeviceGet, &cl.devices[i].dev, i) != CUDA_SUCCESS ||
        CU_CALL(&cl.drv, cuDeviceGetUuid, &uuid, cl.devices[i].dev) != CUDA_SUCCESS)
      break;
    memcpy(cl.devices[i].uuid, uuid.bytes, sizeof cl.devices[i].uuid);
    cl.n_devices = i + 1;
  }
  __atomic_store_n(&cl.loaded, true, __ATOMIC_RELEASE);
}

static int cuda_error(CUresult r, const char *what)
{
  char text[160];
  return client_error(r == CUDA_ERROR_OUT_OF_MEMORY ? GPUSHM_E_NOMEM : GPUSHM_E_CUDA, "%s: %s",
                      what, cuda_error_text(&cl.drv, r, text, sizeof text));
}

static int find_device(const uint8_t *uuid, size_t uuid_len, int ordinal)
{
  if (uuid_len == 16) {
    for (int i = 0; i < cl.n_devices; i++)
      if (memcmp(cl.devices[i].uuid, uuid, 16) == 0)
        return i;
    return client_error(GPUSHM_E_UNSUPPORTED, "the buffer's GPU is not visible to this process "
                        "(check CUDA_VISIBLE_DEVICES)");
  }
  if (ordinal >= 0 && ordinal < cl.n_devices)
    return ordinal;
  return client_error(GPUSHM_E_UNSUPPORTED, "no CUDA device %d in this process", ordinal);
}

/* Device i's primary context, retained on first use. */
static int device_context(int i, CUcontext *ctx)
{
  CUresult r = CUDA_SUCCESS;

  pthread_mutex_lock(&ctx_lock);
  if (!cl.devices[i].ctx &&
      (r = CU_CALL(&cl.drv, cuDevicePrimaryCtxRetain, &cl.devices[i].ctx, cl.devices[i].dev)) !=
        CUDA_SUCCESS)
    cl.devices[i].ctx = NULL;
  *ctx = cl.devices[i].ctx;
  pthread_mutex_unlock(&ctx_lock);
  return r == CUDA_SUCCESS ? 0 : cuda_error(r, "cuDevicePrimaryCtxRetain");
}

/* Makes ctx current; *prev receives the one to restore with leave_context().  Nothing
 * changes when it already is (the common case: a program on one device). */
static int enter_context(CUcontext ctx, CUcontext *prev)
{
  CUresult r;

  if ((r = CU_CALL(&cl.drv, cuCtxGetCurrent, prev)) != CUDA_SUCCESS)
    return cuda_error(r, "cuCtxGetCurrent");
  if (*prev != ctx && (r = CU_CALL(&cl.drv, cuCtxSetCurrent, ctx)) != CUDA_SUCCESS)
    return cuda_error(r, "cuCtxSetCurrent");
  return 0;
}

static void leave_context(CUcontext ctx, CUcontext prev)
{
  if (prev != ctx)
    CU_CALL(&cl.drv, cuCtxSetCurrent, prev);
}

/* Makes device i's primary context current; *prev receives the one to restore. */
static int enter_device(int i, CUcontext *prev)
{
  CUcontext ctx;
  int r;

  if ((r = device_context(i, &ctx)) < 0)
    return r;
  return enter_context(ctx, prev);
}

static void leave_device(int i, CUcontext prev)
{
  leave_context(cl.devices[i].ctx, prev);
}

/* This process's ordinal of the device ctx belongs to (-1 if none matches). */
static int device_of_context(CUcontext ctx)
{
  CUcontext prev;
  CUdevice dev;
  CUresult r;

  for (int i = 0; i < cl.n_devices; i++)
    if (__atomic_load_n(&cl.devices[i].ctx, __ATOMIC_RELAXED) == ctx)
      return i;
  /* A context the caller made itself (or a primary one not retained here yet). */
  if ((r = CU_CALL(&cl.drv, cuCtxPushCurrent, ctx)) != CUDA_SUCCESS)
    return cuda_error(r, "cuCtxPushCurrent");
  r = CU_CALL(&cl.drv, cuCtxGetDevice, &dev);
  CU_CALL(&cl.drv, cuCtxPopCurrent, &prev);
  if (r != CUDA_SUCCESS)
    return cuda_error(r, "cuCtxGetDevice");
  for (int i = 0; i < cl.n_devices; i++)
    if (cl.devices[i].dev == dev)
      return i;
  return client_error(GPUSHM_E_UNSUPPORTED, "the stream's device is not one this process sees");
}

/* While a pipelined reply is taken: its start's current device (-2: ask the driver). */
static __thread int assumed_current = -2;

int client_cuda_assume_current(int device)
{
  int prev = assumed_current;
  assumed_current = device;
  return prev;
}

int client_cuda_current_device(void)
{
  CUcontext ctx = NULL;

  if (assumed_current != -2)
    return assumed_current;
  if (!__atomic_load_n(&cl.loaded, __ATOMIC_ACQUIRE) ||
      CU_CALL(&cl.drv, cuCtxGetCurrent, &ctx) != CUDA_SUCCESS || !ctx)
    return -1;
  int i = device_of_context(ctx);
  if (i < 0)
    client_clear_error();
  return i < 0 ? -1 : i;
}

#define ON_DEVICE(device, what, call)                                  \
  ({                                                                   \
    CUcontext prev_;                                                   \
    int ret_ = enter_device((device), &prev_);                         \
    if (ret_ == 0) {                                                   \
      CUresult r_ = (call);                                            \
      leave_device((device), prev_);                                   \
      ret_ = r_ == CUDA_SUCCESS ? 0 : cuda_error(r_, (what));          \
    }                                                                  \
    ret_;                                                              \
  })

/* Resolves where a buffer lives (*home, by UUID or ordinal) and where it is to be
 * mapped (*map): map_request when it is a device (>= 0), else the calling thread's
 * current context's device if it can reach home's memory as a peer, else home.  A
 * requested device that cannot reach it is refused here, before any mapping: a
 * kernel there would fault. */
static int resolve_devices(const uint8_t *uuid, size_t uuid_len, int ordinal, int map_request,
                           int *home, int *map)
{
  int can = 0;
  CUresult r;

  if ((*home = find_device(uuid, uuid_len, ordinal)) < 0)
    return *home;
  if (map_request >= 0) {
    if (map_request >= cl.n_devices)
      return client_error(GPUSHM_E_INVAL, "GPUSHM_MAP_DEVICE(%d): this process sees %d device%s",
                          map_request, cl.n_devices, cl.n_devices == 1 ? "" : "s");
    *map = map_request;
  } else if ((*map = client_cuda_current_device()) < 0) {
    *map = *home;
  }
  if (*map == *home)
    return 0;
  if ((r = CU_CALL(&cl.drv, cuDeviceCanAccessPeer, &can, cl.devices[*map].dev,
                   cl.devices[*home].dev)) != CUDA_SUCCESS)
    return cuda_error(r, "cuDeviceCanAccessPeer");
  if (!can && map_request < 0) {
    *map = *home; /* by default only: the mapping copies can use, as always */
    return 0;
  }
  if (!can)
    return client_error(GPUSHM_E_UNSUPPORTED, "device %d cannot reach the memory of device %d "
                        "(no peer access between them): use the buffer on device %d "
                        "(GPUSHM_MAP_DEVICE(%d))", *map, *home, *home, *home);
  return 0;
}

/* What both imports need first: the driver, a handle of the right size, the devices,
 * the map device's context made current (*prev to restore). */
static int begin_import(size_t handle_len, size_t expected_len, const char *what,
                        const uint8_t *uuid, size_t uuid_len, int ordinal, int map_request,
                        int *home, int *map, CUcontext *prev)
{
  int ret;

  pthread_once(&load_once, load);
  if (cl.status)
    return client_error(cl.status, "unsupported: %s", cl.why);
  if (handle_len != expected_len)
    return client_error(GPUSHM_E_PROTO, "daemon sent %s of %zu bytes", what, handle_len);
  if ((ret = resolve_devices(uuid, uuid_len, ordinal, map_request, home, map)) < 0)
    return ret;
  return (ret = enter_device(*map, prev)) < 0 ? ret : 0;
}

/* Legacy IPC: opened in the map device's context; on another device than the
 * memory's, the driver enables peer access as needed (the flag), which is what lets
 * kernels there use the pointer (a handle opened in the memory's own context and used
 * from another device's kernels faults with CUDA_ERROR_ILLEGAL_ADDRESS: measured). */
int client_cuda_import_ipc(const uint8_t *handle, size_t handle_len, const uint8_t *uuid,
                           size_t uuid_len, int ordinal, int map_request, void **ptr,
                           struct client_devices *devices)
{
  CUipcMemHandle h;
  CUdeviceptr dptr;
  CUcontext prev;
  CUresult r;
  int home, map, ret;

  if ((ret = begin_import(handle_len, sizeof h.reserved, "an IPC handle", uuid, uuid_len,
                          ordinal, map_request, &home, &map, &prev)) < 0)
    return ret;
  memcpy(h.reserved, handle, sizeof h.reserved);
  r = CU_CALL(&cl.drv, cuIpcOpenMemHandle, &dptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  leave_device(map, prev);
  if (r != CUDA_SUCCESS)
    return cuda_error(r, "cuIpcOpenMemHandle");
  *ptr = (void *)(uintptr_t)dptr;
  devices->home = home;
  devices->map = map;
  return 0;
}

int client_cuda_close_ipc(void *ptr, int map_device)
{
  return ON_DEVICE(map_device, "cuIpcCloseMemHandle",
                   CU_CALL(&cl.drv, cuIpcCloseMemHandle, (CUdeviceptr)(uintptr_t)ptr));
}

/* An inter-process event as this process holds it: one CUevent per device, each opened
 * from the same handle in that device's primary context — the event's own device's
 * first (records go there only), every other device's on its first wait.  One object
 * cannot serve two devices: on the real driver (580, two H100s) a stream of device 1
 * waiting on an IPC event opened in device 0's context kills the process with SIGSEGV
 * inside the driver, whichever context is current, while the same handle opened again
 * in device 1's context is an event of its own that device 1's streams wait on. */
struct client_cuda_event {
  CUipcEventHandle handle;
  int device; /* where it lives and is recorded */
  CUevent on[GPUSHM_LIMIT_DEVICES]; /* by device; set once, under event_lock */
};

static pthread_mutex_t event_lock = PTHREAD_MUTEX_INITIALIZER;

/* Opens ev's handle in device d's primary context as ev->on[d]. */
static int open_event_on(struct client_cuda_event *ev, int d)
{
  CUcontext prev;
  CUevent e;
  CUresult r;
  int ret;

  if ((ret = enter_device(d, &prev)) < 0)
    return ret;
  r = CU_CALL(&cl.drv, cuIpcOpenEventHandle, &e, ev->handle);
  leave_device(d, prev);
  if (r != CUDA_SUCCESS) {
    /* Legacy IPC events live in a /dev/shm file of mode 0600 owned by the exporting
     * process: another uid cannot open them. */
    ret = cuda_error(r, "cuIpcOpenEventHandle");
    if (ret == GPUSHM_E_CUDA && geteuid() != 0) {
      char why[200];
      snprintf(why, sizeof why, "%s", gpushm_last_error_message());
      ret = client_error(GPUSHM_E_PERM, "%s; CUDA IPC events can only be opened by the uid that "
                         "runs gpushmd (or root): run a per-user gpushmd for this user", why);
    }
    return ret;
  }
  __atomic_store_n(&ev->on[d], e, __ATOMIC_RELEASE);
  return 0;
}

int client_cuda_import_event(const uint8_t *handle, size_t handle_len, const uint8_t *uuid,
                             size_t uuid_len, int ordinal, void **event, int *event_device)
{
  struct client_cuda_event *ev;
  CUcontext prev;
  int dev, map, ret;

  if ((ret = begin_import(handle_len, sizeof ev->handle.reserved, "an event handle", uuid,
                          uuid_len, ordinal, -1, &dev, &map, &prev)) < 0)
    return ret;
  leave_device(map, prev);
  if (!(ev = calloc(1, sizeof *ev)))
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  memcpy(ev->handle.reserved, handle, sizeof ev->handle.reserved);
  ev->device = dev;
  if ((ret = open_event_on(ev, dev)) < 0) {
    free(ev);
    return ret;
  }
  *event = ev;
  *event_device = dev;
  return 0;
}

int client_cuda_destroy_event(void *event)
{
  struct client_cuda_event *ev = event;
  int r = 0, r2;

  for (int d = 0; d < (int)GPUSHM_LIMIT_DEVICES; d++) {
    if (!ev->on[d])
      continue;
    r2 = ON_DEVICE(d, "cuEventDestroy", CU_CALL(&cl.drv, cuEventDestroy, ev->on[d]));
    r = r < 0 ? r : r2;
  }
  free(ev);
  return r;
}

/* cuda-fd: import the fd (a capability: only a process sent it can), reserve an
 * address range, map the allocation there and grant the map device access — read-only
 * for read-only opens (against bugs: the fd could map it read-write again).  A map
 * device other than the memory's reaches it as a peer (checked before).  The fd is
 * the caller's to close; the imported handle keeps the memory alive. */
int client_cuda_import_fd(int fd, uint64_t size, bool read_only, const uint8_t *uuid,
                          size_t uuid_len, int ordinal, int map_request, void **ptr,
                          uint64_t *handle_out, struct client_devices *devices)
{
  uint64_t handle;
  int ret;

  if ((ret = client_cuda_resolve(uuid, uuid_len, ordinal, map_request, devices)) < 0 ||
      (ret = client_cuda_fd_import(fd, devices->map, &handle)) < 0)
    return ret;
  if ((ret = client_cuda_fd_map(handle, size, read_only, devices->map, ptr)) < 0) {
    client_cuda_fd_release(handle);
    return ret;
  }
  *handle_out = handle;
  return 0;
}

/* Registered memory (external memory, to the driver): imported in the map device's
 * context; the import owns its own dup of fd. */
int client_cuda_import_external(int fd, uint64_t allocation_size, bool dedicated,
                                const uint8_t uuid[16], int map_request, void **ext_out,
                                struct client_devices *devices)
{
  CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc = { .type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD };
  CUexternalMemory ext = NULL;
  CUcontext prev;
  CUresult r;
  int ret;

  if ((ret = client_cuda_resolve(uuid, 16, -1, map_request, devices)) < 0)
    return ret;
  /* The memory of another device is no peer's to map: imports are per device. */
  if (devices->map != devices->home)
    return client_error(GPUSHM_E_UNSUPPORTED, "registered memory maps only on its own device "
                        "(%d here), not device %d", devices->home, devices->map);
  if ((desc.handle.fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0)
    return client_error(errno == EMFILE ? GPUSHM_E_LIMIT : GPUSHM_E_IO, "dup: %s",
                        strerror(errno));
  desc.size = allocation_size;
  desc.flags = dedicated ? CUDA_EXTERNAL_MEMORY_DEDICATED : 0;
  if ((ret = enter_device(devices->map, &prev)) < 0) {
    close(desc.handle.fd);
    return ret;
  }
  r = CU_CALL(&cl.drv, cuImportExternalMemory, &ext, &desc);
  leave_device(devices->map, prev);
  if (r != CUDA_SUCCESS) {
    close(desc.handle.fd); /* ownership passes to CUDA on success only */
    return cuda_error(r, "cuImportExternalMemory");
  }
  *ext_out = ext;
  return 0;
}

int client_cuda_external_buffer(void *ext, uint64_t size, int device, void **ptr)
{
  CUDA_EXTERNAL_MEMORY_BUFFER_DESC desc = { .offset = 0, .size = size };
  CUdeviceptr p = 0;
  CUcontext prev;
  CUresult r;
  int ret;

  if ((ret = enter_device(device, &prev)) < 0)
    return ret;
  r = CU_CALL(&cl.drv, cuExternalMemoryGetMappedBuffer, &p, (CUexternalMemory)ext, &desc);
  leave_device(device, prev);
  if (r != CUDA_SUCCESS)
    return cuda_error(r, "cuExternalMemoryGetMappedBuffer");
  *ptr = (void *)(uintptr_t)p;
  return 0;
}

int client_cuda_external_mipmap(void *ext, const gpushm_image_desc_t *image, uint32_t cu_format,
                                uint32_t channels, int device, void **mipmap)
{
  CUDA_EXTERNAL_MEMORY_MIPMAPPED_ARRAY_DESC desc = {
    .offset = 0,
    .arrayDesc = {
      .Width = image->width,
      /* CUDA's 1D arrays have height 0, its 2D ones depth 0 (layered: the layers) */
      .Height = image->height,
      .Depth = image->array_layers > 1 ? image->array_layers
               : image->depth > 1 ? image->depth : 0,
      .Format = (CUarray_format)cu_format,
      .NumChannels = channels,
      .Flags = (image->array_layers > 1 ? CUDA_ARRAY3D_LAYERED : 0) |
               (image->usage & GPUSHM_IMAGE_USAGE_STORAGE ? CUDA_ARRAY3D_SURFACE_LDST : 0) |
               (image->usage & GPUSHM_IMAGE_USAGE_COLOR_ATTACHMENT
                  ? CUDA_ARRAY3D_COLOR_ATTACHMENT : 0),
    },
    .numLevels = image->mip_levels,
  };
  CUmipmappedArray m = NULL;
  CUcontext prev;
  CUresult r;
  int ret;

  if ((ret = enter_device(device, &prev)) < 0)
    return ret;
  r = CU_CALL(&cl.drv, cuExternalMemoryGetMappedMipmappedArray, &m, (CUexternalMemory)ext, &desc);
  leave_device(device, prev);
  if (r != CUDA_SUCCESS)
    return cuda_error(r, "cuExternalMemoryGetMappedMipmappedArray");
  *mipmap = m;
  return 0;
}

int client_cuda_mipmap_level(void *mipmap, uint32_t level, int device, void **array)
{
  CUarray a = NULL;
  CUcontext prev;
  CUresult r;
  int ret;

  if ((ret = enter_device(device, &prev)) < 0)
    return ret;
  r = CU_CALL(&cl.drv, cuMipmappedArrayGetLevel, &a, (CUmipmappedArray)mipmap, level);
  leave_device(device, prev);
  if (r != CUDA_SUCCESS)
    return cuda_error(r, "cuMipmappedArrayGetLevel");
  *array = a;
  return 0;
}

int client_cuda_external_destroy(void *ext, void *ptr, void *mipmap, int device)
{
  CUcontext prev;
  CUresult r = CUDA_SUCCESS, r2;
  int ret;

  if ((ret = enter_device(device, &prev)) < 0)
    return ret;
  if (ptr)
    r = CU_CALL(&cl.drv, cuMemFree, (CUdeviceptr)(uintptr_t)ptr);
  if (mipmap && (r2 = CU_CALL(&cl.drv, cuMipmappedArrayDestroy, (CUmipmappedArray)mipmap)) &&
      r == CUDA_SUCCESS)
    r = r2;
  if ((r2 = CU_CALL(&cl.drv, cuDestroyExternalMemory, (CUexternalMemory)ext)) && r == CUDA_SUCCESS)
    r = r2;
  leave_device(device, prev);
  return r == CUDA_SUCCESS ? 0 : cuda_error(r, "releasing registered memory");
}

int client_cuda_resolve(const uint8_t *uuid, size_t uuid_len, int ordinal, int map_request,
                        struct client_devices *devices)
{
  pthread_once(&load_once, load);
  if (cl.status)
    return client_error(cl.status, "unsupported: %s", cl.why);
  return resolve_devices(uuid, uuid_len, ordinal, map_request, &devices->home, &devices->map);
}

/* In device's context, as every driver call of an import (the caller resolved it). */
int client_cuda_fd_import(int fd, int device, uint64_t *handle)
{
  CUmemGenericAllocationHandle h;
  CUcontext prev;
  CUresult r;
  int ret;

  if ((ret = enter_device(device, &prev)) < 0)
    return ret;
  r = CU_CALL(&cl.drv, cuMemImportFromShareableHandle, &h, (void *)(intptr_t)fd,
              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  leave_device(device, prev);
  if (r != CUDA_SUCCESS)
    return cuda_error(r, "cuMemImportFromShareableHandle");
  *handle = (uint64_t)h;
  return 0;
}

int client_cuda_fd_map(uint64_t handle, uint64_t size, bool read_only, int map_device, void **ptr)
{
  CUmemAccessDesc access;
  CUdeviceptr base = 0;
  CUcontext prev;
  CUresult r;
  const char *what;
  int ret;

  if (size == 0 || size > SIZE_MAX)
    return client_error(GPUSHM_E_PROTO, "daemon sent a device allocation of %llu bytes",
                        (unsigned long long)size);
  if ((ret = enter_device(map_device, &prev)) < 0)
    return ret;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = cl.devices[map_device].dev;
  access.flags = read_only ? CU_MEM_ACCESS_FLAGS_PROT_READ : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  what = "cuMemAddressReserve";
  if ((r = CU_CALL(&cl.drv, cuMemAddressReserve, &base, (size_t)size, 0, 0, 0)) == CUDA_SUCCESS) {
    what = "cuMemMap";
    if ((r = CU_CALL(&cl.drv, cuMemMap, base, (size_t)size, 0,
                     (CUmemGenericAllocationHandle)handle, 0)) == CUDA_SUCCESS) {
      what = "cuMemSetAccess";
      if ((r = CU_CALL(&cl.drv, cuMemSetAccess, base, (size_t)size, &access, 1)) != CUDA_SUCCESS)
        CU_CALL(&cl.drv, cuMemUnmap, base, (size_t)size);
    }
    if (r != CUDA_SUCCESS)
      CU_CALL(&cl.drv, cuMemAddressFree, base, (size_t)size);
  }
  leave_device(map_device, prev);
  if (r != CUDA_SUCCESS)
    return cuda_error(r, what);
  *ptr = (void *)(uintptr_t)base;
  return 0;
}

int client_cuda_fd_unmap(void *ptr, uint64_t size, int map_device)
{
  CUdeviceptr base = (CUdeviceptr)(uintptr_t)ptr;
  int r1 = ON_DEVICE(map_device, "cuMemUnmap", CU_CALL(&cl.drv, cuMemUnmap, base, (size_t)size));
  int r2 = ON_DEVICE(map_device, "cuMemAddressFree",
                     CU_CALL(&cl.drv, cuMemAddressFree, base, (size_t)size));
  return r1 < 0 ? r1 : r2;
}

int client_cuda_fd_release(uint64_t handle)
{
  CUresult r = CU_CALL(&cl.drv, cuMemRelease, (CUmemGenericAllocationHandle)handle);
  return r == CUDA_SUCCESS ? 0 : cuda_error(r, "cuMemRelease");
}

/* Unmaps, frees the range and releases the imported handle; the first failure is
 * returned, the rest is still attempted. */
int client_cuda_close_fd(void *ptr, uint64_t size, uint64_t handle, int map_device)
{
  int r1 = client_cuda_fd_unmap(ptr, size, map_device);
  int r2 = client_cuda_fd_release(handle);
  return r1 < 0 ? r1 : r2;
}

int client_cuda_stream(void *stream, int map_device, struct client_stream *out)
{
  CUcontext ctx;
  CUresult r;
  int ret;

  out->stream = stream;
  if (!stream) { /* the legacy default stream of the map device's primary context */
    if ((ret = device_context(map_device, &ctx)) < 0)
      return ret;
    out->ctx = ctx;
    out->device = map_device;
    return 0;
  }
  if ((r = CU_CALL(&cl.drv, cuStreamGetCtx, (CUstream)stream, &ctx)) != CUDA_SUCCESS)
    return cuda_error(r, "cuStreamGetCtx");
  if ((ret = device_of_context(ctx)) < 0)
    return ret;
  out->ctx = ctx;
  out->device = ret;
  return 0;
}

/* Runs one stream operation in the stream's own context, the caller's restored after;
 * evaluates to 0 or a GPUSHM_E_* with the driver's reason. */
#define ON_STREAM(s, what, call)                                       \
  ({                                                                   \
    CUcontext prev_;                                                   \
    int ret_ = enter_context((CUcontext)(s)->ctx, &prev_);             \
    if (ret_ == 0) {                                                   \
      CUresult r_ = (call);                                            \
      leave_context((CUcontext)(s)->ctx, prev_);                       \
      ret_ = r_ == CUDA_SUCCESS ? 0 : cuda_error(r_, (what));          \
    }                                                                  \
    ret_;                                                              \
  })

int client_cuda_copy(void *dst, const void *src, uint64_t len, const struct client_stream *s)
{
  return ON_STREAM(s, "cuMemcpyAsync",
                   CU_CALL(&cl.drv, cuMemcpyAsync, (CUdeviceptr)(uintptr_t)dst,
                           (CUdeviceptr)(uintptr_t)src, (size_t)len, (CUstream)s->stream));
}

int client_cuda_mark(struct client_cuda_mark *m, const struct client_stream *s)
{
  CUevent ev = m->event;
  CUcontext prev;
  CUresult r;
  int ret;

  if ((ret = enter_context((CUcontext)s->ctx, &prev)) < 0)
    return ret;
  r = ev ? CUDA_SUCCESS : CU_CALL(&cl.drv, cuEventCreate, &ev, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS && (r = CU_CALL(&cl.drv, cuEventRecord, ev, (CUstream)s->stream)) !=
      CUDA_SUCCESS && !m->event)
    CU_CALL(&cl.drv, cuEventDestroy, ev);
  leave_context((CUcontext)s->ctx, prev);
  if (r != CUDA_SUCCESS)
    return cuda_error(r, m->event ? "cuEventRecord" : "cuEventCreate");
  m->event = ev;
  m->stream = s->stream;
  m->ctx = s->ctx;
  return 0;
}

int client_cuda_mark_wait(struct client_cuda_mark *m)
{
  CUcontext prev;
  CUresult r, r2;
  int ret;

  if (!m->event)
    return 0;
  if ((ret = enter_context((CUcontext)m->ctx, &prev)) < 0)
    return ret;
  r = CU_CALL(&cl.drv, cuEventSynchronize, (CUevent)m->event);
  r2 = CU_CALL(&cl.drv, cuEventDestroy, (CUevent)m->event);
  leave_context((CUcontext)m->ctx, prev);
  m->event = NULL;
  if (r != CUDA_SUCCESS)
    return cuda_error(r, "cuEventSynchronize");
  return r2 == CUDA_SUCCESS ? 0 : cuda_error(r2, "cuEventDestroy");
}

int client_cuda_record(void *event, const struct client_stream *s)
{
  const struct client_cuda_event *ev = event;
  return ON_STREAM(s, "cuEventRecord",
                   CU_CALL(&cl.drv, cuEventRecord, ev->on[ev->device], (CUstream)s->stream));
}

/* With the event object of the stream's device, opened there on first need. */
int client_cuda_wait(void *event, const struct client_stream *s)
{
  struct client_cuda_event *ev = event;
  CUevent e = __atomic_load_n(&ev->on[s->device], __ATOMIC_ACQUIRE);
  int r = 0;

  if (!e) {
    pthread_mutex_lock(&event_lock);
    if (!ev->on[s->device])
      r = open_event_on(ev, s->device);
    pthread_mutex_unlock(&event_lock);
    if (r < 0)
      return r;
    e = ev->on[s->device];
  }
  return ON_STREAM(s, "cuStreamWaitEvent",
                   CU_CALL(&cl.drv, cuStreamWaitEvent, (CUstream)s->stream, e, 0));
}

static int device_attribute(int local_device, CUdevice_attribute a, int *value)
{
  CUresult r = CU_CALL(&cl.drv, cuDeviceGetAttribute, value, a, cl.devices[local_device].dev);
  return r == CUDA_SUCCESS ? 0 : cuda_error(r, "cuDeviceGetAttribute");
}

/* Whether device can write and wait on fences from streams; 1 with why set when not. */
int client_cuda_fence_support(int local_device, char *why, size_t why_len)
{
  int memops = 0, r;

  if ((r = device_attribute(local_device, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                            &memops)) < 0)
    return r;
  if (memops)
    return 0;
  snprintf(why, why_len, "the device lacks 64-bit stream memory operations");
  return 1;
}

/* The driver checks alignment and extent too, but answers INVALID_VALUE for all of it;
 * the caller has said which.  A dma-buf of memory the driver's VMM maps here works; of
 * memory opened through legacy IPC the driver refuses it (INVALID_VALUE as well, as
 * measured on an H100 with driver 580), so that is refused before asking. */
int client_cuda_export_dmabuf(void *dptr, uint64_t size, int device, int *fd_out)
{
  int supported = 0, fd = -1, r;
  CUresult cr;
  CUcontext prev;
  char text[160];

  if ((r = device_attribute(device, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, &supported)) < 0)
    return r;
  if (!supported)
    return client_error(GPUSHM_E_UNSUPPORTED, "device %d has no dma-buf support "
                        "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: it needs the open "
                        "NVIDIA kernel modules and a kernel with dma-buf)", device);
  if ((r = enter_device(device, &prev)) < 0)
    return r;
  cr = CU_CALL(&cl.drv, cuMemGetHandleForAddressRange, &fd, (CUdeviceptr)(uintptr_t)dptr,
               (size_t)size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  leave_device(device, prev);
  if (cr != CUDA_SUCCESS || fd < 0)
    return client_error(cr == CUDA_ERROR_NOT_SUPPORTED ? GPUSHM_E_UNSUPPORTED
                        : cr == CUDA_ERROR_OUT_OF_MEMORY ? GPUSHM_E_NOMEM : GPUSHM_E_CUDA,
                        "cuMemGetHandleForAddressRange(DMA_BUF_FD) of %llu bytes: %s",
                        (unsigned long long)size,
                        cuda_error_text(&cl.drv, cr != CUDA_SUCCESS ? cr : CUDA_ERROR_UNKNOWN,
                                        text, sizeof text));
  /* The caller's, and not its children's (the driver sets this too, today). */
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  *fd_out = fd;
  return 0;
}

/* The library's own stream on a device, for the CPU's reads and writes of fences: a
 * non-blocking one, so they never wait behind (or for) the caller's streams. */
static int private_stream(int i, CUstream *out)
{
  CUresult r = CUDA_SUCCESS;

  pthread_mutex_lock(&ctx_lock);
  if (!cl.devices[i].stream)
    r = CU_CALL(&cl.drv, cuStreamCreate, &cl.devices[i].stream, CU_STREAM_NON_BLOCKING);
  *out = cl.devices[i].stream;
  pthread_mutex_unlock(&ctx_lock);
  return r == CUDA_SUCCESS ? 0 : cuda_error(r, "cuStreamCreate");
}

static int fence_copy(uint64_t fence_dptr, uint64_t *value, bool write, int map_device)
{
  CUcontext prev;
  CUstream s;
  CUresult r;
  int ret;

  if ((ret = enter_device(map_device, &prev)) < 0)
    return ret;
  if ((ret = private_stream(map_device, &s)) == 0) {
    const char *what = write ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync";
    r = write ? CU_CALL(&cl.drv, cuMemcpyHtoDAsync, (CUdeviceptr)fence_dptr, value, 8, s)
              : CU_CALL(&cl.drv, cuMemcpyDtoHAsync, value, (CUdeviceptr)fence_dptr, 8, s);
    if (r == CUDA_SUCCESS) {
      what = "cuStreamSynchronize";
      r = CU_CALL(&cl.drv, cuStreamSynchronize, s);
    }
    ret = r == CUDA_SUCCESS ? 0 : cuda_error(r, what);
  }
  leave_device(map_device, prev);
  return ret;
}

int client_cuda_clear(void *dptr, uint64_t len, int map_device)
{
  CUcontext prev;
  CUstream s;
  CUresult r;
  const char *what = "cuMemsetD32Async";
  int ret;

  if ((ret = enter_device(map_device, &prev)) < 0)
    return ret;
  if ((ret = private_stream(map_device, &s)) == 0) {
    r = CU_CALL(&cl.drv, cuMemsetD32Async, (CUdeviceptr)(uintptr_t)dptr, 0, (size_t)(len / 4), s);
    if (r == CUDA_SUCCESS) {
      what = "cuStreamSynchronize";
      r = CU_CALL(&cl.drv, cuStreamSynchronize, s);
    }
    ret = r == CUDA_SUCCESS ? 0 : cuda_error(r, what);
  }
  leave_device(map_device, prev);
  return ret;
}

int client_cuda_fence_read(uint64_t fence_dptr, uint64_t *value, int map_device)
{
  return fence_copy(fence_dptr, value, false, map_device);
}

int client_cuda_fence_store(uint64_t fence_dptr, uint64_t value, int map_device)
{
  return fence_copy(fence_dptr, &value, true, map_device);
}

/* The write is ordered after everything queued on stream before it (no
 * NO_MEMORY_BARRIER flag): whoever sees the value sees the work's results. */
int client_cuda_fence_write(uint64_t fence_dptr, uint64_t value, const struct client_stream *s)
{
  return ON_STREAM(s, "cuStreamWriteValue64",
                   CU_CALL(&cl.drv, cuStreamWriteValue64, (CUstream)s->stream,
                           (CUdeviceptr)fence_dptr, value, CU_STREAM_WRITE_VALUE_DEFAULT));
}

int client_cuda_fence_wait(uint64_t fence_dptr, uint64_t value, const struct client_stream *s)
{
  return ON_STREAM(s, "cuStreamWaitValue64",
                   CU_CALL(&cl.drv, cuStreamWaitValue64, (CUstream)s->stream,
                           (CUdeviceptr)fence_dptr, value, CU_STREAM_WAIT_VALUE_GEQ));
}

int client_cuda_stream_sync(const struct client_stream *s)
{
  return ON_STREAM(s, "cuStreamSynchronize",
                   CU_CALL(&cl.drv, cuStreamSynchronize, (CUstream)s->stream));
}

/* ---- semaphore planes (timeline_plane.c) ---------------------------------------- */

int client_cuda_semaphore_import(int fd, const uint8_t uuid[16], int *device, void **sem)
{
  CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC desc = {
    .type = CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD };
  CUexternalSemaphore ext;
  CUcontext prev;
  CUresult r;
  int i, ret;

  pthread_once(&load_once, load);
  if (cl.status)
    return client_error(cl.status, "a timeline's semaphore is signalled through CUDA, which "
                        "is unsupported here: %s", cl.why);
  for (i = 0; i < cl.n_devices && memcmp(cl.devices[i].uuid, uuid, 16) != 0; i++)
    ;
  if (i == cl.n_devices)
    return client_error(GPUSHM_E_UNSUPPORTED, "the timeline's semaphore lives on a GPU this "
                        "process does not see (check CUDA_VISIBLE_DEVICES)");
  if ((ret = enter_device(i, &prev)) < 0)
    return ret;
  if ((desc.handle.fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
    leave_device(i, prev);
    return client_error(GPUSHM_E_IO, "dup: %s", strerror(errno));
  }
  r = CU_CALL(&cl.drv, cuImportExternalSemaphore, &ext, &desc);
  leave_device(i, prev);
  if (r != CUDA_SUCCESS) {
    close(desc.handle.fd); /* CUDA owns an fd it imported, and only then */
    return cuda_error(r, "cuImportExternalSemaphore");
  }
  *device = i;
  *sem = ext;
  return 0;
}

/* On the caller's stream, behind its work; without one, now: through the library's own
 * stream, waited for, so that the semaphore holds the value when the call returns (a
 * later signal on another stream must not land first and be set back). */
int client_cuda_semaphore_signal(void *sem, int device, uint64_t value,
                                 const struct client_stream *s)
{
  CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS p = { .params.fence.value = value };
  CUexternalSemaphore ext = sem;
  const char *what = "cuSignalExternalSemaphoresAsync";
  CUcontext prev;
  CUstream own;
  CUresult r;
  int ret;

  if (s)
    return ON_STREAM(s, what, CU_CALL(&cl.drv, cuSignalExternalSemaphoresAsync, &ext, &p, 1,
                                      (CUstream)s->stream));
  if ((ret = enter_device(device, &prev)) < 0)
    return ret;
  if ((ret = private_stream(device, &own)) == 0) {
    r = CU_CALL(&cl.drv, cuSignalExternalSemaphoresAsync, &ext, &p, 1, own);
    if (r == CUDA_SUCCESS) {
      what = "cuStreamSynchronize";
      r = CU_CALL(&cl.drv, cuStreamSynchronize, own);
    }
    ret = r == CUDA_SUCCESS ? 0 : cuda_error(r, what);
  }
  leave_device(device, prev);
  return ret;
}

int client_cuda_semaphore_wait(void *sem, uint64_t value, const struct client_stream *s)
{
  CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS p = { .params.fence.value = value };
  CUexternalSemaphore ext = sem;

  return ON_STREAM(s, "cuWaitExternalSemaphoresAsync",
                   CU_CALL(&cl.drv, cuWaitExternalSemaphoresAsync, &ext, &p, 1,
                           (CUstream)s->stream));
}

static int semaphore_destroy(void *sem, int device)
{
  CUcontext prev;
  CUresult r;
  int ret;

  if ((ret = enter_device(device, &prev)) < 0)
    return ret;
  r = CU_CALL(&cl.drv, cuDestroyExternalSemaphore, (CUexternalSemaphore)sem);
  leave_device(device, prev);
  return r == CUDA_SUCCESS ? 0 : cuda_error(r, "cuDestroyExternalSemaphore");
}

int client_cuda_context_synchronize(void *ctx)
{
  CUcontext prev;
  CUresult r;
  int ret;

  if ((ret = enter_context((CUcontext)ctx, &prev)) < 0) {
    client_clear_error(); /* destroyed, and its work with it */
    return 0;
  }
  r = CU_CALL(&cl.drv, cuCtxSynchronize);
  leave_context((CUcontext)ctx, prev);
  return r == CUDA_SUCCESS ? 0 : cuda_error(r, "cuCtxSynchronize");
}

int client_cuda_semaphore_retire(void *sem, int device, void *const ctxs[], unsigned n_ctxs,
                                 uint64_t last)
{
  CUcontext prev;
  CUresult r;
  int ret, synced;

  if ((ret = enter_device(device, &prev)) < 0)
    return ret;
  r = CU_CALL(&cl.drv, cuCtxSynchronize);
  leave_device(device, prev);
  synced = r == CUDA_SUCCESS ? 0 : cuda_error(r, "cuCtxSynchronize");
  for (unsigned i = 0; synced == 0 && i < n_ctxs; i++)
    synced = client_cuda_context_synchronize(ctxs[i]);
  /* with a signal maybe still queued, a leak is better than the driver's undefined */
  if (synced < 0)
    return synced;
  ret = last ? client_cuda_semaphore_signal(sem, device, last, NULL) : 0;
  synced = semaphore_destroy(sem, device);
  return ret < 0 ? ret : synced;
}

/* CUDA_VISIBLE_DEVICES naming only MIG instances: every device is one. */
static bool visible_devices_are_mig(void)
{
  /* getenv, not secure_getenv: the driver reads it so, and ours must agree with it. */
  const char *v = getenv("CUDA_VISIBLE_DEVICES");

  if (!v || !*v)
    return false;
  for (const char *p = v; *p; p += strcspn(p, ",")) {
    p += *p == ',';
    p += strspn(p, " ");
    if (strncmp(p, "MIG-", 4) != 0)
      return false;
  }
  return true;
}

static bool attribute_set(CUdevice dev, CUdevice_attribute attr)
{
  int v = 0;
  /* An attribute newer than the driver is an error: the feature is not there. */
  return CU_CALL(&cl.drv, cuDeviceGetAttribute, &v, attr, dev) == CUDA_SUCCESS && v;
}

int gpushm_local_devices(gpushm_local_device_list_t **out)
{
  struct gpushm_local_device_list *list;
  bool all_mig = visible_devices_are_mig();

  client_clear_error();
  if (!out)
    return client_error(GPUSHM_E_INVAL, "out is NULL");
  *out = NULL;
  pthread_once(&load_once, load);
  if (cl.status)
    return client_error(cl.status, "%s", cl.why);
  list = calloc(1, sizeof *list + (size_t)cl.n_devices * sizeof list->devices[0]);
  if (!list)
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  list->driver_version = cl.drv.driver_version;
  for (int i = 0; i < cl.n_devices; i++) {
    struct gpushm_local_device *d = &list->devices[list->n++];
    CUdevice dev = cl.devices[i].dev;

    d->ordinal = i;
    memcpy(d->uuid, cl.devices[i].uuid, sizeof d->uuid);
    if (CU_CALL(&cl.drv, cuDeviceGetName, d->name, (int)sizeof d->name, dev) != CUDA_SUCCESS)
      snprintf(d->name, sizeof d->name, "?");
    d->name[sizeof d->name - 1] = '\0';
    if (attribute_set(dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED))
      d->flags |= GPUSHM_DEVICE_VMM;
    if (attribute_set(dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED))
      d->flags |= GPUSHM_DEVICE_POSIX_FD;
    if (attribute_set(dev, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS))
      d->flags |= GPUSHM_DEVICE_STREAM_MEMOPS64;
    if (attribute_set(dev, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED))
      d->flags |= GPUSHM_DEVICE_IPC_EVENTS;
    /* CU_DEVICE_ATTRIBUTE_MPS_ENABLED by value: headers before CUDA 12.3 lack the name. */
    if (attribute_set(dev, (CUdevice_attribute)133))
      d->flags |= GPUSHM_DEVICE_MPS;
    /* The driver has no MIG attribute: a MIG instance is named "<GPU> MIG <profile>". */
    if (all_mig || strstr(d->name, " MIG "))
      d->flags |= GPUSHM_DEVICE_MIG;
  }
  *out = list;
  return 0;
}


void gpushm_local_device_list_free(gpushm_local_device_list_t *list)
{
  free(list);
}

int gpushm_local_device_list_driver_version(const gpushm_local_device_list_t *list)
{
  return list ? list->driver_version : 0;
}

size_t gpushm_local_device_list_count(const gpushm_local_device_list_t *list)
{
  return list ? list->n : 0;
}

const gpushm_local_device_t *gpushm_local_device_list_get(const gpushm_local_device_list_t *list,
                                                          size_t i)
{
  return list && i < list->n ? &list->devices[i] : NULL;
}

int32_t gpushm_local_device_ordinal(const gpushm_local_device_t *dev)
{
  return dev ? dev->ordinal : 0;
}

const char *gpushm_local_device_name(const gpushm_local_device_t *dev)
{
  return dev ? dev->name : "";
}

int gpushm_local_device_uuid(const gpushm_local_device_t *dev, uint8_t uuid[16])
{
  if (!dev || !uuid)
    return client_error(GPUSHM_E_INVAL, "dev and uuid must not be NULL");
  memcpy(uuid, dev->uuid, 16);
  return 0;
}

uint32_t gpushm_local_device_flags(const gpushm_local_device_t *dev)
{
  return dev ? dev->flags : 0;
}

int client_cuda_host_register(void *p, size_t len, bool read_only, const struct client_stream *s,
                              uint64_t *dptr, char *why, size_t why_len)
{
  CUdeviceptr d = 0;
  CUcontext prev;
  CUresult cr;
  int ro_ok = 0, r;

  if (read_only && ((r = device_attribute(s->device,
                                          CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED,
                                          &ro_ok)) < 0 || !ro_ok)) {
    if (r < 0)
      return r;
    snprintf(why, why_len, "device %d cannot map host memory read-only (a read-only open's "
             "control block)", s->device);
    return 1;
  }
  if ((r = enter_context((CUcontext)s->ctx, &prev)) < 0)
    return r;
  /* Portable: every context of the process reaches it, at the same address (unified
   * addressing), so one registration serves streams of every device. */
  cr = CU_CALL(&cl.drv, cuMemHostRegister, p, len,
               CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                 (read_only ? CU_MEMHOSTREGISTER_READ_ONLY : 0));
  if (cr == CUDA_SUCCESS &&
      (cr = CU_CALL(&cl.drv, cuMemHostGetDevicePointer, &d, p, 0)) != CUDA_SUCCESS)
    CU_CALL(&cl.drv, cuMemHostUnregister, p);
  leave_context((CUcontext)s->ctx, prev);
  if (cr != CUDA_SUCCESS) {
    const char *name = NULL;
    CU_CALL(&cl.drv, cuGetErrorName, cr, &name);
    snprintf(why, why_len, "the driver did not map the control block for device %d "
             "(cuMemHostRegister: %s)", s->device, name ? name : "unknown error");
    return 1;
  }
  *dptr = (uint64_t)d;
  return 0;
}

int client_cuda_host_unregister(void *p, int device)
{
  CUcontext prev;
  CUresult cr;
  int r;

  if ((r = enter_device(device, &prev)) < 0)
    return r;
  cr = CU_CALL(&cl.drv, cuMemHostUnregister, p);
  leave_device(device, prev);
  return cr == CUDA_SUCCESS ? 0 : cuda_error(cr, "cuMemHostUnregister");
}

int client_cuda_stream_any(void *stream, struct client_stream *out)
{
  int d;

  pthread_once(&load_once, load);
  if (cl.status)
    return client_error(cl.status, "unsupported: %s", cl.why);
  if (stream)
    return client_cuda_stream(stream, -1, out);
  if (cl.n_devices == 0)
    return client_error(GPUSHM_E_UNSUPPORTED, "no CUDA device in this process");
  d = client_cuda_current_device();
  return client_cuda_stream(NULL, d >= 0 ? d : 0, out);
}
