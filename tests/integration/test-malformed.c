/* SPDX-License-Identifier: MIT */
/* Misbehaving clients — garbage, oversized frames, bad headers, fd mismatches,
 * undecodable bodies, protocol order violations, a client that never reads — end
 * only themselves, are told why, and leak nothing; a good client keeps working. */
#include "config.h"
#include "harness.h"
#include "gpushm.pb-c.h"
#include "wire.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static struct test_daemon d;
static uint8_t rx[WIRE_RECV_BUF];
static uint8_t tx[WIRE_FRAME_MAX + 64 * 1024];

static int raw_connect(void)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), sndbuf = 1 << 20;
  CHECK(fd >= 0);
  CHECK(strlen(d.socket) < sizeof addr.sun_path);
  memcpy(addr.sun_path, d.socket, strlen(d.socket) + 1);
  CHECK(connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  return fd;
}

static void raw_send(int fd, const void *data, size_t len, const int *fds, unsigned n_fds)
{
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 16)];
  } control;
  struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

  if (n_fds) {
    struct cmsghdr *c;
    memset(&control, 0, sizeof control);
    msg.msg_control = control.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
    c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
  }
  CHECK(sendmsg(fd, &msg, MSG_NOSIGNAL) == (ssize_t)len);
}

/* Encodes req; the header can then be doctored before sending. */
static size_t encode(Gpushm__Request *req)
{
  long len = wire_encode(tx, WIRE_TYPE_REQUEST, &req->base, 0);
  CHECK(len > 0);
  return (size_t)len;
}

static struct wire_header *header(void)
{
  return (struct wire_header *)tx;
}

static Gpushm__Reply *recv_reply(int fd)
{
  struct wire_frame frame;
  const char *why = NULL;
  Gpushm__Reply *reply;
  int r = wire_recv_frame(fd, rx, WIRE_TYPE_REPLY, 0, &frame, &why);
  if (r < 0) {
    fprintf(stderr, "no reply: %s\n", why ? why : strerror(-r));
    exit(1);
  }
  wire_close_fds(&frame);
  reply = gpushm__reply__unpack(NULL, frame.header.body_len, frame.body);
  CHECK(reply != NULL);
  return reply;
}

static size_t ping_frame(uint64_t request_id)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__PingRequest ping = GPUSHM__PING_REQUEST__INIT;
  req.request_id = request_id;
  req.body_case = GPUSHM__REQUEST__BODY_PING;
  req.ping = &ping;
  return encode(&req);
}

static Gpushm__Reply *hello_with(int fd, uint32_t version, const char *name)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__Hello hello = GPUSHM__HELLO__INIT;
  hello.protocol_version = version;
  hello.client_name = (char *)name;
  req.request_id = 1;
  req.body_case = GPUSHM__REQUEST__BODY_HELLO;
  req.hello = &hello;
  raw_send(fd, tx, encode(&req), NULL, 0);
  return recv_reply(fd);
}

static int raw_hello(void)
{
  int fd = raw_connect();
  Gpushm__Reply *r = hello_with(fd, GPUSHM_PROTOCOL_VERSION, "raw");
  CHECK(r->status == 0 && r->body_case == GPUSHM__REPLY__BODY_HELLO);
  gpushm__reply__free_unpacked(r, NULL);
  return fd;
}

/* The daemon must explain itself (request id 0, protocol error) and hang up. */
static void expect_dropped(int fd, const char *needle)
{
  Gpushm__Reply *r = recv_reply(fd);
  struct wire_frame frame;
  const char *why;

  if (r->request_id != 0 || r->status != -GPUSHM_E_PROTO || !strstr(r->message, needle)) {
    fprintf(stderr, "expected a protocol error mentioning '%s', got id %llu status %d '%s'\n",
            needle, (unsigned long long)r->request_id, r->status, r->message);
    exit(1);
  }
  gpushm__reply__free_unpacked(r, NULL);
  CHECK(wire_recv_frame(fd, rx, WIRE_TYPE_REPLY, 0, &frame, &why) == -ECONNRESET);
  close(fd);
}

