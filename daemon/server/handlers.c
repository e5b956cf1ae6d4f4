/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/handlers.h"
#include "server/metrics.h"
#include "server/detached.h"
#include "protocol.h"
#include "list_codec.h"
#include "util/log.h"
#include "wire.h"
#include "backends/backend_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(struct handler_reply *ctx, int status, const char *why)
{
  snprintf(ctx->msg, sizeof ctx->msg, "%s", why);
  return status;
}

/* Memory that lives until the reply is sent; NULL when out of memory. */
static void *reply_own(struct handler_reply *ctx, void *p)
{
  if (p)
    ctx->owned[ctx->n_owned++] = p;
  return p;
}

static void *reply_calloc(struct handler_reply *ctx, size_t n, size_t size)
{
  return ctx->n_owned < HANDLER_OWNED_MAX ? reply_own(ctx, calloc(n ? n : 1, size)) : NULL;
}

static void *reply_malloc(struct handler_reply *ctx, size_t size)
{
  return ctx->n_owned < HANDLER_OWNED_MAX ? reply_own(ctx, malloc(size ? size : 1)) : NULL;
}

/* The devices the CUDA backends can use; free memory only where the daemon holds a
 * context (asking elsewhere would create one). */
static int fill_devices(struct handler_reply *ctx, Gpushm__Device ***out, size_t *n_out)
{
  *out = NULL;
  *n_out = 0;
  int n = backend_cuda_device_count();
  Gpushm__Device *devs, **ptrs;
  struct cuda_device_info *infos;

  if (n == 0)
    return 0;
  devs = reply_calloc(ctx, (size_t)n, sizeof *devs);
  ptrs = reply_calloc(ctx, (size_t)n, sizeof *ptrs);
  infos = reply_calloc(ctx, (size_t)n, sizeof *infos);
  if (!devs || !ptrs || !infos)
    return fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  for (int i = 0; i < n; i++) {
    backend_cuda_device_info(i, &infos[i]);
    gpushm__device__init(&devs[i]);
    devs[i].ordinal = infos[i].ordinal;
    devs[i].name = infos[i].name;
    devs[i].uuid.data = infos[i].uuid;
    devs[i].uuid.len = sizeof infos[i].uuid;
    devs[i].total_memory = infos[i].total_memory;
    devs[i].free_memory = infos[i].free_memory;
    ptrs[i] = &devs[i];
  }
  *out = ptrs;
  *n_out = (size_t)n;
  return 0;
}

/* Protocol 1 spells an event as a backend of its own; the registry keeps kinds apart.
 * These two translate at the edge. */
_Static_assert(REG_EVENT_BACKEND == GPUSHM__BACKEND__BACKEND_CUDA_EVENT,
               "listings spell an event's backend as the wire does");

static Gpushm__Backend wire_backend(const struct reg_object *obj)
{
  return (Gpushm__Backend)registry_listed_backend(obj);
}

/* The inode of this process's PID namespace (0 where /proc is not mounted), which
 * clients compare with theirs: legacy CUDA IPC fails between sibling namespaces, and
 * a client can only say so if it knows where the daemon is.  It never changes. */
static uint64_t own_pid_namespace(void)
{
  static uint64_t ino;
  static bool known;
  struct stat st;

  if (!known) {
    known = true;
    if (stat("/proc/self/ns/pid", &st) == 0)
      ino = (uint64_t)st.st_ino;
  }
  return ino;
}

static int handle_hello(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  const Gpushm__Hello *hello = req->hello;
  const struct handler_server *srv = call->srv;
  size_t n_backends = 0;
  int r;

  /* A 0.1 client sends one version and no range: the range is [it, it]. */
  unsigned lo = hello->min_version || hello->max_version ? hello->min_version
                                                          : hello->protocol_version;
  unsigned hi = hello->min_version || hello->max_version ? hello->max_version
                                                          : hello->protocol_version;
  unsigned version = hi < GPUSHM_PROTOCOL_VERSION ? hi : GPUSHM_PROTOCOL_VERSION;

  if (call->hello_done)
    return fail(ctx, PROTO_E_INVAL, "hello was already exchanged");
  if (lo > hi)
    return fail(ctx, PROTO_E_INVAL, "hello: min_version is above max_version");
  if (version < lo || version < GPUSHM_PROTOCOL_MIN_VERSION) {
    snprintf(ctx->msg, sizeof ctx->msg, "client speaks protocol %u-%u, daemon %u-%u", lo, hi,
             GPUSHM_PROTOCOL_MIN_VERSION, GPUSHM_PROTOCOL_VERSION);
    return PROTO_E_VERSION;
  }
  call->hello_version = version;
  call->hello_features = hello->features;
  call->hello_ranged = hello->min_version || hello->max_version;
  if (strlen(hello->client_name) > GPUSHM_LIMIT_CLIENT_NAME_LEN)
    return fail(ctx, PROTO_E_LIMIT, "client name too long");
  /* Admin tools print it: no escape sequences, no invalid UTF-8. */
  if (!wire_text_valid(hello->client_name, GPUSHM_LIMIT_CLIENT_NAME_LEN))
    return fail(ctx, PROTO_E_INVAL, "client name must be printable UTF-8 (no control "
                "characters)");
  r = status_page_export(srv->status, &ctx->fds[0], ctx->msg, sizeof ctx->msg);
  if (r < 0)
    return r;
  ctx->n_fds = 1;
  snprintf(call->hello_name, sizeof call->hello_name, "%s", hello->client_name);

  for (int kind = 1; kind < GPUSHM_BACKEND_COUNT; kind++) {
    const struct backend *be = registry_backend(call->reg, kind);
    if (be && !(be->unavailable && be->unavailable(be)) && registry_backend_allowed(call->reg, be))
      ctx->backends[n_backends++] = (Gpushm__Backend)kind;
  }
  if (registry_events_available(call->reg))
    ctx->backends[n_backends++] = GPUSHM__BACKEND__BACKEND_CUDA_EVENT;
  gpushm__hello_reply__init(&ctx->body.hello);
  ctx->body.hello.protocol_version = version;
  ctx->body.hello.min_version = GPUSHM_PROTOCOL_MIN_VERSION;
  ctx->body.hello.max_version = GPUSHM_PROTOCOL_VERSION;
  ctx->body.hello.features = srv->features;
  ctx->body.hello.daemon_version = PACKAGE_VERSION;
  ctx->body.hello.instance_id = srv->instance_id;
  ctx->body.hello.n_backends = n_backends;
  ctx->body.hello.backends = ctx->backends;
  ctx->body.hello.client_id = call->client->id;
  ctx->body.hello.default_backend = (Gpushm__Backend)registry_default_backend(call->reg, NULL);
  ctx->body.hello.pid_namespace = own_pid_namespace();
  ctx->body.hello.driver_version = (char *)backend_cuda_driver_version();
  if ((r = fill_devices(ctx, &ctx->body.hello.devices, &ctx->body.hello.n_devices)) < 0)
    return r;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_HELLO;
  ctx->reply.hello = &ctx->body.hello;
  return 0;
}

