/* Calls for admin tools: the buffer list and daemon statistics. */
#include "config.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(GPUSHM_STATS_MAX_DEVICES == GPUSHM_LIMIT_DEVICES,
               "gpushm_stats_t must hold every device the daemon reports");

static int copy_info(gpushm_buffer_info_t *dst, const Gpushm__BufferInfo *src)
{
  memset(dst, 0, sizeof *dst);
  dst->id = src->id;
  snprintf(dst->name, sizeof dst->name, "%s", src->name ? src->name : "");
  dst->size = src->size;
  dst->allocated = src->allocated;
  dst->backend = (uint32_t)src->backend;
  dst->device = src->device;
  dst->owner_uid = src->owner_uid;
  dst->owner_gid = src->owner_gid;
  dst->mode = src->mode;
  dst->lifetime = (uint32_t)src->lifetime;
  dst->linked = src->linked;
  dst->sync = src->sync;
  dst->refs = src->refs;
  dst->my_refs = src->my_refs;
  dst->creator_pid = src->creator_pid;
  dst->created_unix_ms = src->created_unix_ms;
  dst->holders_total = src->holders_total;
  if (src->n_holders) {
    if (!(dst->holders = calloc(src->n_holders, sizeof *dst->holders)))
      return GPUSHM_E_NOMEM;
    for (size_t i = 0; i < src->n_holders; i++) {
      dst->holders[i].client_id = src->holders[i]->client_id;
      dst->holders[i].pid = src->holders[i]->pid;
      dst->holders[i].uid = src->holders[i]->uid;
      dst->holders[i].refs = src->holders[i]->refs;
    }
    dst->n_holders = src->n_holders;
  }
  return 0;
}

void gpushm_buffer_info_free(gpushm_buffer_info_t *infos, size_t count)
{
  if (!infos)
    return;
  for (size_t i = 0; i < count; i++)
    free(infos[i].holders);
  free(infos);
}

/* Appends one page of the listing to *infos; *after_id moves past it. */
static int fetch_page(gpushm_t *conn, bool all, uint64_t *after_id, gpushm_buffer_info_t **infos,
                      size_t *n, size_t *cap, bool *more)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__ListRequest body = GPUSHM__LIST_REQUEST__INIT;
  Gpushm__Reply *reply;
  const Gpushm__ListReply *page;
  int r;

  body.after_id = *after_id;
  body.all = all;
  req.body_case = GPUSHM__REQUEST__BODY_LIST;
  req.list = &body;
  if ((r = client_call(conn, &req, &reply, NULL)) < 0)
    return r;
  if (reply->body_case != GPUSHM__REPLY__BODY_LIST) {
    r = client_error(GPUSHM_E_PROTO, "malformed list reply");
    goto out;
  }
  page = reply->list;
  if (*n + page->n_buffers > *cap) {
    size_t new_cap = (*n + page->n_buffers) * 2;
    gpushm_buffer_info_t *grown = realloc(*infos, new_cap * sizeof *grown);
    if (!grown) {
      r = client_error(GPUSHM_E_NOMEM, "out of memory");
      goto out;
    }
    *infos = grown;
    *cap = new_cap;
  }
  for (size_t i = 0; i < page->n_buffers; i++) {
    if (copy_info(&(*infos)[*n], page->buffers[i]) < 0) {
      r = client_error(GPUSHM_E_NOMEM, "out of memory");
      goto out;
    }
    *after_id = (*infos)[(*n)++].id;
  }
  /* An empty page ends the walk even if the daemon says more: no progress. */
  *more = page->more && page->n_buffers > 0;
out:
  gpushm__reply__free_unpacked(reply, NULL);
  return r;
}

int gpushm_list(gpushm_t *conn, gpushm_buffer_info_t **out, size_t *count)
{
  return gpushm_list_ex(conn, 0, out, count);
}

int gpushm_list_ex(gpushm_t *conn, unsigned flags, gpushm_buffer_info_t **out, size_t *count)
{
  gpushm_buffer_info_t *infos = NULL;
  size_t n = 0, cap = 0;
  uint64_t after_id = 0;
  bool more = true;

  client_clear_error();
  if (!conn || !out || !count)
    return client_error(GPUSHM_E_INVAL, "conn, out and count must not be NULL");
  if (flags & ~GPUSHM_LIST_ALL)
    return client_error(GPUSHM_E_INVAL, "unknown list flags 0x%x", flags);
  while (more) {
    int r = fetch_page(conn, flags & GPUSHM_LIST_ALL, &after_id, &infos, &n, &cap, &more);
    if (r < 0) {
      gpushm_buffer_info_free(infos, n);
      return r;
    }
  }
  *out = infos;
  *count = n;
  return 0;
}

