/* SPDX-License-Identifier: MIT */
/* Building replies (reply.c), for the request families (family_*.c). */
#ifndef GPUSHMD_REPLY_H
#define GPUSHMD_REPLY_H

#include "server/handlers.h"

/* Sets the reply's message and returns status. */
int reply_fail(struct handler_reply *ctx, int status, const char *why);
/* Memory that lives until the reply is sent (reply_own takes p); NULL when out of
 * memory or past HANDLER_OWNED_MAX. */
void *reply_own(struct handler_reply *ctx, void *p);
void *reply_calloc(struct handler_reply *ctx, size_t n, size_t size);
void *reply_malloc(struct handler_reply *ctx, size_t size);
/* The devices the CUDA backends can use (free memory only where gpushmd holds a
 * context). */
int reply_devices(struct handler_reply *ctx, Gpushm__Device ***out, size_t *n_out);
/* An object's backend as the wire spells it (an event's is BACKEND_CUDA_EVENT). */
Gpushm__Backend reply_wire_backend(const struct reg_object *obj);
/* info for object b as asker sees it; holders into holders and ptrs (room for
 * GPUSHM_LIMIT_HOLDERS_LISTED each; NULL: none, holders_total still counts them). */
void reply_fill_info(struct handler_reply *ctx, const struct reg_object *b,
                     const struct reg_client *asker, bool with_metadata,
                     Gpushm__Holder *holders, Gpushm__Holder **ptrs);
void reply_close_fds(struct handler_reply *ctx);
/* The open reply for the ready export in ctx->export (nothing can fail). */
int reply_open(struct handler_call *call, struct handler_reply *ctx);
/* An image description as the wire spells it, in the registry's terms. */
struct image_params reply_image_params(const Gpushm__ImageDesc *d);

#endif