/* Fills info for one buffer as seen by asker, its holders into holders and ptrs
 * (room for GPUSHM_LIMIT_HOLDERS_LISTED each, or for as many as b has; NULL: none,
 * holders_total still counts them). */
static void fill_image(Gpushm__ImageDesc *out, const struct image_params *p)
{
  gpushm__image_desc__init(out);
  out->format = p->format;
  out->width = p->width;
  out->height = p->height;
  out->depth = p->depth;
  out->mip_levels = p->mip_levels;
  out->array_layers = p->array_layers;
  out->tiling = (Gpushm__ImageTiling)p->tiling;
  out->usage = p->usage;
  out->row_pitch = p->row_pitch;
}

static void fill_external(Gpushm__ExternalMemory *out, const struct reg_external *x)
{
  gpushm__external_memory__init(out);
  out->allocation_size = x->allocation_size;
  out->memory_type_index = x->memory_type_index;
  out->dedicated = x->dedicated;
  out->device_uuid.data = (uint8_t *)x->device_uuid;
  out->device_uuid.len = sizeof x->device_uuid;
  out->driver_uuid.data = (uint8_t *)x->driver_uuid;
  out->driver_uuid.len = sizeof x->driver_uuid;
  out->driver_info = (char *)x->driver_info;
}

static void fill_info(struct handler_reply *ctx, const struct reg_object *b,
                      const struct reg_client *asker, bool with_metadata,
                      Gpushm__Holder *holders, Gpushm__Holder **ptrs)
{
  Gpushm__BufferInfo *info = &ctx->info;
  size_t n = !holders ? 0
             : b->n_holders < GPUSHM_LIMIT_HOLDERS_LISTED ? b->n_holders
                                                         : GPUSHM_LIMIT_HOLDERS_LISTED;
  struct reg_description d;
  size_t i = 0;

  gpushm__buffer_info__init(info);
  for (const struct list *l = b->holdings.next; l != &b->holdings && i < n; l = l->next, i++) {
    const struct reg_holding *h = list_entry(l, struct reg_holding, buffer_link);
    gpushm__holder__init(&holders[i]);
    holders[i].client_id = h->client->id;
    holders[i].pid = (uint32_t)h->client->pid;
    holders[i].uid = (uint32_t)h->client->uid;
    holders[i].refs = h->refs;
    ptrs[i] = &holders[i];
  }
  info->id = b->id;
  info->name = (char *)b->name;
  info->size = b->size;
  info->allocated = b->allocated;
  /* points into the backend's device table, which outlives the reply */
  if (b->device >= 0 && (info->device_uuid.data = (uint8_t *)backend_cuda_device_uuid(b->device)))
    info->device_uuid.len = 16;
  info->backend = wire_backend(b);
  info->device = b->device;
  info->owner_uid = (uint32_t)b->owner_uid;
  info->owner_gid = (uint32_t)b->owner_gid;
  info->mode = b->mode;
  info->lifetime = (Gpushm__Lifetime)b->lifetime;
  info->linked = b->linked;
  registry_describe(b, &d);
  info->sync = d.sync;
  info->segment_id = d.segment_id;
  info->refs = b->refs;
  info->my_refs = registry_client_refs(b, asker);
  info->created_unix_ms = b->created_unix_ms;
  info->creator_pid = (uint32_t)b->creator_pid;
  info->holders_total = b->n_holders;
  info->n_holders = i;
  info->holders = ptrs;
  if (with_metadata) {
    info->metadata.data = b->metadata;
    info->metadata.len = b->metadata_len;
  }
  if (d.image) {
    fill_image(&ctx->info_image, d.image);
    info->image = &ctx->info_image;
  }
  if (d.external) {
    fill_external(&ctx->info_external, d.external);
    info->external = &ctx->info_external;
  }
}

static void close_ctx_fds(struct handler_reply *ctx)
{
  while (ctx->n_fds)
    close(ctx->fds[--ctx->n_fds]);
}

