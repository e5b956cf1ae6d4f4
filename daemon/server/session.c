/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/session.h"
#include "server/busy_poll.h"
#include "protocol.h"
#include "gpushm.pb-c.h"
#include "list_codec.h"
#include "util/log.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* One is enough: the loop is single-threaded and a reply is encoded and sent (or
 * copied into the queue) before the next. */
static uint8_t tx[WIRE_FRAME_MAX];

/* Requests are decoded into an arena that is emptied once each is handled: malloc and
 * free per field, and the walk of free_unpacked, were a fifth of the daemon's work per
 * request.  The arena's size is no limit: what does not fit is malloc'd (and freed on
 * reset); it only needs to hold the common request.  One is enough for the same reason
 * as tx: a request is handled whole before the next is decoded, and one kept longer
 * (parked) is copied out of it. */
#define REQUEST_ARENA_BYTES 8192u

struct arena_spill {
  struct arena_spill *next;
  max_align_t data[];
};

static struct {
  max_align_t buf[REQUEST_ARENA_BYTES / sizeof(max_align_t)];
  size_t used;
  struct arena_spill *spills;
} arena;

static void *arena_alloc(void *data, size_t size)
{
  size_t rounded = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t);
  struct arena_spill *spill;

  (void)data;
  if (rounded <= sizeof arena.buf / sizeof arena.buf[0] - arena.used) {
    void *p = &arena.buf[arena.used];
    arena.used += rounded;
    return p;
  }
  if (size > SIZE_MAX - sizeof *spill || !(spill = malloc(sizeof *spill + size)))
    return NULL;
  spill->next = arena.spills;
  arena.spills = spill;
  return spill->data;
}

static void arena_free(void *data, void *p)
{
  /* Everything goes at once in arena_reset. */
  (void)data;
  (void)p;
}

static ProtobufCAllocator arena_allocator = {
  .alloc = arena_alloc,
  .free = arena_free,
};

static void arena_reset(void)
{
  while (arena.spills) {
    struct arena_spill *spill = arena.spills;
    arena.spills = spill->next;
    free(spill);
  }
  arena.used = 0;
}

/* A heap copy of an arena-decoded request, which must outlive the arena's next reset;
 * NULL if memory is short. */
static Gpushm__Request *request_keep(const Gpushm__Request *req)
{
  size_t len = gpushm__request__get_packed_size(req);
  uint8_t *buf = malloc(len ? len : 1);
  Gpushm__Request *copy;

  if (!buf)
    return NULL;
  gpushm__request__pack(req, buf);
  copy = gpushm__request__unpack(NULL, len, buf);
  free(buf);
  return copy;
}

void session_ref(struct session *s)
{
  s->refs++;
}

void session_unref(struct session *s)
{
  if (--s->refs == 0)
    free(s);
}

/* Ends the session: what it holds goes now; the memory when the last reference does. */
static void end_session(struct session *s)
{
  if (s->closing)
    return;
  s->closing = true;
  log_ratelimit_flush(&s->warnings, &s->log);
  log_event(LOG_LEVEL_DEBUG, LOG_FIELDS(.client = &s->log), "client %u (pid %d) disconnected",
            s->client.id, (int)s->client.pid);
  s->env->gone(s->env->ctx, s);
  list_del(&s->costly_link); /* no more waiting for a turn */
  name_waits_remove(s->env->name_waits, &s->name_wait); /* nor for a name */
  if (s->parked)
    gpushm__request__free_unpacked(s->parked, NULL);
  s->parked = NULL;
  if (s->parked_fd >= 0)
    close(s->parked_fd);
  s->parked_fd = -1;
  registry_client_gone(s->env->reg, &s->client);
  transport_free(s->transport);
  session_unref(s);
}

