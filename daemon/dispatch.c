/* Request handling: one table entry per request type; each handler turns a decoded
 * request into registry calls and fills the reply. */
#include "config.h"
#include "dispatch.h"
#include "conn.h"
#include "gpushm.h"
#include "gpushm.pb-c.h"
#include "log.h"
#include "server.h"
#ifdef HAVE_CUDA
#include "backend_cuda.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct reply_ctx {
  Gpushm__Reply reply;
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME]; /* sent with the reply on success */
  unsigned n_fds;
  char msg[256];
  union {
    Gpushm__HelloReply hello;
    Gpushm__OpenReply open;
    Gpushm__ListReply list;
    Gpushm__StatsReply stats;
    Gpushm__PingReply ping;
    Gpushm__ClientsReply clients;
  } body;
  /* Storage the reply points into; owned[] is freed after the reply is sent. */
  Gpushm__BufferInfo info;
  Gpushm__Backend backends[GPUSHM_BACKEND_COUNT];
  struct backend_export export, sync_export;
  void *owned[2 * GPUSHM_LIMIT_LIST_PAGE + 4];
  size_t n_owned;
};

typedef int handler_fn(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx);

static int fail(struct reply_ctx *ctx, int status, const char *why)
{
  snprintf(ctx->msg, sizeof ctx->msg, "%s", why);
  return status;
}

/* calloc whose memory lives until the reply is sent; NULL when out of memory. */
static void *reply_calloc(struct reply_ctx *ctx, size_t n, size_t size)
{
  void *p = calloc(n ? n : 1, size);
  if (p)
    ctx->owned[ctx->n_owned++] = p;
  return p;
}

/* The devices the CUDA backends can use; free memory only where the daemon holds a
 * context (asking elsewhere would create one). */
static int fill_devices(struct reply_ctx *ctx, Gpushm__Device ***out, size_t *n_out)
{
  *out = NULL;
  *n_out = 0;
#ifdef HAVE_CUDA
  int n = backend_cuda_device_count();
  Gpushm__Device *devs, **ptrs;
  struct cuda_device_info *infos;

  if (n == 0)
    return 0;
  devs = reply_calloc(ctx, (size_t)n, sizeof *devs);
  ptrs = reply_calloc(ctx, (size_t)n, sizeof *ptrs);
  infos = reply_calloc(ctx, (size_t)n, sizeof *infos);
  if (!devs || !ptrs || !infos)
    return fail(ctx, GPUSHM_E_NOMEM, "daemon out of memory");
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
#else
  (void)ctx;
#endif
  return 0;
}

static int handle_hello(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx)
{
  const Gpushm__Hello *hello = req->hello;
  struct server *srv = c->srv;
  size_t n_backends = 0;
  int r;

  if (c->hello_done)
    return fail(ctx, GPUSHM_E_INVAL, "hello was already exchanged");
  if (hello->protocol_version != GPUSHM_PROTOCOL_VERSION) {
    snprintf(ctx->msg, sizeof ctx->msg, "client speaks protocol %u, daemon %u",
             hello->protocol_version, GPUSHM_PROTOCOL_VERSION);
    return GPUSHM_E_VERSION;
  }
  if (strlen(hello->client_name) > GPUSHM_LIMIT_CLIENT_NAME_LEN)
    return fail(ctx, GPUSHM_E_LIMIT, "client name too long");
  /* Admin tools print it: no escape sequences, no invalid UTF-8. */
  if (!wire_text_valid(hello->client_name, GPUSHM_LIMIT_CLIENT_NAME_LEN))
    return fail(ctx, GPUSHM_E_INVAL, "client name must be printable UTF-8 (no control "
                "characters)");
  r = status_page_export(&srv->status, &ctx->fds[0], ctx->msg, sizeof ctx->msg);
  if (r < 0)
    return r;
  ctx->n_fds = 1;
  snprintf(c->name, sizeof c->name, "%s", hello->client_name);
  c->hello_done = true;

  for (int kind = 1; kind < GPUSHM_BACKEND_COUNT; kind++) {
    const struct backend *be = srv->reg.backends[kind];
    if (be && !(be->unavailable && be->unavailable(be)))
      ctx->backends[n_backends++] = (Gpushm__Backend)kind;
  }
  gpushm__hello_reply__init(&ctx->body.hello);
  ctx->body.hello.protocol_version = GPUSHM_PROTOCOL_VERSION;
  ctx->body.hello.daemon_version = PACKAGE_VERSION;
  ctx->body.hello.instance_id = srv->instance_id;
  ctx->body.hello.n_backends = n_backends;
  ctx->body.hello.backends = ctx->backends;
  ctx->body.hello.client_id = c->client.id;
  if ((r = fill_devices(ctx, &ctx->body.hello.devices, &ctx->body.hello.n_devices)) < 0)
    return r;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_HELLO;
  ctx->reply.hello = &ctx->body.hello;
  return 0;
}

