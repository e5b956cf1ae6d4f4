/* SPDX-License-Identifier: MIT */
/* The core family: hello, create, open, close, unlink, unmap, ping, promise. */
#include "config.h"
#include "server/handlers.h"
#include "server/reply.h"
#include "protocol.h"
#include "shm_layout.h"
#include "util/log.h"
#include "wire.h"
#include "backends/backend_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    return reply_fail(ctx, PROTO_E_INVAL, "hello was already exchanged");
  if (lo > hi)
    return reply_fail(ctx, PROTO_E_INVAL, "hello: min_version is above max_version");
  if (version < lo || version < GPUSHM_PROTOCOL_MIN_VERSION) {
    snprintf(ctx->msg, sizeof ctx->msg, "client speaks protocol %u-%u, daemon %u-%u", lo, hi,
             GPUSHM_PROTOCOL_MIN_VERSION, GPUSHM_PROTOCOL_VERSION);
    return PROTO_E_VERSION;
  }
  call->hello_version = version;
  call->hello_features = hello->features;
  call->hello_ranged = hello->min_version || hello->max_version;
  if (strlen(hello->client_name) > GPUSHM_LIMIT_CLIENT_NAME_LEN)
    return reply_fail(ctx, PROTO_E_LIMIT, "client name too long");
  /* Admin tools print it: no escape sequences, no invalid UTF-8. */
  if (!wire_text_valid(hello->client_name, GPUSHM_LIMIT_CLIENT_NAME_LEN))
    return reply_fail(ctx, PROTO_E_INVAL, "client name must be printable UTF-8 (no control "
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
  for (size_t i = 0; i < srv->n_families && i < HANDLER_FAMILIES_MAX; i++) {
    gpushm__request_family__init(&ctx->families[i]);
    ctx->families[i].name = (char *)srv->families[i]->name;
    ctx->families[i].version = srv->families[i]->version;
    ctx->family_ptrs[i] = &ctx->families[i];
    ctx->body.hello.n_families = i + 1;
  }
  ctx->body.hello.families = ctx->family_ptrs;
  if ((r = reply_devices(ctx, &ctx->body.hello.devices, &ctx->body.hello.n_devices)) < 0)
    return r;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_HELLO;
  ctx->reply.hello = &ctx->body.hello;
  return 0;
}

/* Whether a create asks for an event: by its kind, or (a client before 0.8, or one that
 * names no kind) by the backend that spelt one. */
static bool create_is_event(const Gpushm__CreateRequest *cr)
{
  return cr->kind ? cr->kind == GPUSHM__KIND__KIND_EVENT
                  : cr->backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT;
}

/* The registry's kind a create or an open means (the kind checked known first). */
static enum reg_kind reg_kind_of_wire(Gpushm__Kind kind, bool event)
{
  return kind == GPUSHM__KIND__KIND_TIMELINE ? REG_TIMELINE
         : kind == GPUSHM__KIND__KIND_RING   ? REG_RING
         : kind == GPUSHM__KIND__KIND_WEIGHTS ? REG_WEIGHTS
         : kind == GPUSHM__KIND__KIND_EVENT || (!kind && event) ? REG_EVENT
                                                                : REG_BUFFER;
}

/* A kind that contradicts the rest of the request is refused, not guessed at. */
static int check_create_kind(const Gpushm__CreateRequest *cr, struct handler_reply *ctx)
{
  switch (cr->kind) {
  case GPUSHM__KIND__KIND_UNSPECIFIED:
    return 0;
  case GPUSHM__KIND__KIND_EVENT:
    if (cr->backend && cr->backend != GPUSHM__BACKEND__BACKEND_CUDA_EVENT)
      return reply_fail(ctx, PROTO_E_INVAL, "an event has no backend");
    return 0;
  case GPUSHM__KIND__KIND_TIMELINE:
    if (cr->backend || cr->image)
      return reply_fail(ctx, PROTO_E_INVAL, "a timeline has no backend and no image");
    return 0;
  case GPUSHM__KIND__KIND_RING:
    if (cr->backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT || cr->sync)
      return reply_fail(ctx, PROTO_E_INVAL, "a ring's slots are memory, ordered by its own "
                        "timelines: no event backend, no sync");
    return 0;
  case GPUSHM__KIND__KIND_WEIGHTS:
    return reply_fail(ctx, PROTO_E_INVAL, "a weight set is published (PublishRequest), not "
                      "created");
  case GPUSHM__KIND__KIND_BUFFER:
  case GPUSHM__KIND__KIND_IMAGE:
    if (cr->backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT)
      return reply_fail(ctx, PROTO_E_INVAL, "backend 4 spells an event, not memory");
    if ((cr->kind == GPUSHM__KIND__KIND_IMAGE) != (cr->image != NULL))
      return reply_fail(ctx, PROTO_E_INVAL, cr->image ? "an image description in a create "
                        "of kind buffer" : "a create of kind image needs its description");
    return 0;
  default:
    snprintf(ctx->msg, sizeof ctx->msg, "kind %d is unknown to gpushmd %s", (int)cr->kind,
             PACKAGE_VERSION);
    return PROTO_E_UNSUPPORTED;
  }
}

