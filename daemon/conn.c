#include "config.h"
#include "conn.h"
#include "dispatch.h"
#include "gpushm.h"
#include "gpushm.pb-c.h"
#include "log.h"
#include "server.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct out_frame {
  struct out_frame *next;
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME]; /* sent with the frame, then closed */
  unsigned n_fds;
  size_t len;
  uint8_t data[];
};

static void close_fds(const int *fds, unsigned n)
{
  for (unsigned i = 0; i < n; i++)
    close(fds[i]);
}

static void on_poll(uv_poll_t *handle, int status, int events);

static void update_poll(struct conn *c)
{
  int events = UV_READABLE | (c->out_head ? UV_WRITABLE : 0);
  uv_poll_start(&c->poll, events, on_poll);
}

static void free_out_frames(struct conn *c)
{
  while (c->out_head) {
    struct out_frame *f = c->out_head;
    c->out_head = f->next;
    close_fds(f->fds, f->n_fds);
    free(f);
  }
  c->out_tail = &c->out_head;
  c->out_frames = 0;
  c->out_bytes = 0;
}

static void on_closed(uv_handle_t *handle)
{
  struct conn *c = handle->data;
  close(c->fd);
  free_out_frames(c);
  free(c);
}

void conn_close(struct conn *c)
{
  struct server *srv = c->srv;

  if (c->closing)
    return;
  c->closing = true;
  log_debug("client %u (pid %d) disconnected", c->client.id, (int)c->client.pid);
  registry_client_gone(&srv->reg, &c->client);
  list_del(&c->link);
  srv->n_clients--;
  server_uid_conns(srv, c->client.uid, -1);
  uv_poll_stop(&c->poll);
  uv_close((uv_handle_t *)&c->poll, on_closed);
}

static void drop_slow_reader(struct conn *c)
{
  log_warn("client %u (pid %d) stopped reading replies (%u queued); dropping it",
           c->client.id, (int)c->client.pid, c->out_frames);
  c->srv->counters.clients_dropped++;
  conn_close(c);
}

static void flush(struct conn *c)
{
  while (c->out_head) {
    struct out_frame *f = c->out_head;
    int r = wire_send_frame(c->fd, f->data, f->len, f->fds, f->n_fds, MSG_DONTWAIT);
    if (r == -EAGAIN)
      break;
    if (r < 0) {
      log_debug("client %u: send failed: %s", c->client.id, strerror(-r));
      conn_close(c);
      return;
    }
    c->out_head = f->next;
    c->out_frames--;
    c->out_bytes -= f->len;
    close_fds(f->fds, f->n_fds);
    free(f);
  }
  if (!c->out_head)
    c->out_tail = &c->out_head;
  update_poll(c);
}

static void send_frame(struct conn *c, const uint8_t *data, size_t len, const int *fds,
                       unsigned n_fds)
{
  struct out_frame *f;
  int r = -EAGAIN;

  if (!c->out_head)
    r = wire_send_frame(c->fd, data, len, fds, n_fds, MSG_DONTWAIT);
  if (r == 0 || r != -EAGAIN) {
    close_fds(fds, n_fds);
    if (r < 0) {
      log_debug("client %u: send failed: %s", c->client.id, strerror(-r));
      conn_close(c);
    }
    return;
  }
  if (c->out_frames + 1 > c->srv->cfg.max_queued_frames ||
      c->out_bytes + len > c->srv->cfg.max_queued_bytes || !(f = malloc(sizeof *f + len))) {
    close_fds(fds, n_fds);
    drop_slow_reader(c);
    return;
  }
  f->next = NULL;
  memcpy(f->fds, fds, sizeof(int) * n_fds);
  f->n_fds = n_fds;
  f->len = len;
  memcpy(f->data, data, len);
  *c->out_tail = f;
  c->out_tail = &f->next;
  c->out_frames++;
  c->out_bytes += len;
  update_poll(c);
}

void conn_send_reply(struct conn *c, const void *reply_msg, const int *fds, unsigned n_fds)
{
  long len;

  if (c->closing) {
    close_fds(fds, n_fds);
    return;
  }
  len = wire_encode(c->srv->tx, WIRE_TYPE_REPLY, reply_msg, n_fds);
  if (len < 0) {
    /* Replies are sized to fit by construction (list pages are packed to the limit),
     * so this is a daemon bug; the client still gets an answer. */
    Gpushm__Reply error = GPUSHM__REPLY__INIT;
    const Gpushm__Reply *orig = reply_msg;
    log_error("reply to request %llu exceeds the frame limit",
              (unsigned long long)orig->request_id);
    error.request_id = orig->request_id;
    error.status = -GPUSHM_E_LIMIT;
    error.message = "reply would exceed the frame size limit";
    close_fds(fds, n_fds);
    n_fds = 0;
    len = wire_encode(c->srv->tx, WIRE_TYPE_REPLY, &error.base, 0);
  }
  send_frame(c, c->srv->tx, (size_t)len, fds, n_fds);
}