/* Fills info for one buffer as seen by asker; the holder arrays it allocates are
 * added to ctx->owned. */
static int fill_info(Gpushm__BufferInfo *info, const struct reg_buffer *b,
                     const struct reg_client *asker, struct reply_ctx *ctx)
{
  size_t n = b->n_holders < GPUSHM_LIMIT_HOLDERS_LISTED ? b->n_holders : GPUSHM_LIMIT_HOLDERS_LISTED;
  Gpushm__Holder *holders = NULL;
  Gpushm__Holder **ptrs = NULL;
  size_t i = 0;

  gpushm__buffer_info__init(info);
  if (n) {
    holders = reply_calloc(ctx, n, sizeof *holders);
    ptrs = reply_calloc(ctx, n, sizeof *ptrs);
    if (!holders || !ptrs)
      return GPUSHM_E_NOMEM;
    for (const struct list *l = b->holdings.next; l != &b->holdings && i < n; l = l->next, i++) {
      const struct reg_holding *h = list_entry(l, struct reg_holding, buffer_link);
      gpushm__holder__init(&holders[i]);
      holders[i].client_id = h->client->id;
      holders[i].pid = (uint32_t)h->client->pid;
      holders[i].uid = (uint32_t)h->client->uid;
      holders[i].refs = h->refs;
      ptrs[i] = &holders[i];
    }
  }
  info->id = b->id;
  info->name = (char *)b->name;
  info->size = b->size;
  info->allocated = b->allocated;
#ifdef HAVE_CUDA
  /* points into the backend's device table, which outlives the reply */
  if (b->device >= 0 && (info->device_uuid.data = (uint8_t *)backend_cuda_device_uuid(b->device)))
    info->device_uuid.len = 16;
#endif
  info->backend = (Gpushm__Backend)b->backend->kind;
  info->device = b->device;
  info->owner_uid = (uint32_t)b->owner_uid;
  info->owner_gid = (uint32_t)b->owner_gid;
  info->mode = b->mode;
  info->lifetime = (Gpushm__Lifetime)b->lifetime;
  info->linked = b->linked;
  info->sync = b->sync;
  info->refs = b->refs;
  info->my_refs = registry_client_refs(b, asker);
  info->created_unix_ms = b->created_unix_ms;
  info->creator_pid = (uint32_t)b->creator_pid;
  info->holders_total = b->n_holders;
  info->n_holders = i;
  info->holders = ptrs;
  return 0;
}

static void close_ctx_fds(struct reply_ctx *ctx)
{
  while (ctx->n_fds)
    close(ctx->fds[--ctx->n_fds]);
}

/* What a client needs to map the buffer: the backend's fd or handle and, for sync
 * buffers, the control block's fd (always last) and the event's handle. */
static int export_buffer(struct reg_buffer *b, bool read_only, struct reply_ctx *ctx)
{
  int r, fd;

  ctx->export.fd = -1;
  r = b->backend->export(b->backend, &b->mem, read_only, &ctx->export, ctx->msg, sizeof ctx->msg);
  if (r < 0)
    return r;
  if (ctx->export.fd >= 0)
    ctx->fds[ctx->n_fds++] = ctx->export.fd;
  if (!b->sync)
    return 0;
  /* Whoever may write the buffer may publish releases of it; a read-only opener gets
   * a read-only description, so it can neither forge nor rewind the sequence. */
  if ((r = backend_host_export_fd(&b->control, read_only, &fd, ctx->msg, sizeof ctx->msg)) < 0)
    return r;
  ctx->fds[ctx->n_fds++] = fd;
  if (b->sync_event_backend) {
    ctx->sync_export.fd = -1;
    r = b->sync_event_backend->export(b->sync_event_backend, &b->sync_event, false,
                                      &ctx->sync_export, ctx->msg, sizeof ctx->msg);
  }
  return r;
}

