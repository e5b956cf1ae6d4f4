/* SPDX-License-Identifier: MIT */
/* The daemon's transport alone, on a socketpair and a libuv loop, without registry or
 * server: frames reach on_frame (read on by score after frames that wait for their reply),
 * bad frames and hang-ups reach on_close, replies
 * queued while the peer's buffer is full go out in order with their fds once it
 * drains, and the queue's frame and byte caps drop a peer that stops reading. */
#include "config.h"
#include "harness.h"
#include "gpushm.pb-c.h"
#include "server/transport.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_SEEN 64

static uv_loop_t loop;
static uint8_t tx[WIRE_FRAME_MAX];
static uint8_t rx[WIRE_RECV_BUF];

struct seen {
  unsigned frames;
  uint64_t ids[MAX_SEEN];
  unsigned fds_in_frames;
  bool closed;
  enum transport_close_reason reason;
  bool more_likely; /* what on_frame answers */
};

static bool on_frame(void *ctx, const struct wire_frame *frame)
{
  struct seen *seen = ctx;
  Gpushm__Request *req = gpushm__request__unpack(NULL, frame->header.body_len, frame->body);

  CHECK(req);
  if (seen->frames < MAX_SEEN)
    seen->ids[seen->frames] = req->request_id;
  seen->frames++;
  seen->fds_in_frames += frame->n_fds;
  gpushm__request__free_unpacked(req, NULL);
  return seen->more_likely;
}

static void on_close(void *ctx, enum transport_close_reason reason, const char *why)
{
  struct seen *seen = ctx;

  CHECK(!seen->closed); /* once */
  CHECK(why != NULL);
  seen->closed = true;
  seen->reason = reason;
}

static const struct transport_ops ops = { .on_frame = on_frame, .on_close = on_close };

static void pair(int sv[2])
{
  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
}

static void pump(void)
{
  for (int i = 0; i < 8; i++)
    uv_run(&loop, UV_RUN_NOWAIT);
}

static size_t encode_request(uint64_t id)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__PingRequest ping = GPUSHM__PING_REQUEST__INIT;
  long len;

  req.request_id = id;
  req.body_case = GPUSHM__REQUEST__BODY_PING;
  req.ping = &ping;
  len = wire_encode(tx, WIRE_TYPE_REQUEST, &req.base, 0);
  CHECK(len > 0);
  return (size_t)len;
}

/* A reply of about pad bytes whose request id says where it belongs in the order. */
static size_t encode_reply(uint64_t id, size_t pad, unsigned n_fds)
{
  static char text[4096];
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  long len;

  CHECK(pad < sizeof text);
  memset(text, 'x', pad);
  text[pad] = '\0';
  reply.request_id = id;
  reply.message = text;
  len = wire_encode(tx, WIRE_TYPE_REPLY, &reply.base, n_fds);
  CHECK(len > 0);
  return (size_t)len;
}

static void close_transport(struct transport *t)
{
  transport_free(t);
  pump(); /* the handle's close callback frees it and closes its fd */
}

static void test_frames_reach_on_frame(void)
{
  const struct transport_limits limits = { 16, 1 << 20 };
  struct seen seen = { 0 };
  struct transport *t;
  int sv[2];

  pair(sv);
  CHECK((t = transport_new(&loop, sv[0], WIRE_TYPE_REQUEST, &limits, &ops, &seen)));
  for (uint64_t id = 1; id <= 5; id++) {
    size_t len = encode_request(id);
    CHECK(send(sv[1], tx, len, 0) == (ssize_t)len);
  }
  pump();
  CHECK(seen.frames == 5 && !seen.closed);
  for (unsigned i = 0; i < 5; i++)
    CHECK(seen.ids[i] == i + 1);

  /* a frame that fails the wire checks ends the connection, with the reason */
  memset(tx, 0xee, 32);
  CHECK(send(sv[1], tx, 32, 0) == 32);
  pump();
  CHECK(seen.closed && seen.reason == TRANSPORT_CLOSE_PROTOCOL && seen.frames == 5);
  /* after on_close nothing more is read */
  CHECK(send(sv[1], tx, encode_request(6), 0) > 0);
  pump();
  CHECK(seen.frames == 5);
  close_transport(t);
  close(sv[1]);
}

/* An owner that expects no more frames gets one per wakeup, the rest on the next (the
 * poll is level-triggered: nothing is stranded); one that expects more gets all that
 * are queued in one. */
