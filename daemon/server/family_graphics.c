/* SPDX-License-Identifier: MIT */
/* The graphics family: registering memory a graphics API exported (images are the core
 * family's creates, with a description) and timelines' semaphore planes. */
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
    return reply_fail(ctx, PROTO_E_INVAL, "a registration describes its memory");
  if (m->device_uuid.len != 16 || m->driver_uuid.len != 16 || strlen(m->driver_info) >= 64)
    return reply_fail(ctx, PROTO_E_INVAL, "device and driver UUIDs are 16 bytes, driver info at "
                "most 63");
  external.allocation_size = m->allocation_size;
  external.memory_type_index = m->memory_type_index;
  external.dedicated = m->dedicated;
  memcpy(external.device_uuid, m->device_uuid.data, 16);
  memcpy(external.driver_uuid, m->driver_uuid.data, 16);
  snprintf(external.driver_info, sizeof external.driver_info, "%s", m->driver_info);
  if (rr->image) {
    image = reply_image_params(rr->image);
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

/* A timeline's or a ring consumer's semaphore plane (docs/sync.md#semaphore-planes):
 * registered with the request's fd, and a new fd of it in every reply. */
static int handle_semaphore(struct handler_call *call, const Gpushm__Request *req,
                            struct handler_reply *ctx)
{
  const Gpushm__SemaphoreRequest *sr = req->semaphore;
  struct reg_semaphore out = { .fd = -1 };
  int r;

  if (call->fd >= 0 && sr->device_uuid.len != 16)
    return reply_fail(ctx, PROTO_E_INVAL, "a semaphore comes with its device's UUID (16 bytes)");
  r = registry_semaphore(call->reg, call->client, sr->id,
                         (struct reg_semaphore_args){
                           .fd = call->fd, .uuid = call->fd >= 0 ? sr->device_uuid.data : NULL,
                           .to_readers = sr->to_readers, .consumer = sr->consumer },
                         &out, ctx->msg, sizeof ctx->msg);
  if (r < 0)
    return r;
  if (out.registered)
    log_event(LOG_LEVEL_DEBUG, LOG_FIELDS(.client = call->log_client, .buffer_id = sr->id),
              "client %u registered a semaphore plane for object %llu", call->client->id,
              (unsigned long long)sr->id);
  gpushm__semaphore_reply__init(&ctx->body.semaphore);
  memcpy(ctx->semaphore_uuid, out.device_uuid, 16);
  ctx->body.semaphore.device_uuid.data = ctx->semaphore_uuid;
  ctx->body.semaphore.device_uuid.len = 16;
  ctx->body.semaphore.to_readers = out.to_readers;
  ctx->body.semaphore.registered = out.registered;
  ctx->body.semaphore.from = out.from;
  ctx->reply.body_case = GPUSHM__REPLY__BODY_SEMAPHORE;
  ctx->reply.semaphore = &ctx->body.semaphore;
  ctx->fds[0] = out.fd;
  ctx->n_fds = 1;
  return 0;
}

/* Registering a plane imports it on its device: that device's context. */
static int semaphore_device(const struct handler_call *call, const Gpushm__Request *req)
{
  const Gpushm__SemaphoreRequest *sr = req->semaphore;

  return call->fd >= 0 && sr->device_uuid.len == 16
           ? backend_cuda_device_of_uuid(sr->device_uuid.data) : -1;
}

static const struct handler rows[] = {
  [GPUSHM__REQUEST__BODY_REGISTER_MEMORY] = { .name = "register_memory", .needs_hello = true,
                                              .feature = PROTO_FEATURE_GRAPHICS,
                                              .takes_fd = true, .device = register_device,
                                              .fn = handle_register },
  [GPUSHM__REQUEST__BODY_SEMAPHORE] = { .name = "semaphore", .needs_hello = true,
                                        .feature = PROTO_FEATURE_SEMAPHORES, .takes_fd = true,
                                        .device = semaphore_device, .fn = handle_semaphore },
};

const struct handler_family handler_family_graphics = {
  /* 2: semaphore planes */
  .name = "graphics", .version = 2, .rows = rows, .n_rows = sizeof rows / sizeof rows[0],
};