/* Replies with the buffer's info and what maps it; on failure gives back the
 * reference the create or open took (and the name, if the create made it). */
static int reply_open(struct conn *c, struct reg_buffer *b, bool created, bool read_only,
                      struct reply_ctx *ctx)
{
  struct registry *reg = &c->srv->reg;
  uint64_t id = b->id;
  char name[sizeof b->name];
  char ignored[64];
  int r;

  r = export_buffer(b, read_only, ctx);
  if (r == 0)
    r = fill_info(&ctx->info, b, &c->client, ctx);
  if (r < 0) {
    close_ctx_fds(ctx);
    if (r == GPUSHM_E_NOMEM)
      snprintf(ctx->msg, sizeof ctx->msg, "daemon out of memory");
    snprintf(name, sizeof name, "%s", b->name);
    if (created)
      registry_unlink(reg, &c->client, name, ignored, sizeof ignored);
    registry_close(reg, &c->client, id, ignored, sizeof ignored);
    return r;
  }
  gpushm__open_reply__init(&ctx->body.open);
  ctx->body.open.info = &ctx->info;
  ctx->body.open.created = created;
  ctx->body.open.read_only = read_only;
  ctx->body.open.ipc_handle.data = ctx->export.handle;
  ctx->body.open.ipc_handle.len = ctx->export.handle_len;
  ctx->body.open.sync_event_handle.data = ctx->sync_export.handle;
  ctx->body.open.sync_event_handle.len = ctx->sync_export.handle_len;
  ctx->body.open.has_control = b->sync;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_OPEN;
  ctx->reply.open = &ctx->body.open;
  return 0;
}

static int handle_create(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx)
{
  const Gpushm__CreateRequest *cr = req->create;
  struct reg_create_args args = {
    .name = cr->name,
    .size = cr->size,
    .backend = cr->backend,
    .device = cr->device,
    .mode = cr->mode,
    .lifetime = cr->lifetime,
    .open_existing = cr->open_existing,
    .sync = cr->sync,
  };
  struct reg_buffer *b;
  bool created;
  int r = registry_create(&c->srv->reg, &c->client, &args, &b, &created, ctx->msg, sizeof ctx->msg);

  if (r < 0)
    return r;
  if (created)
    log_debug("client %u created '%s' (id %llu, %llu bytes)", c->client.id, b->name,
              (unsigned long long)b->id, (unsigned long long)b->size);
  return reply_open(c, b, created, false, ctx);
}

static int handle_open(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx)
{
  const Gpushm__OpenRequest *o = req->open;
  const char *name = NULL;
  uint64_t id = 0;
  struct reg_buffer *b;
  int r;

  if (o->key_case == GPUSHM__OPEN_REQUEST__KEY_NAME)
    name = o->name;
  else if (o->key_case == GPUSHM__OPEN_REQUEST__KEY_ID)
    id = o->id;
  else
    return fail(ctx, GPUSHM_E_INVAL, "open needs a name or an id");
  r = registry_open(&c->srv->reg, &c->client, name, id, !o->read_only, o->event, &b, ctx->msg,
                    sizeof ctx->msg);
  if (r < 0)
    return r;
  return reply_open(c, b, false, o->read_only, ctx);
}

static int handle_close(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx)
{
  return registry_close(&c->srv->reg, &c->client, req->close->id, ctx->msg, sizeof ctx->msg);
}

static int handle_unlink(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx)
{
  return registry_unlink(&c->srv->reg, &c->client, req->unlink->name, ctx->msg, sizeof ctx->msg);
}

static bool visible_to(const struct reg_buffer *b, const struct reg_client *client, bool all)
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

