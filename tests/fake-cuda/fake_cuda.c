/* SPDX-License-Identifier: MIT */
/* A stand-in for libcuda.so.1 on machines without a GPU (CI), loaded through
 * GPUSHM_CUDA_LIBRARY.  It implements the entry points gpushm resolves, with
 * "device memory" that really is shared between processes: each allocation is a
 * memfd mapping, and an IPC handle names the exporter's pid and fd, which the
 * importer opens through /proc (same uid or root, as in CI).  Memory accounting is
 * per process, like cuMemGetInfo's view from the daemon.
 *
 * GPUSHM_FAKE_CUDA_DEVICES (default 1) and GPUSHM_FAKE_CUDA_MEMORY (bytes, default
 * 4 GiB) shape the fake devices, of which CUDA_VISIBLE_DEVICES (ordinals) shows some
 * in its order, as the real driver does; GPUSHM_FAKE_CUDA_REVERSE_ORDER=1 numbers them
 * backwards, as CUDA_VISIBLE_DEVICES=1,0 would (each UUID stays with its device);
 * GPUSHM_FAKE_CUDA_NO_VMM=1 takes away virtual memory
 * management, GPUSHM_FAKE_CUDA_MIG=1 makes them MIG instances,
 * GPUSHM_FAKE_CUDA_NO_P2P=1 takes away peer access between them.  Like the real
 * driver, it refuses IPC handles between sibling PID namespaces, records events only
 * on their own device's streams, kills a process whose stream waits on an IPC event
 * opened in another device's context (SIGSEGV, as the real one does), and lets stream work touch only memory its device
 * was granted (a fault there is CUDA_ERROR_ILLEGAL_ADDRESS from the call). */
#define _GNU_SOURCE
#include "cuda_api.h"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FAKE_API __attribute__((visibility("default")))
#define HANDLE_MAGIC 0x6b61666563756461ull

struct fake_alloc {
  struct fake_alloc *next;
  uintptr_t base;
  size_t size;
  int fd;        /* exporter's memfd; -1 for imports */
  int device;
};