static void expect_status(int fd, uint64_t id, int status)
{
  Gpushm__Reply *r = recv_reply(fd);
  if (r->request_id != id || r->status != -status) {
    fprintf(stderr, "reply %llu status %d '%s', expected %llu status %d\n",
            (unsigned long long)r->request_id, r->status, r->message, (unsigned long long)id,
            -status);
    exit(1);
  }
  gpushm__reply__free_unpacked(r, NULL);
}

static gpushm_t *good;
static gpushm_buffer_t *kept;

static void good_client_still_served(void)
{
  const gpushm_buffer_info_t *info;
  CHECK_OK(gpushm_ping(good));
  CHECK((info = find_buffer(good, "kept")) && gpushm_buffer_info_refs(info) == 1 &&
        gpushm_buffer_info_linked(info));
}

static int client_dropped(const struct test_daemon *daemon, void *unused)
{
  gpushm_stats_t *s;
  int dropped;
  (void)daemon;
  (void)unused;
  CHECK_OK(gpushm_stats(good, &s));
  dropped = gpushm_stats_clients_dropped(s) == 1;
  gpushm_stats_free(s);
  return dropped;
}

static int fds_back(const struct test_daemon *daemon, void *baseline)
{
  gpushm_stats_t *s;
  int back;
  (void)daemon;
  CHECK_OK(gpushm_stats(good, &s));
  back = gpushm_stats_open_fds(s) == *(uint32_t *)baseline && gpushm_stats_clients(s) == 1;
  gpushm_stats_free(s);
  return back;
}

