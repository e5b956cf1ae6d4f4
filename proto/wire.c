/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "wire.h"
#include "gpushm.pb-c.h"

#include <errno.h>
#include <stdio.h>
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
  if (h.version != GPUSHM_WIRE_VERSION) {
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
    .version = GPUSHM_WIRE_VERSION,
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

static size_t read_varint(const uint8_t *p, size_t len, uint64_t *out)
{
  uint64_t v = 0;
  for (size_t i = 0; i < len && i < 10; i++) {
    v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
    if (!(p[i] & 0x80)) {
      *out = v;
      return i + 1;
    }
  }
  return 0;
}

/* protobuf-c hands string fields over NUL-terminated, so "ab\0cd" would silently be
 * read as "ab": walk the encoded message with its descriptor and refuse any string
 * field holding a NUL before anything is decoded. */
enum scan_result {
  SCAN_CLEAN,        /* protobuf with no NUL in any string */
  SCAN_NOT_PROTOBUF, /* left for the decoder to report */
  SCAN_NUL_IN_STRING,
};

static enum scan_result scan_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len,
                        unsigned depth)
{
  if (depth > 16)
    return SCAN_NOT_PROTOBUF;
  while (len) {
    uint64_t key, v;
    size_t n = read_varint(p, len, &key);
    if (!n)
      return SCAN_NOT_PROTOBUF;
    p += n;
    len -= n;
    switch (key & 7) {
    case 0:
      if (!(n = read_varint(p, len, &v)))
        return SCAN_NOT_PROTOBUF;
      break;
    case 1:
    case 5:
      n = (key & 7) == 1 ? 8 : 4;
      if (len < n)
        return SCAN_NOT_PROTOBUF;
      break;
    case 2: {
      const ProtobufCFieldDescriptor *f;
      size_t m = read_varint(p, len, &v);
      if (!m || v > len - m)
        return SCAN_NOT_PROTOBUF;
      f = key >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3))
                                 : NULL;
      if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + m, 0, (size_t)v))
        return SCAN_NUL_IN_STRING;
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
        enum scan_result r = scan_strings(f->descriptor, p + m, (size_t)v, depth + 1);
        if (r != SCAN_CLEAN)
          return r;
      }
      n = m + (size_t)v;
      break;
    }
    default:
      return SCAN_NOT_PROTOBUF; /* groups are not used by this schema */
    }
    p += n;
    len -= n;
  }
  return SCAN_CLEAN;
}

int wire_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *body, size_t len,
                       const char **why)
{
  /* What is not even protobuf is left for the decoder to report. */
  if (scan_strings(desc, body, len, 0) != SCAN_NUL_IN_STRING)
    return 0;
  *why = "a string field contains a NUL byte";
  return -EPROTO;
}

size_t wire_utf8_char(const char *s, uint32_t *cp)
{
  const unsigned char *p = (const unsigned char *)s;
  size_t len = p[0] < 0x80 ? 1 : p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc0 ? 2 : 0;
  uint32_t c;

  if (len <= 1 || p[0] > 0xf4) {
    *cp = p[0];
    return len == 1;
  }
  c = p[0] & (0x7fu >> len);
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80) /* (a NUL ends the string here too) */
      return 0;
    c = c << 6 | (p[i] & 0x3fu);
  }
  if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000) ||
      (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
    return 0;
  *cp = c;
  return len;
}

bool wire_char_disguising(uint32_t cp)
{
  return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

int wire_text_valid(const char *s, size_t max_len)
{
  if (strlen(s) > max_len)
    return 0;
  for (size_t n; *s; s += n) {
    uint32_t cp;
    if (!(n = wire_utf8_char(s, &cp)) || wire_char_disguising(cp))
      return 0;
  }
  return 1;
}

static const char *const backend_names[] = {
  [GPUSHM__BACKEND__BACKEND_HOST] = "host",
  [GPUSHM__BACKEND__BACKEND_CUDA_IPC] = "cuda-ipc",
  [GPUSHM__BACKEND__BACKEND_CUDA_FD] = "cuda-fd",
  [GPUSHM__BACKEND__BACKEND_CUDA_EVENT] = "cuda-event",
  [GPUSHM__BACKEND__BACKEND_CUDA_FABRIC] = "cuda-fabric",
  [GPUSHM__BACKEND__BACKEND_EXTERNAL] = "external",
};

const char *wire_backend_name(int backend)
{
  return backend >= 0 && (size_t)backend < sizeof backend_names / sizeof backend_names[0]
           ? backend_names[backend] : NULL;
}

int wire_backend_value(const char *name)
{
  for (size_t i = 0; name && i < sizeof backend_names / sizeof backend_names[0]; i++)
    if (backend_names[i] && strcmp(backend_names[i], name) == 0)
      return (int)i;
  return -1;
}

const char *wire_request_name(unsigned body_case)
{
  const ProtobufCFieldDescriptor *f =
    protobuf_c_message_descriptor_get_field(&gpushm__request__descriptor, body_case);
  return f && (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ? f->name : "unknown";
}

void wire_uuid_hex(const uint8_t uuid[16], char out[WIRE_UUID_HEX_LEN])
{
  static const char hex[] = "0123456789abcdef";
  size_t n = 0;

  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      out[n++] = '-';
    out[n++] = hex[uuid[i] >> 4];
    out[n++] = hex[uuid[i] & 15];
  }
  out[n] = '\0';
}

const char *wire_uuid_text(const uint8_t uuid[16], bool mig, char out[WIRE_UUID_TEXT_LEN])
{
  memcpy(out, mig ? "MIG-" : "GPU-", 4);
  wire_uuid_hex(uuid, out + 4);
  return out;
}

bool wire_is_mig_name(const char *device_name)
{
  return device_name && strstr(device_name, " MIG ") != NULL;
}
