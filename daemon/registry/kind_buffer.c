/* SPDX-License-Identifier: MIT */
/* Buffers with an allocation of their own: sync buffers (their fence and control block
 * go with an allocation), buffers past the carve limit, persistent cuda-fd ones while
 * systemd's fd store keeps them (one fd a buffer), and those of clients that would not
 * understand a carved reply.  Every other buffer is carved (kind_slot.c). */
#include "config.h"
#include "registry/kind_buffer.h"
#include "registry/backends.h"
#include "protocol.h"
#include "shm_layout.h"
#include "util/log.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int buffer_check(const struct registry *reg, const struct reg_create_args *args,
                        const struct reg_policy *policy, const struct backend **be, char *err,
                        size_t errlen)
{
  if (args->size == 0 || args->size > GPUSHM_LIMIT_BUFFER_SIZE) {
    snprintf(err, errlen, "size must be 1..%llu bytes",
             (unsigned long long)GPUSHM_LIMIT_BUFFER_SIZE);
    return PROTO_E_INVAL;
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
  /* host slots persist through their segment (kind_slot.c); device ones do not yet */
  if (reg->persist_dedicated && args->lifetime == PROTO_LIFETIME_PERSISTENT &&
      be->kind == PROTO_BACKEND_CUDA_FD)
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
                            const struct backend *be, struct quota_cost *cost)
{
  (void)reg;
  cost->bytes = args->size;
  cost->host = (be->kind == PROTO_BACKEND_HOST ? args->size : 0) +
               (args->sync ? SYNC_CONTROL_SIZE : 0);
  cost->device = be->kind == PROTO_BACKEND_HOST ? -1 : args->device;
  cost->device_bytes = cost->device >= 0 && cost->bytes > cost->host ? cost->bytes - cost->host
                                                                     : 0;
}

/* Host memory a buffer commits: its pages (host backend) and its control block. */
static uint64_t host_bytes_of(const struct reg_buffer *b)
{
  return (b->obj.backend->kind == PROTO_BACKEND_HOST ? b->obj.allocated : 0) +
         (b->sync ? SYNC_CONTROL_SIZE : 0);
}

/* Whether a sync buffer made by this create is ordered by a fence in its allocation:
 * cuda-fd's and cuda-fabric's always; cuda-ipc's when its creator's library knows fences
 * there (PROTO_FEATURE_IPC_FENCES), else, as before 0.7.1, by an IPC event.  A fence can
 * be raised by gpushmd for a releaser that died with its write queued; an IPC event
 * recorded by a process that dies before the record runs never completes, nor does any
 * record after it (docs/sync.md). */
static bool fenced(const struct backend *be, const struct reg_create_args *args)
{
  return args->sync && be->fence_in_allocation &&
         (be->kind != PROTO_BACKEND_CUDA_IPC || args->ipc_fence);
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
static int alloc_sync(struct registry *reg, struct reg_buffer *b, uint64_t size, bool fence,
                      const char *name, char *err, size_t errlen)
{
  const struct event_source *events = NULL;
  int r;

  if (b->obj.backend->kind == PROTO_BACKEND_CUDA_IPC && !fence && !(events = reg->events)) {
    snprintf(err, errlen, "sync needs CUDA events, which this daemon lacks");
    return PROTO_E_UNSUPPORTED;
  }
  r = sync_alloc(&b->sync_state, events, b->obj.device, name, err, errlen);
  if (r == 0) {
    b->sync = true;
    b->fence_offset = fence ? fence_offset_of(b->obj.backend, size, b->obj.allocated) : 0;
  }
  return r;
}

static int buffer_alloc(struct registry *reg, struct reg_object *obj,
                        const struct reg_create_args *args, const struct backend *be,
                        const struct reg_client *client, char *err, size_t errlen)
{
  struct reg_buffer *b = reg_buffer_of(obj);
  int device = be->kind == PROTO_BACKEND_HOST ? -1 : args->device;
  /* A sync buffer's fence rides in its allocation, past the data. */
  const bool fence = fenced(be, args);
  uint64_t size = args->size + (fence ? SYNC_DEVICE_FENCE_BYTES : 0);
  int r;

  (void)client;
  r = be->alloc(be, size, args->device, args->name, &b->mem, &obj->allocated, err, errlen);
  /* Warm pools are the first memory to give back. */
  if (r == PROTO_E_NOMEM && seg_drain_pools(&reg->segs, be->kind, device))
    r = be->alloc(be, size, args->device, args->name, &b->mem, &obj->allocated, err, errlen);
  if (r < 0)
    return r;
  obj->backend = be;
  obj->device = device;
  if (args->sync && (r = alloc_sync(reg, b, args->size, fence, args->name, err, errlen)) < 0) {
    be->release(be, &b->mem);
    obj->backend = NULL;
    return r;
  }
  obj->host_bytes = host_bytes_of(b);
  return 0;
}

/* The backend's fd or handle and, for sync buffers, the control block's fd (always
 * last) and the event's handle. */
static int buffer_export(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                         const struct reg_policy *policy, bool read_only,
                         struct reg_export *out, char *err, size_t errlen)
{
  struct reg_buffer *b = reg_buffer_of(obj);
  struct backend_export mem = { .fd = -1 };
  int r;

  (void)client;
  if ((r = reg_legacy_ipc_check(reg, obj->backend, err, errlen)) < 0)
    return r;
  /* An older library would take the missing event for a protocol error: refused by
   * name instead, as carved buffers are. */
  if (obj->backend->kind == PROTO_BACKEND_CUDA_IPC && b->fence_offset && !policy->ipc_fences) {
    snprintf(err, errlen, "'%s' is a cuda-ipc sync buffer ordered by a memory fence, which "
             "this client's libgpushm (before 0.7.1: no PROTO_FEATURE_IPC_FENCES at hello) "
             "does not know: upgrade it", obj->name);
    return PROTO_E_UNSUPPORTED;
  }
  r = obj->backend->export(obj->backend, &b->mem, read_only, &mem, err, errlen);
  if (r < 0)
    return r;
  if (mem.fd >= 0)
    out->fds[out->n_fds++] = mem.fd;
  memcpy(out->handle, mem.handle, mem.handle_len);
  out->handle_len = mem.handle_len;
  out->fence_offset = b->fence_offset;
  if (b->sync) {
    r = sync_export(&b->sync_state, read_only, &out->fds[out->n_fds], out->event_handle,
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
  struct reg_buffer *b = reg_buffer_of(obj);

  /* The last reference is gone, yet a process may still map the memory: one that kept
   * the fd it was sent past its close, or one whose connection ended while it held the
   * buffer.  Neither holds it any more; host memory is taken back from them (their
   * mappings read zeros, and what they write again is charged to their own cgroup), so
   * that what gpushmd counts as freed is freed, and nobody can keep pages charged to
   * gpushmd's cgroup past its budget.  Device memory has no such way back
   * (docs/cuda.md: memory a process keeps after the daemon let go). */
  if (!reg->stopping && obj->backend->discard_range)
    obj->backend->discard_range(obj->backend, &b->mem, 0, obj->allocated);
  obj->backend->release(obj->backend, &b->mem);
  if (b->sync)
    sync_release(&b->sync_state);
  b->sync = false;
}

static void buffer_describe(const struct reg_object *obj, struct reg_description *out)
{
  const struct reg_buffer *b = reg_buffer_of_const(obj);

  memset(out, 0, sizeof *out);
  out->kind = b->sync ? "sync buffer" : "buffer";
  out->backend = obj->backend->kind;
  out->sync = b->sync;
  out->fenced = b->sync && b->fence_offset && obj->backend->fence_raise;
  out->promiser = b->sync ? b->sync_state.promise.client_id : 0;
}

/* Whether b has a fence gpushmd can read and raise: in its allocation, where its
 * backend can reach it, or in its control block (a timeline). */
static bool has_fence(const struct reg_buffer *b)
{
  return b->sync && (b->fence_in_control || (b->fence_offset && b->obj.backend->fence_raise));
}

/* Raises b's fence to value (0: reads it), as backend.h's fence_raise. */
static int fence_raise(struct reg_buffer *b, uint64_t value, uint64_t *was, char *err,
                       size_t errlen)
{
  if (b->fence_in_control)
    return sync_fence_raise(&b->sync_state, value, was, err, errlen);
  return b->obj.backend->fence_raise(b->obj.backend, &b->mem, b->fence_offset, value, 0, was,
                                     err, errlen);
}

/* Fence writes are plain stores, each queued behind a wait for the release before it:
 * they land in release order, unless the daemon raises one out of turn.  Raised past
 * another releaser's release still queued (a live one's, or a dead one's not yet
 * repaired), the fence would be lowered again when that write lands, below the dead
 * releaser's number, and its waiters would wait for ever: the raise waits for that
 * release (force: not).  The dead releaser's own earlier writes died with it. */
int reg_buffer_raise_fence(struct registry *reg, struct reg_object *obj, uint32_t releaser,
                           bool force, struct reg_raised_fence *out, char *err, size_t errlen)
{
  struct reg_buffer *b = reg_buffer_of(obj);
  int r;

  (void)reg;
  memset(out, 0, sizeof *out);
  if (!has_fence(b))
    return 0;
  if ((r = sync_signed_release(&b->sync_state, releaser, &out->seq, &out->before, err,
                               errlen)) < 0)
    return r;
  if (out->seq == 0)
    return 0; /* none of the latest releases is its */
  if (!force) {
    if ((r = fence_raise(b, 0, &out->was, err, errlen)) < 0) /* value 0: a read */
      return r;
    if (out->was < out->seq && out->was < out->before)
      return 2;
  }
  return fence_raise(b, out->seq, &out->was, err, errlen);
}

int reg_buffer_promise(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                       uint32_t releaser, uint64_t upto, char *err, size_t errlen)
{
  struct reg_buffer *b = reg_buffer_of(obj);

  (void)reg;
  if (!b->sync) {
    snprintf(err, errlen, "'%s' was not created with GPUSHM_CREATE_SYNC", obj->name);
    return PROTO_E_INVAL;
  }
  if (b->sync_state.events) {
    snprintf(err, errlen, "'%s' is ordered by a CUDA IPC event (a library before 0.7.1 "
             "created it), which carries no number: promises need a fence; recreate it",
             obj->name);
    return PROTO_E_UNSUPPORTED;
  }
  return sync_promise(&b->sync_state, client_id, releaser, upto, err, errlen);
}

/* The fence first read (a promise broken only once every release published so far has
 * landed, else a write still queued would lower the fence again after the raise; force:
 * at once), then the values marked lost (a stream waiting on the fence goes on the
 * moment it is raised, and its process must find the value lost then), then the fence
 * raised, then the counter (a timeline's fence after it: see below).  A break that fails is given up: the record goes, or the
 * buffer would refuse promises for good. */
static int break_recorded(struct reg_object *obj, bool force, uint64_t last,
                          struct reg_broken_promise *out, char *err, size_t errlen)
{
  struct reg_buffer *b = reg_buffer_of(obj);
  bool fenced = has_fence(b);
  uint64_t upto = b->sync_state.promise.upto;
  int r;

  b->sync_state.promise.breaking = true;
  /* value 0: a read (*was), nothing written */
  if (fenced && (r = fence_raise(b, 0, &out->fence_was, err, errlen)) < 0)
    goto give_up;
  if (fenced && !force && out->fence_was < last)
    return 2; /* not yet */
  if ((r = sync_lose_promise(&b->sync_state, &out->lost_from, err, errlen)) < 0)
    goto give_up;
  if (fenced && !b->fence_in_control &&
      (r = fence_raise(b, upto, &out->fence_was, err, errlen)) < 0)
    goto give_up;
  out->upto = upto;
  if ((r = sync_keep_broken_promise(&b->sync_state, err, errlen)) < 0)
    goto give_up;
  /* A timeline's waiters wait on the fence itself, CPU ones too: raised last, so that a
   * waiter it wakes finds the break whole (the promise gone, the counter published) and
   * may signal at once.  The promise is forgotten already: a failure is only said. */
  if (fenced && b->fence_in_control &&
      (r = fence_raise(b, upto, &out->fence_was, err, errlen)) < 0)
    return r;
  return 1;

give_up:
  sync_forget_promise(&b->sync_state);
  return r;
}

int reg_buffer_break_promise(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                             bool force, struct reg_broken_promise *out, char *err,
                             size_t errlen)
{
  struct reg_buffer *b = reg_buffer_of(obj);
  uint64_t upto, last;
  int r;

  (void)reg;
  memset(out, 0, sizeof *out);
  if (!b->sync)
    return 0;
  if ((r = sync_unkept_promise(&b->sync_state, client_id, &upto, &last, err, errlen)) < 0) {
    sync_forget_promise(&b->sync_state);
    return r;
  }
  return upto ? break_recorded(obj, force, last, out, err, errlen) : 0;
}

/* ---- persistence: systemd's fd store ------------------------------------------------
 * A persistent host or cuda-fd buffer leaves its memory's fd under a record that says
 * what it is, a sync buffer's control block beside it ("c.<id>"), and its metadata in a
 * sealed memfd ("x.<id>": a record name is too short for it).  Host records are the
 * format of gpushm 0.1 ("m."), unchanged, so that a daemon of either version takes the
 * other's host buffers back; device records ("d.") add what the import needs: the
 * allocated size (clients map all of it) and the device's UUID (ordinals may differ at
 * the next start), in hex, so that the longest still fits.  Daemons that know no "d."
 * drop those records as unknown and keep the rest. */
#define RECORD_FLAG_SYNC 1u
/* Daemons before 0.3 ignore the flag and drop the "x." record. */
#define RECORD_FLAG_METADATA 2u

static unsigned record_flags(const struct reg_buffer *b)
{
  return (b->sync ? RECORD_FLAG_SYNC : 0u) | (b->obj.metadata_len ? RECORD_FLAG_METADATA : 0u);
}

static bool persists(const struct backend *be)
{
  /* Legacy-IPC device memory and events die with the daemon's context; a cuda-fd
   * allocation lives on in its exported fd, a sync buffer's fence with it. */
  return be && be->adopt && (be->kind == PROTO_BACKEND_HOST || be->kind == PROTO_BACKEND_CUDA_FD);
}

static bool buffer_persists(const struct registry *reg, const struct reg_object *obj)
{
  (void)reg;
  return persists(obj->backend);
}

static int records_of(const struct reg_buffer *b)
{
  return 1 + (b->sync ? 1 : 0) + (b->obj.metadata_len ? 1 : 0);
}

static unsigned buffer_deposit_records(const struct registry *reg, const struct reg_object *obj)
{
  (void)reg;
  return (unsigned)records_of(reg_buffer_of_const(obj));
}

struct record_fields {
  uint64_t id, size, allocated, created;
  unsigned flags, uid, gid, mode;
  int backend;
  uint8_t uuid[16];
  const char *name;
};

static bool device_record(const struct record_fields *f, char *out, size_t len)
{
  char hex[33];
  int n;

  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", f->uuid[i]);
  n = snprintf(out, len, "d.%" PRIx64 ".%d.%x.%x.%x.%o.%" PRIx64 ".%" PRIx64 ".%" PRIx64 ".%s.%s",
               f->id, f->backend, f->flags, f->uid, f->gid, f->mode, f->size, f->allocated,
               f->created, hex, f->name);
  return n > 0 && (size_t)n < len;
}

/* The record a deposited buffer's memory is kept under; false if it has none. */
static bool memory_record(const struct reg_buffer *b, char *out, size_t len)
{
  const struct reg_object *o = &b->obj;
  struct record_fields f = {
    .id = o->id, .size = o->size, .allocated = o->allocated, .created = o->created_unix_ms,
    .flags = record_flags(b), .uid = (unsigned)o->owner_uid, .gid = (unsigned)o->owner_gid,
    .mode = o->mode, .backend = o->backend->kind, .name = o->name,
  };
  const uint8_t *uuid;
  int n;

  if (o->backend->kind == PROTO_BACKEND_HOST) {
    n = snprintf(out, len, "m.%" PRIu64 ".%d.%u.%u.%u.%o.%" PRIu64 ".%" PRIu64 ".%s", f.id,
                 f.backend, f.flags, f.uid, f.gid, f.mode, f.size, f.created, f.name);
    return n > 0 && (size_t)n < len;
  }
  if (!o->backend->device_uuid || !(uuid = o->backend->device_uuid(o->backend, o->device)))
    return false;
  memcpy(f.uuid, uuid, 16);
  return device_record(&f, out, len);
}

static void control_record(uint64_t id, char *out, size_t len)
{
  snprintf(out, len, "c.%" PRIu64, id);
}

static void metadata_record(uint64_t id, char *out, size_t len)
{
  snprintf(out, len, "x.%" PRIu64, id);
}

/* b's metadata in a sealed memfd of its own (the store keeps its copy). */
static int deposit_metadata(const struct reg_buffer *b, const struct reg_store *store)
{
  char name[REG_RECORD_MAX];
  int fd = memfd_create("gpushm-metadata", MFD_CLOEXEC | MFD_ALLOW_SEALING), r;

  if (fd < 0)
    return -errno;
  if (write(fd, b->obj.metadata, b->obj.metadata_len) != (ssize_t)b->obj.metadata_len ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    r = errno ? -errno : -EIO;
    close(fd);
    return r;
  }
  metadata_record(b->obj.id, name, sizeof name);
  r = store->add(store->ctx, name, fd);
  close(fd);
  return r;
}

static int buffer_withdraw(struct registry *reg, struct reg_object *obj,
                           const struct reg_store *store)
{
  const struct reg_buffer *b = reg_buffer_of(obj);
  char name[REG_RECORD_MAX];

  (void)reg;
  if (memory_record(b, name, sizeof name))
    store->remove(store->ctx, name);
  if (b->sync) {
    control_record(obj->id, name, sizeof name);
    store->remove(store->ctx, name);
  }
  if (obj->metadata_len) {
    metadata_record(obj->id, name, sizeof name);
    store->remove(store->ctx, name);
  }
  return records_of(b);
}

static int buffer_deposit(struct registry *reg, struct reg_object *obj,
                          const struct reg_store *store, char *err, size_t errlen)
{
  struct reg_buffer *b = reg_buffer_of(obj);
  char name[REG_RECORD_MAX], control[REG_RECORD_MAX];
  int r;

  (void)reg;
  if (!memory_record(b, name, sizeof name)) {
    snprintf(err, errlen, "it has no fd store record");
    return -EINVAL;
  }
  if ((r = store->add(store->ctx, name, b->mem.fd)) < 0) {
    snprintf(err, errlen, "%s", strerror(-r));
    return r;
  }
  if (b->sync) {
    control_record(obj->id, control, sizeof control);
    if ((r = store->add(store->ctx, control, b->sync_state.control.fd)) < 0) {
      snprintf(err, errlen, "its control block: %s", strerror(-r));
      store->remove(store->ctx, name);
      return r;
    }
  }
  if (obj->metadata_len && (r = deposit_metadata(b, store)) < 0) {
    snprintf(err, errlen, "its metadata: %s", strerror(-r));
    store->remove(store->ctx, name);
    if (b->sync)
      store->remove(store->ctx, control);
    return r;
  }
  return records_of(b);
}

static int hex_digit(char c)
{
  return c >= '0' && c <= '9' ? c - '0' : c - 'a' + 10;
}

/* A memory record ("m." or "d."), read back; false if it is not one this daemon wrote
 * (a device record only in the daemon's own spelling: withdrawing it rebuilds it from
 * the buffer, and must hit this one). */
static bool parse_record(const char *record, struct record_fields *f, char *name, size_t len)
{
  unsigned long long id, size, allocated = 0, created;
  char hex[33], canonical[REG_RECORD_MAX];
  int used = -1;

  memset(f, 0, sizeof *f);
  if (strncmp(record, "m.", 2) == 0) {
    if (sscanf(record, "m.%llu.%d.%u.%u.%u.%o.%llu.%llu.%n", &id, &f->backend, &f->flags,
               &f->uid, &f->gid, &f->mode, &size, &created, &used) != 8 || used < 0 ||
        !wire_name_valid(record + used) || f->backend != PROTO_BACKEND_HOST)
      return false;
  } else if (strncmp(record, "d.", 2) == 0) {
    if (sscanf(record, "d.%llx.%d.%x.%x.%x.%o.%llx.%llx.%llx.%32[0-9a-f].%n", &id, &f->backend,
               &f->flags, &f->uid, &f->gid, &f->mode, &size, &allocated, &created, hex,
               &used) != 10 || used < 0 || strlen(hex) != 32 || !wire_name_valid(record + used) ||
        f->backend != PROTO_BACKEND_CUDA_FD)
      return false;
    for (int i = 0; i < 16; i++)
      f->uuid[i] = (uint8_t)(hex_digit(hex[2 * i]) << 4 | hex_digit(hex[2 * i + 1]));
  } else {
    return false;
  }
  snprintf(name, len, "%s", record + used);
  f->id = id;
  f->size = size;
  f->allocated = allocated;
  f->created = created;
  f->name = name;
  if (f->backend == PROTO_BACKEND_CUDA_FD)
    return device_record(f, canonical, sizeof canonical) && strcmp(canonical, record) == 0;
  return true;
}

/* A buffer's metadata, from its companion record: read into a->metadata_buf, its fd
 * closed.  Its bytes, or -1 with why. */
static ssize_t take_metadata(const struct reg_store *store, uint64_t id, struct reg_adopt_args *a,
                             const char **why)
{
  char name[REG_RECORD_MAX];
  uint8_t extra;
  ssize_t n;
  int fd;

  metadata_record(id, name, sizeof name);
  if ((fd = store->take(store->ctx, name)) < 0) {
    *why = "its metadata is missing";
    return -1;
  }
  n = pread(fd, a->metadata_buf, sizeof a->metadata_buf, 0);
  /* the daemon wrote at most the limit: more is not its record */
  if (n <= 0 || pread(fd, &extra, 1, n) != 0) {
    close(fd);
    *why = "its metadata is not metadata this daemon wrote";
    return -1;
  }
  close(fd);
  return n;
}

/* A promise made to the previous daemon: its connection ended with that daemon, and
 * nobody here would ever break it (the process may be gone, and no connection of this
 * daemon's is its): broken now, so that no waiter waits for ever, once the releases
 * published before have landed (processes that outlived the old daemon may still have
 * writes queued), GPUSHM_PROMISE_ADOPT_WAIT_MS at most: this is start-up.  A promiser
 * that lives on finds its next release refused (the counter is past it) and promises
 * anew. */
#define ADOPT_PAUSE_MS 10
#define ADOPT_TRIES ((int)(GPUSHM_PROMISE_ADOPT_WAIT_MS / ADOPT_PAUSE_MS))

void reg_buffer_break_adopted_promise(struct reg_object *obj, const char *what)
{
  struct reg_buffer *b = reg_buffer_of(obj);
  struct reg_broken_promise out;
  char err[256];
  uint64_t upto, last;
  int r, tries = 0;

  if ((r = sync_adopted_promise(&b->sync_state, &upto, &last, err, sizeof err)) == 0 && upto) {
    while ((r = break_recorded(obj, tries >= ADOPT_TRIES, last, &out, err, sizeof err)) == 2) {
      struct timespec pause = { 0, ADOPT_PAUSE_MS * 1000000L };
      nanosleep(&pause, NULL);
      tries++;
    }
  }
  if (r < 0)
    log_warn("%s: a promise made before the restart could not be broken, waiters of its "
             "values may wait: %s", what, err);
  else if (upto)
    log_warn("%s: values %llu to %llu promised before the restart count as lost (the "
             "promiser's connection ended with the previous daemon)%s", what, (unsigned long long)out.lost_from + 1, (unsigned long long)upto,
             tries >= ADOPT_TRIES ? "; its earlier releases had not landed in time" : "");
}

static int buffer_adopt_record(struct registry *reg, const char *record, int fd,
                               const struct reg_store *store, const struct reg_adopt_sink *emit,
                               unsigned *records, char *err, size_t errlen)
{
  const struct backend *be = NULL;
  struct record_fields f;
  struct reg_adopt_args a;
  struct reg_buffer *b;
  struct backend_mem control = { .fd = -1 };
  char name[REG_RECORD_MAX], why[200];
  const char *missing = NULL;
  bool parsed;
  ssize_t m = 0;
  int r, control_fd = -1;

  if (strncmp(record, "m.", 2) != 0 && strncmp(record, "d.", 2) != 0)
    return 0;
  parsed = parse_record(record, &f, a.name_buf, sizeof a.name_buf);
  if (!parsed || !(be = registry_backend(reg, f.backend)) || !persists(be)) {
    snprintf(why, sizeof why, parsed ? "this daemon does not offer its backend"
                                     : "not a record this daemon understands");
    r = PROTO_E_INVAL;
    goto drop;
  }
  if ((f.flags & RECORD_FLAG_METADATA) && (m = take_metadata(store, f.id, &a, &missing)) < 0) {
    snprintf(why, sizeof why, "%s", missing);
    r = PROTO_E_INVAL;
    goto drop;
  }
  if (f.flags & RECORD_FLAG_SYNC) {
    control_record(f.id, name, sizeof name);
    if ((control_fd = store->take(store->ctx, name)) < 0) {
      snprintf(why, sizeof why, "its control block is missing");
      r = PROTO_E_INVAL;
      goto drop;
    }
    if ((r = backend_host.adopt(&backend_host, control_fd, NULL, SYNC_CONTROL_SIZE, NULL,
                                &control, &(int){ 0 }, why, sizeof why)) < 0)
      goto drop;
  }
  if (!(b = calloc(1, sizeof *b))) {
    snprintf(why, sizeof why, "daemon out of memory");
    r = PROTO_E_NOMEM;
    goto drop;
  }
  b->obj.allocated = f.allocated;
  if ((r = be->adopt(be, fd, f.uuid, f.size, &b->obj.allocated, &b->mem, &b->obj.device, why,
                     sizeof why)) < 0) {
    free(b);
    goto drop;
  }
  fd = -1; /* the memory's now */
  if (control.fd >= 0) {
    if ((r = sync_adopt(&b->sync_state, &control, a.name_buf, why, sizeof why)) < 0) {
      be->release(be, &b->mem);
      free(b);
      goto drop;
    }
    control_fd = -1;
    control.fd = -1;
    b->sync = true;
    b->fence_offset = fence_offset_of(be, f.size, b->obj.allocated);
  }
  b->obj.ops = &reg_kind_buffer;
  b->obj.kind = REG_BUFFER;
  b->obj.backend = be;
  if (b->sync) {
    char what[GPUSHM_LIMIT_NAME_LEN + 40];
    snprintf(what, sizeof what, "persistent sync buffer '%s'", a.name_buf);
    reg_buffer_break_adopted_promise(&b->obj, what);
  }
  b->obj.host_bytes = host_bytes_of(b);
  a.id = f.id;
  a.name = a.name_buf;
  a.size = f.size;
  a.owner_uid = f.uid;
  a.owner_gid = f.gid;
  a.mode = f.mode;
  a.created_unix_ms = f.created;
  a.metadata = m ? a.metadata_buf : NULL;
  a.metadata_len = (size_t)m;
  if ((r = emit->emit(emit->ctx, &b->obj, &a, why, sizeof why)) < 0) {
    buffer_release(reg, &b->obj);
    free(b->obj.metadata);
    free(b);
    goto drop; /* its records are named as deposited: the flags say what it had */
  }
  *records = (unsigned)records_of(b);
  return 1;

drop:
  /* What cannot come back goes from the store, companions and all; said with its name,
   * which is what its users know it by. */
  if (parsed)
    snprintf(err, errlen, "persistent %s buffer '%s' (id %llu): %s",
             f.backend == PROTO_BACKEND_HOST ? "host" : "cuda-fd", a.name_buf,
             (unsigned long long)f.id, why);
  else
    snprintf(err, errlen, "record '%s': %s", record, why);
  store->remove(store->ctx, record);
  if (fd >= 0)
    close(fd);
  if (control.fd >= 0)
    backend_host.release(&backend_host, &control);
  else if (control_fd >= 0)
    close(control_fd);
  if (parsed && (f.flags & RECORD_FLAG_SYNC)) {
    control_record(f.id, name, sizeof name);
    store->remove(store->ctx, name);
  }
  if (parsed && (f.flags & RECORD_FLAG_METADATA)) {
    metadata_record(f.id, name, sizeof name);
    store->remove(store->ctx, name);
  }
  return r;
}

const struct reg_kind_ops reg_kind_buffer = {
  .name = "buffer",
  .kind = REG_BUFFER,
  .object_size = sizeof(struct reg_buffer),
  .check = buffer_check,
  .select = buffer_select,
  .estimate = buffer_estimate,
  .alloc = buffer_alloc,
  .export = buffer_export,
  .release = buffer_release,
  .describe = buffer_describe,
  .raise_fence = reg_buffer_raise_fence,
  .promise = reg_buffer_promise,
  .break_promise = reg_buffer_break_promise,
  .persists = buffer_persists,
  .deposit_records = buffer_deposit_records,
  .deposit = buffer_deposit,
  .withdraw = buffer_withdraw,
  .adopt_record = buffer_adopt_record,
};