void session_close(struct session *s, int status, const char *why)
{
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  long len;

  if (s->closing)
    return;
  if (status == 0) {
    end_session(s);
    return;
  }
  if (status == PROTO_E_PROTO)
    s->env->counters->protocol_errors++;
  log_event(LOG_LEVEL_WARN, LOG_FIELDS(.client = &s->log, .reason = why, .client_caused = true),
            "client %u (pid %d, uid %u): %s; closing it", s->client.id, (int)s->client.pid,
            (unsigned)s->client.uid, why);
  reply.request_id = 0;
  reply.status = -status;
  reply.message = (char *)why;
  /* Best effort and never queued: the connection ends now either way. */
  len = wire_encode(tx, WIRE_TYPE_REPLY, &reply.base, 0);
  if (len > 0)
    transport_send_last(s->transport, tx, (size_t)len);
  end_session(s);
}

/* Sends a reply with n_fds fds, which are consumed either way. */
static void send_reply(struct session *s, const Gpushm__Reply *msg, const int *fds,
                       unsigned n_fds)
{
  long len = wire_encode(tx, WIRE_TYPE_REPLY, &msg->base, n_fds);

  if (len < 0) {
    /* Replies are sized to fit by construction (list pages are packed to the limit; a
     * stats reply larger than a frame goes in a memfd), so this is a daemon bug, or a
     * stats reply at the limits to a reader before 0.8, which cannot take a memfd; the
     * client still gets an answer. */
    Gpushm__Reply error = GPUSHM__REPLY__INIT;
    log_error("reply to request %llu exceeds the frame limit",
              (unsigned long long)msg->request_id);
    error.request_id = msg->request_id;
    error.status = -PROTO_E_LIMIT;
    error.message = "reply would exceed the frame size limit";
    for (unsigned i = 0; i < n_fds; i++)
      close(fds[i]);
    n_fds = 0;
    len = wire_encode(tx, WIRE_TYPE_REPLY, &error.base, 0);
  }
  transport_send(s->transport, tx, (size_t)len, fds, n_fds);
}

/* A list page the handler packed (list_codec.h) */
static void send_list_page(struct session *s, uint64_t request_id, const uint8_t *page,
                           size_t len)
{
  long frame_len = list_codec_encode_reply(tx, request_id, page, len);

  if (frame_len < 0) {
    Gpushm__Reply error = GPUSHM__REPLY__INIT;
    log_error("list page for request %llu exceeds the frame limit",
              (unsigned long long)request_id);
    error.request_id = request_id;
    error.status = -PROTO_E_LIMIT;
    error.message = "reply would exceed the frame size limit";
    send_reply(s, &error, NULL, 0);
    return;
  }
  transport_send(s->transport, tx, (size_t)frame_len, NULL, 0);
}

static uint64_t monotonic_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Every request that ends here (answered, one-way, or a protocol violation) is timed
 * from its frame's arrival: what its client waited for, in the daemon. */
static void observe(struct request_counters *counters, unsigned slot, uint64_t since_ns)
{
  uint64_t now = monotonic_ns();
  counters_observe_latency(counters, slot, now > since_ns ? now - since_ns : 0);
}

/* The request was refused or answered: counts it, says so where operators need to
 * hear, and sends the reply (nothing for a one-way request). */
static void finish(struct session *s, const Gpushm__Request *req, int status,
                   struct handler_reply *reply, unsigned slot, uint64_t since_ns)
{
  struct request_counters *counters = s->env->counters;
  const char *what = handler_name((unsigned)req->body_case);