static void test_read_budget(void)
{
  const struct transport_limits limits = { 16, 1 << 20 };
  struct transport *t;
  int sv[2];

  for (int more_likely = 0; more_likely <= 1; more_likely++) {
    struct seen seen = { .more_likely = more_likely };
    pair(sv);
    CHECK((t = transport_new(&loop, sv[0], WIRE_TYPE_REQUEST, &limits, &ops, &seen)));
    for (uint64_t id = 1; id <= 5; id++) {
      size_t len = encode_request(id);
      CHECK(send(sv[1], tx, len, 0) == (ssize_t)len);
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(seen.frames == (more_likely ? 5u : 1u));
    for (int i = 0; i < 10 && seen.frames < 5; i++)
      uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(seen.frames == 5 && !seen.closed);
    for (unsigned i = 0; i < 5; i++)
      CHECK(seen.ids[i] == i + 1);
    close_transport(t);
    close(sv[1]);
  }
}

/* A peer whose next request is queued by the time its last is handled (a thread of
 * many, on another CPU) gets read on, once a sampled read has found one; one whose reads
 * then find nothing stops being read on after a few, and gets one frame a wakeup again. */
static void test_read_on_by_score(void)
{
  const struct transport_limits limits = { 16, 1 << 20 };
  struct seen seen = { .more_likely = false };
  struct transport *t;
  unsigned before;
  int sv[2];

  pair(sv);
  CHECK((t = transport_new(&loop, sv[0], WIRE_TYPE_REQUEST, &limits, &ops, &seen)));
  for (uint64_t id = 1; id <= 40; id++) {
    size_t len = encode_request(id);
    CHECK(send(sv[1], tx, len, 0) == (ssize_t)len);
  }
  /* no score yet: one frame a wakeup, until the sampled read */
  for (unsigned i = 1; i < TRANSPORT_READ_ON_SAMPLE; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(seen.frames == i);
  }
  /* it finds the next, and the rest follow in the same wakeup */
  uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(seen.frames == 40);
  for (unsigned i = 0; i < 40; i++)
    CHECK(seen.ids[i] == i + 1);
  /* a lone client: each read after its frame finds nothing, and the score runs out */
  for (uint64_t id = 41; id < 41 + TRANSPORT_READ_ON_SCORE; id++) {
    size_t len = encode_request(id);
    CHECK(send(sv[1], tx, len, 0) == (ssize_t)len);
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(seen.frames == id);
  }
  for (uint64_t id = 100; id < 105; id++) {
    size_t len = encode_request(id);
    CHECK(send(sv[1], tx, len, 0) == (ssize_t)len);
  }
  before = seen.frames;
  uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(seen.frames == before + 1); /* not read on */
  for (int i = 0; i < 10 && seen.frames < before + 5; i++)
    uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(seen.frames == before + 5 && !seen.closed);
  close_transport(t);
  close(sv[1]);
}

static void test_hangup(void)
{
  const struct transport_limits limits = { 16, 1 << 20 };
  struct seen seen = { 0 };
  struct transport *t;
  int sv[2];

  pair(sv);
  CHECK((t = transport_new(&loop, sv[0], WIRE_TYPE_REQUEST, &limits, &ops, &seen)));
  close(sv[1]);
  pump();
  CHECK(seen.closed && seen.reason == TRANSPORT_CLOSE_EOF);
  close_transport(t);
}

/* Sends replies 1, 2, ... until one has to be queued; returns how many were sent. */
static unsigned fill(struct transport *t, size_t pad, uint64_t *next_id)
{
  unsigned sent = 0;

  while (transport_queued_frames(t) == 0) {
    size_t len = encode_reply((*next_id)++, pad, 0);
    CHECK(transport_send(t, tx, len, NULL, 0) == 0);
    sent++;
    CHECK(sent < 100000);
  }
  return sent;
}

/* Reads every waiting reply, checking they come in id order; returns the count. */
static unsigned drain(int fd, uint64_t *expect, unsigned *fds_seen, int *last_fd)
{
  unsigned n = 0;

  for (;;) {
    struct wire_frame frame;
    const char *why = NULL;
    Gpushm__Reply *reply;
    int r = wire_recv_frame(fd, rx, WIRE_TYPE_REPLY, MSG_DONTWAIT, &frame, &why);

    if (r == -EAGAIN)
      return n;
    CHECK(r == 0);
    reply = gpushm__reply__unpack(NULL, frame.header.body_len, frame.body);
    CHECK(reply && reply->request_id == *expect);
    (*expect)++;
    gpushm__reply__free_unpacked(reply, NULL);
    if (frame.n_fds) {
      *fds_seen += frame.n_fds;
      if (*last_fd >= 0)
        close(*last_fd);
      *last_fd = frame.fds[0];
      frame.n_fds = 0;
    }
    n++;
  }
}

static void test_queue_drains_in_order_with_fds(void)
{
  const struct transport_limits limits = { 100000, 1u << 30 };
  struct seen seen = { 0 };
  struct transport *t;
  uint64_t next_id = 1, expect = 1;
  unsigned fds_seen = 0;
  int sv[2], pipefd[2], got = -1;
  char byte = 0;

  pair(sv);
  CHECK((t = transport_new(&loop, sv[0], WIRE_TYPE_REQUEST, &limits, &ops, &seen)));
  fill(t, 1000, &next_id);
  /* More behind the first queued one, the last with an fd riding along. */
  for (int i = 0; i < 10; i++) {
    size_t len = encode_reply(next_id++, 1000, 0);
    CHECK(transport_send(t, tx, len, NULL, 0) == 0);
  }
  CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
  {
    size_t len = encode_reply(next_id++, 10, 1);
    CHECK(transport_send(t, tx, len, &pipefd[0], 1) == 0); /* consumed */
  }
  CHECK(transport_queued_frames(t) == 12);
  /* The peer reads; the loop flushes what waited, in order. */
  for (int round = 0; round < 1000 && expect < next_id; round++) {
    drain(sv[1], &expect, &fds_seen, &got);
    pump();
  }
  CHECK(expect == next_id && transport_queued_frames(t) == 0 && !seen.closed);
  CHECK(fds_seen == 1 && got >= 0);
  /* the fd that arrived is the pipe's read end */
  CHECK(write(pipefd[1], "!", 1) == 1);
  CHECK(read(got, &byte, 1) == 1 && byte == '!');
  close(got);
  close(pipefd[1]);
  close_transport(t);
  close(sv[1]);
}

static void test_caps_drop_a_peer_that_stops_reading(void)
{
  /* the frame cap */
  {
    const struct transport_limits limits = { 4, 1u << 30 };
    struct seen seen = { 0 };
    struct transport *t;
    uint64_t next_id = 1;
    int sv[2];

    pair(sv);
    CHECK((t = transport_new(&loop, sv[0], WIRE_TYPE_REQUEST, &limits, &ops, &seen)));
    fill(t, 1000, &next_id);
    for (int i = 0; i < 3; i++)
      CHECK(transport_send(t, tx, encode_reply(next_id++, 1000, 0), NULL, 0) == 0);
    CHECK(transport_queued_frames(t) == 4 && !seen.closed);
    CHECK(transport_send(t, tx, encode_reply(next_id++, 1000, 0), NULL, 0) == GPUSHM_E_DISCONNECTED);
    CHECK(seen.closed && seen.reason == TRANSPORT_CLOSE_SLOW_READER);
    /* ended: later sends are refused, and their fds still consumed */
    {
      int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
      CHECK(fd >= 0);
      CHECK(transport_send(t, tx, encode_reply(next_id++, 10, 1), &fd, 1) == GPUSHM_E_DISCONNECTED);
      CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);
    }
    close_transport(t);
    close(sv[1]);
  }
  /* the byte cap */
  {
    const struct transport_limits limits = { 100000, 3000 };
    struct seen seen = { 0 };
    struct transport *t;
    uint64_t next_id = 1;
    int sv[2];

    pair(sv);
    CHECK((t = transport_new(&loop, sv[0], WIRE_TYPE_REQUEST, &limits, &ops, &seen)));
    fill(t, 1000, &next_id);
    CHECK(transport_send(t, tx, encode_reply(next_id++, 1000, 0), NULL, 0) == 0);
    CHECK(!seen.closed);
    CHECK(transport_send(t, tx, encode_reply(next_id++, 1000, 0), NULL, 0) == GPUSHM_E_DISCONNECTED);
    CHECK(seen.closed && seen.reason == TRANSPORT_CLOSE_SLOW_READER);
    close_transport(t);
    close(sv[1]);
  }
}

int main(void)
{
  CHECK(uv_loop_init(&loop) == 0);
  test_frames_reach_on_frame();
  test_read_budget();
  test_read_on_by_score();
  test_hangup();
  test_queue_drains_in_order_with_fds();
  test_caps_drop_a_peer_that_stops_reading();
  pump();
  CHECK(uv_loop_close(&loop) == 0);
  printf("test-transport: ok\n");
  return 0;
}
