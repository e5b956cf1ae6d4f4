/* SPDX-License-Identifier: MIT */
/* Framing shared by gpushmd and libgpushm: one frame per SOCK_SEQPACKET datagram,
 * a fixed header, a packed protobuf body, and fds by SCM_RIGHTS on the same datagram. */
#ifndef GPUSHM_WIRE_H
#define GPUSHM_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <protobuf-c/protobuf-c.h>
#include "gpushm_limits.h"
#include "protocol.h"

#define WIRE_MAGIC 0x4d485347u /* "GSHM" in little-endian memory order */
#define WIRE_TYPE_REQUEST 1u
#define WIRE_TYPE_REPLY 2u

/* Host byte order: the socket never leaves the host. */
struct wire_header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t body_len;
  uint32_t n_fds;
};
#define WIRE_HEADER_SIZE ((size_t)sizeof(struct wire_header))
#define WIRE_FRAME_MAX (WIRE_HEADER_SIZE + GPUSHM_LIMIT_FRAME_BODY)
/* Receive buffers are one byte larger so that a datagram of exactly the limit is
 * told apart from a longer one even where MSG_TRUNC is not reported. */
#define WIRE_RECV_BUF (WIRE_FRAME_MAX + 1)

struct wire_frame {
  struct wire_header header;
  const uint8_t *body; /* points into the caller's receive buffer */
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME];
  unsigned n_fds;
};

/* Checks a received datagram.  msg_flags are recvmsg()'s, n_fds_received the number
 * of fds that arrived with it.  Returns 0, or -EPROTO with *why set to a static
 * explanation fit to send back to the peer. */
int wire_check_frame(const uint8_t *buf, size_t len, int msg_flags, unsigned n_fds_received,
                     uint16_t expected_type, struct wire_header *out, const char **why);

/* Packs header + message into buf (WIRE_FRAME_MAX bytes).  Returns the frame length
 * or -EMSGSIZE when the body would pass the frame limit. */
long wire_encode(uint8_t *buf, uint16_t type, const ProtobufCMessage *msg, unsigned n_fds);

/* Sends one encoded frame with fds.  Returns 0 or -errno (-EAGAIN on a full
 * non-blocking socket). */
int wire_send_frame(int sock, const uint8_t *frame, size_t len, const int *fds, unsigned n_fds,
                    int send_flags);

/* Receives one frame into buf (WIRE_RECV_BUF bytes).  Returns 0; -EAGAIN; -ECONNRESET
 * at end of stream; -EPROTO with *why set (received fds already closed); or -errno.
 * On success the caller owns frame->fds. */
int wire_recv_frame(int sock, uint8_t *buf, uint16_t expected_type, int recv_flags,
                    struct wire_frame *frame, const char **why);

void wire_close_fds(struct wire_frame *frame);

/* Refuses (-EPROTO, *why set) an encoded message any of whose string fields, at any
 * depth, holds a NUL byte.  Bodies that are not protobuf at all pass: the decoder
 * rejects those. */
int wire_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *body, size_t len,
                       const char **why);

/* Free text shown to people (client names): at most max_len bytes of valid UTF-8 with no
 * control characters (C0, DEL, C1) and no bidirectional overrides, so that it cannot
 * drive a terminal or disguise itself. */
int wire_text_valid(const char *s, size_t max_len);
/* The length (1-4) of the well-formed UTF-8 character at s, its code point in *cp; 0 if
 * the bytes there are not one (a stray or cut-short sequence, an overlong form, a
 * surrogate, past U+10FFFF).  A NUL is a character of length 1. */
size_t wire_utf8_char(const char *s, uint32_t *cp);
/* What wire_text_valid() refuses in text: C0, DEL and C1 controls, bidi embeddings,
 * overrides and isolates. */
bool wire_char_disguising(uint32_t cp);

/* Buffer names: 1..GPUSHM_LIMIT_NAME_LEN bytes of [A-Za-z0-9._-], not starting with
 * '.' or '-' (no hidden-file or option look-alikes). */
int wire_name_valid(const char *name);

/* The one table of backend names, by the wire's Backend values: "host", "cuda-ipc",
 * "cuda-fd", "cuda-event" (BACKEND_CUDA_EVENT: an event, which the API calls a kind),
 * "cuda-fabric".  NULL / -1 for what it does not know. */
const char *wire_backend_name(int backend);
int wire_backend_value(const char *name);

/* A request's name ("create") by its Request.body case: the schema's field name, so
 * the daemon's counters, logs and errors name requests as the schema does. */
const char *wire_request_name(unsigned body_case);

/* The one way a UUID is written: 8-4-4-4-12 lowercase hex digits (with its NUL;
 * gpushm_uuid_text() in the API, gpushmctl's ctl_uuid_text()). */
#define WIRE_UUID_HEX_LEN 37
void wire_uuid_hex(const uint8_t uuid[16], char out[WIRE_UUID_HEX_LEN]);
/* A GPU's UUID as nvidia-smi, CUDA_VISIBLE_DEVICES and NVIDIA's DCGM exporter spell it
 * (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx; MIG- for a MIG instance), so that what
 * gpushmd logs and exports joins what those show.  Returns out. */
#define WIRE_UUID_TEXT_LEN 41 /* with its NUL */
const char *wire_uuid_text(const uint8_t uuid[16], bool mig, char out[WIRE_UUID_TEXT_LEN]);
/* Whether a device's name is a MIG instance's ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"). */
bool wire_is_mig_name(const char *device_name);

#endif