  if (status < 0 && s->wait_expired) {
    s->wait_expired = false; /* counted as open_wait_timeouts: a wait's end, not a fault */
    handler_reply_error(reply, status);
  } else if (status < 0) {
    counters->request_errors++;
    counters->errors_by_type[slot]++;
    /* Refusals tell operators about quotas and permissions set too tight (or a client
     * probing them), CUDA failures about the GPU; other failures are the client's own
     * business. */
    if (status == PROTO_E_LIMIT || status == PROTO_E_PERM || status == PROTO_E_NOMEM ||
        status == PROTO_E_CUDA)
      log_event(LOG_LEVEL_WARN,
                LOG_FIELDS(.client = &s->log, .reason = reply->msg, .ratelimit = &s->warnings),
                "client %u (pid %d, uid %u): %s refused: %s", s->client.id, (int)s->client.pid,
                (unsigned)s->client.uid, what, reply->msg);
    else
      log_debug("client %u: %s failed: %s", s->client.id, what, reply->msg);
    handler_reply_error(reply, status);
  }
  if (req->oneway) {
    /* Nobody waits for an answer: a failure is counted, and said once per connection
     * (a client that gets its releases wrong would otherwise flood the log). */
    if (status < 0) {
      counters->oneway_errors++;
      if (!s->oneway_failed)
        log_event(LOG_LEVEL_WARN,
                  LOG_FIELDS(.client = &s->log, .reason = reply->msg, .ratelimit = &s->warnings),
                  "client %u (pid %d): one-way %s failed: %s (further failures of this "
                  "connection are only counted)", s->client.id, (int)s->client.pid, what,
                  reply->msg);
      s->oneway_failed = true;
    }
    while (reply->n_fds)
      close(reply->fds[--reply->n_fds]);
  } else {
    if (status >= 0 && reply->reply.body_case == GPUSHM__REPLY__BODY_OPEN)
      counters_count_open(counters, reply->reply.open);
    if (reply->list_page && reply->reply.body_case == GPUSHM__REPLY__BODY_LIST)
      send_list_page(s, reply->reply.request_id, reply->list_page, reply->list_page_len);
    else
      send_reply(s, &reply->reply, reply->fds, reply->n_fds);
  }
  handler_reply_free(reply);
  observe(counters, slot, since_ns);
}

/* What a wait that ran out answers: to one who may not see every buffer, in the words of
 * a plain open's NOENT (family_core.c), which are the same whether a name it may not
 * see was made meanwhile or not; short enough for a reply's message with the longest
 * name. */
static void wait_expired_text(const struct session *s, const char *name, uint32_t wait_ms,
                              char *buf, size_t len)
{
  if (s->client.uid != 0 && !s->client.admin)
    snprintf(buf, len, "no buffer named '%s' that uid %u may open was made within %u ms "
             "(one it may not open is not shown either)", name, (unsigned)s->client.uid,
             wait_ms);
  else
    snprintf(buf, len, "no buffer named '%s' was made within %u ms", name, wait_ms);
}

/* Parks req until it can run (device warm: the server calls session_resume; its turn
 * in the costly share: session_costly_turn); this client's later requests wait in its
 * socket meanwhile, so replies keep their order.  Returns false if it could not be
 * kept (the caller answers it). */
