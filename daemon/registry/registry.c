#include "config.h"
#include "registry/registry.h"
#include "gpushm.h"
#include "util/log.h"
#include "shm_layout.h"
#include "registry/sync.h"
#include "wire.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "shm_layout.h"

struct reg_uid_usage {
  uid_t uid;
  uint32_t buffers;
  uint64_t bytes;
  uint64_t host_bytes;
  struct reg_uid_usage *next;
};

static uint64_t now_unix_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* FNV-1a: names are short and the table is private, so no need for a keyed hash. */
static size_t name_hash(const char *name)
{
  uint64_t h = 1469598103934665603ull;
  for (; *name; name++)
    h = (h ^ (unsigned char)*name) * 1099511628211ull;
  return (size_t)h;
}

static struct reg_object **name_slot(const struct registry *reg, const char *name)
{
  struct reg_object **slot = &reg->names[name_hash(name) % reg->n_name_buckets];
  while (*slot && strcmp((*slot)->name, name) != 0)
    slot = &(*slot)->name_next;
  return slot;
}

static int names_grow(struct registry *reg)
{
  size_t n = reg->n_name_buckets * 2;
  struct reg_object **table = calloc(n, sizeof *table);
  if (!table)
    return GPUSHM_E_NOMEM;
  for (size_t i = 0; i < reg->n_name_buckets; i++) {
    struct reg_object *b = reg->names[i], *next;
    for (; b; b = next) {
      size_t h = name_hash(b->name) % n;
      next = b->name_next;
      b->name_next = table[h];
      table[h] = b;
    }
  }
  free(reg->names);
  reg->names = table;
  reg->n_name_buckets = n;
  return 0;
}

static int grow_by_id(struct registry *reg)
{
  size_t cap = reg->cap_buffers ? reg->cap_buffers * 2 : 64;
  struct reg_object **grown = realloc(reg->by_id, cap * sizeof *grown);
  if (!grown)
    return GPUSHM_E_NOMEM;
  reg->by_id = grown;
  reg->cap_buffers = cap;
  return 0;
}

int registry_init(struct registry *reg, const struct reg_limits *limits)
{
  memset(reg, 0, sizeof *reg);
  reg->n_name_buckets = 64;
  reg->names = calloc(reg->n_name_buckets, sizeof *reg->names);
  if (!reg->names)
    return GPUSHM_E_NOMEM;
  reg->next_id = 1;
  reg->limits = *limits;
  seg_table_init(&reg->segs, limits->pool_bytes);
  if (!reg->limits.default_mode)
    reg->limits.default_mode = 0600;
  reg->backends[GPUSHM_BACKEND_HOST] = &backend_host;
  reg->backends[GPUSHM_BACKEND_CUDA_IPC] = &backend_cuda_ipc;
  reg->backends[GPUSHM_BACKEND_CUDA_FD] = &backend_cuda_fd;
  reg->backends[GPUSHM_BACKEND_CUDA_FABRIC] = &backend_cuda_fabric;
  reg->events = &event_cuda_ipc;
  return 0;
}

void registry_client_init(struct reg_client *client, uint32_t id, pid_t pid, uid_t uid, gid_t gid)
{
  memset(client, 0, sizeof *client);
  client->id = id;
  client->pid = pid;
  client->uid = uid;
  client->gid = gid;
  list_init(&client->holdings);
  list_init(&client->mappings);
}

static struct reg_uid_usage *usage_for(struct registry *reg, uid_t uid, bool create)
{
  struct reg_uid_usage *u;
  for (u = reg->usage; u; u = u->next)
    if (u->uid == uid)
      return u;
  if (!create || !(u = calloc(1, sizeof *u)))
    return NULL;
  u->uid = uid;
  u->next = reg->usage;
  reg->usage = u;
  return u;
}

/* Host memory a buffer commits: its pages (host backend) and its control block. */
static uint64_t host_bytes_of(const struct reg_object *buffer)
{
  return (buffer->backend && buffer->backend->kind == GPUSHM_BACKEND_HOST ? buffer->allocated : 0) +
         (buffer->sync ? SYNC_CONTROL_SIZE : 0);
}

static void usage_charge(struct registry *reg, uid_t uid, const struct reg_object *buffer)
{
  struct reg_uid_usage *u = usage_for(reg, uid, true);
  if (!u)
    return; /* out of memory: the uid is merely under-counted */
  u->buffers++;
  u->bytes += buffer->allocated;
  u->host_bytes += host_bytes_of(buffer);
}

static void usage_release(struct registry *reg, uid_t uid, const struct reg_object *buffer)
{
  struct reg_uid_usage **p, *u;
  uint64_t host = host_bytes_of(buffer);

  for (p = &reg->usage; (u = *p); p = &u->next) {
    if (u->uid != uid)
      continue;
    /* Saturating: a charge skipped for lack of memory must not wrap the counters. */
    u->buffers -= u->buffers ? 1 : 0;
    u->bytes -= u->bytes < buffer->allocated ? u->bytes : buffer->allocated;
    u->host_bytes -= u->host_bytes < host ? u->host_bytes : host;
    if (u->buffers == 0) {
      *p = u->next;
      free(u);
    }
    return;
  }
}

void registry_uid_usage(const struct registry *reg, uid_t uid, uint32_t *buffers, uint64_t *bytes,
                        uint64_t *host_bytes)
{
  const struct reg_uid_usage *u = reg->usage;
  while (u && u->uid != uid)
    u = u->next;
  *buffers = u ? u->buffers : 0;
  *bytes = u ? u->bytes : 0;
  *host_bytes = u ? u->host_bytes : 0;
}

