/* SPDX-License-Identifier: MIT */
/* What the request families share to build replies: memory a reply owns until it is
 * sent, a buffer's info as listings and opens show it, an open's reply from a ready
 * export, the devices, and the wire's spellings of what the registry keeps apart. */
#include "config.h"
#include "server/handlers.h"
#include "server/reply.h"
#include "protocol.h"
#include "util/log.h"
#include "wire.h"
#include "backends/backend_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int reply_fail(struct handler_reply *ctx, int status, const char *why)
{
  snprintf(ctx->msg, sizeof ctx->msg, "%s", why);
  return status;
}

/* Memory that lives until the reply is sent; NULL when out of memory. */
void *reply_own(struct handler_reply *ctx, void *p)
{
  if (p)
    ctx->owned[ctx->n_owned++] = p;
  return p;
}

void *reply_calloc(struct handler_reply *ctx, size_t n, size_t size)
{
  return ctx->n_owned < HANDLER_OWNED_MAX ? reply_own(ctx, calloc(n ? n : 1, size)) : NULL;
}

void *reply_malloc(struct handler_reply *ctx, size_t size)
{
  return ctx->n_owned < HANDLER_OWNED_MAX ? reply_own(ctx, malloc(size ? size : 1)) : NULL;
}

/* The devices the CUDA backends can use; free memory only where the daemon holds a
 * context (asking elsewhere would create one). */
int reply_devices(struct handler_reply *ctx, Gpushm__Device ***out, size_t *n_out)
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
    return reply_fail(ctx, PROTO_E_NOMEM, "daemon out of memory");
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

Gpushm__Backend reply_wire_backend(const struct reg_object *obj)
{
  return (Gpushm__Backend)registry_listed_backend(obj);
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

/* A weight-set generation: its number, the set's newest, and its buffers (listed only
 * in open replies: a listing's entries stay small). */
static Gpushm__WeightsInfo *fill_weights(struct handler_reply *ctx, const struct reg_object *b,
                                         const struct reg_weights_info *w, bool buffers)
{
  gpushm__weights_info__init(&ctx->weights);
  ctx->weights.generation = w->generation;
  ctx->weights.newest = w->newest;
  ctx->weights.manifest_size = w->manifest_size;
  ctx->weights.tensors = w->n_tensors;
  for (uint32_t i = 0; buffers && i < b->n_pinned && i < GPUSHM_LIMIT_WEIGHT_BUFFERS; i++) {
    const struct reg_object *p = b->pinned[i];
    gpushm__weights_buffer__init(&ctx->weights_buffers[i]);
    ctx->weights_buffers[i].id = p->id;
    ctx->weights_buffers[i].size = p->size;
    ctx->weights_buffers[i].device = p->device;
    ctx->weights_buffers[i].backend = reply_wire_backend(p);
    ctx->weights_buffer_ptrs[i] = &ctx->weights_buffers[i];
    ctx->weights.n_buffers = i + 1;
  }
  ctx->weights.buffers = ctx->weights_buffer_ptrs;
  return &ctx->weights;
}

void reply_fill_info(struct handler_reply *ctx, const struct reg_object *b,
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
    holders[i].read_write = h->read_write;
    holders[i].ring_consumer = registry_ring_consumer(b, h->client->id);
    ptrs[i] = &holders[i];
  }
  info->id = b->id;
  info->name = (char *)b->name;
  info->size = b->size;
  info->allocated = b->allocated;
  /* points into the backend's device table, which outlives the reply */
  if (b->device >= 0 && (info->device_uuid.data = (uint8_t *)backend_cuda_device_uuid(b->device)))
    info->device_uuid.len = 16;
  info->backend = reply_wire_backend(b);
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
  info->kind = b->kind == REG_EVENT    ? GPUSHM__KIND__KIND_EVENT
               : b->kind == REG_TIMELINE ? GPUSHM__KIND__KIND_TIMELINE
               : b->kind == REG_RING     ? GPUSHM__KIND__KIND_RING
               : b->kind == REG_WEIGHTS  ? GPUSHM__KIND__KIND_WEIGHTS
               : d.image               ? GPUSHM__KIND__KIND_IMAGE
                                    : GPUSHM__KIND__KIND_BUFFER;
  if (d.image) {
    fill_image(&ctx->info_image, d.image);
    info->image = &ctx->info_image;
  }
  if (d.external) {
    fill_external(&ctx->info_external, d.external);
    info->external = &ctx->info_external;
  }
  if (d.ring_slots) {
    gpushm__ring_info__init(&ctx->info_ring);
    ctx->info_ring.slots = d.ring_slots;
    ctx->info_ring.slot_size = d.ring_slot_size;
    ctx->info_ring.slot_stride = d.ring_slot_stride;
    ctx->info_ring.consumers = d.ring_consumers;
    info->ring = &ctx->info_ring;
  }
  if (d.weights)
    info->weights = fill_weights(ctx, b, d.weights, false);
}

void reply_close_fds(struct handler_reply *ctx)
{
  while (ctx->n_fds)
    close(ctx->fds[--ctx->n_fds]);
}

/* Replies with a ready export from the registry; nothing here can fail, so the
 * reference it stands for is never in doubt. */
int reply_open(struct handler_call *call, struct handler_reply *ctx)
{
  struct reg_export *e = &ctx->export;

  /* No holders: an open's cost must not grow with them (list and show name them). */
  reply_fill_info(ctx, e->buffer, call->client, true, NULL, NULL);
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
  if (e->ring_slots) {
    gpushm__ring_info__init(&ctx->ring);
    ctx->ring.slots = e->ring_slots;
    ctx->ring.slot_size = e->ring_slot_size;
    ctx->ring.slot_stride = e->ring_slot_stride;
    ctx->body.open.ring = &ctx->ring;
  }
  if (e->buffer->kind == REG_WEIGHTS) {
    struct reg_description d;
    registry_describe(e->buffer, &d);
    /* once, with its buffers: the open's own */
    ctx->info.weights = NULL;
    ctx->body.open.weights = fill_weights(ctx, e->buffer, d.weights, true);
  }
  ctx->reply.body_case = GPUSHM__REPLY__BODY_OPEN;
  ctx->reply.open = &ctx->body.open;
  return 0;
}

struct image_params reply_image_params(const Gpushm__ImageDesc *d)
{
  return (struct image_params){
    .format = d->format, .width = d->width, .height = d->height, .depth = d->depth,
    .mip_levels = d->mip_levels, .array_layers = d->array_layers, .tiling = d->tiling,
    .usage = d->usage, .row_pitch = d->row_pitch,
  };
}