void conn_fail(struct conn *c, int status, const char *why)
{
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  long len;

  if (c->closing)
    return;
  if (status == GPUSHM_E_PROTO)
    c->srv->counters.protocol_errors++;
  log_warn("client %u (pid %d, uid %u): %s; closing it", c->client.id, (int)c->client.pid,
           (unsigned)c->client.uid, why);
  reply.request_id = 0;
  reply.status = -status;
  reply.message = (char *)why;
  /* Best effort and never queued: the connection ends now either way. */
  len = wire_encode(c->srv->tx, WIRE_TYPE_REPLY, &reply.base, 0);
  if (len > 0 && !c->out_head)
    (void)wire_send_frame(c->fd, c->srv->tx, (size_t)len, NULL, 0, MSG_DONTWAIT);
  conn_close(c);
}

static void read_requests(struct conn *c)
{
  struct server *srv = c->srv;

  for (unsigned i = 0; i < GPUSHM_LIMIT_FRAMES_PER_WAKEUP && !c->closing; i++) {
    struct wire_frame frame;
    Gpushm__Request *req;
    const char *why = NULL;
    int r = wire_recv_frame(c->fd, srv->rx, WIRE_TYPE_REQUEST, MSG_DONTWAIT, &frame, &why);

    if (r == -EAGAIN)
      return;
    if (r == -ECONNRESET) {
      conn_close(c);
      return;
    }
    if (r == -EPROTO) {
      conn_fail(c, GPUSHM_E_PROTO, why);
      return;
    }
    if (r < 0) {
      log_debug("client %u: receive failed: %s", c->client.id, strerror(-r));
      conn_close(c);
      return;
    }
    if (frame.n_fds) {
      wire_close_fds(&frame);
      conn_fail(c, GPUSHM_E_PROTO, "requests carry no file descriptors");
      return;
    }
    if (wire_check_strings(&gpushm__request__descriptor, frame.body, frame.header.body_len,
                           &why) < 0) {
      conn_fail(c, GPUSHM_E_PROTO, why);
      return;
    }
    req = gpushm__request__unpack(NULL, frame.header.body_len, frame.body);
    if (!req) {
      conn_fail(c, GPUSHM_E_PROTO, "malformed request body");
      return;
    }
    dispatch_request(c, req);
    gpushm__request__free_unpacked(req, NULL);
  }
}

static void on_poll(uv_poll_t *handle, int status, int events)
{
  struct conn *c = handle->data;

  if (status < 0) {
    log_debug("client %u: poll error: %s", c->client.id, uv_strerror(status));
    conn_close(c);
    return;
  }
  if (events & UV_WRITABLE)
    flush(c);
  if (!c->closing && (events & UV_READABLE))
    read_requests(c);
}

static void read_peer_groups(struct conn *c)
{
#if HAVE_DECL_SO_PEERGROUPS
  socklen_t len = 32 * sizeof(gid_t);

  for (int attempt = 0; attempt < 2; attempt++) {
    gid_t *groups = malloc(len ? len : sizeof(gid_t));
    if (!groups)
      return;
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0) {
      c->client.groups = groups;
      c->client.n_groups = len / sizeof(gid_t);
      return;
    }
    free(groups);
    if (errno != ERANGE)
      return; /* primary gid only: group access may be narrower than the peer's */
  }
#endif
}

struct conn *conn_start(struct server *srv, int fd)
{
  struct ucred cred;
  socklen_t len = sizeof cred;
  struct timespec now;
  struct conn *c;

  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
    log_warn("SO_PEERCRED: %s; refusing client", strerror(errno));
    close(fd);
    return NULL;
  }
  if (!(c = calloc(1, sizeof *c))) {
    close(fd);
    return NULL;
  }
  c->srv = srv;
  c->fd = fd;
  c->out_tail = &c->out_head;
  clock_gettime(CLOCK_REALTIME, &now);
  c->connected_unix_ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
  c->accepted_loop_ms = uv_now(srv->loop);
  registry_client_init(&c->client, ++srv->next_client_id, cred.pid, cred.uid, cred.gid);
  read_peer_groups(c);
  c->client.admin = cred.uid == 0 || (srv->cfg.has_admin_group &&
                                      registry_client_in_group(&c->client, srv->cfg.admin_gid));
  if (uv_poll_init(srv->loop, &c->poll, fd) < 0) {
    free(c->client.groups);
    free(c);
    close(fd);
    return NULL;
  }
  c->poll.data = c;
  list_add_tail(&srv->conns, &c->link);
  srv->n_clients++;
  server_uid_conns(srv, cred.uid, +1);
  update_poll(c);
  log_debug("client %u connected: pid %d uid %u gid %u", c->client.id, (int)cred.pid,
            (unsigned)cred.uid, (unsigned)cred.gid);
  return c;
}