static int handle_list(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx)
{
  const struct registry *reg = &c->srv->reg;
  /* Room for the envelope around the entries: request id, status, body tag and
   * length, and the "more" flag. */
  const size_t budget = GPUSHM_LIMIT_FRAME_BODY - 64;
  uint32_t max = req->list->max_entries;
  Gpushm__BufferInfo *infos, **ptrs;
  size_t used = 0, n = 0, i;

  if (req->list->all && !c->client.admin)
    return fail(ctx, GPUSHM_E_PERM, "listing every user's buffers needs root or the admin group");
  if (max == 0 || max > GPUSHM_LIMIT_LIST_PAGE)
    max = GPUSHM_LIMIT_LIST_PAGE;
  infos = reply_calloc(ctx, max, sizeof *infos);
  ptrs = reply_calloc(ctx, max, sizeof *ptrs);
  if (!infos || !ptrs)
    return fail(ctx, GPUSHM_E_NOMEM, "daemon out of memory");

  gpushm__list_reply__init(&ctx->body.list);
  for (i = registry_index_after(reg, req->list->after_id); i < reg->n_buffers && n < max; i++) {
    const struct reg_buffer *b = reg->by_id[i];
    size_t owned_before = ctx->n_owned, size;

    if (!visible_to(b, &c->client, req->list->all))
      continue;
    if (fill_info(&infos[n], b, &c->client, ctx) < 0)
      return fail(ctx, GPUSHM_E_NOMEM, "daemon out of memory");
    size = gpushm__buffer_info__get_packed_size(&infos[n]);
    size += 1 + varint_size(size);
    if (used + size > budget) {
      while (ctx->n_owned > owned_before)
        free(ctx->owned[--ctx->n_owned]);
      break;
    }
    used += size;
    ptrs[n] = &infos[n];
    n++;
  }
  ctx->body.list.n_buffers = n;
  ctx->body.list.buffers = ptrs;
  ctx->body.list.more = i < reg->n_buffers;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_LIST;
  ctx->reply.list = &ctx->body.list;
  return 0;
}

static const char *request_name(unsigned body);

static int fill_request_counts(const struct server *srv, struct reply_ctx *ctx,
                               Gpushm__StatsReply *s)
{
  Gpushm__RequestCount *counts = reply_calloc(ctx, SERVER_REQUEST_TYPES, sizeof *counts);
  Gpushm__RequestCount **ptrs = reply_calloc(ctx, SERVER_REQUEST_TYPES, sizeof *ptrs);
  size_t n = 0;

  if (!counts || !ptrs)
    return fail(ctx, GPUSHM_E_NOMEM, "daemon out of memory");
  for (unsigned t = 0; t < SERVER_REQUEST_TYPES; t++) {
    if (!srv->counters.by_type[t])
      continue;
    gpushm__request_count__init(&counts[n]);
    counts[n].type = (char *)request_name(t);
    counts[n].count = srv->counters.by_type[t];
    counts[n].errors = srv->counters.errors_by_type[t];
    ptrs[n] = &counts[n];
    n++;
  }
  s->requests_by_type = ptrs;
  s->n_requests_by_type = n;
  return 0;
}

/* Buffers and bytes by (backend, device), for capacity dashboards. */
static int fill_usage(const struct registry *reg, struct reply_ctx *ctx, Gpushm__StatsReply *s)
{
  const size_t max = GPUSHM_BACKEND_COUNT * (GPUSHM_LIMIT_DEVICES + 1);
  Gpushm__Usage *usage = reply_calloc(ctx, max, sizeof *usage);
  Gpushm__Usage **ptrs = reply_calloc(ctx, max, sizeof *ptrs);
  size_t n = 0;

  if (!usage || !ptrs)
    return fail(ctx, GPUSHM_E_NOMEM, "daemon out of memory");
  for (size_t i = 0; i < reg->n_buffers; i++) {
    const struct reg_buffer *b = reg->by_id[i];
    size_t u = 0;
    while (u < n && !((int)usage[u].backend == b->backend->kind && usage[u].device == b->device))
      u++;
    if (u == n) {
      if (n == max)
        continue;
      gpushm__usage__init(&usage[n]);
      usage[n].backend = (Gpushm__Backend)b->backend->kind;
      usage[n].device = b->device;
      ptrs[n] = &usage[n];
      n++;
    }
    usage[u].buffers++;
    usage[u].bytes += b->allocated;
  }
  s->usage = ptrs;
  s->n_usage = n;
  return 0;
}

