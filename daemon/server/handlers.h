/* SPDX-License-Identifier: MIT */
/* Request handlers: one row per request type, in its family's table, carries the policy
 * (needs a Hello first, admins only) and the function that turns a decoded request into
 * registry calls and a reply.  Handlers return a status and never close anything:
 * PROTO_E_PROTO from one is a protocol violation, and the caller's owner ends the
 * connection.  What of the server they may use comes through struct handler_server. */
#ifndef GPUSHMD_HANDLERS_H
#define GPUSHMD_HANDLERS_H

#include <stdbool.h>
#include <stdint.h>

#include "gpushm.pb-c.h"
#include "gpushm_limits.h"
#include "util/log.h"
#include "registry/registry.h"
#include "server/counters.h"
#include "server/status.h"

/* Another connected client, as the clients listing shows it. */
struct handler_peer {
  const struct reg_client *client;
  const char *name;
  uint64_t connected_unix_ms;
};

/* The narrow view of the server that handlers get instead of the server itself. */
struct detached_set;

struct handler_server {
  void *ctx;
  uint64_t instance_id;
  uint64_t features; /* PROTO_FEATURE_* offered in Hello replies */
  const struct status_page_owner *status;
  const struct request_counters *counters;
  /* the request families, as handler_families() gives them, for Hello to list (the
   * families cannot ask handlers.c, which names them) */
  const struct handler_family *const *families;
  size_t n_families;
  uint64_t (*uptime_ms)(void *ctx);
  uint32_t (*n_clients)(void *ctx);
  /* exact: counted now (a walk of /proc/self/fd); else as counted at most
   * GPUSHM_LIMIT_OPEN_FDS_AGE_MS ago */
  uint32_t (*open_fds)(void *ctx, bool exact);
  /* Calls fn for every client in ascending id order until it returns false; returns
   * true if fn stopped it early. */
  bool (*each_client)(void *ctx, bool (*fn)(void *arg, const struct handler_peer *peer),
                      void *arg);
  /* Ends client id's connection, telling it status and why. */
  void (*disconnect)(void *ctx, uint32_t client_id, int status, const char *why);
  const struct detached_set *detached;
};

/* Who is asking, and in which state of the session. */
struct handler_call {
  struct registry *reg;
  const struct handler_server *srv;
  struct reg_client *client;
  const struct reg_policy *policy; /* what the client's library can take (from its Hello) */
  const struct log_client *log_client; /* the same client, as log lines name it */
  bool hello_done;
  uint64_t features; /* what the client named at Hello (PROTO_FEATURE_*) */
  /* hello's result, applied by the session on success: the name the client gave, the
   * negotiated protocol version and the features the client understands */
  char hello_name[GPUSHM_LIMIT_CLIENT_NAME_LEN + 1];
  unsigned hello_version;
  uint64_t hello_features;
  bool hello_ranged; /* a version range: gpushm 0.2 or later */
  int fd; /* the fd the request came with (handlers whose row takes one), else -1;
           * the session's: a handler that keeps it takes a dup */
};

/* Allocations one reply may own: stats, the largest, makes 16 (a list page makes one). */
#define HANDLER_OWNED_MAX 20

#define HANDLER_FAMILIES_MAX 8 /* families a hello reply can list */

/* A reply under construction, and the storage it points into. */
struct handler_reply {
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
    Gpushm__SemaphoreReply semaphore;
  } body;
  uint8_t semaphore_uuid[16]; /* a semaphore reply's device_uuid */
  /* a list reply's ListReply, packed by the handler (list_codec.h); owned */
  const uint8_t *list_page;
  size_t list_page_len;
  Gpushm__BufferInfo info;
  Gpushm__ImageDesc info_image;        /* info's, for images */
  Gpushm__ExternalMemory info_external; /* info's, for registered memory */
  Gpushm__RingInfo ring;                /* an open reply's, for a ring */
  Gpushm__RingInfo info_ring;           /* info's, for a ring */
  /* a weight-set generation's, in an open reply or info (never both in one reply) */
  Gpushm__WeightsInfo weights;
  Gpushm__WeightsBuffer weights_buffers[GPUSHM_LIMIT_WEIGHT_BUFFERS];
  Gpushm__WeightsBuffer *weights_buffer_ptrs[GPUSHM_LIMIT_WEIGHT_BUFFERS];
  /* the open reply's holders: inline, so that nothing can fail once an export is out */
  Gpushm__Holder holders[GPUSHM_LIMIT_HOLDERS_LISTED];
  Gpushm__Holder *holder_ptrs[GPUSHM_LIMIT_HOLDERS_LISTED];
  Gpushm__Backend backends[GPUSHM_BACKEND_COUNT + 1]; /* + events, spelt as a backend */
  Gpushm__RequestFamily families[HANDLER_FAMILIES_MAX]; /* a hello reply's */
  Gpushm__RequestFamily *family_ptrs[HANDLER_FAMILIES_MAX];
  struct reg_export export;
  void *owned[HANDLER_OWNED_MAX]; /* freed by handler_reply_free */
  size_t n_owned;
};

