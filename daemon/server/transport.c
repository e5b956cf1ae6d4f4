/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "protocol.h"
#include "server/transport.h"
#include "gpushm_limits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct out_frame {
  struct out_frame *next;
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME]; /* sent with the frame, then closed */
  unsigned n_fds;
  size_t len;
  uint8_t data[];
};

struct transport {
  int fd;
  uint8_t frame_type;
  bool ended;   /* on_close was called: no more I/O, no more callbacks */
  bool freeing; /* transport_free was called */
  bool paused;  /* the owner takes no frames for now (replies still go out) */
  uv_poll_t poll;
  const struct transport_limits *limits;
  const struct transport_ops *ops;
  void *ctx;
  struct out_frame *out_head, **out_tail;
  uint32_t out_frames;
  size_t out_bytes;
  /* read_on(): how the reads after a frame that waits for its reply have gone lately
   * (a found frame +1, an empty read -1, within +-TRANSPORT_READ_ON_SCORE), and frames
   * since the last such read while the score said no */
  int8_t read_on_score;
  uint8_t read_on_skipped;
};

/* One is enough: the loop is single-threaded and a frame is handled whole before the
 * next is read. */
static uint8_t rx[WIRE_RECV_BUF];

static void close_fds(const int *fds, unsigned n)
{
  for (unsigned i = 0; i < n; i++)
    close(fds[i]);
}

static void on_poll(uv_poll_t *handle, int status, int events);

/* Paused, a peer's hangup is still watched for (EPOLLRDHUP): a client that dies while
 * its request waits (for a name, for an hour) lets go of what it holds now, not when
 * the wait ends. */
static void update_poll(struct transport *t)
{
  int events = (t->paused ? UV_DISCONNECT : UV_READABLE) | (t->out_head ? UV_WRITABLE : 0);
  if (events)
    uv_poll_start(&t->poll, events, on_poll);
  else
    uv_poll_stop(&t->poll);
}

void transport_pause(struct transport *t, bool paused)
{
  t->paused = paused;
  if (!t->ended && !t->freeing)
    update_poll(t);
}

static void free_out_frames(struct transport *t)
{
  while (t->out_head) {
    struct out_frame *f = t->out_head;
    t->out_head = f->next;
    close_fds(f->fds, f->n_fds);
    free(f);
  }
  t->out_tail = &t->out_head;
  t->out_frames = 0;
  t->out_bytes = 0;
}

/* Stops I/O and tells the owner, once; the owner frees the transport. */
static void end(struct transport *t, enum transport_close_reason reason, const char *why)
{
  if (t->ended)
    return;
  t->ended = true;
  uv_poll_stop(&t->poll);
  if (!t->freeing)
    t->ops->on_close(t->ctx, reason, why);
}

static void on_closed(uv_handle_t *handle)
{
  struct transport *t = handle->data;
  close(t->fd);
  free_out_frames(t);
  free(t);
}

void transport_free(struct transport *t)
{
  if (t->freeing)
    return;
  t->freeing = true;
  t->ended = true;
  uv_poll_stop(&t->poll);
  uv_close((uv_handle_t *)&t->poll, on_closed);
}

uint32_t transport_queued_frames(const struct transport *t)
{
  return t->out_frames;
}

static void flush(struct transport *t)
{
  while (t->out_head) {
    struct out_frame *f = t->out_head;
    int r = wire_send_frame(t->fd, f->data, f->len, f->fds, f->n_fds, MSG_DONTWAIT);
    if (r == -EAGAIN)
      break;
    if (r < 0) {
      end(t, TRANSPORT_CLOSE_IO, strerror(-r));
      return;
    }
    t->out_head = f->next;
    t->out_frames--;
    t->out_bytes -= f->len;
    close_fds(f->fds, f->n_fds);
    free(f);
  }
  if (!t->out_head)
    t->out_tail = &t->out_head;
  update_poll(t);
}