/* Connected clients; admins see all, others those of their own uid. */
static int handle_clients(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx)
{
  const size_t budget = GPUSHM_LIMIT_FRAME_BODY - 64;
  struct server *srv = c->srv;
  Gpushm__ClientInfo *infos = reply_calloc(ctx, srv->n_clients, sizeof *infos);
  Gpushm__ClientInfo **ptrs = reply_calloc(ctx, srv->n_clients, sizeof *ptrs);
  size_t n = 0, used = 0;
  const struct list *l;

  if (!infos || !ptrs)
    return fail(ctx, GPUSHM_E_NOMEM, "daemon out of memory");
  gpushm__clients_reply__init(&ctx->body.clients);
  for (l = srv->conns.next; l != &srv->conns; l = l->next) {
    const struct conn *other = list_entry(l, struct conn, link);
    Gpushm__ClientInfo *ci = &infos[n];
    size_t size;

    if (other->client.id <= req->clients->after_id ||
        (!c->client.admin && other->client.uid != c->client.uid))
      continue;
    gpushm__client_info__init(ci);
    ci->client_id = other->client.id;
    ci->pid = (uint32_t)other->client.pid;
    ci->uid = (uint32_t)other->client.uid;
    ci->gid = (uint32_t)other->client.gid;
    ci->name = (char *)other->name;
    ci->connected_unix_ms = other->connected_unix_ms;
    ci->admin = other->client.admin;
    for (const struct list *h = other->client.holdings.next; h != &other->client.holdings;
         h = h->next) {
      const struct reg_holding *hold = list_entry(h, struct reg_holding, client_link);
      ci->buffers_held++;
      ci->bytes_held += hold->buffer->allocated;
    }
    size = gpushm__client_info__get_packed_size(ci);
    size += 1 + varint_size(size);
    if (used + size > budget)
      break;
    used += size;
    ptrs[n++] = ci;
  }
  ctx->body.clients.n_clients = n;
  ctx->body.clients.clients = ptrs;
  ctx->body.clients.more = l != &srv->conns;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_CLIENTS;
  ctx->reply.clients = &ctx->body.clients;
  return 0;
}

static int handle_stats(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx)
{
  struct server *srv = c->srv;
  Gpushm__StatsReply *s = &ctx->body.stats;
  int r;

  gpushm__stats_reply__init(s);
  s->daemon_version = PACKAGE_VERSION;
  s->instance_id = srv->instance_id;
  s->uptime_ms = uv_now(srv->loop) - srv->started_ms;
  s->clients = srv->n_clients;
  s->buffers = (uint32_t)srv->reg.n_buffers;
  s->buffers_linked = srv->reg.n_linked;
  s->bytes_allocated = srv->reg.bytes_allocated;
  s->requests = srv->counters.requests;
  s->request_errors = srv->counters.request_errors;
  s->protocol_errors = srv->counters.protocol_errors;
  s->clients_dropped = srv->counters.clients_dropped;
  s->open_fds = server_count_open_fds();
  s->next_buffer_id = srv->reg.next_id;
  if ((r = fill_devices(ctx, &s->devices, &s->n_devices)) < 0 ||
      (r = fill_request_counts(srv, ctx, s)) < 0 || (r = fill_usage(&srv->reg, ctx, s)) < 0)
    return r;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_STATS;
  ctx->reply.stats = s;
  return 0;
}