static bool park(struct session *s, const Gpushm__Request *req, bool again, uint64_t since_ns)
{
  /* Parked, it outlives the arena it was decoded into (again: it is the heap copy). */
  Gpushm__Request *kept = again ? (Gpushm__Request *)req : request_keep(req);

  if (!kept)
    return false;
  /* Its fd outlives the frame's (the transport closes those) as a copy of its own. */
  if (!again && s->request_fd >= 0 &&
      (s->parked_fd = fcntl(s->request_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
    gpushm__request__free_unpacked(kept, NULL);
    return false;
  }
  s->parked = kept;
  s->parked_since_ns = since_ns;
  transport_pause(s->transport, true);
  return true;
}

static bool waits_for_name(const Gpushm__Request *req)
{
  return req->body_case == GPUSHM__REQUEST__BODY_OPEN && req->open->wait_ms &&
         req->open->key_case == GPUSHM__OPEN_REQUEST__KEY_NAME;
}

/* Checks the request against its table entry, makes sure the device it needs is warm
 * (parking it otherwise), runs its handler and finishes it.  A violation ends the
 * session.  Returns true if the session kept req (parked).  since_ns: when its frame
 * arrived. */
static bool run_request(struct session *s, Gpushm__Request *req, bool again, uint64_t since_ns)
{
  unsigned body = (unsigned)req->body_case;
  unsigned slot = body < HANDLER_REQUEST_TYPES ? body : 0;
  const struct handler *h = handler_find(body);
  const struct handler_peer_state peer = {
    .hello_done = s->hello_done,
    .admin = s->client.admin,
    .protocol_version = s->protocol_version,
    .features = s->client_features,
  };
  struct handler_call call = {
    .reg = s->env->reg,
    .srv = s->env->handler_server,
    .client = &s->client,
    .policy = &s->policy,
    .log_client = &s->log,
    .hello_done = s->hello_done,
    .features = s->client_features,
    .fd = s->request_fd,
  };
  struct handler_reply storage, *reply = &storage;
  const bool costly = h && h->costly && !s->client.admin;
  const bool costly_turn = s->costly_turn; /* this request's, resumed in its turn */
  uint64_t costly_since_ns = 0;
  int status, device;

  s->costly_turn = false;

  if (!again) {
    s->env->counters->requests++;
    s->env->counters->by_type[slot]++;
  }
  handler_reply_init(reply, req->request_id);
  status = handler_check(h, body, req->request_id, req->oneway, &peer, reply->msg,
                         sizeof reply->msg);
  if (status == 0 && h->device && (device = h->device(&call, req)) >= 0 &&
      !s->env->device_ready(device)) {
    if (park(s, req, again, since_ns)) {
      s->waiting_device = device;
      s->env->warm_device(s->env->ctx, device);
      return true;
    }
    snprintf(reply->msg, sizeof reply->msg, "out of memory");
    status = PROTO_E_NOMEM;
  }
  if (status == 0 && costly) {
    costly_since_ns = monotonic_ns();
    if (!costly_turn && !costly_share_admit(s->env->costly, costly_since_ns)) {
      if (park(s, req, again, since_ns)) {
        s->env->counters->costly_deferred++;
        costly_share_wait(s->env->costly, &s->costly_link);
        return true;
      }
      snprintf(reply->msg, sizeof reply->msg, "out of memory");
      status = PROTO_E_NOMEM;
    }
  }
  if (status == 0)
    status = h->fn(&call, req, reply);
  if (status == PROTO_E_NOENT && waits_for_name(req) && s->env->name_waits) {
    /* Not there, or not for this client (which cannot tell the two apart: it waits out
     * its time either way): parked until an object of that name is made. */
    uint64_t deadline = since_ns + (uint64_t)req->open->wait_ms * 1000000u;
    if (monotonic_ns() < deadline && park(s, req, again, since_ns)) {
      if (!again)
        s->env->counters->open_waits++;
      name_waits_add(s->env->name_waits, &s->name_wait, s->parked->open->name, deadline);
      handler_reply_free(reply);
      return true;
    }
    if (again) { /* run again as its wait ran out: answered as the wait's end */
      s->env->counters->open_wait_timeouts++;
      s->wait_expired = true;
      wait_expired_text(s, req->open->name, req->open->wait_ms, reply->msg,
                        sizeof reply->msg);
    }
  }
  if (status == PROTO_E_PROTO) {
    handler_reply_error(reply, status);
    session_close(s, PROTO_E_PROTO, reply->msg);
    handler_reply_free(reply);
    observe(s->env->counters, slot, since_ns);
    return false;
  }
  if (status >= 0 && body == GPUSHM__REQUEST__BODY_HELLO) {
    s->hello_done = true;
    s->protocol_version = call.hello_version;
    s->client_features = call.hello_features;
    s->policy = (struct reg_policy){
      .carved = (call.hello_features & PROTO_FEATURE_SEGMENTS) != 0,
      .default_host_only = !call.hello_ranged,
      .ipc_fences = (call.hello_features & PROTO_FEATURE_IPC_FENCES) != 0,
    };
    memcpy(s->name, call.hello_name, sizeof s->name);
  }
  finish(s, req, status, reply, slot, since_ns);
  if (costly_since_ns)
    costly_share_charge(s->env->costly, monotonic_ns() - costly_since_ns);
  return false;
}

/* run_request() with a reference held: a violation, or a reply the transport cannot
 * queue, ends the session midway, and what follows still reads it.  fd: the one the
 * request came with (-1: none), the session's while it runs. */
static bool dispatch(struct session *s, Gpushm__Request *req, bool again, uint64_t since_ns,
                     int fd)
{
  bool parked;

  session_ref(s);
  s->request_fd = fd; /* the request's, while it runs */
  parked = run_request(s, req, again, since_ns);
  s->request_fd = -1;
  session_unref(s);
  return parked;
}

void session_resume(struct session *s, int status, const char *why)
{
  Gpushm__Request *req = s->parked;
  bool parked_again = false;

  s->parked = NULL;
  s->waiting_device = -1;
  if (!req)
    return;
  /* The reply below may end the connection; s stays until the end of this call. */
  session_ref(s);
  if (status < 0) {
    struct handler_reply reply;
    unsigned body = (unsigned)req->body_case;
    handler_reply_init(&reply, req->request_id);
    snprintf(reply.msg, sizeof reply.msg, "%s", why);
    finish(s, req, status, &reply, body < HANDLER_REQUEST_TYPES ? body : 0, s->parked_since_ns);
  } else {
    /* parked again: the device went cold meanwhile, and req is the session's again */
    parked_again = dispatch(s, req, true, s->parked_since_ns, s->parked_fd);
  }
  if (!parked_again) {
    gpushm__request__free_unpacked(req, NULL);
    if (s->parked_fd >= 0)
      close(s->parked_fd);
    s->parked_fd = -1;
  }
  if (!s->closing && !parked_again)
    transport_pause(s->transport, false);
  session_unref(s);
}

void session_name_made(struct name_wait *w)
{
  session_resume(list_entry(w, struct session, name_wait), 0, NULL);
}

void session_name_expired(struct name_wait *w)
{
  struct session *s = list_entry(w, struct session, name_wait);
  char why[sizeof ((struct handler_reply *)0)->msg];

  if (!s->parked)
    return;
  wait_expired_text(s, w->name, s->parked->open->wait_ms, why, sizeof why);
  s->env->counters->open_wait_timeouts++;
  s->wait_expired = true;
  session_resume(s, PROTO_E_NOENT, why);
}

void session_costly_turn(struct list *costly_link)
{
  struct session *s = list_entry(costly_link, struct session, costly_link);

  s->costly_turn = true;
  session_resume(s, 0, NULL);
}

static bool on_frame(void *ctx, const struct wire_frame *frame)
{
  struct session *s = ctx;
  Gpushm__Request *req;
  const char *why = NULL;
  bool oneway;
  const uint64_t since_ns = monotonic_ns();

  busy_poll_request(s->env->busy_poll, since_ns);
  if (wire_check_strings(&gpushm__request__descriptor, frame->body, frame->header.body_len,
                         &why) < 0) {
    session_close(s, PROTO_E_PROTO, why);
    return false;
  }
  req = gpushm__request__unpack(&arena_allocator, frame->header.body_len, frame->body);
  if (!req) {
    arena_reset();
    session_close(s, PROTO_E_PROTO, "malformed request body");
    return false;
  }
  /* Only a request whose row takes an fd may carry one, and one at most. */
  if (frame->n_fds) {
    const struct handler *h = handler_find((unsigned)req->body_case);
    if (!h || !h->takes_fd || frame->n_fds > 1) {
      arena_reset();
      session_close(s, PROTO_E_PROTO, "requests carry no file descriptors (a registration "
                    "carries one)");
      return false;
    }
  }
  /* A client that waits for no reply (one-way releases, sent in runs) has likely
   * written the next request already; one that waits for this reply has not. */
  oneway = req->oneway;
  /* Parked or not, req itself is done with: a parked request is a heap copy. */
  (void)dispatch(s, req, false, since_ns, frame->n_fds ? frame->fds[0] : -1);
  arena_reset();
  return oneway;
}

static void on_close(void *ctx, enum transport_close_reason reason, const char *why)
{
  struct session *s = ctx;

  switch (reason) {
  case TRANSPORT_CLOSE_PROTOCOL:
    session_close(s, PROTO_E_PROTO, why);
    break;
  case TRANSPORT_CLOSE_SLOW_READER:
    log_event(LOG_LEVEL_WARN,
              LOG_FIELDS(.client = &s->log, .reason = "stopped reading replies", .client_caused = true),
              "client %u (pid %d) stopped reading replies (%u queued); dropping it",
              s->client.id, (int)s->client.pid, transport_queued_frames(s->transport));
    s->env->counters->clients_dropped++;
    session_close(s, 0, NULL);
    break;
  case TRANSPORT_CLOSE_IO:
    log_event(LOG_LEVEL_DEBUG, LOG_FIELDS(.client = &s->log, .reason = why), "client %u: %s",
              s->client.id, why);
    session_close(s, 0, NULL);
    break;
  case TRANSPORT_CLOSE_EOF:
    session_close(s, 0, NULL);
    break;
  }
}

static const struct transport_ops session_transport_ops = {
  .on_frame = on_frame,
  .on_close = on_close,
};

static void read_peer_groups(struct session *s, int fd)
{
#if HAVE_DECL_SO_PEERGROUPS
  socklen_t len = 32 * sizeof(gid_t);

  for (int attempt = 0; attempt < 2; attempt++) {
    gid_t *groups = malloc(len ? len : sizeof(gid_t));
    if (!groups)
      return;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0) {
      s->client.groups = groups;
      s->client.n_groups = len / sizeof(gid_t);
      return;
    }
    free(groups);
    if (errno != ERANGE)
      return; /* primary gid only: group access may be narrower than the peer's */
  }
#else
  (void)s;
  (void)fd;
#endif
}

struct session *session_start(const struct session_env *env, int fd, uint32_t id,
                              const gid_t *admin_gid)
{
  struct ucred cred;
  socklen_t len = sizeof cred;
  struct timespec now;
  struct session *s;

  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
    log_warn("SO_PEERCRED: %s; refusing client", strerror(errno));
    close(fd);
    return NULL;
  }
  if (!(s = calloc(1, sizeof *s))) {
    close(fd);
    return NULL;
  }
  s->env = env;
  s->refs = 1; /* the session's own, given up as it ends */
  s->waiting_device = -1;
  s->request_fd = -1;
  s->parked_fd = -1;
  list_init(&s->costly_link);
  clock_gettime(CLOCK_REALTIME, &now);
  s->connected_unix_ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
  s->accepted_loop_ms = uv_now(env->loop);
  registry_client_init(&s->client, id, cred.pid, cred.uid, cred.gid);
  read_peer_groups(s, fd);
  s->client.admin = cred.uid == 0 || (admin_gid && registry_client_in_group(&s->client, *admin_gid));
  s->transport = transport_new(env->loop, fd, WIRE_TYPE_REQUEST, env->limits,
                               &session_transport_ops, s);
  if (!s->transport) {
    free(s->client.groups);
    free(s);
    return NULL;
  }
  s->log = (struct log_client){ .id = id, .pid = cred.pid, .uid = cred.uid, .name = s->name };
  log_event(LOG_LEVEL_DEBUG, LOG_FIELDS(.client = &s->log), "client %u connected: pid %d uid %u gid %u",
            s->client.id, (int)cred.pid, (unsigned)cred.uid, (unsigned)cred.gid);
  return s;
}
