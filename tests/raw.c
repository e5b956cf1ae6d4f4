/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "raw.h"
#include "harness.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static uint8_t rx[WIRE_RECV_BUF];
static uint8_t tx[WIRE_FRAME_MAX];
static uint64_t next_request_id;

int raw_connect(const char *path)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

  CHECK(fd >= 0 && strlen(path) < sizeof addr.sun_path);
  memcpy(addr.sun_path, path, strlen(path) + 1);
  CHECK(connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0);
  return fd;
}

Gpushm__Reply *raw_call(int sock, Gpushm__Request *req, int *fds, unsigned *n_fds)
{
  return raw_call_fd(sock, req, -1, fds, n_fds);
}

Gpushm__Reply *raw_call_fd(int sock, Gpushm__Request *req, int send_fd, int *fds,
                           unsigned *n_fds)
{
  const unsigned n_send = send_fd >= 0 ? 1 : 0;
  struct wire_frame frame;
  const char *why = NULL;
  Gpushm__Reply *reply;
  long len;

  req->request_id = ++next_request_id;
  len = wire_encode(tx, WIRE_TYPE_REQUEST, &req->base, n_send);
  CHECK(len > 0);
  CHECK(wire_send_frame(sock, tx, (size_t)len, &send_fd, n_send, 0) == 0);
  if (wire_recv_frame(sock, rx, WIRE_TYPE_REPLY, 0, &frame, &why) < 0)
    return NULL;
  reply = gpushm__reply__unpack(NULL, frame.header.body_len, frame.body);
  CHECK(reply != NULL);
  *n_fds = frame.n_fds;
  if (fds)
    memcpy(fds, frame.fds, sizeof(int) * frame.n_fds);
  else
    wire_close_fds(&frame);
  return reply;
}

int raw_hello(int sock, const char *client_name, int *status_fd)
{
  /* As the library: carved buffers come as their segment's fd, which is what attacks
   * on a buffer's fd then attack. */
  return raw_hello_features(sock, client_name, GPUSHM_FEATURE_SEGMENTS, status_fd);
}

int raw_hello_features(int sock, const char *client_name, uint64_t features, int *status_fd)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__Hello hello = GPUSHM__HELLO__INIT;
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME];
  unsigned n = 0;
  Gpushm__Reply *reply;
  int status;

  hello.protocol_version = GPUSHM_PROTOCOL_VERSION;
  hello.client_name = (char *)client_name;
  hello.features = features;
  req.body_case = GPUSHM__REQUEST__BODY_HELLO;
  req.hello = &hello;
  CHECK((reply = raw_call(sock, &req, fds, &n)) != NULL);
  status = reply->status;
  if (status == 0) {
    CHECK(n == 1);
    *status_fd = fds[0];
  }
  gpushm__reply__free_unpacked(reply, NULL);
  return status;
}

int raw_open(int sock, const char *name, int read_only, int *fds, unsigned *n_fds)
{
  return raw_open_kind(sock, name, 0, GPUSHM__KIND__KIND_UNSPECIFIED, read_only, false, fds,
                       n_fds);
}

int raw_open_kind(int sock, const char *name, uint64_t id, Gpushm__Kind kind, int read_only,
                  bool ring_attach, int *fds, unsigned *n_fds)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__OpenRequest open = GPUSHM__OPEN_REQUEST__INIT;
  Gpushm__Reply *reply;
  int status;

  if (name) {
    open.key_case = GPUSHM__OPEN_REQUEST__KEY_NAME;
    open.name = (char *)name;
  } else {
    open.key_case = GPUSHM__OPEN_REQUEST__KEY_ID;
    open.id = id;
  }
  open.read_only = read_only;
  open.kind = kind;
  open.ring_attach = ring_attach;
  req.body_case = GPUSHM__REQUEST__BODY_OPEN;
  req.open = &open;
  CHECK((reply = raw_call(sock, &req, fds, n_fds)) != NULL);
  status = reply->status;
  gpushm__reply__free_unpacked(reply, NULL);
  return status;
}