bool registry_client_in_group(const struct reg_client *client, gid_t gid)
{
  if (client->gid == gid)
    return true;
  for (unsigned i = 0; i < client->n_groups; i++)
    if (client->groups[i] == gid)
      return true;
  return false;
}

bool registry_may_access(const struct reg_client *client, const struct reg_object *buffer,
                         bool write)
{
  uint32_t need = write ? 06 : 04, granted;

  if (client->uid == 0)
    return true;
  if (client->uid == buffer->owner_uid)
    granted = (buffer->mode >> 6) & 07;
  else if (registry_client_in_group(client, buffer->owner_gid))
    granted = (buffer->mode >> 3) & 07;
  else
    granted = buffer->mode & 07;
  return (granted & need) == need;
}

bool registry_may_see(const struct reg_client *client, const struct reg_object *buffer)
{
  return client->uid == 0 || client->uid == buffer->owner_uid ||
         registry_may_access(client, buffer, false) || registry_client_refs(buffer, client) > 0;
}

/* What a caller who may not see a buffer learns about it: exactly what it would learn
 * if there were none (ids are sequential, so anything more would let it map out other
 * users' buffers, their modes and owners). */
static int not_found(const char *name, uint64_t id, char *err, size_t errlen)
{
  if (name)
    snprintf(err, errlen, "no buffer named '%s'", name);
  else
    snprintf(err, errlen, "no buffer with id %llu", (unsigned long long)id);
  return GPUSHM_E_NOENT;
}

struct reg_object *registry_find_id(const struct registry *reg, uint64_t id)
{
  size_t i = registry_index_after(reg, id - 1);
  return i < reg->n_buffers && reg->by_id[i]->id == id ? reg->by_id[i] : NULL;
}