int transport_send(struct transport *t, const uint8_t *data, size_t len, const int *fds,
                   unsigned n_fds)
{
  struct out_frame *f;
  int r = -EAGAIN;

  if (t->ended) {
    close_fds(fds, n_fds);
    return PROTO_E_DISCONNECTED;
  }
  /* Straight out when nothing waits ahead of it, so replies keep their order. */
  if (!t->out_head)
    r = wire_send_frame(t->fd, data, len, fds, n_fds, MSG_DONTWAIT);
  if (r != -EAGAIN) {
    close_fds(fds, n_fds);
    if (r < 0) {
      end(t, TRANSPORT_CLOSE_IO, strerror(-r));
      return PROTO_E_DISCONNECTED;
    }
    return 0;
  }
  if (t->out_frames + 1 > t->limits->max_queued_frames ||
      t->out_bytes + len > t->limits->max_queued_bytes || !(f = malloc(sizeof *f + len))) {
    close_fds(fds, n_fds);
    end(t, TRANSPORT_CLOSE_SLOW_READER, "the peer stopped reading replies");
    return PROTO_E_DISCONNECTED;
  }
  f->next = NULL;
  if (n_fds)
    memcpy(f->fds, fds, sizeof(int) * n_fds);
  f->n_fds = n_fds;
  f->len = len;
  memcpy(f->data, data, len);
  *t->out_tail = f;
  t->out_tail = &f->next;
  t->out_frames++;
  t->out_bytes += len;
  update_poll(t);
  return 0;
}

void transport_send_last(struct transport *t, const uint8_t *data, size_t len)
{
  if (!t->freeing && !t->out_head)
    (void)wire_send_frame(t->fd, data, len, NULL, 0, MSG_DONTWAIT);
}

/* Whether to read again after a frame whose sender waits for its reply.  A lone client
 * waiting on its reply has sent nothing more, and the read is an empty recvmsg (one a
 * request, once, with many such clients); but a client thread of many, sending its next
 * request as soon as it has its reply, usually has it queued by then: 73% of such reads
 * found one at 64 ping threads on the CI machine, where the loop then polled once per
 * 116 requests, and served 14% more pings than reading once a readiness.  So each
 * connection keeps score, and while the score says no, reads again one frame in
 * TRANSPORT_READ_ON_SAMPLE to see whether that changed. */
static bool read_on(struct transport *t)
{
  if (t->read_on_score > 0)
    return true;
  if (++t->read_on_skipped < TRANSPORT_READ_ON_SAMPLE)
    return false;
  t->read_on_skipped = 0;
  return true;
}

static void score_read_on(struct transport *t, bool found)
{
  if (found && t->read_on_score < TRANSPORT_READ_ON_SCORE)
    t->read_on_score++;
  else if (!found && t->read_on_score > -TRANSPORT_READ_ON_SCORE)
    t->read_on_score--;
}

/* The owner says after each frame whether more are likely queued (a one-way request's
 * sender may well have sent more); else read_on() decides. */
static void read_frames(struct transport *t)
{
  bool unasked = false; /* this read is read_on()'s */

  for (unsigned i = 0; i < GPUSHM_LIMIT_FRAMES_PER_WAKEUP && !t->ended && !t->paused; i++) {
    struct wire_frame frame;
    const char *why = NULL;
    int r = wire_recv_frame(t->fd, rx, t->frame_type, MSG_DONTWAIT, &frame, &why);

    if (unasked)
      score_read_on(t, r != -EAGAIN);
    if (r == -EAGAIN)
      return;
    if (r == -ECONNRESET) {
      end(t, TRANSPORT_CLOSE_EOF, "the peer hung up");
      return;
    }
    if (r == -EPROTO) {
      end(t, TRANSPORT_CLOSE_PROTOCOL, why);
      return;
    }
    if (r < 0) {
      end(t, TRANSPORT_CLOSE_IO, strerror(-r));
      return;
    }
    bool more_likely = t->ops->on_frame(t->ctx, &frame);
    wire_close_fds(&frame);
    unasked = !more_likely;
    if (unasked && !read_on(t))
      return;
  }
}

static void on_poll(uv_poll_t *handle, int status, int events)
{
  struct transport *t = handle->data;

  if (status < 0) {
    end(t, TRANSPORT_CLOSE_IO, uv_strerror(status));
    return;
  }
  if (events & UV_WRITABLE)
    flush(t);
  if (!t->ended && t->paused && (events & UV_DISCONNECT)) {
    end(t, TRANSPORT_CLOSE_EOF, "the peer hung up");
    return;
  }
  if (!t->ended && (events & UV_READABLE))
    read_frames(t);
}

struct transport *transport_new(uv_loop_t *loop, int fd, uint8_t frame_type,
                                const struct transport_limits *limits,
                                const struct transport_ops *ops, void *ctx)
{
  struct transport *t = calloc(1, sizeof *t);

  if (!t || uv_poll_init(loop, &t->poll, fd) < 0) {
    free(t);
    close(fd);
    return NULL;
  }
  t->fd = fd;
  t->frame_type = frame_type;
  t->limits = limits;
  t->ops = ops;
  t->ctx = ctx;
  t->out_tail = &t->out_head;
  t->poll.data = t;
  update_poll(t);
  return t;
}
