/* SPDX-License-Identifier: MIT */
/* Buffers with an allocation of their own: sync buffers (their fence and control block
 * go with an allocation), buffers past the carve limit, persistent ones while systemd's
 * fd store keeps them (one fd a buffer), and those of clients that would not understand
 * a carved reply.  Every other buffer is carved (kind_slot.c). */
#include "config.h"
#include "registry/kind.h"
#include "registry/backends.h"
#include "gpushm.h"
#include "shm_layout.h"
#include "wire.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int buffer_check(const struct registry *reg, const struct reg_create_args *args,
                        const struct reg_policy *policy, const struct backend **be, char *err,
                        size_t errlen)
{
  if (args->size == 0 || args->size > GPUSHM_LIMIT_BUFFER_SIZE) {
    snprintf(err, errlen, "size must be 1..%llu bytes",
             (unsigned long long)GPUSHM_LIMIT_BUFFER_SIZE);
    return GPUSHM_E_INVAL;
  }
  return reg_resolve_backend(reg, args->backend, policy, be, err, errlen);
}

/* The slot a create would take in a segment, or 0 when it gets an allocation of its
 * own (see the top of this file). */
static uint64_t carve_slot(const struct registry *reg, const struct reg_create_args *args,
                           const struct reg_policy *policy, const struct backend *be)
{
  if (args->sync || !policy->carved)
    return 0;
  if (reg->persist_dedicated && args->lifetime == GPUSHM_LIFETIME_PERSISTENT &&
      (be->kind == GPUSHM_BACKEND_HOST || be->kind == GPUSHM_BACKEND_CUDA_FD))
    return 0;
  return seg_slot_size(be, args->size);
}

static const struct reg_kind_ops *buffer_select(const struct registry *reg,
                                                const struct reg_create_args *args,
                                                const struct reg_policy *policy,
                                                const struct backend *be)
{
  return carve_slot(reg, args, policy, be) ? &reg_kind_slot : &reg_kind_buffer;
}

static void buffer_estimate(const struct registry *reg, const struct reg_create_args *args,
                            const struct backend *be, uint64_t *bytes, uint64_t *host_bytes)
{
  *bytes = args->size;
  *host_bytes = (be->kind == GPUSHM_BACKEND_HOST ? args->size : 0) +
                (args->sync ? SYNC_CONTROL_SIZE : 0);
}

/* Host memory a buffer commits: its pages (host backend) and its control block. */
static uint64_t host_bytes_of(const struct reg_object *obj)
{
  return (obj->backend->kind == GPUSHM_BACKEND_HOST ? obj->allocated : 0) +
         (obj->sync ? SYNC_CONTROL_SIZE : 0);
}

/* Whether a sync buffer made by this create is ordered by a fence in its allocation:
 * cuda-fd's and cuda-fabric's always; cuda-ipc's when its creator's library knows fences
 * there (GPUSHM_FEATURE_IPC_FENCES), else, as before 0.7.1, by an IPC event.  A fence can
 * be raised by gpushmd for a releaser that died with its write queued; an IPC event
 * recorded by a process that dies before the record runs never completes, nor does any
 * record after it (docs/sync.md). */
static bool fenced(const struct backend *be, const struct reg_create_args *args)
{
  return args->sync && be->fence_in_allocation &&
         (be->kind != GPUSHM_BACKEND_CUDA_IPC || args->ipc_fence);
}

/* Where a sync buffer's fence lives: the last 8 bytes of its allocation, as far from its
 * data as it gets (alloc asked for them; the backend zeroed them, as all new memory);
 * 0: no fence. */
static uint64_t fence_offset_of(const struct backend *be, uint64_t size, uint64_t allocated)
{
  if (!be->fence_in_allocation || allocated < size + SYNC_DEVICE_FENCE_BYTES)
    return 0;
  return allocated - SYNC_DEVICE_FENCE_BYTES;
}

/* Legacy-IPC buffers without a fence also get an inter-process event.  The others
 * synchronise on the control block alone: host buffers on the CPU, device buffers
 * through their fence word, which GPUs write and wait on. */
static int alloc_sync(struct registry *reg, struct reg_object *obj, uint64_t size, bool fence,
                      const char *name, char *err, size_t errlen)
{
  const struct event_source *events = NULL;
  int r;

  if (obj->backend->kind == GPUSHM_BACKEND_CUDA_IPC && !fence && !(events = reg->events)) {
    snprintf(err, errlen, "sync needs CUDA events, which this daemon lacks");
    return GPUSHM_E_UNSUPPORTED;
  }
  r = sync_alloc(&obj->sync_state, events, obj->device, name, err, errlen);
  if (r == 0) {
    obj->sync = true;
    obj->fence_offset = fence ? fence_offset_of(obj->backend, size, obj->allocated) : 0;
  }
  return r;
}

