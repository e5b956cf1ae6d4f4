/* SPDX-License-Identifier: MIT */
/* The admin family: list, stats, clients, disconnect (what gpushmctl asks). */
#include "config.h"
#include "server/handlers.h"
#include "server/reply.h"
#include "server/metrics.h"
#include "server/detached.h"
#include "list_codec.h"
#include "protocol.h"
#include "util/log.h"
#include "wire.h"
#include "backends/backend_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
    return reply_fail(ctx, PROTO_E_PERM, "listing every user's buffers needs root or the admin group");
  if (!(page = reply_malloc(ctx, budget + LIST_CODEC_MORE_SIZE)))
    return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  end = page;
  for (; i < registry_count(reg) && n < max; i++) {
    const struct reg_object *b = registry_at(reg, i);
    size_t info_size;

    if (!visible_to(b, call->client, all))
      continue;
    reply_fill_info(ctx, b, call->client, req->list->metadata, ctx->holders, ctx->holder_ptrs);
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
    return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  for (unsigned t = 0; t < HANDLER_REQUEST_TYPES; t++) {
    uint64_t *row = &le[n * n_le], total = 0;

    if (!counters->by_type[t])
      continue;
    gpushm__request_count__init(&counts[n]);
    counts[n].type = (char *)wire_request_name(t); /* the rows' names */
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
    return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
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
    return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
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
    return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
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
    return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
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
            return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
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
    return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  more = srv->each_client(srv->ctx, add_client, &w);
  gpushm__clients_reply__init(&ctx->body.clients);
  ctx->body.clients.n_clients = w.n;
  ctx->body.clients.clients = w.ptrs;
  ctx->body.clients.more = more;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_CLIENTS;
  ctx->reply.clients = &ctx->body.clients;
  return 0;
}

/* s, too large for a frame, as a sealed memfd that comes with a reply saying so: one
 * snapshot, however many devices, request types and detached processes it covers. */
static int spill_stats(struct handler_reply *ctx, const Gpushm__StatsReply *s)
{
  Gpushm__StatsReply *pointer = reply_calloc(ctx, 1, sizeof *pointer);
  size_t len = gpushm__stats_reply__get_packed_size(s);
  uint8_t *packed;
  int fd;

  if (len > GPUSHM_LIMIT_STATS_REPLY)
    return reply_fail(ctx, PROTO_E_LIMIT, "stats reply larger than GPUSHM_LIMIT_STATS_REPLY");
  if (!pointer || !(packed = reply_malloc(ctx, len)))
    return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
  gpushm__stats_reply__pack(s, packed);
  fd = memfd_create("gpushm-stats", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || write(fd, packed, len) != (ssize_t)len ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    snprintf(ctx->msg, sizeof ctx->msg, "stats reply in a memfd: %s",
             strerror(errno ? errno : EIO));
    if (fd >= 0)
      close(fd);
    return PROTO_E_NOMEM;
  }
  gpushm__stats_reply__init(pointer);
  pointer->in_memfd = true;
  ctx->reply.stats = pointer;
  ctx->fds[0] = fd;
  ctx->n_fds = 1;
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
  if ((r = reply_devices(ctx, &s->devices, &s->n_devices)) < 0 ||
      (r = fill_request_counts(srv->counters, ctx, s)) < 0 ||
      (r = fill_opens(srv->counters, ctx, s)) < 0 || (r = fill_usage(reg, ctx, s)) < 0 ||
      (r = fill_segments(reg, ctx, s)) < 0 ||
      (srv->detached && (r = fill_detached(reg, srv->detached, call->client, ctx, s)) < 0))
    return r;
  /* Last: some rows read what the fields above computed. */
  {
    const struct metrics_source src = { .reg = reg, .counters = srv->counters, .stats = s,
                                        .all_rows = req->stats->all_rows };
    void *block = NULL;
    if (ctx->n_owned == HANDLER_OWNED_MAX || metrics_fill(&src, s, &block) < 0)
      return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
    reply_own(ctx, block);
  }
  ctx->reply.body_case = GPUSHM__REPLY__BODY_STATS;
  ctx->reply.stats = s;
  /* The frame's header and the reply's own fields are well within this margin. */
  if (gpushm__reply__get_packed_size(&ctx->reply) + 64 > GPUSHM_LIMIT_FRAME_BODY &&
      req->stats->reply_in_memfd)
    return spill_stats(ctx, s);
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
    return reply_fail(ctx, PROTO_E_INVAL, "that is this connection: close it instead");
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

/* The rows whose cost grows with what gpushmd holds are marked costly: non-admins'
 * share of the loop for them is bounded (server/costly.h).  Finer rules (list "all",
 * other users' clients) depend on the request's fields and stay in the handlers. */
static const struct handler rows[] = {
  [GPUSHM__REQUEST__BODY_LIST] = { .name = "list", .needs_hello = true, .costly = true,
                                   .fn = handle_list },
  [GPUSHM__REQUEST__BODY_STATS] = { .name = "stats", .needs_hello = true, .costly = true,
                                    .fn = handle_stats },
  [GPUSHM__REQUEST__BODY_CLIENTS] = { .name = "clients", .needs_hello = true, .costly = true,
                                      .fn = handle_clients },
  [GPUSHM__REQUEST__BODY_DISCONNECT] = { .name = "disconnect", .needs_hello = true,
                                         .fn = handle_disconnect },
};

const struct handler_family handler_family_admin = {
  .name = "admin", .version = 2, .rows = rows, .n_rows = sizeof rows / sizeof rows[0],
};
