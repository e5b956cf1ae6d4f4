/* SPDX-License-Identifier: MIT */
/* Framing: header checks (every malformed case), encode/receive round trip with fds
 * over a real SEQPACKET pair, and name validation. */
#include "config.h"
#include "harness.h"
#include "gpushm.pb-c.h"
#include "protocol.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static uint8_t buf[WIRE_RECV_BUF];

static size_t make_frame(uint32_t magic, uint16_t version, uint16_t type, uint32_t body_len,
                         uint32_t n_fds, size_t actual_body)
{
  struct wire_header h = { magic, version, type, body_len, n_fds };
  memcpy(buf, &h, sizeof h);
  memset(buf + sizeof h, 0, actual_body);
  return sizeof h + actual_body;
}

static void expect_bad(size_t len, int flags, unsigned fds, uint16_t type, const char *needle)
{
  struct wire_header h;
  const char *why = NULL;
  CHECK(wire_check_frame(buf, len, flags, fds, type, &h, &why) == -EPROTO);
  CHECK(why != NULL);
  if (!strstr(why, needle)) {
    fprintf(stderr, "reason '%s' does not mention '%s'\n", why, needle);
    exit(1);
  }
}

static void test_header_checks(void)
{
  struct wire_header h;
  const char *why = NULL;
  size_t len;

  len = make_frame(WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION, WIRE_TYPE_REQUEST, 10, 0, 10);
  CHECK(wire_check_frame(buf, len, 0, 0, WIRE_TYPE_REQUEST, &h, &why) == 0);
  CHECK(h.body_len == 10);

  expect_bad(WIRE_HEADER_SIZE - 1, 0, 0, WIRE_TYPE_REQUEST, "shorter than its header");
  expect_bad(0, 0, 0, WIRE_TYPE_REQUEST, "shorter than its header");
  len = make_frame(0xdeadbeef, GPUSHM_PROTOCOL_VERSION, WIRE_TYPE_REQUEST, 0, 0, 0);
  expect_bad(len, 0, 0, WIRE_TYPE_REQUEST, "magic");
  len = make_frame(WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION + 1, WIRE_TYPE_REQUEST, 0, 0, 0);
  expect_bad(len, 0, 0, WIRE_TYPE_REQUEST, "version");
  len = make_frame(WIRE_MAGIC, 0, WIRE_TYPE_REQUEST, 0, 0, 0);
  expect_bad(len, 0, 0, WIRE_TYPE_REQUEST, "version");
  len = make_frame(WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION, WIRE_TYPE_REPLY, 0, 0, 0);
  expect_bad(len, 0, 0, WIRE_TYPE_REQUEST, "type");
  len = make_frame(WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION, 99, 0, 0, 0);
  expect_bad(len, 0, 0, WIRE_TYPE_REQUEST, "type");
  /* body length claims more, or less, than arrived */
  len = make_frame(WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION, WIRE_TYPE_REQUEST, 11, 0, 10);
  expect_bad(len, 0, 0, WIRE_TYPE_REQUEST, "length");
  len = make_frame(WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION, WIRE_TYPE_REQUEST, 9, 0, 10);
  expect_bad(len, 0, 0, WIRE_TYPE_REQUEST, "length");
  /* fd count disagrees with what arrived, either way */
  len = make_frame(WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION, WIRE_TYPE_REQUEST, 0, 1, 0);
  expect_bad(len, 0, 0, WIRE_TYPE_REQUEST, "fd count");
  len = make_frame(WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION, WIRE_TYPE_REQUEST, 0, 0, 0);
  expect_bad(len, 0, 2, WIRE_TYPE_REQUEST, "fd count");
  /* kernel-reported truncation */
  expect_bad(len, MSG_CTRUNC, 0, WIRE_TYPE_REQUEST, "truncated");
  expect_bad(len, MSG_TRUNC, 0, WIRE_TYPE_REQUEST, "size limit");
  /* exactly at the limit passes, one byte over fails */
  len = make_frame(WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION, WIRE_TYPE_REQUEST,
                   GPUSHM_LIMIT_FRAME_BODY, 0, GPUSHM_LIMIT_FRAME_BODY);
  CHECK(wire_check_frame(buf, len, 0, 0, WIRE_TYPE_REQUEST, &h, &why) == 0);
  len = make_frame(WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION, WIRE_TYPE_REQUEST,
                   GPUSHM_LIMIT_FRAME_BODY + 1, 0, GPUSHM_LIMIT_FRAME_BODY + 1);
  expect_bad(len, 0, 0, WIRE_TYPE_REQUEST, "size limit");
}

