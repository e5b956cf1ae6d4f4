/* SPDX-License-Identifier: MIT */
/* One client: its identity (SO_PEERCRED, SO_PEERGROUPS, admin), its Hello state, its
 * transport and its registry holdings.  Turns each decoded request into a handler
 * call through the handler table and sends the reply.  The only place that ends a
 * connection: on a protocol violation, a transport error, or when the server asks. */
#ifndef GPUSHMD_SESSION_H
#define GPUSHMD_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "server/costly.h"
#include "server/handlers.h"
#include "util/list.h"
#include "util/log.h"
#include "registry/registry.h"
#include "server/transport.h"
#include "server/name_waits.h"

struct session;

/* What the server lends every session; lives as long as the server. */
struct session_env {
  uv_loop_t *loop;
  struct registry *reg;
  const struct transport_limits *limits;
  const struct handler_server *handler_server;
  struct request_counters *counters;
  /* Told once, as the session ends, before it is freed. */
  void (*gone)(void *ctx, struct session *s);
  /* Whether requests on device can go on now; if not, warm_device asks for it to be
   * warmed off the loop, and the server then calls session_resume on every session
   * parked on it. */
  bool (*device_ready)(int device);
  void (*warm_device)(void *ctx, int device);
  /* Non-admins' costly requests wait here past their share; its resume callback is
   * session_costly_turn. */
  struct costly_share *costly;
  struct busy_poll *busy_poll; /* told of every request */
  /* Opens waiting for their name; their made and expired callbacks are
   * session_name_made and session_name_expired. */
  struct name_waits *name_waits;
  void *ctx;
};

struct session {
  struct reg_client client; /* registry identity: credentials + holdings */
  const struct session_env *env;
  struct transport *transport;
  struct list link; /* the server's list of sessions */
  bool hello_done;
  unsigned protocol_version; /* negotiated at Hello */
  uint64_t client_features;  /* PROTO_FEATURE_* the client understands */
  struct reg_policy policy;  /* what the registry may send it, from the above */
  bool closing;
  /* References: the session's own, until it ends, and one held across any call that
   * may end it while still using it (session_resume). */
  unsigned refs;
  bool oneway_failed; /* a one-way request failed: logged once, then counted only */
  char name[GPUSHM_LIMIT_CLIENT_NAME_LEN + 1];
  struct log_client log;          /* who this client is, for log lines (name: ours) */
  struct log_ratelimit warnings;  /* its per-request warnings */
  uint64_t connected_unix_ms;
  uint64_t accepted_loop_ms; /* uv_now() at accept, for the Hello deadline */
  /* A request parked until device waiting_device is warm (-1: none), or until its turn
   * in the costly share (costly_link on its list); this client's later requests wait in
   * its socket, so replies keep their order. */
  Gpushm__Request *parked;
  struct list costly_link;
  bool costly_turn; /* its turn came: the parked costly request runs without asking */
  uint64_t parked_since_ns; /* when the parked request's frame came (CLOCK_MONOTONIC) */
  int waiting_device;
  /* The fd the request being handled came with (-1: none; the transport's, closed after
   * it), and a parked request's own copy of its fd. */
  int request_fd;
  int parked_fd;
  /* The parked request is an open waiting for its name (OpenRequest.wait_ms) */
  struct name_wait name_wait;
  bool wait_expired; /* its answer, NOENT, is a wait's end, not counted as a failure */
};

/* Takes ownership of fd (an accepted, non-blocking socket) and reads the peer's
 * credentials; admin_gid (NULL: none) makes its members admins besides root.  NULL if
 * it could not be set up (fd closed). */
struct session *session_start(const struct session_env *env, int fd, uint32_t id,
                              const gid_t *admin_gid);
/* The device the parked request waits for is warm (status 0) or could not be warmed
 * (a PROTO_E_* and why, which become that request's answer). */
void session_resume(struct session *s, int status, const char *why);
/* The costly share's resume callback: the parked costly request of the session whose
 * costly_link this is runs now. */
void session_costly_turn(struct list *costly_link);
/* name_waits' callbacks: the parked open's name was made (it runs again), or its wait
 * ended without it (it is answered NOENT). */
void session_name_made(struct name_wait *w);
void session_name_expired(struct name_wait *w);
void session_ref(struct session *s);
void session_unref(struct session *s);
/* Ends the session: status 0 quietly, otherwise with a connection-level error (request
 * id 0) saying why.  Releases its references; frees it. */
void session_close(struct session *s, int status, const char *why);

#endif