struct fake_handle {
  uint64_t magic;
  int32_t pid;
  int32_t fd;
  uint64_t size;
  int32_t device;
  uint64_t pid_namespace; /* the exporter's */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_alloc *allocs;
static int initialized;
static size_t used[64];
static __thread CUcontext current;

static int installed_devices(void)
{
  const char *s = getenv("GPUSHM_FAKE_CUDA_DEVICES");
  int n = s ? atoi(s) : 1;
  return n < 0 ? 0 : n > 64 ? 64 : n;
}

/* CUDA_VISIBLE_DEVICES as the real driver reads it (ordinals only): the devices listed,
 * in that order, up to the first entry that names none. */
static int visible[64], n_visible = -1;

static void read_visible_devices(void)
{
  const char *list = getenv("CUDA_VISIBLE_DEVICES");
  int installed = installed_devices(), n = 0;

  if (!list) {
    while (n < installed)
      visible[n] = n, n++;
  }
  while (list && *list && n < 64) {
    char *end;
    long i = strtol(list, &end, 10);
    if (end == list || i < 0 || i >= installed || (*end && *end != ','))
      break;
    visible[n++] = (int)i;
    list = *end ? end + 1 : end;
  }
  __atomic_store_n(&n_visible, n, __ATOMIC_RELEASE); /* threads that race write the same */
}

static int device_count(void)
{
  int n = __atomic_load_n(&n_visible, __ATOMIC_ACQUIRE);
  if (n < 0) {
    read_visible_devices();
    n = n_visible;
  }
  return n;
}

/* The installed device behind this process's ordinal d: what its UUID and name follow. */
static int physical_device(int d)
{
  return d >= 0 && d < device_count() ? visible[d] : d;
}

static size_t device_memory(void)
{
  const char *s = getenv("GPUSHM_FAKE_CUDA_MEMORY");
  return s ? strtoull(s, NULL, 10) : (4ull << 30);
}

static uint64_t pid_namespace(void)
{
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static int current_device(void)
{
  return current ? (int)((uintptr_t)current - 0x1000) : -1;
}

/* GPUSHM_FAKE_CUDA_NO_P2P=1: no device can reach another's memory. */
static int peer_access(int dev, int peer)
{
  return dev == peer || !getenv("GPUSHM_FAKE_CUDA_NO_P2P");
}

/* Streams are numbers naming their device; NULL, CU_STREAM_LEGACY (1) and
 * CU_STREAM_PER_THREAD (2) are the current context's. */
#define STREAM_BASE 0x5000u
static int stream_device(CUstream s)
{
  return (uintptr_t)s > 2 ? (int)(((uintptr_t)s - STREAM_BASE) / 16) : current_device();
}

/* Which devices may touch a mapped range from their streams, as a real GPU's page
 * tables say: a device allocation its own device, an opened IPC handle the device it
 * was opened on, a VMM mapping those cuMemSetAccess named.  Stream work on a range a
 * device was not granted faults on a real GPU (CUDA_ERROR_ILLEGAL_ADDRESS, sticky);
 * here the call fails with that error instead.  Ranges not listed are not checked. */
struct fake_access {
  struct fake_access *next;
  uintptr_t base;
  size_t size;
  uint64_t devices; /* bit per device */
};
static struct fake_access *access_list;

static void access_set(uintptr_t base, size_t size, uint64_t devices)
{
  struct fake_access *a;

  pthread_mutex_lock(&lock);
  for (a = access_list; a; a = a->next)
    if (a->base == base)
      break;
  if (!a && (a = calloc(1, sizeof *a))) {
    a->next = access_list;
    access_list = a;
  }
  if (a) {
    a->base = base;
    a->size = size;
    a->devices = devices;
  }
  pthread_mutex_unlock(&lock);
}

static void access_drop(uintptr_t base)
{
  pthread_mutex_lock(&lock);
  for (struct fake_access **p = &access_list; *p; p = &(*p)->next) {
    if ((*p)->base == base) {
      struct fake_access *a = *p;
      *p = a->next;
      free(a);
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

static CUresult device_access(CUstream s, CUdeviceptr addr, size_t n)
{
  int dev = stream_device(s);
  CUresult r = CUDA_SUCCESS;

  if (dev < 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  for (struct fake_access *a = access_list; a; a = a->next)
    if (addr >= a->base && addr + n <= a->base + a->size) {
      if (!(a->devices & (1ull << dev)))
        r = CUDA_ERROR_ILLEGAL_ADDRESS;
      break;
    }
  pthread_mutex_unlock(&lock);
  return r;
}

/* GPUSHM_FAKE_CUDA_INIT_LOG names a file to which each cuInit appends "PID MPS-PIPE":
 * the MPS pipe directory the process would have joined a server through (the real
 * driver reads CUDA_MPS_PIPE_DIRECTORY at initialisation). */
static CUresult fake_cuInit(unsigned flags)
{
  const char *log = getenv("GPUSHM_FAKE_CUDA_INIT_LOG"), *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
  const char *delay = getenv("GPUSHM_FAKE_CUDA_INIT_DELAY_MS");
  FILE *f;

  (void)flags;
  /* A real cuInit takes 100-365 ms: what happens meanwhile (a stop, say) is tested so. */
  if (delay && atol(delay) > 0) {
    struct timespec ts = { atol(delay) / 1000, (atol(delay) % 1000) * 1000000L };
    nanosleep(&ts, NULL);
  }
  if (log && (f = fopen(log, "a"))) {
    fprintf(f, "%d %s\n", (int)getpid(), pipe ? pipe : "/tmp/nvidia-mps");
    fclose(f);
  }
  initialized = 1;
  return CUDA_SUCCESS;
}

static CUresult fake_cuDriverGetVersion(int *v)
{
  *v = 13000;
  return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceGetCount(int *n)
{
  if (!initialized)
    return CUDA_ERROR_NOT_INITIALIZED;
  *n = device_count();
  return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceGet(CUdevice *d, int ordinal)
{
  if (ordinal < 0 || ordinal >= device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

/* GPUSHM_FAKE_CUDA_MIG=1: the devices are MIG instances, named as the driver names
 * them ("<GPU> MIG <profile>"). */
static CUresult fake_cuDeviceGetName(char *name, int len, CUdevice d)
{
  const char *mig = getenv("GPUSHM_FAKE_CUDA_MIG");
  snprintf(name, (size_t)len, "gpushm fake GPU %d%s", physical_device(d),
           mig && *mig == '1' ? " MIG 1g.10gb" : "");
  return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceGetUuid(CUuuid *uuid, CUdevice d)
{
  const char *reverse = getenv("GPUSHM_FAKE_CUDA_REVERSE_ORDER");

  memset(uuid->bytes, 0xfa, sizeof uuid->bytes);
  d = physical_device(d);
  uuid->bytes[15] = (char)(reverse && *reverse == '1' ? installed_devices() - 1 - d : d);
  return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
  (void)d;
  *bytes = device_memory();
  return CUDA_SUCCESS;
}

/* Attributes gpushm asks about, as an H100 answers; GPUSHM_FAKE_CUDA_NO_VMM=1 makes
 * the device lack virtual memory management, GPUSHM_FAKE_CUDA_NO_MEMOPS stream memory
 * operations. */
static CUresult fake_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
  const char *no_vmm = getenv("GPUSHM_FAKE_CUDA_NO_VMM");

  (void)d;
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    *v = !(no_vmm && *no_vmm == '1');
    break;
  case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    *v = !getenv("GPUSHM_FAKE_CUDA_NO_MEMOPS");
    break;
  case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
    *v = !getenv("GPUSHM_FAKE_CUDA_NO_RO_REGISTER");
    break;
  case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
  case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
    *v = 1;
    break;
  /* As the lent H100s answer (measured), unless a test asks otherwise: fabric memory
   * then still needs an IMEX channel (GPUSHM_FAKE_CUDA_IMEX=1 plays one). */
  case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:
    *v = !getenv("GPUSHM_FAKE_CUDA_NO_DMABUF");
    break;
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
    *v = !getenv("GPUSHM_FAKE_CUDA_NO_FABRIC") && !(no_vmm && *no_vmm == '1');
    break;
  default:
    *v = 0;
  }
  return CUDA_SUCCESS;
}

static CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d)
{
  /* A real first retain takes 100-350 ms: tests that the daemon does not block on it
   * set GPUSHM_FAKE_CTX_DELAY_MS. */
  const char *delay = getenv("GPUSHM_FAKE_CTX_DELAY_MS");
  if (delay && *delay)
    usleep((useconds_t)atoi(delay) * 1000u);
  *ctx = (CUcontext)(uintptr_t)(0x1000 + d);
  return CUDA_SUCCESS;
}

static CUresult fake_cuDevicePrimaryCtxRelease(CUdevice d)
{
  (void)d;
  return CUDA_SUCCESS;
}

static CUresult fake_cuCtxSetCurrent(CUcontext ctx)
{
  current = ctx;
  return CUDA_SUCCESS;
}

static CUresult fake_cuCtxGetCurrent(CUcontext *ctx)
{
  *ctx = current;
  return CUDA_SUCCESS;
}

/* Semaphore signals and waits this process queued that no synchronisation has waited
 * for since: the driver leaves destroying a semaphore with either pending undefined, so
 * here it fails (streams run nothing here; any synchronisation counts as waiting for
 * them). */
static unsigned long fake_semaphore_ops_unwaited;

static CUresult fake_cuCtxSynchronize(void)
{
  if (!current)
    return CUDA_ERROR_INVALID_CONTEXT;
  __atomic_store_n(&fake_semaphore_ops_unwaited, 0, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemAlloc(CUdeviceptr *p, size_t size)
{
  int dev = current_device();
  struct fake_alloc *a;
  void *base;
  int fd;

  if (dev < 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  if (size > device_memory() - used[dev]) {
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  fd = memfd_create("fake-cuda", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)size) < 0 ||
      (base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED ||
      !(a = calloc(1, sizeof *a))) {
    if (fd >= 0)
      close(fd);
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  /* Device memory comes with whatever it held (see fake_cuMemCreate). */
  if (size >= 16) {
    memset(base, 0xa5, 8);
    memset((char *)base + size - 8, 0xa5, 8);
  }
  *a = (struct fake_alloc){ allocs, (uintptr_t)base, size, fd, dev };
  allocs = a;
  used[dev] += size;
  pthread_mutex_unlock(&lock);
  access_set((uintptr_t)base, size, 1ull << dev);
  *p = (CUdeviceptr)(uintptr_t)base;
  return CUDA_SUCCESS;
}

static struct fake_alloc **find(uintptr_t base, int imported)
{
  for (struct fake_alloc **a = &allocs; *a; a = &(*a)->next)
    if ((*a)->base == base && ((*a)->fd < 0) == imported)
      return a;
  return NULL;
}

static CUresult release(CUdeviceptr p, int imported)
{
  struct fake_alloc **slot, *a;

  pthread_mutex_lock(&lock);
  slot = find((uintptr_t)p, imported);
  if (!slot) {
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  a = *slot;
  *slot = a->next;
  if (!imported) {
    used[a->device] -= a->size;
    close(a->fd);
  }
  pthread_mutex_unlock(&lock);
  access_drop(a->base);
  munmap((void *)a->base, a->size);
  free(a);
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemFree(CUdeviceptr p)
{
  return release(p, 0);
}

static CUresult fake_cuMemGetInfo(size_t *free_bytes, size_t *total)
{
  int dev = current_device();
  if (dev < 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  *total = device_memory();
  *free_bytes = *total - used[dev];
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
  memcpy((void *)(uintptr_t)dst, src, n);
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemsetD32(CUdeviceptr dst, unsigned v, size_t n)
{
  unsigned *p = (unsigned *)(uintptr_t)dst;
  for (size_t i = 0; i < n; i++)
    p[i] = v;
  return CUDA_SUCCESS;
}

static CUresult fake_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
  struct fake_alloc **slot;
  struct fake_handle fh;

  pthread_mutex_lock(&lock);
  slot = find((uintptr_t)p, 0);
  if (!slot) {
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  memset(&fh, 0, sizeof fh); /* padding travels in the handle too */
  fh.magic = HANDLE_MAGIC;
  fh.pid = (int32_t)getpid();
  fh.fd = (*slot)->fd;
  fh.size = (*slot)->size;
  fh.device = (*slot)->device;
  fh.pid_namespace = pid_namespace();
  pthread_mutex_unlock(&lock);
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &fh, sizeof fh);
  return CUDA_SUCCESS;
}

static CUresult fake_cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned flags)
{
  struct fake_handle fh;
  struct fake_alloc *a;
  char path[64];
  void *base;
  int fd;

  memcpy(&fh, h.reserved, sizeof fh);
  if (fh.magic != HANDLE_MAGIC)
    return CUDA_ERROR_INVALID_HANDLE;
  if (fh.pid == getpid())
    return CUDA_ERROR_INVALID_CONTEXT; /* as the real driver: not in the exporter */
  /* As measured with the real driver: sibling PID namespaces (neither the host's) fail
   * with INVALID_CONTEXT.  Here the pid would also name another process. */
  if (fh.pid_namespace != pid_namespace() && fh.pid_namespace != 0xEFFFFFFCu &&
      pid_namespace() != 0xEFFFFFFCu)
    return CUDA_ERROR_INVALID_CONTEXT;
  /* In another device's context only with peer access, which the flag enables. */
  if (current_device() < 0 ||
      (current_device() != fh.device &&
       (!(flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) || !peer_access(current_device(), fh.device))))
    return CUDA_ERROR_INVALID_CONTEXT;
  snprintf(path, sizeof path, "/proc/%d/fd/%d", fh.pid, fh.fd);
  if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
    return CUDA_ERROR_INVALID_HANDLE;
  base = mmap(NULL, fh.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED || !(a = calloc(1, sizeof *a)))
    return CUDA_ERROR_MAP_FAILED;
  pthread_mutex_lock(&lock);
  *a = (struct fake_alloc){ allocs, (uintptr_t)base, fh.size, -1, fh.device };
  allocs = a;
  pthread_mutex_unlock(&lock);
  access_set((uintptr_t)base, fh.size, 1ull << current_device());
  *p = (CUdeviceptr)(uintptr_t)base;
  return CUDA_SUCCESS;
}

static CUresult fake_cuIpcCloseMemHandle(CUdeviceptr p)
{
  return release(p, 1);
}


/* Virtual memory management: an allocation is a memfd, its shareable handle a dup of
 * that memfd (so, as with the real driver, only a process that was sent the fd can
 * import it), a reservation an inaccessible anonymous mapping, a map the memfd mapped
 * over it, and access an mprotect. */
#define FAKE_GRANULE (2u << 20)

struct fake_vmm {
  struct fake_vmm *next; /* on the vmms list: reachable, as the driver's own would be */
  uint64_t magic;
  int fd;
  size_t size;
  int device;
  int imported;
  CUdeviceptr mapped_at; /* 0: not mapped */
  int fabric; /* made with CU_MEM_HANDLE_TYPE_FABRIC */
};
#define VMM_MAGIC 0x766d6d68616e646cull
#define FABRIC_MAGIC 0x666162726963686eull
static struct fake_vmm *vmms;

static void vmm_link(struct fake_vmm *m)
{
  pthread_mutex_lock(&lock);
  m->next = vmms;
  vmms = m;
  pthread_mutex_unlock(&lock);
}

static void vmm_unlink(struct fake_vmm *m)
{
  pthread_mutex_lock(&lock);
  for (struct fake_vmm **p = &vmms; *p; p = &(*p)->next) {
    if (*p == m) {
      *p = m->next;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

static struct fake_vmm *vmm_of(CUmemGenericAllocationHandle h)
{
  struct fake_vmm *m = (struct fake_vmm *)(uintptr_t)h;
  return m && m->magic == VMM_MAGIC ? m : NULL;
}

static CUresult fake_cuMemGetAllocationGranularity(size_t *granularity,
                                                   const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option)
{
  (void)option;
  if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      prop->location.id < 0 || prop->location.id >= device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  *granularity = FAKE_GRANULE;
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
  struct fake_vmm *m;
  int dev = prop ? prop->location.id : -1;
  char name[32];
  int fd;

  if (!initialized || flags || !prop || dev < 0 || dev >= device_count())
    return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || size % FAKE_GRANULE)
    return CUDA_ERROR_INVALID_VALUE;
  /* What the driver answers without an IMEX channel (measured: driver 580, H100). */
  if ((prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) && !getenv("GPUSHM_FAKE_CUDA_IMEX"))
    return CUDA_ERROR_NOT_PERMITTED;
  pthread_mutex_lock(&lock);
  if (size > device_memory() - used[dev]) {
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  /* The name carries the device, so an importer knows where the memory lives. */
  snprintf(name, sizeof name, "fake-cuda-vmm-%d", dev);
  fd = memfd_create(name, MFD_CLOEXEC);
  /* Device memory comes with whatever it held (another buffer's data, within a
   * context): garbage in the first and last bytes shows whoever relies on zeroes. */
  if (fd < 0 || ftruncate(fd, (off_t)size) < 0 ||
      pwrite(fd, "\xa5\xa5\xa5\xa5\xa5\xa5\xa5\xa5", 8, 0) != 8 ||
      pwrite(fd, "\xa5\xa5\xa5\xa5\xa5\xa5\xa5\xa5", 8, (off_t)size - 8) != 8 ||
      !(m = calloc(1, sizeof *m))) {
    if (fd >= 0)
      close(fd);
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  used[dev] += size;
  pthread_mutex_unlock(&lock);
  *m = (struct fake_vmm){ NULL, VMM_MAGIC, fd, size, dev, 0, 0,
                          (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) != 0 };
  vmm_link(m);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)m;
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemRelease(CUmemGenericAllocationHandle handle)
{
  struct fake_vmm *m = vmm_of(handle);

  if (!m)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  if (!m->imported)
    used[m->device] -= m->size;
  pthread_mutex_unlock(&lock);
  vmm_unlink(m);
  close(m->fd);
  m->magic = 0;
  free(m);
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType type,
                                                  unsigned long long flags)
{
  struct fake_vmm *m = vmm_of(handle);
  int fd;

  if (m && !flags && type == CU_MEM_HANDLE_TYPE_FABRIC) {
    /* A fabric handle names the exporter's memfd, as the IPC handles here do: any
     * process with an IMEX channel (GPUSHM_FAKE_CUDA_IMEX) opens it from /proc. */
    struct fake_handle fh;
    if (!m->fabric)
      return CUDA_ERROR_INVALID_VALUE;
    memset(&fh, 0, sizeof fh);
    fh.magic = FABRIC_MAGIC;
    fh.pid = (int32_t)getpid();
    fh.fd = m->fd;
    fh.size = m->size;
    fh.device = m->device;
    memset(shareable, 0, sizeof(CUmemFabricHandle));
    memcpy(((CUmemFabricHandle *)shareable)->data, &fh, sizeof fh);
    return CUDA_SUCCESS;
  }
  if (!m || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_INVALID_VALUE;
  if ((fd = fcntl(m->fd, F_DUPFD, 0)) < 0) /* no close-on-exec, like the driver's */
    return CUDA_ERROR_OUT_OF_MEMORY;
  *(int *)shareable = fd;
  return CUDA_SUCCESS;
}

/* The device an exported allocation lives on, from its memfd's name (0 if unsure). */
static int memfd_device(int fd)
{
  char path[64], target[128];
  ssize_t n;
  int dev = 0;

  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if ((n = readlink(path, target, sizeof target - 1)) > 0) {
    target[n] = '\0';
    if (sscanf(target, "/memfd:fake-cuda-vmm-%d", &dev) != 1)
      dev = 0;
  }
  return dev;
}

static CUresult fake_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                    void *os_handle,
                                                    CUmemAllocationHandleType type)
{
  int fd = (int)(intptr_t)os_handle, dup_fd, opened = -1;
  struct fake_vmm *m;
  off_t size;

  if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
    struct fake_handle fh;
    char path[64];
    if (!getenv("GPUSHM_FAKE_CUDA_IMEX"))
      return CUDA_ERROR_NOT_PERMITTED;
    memcpy(&fh, ((const CUmemFabricHandle *)os_handle)->data, sizeof fh);
    if (fh.magic != FABRIC_MAGIC)
      return CUDA_ERROR_INVALID_HANDLE;
    snprintf(path, sizeof path, "/proc/%d/fd/%d", fh.pid, fh.fd);
    if ((opened = open(path, O_RDWR | O_CLOEXEC)) < 0)
      return CUDA_ERROR_INVALID_HANDLE;
    fd = opened;
    type = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  }
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0)
    return CUDA_ERROR_INVALID_VALUE;
  if ((size = lseek(fd, 0, SEEK_END)) <= 0) {
    if (opened >= 0)
      close(opened);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if ((dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0 || !(m = calloc(1, sizeof *m))) {
    if (dup_fd >= 0)
      close(dup_fd);
    if (opened >= 0)
      close(opened);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *m = (struct fake_vmm){ NULL, VMM_MAGIC, dup_fd, (size_t)size, memfd_device(fd), 1, 0, 0 };
  if (opened >= 0)
    close(opened);
  vmm_link(m);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)m;
  return CUDA_SUCCESS;
}

/* A dma-buf of a range: of a cuMemAlloc allocation or of a mapped VMM range, as the
 * driver gives (measured: page-aligned, inside one allocation; memory opened through
 * legacy IPC is refused with INVALID_VALUE).  Here a memfd of the range's size. */
static CUresult fake_cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
                                                   CUmemRangeHandleType type,
                                                   unsigned long long flags)
{
  uintptr_t p = (uintptr_t)dptr;
  int found = 0, fd;

  if (type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)
    return CUDA_ERROR_INVALID_VALUE;
  if (flags)
    return CUDA_ERROR_NOT_SUPPORTED; /* no PCIe BAR1 mapping here, as on the lent host */
  if (!size || p % 4096 || size % 4096)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  for (struct fake_alloc *a = allocs; a && !found; a = a->next)
    if (p >= a->base && p - a->base < a->size)
      found = a->fd >= 0 && size <= a->size - (p - a->base) ? 1 : -1;
  for (struct fake_vmm *v = vmms; v && !found; v = v->next)
    if (v->mapped_at && p >= v->mapped_at && p - v->mapped_at < v->size)
      found = size <= v->size - (p - v->mapped_at) ? 1 : -1;
  pthread_mutex_unlock(&lock);
  if (found != 1)
    return CUDA_ERROR_INVALID_VALUE;
  if ((fd = memfd_create("fake-dmabuf", MFD_CLOEXEC)) < 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, (off_t)size) < 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *(int *)handle = fd;
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                         CUdeviceptr addr, unsigned long long flags)
{
  void *p;

  (void)alignment, (void)addr;
  if (!size || size % FAKE_GRANULE || flags)
    return CUDA_ERROR_INVALID_VALUE;
  p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
  return munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags)
{
  struct fake_vmm *m = vmm_of(handle);

  if (offset)
    return CUDA_ERROR_NOT_SUPPORTED; /* as the real driver: mappings start at offset 0 */
  if (!m || flags || size > m->size)
    return CUDA_ERROR_INVALID_VALUE;
  if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, m->fd,
           (off_t)offset) == MAP_FAILED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  m->mapped_at = ptr;
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
  access_drop((uintptr_t)ptr);
  pthread_mutex_lock(&lock);
  for (struct fake_vmm *v = vmms; v; v = v->next)
    if (v->mapped_at == ptr)
      v->mapped_at = 0;
  pthread_mutex_unlock(&lock);
  /* Back to a bare reservation. */
  if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

static CUresult fake_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                    size_t count)
{
  int prot = PROT_NONE;
  uint64_t devices = 0;
  struct fake_vmm *m = NULL;

  /* The allocation mapped there decides which devices can be peers of its own. */
  pthread_mutex_lock(&lock);
  for (struct fake_vmm *v = vmms; v; v = v->next)
    if (v->mapped_at == ptr)
      m = v;
  pthread_mutex_unlock(&lock);
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
        desc[i].location.id >= device_count())
      return CUDA_ERROR_INVALID_DEVICE;
    if (m && !peer_access(desc[i].location.id, m->device))
      return CUDA_ERROR_INVALID_DEVICE;
    devices |= 1ull << desc[i].location.id;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      prot = PROT_READ | PROT_WRITE;
    else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
      prot = PROT_READ;
  }
  if (mprotect((void *)(uintptr_t)ptr, size, prot) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  access_set((uintptr_t)ptr, size, devices);
  return CUDA_SUCCESS;
}

/* Events: this driver runs no device work, so every event is always complete; IPC
 * handles only need to round-trip. */
struct fake_event {
  uint64_t magic;
  int device;
  bool opened_from_ipc; /* cuIpcOpenEventHandle's, in the context current then */
};
#define EVENT_MAGIC 0x6576656e74ull

static CUresult fake_cuEventCreate(CUevent *ev, unsigned flags)
{
  struct fake_event *e;
  if (!current)
    return CUDA_ERROR_INVALID_CONTEXT;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_VALUE; /* as the real driver */
  if (!(e = calloc(1, sizeof *e)))
    return CUDA_ERROR_OUT_OF_MEMORY;
  e->magic = EVENT_MAGIC;
  e->device = current_device();
  *ev = (CUevent)e;
  return CUDA_SUCCESS;
}

static CUresult fake_cuEventDestroy(CUevent ev)
{
  free(ev);
  return CUDA_SUCCESS;
}

/* As the real driver: an event is recorded only on a stream of its own device (a
 * stream may wait for any device's event). */
static CUresult fake_cuEventRecord(CUevent ev, CUstream s)
{
  if (!ev)
    return CUDA_ERROR_INVALID_HANDLE;
  return ((struct fake_event *)ev)->device == stream_device(s) ? CUDA_SUCCESS
                                                               : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuEventQuery(CUevent ev)
{
  return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuEventSynchronize(CUevent ev)
{
  return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* As the real driver (580, two H100s): a stream of one device waiting on an IPC event
 * opened in another device's context kills the process with SIGSEGV inside the driver
 * (a plain event of another device is waited on fine, and so is the same handle opened
 * again in the stream's device's context). */
static CUresult fake_cuStreamWaitEvent(CUstream s, CUevent ev, unsigned flags)
{
  const struct fake_event *e = (const struct fake_event *)ev;
  (void)flags;
  if (!e)
    return CUDA_ERROR_INVALID_HANDLE;
  if (e->opened_from_ipc && e->device != stream_device(s)) {
    fprintf(stderr, "fake cuda: cuStreamWaitEvent: a stream of device %d waits on an IPC event "
            "opened in device %d's context: the real driver segfaults here\n", stream_device(s),
            e->device);
    raise(SIGSEGV);
  }
  return CUDA_SUCCESS;
}

static CUresult fake_cuIpcGetEventHandle(CUipcEventHandle *h, CUevent ev)
{
  uint64_t magic = EVENT_MAGIC;
  int32_t pid = (int32_t)getpid();
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &magic, sizeof magic);
  memcpy(h->reserved + 8, &pid, sizeof pid);
  return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuIpcOpenEventHandle(CUevent *ev, CUipcEventHandle h)
{
  uint64_t magic;
  memcpy(&magic, h.reserved, sizeof magic);
  if (magic != EVENT_MAGIC)
    return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = fake_cuEventCreate(ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS)
    ((struct fake_event *)*ev)->opened_from_ipc = true;
  return r;
}

static CUresult fake_cuStreamCreate(CUstream *s, unsigned flags)
{
  (void)flags;
  if (current_device() < 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  *s = (CUstream)(uintptr_t)(STREAM_BASE + 16u * (unsigned)current_device());
  return CUDA_SUCCESS;
}

static CUresult fake_cuStreamGetCtx(CUstream s, CUcontext *ctx)
{
  int dev = stream_device(s);
  if (dev < 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = (CUcontext)(uintptr_t)(0x1000 + dev);
  return CUDA_SUCCESS;
}

static CUresult fake_cuCtxGetDevice(CUdevice *d)
{
  if (current_device() < 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  *d = current_device();
  return CUDA_SUCCESS;
}

/* One level of context stack is all gpushm uses. */
static __thread CUcontext pushed;

static CUresult fake_cuCtxPushCurrent(CUcontext ctx)
{
  pushed = current;
  current = ctx;
  return CUDA_SUCCESS;
}

static CUresult fake_cuCtxPopCurrent(CUcontext *ctx)
{
  if (ctx)
    *ctx = current;
  current = pushed;
  pushed = NULL;
  return CUDA_SUCCESS;
}

static CUresult fake_cuCtxEnablePeerAccess(CUcontext peer, unsigned flags)
{
  int peer_device = (int)((uintptr_t)peer - 0x1000);
  if (!current || flags || peer_device < 0 || peer_device >= device_count())
    return CUDA_ERROR_INVALID_VALUE;
  return peer_access(current_device(), peer_device) ? CUDA_SUCCESS
                                                    : CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
}

static CUresult fake_cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
  if (dev < 0 || dev >= device_count() || peer < 0 || peer >= device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  *can = dev != peer && peer_access(dev, peer);
  return CUDA_SUCCESS;
}

static CUresult fake_cuStreamDestroy(CUstream s)
{
  (void)s;
  return CUDA_SUCCESS;
}

static CUresult fake_cuStreamSynchronize(CUstream s)
{
  (void)s;
  __atomic_store_n(&fake_semaphore_ops_unwaited, 0, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}

/* Stream memory operations (on fake device memory, which is host memory here).
 * Streams run nothing here, so a write lands at once — or, with GPUSHM_FAKE_CUDA_WRITE_DELAY_MS, that much later
 * (-1: never), as a write behind slow work would; a wait is satisfied at once or the
 * caller broke the ordering (a real stream would hang): that is an error here. */
/* Read by tests through gpushm_fake_cuda_waits_queued() (dlsym). */
static unsigned long fake_waits_queued;
FAKE_API unsigned long gpushm_fake_cuda_waits_queued(void);

FAKE_API unsigned long gpushm_fake_cuda_waits_queued(void)
{
  return __atomic_load_n(&fake_waits_queued, __ATOMIC_RELAXED);
}

/* Registered host memory (cuMemHostRegister), as the real driver keeps it: one
 * registration per range, a read-only mapping only with CU_MEMHOSTREGISTER_READ_ONLY
 * (the driver pins pages writable otherwise, and fails), device pointers only with
 * DEVICEMAP, at the host address (unified addressing).  Tests count the live ones
 * (gpushm_fake_cuda_host_registered(), dlsym): a close must leave none behind. */
struct fake_host_reg {
  struct fake_host_reg *next;
  uintptr_t base;
  size_t size;
  unsigned flags;
};
static struct fake_host_reg *host_regs;
FAKE_API unsigned long gpushm_fake_cuda_host_registered(void);

FAKE_API unsigned long gpushm_fake_cuda_host_registered(void)
{
  unsigned long n = 0;

  pthread_mutex_lock(&lock);
  for (struct fake_host_reg *r = host_regs; r; r = r->next)
    n++;
  pthread_mutex_unlock(&lock);
  return n;
}

/* Whether [p, p + n) is mapped writable in this process (/proc/self/maps). */
static bool host_range_writable(uintptr_t p, size_t n)
{
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[512], perms[8];
  bool writable = false;

  if (!maps)
    return false;
  while (fgets(line, sizeof line, maps)) {
    unsigned long long start, end;
    if (sscanf(line, "%llx-%llx %7s", &start, &end, perms) == 3 && p >= start && p + n <= end) {
      writable = perms[1] == 'w';
      break;
    }
  }
  fclose(maps);
  return writable;
}

static CUresult fake_cuMemHostRegister(void *p, size_t n, unsigned flags)
{
  struct fake_host_reg *r;
  CUresult res = CUDA_SUCCESS;

  if (!p || !n || (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                      CU_MEMHOSTREGISTER_READ_ONLY)))
    return CUDA_ERROR_INVALID_VALUE;
  if (current_device() < 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (!(flags & CU_MEMHOSTREGISTER_READ_ONLY) && !host_range_writable((uintptr_t)p, n))
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  for (r = host_regs; r; r = r->next)
    if ((uintptr_t)p < r->base + r->size && r->base < (uintptr_t)p + n)
      res = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (res == CUDA_SUCCESS && !(r = malloc(sizeof *r)))
    res = CUDA_ERROR_OUT_OF_MEMORY;
  if (res == CUDA_SUCCESS) {
    *r = (struct fake_host_reg){ host_regs, (uintptr_t)p, n, flags };
    host_regs = r;
  }
  pthread_mutex_unlock(&lock);
  return res;
}

static CUresult fake_cuMemHostUnregister(void *p)
{
  CUresult res = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;

  pthread_mutex_lock(&lock);
  for (struct fake_host_reg **r = &host_regs; *r; r = &(*r)->next)
    if ((*r)->base == (uintptr_t)p) {
      struct fake_host_reg *gone = *r;
      *r = gone->next;
      free(gone);
      res = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&lock);
  return res;
}

static CUresult fake_cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned flags)
{
  CUresult res = CUDA_ERROR_INVALID_VALUE;

  if (flags)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  for (struct fake_host_reg *r = host_regs; r; r = r->next)
    if ((uintptr_t)p >= r->base && (uintptr_t)p < r->base + r->size &&
        (r->flags & CU_MEMHOSTREGISTER_DEVICEMAP)) {
      *d = (CUdeviceptr)(uintptr_t)p;
      res = CUDA_SUCCESS;
    }
  pthread_mutex_unlock(&lock);
  return res;
}

struct delayed_write {
  uint64_t *addr, value;
  long delay_ms;
};

static void *write_later(void *arg)
{
  struct delayed_write *w = arg;
  struct timespec ts = { w->delay_ms / 1000, (w->delay_ms % 1000) * 1000000L };
  nanosleep(&ts, NULL);
  __atomic_store_n(w->addr, w->value, __ATOMIC_RELEASE);
  free(w);
  return NULL;
}

static CUresult fake_cuStreamWriteValue64(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                          unsigned flags)
{
  const char *delay = getenv("GPUSHM_FAKE_CUDA_WRITE_DELAY_MS");
  uint64_t *p = (uint64_t *)(uintptr_t)addr;
  struct delayed_write *w;
  pthread_t thread;

  if (!p || ((uintptr_t)p & 7) || flags)
    return CUDA_ERROR_INVALID_VALUE;
  if (device_access(s, addr, 8) != CUDA_SUCCESS)
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (!delay) {
    __atomic_store_n(p, value, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
  }
  if (atol(delay) < 0)
    return CUDA_SUCCESS;
  if (!(w = malloc(sizeof *w)))
    return CUDA_ERROR_OUT_OF_MEMORY;
  *w = (struct delayed_write){ p, value, atol(delay) };
  if (pthread_create(&thread, NULL, write_later, w) != 0) {
    free(w);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_detach(thread);
  return CUDA_SUCCESS;
}

static CUresult fake_cuStreamWaitValue64(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                         unsigned flags)
{
  uint64_t *p = (uint64_t *)(uintptr_t)addr;

  if (!p || ((uintptr_t)p & 7) || flags != CU_STREAM_WAIT_VALUE_GEQ)
    return CUDA_ERROR_INVALID_VALUE;
  if (device_access(s, addr, 8) != CUDA_SUCCESS)
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  if ((int64_t)(__atomic_load_n(p, __ATOMIC_ACQUIRE) - value) >= 0)
    return CUDA_SUCCESS;
  /* A wait that a real stream would queue, for a caller that means it to (a value
   * promised, not yet released): accepted, and the waits so queued counted. */
  if (getenv("GPUSHM_FAKE_CUDA_QUEUE_WAITS")) {
    __atomic_add_fetch(&fake_waits_queued, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_READY;
}

static CUresult fake_cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s)
{
  CUresult r = device_access(s, dst, n * 4);
  if (r != CUDA_SUCCESS)
    return r;
  return fake_cuMemsetD32(dst, v, n);
}

static CUresult fake_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
  (void)s;
  return fake_cuMemcpyDtoH(dst, src, n);
}

static CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
  (void)s;
  return fake_cuMemcpyHtoD(dst, src, n);
}

static CUresult fake_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
  CUresult r;
  if ((r = device_access(s, dst, n)) != CUDA_SUCCESS || (r = device_access(s, src, n)) != CUDA_SUCCESS)
    return r;
  return fake_cuMemcpyDtoD(dst, src, n);
}

/* Unified addressing: either side host memory or a device mapping (checked as the
 * real driver faults on it: a mapping the stream's device may not reach). */
static CUresult fake_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
  return fake_cuMemcpyDtoDAsync(dst, src, n, s);
}

/* External semaphores: a fake Vulkan timeline semaphore is a memfd of one page that
 * begins with struct fake_semaphore (tests/integration/test-semaphores makes them, as a
 * Vulkan driver would mint them); an import maps it, and the fd, which CUDA owns once
 * imported, is closed.  A signal stores the value (it takes the value signalled, not
 * the highest: the NVIDIA driver's behaviour, measured); a wait polls for >=. */
#define FAKE_SEMAPHORE_MAGIC 0x726f6870616d6573ull
struct fake_semaphore {
  uint64_t magic;
  uint64_t value;  /* __atomic builtins */
  int32_t device;  /* physical */
};

static CUresult fake_cuImportExternalSemaphore(CUexternalSemaphore *out,
                                               const CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC *desc)
{
  struct fake_semaphore *sem;
  struct stat st;

  if (!out || !desc || desc->type != CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD)
    return CUDA_ERROR_INVALID_VALUE;
  if (!current)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (fstat(desc->handle.fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != 4096)
    return CUDA_ERROR_INVALID_HANDLE;
  sem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, desc->handle.fd, 0);
  if (sem == MAP_FAILED)
    return CUDA_ERROR_INVALID_HANDLE;
  if (sem->magic != FAKE_SEMAPHORE_MAGIC || sem->device != physical_device(current_device())) {
    munmap(sem, 4096);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  close(desc->handle.fd);
  *out = (CUexternalSemaphore)sem;
  return CUDA_SUCCESS;
}

static CUresult fake_cuSignalExternalSemaphoresAsync(const CUexternalSemaphore *sems,
                                                     const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *p,
                                                     unsigned n, CUstream s)
{
  (void)s;
  for (unsigned i = 0; i < n; i++)
    __atomic_store_n(&((struct fake_semaphore *)sems[i])->value, p[i].params.fence.value,
                     __ATOMIC_RELEASE);
  __atomic_add_fetch(&fake_semaphore_ops_unwaited, n, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}

static CUresult fake_cuWaitExternalSemaphoresAsync(const CUexternalSemaphore *sems,
                                                   const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS *p,
                                                   unsigned n, CUstream s)
{
  (void)s;
  for (unsigned i = 0; i < n; i++)
    if (__atomic_load_n(&((struct fake_semaphore *)sems[i])->value, __ATOMIC_ACQUIRE) <
        p[i].params.fence.value)
      return CUDA_ERROR_NOT_READY;
  __atomic_add_fetch(&fake_semaphore_ops_unwaited, n, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}

static CUresult fake_cuDestroyExternalSemaphore(CUexternalSemaphore sem)
{
  if (__atomic_load_n(&fake_semaphore_ops_unwaited, __ATOMIC_RELAXED)) {
    fprintf(stderr, "fake CUDA: cuDestroyExternalSemaphore with a signal or wait not waited for\n");
    return CUDA_ERROR_NOT_PERMITTED;
  }
  return sem && munmap(sem, 4096) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* No device code runs here: tests that launch kernels need a real GPU. */
static CUresult fake_cuModuleLoadData(CUmodule *m, const void *image)
{
  (void)m;
  (void)image;
  return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult fake_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
  (void)f;
  (void)m;
  (void)name;
  return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult fake_cuModuleUnload(CUmodule m)
{
  (void)m;
  return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult fake_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                    CUstream s, void **params, void **extra)
{
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem;
  (void)s; (void)params; (void)extra;
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* External memory: what a Vulkan process exports, a memfd here (as Mesa's lavapipe
 * makes it).  The import owns the fd; a mapped buffer is an allocation of the device
 * (cuMemFree takes it back); a mipmapped array holds its levels one after another. */
struct fake_ext {
  int fd;
  uint64_t size;
  int device;
};

struct fake_array {
  CUDA_ARRAY3D_DESCRIPTOR desc;
  void *data;
};

struct fake_mipmap {
  void *base;
  size_t len;
  unsigned levels;
  struct fake_array level[16];
};

/* A read-only open of a registered memfd arrives O_RDONLY: the stand-in for a device
 * maps it as it may (real CUDA imports no memfd at all). */
static int fake_ext_prot(int fd)
{
  int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & O_ACCMODE) == O_RDONLY ? PROT_READ : PROT_READ | PROT_WRITE;
}

static CUresult fake_cuImportExternalMemory(CUexternalMemory *out,
                                            const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *desc)
{
  struct fake_ext *x;
  off_t size;
  int dev = current_device();

  if (dev < 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (desc->type != CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD || desc->handle.fd < 0 ||
      (desc->flags & ~(unsigned)CUDA_EXTERNAL_MEMORY_DEDICATED) || !desc->size)
    return CUDA_ERROR_INVALID_VALUE;
  /* what is not memory, or holds less than claimed, is refused as the driver does */
  if ((size = lseek(desc->handle.fd, 0, SEEK_END)) <= 0 || (uint64_t)size < desc->size)
    return CUDA_ERROR_INVALID_VALUE;
  if (!(x = calloc(1, sizeof *x)))
    return CUDA_ERROR_OUT_OF_MEMORY;
  *x = (struct fake_ext){ desc->handle.fd, desc->size, dev };
  *out = (CUexternalMemory)x;
  return CUDA_SUCCESS;
}

static CUresult fake_cuExternalMemoryGetMappedBuffer(CUdeviceptr *p, CUexternalMemory ext,
                                                     const CUDA_EXTERNAL_MEMORY_BUFFER_DESC *d)
{
  struct fake_ext *x = (struct fake_ext *)ext;
  struct fake_alloc *a;
  void *base;
  int fd;

  if (!x || d->offset || !d->size || d->size > x->size || d->flags)
    return CUDA_ERROR_INVALID_VALUE;
  if ((fd = fcntl(x->fd, F_DUPFD_CLOEXEC, 0)) < 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  base = mmap(NULL, d->size, fake_ext_prot(fd), MAP_SHARED, fd, 0);
  if (base == MAP_FAILED || !(a = calloc(1, sizeof *a))) {
    if (base != MAP_FAILED)
      munmap(base, d->size);
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&lock);
  *a = (struct fake_alloc){ allocs, (uintptr_t)base, d->size, fd, x->device };
  allocs = a;
  used[x->device] += d->size;
  pthread_mutex_unlock(&lock);
  access_set((uintptr_t)base, d->size, 1ull << x->device);
  *p = (CUdeviceptr)(uintptr_t)base;
  return CUDA_SUCCESS;
}

static size_t fake_element_bytes(CUarray_format f, unsigned channels)
{
  size_t e = f == CU_AD_FORMAT_UNSIGNED_INT8 ? 1
             : f == CU_AD_FORMAT_UNSIGNED_INT16 || f == CU_AD_FORMAT_HALF ? 2
             : f == CU_AD_FORMAT_UNSIGNED_INT32 || f == CU_AD_FORMAT_FLOAT ? 4 : 0;
  return channels == 1 || channels == 2 || channels == 4 ? e * channels : 0;
}

static CUresult fake_cuExternalMemoryGetMappedMipmappedArray(
  CUmipmappedArray *out, CUexternalMemory ext, const CUDA_EXTERNAL_MEMORY_MIPMAPPED_ARRAY_DESC *d)
{
  struct fake_ext *x = (struct fake_ext *)ext;
  const CUDA_ARRAY3D_DESCRIPTOR *a = &d->arrayDesc;
  size_t texel = fake_element_bytes(a->Format, a->NumChannels), need = 0;
  size_t w = a->Width, h = a->Height ? a->Height : 1, depth = a->Depth ? a->Depth : 1;
  struct fake_mipmap *m;

  if (!x || !texel || !a->Width || !d->numLevels || d->numLevels > 16 || d->offset)
    return CUDA_ERROR_INVALID_VALUE;
  for (unsigned l = 0; l < d->numLevels; l++) {
    size_t lw = w >> l ? w >> l : 1, lh = h >> l ? h >> l : 1;
    size_t ld = (a->Flags & CUDA_ARRAY3D_LAYERED) ? depth : depth >> l ? depth >> l : 1;
    need += lw * lh * ld * texel;
  }
  if (need > x->size || !(m = calloc(1, sizeof *m)))
    return need > x->size ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
  m->len = x->size;
  m->base = mmap(NULL, m->len, fake_ext_prot(x->fd), MAP_SHARED, x->fd, 0);
  if (m->base == MAP_FAILED) {
    free(m);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  m->levels = d->numLevels;
  for (unsigned l = 0, at = 0; l < d->numLevels; l++) {
    CUDA_ARRAY3D_DESCRIPTOR ld = *a;
    ld.Width = w >> l ? w >> l : 1;
    ld.Height = a->Height ? (h >> l ? h >> l : 1) : 0;
    if (a->Depth && !(a->Flags & CUDA_ARRAY3D_LAYERED))
      ld.Depth = depth >> l ? depth >> l : 1;
    m->level[l] = (struct fake_array){ ld, (char *)m->base + at };
    at += (unsigned)(ld.Width * (ld.Height ? ld.Height : 1) * (ld.Depth ? ld.Depth : 1) * texel);
  }
  *out = (CUmipmappedArray)m;
  return CUDA_SUCCESS;
}

static CUresult fake_cuMipmappedArrayGetLevel(CUarray *out, CUmipmappedArray mipmap,
                                              unsigned int level)
{
  struct fake_mipmap *m = (struct fake_mipmap *)mipmap;

  if (!m || level >= m->levels)
    return CUDA_ERROR_INVALID_VALUE;
  *out = (CUarray)&m->level[level];
  return CUDA_SUCCESS;
}

static CUresult fake_cuMipmappedArrayDestroy(CUmipmappedArray mipmap)
{
  struct fake_mipmap *m = (struct fake_mipmap *)mipmap;

  if (!m)
    return CUDA_ERROR_INVALID_VALUE;
  munmap(m->base, m->len);
  free(m);
  return CUDA_SUCCESS;
}

static CUresult fake_cuDestroyExternalMemory(CUexternalMemory ext)
{
  struct fake_ext *x = (struct fake_ext *)ext;

  if (!x)
    return CUDA_ERROR_INVALID_VALUE;
  close(x->fd);
  free(x);
  return CUDA_SUCCESS;
}

static CUresult fake_cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR *desc, CUarray array)
{
  if (!array)
    return CUDA_ERROR_INVALID_VALUE;
  *desc = ((struct fake_array *)array)->desc;
  return CUDA_SUCCESS;
}

/* Surface objects serve kernels, which the fake does not run: made and destroyed only. */
static CUresult fake_cuSurfObjectCreate(CUsurfObject *surf, const CUDA_RESOURCE_DESC *desc)
{
  if (!surf || !desc || desc->resType != CU_RESOURCE_TYPE_ARRAY || !desc->res.array.hArray)
    return CUDA_ERROR_INVALID_VALUE;
  *surf = (CUsurfObject)(uintptr_t)desc->res.array.hArray;
  return CUDA_SUCCESS;
}

static CUresult fake_cuSurfObjectDestroy(CUsurfObject surf)
{
  return surf ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuGetErrorName(CUresult r, const char **s)
{
  switch (r) {
  case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
  case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
  case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
  case CUDA_ERROR_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
  case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
  case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
  case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
  case CUDA_ERROR_NOT_READY: *s = "CUDA_ERROR_NOT_READY"; break;
  default: *s = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

static CUresult fake_cuGetErrorString(CUresult r, const char **s)
{
  *s = r == CUDA_SUCCESS ? "no error" : "fake driver error";
  return CUDA_SUCCESS;
}

static const struct {
  const char *name;
  void *fn;
} table[] = {
#define FAKE_ENTRY(name) { #name, (void *)fake_##name }
  FAKE_ENTRY(cuInit), FAKE_ENTRY(cuDriverGetVersion), FAKE_ENTRY(cuDeviceGetCount),
  FAKE_ENTRY(cuDeviceGet), FAKE_ENTRY(cuDeviceGetName), FAKE_ENTRY(cuDeviceGetUuid),
  FAKE_ENTRY(cuDeviceTotalMem), FAKE_ENTRY(cuDeviceGetAttribute),
  FAKE_ENTRY(cuDevicePrimaryCtxRetain), FAKE_ENTRY(cuDevicePrimaryCtxRelease),
  FAKE_ENTRY(cuCtxSetCurrent), FAKE_ENTRY(cuCtxGetCurrent), FAKE_ENTRY(cuCtxSynchronize),
  FAKE_ENTRY(cuMemAlloc), FAKE_ENTRY(cuMemFree), FAKE_ENTRY(cuMemGetInfo),
  FAKE_ENTRY(cuMemcpyDtoH), FAKE_ENTRY(cuMemcpyHtoD), FAKE_ENTRY(cuMemcpyDtoD),
  FAKE_ENTRY(cuMemsetD32), FAKE_ENTRY(cuIpcGetMemHandle), FAKE_ENTRY(cuIpcOpenMemHandle),
  FAKE_ENTRY(cuIpcCloseMemHandle), FAKE_ENTRY(cuGetErrorName), FAKE_ENTRY(cuGetErrorString),
  FAKE_ENTRY(cuEventCreate), FAKE_ENTRY(cuEventDestroy), FAKE_ENTRY(cuEventRecord),
  FAKE_ENTRY(cuEventQuery), FAKE_ENTRY(cuEventSynchronize), FAKE_ENTRY(cuStreamWaitEvent),
  FAKE_ENTRY(cuIpcGetEventHandle), FAKE_ENTRY(cuIpcOpenEventHandle), FAKE_ENTRY(cuStreamCreate),
  FAKE_ENTRY(cuStreamDestroy), FAKE_ENTRY(cuStreamSynchronize), FAKE_ENTRY(cuModuleLoadData),
  FAKE_ENTRY(cuModuleGetFunction), FAKE_ENTRY(cuModuleUnload), FAKE_ENTRY(cuLaunchKernel),
  FAKE_ENTRY(cuMemGetAllocationGranularity), FAKE_ENTRY(cuMemCreate), FAKE_ENTRY(cuMemRelease),
  FAKE_ENTRY(cuMemExportToShareableHandle), FAKE_ENTRY(cuMemImportFromShareableHandle),
  FAKE_ENTRY(cuMemAddressReserve), FAKE_ENTRY(cuMemAddressFree), FAKE_ENTRY(cuMemMap),
  FAKE_ENTRY(cuMemUnmap), FAKE_ENTRY(cuMemSetAccess), FAKE_ENTRY(cuMemcpyDtoHAsync),
  FAKE_ENTRY(cuMemcpyHtoDAsync),
  FAKE_ENTRY(cuStreamWriteValue64), FAKE_ENTRY(cuStreamWaitValue64),
  FAKE_ENTRY(cuMemHostRegister), FAKE_ENTRY(cuMemHostUnregister),
  FAKE_ENTRY(cuMemHostGetDevicePointer),
  FAKE_ENTRY(cuMemsetD32Async), FAKE_ENTRY(cuMemcpyDtoDAsync), FAKE_ENTRY(cuMemcpyAsync),
  FAKE_ENTRY(cuStreamGetCtx),
  FAKE_ENTRY(cuCtxGetDevice), FAKE_ENTRY(cuCtxPushCurrent), FAKE_ENTRY(cuCtxPopCurrent),
  FAKE_ENTRY(cuDeviceCanAccessPeer), FAKE_ENTRY(cuCtxEnablePeerAccess),
  FAKE_ENTRY(cuMemGetHandleForAddressRange), FAKE_ENTRY(cuImportExternalMemory),
  FAKE_ENTRY(cuExternalMemoryGetMappedBuffer), FAKE_ENTRY(cuExternalMemoryGetMappedMipmappedArray),
  FAKE_ENTRY(cuDestroyExternalMemory), FAKE_ENTRY(cuMipmappedArrayGetLevel),
  FAKE_ENTRY(cuMipmappedArrayDestroy), FAKE_ENTRY(cuArray3DGetDescriptor),
  FAKE_ENTRY(cuSurfObjectCreate), FAKE_ENTRY(cuSurfObjectDestroy),
  FAKE_ENTRY(cuImportExternalSemaphore), FAKE_ENTRY(cuSignalExternalSemaphoresAsync),
  FAKE_ENTRY(cuWaitExternalSemaphoresAsync), FAKE_ENTRY(cuDestroyExternalSemaphore),
#undef FAKE_ENTRY
};

/* The one symbol the loader looks up by name (cuda/cuda_api.h declares no functions). */
FAKE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                      cuuint64_t flags, CUdriverProcAddressQueryResult *status);
FAKE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                      cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
  (void)version;
  (void)flags;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (strcmp(table[i].name, symbol) == 0) {
      *pfn = table[i].fn;
      if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  *pfn = NULL;
  if (status)
    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}
