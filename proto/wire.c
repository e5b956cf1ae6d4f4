#include "config.h"
#include "wire.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int wire_check_frame(const uint8_t *buf, size_t len, int msg_flags, unsigned n_fds_received,
                     uint16_t expected_type, struct wire_header *out, const char **why)
{
  struct wire_header h;

  if (msg_flags & MSG_CTRUNC) {
    *why = "ancillary data truncated (too many file descriptors)";
    return -EPROTO;
  }
  if ((msg_flags & MSG_TRUNC) || len > WIRE_FRAME_MAX) {
    *why = "frame exceeds the size limit";
    return -EPROTO;
  }
  if (len < WIRE_HEADER_SIZE) {
    *why = "frame shorter than its header";
    return -EPROTO;
  }
  memcpy(&h, buf, sizeof h);
  if (h.magic != WIRE_MAGIC) {
    *why = "bad magic: not a gpushm peer";
    return -EPROTO;
  }
  if (h.version != GPUSHM_PROTOCOL_VERSION) {
    *why = "unsupported protocol version";
    return -EPROTO;
  }
  if (h.type != expected_type) {
    *why = "unexpected frame type";
    return -EPROTO;
  }
  if (h.body_len != len - WIRE_HEADER_SIZE) {
    *why = "body length does not match the frame";
    return -EPROTO;
  }
  if (h.n_fds != n_fds_received) {
    *why = "fd count does not match the fds received";
    return -EPROTO;
  }
  *out = h;
  return 0;
}

long wire_encode(uint8_t *buf, uint16_t type, const ProtobufCMessage *msg, unsigned n_fds)
{
  size_t body_len = protobuf_c_message_get_packed_size(msg);
  struct wire_header h = {
    .magic = WIRE_MAGIC,
    .version = GPUSHM_PROTOCOL_VERSION,
    .type = type,
    .body_len = (uint32_t)body_len,
    .n_fds = n_fds,
  };

  if (body_len > GPUSHM_LIMIT_FRAME_BODY || n_fds > GPUSHM_LIMIT_FDS_PER_FRAME)
    return -EMSGSIZE;
  memcpy(buf, &h, sizeof h);
  protobuf_c_message_pack(msg, buf + WIRE_HEADER_SIZE);
  return (long)(WIRE_HEADER_SIZE + body_len);
}

int wire_send_frame(int sock, const uint8_t *frame, size_t len, const int *fds, unsigned n_fds,
                    int send_flags)
{
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * GPUSHM_LIMIT_FDS_PER_FRAME)];
  } control;
  struct iovec iov = { .iov_base = (void *)frame, .iov_len = len };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
  ssize_t n;

  if (n_fds > GPUSHM_LIMIT_FDS_PER_FRAME)
    return -EINVAL;
  if (n_fds) {
    struct cmsghdr *cmsg;
    memset(&control, 0, sizeof control);
    msg.msg_control = control.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
    cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * n_fds);
  }
  do
    n = sendmsg(sock, &msg, MSG_NOSIGNAL | send_flags);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  /* SEQPACKET sends whole datagrams or nothing. */
  return (size_t)n == len ? 0 : -EPROTO;
}

void wire_close_fds(struct wire_frame *frame)
{
  for (unsigned i = 0; i < frame->n_fds; i++)
    close(frame->fds[i]);
  frame->n_fds = 0;
}

int wire_recv_frame(int sock, uint8_t *buf, uint16_t expected_type, int recv_flags,
                    struct wire_frame *frame, const char **why)
{
  /* Room for more fds than allowed, so an excess is received (and closed) and
   * reported as a count mismatch rather than silently dropped by the kernel. */
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * GPUSHM_LIMIT_FDS_PER_FRAME * 2)];
  } control;
  struct iovec iov = { .iov_base = buf, .iov_len = WIRE_RECV_BUF };
  struct msghdr msg = {
    .msg_iov = &iov, .msg_iovlen = 1,
    .msg_control = control.buf, .msg_controllen = sizeof control.buf,
  };
  int received[GPUSHM_LIMIT_FDS_PER_FRAME * 2];
  unsigned n_received = 0;
  ssize_t n;
  int r;

  frame->n_fds = 0;
  do
    n = recvmsg(sock, &msg, recv_flags | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;

  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count && n_received < GPUSHM_LIMIT_FDS_PER_FRAME * 2; i++)
      memcpy(&received[n_received++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
  }
  if (n == 0 && n_received == 0)
    return -ECONNRESET;

  r = wire_check_frame(buf, (size_t)n, msg.msg_flags, n_received, expected_type,
                       &frame->header, why);
  if (r == 0 && n_received > GPUSHM_LIMIT_FDS_PER_FRAME) {
    *why = "too many file descriptors in one frame";
    r = -EPROTO;
  }
  if (r < 0) {
    for (unsigned i = 0; i < n_received; i++)
      close(received[i]);
    return r;
  }
  memcpy(frame->fds, received, sizeof(int) * n_received);
  frame->n_fds = n_received;
  frame->body = buf + WIRE_HEADER_SIZE;
  return 0;
}

int wire_name_valid(const char *name)
{
  size_t len = 0;

  if (!name || !name[0] || name[0] == '.' || name[0] == '-')
    return 0;
  for (const char *p = name; *p; p++, len++) {
    char c = *p;
    if (len >= GPUSHM_LIMIT_NAME_LEN)
      return 0;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-'))
      return 0;
  }
  return 1;
}