/* Replies with a ready export from the registry; nothing here can fail, so the
 * reference it stands for is never in doubt. */
static int reply_open(struct handler_call *call, struct handler_reply *ctx)
{
  struct reg_export *e = &ctx->export;

  /* No holders: an open's cost must not grow with them (list and show name them). */
  fill_info(ctx, e->buffer, call->client, true, NULL, NULL);
  memcpy(ctx->fds, e->fds, sizeof(int) * e->n_fds);
  ctx->n_fds = e->n_fds;
  e->n_fds = 0;
  gpushm__open_reply__init(&ctx->body.open);
  ctx->body.open.info = &ctx->info;
  ctx->body.open.created = e->created;
  ctx->body.open.read_only = e->read_only;
  if (e->buffer->backend && e->buffer->backend->kind == PROTO_BACKEND_CUDA_FABRIC) {
    ctx->body.open.fabric_handle.data = e->handle;
    ctx->body.open.fabric_handle.len = e->handle_len;
  } else {
    ctx->body.open.ipc_handle.data = e->handle;
    ctx->body.open.ipc_handle.len = e->handle_len;
  }
  ctx->body.open.sync_event_handle.data = e->event_handle;
  ctx->body.open.sync_event_handle.len = e->event_handle_len;
  ctx->body.open.has_control = ctx->info.sync; /* fill_info's, from the description */
  ctx->body.open.fence_offset = e->fence_offset;
  ctx->body.open.segment_offset = e->segment_offset;
  ctx->body.open.segment_size = e->segment_size;
  ctx->body.open.segment_attached = e->segment_attached;
  ctx->body.open.clear = e->clear;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_OPEN;
  ctx->reply.open = &ctx->body.open;
  return 0;
}

static struct image_params image_params_of(const Gpushm__ImageDesc *d)
{
  return (struct image_params){
    .format = d->format, .width = d->width, .height = d->height, .depth = d->depth,
    .mip_levels = d->mip_levels, .array_layers = d->array_layers, .tiling = d->tiling,
    .usage = d->usage, .row_pitch = d->row_pitch,
  };
}

static int handle_create(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  const Gpushm__CreateRequest *cr = req->create;
  const bool event = cr->backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT;
  struct reg_create_args args = {
    .kind = event ? REG_EVENT : REG_BUFFER,
    .name = cr->name,
    .size = cr->size,
    .backend = event ? 0 : (int)cr->backend,
    .device = cr->device,
    .mode = cr->mode,
    .lifetime = cr->lifetime,
    .open_existing = cr->open_existing,
    .sync = cr->sync,
    .strict_mode = cr->strict_mode,
    .ipc_fence = call->policy->ipc_fences,
    .metadata = cr->metadata.data,
    .metadata_len = cr->metadata.len,
  };
  struct image_params image;
  const struct reg_object *b;
  int r;

  if (cr->image) {
    /* A field an older client cannot send; a newer one names the feature with it. */
    if (!(call->features & PROTO_FEATURE_GRAPHICS))
      return fail(ctx, PROTO_E_UNSUPPORTED, "images need PROTO_FEATURE_GRAPHICS at hello");
    if (event || cr->size)
      return fail(ctx, PROTO_E_INVAL, "an image is no event, and its size is its own");
    image = image_params_of(cr->image);
    if ((r = image_check(&image, ctx->msg, sizeof ctx->msg)) < 0)
      return r;
    args.image = &image;
    args.size = image_linear_bytes(&image);
  }
  r = registry_create(call->reg, call->client, call->policy, &args, &ctx->export, ctx->msg,
                      sizeof ctx->msg);
  if (r < 0)
    return r;
  b = ctx->export.buffer;
  if (ctx->export.created) {
    log_event(LOG_LEVEL_DEBUG,
              LOG_FIELDS(.client = call->log_client, .buffer = b->name, .buffer_id = b->id,
                         .bytes = b->size, .has_bytes = true,
                         .backend = b->backend ? b->backend->name : "event",
                         .device = b->device, .has_device = b->backend != &backend_host),
              "client %u created '%s' (id %llu, %llu bytes)", call->client->id, b->name,
              (unsigned long long)b->id, (unsigned long long)b->size);
  }
  return reply_open(call, ctx);
}


/* Registered memory: kept as the registry's kind_external, which checks the fd. */
static int handle_register(struct handler_call *call, const Gpushm__Request *req,
                           struct handler_reply *ctx)
{
  const Gpushm__RegisterRequest *rr = req->register_memory;
  const Gpushm__ExternalMemory *m = rr->memory;
  struct reg_external external = { .fd = call->fd };
  struct reg_create_args args = {
    .kind = REG_BUFFER,
    .name = rr->name,
    .size = rr->size,
    .device = -1,
    .mode = rr->mode,
    .lifetime = rr->lifetime,
    .strict_mode = rr->strict_mode,
    .metadata = rr->metadata.data,
    .metadata_len = rr->metadata.len,
    .external = &external,
  };
  struct image_params image;
  int r;

