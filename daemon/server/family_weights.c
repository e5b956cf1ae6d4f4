/* SPDX-License-Identifier: MIT */
/* The weights family: publishing a weight set's generation (docs/weights.md).  Opening
 * one, and its buffers, are the core family's opens (kind KIND_WEIGHTS, via_weights). */
#include "config.h"
#include "server/handlers.h"
#include "server/reply.h"
#include "protocol.h"
#include "util/log.h"

#include <stdio.h>
#include <string.h>

static int handle_publish(struct handler_call *call, const Gpushm__Request *req,
                          struct handler_reply *ctx)
{
  const Gpushm__PublishRequest *p = req->publish;
  struct reg_weights_args w = {
    .manifest_fd = call->fd,
    .n_tensors = p->tensors,
    .buffer_ids = p->buffers,
    .n_buffers = p->n_buffers > UINT32_MAX ? UINT32_MAX : (uint32_t)p->n_buffers,
    .after = p->after,
  };
  struct reg_create_args args = {
    .kind = REG_WEIGHTS,
    .name = p->name,
    .device = -1,
    .mode = p->mode,
    .lifetime = p->lifetime,
    .weights = &w,
  };
  const struct reg_object *g;
  int r;

  r = registry_create(call->reg, call->client, call->policy, &args, &ctx->export, ctx->msg,
                      sizeof ctx->msg);
  if (r < 0)
    return r;
  g = ctx->export.buffer;
  log_event(LOG_LEVEL_INFO,
            LOG_FIELDS(.client = call->log_client, .buffer = g->name, .buffer_id = g->id),
            "client %u published weight set '%s' (id %llu): %u tensors in %u buffers",
            call->client->id, g->name, (unsigned long long)g->id, w.n_tensors, w.n_buffers);
  return reply_open(call, ctx);
}

static const struct handler rows[] = {
  [GPUSHM__REQUEST__BODY_PUBLISH] = { .name = "publish", .needs_hello = true,
                                      .feature = PROTO_FEATURE_WEIGHTS, .takes_fd = true,
                                      .fn = handle_publish },
};

const struct handler_family handler_family_weights = {
  .name = "weights", .version = 1, .rows = rows, .n_rows = sizeof rows / sizeof rows[0],
};