int gpushm_stats(gpushm_t *conn, gpushm_stats_t *out)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__StatsRequest body = GPUSHM__STATS_REQUEST__INIT;
  Gpushm__Reply *reply;
  const Gpushm__StatsReply *s;
  int r;

  client_clear_error();
  if (!conn || !out)
    return client_error(GPUSHM_E_INVAL, "conn and out must not be NULL");
  req.body_case = GPUSHM__REQUEST__BODY_STATS;
  req.stats = &body;
  if ((r = client_call(conn, &req, &reply, NULL)) < 0)
    return r;
  if (reply->body_case != GPUSHM__REPLY__BODY_STATS) {
    gpushm__reply__free_unpacked(reply, NULL);
    return client_error(GPUSHM_E_PROTO, "malformed stats reply");
  }
  s = reply->stats;
  memset(out, 0, sizeof *out);
  snprintf(out->daemon_version, sizeof out->daemon_version, "%s",
           s->daemon_version ? s->daemon_version : "");
  out->instance_id = s->instance_id;
  out->uptime_ms = s->uptime_ms;
  out->clients = s->clients;
  out->buffers = s->buffers;
  out->buffers_linked = s->buffers_linked;
  out->bytes_allocated = s->bytes_allocated;
  out->requests = s->requests;
  out->request_errors = s->request_errors;
  out->protocol_errors = s->protocol_errors;
  out->clients_dropped = s->clients_dropped;
  out->open_fds = s->open_fds;
  for (size_t i = 0; i < s->n_devices && i < GPUSHM_STATS_MAX_DEVICES; i++) {
    const Gpushm__Device *d = s->devices[i];
    gpushm_device_stats_t *o = &out->devices[out->n_devices++];
    o->ordinal = d->ordinal;
    snprintf(o->name, sizeof o->name, "%s", d->name ? d->name : "");
    if (d->uuid.len == sizeof o->uuid)
      memcpy(o->uuid, d->uuid.data, sizeof o->uuid);
    o->total_memory = d->total_memory;
    o->free_memory = d->free_memory;
  }
  for (size_t i = 0; i < s->n_requests_by_type && i < GPUSHM_STATS_MAX_REQUEST_TYPES; i++) {
    gpushm_request_count_t *o = &out->requests_by_type[out->n_request_types++];
    snprintf(o->type, sizeof o->type, "%s", s->requests_by_type[i]->type);
    o->count = s->requests_by_type[i]->count;
    o->errors = s->requests_by_type[i]->errors;
  }
  for (size_t i = 0; i < s->n_usage && i < GPUSHM_STATS_MAX_USAGE; i++) {
    gpushm_usage_t *o = &out->usage[out->n_usage++];
    o->backend = (uint32_t)s->usage[i]->backend;
    o->device = s->usage[i]->device;
    o->buffers = s->usage[i]->buffers;
    o->bytes = s->usage[i]->bytes;
  }
  gpushm__reply__free_unpacked(reply, NULL);
  return 0;
}

int gpushm_clients(gpushm_t *conn, gpushm_client_info_t **out, size_t *count)
{
  gpushm_client_info_t *infos = NULL;
  size_t n = 0, cap = 0;
  uint32_t after_id = 0;
  bool more = true;
  int r = 0;

  client_clear_error();
  if (!conn || !out || !count)
    return client_error(GPUSHM_E_INVAL, "conn, out and count must not be NULL");
  while (more && r == 0) {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__ClientsRequest body = GPUSHM__CLIENTS_REQUEST__INIT;
    Gpushm__Reply *reply;
    const Gpushm__ClientsReply *page;

    body.after_id = after_id;
    req.body_case = GPUSHM__REQUEST__BODY_CLIENTS;
    req.clients = &body;
    if ((r = client_call(conn, &req, &reply, NULL)) < 0)
      break;
    if (reply->body_case != GPUSHM__REPLY__BODY_CLIENTS) {
      r = client_error(GPUSHM_E_PROTO, "malformed clients reply");
    } else {
      page = reply->clients;
      if (n + page->n_clients > cap) {
        gpushm_client_info_t *grown;
        cap = (n + page->n_clients) * 2 + 1;
        if (!(grown = realloc(infos, cap * sizeof *grown)))
          r = client_error(GPUSHM_E_NOMEM, "out of memory");
        else
          infos = grown;
      }
      for (size_t i = 0; r == 0 && i < page->n_clients; i++) {
        const Gpushm__ClientInfo *ci = page->clients[i];
        gpushm_client_info_t *o = &infos[n++];
        memset(o, 0, sizeof *o);
        o->client_id = ci->client_id;
        o->pid = ci->pid;
        o->uid = ci->uid;
        o->gid = ci->gid;
        snprintf(o->name, sizeof o->name, "%s", ci->name ? ci->name : "");
        o->connected_unix_ms = ci->connected_unix_ms;
        o->buffers_held = ci->buffers_held;
        o->bytes_held = ci->bytes_held;
        o->admin = ci->admin;
        after_id = ci->client_id;
      }
      more = page->more && page->n_clients > 0;
    }
    gpushm__reply__free_unpacked(reply, NULL);
  }
  if (r < 0) {
    free(infos);
    return r;
  }
  *out = infos;
  *count = n;
  return 0;
}

void gpushm_client_info_free(gpushm_client_info_t *infos)
{
  free(infos);
}

int gpushm_client_disconnect(gpushm_t *conn, uint32_t client_id)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__DisconnectRequest body = GPUSHM__DISCONNECT_REQUEST__INIT;
  Gpushm__Reply *reply;
  int r;

  client_clear_error();
  if (!conn)
    return client_error(GPUSHM_E_INVAL, "conn is NULL");
  if ((r = client_need_feature(conn, GPUSHM_FEATURE_DISCONNECT, "disconnecting clients")) < 0)
    return r;
  body.client_id = client_id;
  req.body_case = GPUSHM__REQUEST__BODY_DISCONNECT;
  req.disconnect = &body;
  if ((r = client_call(conn, &req, &reply, NULL)) < 0)
    return r;
  gpushm__reply__free_unpacked(reply, NULL);
  return 0;
}