  if (!m)
    return fail(ctx, PROTO_E_INVAL, "a registration describes its memory");
  if (m->device_uuid.len != 16 || m->driver_uuid.len != 16 || strlen(m->driver_info) >= 64)
    return fail(ctx, PROTO_E_INVAL, "device and driver UUIDs are 16 bytes, driver info at "
                "most 63");
  external.allocation_size = m->allocation_size;
  external.memory_type_index = m->memory_type_index;
  external.dedicated = m->dedicated;
  memcpy(external.device_uuid, m->device_uuid.data, 16);
  memcpy(external.driver_uuid, m->driver_uuid.data, 16);
  snprintf(external.driver_info, sizeof external.driver_info, "%s", m->driver_info);
  if (rr->image) {
    image = image_params_of(rr->image);
    args.image = &image;
  }
  r = registry_create(call->reg, call->client, call->policy, &args, &ctx->export, ctx->msg,
                      sizeof ctx->msg);
  if (r < 0)
    return r;
  log_event(LOG_LEVEL_DEBUG,
            LOG_FIELDS(.client = call->log_client, .buffer = rr->name,
                       .buffer_id = ctx->export.buffer->id, .bytes = m->allocation_size,
                       .has_bytes = true),
            "client %u registered '%s' (id %llu, %llu bytes of %s memory)", call->client->id,
            rr->name, (unsigned long long)ctx->export.buffer->id,
            (unsigned long long)m->allocation_size,
            ctx->export.buffer->device >= 0 ? "NVIDIA" : "memfd");
  return reply_open(call, ctx);
}

/* NVIDIA memory is checked by importing it on its device: that device's context. */
static int register_device(const struct handler_call *call, const Gpushm__Request *req)
{
  const Gpushm__ExternalMemory *m = req->register_memory->memory;

  (void)call;
  return m && m->device_uuid.len == 16 ? backend_cuda_device_of_uuid(m->device_uuid.data) : -1;
}

/* What the create will use, the daemon's default-backend included: any device backend
 * (or an event) needs the device's context. */
static int create_device(const struct handler_call *call, const Gpushm__Request *req)
{
  const Gpushm__CreateRequest *cr = req->create;
  int effective = cr->backend ? (int)cr->backend : registry_default_backend(call->reg, call->policy);

  return effective != PROTO_BACKEND_HOST && cr->device >= 0 ? cr->device : -1;
}

static int handle_open(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  const Gpushm__OpenRequest *o = req->open;
  const char *name = NULL;
  uint64_t id = 0;
  int r;

  if (o->key_case == GPUSHM__OPEN_REQUEST__KEY_NAME)
    name = o->name;
  else if (o->key_case == GPUSHM__OPEN_REQUEST__KEY_ID)
    id = o->id;
  else
    return fail(ctx, PROTO_E_INVAL, "open needs a name or an id");
  r = registry_open(call->reg, call->client, call->policy, name, id, o->read_only,
                    o->event ? REG_EVENT : REG_BUFFER, &ctx->export, ctx->msg, sizeof ctx->msg);
  if (r < 0)
    return r;
  return reply_open(call, ctx);
}

static int handle_close(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  const Gpushm__CloseRequest *c = req->close;
  return registry_close(call->reg, call->client, c->id, c->unlink, c->unmap_segment, c->read_only,
                        ctx->msg, sizeof ctx->msg);
}

static int handle_unmap(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  return registry_unmap(call->reg, call->client, req->unmap->segment_id, req->unmap->read_only,
                        ctx->msg, sizeof ctx->msg);
}

static int handle_unlink(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  const Gpushm__UnlinkRequest *u = req->unlink;

  if (u->id) {
    /* The name of a buffer the client holds, which someone may have unlinked and
     * created again since: only while it still names that buffer. */
    const struct reg_object *b = registry_find_id(call->reg, u->id);
    if (!b || !b->linked || strcmp(b->name, u->name) != 0) {
      snprintf(ctx->msg, sizeof ctx->msg, "'%s' does not name buffer %llu (any more)", u->name,
               (unsigned long long)u->id);
      return PROTO_E_NOENT;
    }
  }
  return registry_unlink(call->reg, call->client, u->name, ctx->msg, sizeof ctx->msg);
}

static bool visible_to(const struct reg_object *b, const struct reg_client *client, bool all)
{
  return all || registry_may_see(client, b);
}