static int handle_disconnect(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx)
{
  uint32_t id = req->disconnect->client_id;
  char why[128];

  for (const struct list *l = c->srv->conns.next; l != &c->srv->conns; l = l->next) {
    struct conn *other = list_entry(l, struct conn, link);
    if (other->client.id != id)
      continue;
    /* Clients of other uids are as invisible here as in the clients listing. */
    if (!c->client.admin && other->client.uid != c->client.uid)
      break;
    if (other == c)
      return fail(ctx, GPUSHM_E_INVAL, "that is this connection: close it instead");
    snprintf(why, sizeof why, "disconnected by uid %u (client %u)", (unsigned)c->client.uid,
             c->client.id);
    log_info("client %u (pid %d, uid %u) %s", other->client.id, (int)other->client.pid,
             (unsigned)other->client.uid, why);
    conn_fail(other, GPUSHM_E_DISCONNECTED, why);
    return 0;
  }
  snprintf(ctx->msg, sizeof ctx->msg, "no client with id %u", id);
  return GPUSHM_E_NOENT;
}

static int handle_ping(struct conn *c, const Gpushm__Request *req, struct reply_ctx *ctx)
{
  gpushm__ping_reply__init(&ctx->body.ping);
  ctx->reply.body_case = GPUSHM__REPLY__BODY_PING;
  ctx->reply.ping = &ctx->body.ping;
  return 0;
}

static const struct {
  const char *name;
  handler_fn *fn;
} handlers[] = {
  [GPUSHM__REQUEST__BODY_HELLO] = { "hello", handle_hello },
  [GPUSHM__REQUEST__BODY_CREATE] = { "create", handle_create },
  [GPUSHM__REQUEST__BODY_OPEN] = { "open", handle_open },
  [GPUSHM__REQUEST__BODY_CLOSE] = { "close", handle_close },
  [GPUSHM__REQUEST__BODY_UNLINK] = { "unlink", handle_unlink },
  [GPUSHM__REQUEST__BODY_LIST] = { "list", handle_list },
  [GPUSHM__REQUEST__BODY_STATS] = { "stats", handle_stats },
  [GPUSHM__REQUEST__BODY_PING] = { "ping", handle_ping },
  [GPUSHM__REQUEST__BODY_CLIENTS] = { "clients", handle_clients },
  [GPUSHM__REQUEST__BODY_DISCONNECT] = { "disconnect", handle_disconnect },
};

static const char *request_name(unsigned body)
{
  return body < sizeof handlers / sizeof handlers[0] && handlers[body].name ? handlers[body].name
                                                                             : "unknown";
}

static void free_ctx(struct reply_ctx *ctx)
{
  while (ctx->n_owned)
    free(ctx->owned[--ctx->n_owned]);
}

void dispatch_request(struct conn *c, const Gpushm__Request *req)
{
  struct reply_ctx ctx = { .n_fds = 0 };
  unsigned body = (unsigned)req->body_case;
  int status;

  c->srv->counters.requests++;
  c->srv->counters.by_type[body < SERVER_REQUEST_TYPES ? body : 0]++;
  if (req->request_id == 0) {
    conn_fail(c, GPUSHM_E_PROTO, "request id 0 is reserved");
    return;
  }
  if (!c->hello_done && req->body_case != GPUSHM__REQUEST__BODY_HELLO) {
    conn_fail(c, GPUSHM_E_PROTO, "the first request must be hello");
    return;
  }
  gpushm__reply__init(&ctx.reply);
  ctx.reply.request_id = req->request_id;
  if (body < sizeof handlers / sizeof handlers[0] && handlers[body].fn) {
    status = handlers[body].fn(c, req, &ctx);
  } else {
    /* A newer client may know requests this daemon does not: answer, don't hang up. */
    snprintf(ctx.msg, sizeof ctx.msg, "unknown request type %u", body);
    status = GPUSHM_E_UNSUPPORTED;
  }
  if (status < 0) {
    c->srv->counters.request_errors++;
    c->srv->counters.errors_by_type[body < SERVER_REQUEST_TYPES ? body : 0]++;
    log_debug("client %u: %s failed: %s", c->client.id, request_name(body), ctx.msg);
    close_ctx_fds(&ctx);
    ctx.reply.status = -status;
    ctx.reply.message = ctx.msg;
    ctx.reply.body_case = GPUSHM__REPLY__BODY__NOT_SET;
  }
  conn_send_reply(c, &ctx.reply.base, ctx.fds, ctx.n_fds);
  free_ctx(&ctx);
}