static int open_fds(void)
{
  int n = 0;
  for (int fd = 0; fd < 1024; fd++)
    if (fcntl(fd, F_GETFD) >= 0)
      n++;
  return n;
}

static void test_round_trip(void)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT, *got;
  Gpushm__OpenRequest open = GPUSHM__OPEN_REQUEST__INIT;
  struct wire_frame frame;
  uint8_t tx[WIRE_FRAME_MAX];
  const char *why = NULL;
  int sv[2], pipefd[2], before;
  long len;

  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
  CHECK(pipe(pipefd) == 0);
  before = open_fds();

  open.key_case = GPUSHM__OPEN_REQUEST__KEY_NAME;
  open.name = "frames";
  open.read_only = 1;
  req.request_id = 42;
  req.body_case = GPUSHM__REQUEST__BODY_OPEN;
  req.open = &open;
  len = wire_encode(tx, WIRE_TYPE_REQUEST, &req.base, 1);
  CHECK(len > (long)WIRE_HEADER_SIZE);
  CHECK(wire_send_frame(sv[0], tx, (size_t)len, &pipefd[1], 1, 0) == 0);
  CHECK(wire_recv_frame(sv[1], buf, WIRE_TYPE_REQUEST, 0, &frame, &why) == 0);
  CHECK(frame.n_fds == 1);
  CHECK(write(frame.fds[0], "x", 1) == 1); /* it really is the pipe's write end */
  char c;
  CHECK(read(pipefd[0], &c, 1) == 1 && c == 'x');
  got = gpushm__request__unpack(NULL, frame.header.body_len, frame.body);
  CHECK(got && got->request_id == 42 && got->body_case == GPUSHM__REQUEST__BODY_OPEN);
  CHECK(strcmp(got->open->name, "frames") == 0 && got->open->read_only);
  gpushm__request__free_unpacked(got, NULL);
  wire_close_fds(&frame);
  CHECK(open_fds() == before);

  /* A frame whose header understates its fds: rejected, and the fds are closed. */
  len = wire_encode(tx, WIRE_TYPE_REQUEST, &req.base, 0);
  CHECK(wire_send_frame(sv[0], tx, (size_t)len, &pipefd[1], 1, 0) == 0);
  CHECK(wire_recv_frame(sv[1], buf, WIRE_TYPE_REQUEST, 0, &frame, &why) == -EPROTO);
  CHECK(strstr(why, "fd count") != NULL);
  CHECK(open_fds() == before);

  /* Oversized datagram: reported, never buffered whole. */
  {
    static uint8_t big[WIRE_FRAME_MAX + 4096];
    struct wire_header h = { WIRE_MAGIC, GPUSHM_PROTOCOL_VERSION, WIRE_TYPE_REQUEST,
                             sizeof big - WIRE_HEADER_SIZE, 0 };
    int sndbuf = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    memcpy(big, &h, sizeof h);
    CHECK(wire_send_frame(sv[0], big, sizeof big, NULL, 0, 0) == 0);
    CHECK(wire_recv_frame(sv[1], buf, WIRE_TYPE_REQUEST, 0, &frame, &why) == -EPROTO);
    CHECK(strstr(why, "size limit") != NULL);
  }

  /* A body over the limit cannot be encoded. */
  {
    static char long_name[GPUSHM_LIMIT_FRAME_BODY + 16];
    memset(long_name, 'a', sizeof long_name - 1);
    open.name = long_name;
    CHECK(wire_encode(tx, WIRE_TYPE_REQUEST, &req.base, 0) == -EMSGSIZE);
  }

  /* End of stream and would-block are told apart from errors. */
  CHECK(wire_recv_frame(sv[1], buf, WIRE_TYPE_REQUEST, MSG_DONTWAIT, &frame, &why) == -EAGAIN);
  close(sv[0]);
  CHECK(wire_recv_frame(sv[1], buf, WIRE_TYPE_REQUEST, 0, &frame, &why) == -ECONNRESET);
  close(sv[1]);
  close(pipefd[0]);
  close(pipefd[1]);
}