/* Handlers return 0 or a negative PROTO_E_* (PROTO_E_PROTO: a violation that ends the
 * session). */
typedef int handler_fn(struct handler_call *call, const Gpushm__Request *req,
                       struct handler_reply *out);
/* The device whose primary context the request needs, or -1: the session makes sure it
 * is warm (100-350 ms, off the loop) before the handler runs. */
typedef int handler_device_fn(const struct handler_call *call, const Gpushm__Request *req);

/* One request type and its policy, all checked by handler_check() before it runs. */
struct handler {
  const char *name;
  bool needs_hello; /* before Hello this request is a protocol violation */
  bool admin_only;  /* refused with PROTO_E_PERM to anyone but root and the admin group */
  bool oneway_ok;   /* may be sent one-way (no reply); else that is a protocol violation */
  unsigned since;   /* the protocol version that brought it (0: every version) */
  uint64_t feature; /* a PROTO_FEATURE_* the client must have named at Hello; 0: none */
  bool takes_fd;    /* the request comes with one fd; any other request with an fd, or
                     * this one with more, is a violation */
  bool costly;      /* costs in proportion to what gpushmd holds: non-admins' share of
                     * the loop for such requests is bounded (server/costly.h) */
  handler_device_fn *device;
  handler_fn *fn;
};

/* A family of requests, each its own file and table (family_core.c, family_admin.c,
 * family_graphics.c): rows indexed by the request's body case, and a version of its own
 * that Hello tells clients (HelloReply.families), raised when the family gains a request
 * or a request a field, so a client asks the family, not the whole protocol, before it
 * uses one.  A new capability is a family, not rows in a shared file. */
struct handler_family {
  const char *name;
  unsigned version;
  const struct handler *rows;
  size_t n_rows;
};
extern const struct handler_family handler_family_core;
extern const struct handler_family handler_family_admin;
extern const struct handler_family handler_family_graphics;
extern const struct handler_family handler_family_weights;

/* Every family, as Hello lists them: *out (static), the count (at most
 * HANDLER_FAMILIES_MAX). */
size_t handler_families(const struct handler_family *const **out);

/* What the session knows of its client when a request comes. */
struct handler_peer_state {
  bool hello_done;
  bool admin;
  unsigned protocol_version; /* negotiated at Hello */
  uint64_t features;         /* named in its Hello */
};

/* Whether a request of type h (NULL: unknown) may run for that client: 0; a PROTO_E_*
 * to answer with (msg says why); or PROTO_E_PROTO, a violation that ends the session. */
int handler_check(const struct handler *h, unsigned body_case, uint64_t request_id, bool oneway,
                  const struct handler_peer_state *peer, char *msg, size_t msg_len);

/* The entry for a request's body case, or NULL for one this daemon does not know. */
const struct handler *handler_find(unsigned body_case);
/* For logs and stats: the request type's name, "unknown" if none. */
const char *handler_name(unsigned body_case);

void handler_reply_init(struct handler_reply *r, uint64_t request_id);
/* Turns r into an error reply with status (its fds are closed, its body dropped). */
void handler_reply_error(struct handler_reply *r, int status);
/* Frees what the reply pointed into; the fds have been sent or closed by then. */
void handler_reply_free(struct handler_reply *r);

#endif
