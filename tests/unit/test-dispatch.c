/* SPDX-License-Identifier: MIT */
/* The handler table's policy, as handler_check() applies it before any handler runs:
 * request ids, Hello first, one-way requests, unknown types, admins only, the protocol
 * version a request came with, and the features a client named at Hello. */
#include "config.h"
#include "harness.h"
#include "gpushm.h"
#include "server/handlers.h"
#include "wire.h"

#include <string.h>

static char msg[256];

static int check(const struct handler *h, uint64_t id, bool oneway,
                 const struct handler_peer_state *peer)
{
  msg[0] = '\0';
  return handler_check(h, 99, id, oneway, peer, msg, sizeof msg);
}

int main(void)
{
  const struct handler plain = { .name = "plain", .needs_hello = true };
  const struct handler admin = { .name = "admin", .needs_hello = true, .admin_only = true };
  const struct handler newer = { .name = "newer", .needs_hello = true, .since = 2 };
  const struct handler featured = { .name = "featured", .needs_hello = true,
                                    .feature = GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_ONEWAY };
  const struct handler oneway = { .name = "oneway", .needs_hello = true, .oneway_ok = true };
  const struct handler hello = { .name = "hello" };
  struct handler_peer_state fresh = { 0 };
  struct handler_peer_state peer = { .hello_done = true, .protocol_version = 1,
                                     .features = GPUSHM_FEATURE_SEGMENTS };

  CHECK(check(&plain, 0, false, &peer) == GPUSHM_E_PROTO && strstr(msg, "id 0"));
  CHECK(check(&plain, 1, false, &fresh) == GPUSHM_E_PROTO && strstr(msg, "hello"));
  CHECK(check(NULL, 1, false, &fresh) == GPUSHM_E_PROTO);
  CHECK(check(&hello, 1, false, &fresh) == 0);
  CHECK(check(&plain, 1, true, &peer) == GPUSHM_E_PROTO && strstr(msg, "one-way"));
  CHECK(check(&oneway, 1, true, &peer) == 0);
  CHECK(check(NULL, 1, false, &peer) == GPUSHM_E_UNSUPPORTED && strstr(msg, "99"));
  CHECK(check(&admin, 1, false, &peer) == GPUSHM_E_PERM);
  peer.admin = true;
  CHECK(check(&admin, 1, false, &peer) == 0);
  /* A request newer than the connection's protocol: refused, named with both versions. */
  CHECK(check(&newer, 1, false, &peer) == GPUSHM_E_UNSUPPORTED && strstr(msg, "version 2") &&
        strstr(msg, "speaks 1"));
  peer.protocol_version = 2;
  CHECK(check(&newer, 1, false, &peer) == 0);
  /* Every feature the entry names must have been named at Hello. */
  CHECK(check(&featured, 1, false, &peer) == GPUSHM_E_UNSUPPORTED && strstr(msg, "featured"));
  peer.features |= GPUSHM_FEATURE_ONEWAY;
  CHECK(check(&featured, 1, false, &peer) == 0);
  /* The table itself: unmap is for libraries that map segments. */
  CHECK(handler_find(GPUSHM__REQUEST__BODY_UNMAP)->feature == GPUSHM_FEATURE_SEGMENTS);
  CHECK(handler_find(GPUSHM__REQUEST__BODY_CREATE)->device != NULL);
  /* Counters are named by the schema (wire_request_name), errors by the table: the same
   * word for every request, and every request of the schema has a handler. */
  for (unsigned i = 0; i < gpushm__request__descriptor.n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &gpushm__request__descriptor.fields[i];
    if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
      continue;
    CHECK(handler_find(f->id) != NULL);
    CHECK(strcmp(handler_find(f->id)->name, wire_request_name(f->id)) == 0);
  }
  CHECK(strcmp(wire_request_name(GPUSHM__REQUEST__BODY__NOT_SET), "unknown") == 0);
  test_log("handler_check: ids, hello first, one-way, unknown, admin, since, feature");
  return 0;
}
