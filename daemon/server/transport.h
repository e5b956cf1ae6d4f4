/* SPDX-License-Identifier: MIT */
/* One peer's socket: non-blocking SEQPACKET frame I/O with fd passing, a reply queue
 * with caps, back-pressure.  Knows frames, not what is in them: whoever owns it gets
 * each received frame through on_frame and every end of the connection through
 * on_close, and decides what to do (the transport never frees itself on its own). */
#ifndef GPUSHMD_TRANSPORT_H
#define GPUSHMD_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "wire.h"

/* Reads after a frame whose sender waits for its reply (transport.c, read_on()): the
 * score's bound, and one frame in how many such a read is tried while it says no. */
#define TRANSPORT_READ_ON_SCORE 4
#define TRANSPORT_READ_ON_SAMPLE 16

/* A pointer to these is kept, so that a settings reload reaches open connections. */
struct transport_limits {
  uint32_t max_queued_frames;
  uint32_t max_queued_bytes;
};

enum transport_close_reason {
  TRANSPORT_CLOSE_EOF,         /* the peer hung up */
  TRANSPORT_CLOSE_IO,          /* a receive, send or poll error */
  TRANSPORT_CLOSE_PROTOCOL,    /* a frame that failed the wire checks (why says which) */
  TRANSPORT_CLOSE_SLOW_READER, /* the reply queue hit a cap: the peer stopped reading */
};

struct transport_ops {
  /* One received frame of the expected type.  Its body and fds are valid during the
   * call only (the fds are closed afterwards: dup what must be kept).  Returns true
   * when the peer may well have sent more already (it waits for no reply to this
   * frame), false when it most likely waits: the transport then reads no further
   * this wakeup, rather than spend a receive on finding the socket empty, and the
   * poll, which is level-triggered, brings it back for a frame that is there. */
  bool (*on_frame)(void *ctx, const struct wire_frame *frame);
  /* The connection cannot go on; the transport has stopped polling and waits for
   * transport_free.  why is a static or short-lived string. */
  void (*on_close)(void *ctx, enum transport_close_reason reason, const char *why);
};

struct transport;

/* Takes ownership of fd (a connected, non-blocking socket) and starts reading frames
 * of type frame_type.  NULL on failure, with fd closed. */
struct transport *transport_new(uv_loop_t *loop, int fd, uint8_t frame_type,
                                const struct transport_limits *limits,
                                const struct transport_ops *ops, void *ctx);
/* Sends one encoded frame with n_fds fds, or queues it while the peer's buffer is
 * full; the fds are consumed either way.  A queue past its caps ends the connection
 * (on_close, TRANSPORT_CLOSE_SLOW_READER).  Returns 0, or PROTO_E_DISCONNECTED once
 * the connection is ending. */
int transport_send(struct transport *t, const uint8_t *data, size_t len, const int *fds,
                   unsigned n_fds);
/* A last word before the owner closes: sent only if nothing is queued ahead of it and
 * the socket takes it now, never queued. */
void transport_send_last(struct transport *t, const uint8_t *data, size_t len);
/* Stops all I/O at once; the fd, the queue and the memory go when libuv has closed
 * the handle.  No callback is made after this. */
void transport_free(struct transport *t);

/* Paused, no frame is read (they wait in the socket, in order); replies still go out. */
void transport_pause(struct transport *t, bool paused);
uint32_t transport_queued_frames(const struct transport *t);

#endif