static size_t varint_size(size_t v)
{
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

/* A page holds as many entries as the frame has room for (or max_entries, if the
 * request asks for fewer), packed here as they are filled (list_codec.h: protobuf-c
 * sized each entry four times over), into one allocation that the session sends. */
static int handle_list(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  const struct registry *reg = call->reg;
  const size_t budget = GPUSHM_LIMIT_FRAME_BODY - GPUSHM_LIMIT_REPLY_ENVELOPE -
                        LIST_CODEC_MORE_SIZE;
  const bool all = req->list->all;
  size_t max = req->list->max_entries ? req->list->max_entries : SIZE_MAX;
  size_t i = registry_index_after(reg, req->list->after_id), n = 0;
  uint8_t *page, *end;

  if (all && !call->client->admin)
    return fail(ctx, PROTO_E_PERM, "listing every user's buffers needs root or the admin group");
  if (!(page = reply_malloc(ctx, budget + LIST_CODEC_MORE_SIZE)))
    return fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  end = page;
  for (; i < registry_count(reg) && n < max; i++) {
    const struct reg_object *b = registry_at(reg, i);
    size_t info_size;

    if (!visible_to(b, call->client, all))
      continue;
    fill_info(ctx, b, call->client, req->list->metadata, ctx->holders, ctx->holder_ptrs);
    info_size = list_codec_info_size(&ctx->info);
    if ((size_t)(end - page) + list_codec_entry_size(info_size) > budget)
      break;
    end = list_codec_put_entry(end, &ctx->info, info_size);
    n++;
  }
  end = list_codec_put_more(end, i < registry_count(reg));
  ctx->list_page = page;
  ctx->list_page_len = (size_t)(end - page);
  ctx->reply.body_case = GPUSHM__REPLY__BODY_LIST;
  return 0;
}

static int fill_request_counts(const struct request_counters *counters,
                               struct handler_reply *ctx, Gpushm__StatsReply *s)
{
  const size_t n_le = GPUSHM_LATENCY_BOUNDS + 1;
  Gpushm__RequestCount *counts = reply_calloc(ctx, HANDLER_REQUEST_TYPES, sizeof *counts);
  Gpushm__RequestCount **ptrs = reply_calloc(ctx, HANDLER_REQUEST_TYPES, sizeof *ptrs);
  uint64_t *le = reply_calloc(ctx, HANDLER_REQUEST_TYPES * n_le, sizeof *le);
  size_t n = 0;

  if (!counts || !ptrs || !le)
    return fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  for (unsigned t = 0; t < HANDLER_REQUEST_TYPES; t++) {
    uint64_t *row = &le[n * n_le], total = 0;

    if (!counters->by_type[t])
      continue;
    gpushm__request_count__init(&counts[n]);
    counts[n].type = (char *)handler_name(t);
    counts[n].count = counters->by_type[t];
    counts[n].errors = counters->errors_by_type[t];
    /* Cumulative, as Prometheus buckets are: readers need no arithmetic to plot them. */
    for (size_t b = 0; b < n_le; b++)
      row[b] = total += counters->latency[t][b];
    counts[n].latency_le = row;
    counts[n].n_latency_le = n_le;
    counts[n].latency_sum_ns = counters->latency_sum_ns[t];
    ptrs[n] = &counts[n];
    n++;
  }
  s->requests_by_type = ptrs;
  s->n_requests_by_type = n;
  s->latency_bounds_ns = (uint64_t *)counters_latency_bounds_ns; /* only read, by the packer */
  s->n_latency_bounds_ns = GPUSHM_LATENCY_BOUNDS;
  return 0;
}

/* Opens and creates by (wire backend, device), rows only where either happened. */
static int fill_opens(const struct request_counters *c, struct handler_reply *ctx,
                      Gpushm__StatsReply *s)
{
  const size_t max = (GPUSHM_BACKEND_COUNT + 1) * (GPUSHM_LIMIT_DEVICES + 1);
  Gpushm__OpenCount *rows = reply_calloc(ctx, max, sizeof *rows);
  Gpushm__OpenCount **ptrs = reply_calloc(ctx, max, sizeof *ptrs);
  size_t n = 0;

  if (!rows || !ptrs)
    return fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  for (unsigned b = 0; b <= GPUSHM_BACKEND_COUNT; b++)
    for (unsigned d = 0; d <= GPUSHM_LIMIT_DEVICES; d++) {
      if (!c->opens[b][d] && !c->creates[b][d])
        continue;
      gpushm__open_count__init(&rows[n]);
      rows[n].backend = (Gpushm__Backend)b;
      rows[n].device = (int32_t)d - 1;
      rows[n].opens = c->opens[b][d];
      rows[n].creates = c->creates[b][d];
      ptrs[n] = &rows[n];
      n++;
    }
  s->opens = ptrs;
  s->n_opens = n;
  return 0;
}

/* Buffers and bytes by (backend, device), for capacity dashboards: the registry's
 * tally, rows only where something is. */
static int fill_usage(const struct registry *reg, struct handler_reply *ctx, Gpushm__StatsReply *s)
{
  const struct reg_tally *t = registry_tally(reg);
  const size_t max = REG_TALLY_BACKENDS * REG_TALLY_DEVICES;
  Gpushm__Usage *usage = reply_calloc(ctx, max, sizeof *usage);
  Gpushm__Usage **ptrs = reply_calloc(ctx, max, sizeof *ptrs);
  size_t n = 0;

  if (!usage || !ptrs)
    return fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  for (int b = 0; b < REG_TALLY_BACKENDS; b++)
    for (int d = 0; d < REG_TALLY_DEVICES; d++) {
      if (!t->place[b][d].objects)
        continue;
      gpushm__usage__init(&usage[n]);
      usage[n].backend = (Gpushm__Backend)b;
      usage[n].device = d - 1;
      usage[n].buffers = (uint32_t)t->place[b][d].objects;
      usage[n].bytes = t->place[b][d].bytes;
      ptrs[n] = &usage[n];
      n++;
    }
  s->usage = ptrs;
  s->n_usage = n;
  return 0;
}

/* Segments by (backend, device): their memory, how much of it holds buffers, who maps
 * them, the warm pools, and what carving has saved (carved vs driver allocations). */
static int fill_segments(const struct registry *reg, struct handler_reply *ctx,
                         Gpushm__StatsReply *s)
{
  const size_t max = GPUSHM_BACKEND_COUNT * (GPUSHM_LIMIT_DEVICES + 1);
  struct reg_segment_usage *usage = reply_calloc(ctx, max, sizeof *usage);
  Gpushm__SegmentUsage *rows = reply_calloc(ctx, max, sizeof *rows);
  Gpushm__SegmentUsage **ptrs = reply_calloc(ctx, max, sizeof *ptrs);
  size_t n;

  if (!usage || !rows || !ptrs)
    return fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  n = registry_segment_usage(reg, usage, max);
  for (size_t i = 0; i < n; i++) {
    gpushm__segment_usage__init(&rows[i]);
    rows[i].backend = (Gpushm__Backend)usage[i].backend;
    rows[i].device = usage[i].device;
    rows[i].segments = usage[i].segments;
    rows[i].bytes = usage[i].bytes;
    rows[i].bytes_used = usage[i].bytes_used;
    rows[i].mappings = usage[i].mappings;
    rows[i].pooled = usage[i].pooled;
    rows[i].pooled_bytes = usage[i].pooled_bytes;
    rows[i].carved = usage[i].carved;
    rows[i].driver_allocs = usage[i].driver_allocs;
    ptrs[i] = &rows[i];
  }
  s->segments = ptrs;
  s->n_segments = n;
  return 0;
}

struct released_bytes {
  uint64_t id, bytes;
};

static int cmp_released(const void *a, const void *b)
{
  uint64_t x = ((const struct released_bytes *)a)->id, y = ((const struct released_bytes *)b)->id;
  return x < y ? -1 : x > y;
}

/* Live processes that held buffers when their connection ended, and the memory only
 * such processes keep now (each freed buffer counted once, however many map it).  The
 * totals are global, like the other counts; the processes and their buffers' names are
 * listed to admins, and to others for their own uid only (as clients are). */
static int fill_detached(const struct registry *reg, const struct detached_set *set,
                         const struct reg_client *asker, struct handler_reply *ctx,
                         Gpushm__StatsReply *s)
{
  const size_t max = GPUSHM_LIMIT_DETACHED_LISTED, max_b = max * GPUSHM_LIMIT_DETACHED_BUFFERS_LISTED;
  Gpushm__Detached *ds = reply_calloc(ctx, max, sizeof *ds);
  Gpushm__Detached **ptrs = reply_calloc(ctx, max, sizeof *ptrs);
  Gpushm__DetachedBuffer *bs = reply_calloc(ctx, max_b, sizeof *bs);
  Gpushm__DetachedBuffer **bptrs = reply_calloc(ctx, max_b, sizeof *bptrs);
  struct released_bytes *released = NULL;
  size_t n = 0, nb = 0, n_released = 0, cap = 0;
  const struct list *l;

  if (!ds || !ptrs || !bs || !bptrs)
    return fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  for (l = set->list.next; l != &set->list; l = l->next) {
    const struct detached *d = list_entry(l, struct detached, link);
    Gpushm__Detached *out;

    if (!d->listed)
      continue; /* past the limits, watched for its fences only: counted as untracked */
    out = n < max && (asker->admin || asker->uid == d->uid) ? &ds[n] : NULL;
    if (out) {
      gpushm__detached__init(out);
      out->pid = (uint32_t)d->pid;
      out->uid = (uint32_t)d->uid;
      out->client_id = d->client_id;
      out->since_unix_ms = d->since_unix_ms;
      out->buffers_total = (uint32_t)d->n_total;
      out->bytes_total = d->bytes_total;
      out->buffers = &bptrs[nb];
      ptrs[n++] = out;
    }
    for (size_t i = 0; i < d->n; i++) {
      const struct detached_buffer *b = &d->buffers[i];
      bool gone = registry_find_id(reg, b->id) == NULL; /* ids are never reused */
      /* Host memory was taken back as it was freed (kind_buffer.c): nobody pins it. */
      if (gone && b->backend != PROTO_BACKEND_HOST) {
        if (n_released == cap) {
          struct released_bytes *grown = realloc(released, (cap = cap ? 2 * cap : 64) * sizeof *grown);
          if (!grown) {
            free(released);
            return fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
          }
          released = grown;
        }
        released[n_released++] = (struct released_bytes){ b->id, b->allocated };
      }
      if (!out)
        continue;
      out->bytes_released += gone ? b->allocated : 0;
      if (out->n_buffers < GPUSHM_LIMIT_DETACHED_BUFFERS_LISTED) {
        Gpushm__DetachedBuffer *ob = &bs[nb];
        gpushm__detached_buffer__init(ob);
        ob->id = b->id;
        ob->name = (char *)b->name;
        ob->backend = (Gpushm__Backend)b->backend;
        ob->device = b->device;
        ob->allocated = b->allocated;
        ob->released = gone;
        bptrs[nb++] = ob;
        out->n_buffers++;
      }
    }
  }
  /* A freed buffer two processes still map is one allocation: counted once. */
  if (n_released)
    qsort(released, n_released, sizeof *released, cmp_released);
  for (size_t i = 0; i < n_released; i++)
    if (i == 0 || released[i].id != released[i - 1].id)
      s->bytes_pinned_after_release += released[i].bytes;
  free(released);
  s->detached = ptrs;
  s->n_detached = n;
  s->detached_total = set->n;
  return 0;
}

struct clients_walk {
  const struct reg_client *asker;
  uint32_t after_id;
  Gpushm__ClientInfo *infos, **ptrs;
  size_t n, max, used;
};

static bool add_client(void *arg, const struct handler_peer *peer)
{
  /* Room for the envelope around the entries, as in list. */
  const size_t budget = GPUSHM_LIMIT_FRAME_BODY - GPUSHM_LIMIT_REPLY_ENVELOPE;
  struct clients_walk *w = arg;
  const struct reg_client *other = peer->client;
  Gpushm__ClientInfo *ci;
  size_t size;

  if (other->id <= w->after_id || (!w->asker->admin && other->uid != w->asker->uid))
    return true;
  if (w->n == w->max)
    return false;
  ci = &w->infos[w->n];
  gpushm__client_info__init(ci);
  ci->client_id = other->id;
  ci->pid = (uint32_t)other->pid;
  ci->uid = (uint32_t)other->uid;
  ci->gid = (uint32_t)other->gid;
  ci->name = (char *)peer->name;
  ci->connected_unix_ms = peer->connected_unix_ms;
  ci->admin = other->admin;
  for (const struct list *h = other->holdings.next; h != &other->holdings; h = h->next) {
    const struct reg_holding *hold = list_entry(h, struct reg_holding, client_link);
    ci->buffers_held++;
    ci->bytes_held += hold->buffer->allocated;
  }
  registry_client_mapped(other, &ci->segments_mapped, &ci->segment_bytes_mapped);
  size = gpushm__client_info__get_packed_size(ci);
  size += 1 + varint_size(size);
  if (w->used + size > budget)
    return false;
  w->used += size;
  w->ptrs[w->n++] = ci;
  return true;
}

/* Connected clients; admins see all, others those of their own uid. */
static int handle_clients(struct handler_call *call, const Gpushm__Request *req,
                          struct handler_reply *ctx)
{
  const struct handler_server *srv = call->srv;
  struct clients_walk w = {
    .asker = call->client,
    .after_id = req->clients->after_id,
    .max = srv->n_clients(srv->ctx),
  };
  bool more;

  w.infos = reply_calloc(ctx, w.max, sizeof *w.infos);
  w.ptrs = reply_calloc(ctx, w.max, sizeof *w.ptrs);
  if (!w.infos || !w.ptrs)
    return fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  more = srv->each_client(srv->ctx, add_client, &w);
  gpushm__clients_reply__init(&ctx->body.clients);
  ctx->body.clients.n_clients = w.n;
  ctx->body.clients.clients = w.ptrs;
  ctx->body.clients.more = more;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_CLIENTS;
  ctx->reply.clients = &ctx->body.clients;
  return 0;
}

static int handle_stats(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  const struct handler_server *srv = call->srv;
  const struct registry *reg = call->reg;
  Gpushm__StatsReply *s = &ctx->body.stats;
  struct reg_totals totals;
  int r;

  gpushm__stats_reply__init(s);
  s->daemon_version = PACKAGE_VERSION;
  s->instance_id = srv->instance_id;
  s->uptime_ms = srv->uptime_ms(srv->ctx);
  s->clients = srv->n_clients(srv->ctx);
  registry_totals(reg, &totals);
  s->buffers = (uint32_t)totals.objects;
  s->buffers_linked = totals.linked;
  s->bytes_allocated = totals.bytes_allocated;
  s->requests = srv->counters->requests;
  s->request_errors = srv->counters->request_errors;
  s->protocol_errors = srv->counters->protocol_errors;
  s->clients_dropped = srv->counters->clients_dropped;
  s->fences_raised = srv->counters->fences_raised;
  s->oneway_errors = srv->counters->oneway_errors;
  s->open_fds = srv->open_fds(srv->ctx, call->client->admin);
  s->next_buffer_id = totals.next_id;
  if ((r = fill_devices(ctx, &s->devices, &s->n_devices)) < 0 ||
      (r = fill_request_counts(srv->counters, ctx, s)) < 0 ||
      (r = fill_opens(srv->counters, ctx, s)) < 0 || (r = fill_usage(reg, ctx, s)) < 0 ||
      (r = fill_segments(reg, ctx, s)) < 0 ||
      (srv->detached && (r = fill_detached(reg, srv->detached, call->client, ctx, s)) < 0))
    return r;
  /* Last: some rows read what the fields above computed. */
  {
    const struct metrics_source src = { .reg = reg, .counters = srv->counters, .stats = s };
    void *block = NULL;
    if (ctx->n_owned == HANDLER_OWNED_MAX || metrics_fill(&src, s, &block) < 0)
      return fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
    reply_own(ctx, block);
  }
  ctx->reply.body_case = GPUSHM__REPLY__BODY_STATS;
  ctx->reply.stats = s;
  return 0;
}

struct disconnect_find {
  uint32_t id;
  const struct reg_client *asker;
  const struct reg_client *found;
};

static bool find_client(void *arg, const struct handler_peer *peer)
{
  struct disconnect_find *f = arg;

  if (peer->client->id != f->id)
    return true;
  /* Clients of other uids are as invisible here as in the clients listing. */
  if (f->asker->admin || peer->client->uid == f->asker->uid)
    f->found = peer->client;
  return false;
}

static int handle_disconnect(struct handler_call *call, const Gpushm__Request *req,
                             struct handler_reply *ctx)
{
  struct disconnect_find f = { .id = req->disconnect->client_id, .asker = call->client };
  const struct reg_client *other;
  char why[128];

  call->srv->each_client(call->srv->ctx, find_client, &f);
  if (!(other = f.found)) {
    snprintf(ctx->msg, sizeof ctx->msg, "no client with id %u", f.id);
    return PROTO_E_NOENT;
  }
  if (other == call->client)
    return fail(ctx, PROTO_E_INVAL, "that is this connection: close it instead");
  snprintf(why, sizeof why, "disconnected by uid %u (client %u)", (unsigned)call->client->uid,
           call->client->id);
  log_event(LOG_LEVEL_INFO,
            LOG_FIELDS(.client = &(struct log_client){ .id = other->id, .pid = other->pid,
                                                       .uid = other->uid },
                       .reason = why),
            "client %u (pid %d, uid %u) %s", other->id, (int)other->pid, (unsigned)other->uid, why);
  /* The server asks that client's session to end itself. */
  call->srv->disconnect(call->srv->ctx, f.id, PROTO_E_DISCONNECTED, why);
  return 0;
}

static int handle_ping(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  gpushm__ping_reply__init(&ctx->body.ping);
  ctx->reply.body_case = GPUSHM__REPLY__BODY_PING;
  ctx->reply.ping = &ctx->body.ping;
  return 0;
}

/* Policy lives here: handler_check() applies needs_hello, admin_only, oneway_ok, since
 * and feature before a handler runs, and the session warms what device() names.  Finer
 * rules (list "all", other users' clients) depend on the request's fields and stay in
 * the handlers.  One-way requests are those whose reply carries nothing the client
 * needs (no body, no fds): releasing, never acquiring.  Unmap is for libraries that map
 * segments, which say so at Hello. */
static const struct handler handlers[] = {
  [GPUSHM__REQUEST__BODY_HELLO] = { .name = "hello", .fn = handle_hello },
  [GPUSHM__REQUEST__BODY_CREATE] = { .name = "create", .needs_hello = true,
                                     .device = create_device, .fn = handle_create },
  [GPUSHM__REQUEST__BODY_OPEN] = { .name = "open", .needs_hello = true, .fn = handle_open },
  [GPUSHM__REQUEST__BODY_CLOSE] = { .name = "close", .needs_hello = true, .oneway_ok = true,
                                    .fn = handle_close },
  [GPUSHM__REQUEST__BODY_UNLINK] = { .name = "unlink", .needs_hello = true, .oneway_ok = true,
                                     .fn = handle_unlink },
  [GPUSHM__REQUEST__BODY_LIST] = { .name = "list", .needs_hello = true, .costly = true,
                                   .fn = handle_list },
  [GPUSHM__REQUEST__BODY_STATS] = { .name = "stats", .needs_hello = true, .costly = true,
                                    .fn = handle_stats },
  [GPUSHM__REQUEST__BODY_PING] = { .name = "ping", .needs_hello = true, .fn = handle_ping },
  [GPUSHM__REQUEST__BODY_CLIENTS] = { .name = "clients", .needs_hello = true, .costly = true,
                                      .fn = handle_clients },
  [GPUSHM__REQUEST__BODY_DISCONNECT] = { .name = "disconnect", .needs_hello = true,
                                         .fn = handle_disconnect },
  [GPUSHM__REQUEST__BODY_REGISTER_MEMORY] = { .name = "register_memory", .needs_hello = true,
                                              .feature = PROTO_FEATURE_GRAPHICS,
                                              .takes_fd = true, .device = register_device,
                                              .fn = handle_register },
  [GPUSHM__REQUEST__BODY_UNMAP] = { .name = "unmap", .needs_hello = true, .oneway_ok = true,
                                    .feature = PROTO_FEATURE_SEGMENTS, .fn = handle_unmap },
};

int handler_check(const struct handler *h, unsigned body_case, uint64_t request_id, bool oneway,
                  const struct handler_peer_state *peer, char *msg, size_t msg_len)
{
  if (request_id == 0) {
    snprintf(msg, msg_len, "request id 0 is reserved");
    return PROTO_E_PROTO;
  }
  if (!peer->hello_done && (!h || h->needs_hello)) {
    snprintf(msg, msg_len, "the first request must be hello");
    return PROTO_E_PROTO;
  }
  if (oneway && (!h || !h->oneway_ok)) {
    snprintf(msg, msg_len, "only close, unlink and unmap may be sent one-way");
    return PROTO_E_PROTO;
  }
  if (!h) {
    /* A newer client may know requests this daemon does not: answer, don't hang up. */
    snprintf(msg, msg_len, "unknown request type %u", body_case);
    return PROTO_E_UNSUPPORTED;
  }
  if (h->admin_only && !peer->admin) {
    snprintf(msg, msg_len, "%s needs root or the admin group", h->name);
    return PROTO_E_PERM;
  }
  if (peer->hello_done && h->since > peer->protocol_version) {
    snprintf(msg, msg_len, "%s needs protocol version %u; this connection speaks %u", h->name,
             h->since, peer->protocol_version);
    return PROTO_E_UNSUPPORTED;
  }
  if ((peer->features & h->feature) != h->feature) {
    snprintf(msg, msg_len, "%s needs feature 0x%llx, which this connection's hello did not name",
             h->name, (unsigned long long)h->feature);
    return PROTO_E_UNSUPPORTED;
  }
  return 0;
}

const struct handler *handler_find(unsigned body_case)
{
  return body_case < sizeof handlers / sizeof handlers[0] && handlers[body_case].fn
           ? &handlers[body_case] : NULL;
}

const char *handler_name(unsigned body_case)
{
  const struct handler *h = handler_find(body_case);
  return h ? h->name : "unknown";
}

void handler_reply_init(struct handler_reply *r, uint64_t request_id)
{
  r->n_fds = 0;
  r->n_owned = 0;
  r->msg[0] = '\0';
  r->list_page = NULL;
  r->list_page_len = 0;
  gpushm__reply__init(&r->reply);
  r->reply.request_id = request_id;
}

void handler_reply_error(struct handler_reply *r, int status)
{
  close_ctx_fds(r);
  r->reply.status = -status;
  r->reply.message = r->msg;
  r->reply.body_case = GPUSHM__REPLY__BODY__NOT_SET;
}

void handler_reply_free(struct handler_reply *r)
{
  while (r->n_owned)
    free(r->owned[--r->n_owned]);
}
