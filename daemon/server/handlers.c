/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/handlers.h"
#include "protocol.h"
#include "util/log.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The families, each a table of its own (family_*.c): a body case is in one of them. */
static const struct handler_family *const families[] = {
  &handler_family_core, &handler_family_admin, &handler_family_graphics,
  &handler_family_weights,
};
_Static_assert(sizeof families / sizeof families[0] <= HANDLER_FAMILIES_MAX,
               "a hello reply has room for every family");

size_t handler_families(const struct handler_family *const **out)
{
  *out = families;
  return sizeof families / sizeof families[0];
}

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
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    if (body_case < families[f]->n_rows && families[f]->rows[body_case].fn)
      return &families[f]->rows[body_case];
  return NULL;
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
  while (r->n_fds)
    close(r->fds[--r->n_fds]);
  r->reply.status = -status;
  r->reply.message = r->msg;
  r->reply.body_case = GPUSHM__REPLY__BODY__NOT_SET;
}

void handler_reply_free(struct handler_reply *r)
{
  while (r->n_owned)
    free(r->owned[--r->n_owned]);
}