int main(void)
{
  gpushm_stats_t *base, *s;
  uint32_t base_fds;
  unsigned fatal = 0;
  int fd, pipefd[2];

  d.log_path = test_log_file("malformed");
  daemon_start(&d, "--max-queued-replies", "8", NULL);
  good = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(good, "kept", 4096, NULL, &kept));
  CHECK_OK(gpushm_stats(good, &base));
  base_fds = gpushm_stats_open_fds(base);
  gpushm_stats_free(base);
  CHECK(pipe(pipefd) == 0);

  /* garbage and short frames */
  fd = raw_connect();
  memset(tx, 0x5a, 100);
  raw_send(fd, tx, 100, NULL, 0);
  expect_dropped(fd, "magic"), fatal++;
  fd = raw_connect();
  raw_send(fd, "abc", 3, NULL, 0);
  expect_dropped(fd, "shorter than its header"), fatal++;
  good_client_still_served();

  /* oversized: a well-formed header announcing a body past the limit */
  fd = raw_connect();
  {
    size_t len = WIRE_FRAME_MAX + 32 * 1024;
    struct wire_header h = { WIRE_MAGIC, GPUSHM_WIRE_VERSION, WIRE_TYPE_REQUEST,
                             (uint32_t)(len - WIRE_HEADER_SIZE), 0 };
    memset(tx, 0, len);
    memcpy(tx, &h, sizeof h);
    raw_send(fd, tx, len, NULL, 0);
  }
  expect_dropped(fd, "size limit"), fatal++;

  /* header fields */
  fd = raw_connect();
  {
    size_t len = ping_frame(1);
    header()->magic = 0x12345678;
    raw_send(fd, tx, len, NULL, 0);
  }
  expect_dropped(fd, "magic"), fatal++;
  fd = raw_connect();
  {
    size_t len = ping_frame(1);
    header()->version = GPUSHM_WIRE_VERSION + 1;
    raw_send(fd, tx, len, NULL, 0);
  }
  expect_dropped(fd, "version"), fatal++;
  fd = raw_connect();
  {
    size_t len = ping_frame(1);
    header()->type = WIRE_TYPE_REPLY;
    raw_send(fd, tx, len, NULL, 0);
  }
  expect_dropped(fd, "type"), fatal++;
  fd = raw_connect();
  {
    size_t len = ping_frame(1);
    header()->body_len += 5;
    raw_send(fd, tx, len, NULL, 0);
  }
  expect_dropped(fd, "length"), fatal++;
  good_client_still_served();

  /* A request needing a feature its client's hello did not name (unmap: segments, which
   * a hello without features does not know) is refused, and the connection stays. */
  fd = raw_hello();
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__UnmapRequest unmap = GPUSHM__UNMAP_REQUEST__INIT;
    unmap.segment_id = 1;
    req.request_id = 7;
    req.body_case = GPUSHM__REQUEST__BODY_UNMAP;
    req.unmap = &unmap;
    raw_send(fd, tx, encode(&req), NULL, 0);
    expect_status(fd, 7, GPUSHM_E_UNSUPPORTED);
    raw_send(fd, tx, ping_frame(8), NULL, 0);
    expect_status(fd, 8, 0);
    close(fd);
  }

  /* fd count: fds the header does not announce, one it announces but lacks, too many
   * to fit the daemon's control buffer */
  fd = raw_connect();
  raw_send(fd, tx, ping_frame(1), &pipefd[0], 1);
  expect_dropped(fd, "fd count"), fatal++;
  fd = raw_connect();
  {
    size_t len = ping_frame(1);
    header()->n_fds = 1;
    raw_send(fd, tx, len, NULL, 0);
  }
  expect_dropped(fd, "fd count"), fatal++;
  fd = raw_connect();
  {
    int many[12];
    size_t len = ping_frame(1);
    for (int i = 0; i < 12; i++)
      many[i] = pipefd[0];
    header()->n_fds = 12;
    raw_send(fd, tx, len, many, 12);
  }
  expect_dropped(fd, "truncated"), fatal++;
  /* fds announced and sent, on a request that takes none; two on the one that takes one
   * (register_memory) */
  fd = raw_connect();
  {
    size_t len = ping_frame(1);
    header()->n_fds = 1;
    raw_send(fd, tx, len, &pipefd[0], 1);
  }
  expect_dropped(fd, "carry no file descriptors"), fatal++;
  fd = raw_connect();
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__RegisterRequest reg = GPUSHM__REGISTER_REQUEST__INIT;
    int two[2] = { pipefd[0], pipefd[1] };
    size_t len;
    reg.name = "two-fds";
    req.request_id = 1;
    req.body_case = GPUSHM__REQUEST__BODY_REGISTER_MEMORY;
    req.register_memory = &reg;
    len = encode(&req);
    header()->n_fds = 2;
    raw_send(fd, tx, len, two, 2);
  }
  expect_dropped(fd, "carry no file descriptors"), fatal++;
  fd = raw_hello();
  {
    size_t len = ping_frame(2);
    header()->n_fds = 1;
    raw_send(fd, tx, len, &pipefd[0], 1);
  }
  expect_dropped(fd, "no file descriptors"), fatal++;
  good_client_still_served();

  /* an undecodable body behind a valid header */
  fd = raw_connect();
  {
    struct wire_header h = { WIRE_MAGIC, GPUSHM_WIRE_VERSION, WIRE_TYPE_REQUEST, 24, 0 };
    memcpy(tx, &h, sizeof h);
    memset(tx + sizeof h, 0xff, 24);
    raw_send(fd, tx, sizeof h + 24, NULL, 0);
  }
  expect_dropped(fd, "malformed request body"), fatal++;
  good_client_still_served();

  /* a name with a NUL inside: "ab\0cd" must not create "ab" */
  fd = raw_hello();
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__CreateRequest create = GPUSHM__CREATE_REQUEST__INIT;
    gpushm_buffer_t *b;
    uint8_t *p;
    size_t len;
    create.name = "abXcd";
    create.size = 4096;
    req.request_id = 2;
    req.body_case = GPUSHM__REQUEST__BODY_CREATE;
    req.create = &create;
    len = encode(&req);
    CHECK((p = memmem(tx, len, "abXcd", 5)) != NULL);
    p[2] = '\0';
    raw_send(fd, tx, len, NULL, 0);
    expect_dropped(fd, "NUL byte"), fatal++;
    CHECK_ERR(gpushm_buffer_open(good, "ab", 0, &b), GPUSHM_E_NOENT);
  }
  good_client_still_served();

  /* a client name that would drive an admin's terminal is refused (not fatal) */
  fd = raw_connect();
  {
    Gpushm__Reply *r = hello_with(fd, GPUSHM_PROTOCOL_VERSION, "\x1b]0;owned\x07");
    CHECK(r->status == -GPUSHM_E_INVAL && strstr(r->message, "printable") != NULL);
    gpushm__reply__free_unpacked(r, NULL);
    r = hello_with(fd, GPUSHM_PROTOCOL_VERSION, "trainer-\xc3\xbc"); /* UTF-8 is fine */
    CHECK(r->status == 0);
    gpushm__reply__free_unpacked(r, NULL);
    close(fd);
  }

  /* A one-way unlink's failure is logged with its reason, which may quote the name it
   * was sent: C1 controls (U+009B is CSI), bidi overrides and ill-formed UTF-8 there
   * must not reach the log an admin reads in a terminal. */
  fd = raw_hello();
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__UnlinkRequest unlink = GPUSHM__UNLINK_REQUEST__INIT;
    unlink.name = "\xc2\x9b" "2J\xe2\x80\xae" "evil\xff";
    unlink.id = UINT64_MAX; /* names no buffer: refused, and the refusal logged */
    req.request_id = 3;
    req.oneway = true;
    req.body_case = GPUSHM__REQUEST__BODY_UNLINK;
    req.unlink = &unlink;
    raw_send(fd, tx, encode(&req), NULL, 0);
    raw_send(fd, tx, ping_frame(4), NULL, 0);
    expect_status(fd, 4, GPUSHM_OK); /* answered after the unlink was handled */
    CHECK(file_contains(d.log_path, "one-way unlink failed"));
    CHECK(!file_contains(d.log_path, "\xc2\x9b") && !file_contains(d.log_path, "\xe2\x80\xae") &&
          !file_contains(d.log_path, "\xff"));
    close(fd);
  }

  /* protocol order: hello first; request id 0 is reserved */
  fd = raw_connect();
  raw_send(fd, tx, ping_frame(1), NULL, 0);
  expect_dropped(fd, "must be hello"), fatal++;
  fd = raw_hello();
  raw_send(fd, tx, ping_frame(0), NULL, 0);
  expect_dropped(fd, "reserved"), fatal++;
  good_client_still_served();

  /* Errors that end a request, not the connection. */
  fd = raw_connect();
  {
    Gpushm__Reply *r = hello_with(fd, GPUSHM_PROTOCOL_VERSION + 1, "future");
    CHECK(r->status == -GPUSHM_E_VERSION);
    gpushm__reply__free_unpacked(r, NULL);
    char long_name[GPUSHM_LIMIT_CLIENT_NAME_LEN + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    r = hello_with(fd, GPUSHM_PROTOCOL_VERSION, long_name);
    CHECK(r->status == -GPUSHM_E_LIMIT);
    gpushm__reply__free_unpacked(r, NULL);
    long_name[GPUSHM_LIMIT_CLIENT_NAME_LEN] = '\0'; /* exactly at the limit */
    r = hello_with(fd, GPUSHM_PROTOCOL_VERSION, long_name);
    CHECK(r->status == 0);
    gpushm__reply__free_unpacked(r, NULL);
    r = hello_with(fd, GPUSHM_PROTOCOL_VERSION, "again");
    CHECK(r->status == -GPUSHM_E_INVAL);
    gpushm__reply__free_unpacked(r, NULL);
  }
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT; /* no body: from a newer client, say */
    req.request_id = 7;
    raw_send(fd, tx, encode(&req), NULL, 0);
    expect_status(fd, 7, GPUSHM_E_UNSUPPORTED);
  }
  /* Pipelined requests, more than one wakeup handles: all answered, in order. */
  for (uint64_t id = 100; id < 200; id++)
    raw_send(fd, tx, ping_frame(id), NULL, 0);
  for (uint64_t id = 100; id < 200; id++)
    expect_status(fd, id, GPUSHM_OK);
  close(fd);

  /* A client that sends but never reads is dropped once its replies pile up. */
  fd = raw_hello();
  {
    size_t len = ping_frame(5);
    for (int i = 0; i < 100000; i++)
      if (send(fd, tx, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        break;
  }
  CHECK(wait_until(client_dropped, &d, NULL));
  close(fd);
  good_client_still_served();

  close(pipefd[0]);
  close(pipefd[1]);
  CHECK(wait_until(fds_back, &d, &base_fds));
  CHECK_OK(gpushm_stats(good, &s));
  CHECK(gpushm_stats_protocol_errors(s) == fatal);
  gpushm_stats_free(s);
  CHECK_OK(gpushm_buffer_close(kept));
  gpushm_disconnect(good);
  daemon_stop(&d);
  return 0;
}
