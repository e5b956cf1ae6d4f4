/* One client connection: non-blocking frame I/O, reply queue, identity. */
#ifndef GPUSHMD_CONN_H
#define GPUSHMD_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "list.h"
#include "registry.h"

struct server;
struct out_frame;

struct conn {
  struct reg_client client; /* registry identity: credentials + holdings */
  struct server *srv;
  int fd;
  uv_poll_t poll;
  struct list link; /* server.conns */
  bool hello_done;
  bool closing;
  char name[GPUSHM_LIMIT_CLIENT_NAME_LEN + 1];
  uint64_t connected_unix_ms;
  uint64_t accepted_loop_ms; /* uv_now() at accept, for the Hello deadline */
  struct out_frame *out_head, **out_tail;
  uint32_t out_frames;
  size_t out_bytes;
};

/* Takes ownership of fd (an accepted, non-blocking socket); NULL if it could not be
 * set up (fd closed). */
struct conn *conn_start(struct server *srv, int fd);
/* Sends (or queues) a reply with n_fds fds, which are consumed either way. */
void conn_send_reply(struct conn *c, const void *reply_msg, const int *fds, unsigned n_fds);
/* Sends a connection-level error (request id 0) and closes the client. */
void conn_fail(struct conn *c, int status, const char *why);
void conn_close(struct conn *c);

#endif