size_t registry_index_after(const struct registry *reg, uint64_t after_id)
{
  size_t lo = 0, hi = reg->n_buffers;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (reg->by_id[mid]->id <= after_id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static struct reg_holding *find_holding(const struct reg_object *buffer,
                                        const struct reg_client *client)
{
  /* Walk the shorter side: a client usually holds few buffers, a hot buffer may
   * have many holders. */
  for (struct list *l = client->holdings.next; l != &client->holdings; l = l->next) {
    struct reg_holding *h = list_entry(l, struct reg_holding, client_link);
    if (h->buffer == buffer)
      return h;
  }
  return NULL;
}

uint32_t registry_client_refs(const struct reg_object *buffer, const struct reg_client *client)
{
  struct reg_holding *h = find_holding(buffer, client);
  return h ? h->refs : 0;
}

static void release_sync(struct reg_object *buffer)
{
  if (buffer->sync)
    sync_release(&buffer->sync_state);
  buffer->sync = false;
}

/* Legacy-IPC buffers also get an inter-process event.  The others synchronise on the
 * control block alone: host buffers on the CPU, cuda-fd buffers through its fence
 * word, which GPUs write and wait on — IPC events open only for the daemon's uid and
 * only in its PID namespace, which is what cuda-fd exists to avoid. */
/* Where a cuda-fd sync buffer's fence lives: the last 8 bytes of its allocation, as far
 * from its data as it gets (do_alloc asked for them; the backend zeroed them, as all new
 * memory); 0: no fence. */
static uint64_t fence_offset_of(const struct backend *be, uint64_t size, uint64_t allocated)
{
  if (!be->fence_in_allocation || allocated < size + SYNC_DEVICE_FENCE_BYTES)
    return 0;
  return allocated - SYNC_DEVICE_FENCE_BYTES;
}

static int alloc_sync(struct registry *reg, struct reg_object *buffer, uint64_t size,
                      const char *name, char *err, size_t errlen)
{
  const struct event_source *events = NULL;
  uint64_t fence = fence_offset_of(buffer->backend, size, buffer->allocated);
  int r;

  if (buffer->backend->kind == GPUSHM_BACKEND_CUDA_IPC) {
    if (!(events = reg->events)) {
      snprintf(err, errlen, "sync needs CUDA events, which this daemon lacks");
      return GPUSHM_E_UNSUPPORTED;
    }
  }
  r = sync_alloc(&buffer->sync_state, events, buffer->device, name, err, errlen);
  if (r == 0) {
    buffer->sync = true;
    buffer->fence_offset = fence;
  }
  return r;
}

/* Gives back what the object holds outside the registry: its memory or its event,
 * and its sync objects. */
static void release_contents(struct registry *reg, struct reg_object *obj)
{
  if (obj->kind == REG_EVENT)
    reg->events->release(reg->events, obj->event);
  else if (obj->segment)
    seg_free_slot(&reg->segs, obj->segment, obj->slot);
  else
    obj->backend->release(obj->backend, &obj->mem);
  obj->segment = NULL;
  obj->event = NULL;
  release_sync(obj);
}

static void free_buffer(struct registry *reg, struct reg_object *buffer)
{
  size_t i = registry_index_after(reg, buffer->id - 1);

  /* Unlink and free differ when holders keep an unlinked buffer: operators asking
   * where memory went need both. */
  log_event(LOG_LEVEL_DEBUG,
            LOG_FIELDS(.buffer = buffer->name, .buffer_id = buffer->id, .bytes = buffer->allocated,
                       .has_bytes = true),
            "'%s' (id %llu, %llu bytes) freed", buffer->name, (unsigned long long)buffer->id,
            (unsigned long long)buffer->allocated);
  memmove(&reg->by_id[i], &reg->by_id[i + 1], (reg->n_buffers - i - 1) * sizeof *reg->by_id);
  reg->n_buffers--;
  reg->bytes_allocated -= buffer->allocated;
  reg->host_bytes -= host_bytes_of(buffer);
  if (!buffer->charged_to_holders)
    usage_release(reg, buffer->owner_uid, buffer);
  release_contents(reg, buffer);
  free(buffer->metadata);
  free(buffer);
}

/* The object's own copy of metadata (none for 0 bytes). */
static int copy_metadata(struct reg_object *obj, const uint8_t *metadata, size_t len)
{
  if (!len)
    return 0;
  if (!(obj->metadata = malloc(len)))
    return GPUSHM_E_NOMEM;
  memcpy(obj->metadata, metadata, len);
  obj->metadata_len = (uint32_t)len;
  return 0;
}

static bool uid_holds(const struct reg_object *buffer, uid_t uid, const struct reg_holding *except)
{
  for (const struct list *l = buffer->holdings.next; l != &buffer->holdings; l = l->next) {
    const struct reg_holding *h = list_entry(l, struct reg_holding, buffer_link);
    if (h != except && h->client->uid == uid)
      return true;
  }
  return false;
}

/* A buffer counts against its owner while it has a name.  Once unlinked it is kept
 * alive only by its holders, so it counts against each uid that still holds it (in
 * full) until that uid lets go: a reader that pins someone's memory pays for it, and
 * the owner may create again at once. */
static void charge_holders(struct registry *reg, struct reg_object *buffer)
{
  usage_release(reg, buffer->owner_uid, buffer);
  for (const struct list *l = buffer->holdings.next; l != &buffer->holdings; l = l->next) {
    const struct reg_holding *h = list_entry(l, struct reg_holding, buffer_link);
    bool seen = false;
    for (const struct list *e = buffer->holdings.next; e != l && !seen; e = e->next)
      seen = list_entry(e, struct reg_holding, buffer_link)->client->uid == h->client->uid;
    if (!seen)
      usage_charge(reg, h->client->uid, buffer);
  }
  buffer->charged_to_holders = true;
}

static void unlink_buffer(struct registry *reg, struct reg_object *buffer)
{
  struct reg_object **slot = name_slot(reg, buffer->name);

  *slot = buffer->name_next;
  buffer->name_next = NULL;
  buffer->linked = false;
  reg->n_linked--;
  if (reg->on_unlink)
    reg->on_unlink(reg->on_unlink_ctx, buffer);
  if (buffer->refs == 0)
    free_buffer(reg, buffer);
  else
    charge_holders(reg, buffer);
}

static int add_ref(struct reg_object *buffer, struct reg_client *client, bool write, char *err,
                   size_t errlen)
{
  struct reg_holding *h = find_holding(buffer, client);

  if (h && h->refs >= GPUSHM_LIMIT_REFS_PER_HOLDING) {
    snprintf(err, errlen, "connection holds %u references to '%s' (limit)", h->refs, buffer->name);
    return GPUSHM_E_LIMIT;
  }
  if (!h) {
    if (!(h = calloc(1, sizeof *h))) {
      snprintf(err, errlen, "out of memory");
      return GPUSHM_E_NOMEM;
    }
    h->buffer = buffer;
    h->client = client;
    list_add_tail(&client->holdings, &h->client_link);
    list_add_tail(&buffer->holdings, &h->buffer_link);
    buffer->n_holders++;
  }
  h->refs++;
  h->read_write |= write;
  buffer->refs++;
  return 0;
}

/* Drops count references of one holding; frees the buffer when it was the last
 * reference to an unlinked buffer. */
static void drop_refs(struct registry *reg, struct reg_holding *h, uint32_t count)
{
  struct reg_object *buffer = h->buffer;

  h->refs -= count;
  buffer->refs -= count;
  if (h->refs == 0) {
    if (buffer->charged_to_holders && !uid_holds(buffer, h->client->uid, h))
      usage_release(reg, h->client->uid, buffer);
    list_del(&h->client_link);
    list_del(&h->buffer_link);
    buffer->n_holders--;
    free(h);
  }
  if (buffer->refs == 0 && !buffer->linked)
    free_buffer(reg, buffer);
}

/* Per-uid quotas are the caller's own problem (GPUSHM_E_LIMIT); the host-memory budget
 * is the daemon's (GPUSHM_E_NOMEM, as an allocation failure would be). */
static int check_quota(struct registry *reg, uid_t uid, uint64_t bytes, uint64_t host_bytes,
                       char *err, size_t errlen)
{
  const struct reg_limits *lim = &reg->limits;
  uint32_t buffers;
  uint64_t used, host_used;

  registry_uid_usage(reg, uid, &buffers, &used, &host_used);
  if (buffers >= lim->max_buffers_per_uid) {
    snprintf(err, errlen, "uid %u already has %u buffers (limit %u)", (unsigned)uid, buffers,
             lim->max_buffers_per_uid);
    return GPUSHM_E_LIMIT;
  }
  if (lim->max_bytes_per_uid && bytes > lim->max_bytes_per_uid - used) {
    snprintf(err, errlen, "uid %u would hold %llu bytes (limit %llu)", (unsigned)uid,
             (unsigned long long)(used + bytes), (unsigned long long)lim->max_bytes_per_uid);
    return GPUSHM_E_LIMIT;
  }
  if (lim->max_host_bytes_per_uid && host_bytes > lim->max_host_bytes_per_uid - host_used) {
    snprintf(err, errlen, "uid %u would hold %llu bytes of host memory (limit %llu)",
             (unsigned)uid, (unsigned long long)(host_used + host_bytes),
             (unsigned long long)lim->max_host_bytes_per_uid);
    return GPUSHM_E_LIMIT;
  }
  if (lim->host_budget && host_bytes > (lim->host_budget > reg->host_bytes
                                          ? lim->host_budget - reg->host_bytes : 0)) {
    snprintf(err, errlen, "gpushmd's host-memory budget is used up: %llu of %llu bytes "
             "allocated, %llu more asked for", (unsigned long long)reg->host_bytes,
             (unsigned long long)lim->host_budget, (unsigned long long)host_bytes);
    return GPUSHM_E_NOMEM;
  }
  return 0;
}

void registry_export_close_fds(struct reg_export *e)
{
  while (e->n_fds)
    close(e->fds[--e->n_fds]);
}

bool registry_backend_allowed(const struct registry *reg, const struct backend *be)
{
  return be->kind != GPUSHM_BACKEND_CUDA_IPC || reg->limits.allow_legacy_ipc;
}

/* Legacy IPC is for one trust domain: a daemon serving many users exports its handles
 * only where the admin said so (allow-legacy-ipc). */
static int legacy_ipc_check(const struct registry *reg, const struct backend *be, char *err,
                            size_t errlen)
{
  if (registry_backend_allowed(reg, be))
    return 0;
  snprintf(err, errlen, "unsupported: cuda-ipc is off on this gpushmd (allow-legacy-ipc): its "
           "handles are bearer tokens any local process can forge; use cuda-fd");
  return GPUSHM_E_UNSUPPORTED;
}

/* What a client needs to reach the object: an event's handle, or the backend's fd or
 * handle and, for sync buffers, the control block's fd (always last) and the event's
 * handle.  On failure no fd is left open. */
static int export_segment(struct reg_object *buffer, struct reg_client *client, bool read_only,
                          struct reg_export *out, char *err, size_t errlen)
{
  struct segment *seg = buffer->segment;
  struct backend_export mem = { .fd = -1 };
  int r;

  if (!client->segments) {
    snprintf(err, errlen, "unsupported: '%s' is carved out of a shared segment, which this "
             "gpushm library does not know (it is older than 0.3)", buffer->name);
    return GPUSHM_E_UNSUPPORTED;
  }
  out->segment_id = seg->id;
  out->segment_offset = (uint64_t)buffer->slot * seg->slot;
  out->segment_size = seg->bytes;
  if (seg_mapped_by(seg, client, read_only))
    return 0;
  r = buffer->backend->export(buffer->backend, &seg->mem, read_only, &mem, err, errlen);
  if (r < 0)
    return r;
  if (seg_map(seg, client, &client->mappings, read_only) < 0) {
    if (mem.fd >= 0)
      close(mem.fd);
    snprintf(err, errlen, "daemon out of memory");
    return GPUSHM_E_NOMEM;
  }
  if (mem.fd >= 0)
    out->fds[out->n_fds++] = mem.fd;
  memcpy(out->handle, mem.handle, mem.handle_len);
  out->handle_len = mem.handle_len;
  out->segment_attached = true;
  return 0;
}

static int export_object(const struct registry *reg, struct reg_object *buffer,
                         struct reg_client *client, bool read_only, struct reg_export *out,
                         char *err, size_t errlen)
{
  struct backend_export mem = { .fd = -1 };
  int r;

  memset(out, 0, sizeof *out);
  out->buffer = buffer;
  out->fence_offset = buffer->fence_offset;
  out->read_only = read_only;
  if (buffer->kind == REG_EVENT)
    return reg->events->export(reg->events, buffer->event, out->handle, &out->handle_len, err,
                               errlen);
  if ((r = legacy_ipc_check(reg, buffer->backend, err, errlen)) < 0)
    return r;
  if (buffer->segment)
    return export_segment(buffer, client, read_only, out, err, errlen); /* never sync */
  r = buffer->backend->export(buffer->backend, &buffer->mem, read_only, &mem, err, errlen);
  if (r < 0)
    return r;
  if (mem.fd >= 0)
    out->fds[out->n_fds++] = mem.fd;
  memcpy(out->handle, mem.handle, mem.handle_len);
  out->handle_len = mem.handle_len;
  if (buffer->sync) {
    r = sync_export(&buffer->sync_state, read_only, &out->fds[out->n_fds], out->event_handle,
                    &out->event_handle_len, err, errlen);
    if (r < 0) {
      registry_export_close_fds(out);
      return r;
    }
    out->n_fds++;
  }
  return 0;
}

/* Takes back a buffer this create made before anyone could learn of it: its name was
 * never seen, so no unlink is announced. */
static void discard_new(struct registry *reg, struct reg_object *buffer,
                        struct reg_client *client)
{
  struct reg_object **slot = name_slot(reg, buffer->name);
  struct reg_holding *h = client ? find_holding(buffer, client) : NULL;

  *slot = buffer->name_next;
  buffer->name_next = NULL;
  buffer->linked = false;
  reg->n_linked--;
  if (h)
    drop_refs(reg, h, h->refs); /* the last one: frees it */
  else
    free_buffer(reg, buffer);
}

static const char *kind_name(const struct reg_object *obj)
{
  return obj->kind == REG_EVENT ? "event" : obj->sync ? "sync buffer" : "buffer";
}

int registry_default_backend(const struct registry *reg, const struct reg_client *client)
{
  if (client && client->default_host_only)
    return GPUSHM_BACKEND_HOST;
  switch (reg->limits.default_backend) {
  case 0:
    return GPUSHM_BACKEND_HOST;
  case REG_DEFAULT_BACKEND_AUTO:
    return reg->cuda_fd_usable ? GPUSHM_BACKEND_CUDA_FD : GPUSHM_BACKEND_HOST;
  default:
    return reg->limits.default_backend;
  }
}

/* Checks what a create asks for before anything is looked up or allocated; *be is the
 * backend of a buffer (NULL for an event). */
static int check_create(const struct registry *reg, const struct reg_client *client,
                        const struct reg_create_args *args, const struct backend **be,
                        char *err, size_t errlen)
{
  int backend = args->backend ? (int)args->backend : registry_default_backend(reg, client);
  const char *why;

  *be = NULL;
  if (!wire_name_valid(args->name)) {
    snprintf(err, errlen, "invalid name: use 1-%u characters of [A-Za-z0-9._-], not starting "
             "with '.' or '-'", GPUSHM_LIMIT_NAME_LEN);
    return GPUSHM_E_NAME;
  }
  if (args->metadata_len > GPUSHM_LIMIT_METADATA) {
    snprintf(err, errlen, "metadata of %zu bytes is over the limit of %u", args->metadata_len,
             GPUSHM_LIMIT_METADATA);
    return GPUSHM_E_LIMIT;
  }
  if (args->kind == REG_EVENT) {
    if (args->size != 0 || args->sync || args->metadata_len) {
      snprintf(err, errlen, "an event has no size, no sync and no metadata of its own");
      return GPUSHM_E_INVAL;
    }
  } else if (args->kind != REG_BUFFER) {
    snprintf(err, errlen, "unknown object kind %d", (int)args->kind);
    return GPUSHM_E_INVAL;
  } else if (args->size == 0 || args->size > GPUSHM_LIMIT_BUFFER_SIZE) {
    snprintf(err, errlen, "size must be 1..%llu bytes",
             (unsigned long long)GPUSHM_LIMIT_BUFFER_SIZE);
    return GPUSHM_E_INVAL;
  }
  if (args->mode & ~0777u) {
    snprintf(err, errlen, "mode %o has bits outside 0777", args->mode);
    return GPUSHM_E_INVAL;
  }
  if (args->lifetime != GPUSHM_LIFETIME_PERSISTENT && args->lifetime != GPUSHM_LIFETIME_SESSION) {
    snprintf(err, errlen, "unknown lifetime %d", args->lifetime);
    return GPUSHM_E_INVAL;
  }
  if (args->kind == REG_EVENT) {
    if (!reg->events) {
      snprintf(err, errlen, "events are not built into this daemon");
      return GPUSHM_E_UNSUPPORTED;
    }
    if (reg->events->unavailable && (why = reg->events->unavailable(reg->events))) {
      snprintf(err, errlen, "unsupported: events unavailable: %s", why);
      return GPUSHM_E_UNSUPPORTED;
    }
    return 0;
  }
  if (backend < 1 || backend >= GPUSHM_BACKEND_COUNT) {
    /* A newer client may know backends this daemon does not. */
    snprintf(err, errlen, "unknown backend %d (this daemon knows 1-%d)", backend,
             GPUSHM_BACKEND_COUNT - 1);
    return GPUSHM_E_UNSUPPORTED;
  }
  if (!(*be = reg->backends[backend])) {
    snprintf(err, errlen, "backend %d is not built into this daemon", backend);
    return GPUSHM_E_UNSUPPORTED;
  }
  if ((*be)->unavailable && (why = (*be)->unavailable(*be))) {
    snprintf(err, errlen, "unsupported: %s backend unavailable: %s", (*be)->name, why);
    return GPUSHM_E_UNSUPPORTED;
  }
  return legacy_ipc_check(reg, *be, err, errlen);
}

/* The slot a create takes in a segment, or 0 when it gets an allocation of its own:
 * sync buffers (their fence and control block go with an allocation), buffers past the
 * carve limit, persistent ones while systemd's fd store keeps them (one fd a buffer), and
 * those of clients that would not understand a carved reply. */
static uint64_t carve_slot(const struct registry *reg, const struct reg_client *client,
                           const struct reg_create_args *args, const struct backend *be)
{
  if (args->kind != REG_BUFFER || args->sync || !client || !client->segments)
    return 0;
  if (reg->persist_dedicated && args->lifetime == GPUSHM_LIFETIME_PERSISTENT &&
      (be->kind == GPUSHM_BACKEND_HOST || be->kind == GPUSHM_BACKEND_CUDA_FD))
    return 0;
  return seg_slot_size(be, args->size);
}

/* Fills a new object with its memory (and sync objects) or its event.  On failure
 * nothing is left allocated. */
static int alloc_contents(struct registry *reg, struct reg_object *obj,
                          const struct reg_client *client, const struct reg_create_args *args,
                          const struct backend *be, char *err, size_t errlen)
{
  uint64_t size;
  int device, r;

  obj->kind = args->kind;
  if (args->kind == REG_EVENT) {
    obj->device = args->device;
    return reg->events->alloc(reg->events, args->device, args->name, &obj->event, err, errlen);
  }
  device = be->kind == GPUSHM_BACKEND_HOST ? -1 : args->device;
  if (carve_slot(reg, client, args, be)) {
    struct seg_key key = {
      .backend = be->kind, .device = device, .uid = client->uid, .gid = client->gid,
      .mode = args->mode ? args->mode : reg->limits.default_mode,
    };
    /* The creator's library (segments-capable: carve_slot checked) clears device memory
     * in its own context. */
    if ((r = seg_carve(&reg->segs, be, &key, args->size, true, &obj->segment, &obj->slot,
                       &obj->dirty, err, errlen)) < 0)
      return r;
    obj->mem = (struct backend_mem){ .fd = -1 };
    obj->allocated = obj->segment->slot;
    obj->backend = be;
    obj->device = device;
    return 0;
  }
  /* A cuda-fd sync buffer's fence rides in its allocation, past the data. */
  size = args->size + (args->sync && be->fence_in_allocation ? SYNC_DEVICE_FENCE_BYTES : 0);
  r = be->alloc(be, size, args->device, args->name, &obj->mem, &obj->allocated, err, errlen);
  /* Warm pools are the first memory to give back. */
  if (r == GPUSHM_E_NOMEM && seg_drain_pools(&reg->segs, be->kind, device))
    r = be->alloc(be, size, args->device, args->name, &obj->mem, &obj->allocated, err, errlen);
  if (r < 0)
    return r;
  obj->backend = be;
  obj->device = device;
  if (args->sync && (r = alloc_sync(reg, obj, args->size, args->name, err, errlen)) < 0) {
    be->release(be, &obj->mem);
    obj->backend = NULL;
  }
  return r;
}

int registry_create(struct registry *reg, struct reg_client *client,
                    const struct reg_create_args *args, struct reg_export *out,
                    char *err, size_t errlen)
{
  const struct backend *be;
  struct reg_object *buffer, **name;
  uint64_t slot;
  int r;

  memset(out, 0, sizeof *out);
  if ((r = check_create(reg, client, args, &be, err, errlen)) < 0)
    return r;

  name = name_slot(reg, args->name);
  if (*name) {
    if (!args->open_existing) {
      snprintf(err, errlen, "'%s' already exists", args->name);
      return GPUSHM_E_EXIST;
    }
    /* Joining a buffer someone else created would hand the caller memory its squatter
     * can read and write (names are global, like /dev/shm's): open-or-create joins
     * only the caller's own buffers.  Opening by name is the explicit way to trust
     * another owner. */
    if ((*name)->owner_uid != client->uid) {
      snprintf(err, errlen, "'%s' already exists and belongs to another user; "
               "GPUSHM_CREATE_OPEN_EXISTING joins only buffers of your own uid", args->name);
      return GPUSHM_E_EXIST;
    }
    if ((*name)->kind != args->kind || (*name)->backend != be || (*name)->sync != args->sync) {
      if ((*name)->backend)
        snprintf(err, errlen, "'%s' already exists as a %s %s", args->name,
                 (*name)->backend->name, kind_name(*name));
      else
        snprintf(err, errlen, "'%s' already exists as an %s", args->name, kind_name(*name));
      return GPUSHM_E_EXIST;
    }
    return registry_open(reg, client, args->name, 0, false, args->kind, out, err, errlen);
  }

  /* Before allocating: committing host pages beyond the budget is what must not happen.
   * A carved buffer takes its whole slot. */
  slot = be ? carve_slot(reg, client, args, be) : 0;
  r = check_quota(reg, client->uid, slot ? slot : args->size,
                  (be && be->kind == GPUSHM_BACKEND_HOST ? (slot ? slot : args->size) : 0) +
                    (args->sync ? SYNC_CONTROL_SIZE : 0),
                  err, errlen);
  if (r < 0)
    return r;
  if (reg->n_buffers == reg->cap_buffers && grow_by_id(reg) < 0)
    goto oom;
  if (reg->n_linked + 1 > reg->n_name_buckets && names_grow(reg) < 0)
    goto oom;
  if (!(buffer = calloc(1, sizeof *buffer)))
    goto oom;
  if (copy_metadata(buffer, args->metadata, args->metadata_len) < 0) {
    free(buffer);
    goto oom;
  }
  if ((r = alloc_contents(reg, buffer, client, args, be, err, errlen)) < 0) {
    free(buffer->metadata);
    free(buffer);
    return r;
  }
  /* Again with the rounded size: the backend's granule may push it over the quota. */
  r = check_quota(reg, client->uid, buffer->allocated, host_bytes_of(buffer), err, errlen);
  if (r < 0) {
    release_contents(reg, buffer);
    free(buffer->metadata);
    free(buffer);
    return r;
  }

  buffer->id = reg->next_id++;
  snprintf(buffer->name, sizeof buffer->name, "%s", args->name);
  buffer->linked = true;
  buffer->size = args->size;
  buffer->owner_uid = client->uid;
  buffer->owner_gid = client->gid;
  buffer->mode = args->mode ? args->mode : reg->limits.default_mode;
  buffer->lifetime = args->lifetime;
  buffer->creator = args->lifetime == GPUSHM_LIFETIME_SESSION ? client : NULL;
  buffer->creator_pid = client->pid;
  buffer->created_unix_ms = now_unix_ms();
  list_init(&buffer->holdings);

  usage_charge(reg, client->uid, buffer);
  reg->bytes_allocated += buffer->allocated;
  reg->host_bytes += host_bytes_of(buffer);
  reg->by_id[reg->n_buffers++] = buffer;
  name = name_slot(reg, args->name); /* names_grow() may have moved the table */
  *name = buffer;
  reg->n_linked++;

  if ((r = add_ref(buffer, client, true, err, errlen)) < 0 ||
      (r = export_object(reg, buffer, client, false, out, err, errlen)) < 0) {
    discard_new(reg, buffer, client);
    return r;
  }
  out->created = true;
  out->clear = buffer->dirty;
  buffer->dirty = false;
  if (reg->on_created)
    reg->on_created(reg->on_unlink_ctx, buffer);
  return 0;

oom:
  snprintf(err, errlen, "daemon out of memory");
  return GPUSHM_E_NOMEM;
}

static int lookup_name(const struct registry *reg, const char *name, struct reg_object **out,
                       char *err, size_t errlen)
{
  if (!wire_name_valid(name)) {
    snprintf(err, errlen, "invalid name");
    return GPUSHM_E_NAME;
  }
  if (!(*out = *name_slot(reg, name))) {
    snprintf(err, errlen, "no buffer named '%s'", name);
    return GPUSHM_E_NOENT;
  }
  return 0;
}

int registry_open(struct registry *reg, struct reg_client *client, const char *name, uint64_t id,
                  bool read_only, enum reg_kind kind, struct reg_export *out, char *err,
                  size_t errlen)
{
  const bool write = !read_only;
  struct reg_object *buffer;
  int r;

  memset(out, 0, sizeof *out);
  if (name) {
    if ((r = lookup_name(reg, name, &buffer, err, errlen)) < 0)
      return r;
  } else {
    buffer = registry_find_id(reg, id);
    /* An unlinked buffer takes no new holders, by id no more than by name. */
    if (!buffer || !buffer->linked)
      return not_found(NULL, id, err, errlen);
  }
  if (!registry_may_see(client, buffer) && !client->admin)
    return not_found(name, id, err, errlen);
  /* Buffers and events share one namespace; opening one as the other is an error,
   * found before any reference is taken. */
  if (buffer->kind != kind) {
    snprintf(err, errlen, "'%s' is %s", buffer->name,
             kind == REG_EVENT ? "a buffer, not an event" : "an event, not a buffer");
    return GPUSHM_E_INVAL;
  }
  if (!registry_may_access(client, buffer, write)) {
    snprintf(err, errlen, "'%s' (mode %03o, owner %u:%u) denies %s access to uid %u",
             buffer->name, buffer->mode, (unsigned)buffer->owner_uid, (unsigned)buffer->owner_gid,
             write ? "read-write" : "read", (unsigned)client->uid);
    return GPUSHM_E_PERM;
  }
  r = add_ref(buffer, client, write, err, errlen);
  if (r < 0)
    return r;
  r = export_object(reg, buffer, client, read_only, out, err, errlen);
  if (r < 0) {
    drop_refs(reg, find_holding(buffer, client), 1); /* linked: it stays */
    return r;
  }
  return 0;
}

/* As in a sticky /dev/shm: only the owner (or an admin) removes a name. */
static bool may_unlink(const struct reg_client *client, const struct reg_object *buffer)
{
  return client->admin || client->uid == 0 || client->uid == buffer->owner_uid;
}

int registry_close(struct registry *reg, struct reg_client *client, uint64_t id, bool unlink,
                   bool unmap_segment, bool read_only, char *err, size_t errlen)
{
  struct reg_object *buffer = registry_find_id(reg, id);
  struct reg_holding *h = buffer ? find_holding(buffer, client) : NULL;
  uint64_t segment_id;
  int r = 0;

  if (!h) {
    snprintf(err, errlen, "this connection holds no reference to buffer %llu",
             (unsigned long long)id);
    return GPUSHM_E_NOENT;
  }
  segment_id = buffer->segment ? buffer->segment->id : 0;
  if (unlink && buffer->linked) {
    if (may_unlink(client, buffer)) {
      unlink_buffer(reg, buffer); /* held: it stays until the reference goes below */
    } else {
      snprintf(err, errlen, "'%s' belongs to uid %u: closed, not unlinked", buffer->name,
               (unsigned)buffer->owner_uid);
      r = GPUSHM_E_PERM;
    }
  }
  drop_refs(reg, h, 1);
  if (unmap_segment && segment_id &&
      seg_unmap(&reg->segs, &client->mappings, segment_id, read_only) < 0 && r == 0) {
    snprintf(err, errlen, "this connection does not map segment %llu %s",
             (unsigned long long)segment_id, read_only ? "read-only" : "read-write");
    r = GPUSHM_E_NOENT;
  }
  return r;
}

int registry_unmap(struct registry *reg, struct reg_client *client, uint64_t segment_id,
                   bool read_only, char *err, size_t errlen)
{
  if (seg_unmap(&reg->segs, &client->mappings, segment_id, read_only) == 0)
    return 0;
  snprintf(err, errlen, "this connection does not map segment %llu %s",
           (unsigned long long)segment_id, read_only ? "read-only" : "read-write");
  return GPUSHM_E_NOENT;
}

int registry_unlink(struct registry *reg, struct reg_client *client, const char *name,
                    char *err, size_t errlen)
{
  struct reg_object *buffer;
  int r;

  if ((r = lookup_name(reg, name, &buffer, err, errlen)) < 0)
    return r;
  if (!registry_may_see(client, buffer) && !client->admin)
    return not_found(name, 0, err, errlen);
  if (!may_unlink(client, buffer)) {
    snprintf(err, errlen, "'%s' belongs to uid %u", name, (unsigned)buffer->owner_uid);
    return GPUSHM_E_PERM;
  }
  unlink_buffer(reg, buffer);
  return 0;
}

void registry_client_gone(struct registry *reg, struct reg_client *client)
{
  /* Unlink session buffers first, so that dropping the last reference below frees
   * them.  Unlinking one nobody holds frees it at once and shifts by_id down: the
   * walk then stays at the same index. */
  for (size_t i = 0; i < reg->n_buffers;) {
    struct reg_object *b = reg->by_id[i];
    if (b->linked && b->creator == client) {
      size_t before = reg->n_buffers;
      unlink_buffer(reg, b);
      if (reg->n_buffers < before)
        continue; /* freed: the same index now holds the next buffer */
    }
    if (b->creator == client)
      b->creator = NULL;
    i++;
  }
  while (client->holdings.next != &client->holdings) {
    struct reg_holding *h = list_entry(client->holdings.next, struct reg_holding, client_link);
    drop_refs(reg, h, h->refs);
  }
  seg_client_gone(&reg->segs, &client->mappings);
  free(client->groups);
  client->groups = NULL;
  client->n_groups = 0;
}

void registry_destroy(struct registry *reg)
{
  /* Shutting down removes no name: persistent buffers stay deposited for the next
   * daemon, so nobody is told of unlinks. */
  reg->on_unlink = NULL;
  reg->on_created = NULL;
  while (reg->n_buffers) {
    struct reg_object *b = reg->by_id[reg->n_buffers - 1];
    while (b->holdings.next != &b->holdings) {
      struct reg_holding *h = list_entry(b->holdings.next, struct reg_holding, buffer_link);
      list_del(&h->client_link);
      list_del(&h->buffer_link);
      free(h);
    }
    b->refs = 0;
    if (b->linked)
      unlink_buffer(reg, b); /* frees it */
    else
      free_buffer(reg, b);
  }
  seg_table_destroy(&reg->segs);
  free(reg->by_id);
  free(reg->names);
  while (reg->usage) {
    struct reg_uid_usage *u = reg->usage;
    reg->usage = u->next;
    free(u);
  }
  memset(reg, 0, sizeof *reg);
}

int registry_adopt(struct registry *reg, const struct reg_adopt_args *a, struct backend_mem *mem,
                   struct backend_mem *control, char *err, size_t errlen)
{
  const struct backend *be = a->backend >= 1 && a->backend < GPUSHM_BACKEND_COUNT
                               ? reg->backends[a->backend] : NULL;
  struct reg_object *buffer, **slot;
  size_t at;
  int r;

  if (!be || !wire_name_valid(a->name) || a->id == 0 || (a->mode & ~0777u) ||
      (be->kind != GPUSHM_BACKEND_HOST && a->device < 0) ||
      a->metadata_len > GPUSHM_LIMIT_METADATA) {
    snprintf(err, errlen, "invalid record");
    return GPUSHM_E_INVAL;
  }
  if (*(slot = name_slot(reg, a->name)) || registry_find_id(reg, a->id)) {
    snprintf(err, errlen, "'%s' (id %llu) is already in the registry", a->name,
             (unsigned long long)a->id);
    return GPUSHM_E_EXIST;
  }
  if ((reg->n_buffers == reg->cap_buffers && grow_by_id(reg) < 0) ||
      (reg->n_linked + 1 > reg->n_name_buckets && names_grow(reg) < 0) ||
      !(buffer = calloc(1, sizeof *buffer))) {
    snprintf(err, errlen, "daemon out of memory");
    return GPUSHM_E_NOMEM;
  }
  if (copy_metadata(buffer, a->metadata, a->metadata_len) < 0) {
    free(buffer);
    snprintf(err, errlen, "daemon out of memory");
    return GPUSHM_E_NOMEM;
  }
  if (control && (r = sync_adopt(&buffer->sync_state, control, a->name, err, errlen)) < 0) {
    free(buffer->metadata);
    free(buffer);
    return r;
  }
  buffer->sync = control != NULL;
  buffer->fence_offset = control ? fence_offset_of(be, a->size, a->allocated) : 0;
  buffer->kind = REG_BUFFER;
  buffer->id = a->id;
  snprintf(buffer->name, sizeof buffer->name, "%s", a->name);
  buffer->linked = true;
  buffer->persisted = true;
  buffer->size = a->size;
  buffer->allocated = a->allocated;
  buffer->backend = be;
  buffer->device = be->kind == GPUSHM_BACKEND_HOST ? -1 : a->device;
  buffer->owner_uid = a->owner_uid;
  buffer->owner_gid = a->owner_gid;
  buffer->mode = a->mode;
  buffer->lifetime = GPUSHM_LIFETIME_PERSISTENT;
  buffer->created_unix_ms = a->created_unix_ms;
  buffer->mem = *mem;
  list_init(&buffer->holdings);
  /* Ids stay in order even when records come back in any order. */
  at = registry_index_after(reg, a->id);
  memmove(&reg->by_id[at + 1], &reg->by_id[at], (reg->n_buffers - at) * sizeof *reg->by_id);
  reg->by_id[at] = buffer;
  reg->n_buffers++;
  if (reg->next_id <= a->id)
    reg->next_id = a->id + 1;
  slot = name_slot(reg, a->name);
  *slot = buffer;
  reg->n_linked++;
  usage_charge(reg, a->owner_uid, buffer);
  reg->bytes_allocated += buffer->allocated;
  reg->host_bytes += host_bytes_of(buffer);
  return 0;
}