static int handle_create(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  const Gpushm__CreateRequest *cr = req->create;
  const bool event = create_is_event(cr);
  const enum reg_kind kind = reg_kind_of_wire(cr->kind, event);
  struct reg_create_args args = {
    .kind = kind,
    .name = cr->name,
    .size = cr->size,
    .backend = kind == REG_BUFFER || kind == REG_RING ? (int)cr->backend : 0,
    .device = cr->device,
    .mode = cr->mode,
    .lifetime = cr->lifetime,
    .open_existing = cr->open_existing,
    .sync = cr->sync || kind == REG_TIMELINE, /* a timeline is all sync */
    .ring_slots = kind == REG_RING ? cr->ring_slots : 0,
    .strict_mode = cr->strict_mode,
    .has_group = cr->set_group,
    .group = (gid_t)cr->group,
    .ipc_fence = call->policy->ipc_fences,
    .metadata = cr->metadata.data,
    .metadata_len = cr->metadata.len,
  };
  struct image_params image;
  const struct reg_object *b;
  int r;

  if ((r = check_create_kind(cr, ctx)) < 0)
    return r;
  if (kind == REG_RING && !(call->features & PROTO_FEATURE_RINGS))
    return reply_fail(ctx, PROTO_E_UNSUPPORTED, "rings need PROTO_FEATURE_RINGS at hello");
  if (cr->image) {
    /* A field an older client cannot send; a newer one names the feature with it. */
    if (!(call->features & PROTO_FEATURE_GRAPHICS))
      return reply_fail(ctx, PROTO_E_UNSUPPORTED, "images need PROTO_FEATURE_GRAPHICS at hello");
    if (event || cr->size)
      return reply_fail(ctx, PROTO_E_INVAL, "an image is no event, and its size is its own");
    image = reply_image_params(cr->image);
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
                         .backend = b->backend ? b->backend->name
                                    : b->kind == REG_TIMELINE ? "timeline" : "event",
                         .device = b->device, .has_device = b->backend != &backend_host),
              "client %u created '%s' (id %llu, %llu bytes)", call->client->id, b->name,
              (unsigned long long)b->id, (unsigned long long)b->size);
  }
  return reply_open(call, ctx);
}

/* What the create will use, the daemon's default-backend included: any device backend
 * (or an event) needs the device's context. */
static int create_device(const struct handler_call *call, const Gpushm__Request *req)
{
  const Gpushm__CreateRequest *cr = req->create;
  int effective = create_is_event(cr) ? GPUSHM__BACKEND__BACKEND_CUDA_EVENT
                  : cr->kind == GPUSHM__KIND__KIND_TIMELINE ? PROTO_BACKEND_HOST
                  : cr->backend                             ? (int)cr->backend
                                      : registry_default_backend(call->reg, call->policy);

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
    return reply_fail(ctx, PROTO_E_INVAL, "open needs a name or an id");
  /* (the wait itself is the session's: it parks a request this answers NOENT) */
  if (o->wait_ms && (!name || o->ring_attach || o->via_weights))
    return reply_fail(ctx, PROTO_E_INVAL, "only an open by name waits for its name");
  if (o->wait_ms > GPUSHM_LIMIT_OPEN_WAIT_MS) {
    snprintf(ctx->msg, sizeof ctx->msg, "an open waits at most %u ms for its name, not %u "
             "(GPUSHM_LIMIT_OPEN_WAIT_MS)", GPUSHM_LIMIT_OPEN_WAIT_MS, o->wait_ms);
    return PROTO_E_INVAL;
  }
  switch (o->kind) {
  case GPUSHM__KIND__KIND_UNSPECIFIED:
  case GPUSHM__KIND__KIND_BUFFER:
  case GPUSHM__KIND__KIND_IMAGE:
  case GPUSHM__KIND__KIND_EVENT:
  case GPUSHM__KIND__KIND_TIMELINE:
  case GPUSHM__KIND__KIND_RING:
    break;
  case GPUSHM__KIND__KIND_WEIGHTS:
    if (!(call->features & PROTO_FEATURE_WEIGHTS))
      return reply_fail(ctx, PROTO_E_UNSUPPORTED, "weight sets need PROTO_FEATURE_WEIGHTS at "
                        "hello");
    break;
  default:
    snprintf(ctx->msg, sizeof ctx->msg, "kind %d is unknown to gpushmd %s", (int)o->kind,
             PACKAGE_VERSION);
    return PROTO_E_UNSUPPORTED;
  }
  if (o->ring_attach) {
    if (o->kind != GPUSHM__KIND__KIND_TIMELINE || !id || o->read_only)
      return reply_fail(ctx, PROTO_E_INVAL, "attaching to a ring opens its done timeline "
                        "read-write, by the ring's id");
    if (!(call->features & PROTO_FEATURE_RINGS))
      return reply_fail(ctx, PROTO_E_UNSUPPORTED, "rings need PROTO_FEATURE_RINGS at hello");
    r = registry_ring_attach(call->reg, call->client, call->policy, id, &ctx->export, ctx->msg,
                             sizeof ctx->msg);
  } else if (o->via_weights) {
    if (!id || o->kind > GPUSHM__KIND__KIND_BUFFER || !o->read_only)
      return reply_fail(ctx, PROTO_E_INVAL, "a weight set's buffer is opened read-only, by "
                        "its id");
    if (!(call->features & PROTO_FEATURE_WEIGHTS))
      return reply_fail(ctx, PROTO_E_UNSUPPORTED, "weight sets need PROTO_FEATURE_WEIGHTS at "
                        "hello");
    r = registry_open_via(call->reg, call->client, call->policy, id, o->via_weights,
                          &ctx->export, ctx->msg, sizeof ctx->msg);
  } else {
    r = registry_open(call->reg, call->client, call->policy, name, id, o->read_only,
                      reg_kind_of_wire(o->kind, o->event), &ctx->export, ctx->msg,
                      sizeof ctx->msg);
  }
  /* One who may not see every buffer is told that it may not see every buffer: in the
   * same words whether there is one or not, which gives nothing away. */
  if (r == PROTO_E_NOENT && name && call->client->uid != 0 && !call->client->admin)
    snprintf(ctx->msg, sizeof ctx->msg, "no buffer named '%s' that uid %u may open (one "
             "whose owner and mode keep it from uid %u is not shown either)", name,
             (unsigned)call->client->uid, (unsigned)call->client->uid);
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
    /* The reason quotes the name and a failed one-way unlink is logged with it: only a
     * valid name may be quoted (any other bytes would reach the log unchecked). */
    if (!wire_name_valid(u->name))
      return reply_fail(ctx, PROTO_E_NAME, "invalid name");
    if (!b || !b->linked || strcmp(b->name, u->name) != 0) {
      snprintf(ctx->msg, sizeof ctx->msg, "'%s' does not name buffer %llu (any more)", u->name,
               (unsigned long long)u->id);
      return PROTO_E_NOENT;
    }
  }
  return registry_unlink(call->reg, call->client, u->name, ctx->msg, sizeof ctx->msg);
}