static int buffer_alloc(struct registry *reg, struct reg_object *obj,
                        const struct reg_create_args *args, const struct backend *be,
                        const struct reg_client *client, char *err, size_t errlen)
{
  int device = be->kind == GPUSHM_BACKEND_HOST ? -1 : args->device;
  /* A sync buffer's fence rides in its allocation, past the data. */
  const bool fence = fenced(be, args);
  uint64_t size = args->size + (fence ? SYNC_DEVICE_FENCE_BYTES : 0);
  int r;

  (void)client;
  r = be->alloc(be, size, args->device, args->name, &obj->mem, &obj->allocated, err, errlen);
  /* Warm pools are the first memory to give back. */
  if (r == GPUSHM_E_NOMEM && seg_drain_pools(&reg->segs, be->kind, device))
    r = be->alloc(be, size, args->device, args->name, &obj->mem, &obj->allocated, err, errlen);
  if (r < 0)
    return r;
  obj->backend = be;
  obj->device = device;
  if (args->sync && (r = alloc_sync(reg, obj, args->size, fence, args->name, err, errlen)) < 0) {
    be->release(be, &obj->mem);
    obj->backend = NULL;
    return r;
  }
  obj->host_bytes = host_bytes_of(obj);
  return 0;
}

/* The backend's fd or handle and, for sync buffers, the control block's fd (always
 * last) and the event's handle. */
static int buffer_export(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                         const struct reg_policy *policy, bool read_only,
                         struct reg_export *out, char *err, size_t errlen)
{
  struct backend_export mem = { .fd = -1 };
  int r;

  (void)client;
  if ((r = reg_legacy_ipc_check(reg, obj->backend, err, errlen)) < 0)
    return r;
  /* An older library would take the missing event for a protocol error: refused by
   * name instead, as carved buffers are. */
  if (obj->backend->kind == GPUSHM_BACKEND_CUDA_IPC && obj->fence_offset && !policy->ipc_fences) {
    snprintf(err, errlen, "'%s' is a cuda-ipc sync buffer ordered by a memory fence, which "
             "this client's libgpushm (before 0.7.1: no GPUSHM_FEATURE_IPC_FENCES at hello) "
             "does not know: upgrade it", obj->name);
    return GPUSHM_E_UNSUPPORTED;
  }
  r = obj->backend->export(obj->backend, &obj->mem, read_only, &mem, err, errlen);
  if (r < 0)
    return r;
  if (mem.fd >= 0)
    out->fds[out->n_fds++] = mem.fd;
  memcpy(out->handle, mem.handle, mem.handle_len);
  out->handle_len = mem.handle_len;
  out->fence_offset = obj->fence_offset;
  if (obj->sync) {
    r = sync_export(&obj->sync_state, read_only, &out->fds[out->n_fds], out->event_handle,
                    &out->event_handle_len, err, errlen);
    if (r < 0) {
      registry_export_close_fds(out);
      return r;
    }
    out->n_fds++;
  }
  return 0;
}

static void buffer_release(struct registry *reg, struct reg_object *obj)
{
  /* The last reference is gone, yet a process may still map the memory: one that kept
   * the fd it was sent past its close, or one whose connection ended while it held the
   * buffer.  Neither holds it any more; host memory is taken back from them (their
   * mappings read zeros, and what they write again is charged to their own cgroup), so
   * that what gpushmd counts as freed is freed, and nobody can keep pages charged to
   * gpushmd's cgroup past its budget.  Device memory has no such way back
   * (docs/cuda.md: memory a process keeps after the daemon let go). */
  if (!reg->stopping && obj->backend->discard_range)
    obj->backend->discard_range(obj->backend, &obj->mem, 0, obj->allocated);
  obj->backend->release(obj->backend, &obj->mem);
  if (obj->sync)
    sync_release(&obj->sync_state);
  obj->sync = false;
}

static void buffer_describe(const struct reg_object *obj, struct reg_description *out)
{
  out->kind = obj->sync ? "sync buffer" : "buffer";
  out->backend = obj->backend->kind;
  out->sync = obj->sync;
  out->segment_id = 0;
}

static int buffer_adopt(struct registry *reg, struct reg_object *obj,
                        const struct reg_adopt_args *a, struct backend_mem *mem,
                        struct backend_mem *control, char *err, size_t errlen)
{
  const struct backend *be = registry_backend(reg, a->backend);
  int r;

  if (!be || (be->kind != GPUSHM_BACKEND_HOST && a->device < 0)) {
    snprintf(err, errlen, "invalid record");
    return GPUSHM_E_INVAL;
  }
  if (control && (r = sync_adopt(&obj->sync_state, control, a->name, err, errlen)) < 0)
    return r;
  obj->sync = control != NULL;
  /* (cuda-ipc memory never persists: its handles die with the daemon's context) */
  obj->fence_offset = control && be->kind != GPUSHM_BACKEND_CUDA_IPC
                        ? fence_offset_of(be, a->size, a->allocated) : 0;
  obj->backend = be;
  obj->device = be->kind == GPUSHM_BACKEND_HOST ? -1 : a->device;
  obj->allocated = a->allocated;
  obj->mem = *mem;
  obj->host_bytes = host_bytes_of(obj);
  return 0;
}

const struct reg_kind_ops reg_kind_buffer = {
  .name = "buffer",
  .kind = REG_BUFFER,
  .check = buffer_check,
  .select = buffer_select,
  .estimate = buffer_estimate,
  .alloc = buffer_alloc,
  .export = buffer_export,
  .release = buffer_release,
  .describe = buffer_describe,
  .adopt = buffer_adopt,
};
