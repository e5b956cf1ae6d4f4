/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "registry/kind.h"
#include "registry/registry.h"
#include "registry/state.h"
#include "protocol.h"
#include "util/log.h"
#include "wire.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_unix_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static struct reg_object *object_of(struct reg_key *key)
{
  return (struct reg_object *)key; /* the key is its first member */
}

static struct quota_limits quota_limits_of(const struct reg_limits *l)
{
  return (struct quota_limits){
    .max_objects_per_uid = l->max_buffers_per_uid,
    .max_bytes_per_uid = l->max_bytes_per_uid,
    .max_host_bytes_per_uid = l->max_host_bytes_per_uid,
    .host_budget = l->host_budget,
    .max_device_bytes_per_uid = l->max_device_bytes_per_uid,
  };
}

/* A device segment is its class's uid's device memory (segment.h's seg_charge). */
static int take_segment(void *ctx, uid_t uid, int device, uint64_t bytes, char *err,
                        size_t errlen)
{
  struct registry *reg = ctx;
  const struct quota_limits limits = quota_limits_of(&reg->limits);
  int r;

  if ((r = quota_check_device(&reg->quota, &limits, uid, device, bytes, err, errlen)) < 0)
    return r;
  if (quota_device_add(&reg->quota, uid, device, bytes) < 0) {
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  return 0;
}

static void give_back_segment(void *ctx, uid_t uid, int device, uint64_t bytes)
{
  struct registry *reg = ctx;
  quota_device_sub(&reg->quota, uid, device, bytes);
}

int registry_init(struct registry *reg, const struct reg_limits *limits)
{
  memset(reg, 0, sizeof *reg);
  if (names_init(&reg->names) < 0)
    return PROTO_E_NOMEM;
  reg->next_id = 1;
  reg->auto_backend = PROTO_BACKEND_HOST;
  seg_table_init(&reg->segs, limits->pool_bytes);
  reg->segs.charge = (struct seg_charge){ take_segment, give_back_segment, reg };
  registry_set_limits(reg, limits);
  return 0;
}

const struct reg_limits *registry_limits(const struct registry *reg)
{
  return &reg->limits;
}

void registry_set_limits(struct registry *reg, const struct reg_limits *limits)
{
  reg->limits = *limits;
  if (!reg->limits.default_mode)
    reg->limits.default_mode = 0600;
  reg->segs.pool_limit = limits->pool_bytes;
}

void registry_set_events(struct registry *reg, const struct event_source *events)
{
  reg->events = events;
}

void registry_set_persist_dedicated(struct registry *reg, bool dedicated)
{
  reg->persist_dedicated = dedicated;
}

void registry_set_hooks(struct registry *reg, void (*on_unlink)(void *, struct reg_object *),
                        void (*on_created)(void *, struct reg_object *), void *ctx)
{
  reg->on_unlink = on_unlink;
  reg->on_created = on_created;
  reg->hooks_ctx = ctx;
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
  list_init(&client->created);
}

void registry_uid_usage(const struct registry *reg, uid_t uid, uint32_t *buffers, uint64_t *bytes,
                        uint64_t *host_bytes)
{
  quota_of(&reg->quota, uid, buffers, bytes, host_bytes);
}

void registry_totals(const struct registry *reg, struct reg_totals *out)
{
  out->objects = reg->names.n;
  out->linked = reg->names.n_linked;
  out->bytes_allocated = reg->bytes_allocated;
  out->host_bytes = reg->quota.host_bytes;
  out->next_id = reg->next_id;
}

const struct reg_tally *registry_tally(const struct registry *reg)
{
  return &reg->tally;
}

int registry_listed_backend(const struct reg_object *obj)
{
  struct reg_description d;

  obj->ops->describe(obj, &d);
  return d.backend;
}

/* sign: 1 as obj comes in, -1 as it goes (what came in with it, since neither its
 * place, its image nor its allocation change meanwhile). */
static void tally(struct registry *reg, const struct reg_object *obj, int sign)
{
  const int backend = registry_listed_backend(obj), device = obj->device + 1;
  struct reg_description d;
  struct reg_count *c;

  obj->ops->describe(obj, &d);
  reg->bytes_allocated += sign > 0 ? obj->allocated : -obj->allocated;
  if (backend >= 0 && backend < REG_TALLY_BACKENDS && device >= 0 && device < REG_TALLY_DEVICES) {
    c = &reg->tally.place[backend][device];
    c->objects += (uint64_t)(int64_t)sign;
    c->bytes += sign > 0 ? obj->allocated : -obj->allocated;
  }
  if (d.image && d.image->format < REG_TALLY_FORMATS && d.image->tiling < 2) {
    c = &reg->tally.image[d.image->format][d.image->tiling];
    c->objects += (uint64_t)(int64_t)sign;
    c->bytes += sign > 0 ? obj->allocated : -obj->allocated;
  }
}

void registry_describe(const struct reg_object *obj, struct reg_description *out)
{
  obj->ops->describe(obj, out);
}

size_t registry_count(const struct registry *reg)
{
  return reg->names.n;
}

struct reg_object *registry_at(const struct registry *reg, size_t i)
{
  return object_of(reg->names.by_id[i]);
}

size_t registry_index_after(const struct registry *reg, uint64_t after_id)
{
  return ids_index_after(&reg->names, after_id);
}

struct reg_object *registry_find_id(const struct registry *reg, uint64_t id)
{
  struct reg_key *key = ids_find(&reg->names, id);
  return key ? object_of(key) : NULL;
}

struct usage_walk {
  struct reg_segment_usage *rows;
  size_t n, max;
};

static void add_segment(void *arg, const struct seg_class *cls, const struct segment *seg,
                        bool pooled)
{
  struct usage_walk *w = arg;
  struct reg_segment_usage *u = NULL;

  for (size_t i = 0; i < w->n && !u; i++)
    if (w->rows[i].backend == cls->key.backend && w->rows[i].device == cls->key.device)
      u = &w->rows[i];
  if (!u) {
    if (w->n == w->max)
      return;
    u = &w->rows[w->n++];
    *u = (struct reg_segment_usage){ .backend = cls->key.backend, .device = cls->key.device };
  }
  if (pooled) {
    u->pooled++;
    u->pooled_bytes += seg->bytes;
    return;
  }
  u->segments++;
  u->bytes += seg->bytes;
  u->bytes_used += (uint64_t)seg->n_used * seg->slot;
  u->mappings += seg->n_mappers;
}

size_t registry_segment_usage(const struct registry *reg, struct reg_segment_usage *out,
                              size_t max)
{
  struct usage_walk w = { .rows = out, .max = max };

  seg_each(&reg->segs, add_segment, &w);
  for (size_t i = 0; i < w.n; i++) {
    const struct seg_counters *c = seg_counters(&reg->segs, out[i].backend, out[i].device);
    out[i].carved = c->carved;
    out[i].driver_allocs = c->driver_allocs;
  }
  return w.n;
}

void registry_client_mapped(const struct reg_client *client, uint32_t *segments, uint64_t *bytes)
{
  *segments = 0;
  *bytes = 0;
  for (const struct list *m = client->mappings.next; m != &client->mappings; m = m->next) {
    (*segments)++;
    *bytes += list_entry(m, struct seg_mapping, client_link)->seg->bytes;
  }
}

ssize_t registry_detach_segments(struct registry *reg, struct reg_client *client,
                                 struct segment ***segs)
{
  return seg_client_detach(&reg->segs, &client->mappings, segs);
}

void registry_undetach_segment(struct registry *reg, struct segment *seg)
{
  seg_undetach(&reg->segs, seg);
}

void registry_retire_segments(struct registry *reg, struct reg_client *client)
{
  seg_client_retire(&reg->segs, &client->mappings);
}

bool registry_events_available(const struct registry *reg)
{
  return reg->events && !(reg->events->unavailable && reg->events->unavailable(reg->events));
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
  return PROTO_E_NOENT;
}

static struct reg_holding *find_holding(const struct reg_object *buffer,
                                        const struct reg_client *client)
{
  /* The client's side, by id: a hot object may have many holders, a client many
   * holdings, and neither number may make an open dearer. */
  const uint64_t hash = hash_table_hash_ids(0, buffer->id);

  for (struct hash_link *l = hash_table_chain(&client->holdings_by_id, hash); l; l = l->next) {
    struct reg_holding *h = list_entry(l, struct reg_holding, by_id);
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

/* What obj costs its uid: device memory is what is not host memory, of its device; a
 * carved buffer's is its segment's, charged whole to the class's uid (seg_charge). */
static struct quota_cost cost_of(const struct reg_object *obj)
{
  struct reg_description d;

  obj->ops->describe(obj, &d);
  return (struct quota_cost){
    .bytes = obj->allocated,
    .host = obj->host_bytes,
    .device = obj->device,
    .device_bytes = obj->device >= 0 && !d.segment_id && obj->allocated > obj->host_bytes
                      ? obj->allocated - obj->host_bytes : 0,
  };
}

static void charge_quota(struct registry *reg, uid_t uid, const struct reg_object *obj)
{
  const struct quota_cost c = cost_of(obj);
  quota_charge(&reg->quota, uid, &c);
}

static void release_quota(struct registry *reg, uid_t uid, const struct reg_object *obj)
{
  const struct quota_cost c = cost_of(obj);
  quota_release(&reg->quota, uid, &c);
}

/* "a buffer", "an event", "a timeline", "a ring", "a weight set": what a caller meant,
 * and what a name is. */
static const char *kind_article(enum reg_kind kind)
{
  return kind == REG_EVENT ? "an event" : kind == REG_TIMELINE ? "a timeline"
         : kind == REG_RING ? "a ring" : kind == REG_WEIGHTS ? "a weight set" : "a buffer";
}

static void unpin(struct registry *reg, struct reg_object *obj);

static void free_object(struct registry *reg, struct reg_object *obj)
{
  /* Unlink and free differ when holders keep an unlinked buffer: operators asking
   * where memory went need both. */
  log_event(LOG_LEVEL_DEBUG,
            LOG_FIELDS(.buffer = obj->name, .buffer_id = obj->id, .bytes = obj->allocated,
                       .has_bytes = true),
            "'%s' (id %llu, %llu bytes) freed", obj->name, (unsigned long long)obj->id,
            (unsigned long long)obj->allocated);
  ids_remove(&reg->names, &obj->key);
  tally(reg, obj, -1);
  if (obj->creator)
    list_del(&obj->creator_link);
  quota_host_sub(&reg->quota, obj->host_bytes);
  if (!obj->charged_to_holders)
    release_quota(reg, obj->owner_uid, obj);
  obj->ops->release(reg, obj);
  /* Pinners come after what they pin (a publish names buffers that exist), and
   * registry_destroy frees from the newest down: what this unpins is still here. */
  for (uint32_t i = 0; i < obj->n_pinned; i++)
    unpin(reg, obj->pinned[i]);
  free(obj->pinned);
  free(obj->metadata);
  free(obj);
}

/* The object's own copy of metadata (none for 0 bytes). */
static int copy_metadata(struct reg_object *obj, const uint8_t *metadata, size_t len)
{
  if (!len)
    return 0;
  if (!(obj->metadata = malloc(len)))
    return PROTO_E_NOMEM;
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
static void charge_holders(struct registry *reg, struct reg_object *obj)
{
  release_quota(reg, obj->owner_uid, obj);
  for (const struct list *l = obj->holdings.next; l != &obj->holdings; l = l->next) {
    const struct reg_holding *h = list_entry(l, struct reg_holding, buffer_link);
    bool seen = false;
    for (const struct list *e = obj->holdings.next; e != l && !seen; e = e->next)
      seen = list_entry(e, struct reg_holding, buffer_link)->client->uid == h->client->uid;
    if (!seen)
      charge_quota(reg, h->client->uid, obj);
  }
  obj->charged_to_holders = true;
}

/* Nameless and unheld objects go; a pinned one stays charged to its owner, who put its
 * memory where a pinner keeps it, until the last pinner goes. */
static void unlinked(struct registry *reg, struct reg_object *obj)
{
  if (obj->ops->unlinked)
    obj->ops->unlinked(reg, obj);
  if (reg->on_unlink)
    reg->on_unlink(reg->hooks_ctx, obj);
  if (obj->pins)
    return;
  if (obj->refs == 0)
    free_object(reg, obj);
  else
    charge_holders(reg, obj);
}

static void unlink_object(struct registry *reg, struct reg_object *obj)
{
  names_unlink(&reg->names, &obj->key);
  unlinked(reg, obj);
}

static void unpin(struct registry *reg, struct reg_object *obj)
{
  if (--obj->pins || obj->linked)
    return;
  if (obj->refs == 0)
    free_object(reg, obj);
  else
    charge_holders(reg, obj);
}

static int add_ref(struct reg_object *obj, struct reg_client *client, bool write, char *err,
                   size_t errlen)
{
  struct reg_holding *h = find_holding(obj, client);

  if (h && h->refs >= GPUSHM_LIMIT_REFS_PER_HOLDING) {
    snprintf(err, errlen, "connection holds %u references to '%s' (limit)", h->refs, obj->name);
    return PROTO_E_LIMIT;
  }
  if (!h) {
    if (!(h = calloc(1, sizeof *h))) {
      snprintf(err, errlen, "out of memory");
      return PROTO_E_NOMEM;
    }
    h->buffer = obj;
    h->client = client;
    list_add_tail(&client->holdings, &h->client_link);
    list_add_tail(&obj->holdings, &h->buffer_link);
    hash_table_insert(&client->holdings_by_id, &h->by_id, hash_table_hash_ids(0, obj->id));
    obj->n_holders++;
  }
  h->refs++;
  h->read_write |= write;
  obj->refs++;
  return 0;
}

/* A client let go of a ring: it consumes no more, and its done timeline goes (those
 * that hold it keep it, raised past every frame). */
static void detach_consumer(struct registry *reg, struct reg_object *ring, uint32_t client_id,
                            bool now)
{
  uint64_t done_id = ring->ops->detach(reg, ring, client_id, now);
  struct reg_object *done = done_id ? registry_find_id(reg, done_id) : NULL;

  if (done && done->linked)
    unlink_object(reg, done);
}

/* Drops count references of one holding; frees the object when it was the last
 * reference to an unlinked one. */
static void drop_refs(struct registry *reg, struct reg_holding *h, uint32_t count)
{
  struct reg_object *obj = h->buffer;

  h->refs -= count;
  obj->refs -= count;
  if (h->refs == 0 && obj->ops->detach)
    detach_consumer(reg, obj, h->client->id, false);
  if (h->refs == 0) {
    if (obj->charged_to_holders && !uid_holds(obj, h->client->uid, h))
      release_quota(reg, h->client->uid, obj);
    list_del(&h->client_link);
    list_del(&h->buffer_link);
    hash_table_remove(&h->client->holdings_by_id, &h->by_id);
    obj->n_holders--;
    free(h);
  }
  if (obj->refs == 0 && !obj->linked && !obj->pins)
    free_object(reg, obj);
}

/* What a client needs to reach the object; on failure no fd is left open. */
static int export_object(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                         const struct reg_policy *policy, bool read_only, struct reg_export *out,
                         char *err, size_t errlen)
{
  memset(out, 0, sizeof *out);
  out->buffer = obj;
  out->read_only = read_only;
  return obj->ops->export(reg, obj, client, policy, read_only, out, err, errlen);
}

/* Takes back an object this create made before anyone could learn of it: its name was
 * never seen, so no unlink is announced. */
static void discard_new(struct registry *reg, struct reg_object *obj, struct reg_client *client)
{
  struct reg_holding *h = find_holding(obj, client);

  if (obj->linked)
    names_unlink(&reg->names, &obj->key);
  if (h)
    drop_refs(reg, h, h->refs); /* the last one: frees it */
  else
    free_object(reg, obj);
}

static const char *kind_name(const struct reg_object *obj)
{
  struct reg_description d;
  obj->ops->describe(obj, &d);
  return d.kind;
}

/* What every kind's create must satisfy, before the kind checks its own. */
static int check_common(const struct reg_create_args *args, char *err, size_t errlen)
{
  if (args->reserved_name ? !args->name[0] || strlen(args->name) > GPUSHM_LIMIT_NAME_LEN
                          : !wire_name_valid(args->name)) {
    snprintf(err, errlen, "invalid name: use 1-%u characters of [A-Za-z0-9._-], not starting "
             "with '.' or '-'", GPUSHM_LIMIT_NAME_LEN);
    return PROTO_E_NAME;
  }
  if (args->metadata_len > GPUSHM_LIMIT_METADATA) {
    snprintf(err, errlen, "metadata of %zu bytes is over the limit of %u", args->metadata_len,
             GPUSHM_LIMIT_METADATA);
    return PROTO_E_LIMIT;
  }
  if ((unsigned)args->kind >= REG_KIND_COUNT) {
    snprintf(err, errlen, "unknown object kind %d", (int)args->kind);
    return PROTO_E_INVAL;
  }
  if (args->mode & ~0777u) {
    snprintf(err, errlen, "mode %o has bits outside 0777", args->mode);
    return PROTO_E_INVAL;
  }
  if (args->lifetime != PROTO_LIFETIME_PERSISTENT && args->lifetime != PROTO_LIFETIME_SESSION) {
    snprintf(err, errlen, "unknown lifetime %d", args->lifetime);
    return PROTO_E_INVAL;
  }
  return 0;
}

/* Mode bits a device backend cannot keep: read without write for group or others.  Its
 * readers are sent a handle or fd that the driver maps read-write for whoever holds it
 * (docs/security.md), so such a mode would promise what nobody enforces.  Registered
 * NVIDIA memory is the same: every opener gets a dup of the registrant's fd. */
static int check_mode_kept(const struct reg_create_args *args, uint32_t mode,
                           const struct backend *be, const struct reg_kind_ops *ops, char *err,
                           size_t errlen)
{
  const bool group = (mode & 040) && !(mode & 020), other = (mode & 04) && !(mode & 02);

  /* no memory (events), or kept: host memory, registered memfds (be NULL: a read-only
   * reopen); registered NVIDIA memory is checked by cuda-fd, and its readers get a dup
   * of the OPAQUE_FD */
  if (!be || be->kind == PROTO_BACKEND_HOST || (!group && !other))
    return 0;
  snprintf(err, errlen, "mode %04o gives %s read-only access, which %s cannot keep (readers get "
           "an %s that maps it read-write): use 0%o, 0%o or the host backend%s; "
           "docs/security.md", mode, group && other ? "group and others" : group ? "its group"
           : "others", ops->memory_name ? ops->memory_name : be->name,
           be->kind == PROTO_BACKEND_CUDA_IPC ? "IPC handle" : "fd",
           mode | (group ? 020 : 0) | (other ? 02 : 0),
           mode & ~(uint32_t)(group ? 040 : 0) & ~(uint32_t)(other ? 04 : 0),
           args->strict_mode ? "" : " (gpushmd's strict-modes setting)");
  return PROTO_E_INVAL;
}

/* open-existing: the caller's own object of the same kind, backend and sync, opened. */
static int join_existing(struct registry *reg, struct reg_client *client,
                         const struct reg_policy *policy, struct reg_object *found,
                         const struct reg_create_args *args, const struct backend *be,
                         struct reg_export *out, char *err, size_t errlen)
{
  struct reg_description d;

  if (!args->open_existing) {
    snprintf(err, errlen, "'%s' already exists", args->name);
    return PROTO_E_EXIST;
  }
  /* Joining a buffer someone else created would hand the caller memory its squatter
   * can read and write (names are global, like /dev/shm's): open-or-create joins only
   * the caller's own buffers.  Opening by name is the explicit way to trust another
   * owner. */
  if (found->owner_uid != client->uid) {
    snprintf(err, errlen, "'%s' already exists and belongs to another user; "
             "GPUSHM_CREATE_OPEN_EXISTING joins only buffers of your own uid", args->name);
    return PROTO_E_EXIST;
  }
  registry_describe(found, &d);
  if (found->kind != args->kind || found->backend != be || d.sync != args->sync || d.image ||
      d.external) {
    if (found->backend)
      snprintf(err, errlen, "'%s' already exists as a %s %s", args->name, found->backend->name,
               kind_name(found));
    else
      snprintf(err, errlen, "'%s' already exists as an %s", args->name, kind_name(found));
    return PROTO_E_EXIST;
  }
  /* joining asks for the same promise of the mode it finds */
  if (args->strict_mode || reg->limits.strict_modes) {
    int r = check_mode_kept(args, found->mode, found->backend, found->ops, err, errlen);
    if (r < 0)
      return r;
  }
  return registry_open(reg, client, policy, args->name, 0, false, args->kind, out, err, errlen);
}

/* Whether a reader of a set of mode set_mode may read buf too: its group's and others'
 * read bits at least the set's (the owner's are the owner's business). */
static bool readable_as_set(const struct reg_object *buf, uint32_t set_mode, gid_t set_gid)
{
  return !(set_mode & 044 & ~buf->mode) && (!(set_mode & 040) || buf->owner_gid == set_gid);
}

/* A publish under args->name: the generation the name denotes now (which the caller
 * must be allowed to write and which must be the one args->weights->after names), and
 * the buffers, each held read-write by the caller and by nobody else (a generation does
 * not change under its readers), plain memory, readable by whoever may read the set. */
static int resolve_publish(struct registry *reg, struct reg_client *client,
                           const struct reg_create_args *args, struct reg_key *found,
                           char *err, size_t errlen)
{
  struct reg_weights_args *w = args->weights;
  struct reg_object *prev = found ? object_of(found) : NULL;
  const uint32_t set_mode = prev ? prev->mode : args->mode ? args->mode
                                                            : reg->limits.default_mode;
  const gid_t set_gid = prev ? prev->owner_gid : args->has_group ? args->group : client->gid;

  /* of a name it may not see, a caller learns that it is taken, as a create would */
  if (prev && !registry_may_see(client, prev) && !client->admin) {
    snprintf(err, errlen, "'%s' already exists", args->name);
    return PROTO_E_EXIST;
  }
  if (prev && prev->kind != REG_WEIGHTS) {
    snprintf(err, errlen, "'%s' already exists as %s", args->name, kind_article(prev->kind));
    return PROTO_E_EXIST;
  }
  if (prev && !registry_may_access(client, prev, true)) {
    snprintf(err, errlen, "weight set '%s' (mode %03o, owner %u:%u) denies publishing to uid %u",
             prev->name, prev->mode, (unsigned)prev->owner_uid, (unsigned)prev->owner_gid,
             (unsigned)client->uid);
    return PROTO_E_PERM;
  }
  if (w->after) {
    struct reg_description d;
    if (!prev) {
      snprintf(err, errlen, "no weight set '%s' to publish after generation %llu", args->name,
               (unsigned long long)w->after);
      return PROTO_E_NOENT;
    }
    registry_describe(prev, &d);
    if (d.weights->generation != w->after) {
      snprintf(err, errlen, "'%s' is at generation %llu, not %llu: another publisher came "
               "first", args->name, (unsigned long long)d.weights->generation,
               (unsigned long long)w->after);
      return PROTO_E_EXIST;
    }
  }
  if (w->n_buffers == 0 || w->n_buffers > GPUSHM_LIMIT_WEIGHT_BUFFERS) {
    snprintf(err, errlen, "a generation's tensors lie in 1 to %u buffers "
             "(GPUSHM_LIMIT_WEIGHT_BUFFERS), not %u", GPUSHM_LIMIT_WEIGHT_BUFFERS, w->n_buffers);
    return w->n_buffers ? PROTO_E_LIMIT : PROTO_E_INVAL;
  }
  if (!(w->buffers = calloc(w->n_buffers, sizeof *w->buffers))) {
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  for (uint32_t i = 0; i < w->n_buffers; i++) {
    struct reg_object *b = registry_find_id(reg, w->buffer_ids[i]);
    const struct reg_holding *h = b ? find_holding(b, client) : NULL;
    struct reg_description d;

    if (!h || !h->read_write) {
      snprintf(err, errlen, "buffer %llu: a publisher holds each buffer of its generation "
               "read-write (it wrote them)", (unsigned long long)w->buffer_ids[i]);
      goto fail;
    }
    registry_describe(b, &d);
    if (b->kind != REG_BUFFER || d.image || d.external) {
      snprintf(err, errlen, "'%s' is %s: a generation's tensors lie in plain buffers",
               b->name, d.image ? "an image" : d.external ? "registered memory"
                                             : kind_article(b->kind));
      goto fail;
    }
    for (const struct list *l = b->holdings.next; l != &b->holdings; l = l->next) {
      const struct reg_holding *o = list_entry(l, struct reg_holding, buffer_link);
      if (o->client != client && o->read_write) {
        snprintf(err, errlen, "'%s' is open read-write by client %u (pid %d) too: publish it "
                 "once only its writer holds it, so that it does not change under readers",
                 b->name, o->client->id, (int)o->client->pid);
        goto fail;
      }
    }
    if (!readable_as_set(b, set_mode, set_gid)) {
      snprintf(err, errlen, "'%s' (mode %03o, group %u) is less readable than weight set "
               "'%s' (mode %03o, group %u): its readers could open the set and not its memory",
               b->name, b->mode, (unsigned)b->owner_gid, args->name, set_mode,
               (unsigned)set_gid);
      goto fail;
    }
    for (uint32_t j = 0; j < i; j++)
      if (w->buffers[j] == b) {
        snprintf(err, errlen, "'%s' is named twice: a generation lists each buffer once",
                 b->name);
        goto fail;
      }
    w->buffers[i] = b;
  }
  w->previous = prev;
  return 0;

fail:
  free(w->buffers);
  w->buffers = NULL;
  return PROTO_E_INVAL;
}

int registry_create(struct registry *reg, struct reg_client *client,
                    const struct reg_policy *policy, const struct reg_create_args *args,
                    struct reg_export *out, char *err, size_t errlen)
{
  const struct quota_limits limits = quota_limits_of(&reg->limits);
  const struct reg_kind_ops *ops;
  const struct backend *be = NULL;
  struct reg_object *obj;
  struct reg_object *prev = NULL;
  struct reg_key *found;
  /* a weight-set generation is immutable: its publisher holds it as a reader does */
  const bool read_only = args->kind == REG_WEIGHTS;
  int r;

  memset(out, 0, sizeof *out);
  if ((r = check_common(args, err, errlen)) < 0)
    return r;
  /* A group the creator is in: one that it could chgrp a file of its own to.  Root may
   * name any. */
  if (args->has_group && client->uid != 0 && !registry_client_in_group(client, args->group)) {
    snprintf(err, errlen, "uid %u is not in group %u: a buffer's group is one its creator "
             "belongs to (id -G lists them; a group joined since login needs a new login)",
             (unsigned)client->uid, (unsigned)args->group);
    return PROTO_E_PERM;
  }
  ops = reg_kind_for(args);
  found = names_lookup(&reg->names, args->name);
  if (args->kind == REG_WEIGHTS) {
    /* a generation's checks need what the name denotes now */
    if (!args->weights) {
      snprintf(err, errlen, "a weight set is published");
      return PROTO_E_INVAL;
    }
    if ((r = resolve_publish(reg, client, args, found, err, errlen)) < 0)
      return r;
    prev = args->weights->previous;
    found = NULL;
  }
  if (ops->check && (r = ops->check(reg, args, policy, &be, err, errlen)) < 0)
    goto unresolve;
  if (found)
    return join_existing(reg, client, policy, object_of(found), args, be, out, err, errlen);
  if (ops->select)
    ops = ops->select(reg, args, policy, be);
  if ((args->strict_mode || reg->limits.strict_modes) &&
      (r = check_mode_kept(args, args->mode ? args->mode : reg->limits.default_mode, be, ops,
                           err, errlen)) < 0)
    goto unresolve;

  /* Before allocating: committing host pages beyond the budget is what must not happen. */
  {
    struct quota_cost c;
    ops->estimate(reg, args, be, &c);
    if ((r = quota_check(&reg->quota, &limits, prev ? prev->owner_uid : client->uid, &c, err,
                         errlen)) < 0)
      goto unresolve;
  }
  if (names_reserve(&reg->names) < 0 || !(obj = calloc(1, ops->object_size)))
    goto oom;
  if (copy_metadata(obj, args->metadata, args->metadata_len) < 0) {
    free(obj);
    goto oom;
  }
  obj->kind = args->kind;
  obj->ops = ops;
  if ((r = ops->alloc(reg, obj, args, be, client, err, errlen)) < 0) {
    free(obj->metadata);
    free(obj);
    goto unresolve;
  }
  /* Again with the rounded size: the backend's granule may push it over the quota. */
  {
    const struct quota_cost c = cost_of(obj);
    r = quota_check(&reg->quota, &limits, prev ? prev->owner_uid : client->uid, &c, err,
                    errlen);
  }
  if (r < 0) {
    ops->release(reg, obj);
    free(obj->metadata);
    free(obj);
    goto unresolve;
  }

  obj->id = reg->next_id++;
  snprintf(obj->name, sizeof obj->name, "%s", args->name);
  if (!obj->size) /* a kind may say (a ring's is all its slots') */
    obj->size = args->size;
  obj->owner_uid = client->uid;
  obj->owner_gid = args->has_group ? args->group : client->gid;
  obj->mode = args->mode ? args->mode : reg->limits.default_mode;
  obj->lifetime = args->lifetime;
  obj->creator = args->lifetime == PROTO_LIFETIME_SESSION ? client : NULL;
  if (prev) { /* a set's next generation: the set's owner, mode and lifetime */
    obj->owner_uid = prev->owner_uid;
    obj->owner_gid = prev->owner_gid;
    obj->mode = prev->mode;
    obj->lifetime = prev->lifetime;
    obj->creator = prev->creator;
  }
  list_init(&obj->creator_link);
  /* the creator's list, which a later generation of a session set published by another
   * connection joins too: the set goes with its creator (the registry owns clients) */
  if (obj->creator)
    list_add_tail(&((struct reg_client *)obj->creator)->created, &obj->creator_link);
  obj->creator_pid = client->pid;
  obj->created_unix_ms = now_unix_ms();
  list_init(&obj->holdings);

  charge_quota(reg, obj->owner_uid, obj);
  quota_host_add(&reg->quota, obj->host_bytes);
  tally(reg, obj, 1);
  ids_add(&reg->names, &obj->key);
  if (args->weights) {
    obj->pinned = args->weights->buffers;
    obj->n_pinned = args->weights->n_buffers;
    args->weights->buffers = NULL;
    for (uint32_t i = 0; i < obj->n_pinned; i++)
      obj->pinned[i]->pins++;
  }
  /* A generation takes the name once exported to its publisher, who may still be
   * refused (a reference limit, no fd left) while the name denotes the one before. */
  if (!args->weights)
    names_link(&reg->names, &obj->key);
  if ((r = add_ref(obj, client, !read_only, err, errlen)) < 0 ||
      (r = export_object(reg, obj, client, policy, read_only, out, err, errlen)) < 0) {
    discard_new(reg, obj, client);
    return r;
  }
  if (args->weights) {
    if (prev)
      names_unlink(&reg->names, &prev->key);
    names_link(&reg->names, &obj->key);
    if (ops->linked)
      ops->linked(reg, obj);
    if (prev)
      unlinked(reg, prev); /* may free it */
  }
  out->created = true;
  if (reg->on_created)
    reg->on_created(reg->hooks_ctx, obj);
  return 0;

oom:
  snprintf(err, errlen, "daemon out of memory");
  r = PROTO_E_NOMEM;
unresolve:
  if (args->weights) {
    free(args->weights->buffers);
    args->weights->buffers = NULL;
  }
  return r;
}

static int lookup_name(const struct registry *reg, const char *name, struct reg_object **out,
                       char *err, size_t errlen)
{
  struct reg_key *key;

  if (!wire_name_valid(name)) {
    snprintf(err, errlen, "invalid name");
    return PROTO_E_NAME;
  }
  if (!(key = names_lookup(&reg->names, name))) {
    snprintf(err, errlen, "no buffer named '%s'", name);
    return PROTO_E_NOENT;
  }
  *out = object_of(key);
  return 0;
}


/* A ring consumer's done timeline is read by the ring's producers, those that hold it
 * read-write (unlinked or not: they go on waiting on its consumers), whatever its own
 * mode says (its consumer's alone, 0600). */
static bool ring_consumer_readable(const struct registry *reg, const struct reg_client *client,
                                   const struct reg_object *obj, bool write)
{
  const struct reg_object *ring;
  const struct reg_holding *h;

  return obj->ring_of && !write && (ring = registry_find_id(reg, obj->ring_of)) &&
         ring->kind == REG_RING && (h = find_holding(ring, client)) && h->read_write;
}

int registry_open(struct registry *reg, struct reg_client *client,
                  const struct reg_policy *policy, const char *name, uint64_t id,
                  bool read_only, enum reg_kind kind, struct reg_export *out, char *err,
                  size_t errlen)
{
  const bool write = !read_only;
  struct reg_object *obj;
  bool ring_reader;
  int r;

  memset(out, 0, sizeof *out);
  if (name) {
    if ((r = lookup_name(reg, name, &obj, err, errlen)) < 0)
      return r;
  } else {
    obj = registry_find_id(reg, id);
    /* An unlinked buffer takes no new holders, by id no more than by name. */
    if (!obj || !obj->linked)
      return not_found(NULL, id, err, errlen);
  }
  ring_reader = ring_consumer_readable(reg, client, obj, write);
  if (!registry_may_see(client, obj) && !client->admin && !ring_reader)
    return not_found(name, id, err, errlen);
  /* Buffers and events share one namespace; opening one as the other is an error,
   * found before any reference is taken. */
  if (obj->kind != kind) {
    snprintf(err, errlen, "'%s' is %s, not %s", obj->name, kind_article(obj->kind),
             kind_article(kind));
    return PROTO_E_INVAL;
  }
  if (!ring_reader && !registry_may_access(client, obj, write)) {
    snprintf(err, errlen, "'%s' (mode %03o, owner %u:%u) denies %s access to uid %u",
             obj->name, obj->mode, (unsigned)obj->owner_uid, (unsigned)obj->owner_gid,
             write ? "read-write" : "read", (unsigned)client->uid);
    return PROTO_E_PERM;
  }
  if (write && (obj->pins || obj->kind == REG_WEIGHTS)) {
    snprintf(err, errlen, "'%s' is %s published weights, which do not change: open it "
             "read-only (publish a new generation to change them)", obj->name,
             obj->kind == REG_WEIGHTS ? "a weight set's" : "memory of");
    return PROTO_E_PERM;
  }
  /* One role a connection: a consumer's connection reading its fellow consumers' done
   * timelines as a producer would also hold its own read-only beside read-write, and a
   * close of either would not be the consumer's. */
  if (write && obj->ops->consumer && obj->ops->consumer(obj, client->id)) {
    snprintf(err, errlen, "this connection consumes ring '%s': produce on a connection of "
             "its own", obj->name);
    return PROTO_E_INVAL;
  }
  if ((r = add_ref(obj, client, write, err, errlen)) < 0)
    return r;
  if ((r = export_object(reg, obj, client, policy, read_only, out, err, errlen)) < 0) {
    drop_refs(reg, find_holding(obj, client), 1); /* linked: it stays */
    return r;
  }
  return 0;
}

int registry_open_via(struct registry *reg, struct reg_client *client,
                      const struct reg_policy *policy, uint64_t id, uint64_t via_id,
                      struct reg_export *out, char *err, size_t errlen)
{
  struct reg_object *gen = registry_find_id(reg, via_id), *obj = NULL;
  int r;

  memset(out, 0, sizeof *out);
  if (!gen || gen->kind != REG_WEIGHTS || !find_holding(gen, client)) {
    snprintf(err, errlen, "this connection holds no weight-set generation with id %llu: open "
             "the set, then its buffers", (unsigned long long)via_id);
    return PROTO_E_NOENT;
  }
  for (uint32_t i = 0; i < gen->n_pinned && !obj; i++)
    if (gen->pinned[i]->id == id)
      obj = gen->pinned[i];
  if (!obj) {
    snprintf(err, errlen, "weight set '%s' has no buffer with id %llu", gen->name,
             (unsigned long long)id);
    return PROTO_E_NOENT;
  }
  /* its segment may hold its owner's other buffers: its own mode decides */
  if (!registry_may_access(client, obj, false)) {
    snprintf(err, errlen, "'%s', a buffer of weight set '%s' (mode %03o, owner %u:%u), denies "
             "read access to uid %u", obj->name, gen->name, obj->mode,
             (unsigned)obj->owner_uid, (unsigned)obj->owner_gid, (unsigned)client->uid);
    return PROTO_E_PERM;
  }
  if ((r = add_ref(obj, client, false, err, errlen)) < 0)
    return r;
  if ((r = export_object(reg, obj, client, policy, true, out, err, errlen)) < 0) {
    drop_refs(reg, find_holding(obj, client), 1); /* pinned: it stays */
    return r;
  }
  return 0;
}

int registry_ring_attach(struct registry *reg, struct reg_client *client,
                         const struct reg_policy *policy, uint64_t ring_id,
                         struct reg_export *out, char *err, size_t errlen)
{
  struct reg_object *ring = registry_find_id(reg, ring_id), *done;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  const struct reg_holding *h;
  uint64_t done_id;
  int r;

  memset(out, 0, sizeof *out);
  if (!ring || ring->kind != REG_RING || !(h = find_holding(ring, client))) {
    snprintf(err, errlen, "this connection holds no ring with id %llu: open the ring, then "
             "attach", (unsigned long long)ring_id);
    return PROTO_E_NOENT;
  }
  if ((done_id = ring->ops->consumer(ring, client->id))) {
    snprintf(err, errlen, "this connection consumes ring '%s' already: one consumer a "
             "connection", ring->name);
    return PROTO_E_EXIST;
  }
  if (h->read_write) {
    snprintf(err, errlen, "this connection produces into ring '%s': consume on a connection "
             "of its own", ring->name);
    return PROTO_E_INVAL;
  }
  /* its limits before anything is made */
  if ((r = ring->ops->attach(reg, ring, client->id, client->uid, NULL, err, errlen)) < 0)
    return r;
  /* '#' is no client's to spell: nobody takes the name first or opens it by name.  The
   * ring's and the client's ids keep it apart from every other (the ring's name is cut
   * to fit). */
  snprintf(name, sizeof name, "%.*s#%llu.%u", (int)(GPUSHM_LIMIT_NAME_LEN - 32), ring->name,
           (unsigned long long)ring->id, client->id);
  {
    const struct reg_create_args args = {
      .kind = REG_TIMELINE, .name = name, .mode = 0600, .lifetime = PROTO_LIFETIME_SESSION,
      .sync = true, .reserved_name = true,
    };
    if ((r = registry_create(reg, client, policy, &args, out, err, errlen)) < 0)
      return r;
  }
  done = out->buffer;
  done->ring_of = ring->id;
  if ((r = ring->ops->attach(reg, ring, client->id, client->uid, done, err, errlen)) < 0) {
    registry_export_close_fds(out);
    unlink_object(reg, done);
    drop_refs(reg, find_holding(done, client), 1); /* the last: frees it */
    memset(out, 0, sizeof *out);
    return r;
  }
  return 0;
}

bool registry_ring_consumer(const struct reg_object *obj, uint32_t client_id)
{
  return obj->ops->consumer && obj->ops->consumer(obj, client_id) != 0;
}

int registry_ring_request(struct registry *reg, struct reg_client *client, uint64_t ring_id,
                          bool detach, uint64_t evict, char *err, size_t errlen)
{
  struct reg_object *ring = registry_find_id(reg, ring_id);
  const struct reg_holding *h = ring ? find_holding(ring, client) : NULL;
  uint32_t evicted;

  if (!h || ring->kind != REG_RING) {
    snprintf(err, errlen, "this connection holds no ring with id %llu",
             (unsigned long long)ring_id);
    return PROTO_E_NOENT;
  }
  if (detach)
    detach_consumer(reg, ring, client->id, false);
  if (!evict)
    return 0;
  if (!h->read_write) {
    snprintf(err, errlen, "evicting a consumer of '%s' is a producer's: open the ring "
             "read-write", ring->name);
    return PROTO_E_PERM;
  }
  if (!(evicted = ring->ops->consumer_of(ring, evict))) {
    snprintf(err, errlen, "no consumer of '%s' has done timeline %llu (any more)", ring->name,
             (unsigned long long)evict);
    return PROTO_E_NOENT;
  }
  /* At once, promise or not: the consumer is alive, and its writes no longer count. */
  detach_consumer(reg, ring, evicted, true);
  log_warn("ring '%s' (id %llu): client %u evicted its consumer client %u (done timeline "
           "%llu)", ring->name, (unsigned long long)ring->id, client->id, evicted,
           (unsigned long long)evict);
  return 0;
}

/* As in a sticky /dev/shm: only the owner (or an admin) removes a name. */
static bool may_unlink(const struct reg_client *client, const struct reg_object *obj)
{
  return client->admin || client->uid == 0 || client->uid == obj->owner_uid;
}

int registry_close(struct registry *reg, struct reg_client *client, uint64_t id, bool unlink,
                   bool unmap_segment, bool read_only, char *err, size_t errlen)
{
  struct reg_object *obj = registry_find_id(reg, id);
  struct reg_holding *h = obj ? find_holding(obj, client) : NULL;
  struct reg_description d;
  bool last_handle;
  int r = 0;

  if (!h) {
    snprintf(err, errlen, "this connection holds no reference to buffer %llu",
             (unsigned long long)id);
    return PROTO_E_NOENT;
  }
  registry_describe(obj, &d);
  last_handle = h->refs == 1;
  if (unlink && obj->linked) {
    if (may_unlink(client, obj)) {
      unlink_object(reg, obj); /* held: it stays until the reference goes below */
    } else {
      snprintf(err, errlen, "'%s' belongs to uid %u: closed, not unlinked", obj->name,
               (unsigned)obj->owner_uid);
      r = PROTO_E_PERM;
    }
  }
  drop_refs(reg, h, 1);
  /* Its promise would be kept by nobody now: the server breaks it (fence_repair.h).
   * Not if the close freed the buffer: nobody holds it, so nobody waits. */
  if (last_handle && d.promiser == client->id && reg->closed_promiser &&
      registry_find_id(reg, id))
    reg->closed_promiser(reg->hooks_ctx, id, client->id, client->pid, client->uid);
  if (unmap_segment && d.segment_id &&
      seg_unmap(&reg->segs, &client->mappings, d.segment_id, read_only) < 0 && r == 0) {
    snprintf(err, errlen, "this connection does not map segment %llu %s",
             (unsigned long long)d.segment_id, read_only ? "read-only" : "read-write");
    r = PROTO_E_NOENT;
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
  return PROTO_E_NOENT;
}

int registry_unlink(struct registry *reg, struct reg_client *client, const char *name,
                    char *err, size_t errlen)
{
  struct reg_object *obj;
  int r;

  if ((r = lookup_name(reg, name, &obj, err, errlen)) < 0)
    return r;
  if (!registry_may_see(client, obj) && !client->admin)
    return not_found(name, 0, err, errlen);
  if (!may_unlink(client, obj)) {
    snprintf(err, errlen, "'%s' belongs to uid %u", name, (unsigned)obj->owner_uid);
    return PROTO_E_PERM;
  }
  unlink_object(reg, obj);
  return 0;
}

void registry_client_gone(struct registry *reg, struct reg_client *client)
{
  /* Unlink session objects first, so that dropping the last reference below frees
   * them.  Its own list, in the order they were made: a walk of every object cost
   * each disconnect time in proportion to all of them (issue 36). */
  while (!list_empty(&client->created)) {
    struct reg_object *obj = list_entry(client->created.next, struct reg_object, creator_link);
    list_del(&obj->creator_link);
    obj->creator = NULL;
    if (obj->linked)
      unlink_object(reg, obj); /* may free it */
  }
  while (client->holdings.next != &client->holdings) {
    struct reg_holding *h = list_entry(client->holdings.next, struct reg_holding, client_link);
    drop_refs(reg, h, h->refs);
  }
  seg_client_gone(&reg->segs, &client->mappings);
  hash_table_free(&client->holdings_by_id);
  free(client->groups);
  client->groups = NULL;
  client->n_groups = 0;
}

void registry_destroy(struct registry *reg)
{
  /* Shutting down removes no name: persistent buffers stay deposited for the next
   * daemon, so nobody is told of unlinks. */
  reg->on_unlink = NULL;
  reg->closed_promiser = NULL;
  reg->on_created = NULL;
  reg->stopping = true; /* and their memory stays as it is, for the same reason */
  while (registry_count(reg)) {
    struct reg_object *obj = registry_at(reg, registry_count(reg) - 1);
    while (obj->holdings.next != &obj->holdings) {
      struct reg_holding *h = list_entry(obj->holdings.next, struct reg_holding, buffer_link);
      list_del(&h->client_link);
      list_del(&h->buffer_link);
      hash_table_remove(&h->client->holdings_by_id, &h->by_id);
      free(h);
    }
    obj->refs = 0;
    if (obj->linked)
      unlink_object(reg, obj); /* frees it */
    else
      free_object(reg, obj);
  }
  seg_table_destroy(&reg->segs);
  names_destroy(&reg->names);
  quota_destroy(&reg->quota);
  memset(reg, 0, sizeof *reg);
}

struct registry *registry_new(const struct reg_limits *limits)
{
  struct registry *reg = malloc(sizeof *reg);

  if (reg && registry_init(reg, limits) < 0) {
    free(reg);
    reg = NULL;
  }
  return reg;
}

void registry_free(struct registry *reg)
{
  if (!reg)
    return;
  registry_destroy(reg);
  free(reg);
}


bool registry_persists(const struct registry *reg, const struct reg_object *obj)
{
  return obj->lifetime == PROTO_LIFETIME_PERSISTENT && obj->ops->persists &&
         obj->ops->persists(reg, obj);
}

unsigned registry_deposit_records(const struct registry *reg, const struct reg_object *obj)
{
  return registry_persists(reg, obj) ? obj->ops->deposit_records(reg, obj) : 0;
}

int registry_deposit(struct registry *reg, struct reg_object *obj, const struct reg_store *store,
                     char *err, size_t errlen)
{
  int r;

  if (!registry_persists(reg, obj)) {
    snprintf(err, errlen, "it does not outlive gpushmd");
    return -EINVAL;
  }
  if ((r = obj->ops->deposit(reg, obj, store, err, errlen)) >= 0)
    obj->persisted = true;
  return r;
}

int registry_withdraw(struct registry *reg, struct reg_object *obj, const struct reg_store *store)
{
  if (!obj->persisted)
    return 0;
  obj->persisted = false;
  return obj->ops->withdraw(reg, obj, store);
}

/* The registry's end of reg_adopt_sink: an object a kind brought back, inserted under
 * its old id and name, unheld. */
static int adopted(void *ctx, struct reg_object *obj, const struct reg_adopt_args *a, char *err,
                   size_t errlen)
{
  struct registry *reg = ctx;

  if (!wire_name_valid(a->name) || a->id == 0 || (a->mode & ~0777u) ||
      a->metadata_len > GPUSHM_LIMIT_METADATA) {
    snprintf(err, errlen, "invalid record");
    return PROTO_E_INVAL;
  }
  if (names_lookup(&reg->names, a->name) || registry_find_id(reg, a->id)) {
    snprintf(err, errlen, "'%s' (id %llu) is already in the registry", a->name,
             (unsigned long long)a->id);
    return PROTO_E_EXIST;
  }
  if (names_reserve(&reg->names) < 0 || copy_metadata(obj, a->metadata, a->metadata_len) < 0) {
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  obj->id = a->id;
  snprintf(obj->name, sizeof obj->name, "%s", a->name);
  obj->size = a->size;
  obj->owner_uid = a->owner_uid;
  obj->owner_gid = a->owner_gid;
  obj->mode = a->mode;
  obj->lifetime = PROTO_LIFETIME_PERSISTENT;
  obj->created_unix_ms = a->created_unix_ms;
  obj->persisted = true;
  list_init(&obj->holdings);
  list_init(&obj->creator_link);
  /* Ids stay in order even when records come back in any order. */
  ids_add(&reg->names, &obj->key);
  if (reg->next_id <= a->id)
    reg->next_id = a->id + 1;
  names_link(&reg->names, &obj->key);
  charge_quota(reg, a->owner_uid, obj);
  quota_host_add(&reg->quota, obj->host_bytes);
  tally(reg, obj, 1);
  return 0;
}

int registry_adopt_record(struct registry *reg, const char *record, int fd,
                          const struct reg_store *store, unsigned *records, char *err,
                          size_t errlen)
{
  const struct reg_adopt_sink sink = { .emit = adopted, .ctx = reg };
  int r = 0;

  *records = 0;
  for (size_t i = 0; reg_persistent_kinds[i] && !r; i++)
    r = reg_persistent_kinds[i]->adopt_record(reg, record, fd, store, &sink, records, err,
                                              errlen);
  return r;
}

int registry_raise_fence(struct registry *reg, struct reg_object *obj, uint32_t releaser,
                         bool force, struct reg_raised_fence *out, char *err, size_t errlen)
{
  memset(out, 0, sizeof *out);
  if (!obj->ops->raise_fence)
    return 0;
  return obj->ops->raise_fence(reg, obj, releaser, force, out, err, errlen);
}

int registry_promise(struct registry *reg, struct reg_client *client, uint64_t id,
                     uint32_t releaser, uint64_t upto, char *err, size_t errlen)
{
  struct reg_object *obj = registry_find_id(reg, id);
  struct reg_holding *h = obj ? find_holding(obj, client) : NULL;

  if (!h) {
    snprintf(err, errlen, "this connection holds no reference to buffer %llu",
             (unsigned long long)id);
    return PROTO_E_NOENT;
  }
  if (!h->read_write) {
    snprintf(err, errlen, "'%s' is open read-only here: a promise is of releases, which are "
             "writes; open it read-write", obj->name);
    return PROTO_E_PERM;
  }
  if (!obj->ops->promise) {
    snprintf(err, errlen, "'%s' is not a sync buffer", obj->name);
    return PROTO_E_INVAL;
  }
  return obj->ops->promise(reg, obj, client->id, releaser, upto, err, errlen);
}

int registry_semaphore(struct registry *reg, struct reg_client *client, uint64_t id,
                       struct reg_semaphore_args args, struct reg_semaphore *out, char *err,
                       size_t errlen)
{
  struct reg_object *obj = registry_find_id(reg, id);
  struct reg_holding *h = obj ? find_holding(obj, client) : NULL;

  out->fd = -1;
  if (!h) {
    snprintf(err, errlen, "this connection holds no reference to object %llu",
             (unsigned long long)id);
    return PROTO_E_NOENT;
  }
  if (!obj->ops->semaphore) {
    snprintf(err, errlen, "'%s' is a %s: semaphore planes are timelines' and rings'",
             obj->name, obj->ops->name);
    return PROTO_E_INVAL;
  }
  args.client_id = client->id;
  args.read_write = h->read_write;
  return obj->ops->semaphore(reg, obj, &args, out, err, errlen);
}

int registry_break_promise(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                           bool force, struct reg_broken_promise *out, char *err, size_t errlen)
{
  if (!obj->ops->break_promise)
    return 0;
  return obj->ops->break_promise(reg, obj, client_id, force, out, err, errlen);
}

void registry_set_promise_hook(struct registry *reg,
                               void (*closed_promiser)(void *ctx, uint64_t id, uint32_t client_id,
                                                       pid_t pid, uid_t uid))
{
  reg->closed_promiser = closed_promiser;
}