static int handle_promise(struct handler_call *call, const Gpushm__Request *req,
                          struct handler_reply *ctx)
{
  const Gpushm__PromiseRequest *p = req->promise;

  return registry_promise(call->reg, call->client, p->id,
                          sync_releaser_id(call->srv->instance_id, call->client->id), p->upto,
                          ctx->msg, sizeof ctx->msg);
}

static int handle_ring(struct handler_call *call, const Gpushm__Request *req,
                       struct handler_reply *ctx)
{
  const Gpushm__RingRequest *r = req->ring;

  return registry_ring_request(call->reg, call->client, r->id, r->detach, r->evict, ctx->msg,
                               sizeof ctx->msg);
}

static int handle_ping(struct handler_call *call, const Gpushm__Request *req, struct handler_reply *ctx)
{
  gpushm__ping_reply__init(&ctx->body.ping);
  ctx->reply.body_case = GPUSHM__REPLY__BODY_PING;
  ctx->reply.ping = &ctx->body.ping;
  return 0;
}

/* Policy lives in the rows: handler_check() applies needs_hello, admin_only, oneway_ok,
 * since and feature before a handler runs, and the session warms what device() names.
 * One-way requests are those whose reply carries nothing the client needs (no body, no
 * fds): releasing, never acquiring.  Unmap is for libraries that map segments, which
 * say so at Hello. */
static const struct handler rows[] = {
  [GPUSHM__REQUEST__BODY_HELLO] = { .name = "hello", .fn = handle_hello },
  [GPUSHM__REQUEST__BODY_CREATE] = { .name = "create", .needs_hello = true,
                                     .device = create_device, .fn = handle_create },
  [GPUSHM__REQUEST__BODY_OPEN] = { .name = "open", .needs_hello = true, .fn = handle_open },
  [GPUSHM__REQUEST__BODY_CLOSE] = { .name = "close", .needs_hello = true, .oneway_ok = true,
                                    .fn = handle_close },
  [GPUSHM__REQUEST__BODY_UNLINK] = { .name = "unlink", .needs_hello = true, .oneway_ok = true,
                                     .fn = handle_unlink },
  [GPUSHM__REQUEST__BODY_PING] = { .name = "ping", .needs_hello = true, .fn = handle_ping },
  [GPUSHM__REQUEST__BODY_UNMAP] = { .name = "unmap", .needs_hello = true, .oneway_ok = true,
                                    .feature = PROTO_FEATURE_SEGMENTS, .fn = handle_unmap },
  [GPUSHM__REQUEST__BODY_PROMISE] = { .name = "promise", .needs_hello = true,
                                      .feature = PROTO_FEATURE_PROMISES, .fn = handle_promise },
  /* detach is one-way (a close's part), eviction waits for its answer */
  [GPUSHM__REQUEST__BODY_RING] = { .name = "ring", .needs_hello = true, .oneway_ok = true,
                                   .feature = PROTO_FEATURE_RINGS, .fn = handle_ring },
};

const struct handler_family handler_family_core = {
  .name = "core", .version = 1, .rows = rows, .n_rows = sizeof rows / sizeof rows[0],
};
