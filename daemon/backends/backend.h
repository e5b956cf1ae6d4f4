/* SPDX-License-Identifier: MIT */
/* Where a buffer's memory comes from.  The registry owns buffers; a backend only
 * allocates, exports and frees their memory. */
#ifndef GPUSHMD_BACKEND_H
#define GPUSHMD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Memory backends are enum proto_backend values 1 up to below this.  (The wire's
 * BACKEND_CUDA_EVENT, 4, names an event, which is no backend: proto/gpushm.proto; its
 * slots in tables indexed by backend stay empty.) */ 
/* 6, external, is memory a client registered: a kind of object (registry/kind_external.c)
 * with no backend to allocate from; tables indexed by backend count it. */
#define GPUSHM_BACKEND_COUNT 7

struct backend_mem {
  int fd;       /* host: the sealed memfd; cuda-fd: the exported handle; -1 otherwise */
  void *priv;   /* backend's own per-buffer state */
};

/* What a client gets to reach the memory: an fd it owns after the reply, or handle
 * bytes, or both. */
struct backend_export {
  int fd;
  uint8_t handle[64];
  size_t handle_len;
};

struct backend {
  const char *name;
  int kind; /* enum proto_backend */
  /* Reserves at least size bytes, zero-filled: memory one buffer held must never reach
   * the next one's owner, and a device allocator recycles within the daemon's context
   * without clearing.  Returns 0 or a negative PROTO_E_* with err set. */
  int (*alloc)(const struct backend *be, uint64_t size, int device, const char *label,
               struct backend_mem *mem, uint64_t *allocated, char *err, size_t errlen);
  /* What the client is sent to map the memory: fds are new and owned by the caller;
   * read-only access is enforced where the backend can.  Returns 0 or PROTO_E_*. */
  int (*export)(const struct backend *be, struct backend_mem *mem, bool read_only,
                struct backend_export *out, char *err, size_t errlen);
  void (*release)(const struct backend *be, struct backend_mem *mem);
  /* Segments (segment.h).  alloc_segment reserves an allocation to carve slots from:
   * like alloc, but host memory is not committed (each slot is, as it is handed out).
   * zero_range readies [offset, offset + len) for its next holder, synchronously: zero
   * (whatever a previous holder, or a stale mapping, left there; known_zero: nothing has
   * been there since the allocation was zero-filled) and, for host memory, committed, so
   * that running out is an error at create and not a SIGBUS later.
   * discard_range gives a freed slot's memory back while the allocation lives (NULL:
   * nothing to give back).  zero_warm_range zeroes a freed slot that was not given
   * back (NULL: none is kept so; segment.c keeps them within GPUSHM_LIMIT_WARM_*), and
   * commits what a holder may have given back meanwhile.  granule: what allocation sizes
   * are rounded to. */
  int (*alloc_segment)(const struct backend *be, uint64_t size, int device, const char *label,
                       struct backend_mem *mem, uint64_t *allocated, char *err, size_t errlen);
  int (*zero_range)(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                    uint64_t len, bool known_zero, char *err, size_t errlen);
  void (*discard_range)(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                        uint64_t len);
  int (*zero_warm_range)(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                         uint64_t len, char *err, size_t errlen);
  uint64_t granule;
  /* A sync buffer's fence lives in its allocation, SYNC_DEVICE_FENCE_BYTES past its data
   * (cuda-fd, cuda-fabric; cuda-ipc for creators that know it: kind_buffer.c). */
  bool fence_in_allocation;
  /* With fence_in_allocation: raises the fence at offset to value if it holds less
   * (*was receives what it held), synchronously, through the daemon's own context, for
   * a releaser that died with its write queued — but only once it holds at least
   * after: other releasers' writes below that may still be queued, and would lower it
   * again.  Value 0 reads the fence into *was and writes nothing.  Returns 1 (raised),
   * 0 (it was there already), 2 (below after: nothing written), or a negative PROTO_E_*
   * with err set, the memory left as it was. */
  int (*fence_raise)(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                     uint64_t value, uint64_t after, uint64_t *was, char *err, size_t errlen);
  /* NULL when usable, else why not (shown to clients that ask for it). */
  const char *(*unavailable)(const struct backend *be);
  /* Memory another API exported as an fd of this backend's driver (registered memory):
   * whether it really is an allocation of at least size bytes on the device with that
   * UUID, found by importing it (*device: that device's ordinal).  The fd stays the
   * caller's.  NULL: the backend cannot tell. */
  int (*verify_external)(const struct backend *be, int fd, uint64_t size, bool dedicated,
                         const uint8_t device_uuid[16], int *device, char *err,
                         size_t errlen);
  /* Persistence (NULL: this backend's memory dies with the daemon).  device_uuid: the
   * UUID of device (NULL for host memory, which has none, and for an unknown device),
   * what a record names it by (ordinals may differ at the next start).  adopt: takes
   * over memory a previous daemon made (its fd, from systemd's fd store) as that of a
   * buffer of size bytes on the device with that UUID (host memory: none): *device is
   * its ordinal now (-1 for host memory); *allocated is what the record says for device
   * memory, and is set for host memory.  On failure the fd is left to the caller. */
  const uint8_t *(*device_uuid)(const struct backend *be, int device);
  int (*adopt)(const struct backend *be, int fd, const uint8_t uuid[16], uint64_t size,
               uint64_t *allocated, struct backend_mem *mem, int *device, char *err,
               size_t errlen);
};

extern const struct backend backend_host;
/* A host-memory fd for a client (the status page uses it too). */
int backend_host_export_fd(const struct backend_mem *mem, bool read_only, int *fd_out,
                           char *err, size_t errlen);
/* Takes over a memfd a previous daemon made (from systemd's fd store) as the memory of a
 * host buffer of size bytes, after checking it is one. */
int backend_host_adopt(int fd, uint64_t size, struct backend_mem *mem, uint64_t *allocated,
                       char *err, size_t errlen);
extern const struct backend backend_cuda_ipc;
extern const struct backend backend_cuda_fd;
extern const struct backend backend_cuda_fabric;
/* Takes over a cuda-fd allocation a previous daemon exported (its fd, from systemd's fd
 * store): imports it in the primary context of the device with that UUID (ordinals may
 * have changed since) as the memory of a buffer of size bytes, allocated of them mapped by
 * clients.  *device is the device's ordinal now.  On failure (no such device, the import
 * fails) the fd is left to the caller. */
int backend_cuda_fd_adopt(int fd, const uint8_t uuid[16], uint64_t size, uint64_t allocated,
                          struct backend_mem *mem, int *device, char *err, size_t errlen);

#endif