static void test_names(void)
{
  char name[GPUSHM_LIMIT_NAME_LEN + 2];

  CHECK(wire_name_valid("a"));
  CHECK(wire_name_valid("frames.0_left-eye"));
  CHECK(wire_name_valid("A9"));
  CHECK(!wire_name_valid(NULL));
  CHECK(!wire_name_valid(""));
  CHECK(!wire_name_valid(".hidden"));
  CHECK(!wire_name_valid("-rf"));
  CHECK(!wire_name_valid("a/b"));
  CHECK(!wire_name_valid("a b"));
  CHECK(!wire_name_valid("caf\xc3\xa9"));
  CHECK(!wire_name_valid("tab\t"));
  memset(name, 'n', GPUSHM_LIMIT_NAME_LEN);
  name[GPUSHM_LIMIT_NAME_LEN] = '\0';
  CHECK(wire_name_valid(name));
  name[GPUSHM_LIMIT_NAME_LEN] = 'n';
  name[GPUSHM_LIMIT_NAME_LEN + 1] = '\0';
  CHECK(!wire_name_valid(name));
}

/* Client names (wire_text_valid()) and the decoder under it (wire_utf8_char(), which
 * the daemon's log escaping shares): printable UTF-8 passes, anything that can drive a
 * terminal or is not UTF-8 at all does not. */
static void test_text(void)
{
  uint32_t cp = 1;

  CHECK(wire_text_valid("trainer caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80", 64));
  CHECK(wire_text_valid("line\xe2\x80\xa8sep", 64)); /* (the log escapes it; names may hold it) */
  CHECK(!wire_text_valid("abcdef", 5));
  for (const char *const *bad = (const char *const[]){
         "tab\t", "esc\x1b[2J", "del\x7f", "c1 \xc2\x9b", "bidi \xe2\x80\xae", "iso \xe2\x81\xa6",
         "stray \x80", "cut \xe2\x80", "overlong \xc0\xaf", "overlong \xe0\x80\xaf",
         "surrogate \xed\xa0\x80", "past \xf4\x90\x80\x80", "lead \xf5\x80\x80\x80", "\xff",
         NULL };
       *bad; bad++)
    CHECK(!wire_text_valid(*bad, 64));
  CHECK(wire_utf8_char("a", &cp) == 1 && cp == 'a');
  CHECK(wire_utf8_char("", &cp) == 1 && cp == 0);
  CHECK(wire_utf8_char("\xc3\xa9", &cp) == 2 && cp == 0xe9);
  CHECK(wire_utf8_char("\xe2\x80\xae", &cp) == 3 && cp == 0x202e);
  CHECK(wire_utf8_char("\xf4\x8f\xbf\xbf", &cp) == 4 && cp == 0x10ffff);
  CHECK(wire_utf8_char("\xe2\x80", &cp) == 0 && wire_utf8_char("\xbf", &cp) == 0);
  CHECK(wire_char_disguising(0x9b) && wire_char_disguising(0x202e) && !wire_char_disguising(0xe9));
}

/* The daemon's vocabulary (proto/protocol.h) and the public header's spell the same
 * things: the numbers are asserted where the library is built (client/error.c), the
 * words here. */
static void test_vocabulary(void)
{
#define SAME_TEXT_(name, num, text) CHECK(strcmp(gpushm_strerror(PROTO_E_##name), text) == 0);
  PROTO_ERRNO_MAP(SAME_TEXT_)
#undef SAME_TEXT_
  CHECK(strcmp(GPUSHM_DEFAULT_SOCKET, PROTO_DEFAULT_SOCKET) == 0);
  CHECK(strcmp(GPUSHM_IMEX_CHANNELS_DIR, PROTO_IMEX_CHANNELS_DIR) == 0);
}

int main(void)
{
  test_vocabulary();
  test_header_checks();
  test_round_trip();
  test_names();
  test_text();
  return 0;
}
