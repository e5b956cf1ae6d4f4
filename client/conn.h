/* SPDX-License-Identifier: MIT */
/* A connection to gpushmd (conn.c): the socket, Hello's outcome, one request at a
 * time; and how the wire's names map to the API's. */
#ifndef GPUSHM_CLIENT_CONN_H
#define GPUSHM_CLIENT_CONN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpushm.h"
#include "gpushm-admin.h"
#include "gpushm.pb-c.h"
#include "shm_layout.h"
#include "hash_table.h"
#include "wire.h"

struct gpushm {
  pthread_mutex_t lock; /* one request in flight per connection */
  int fd;
  unsigned refs;        /* the user's handle + one per open buffer; atomic */
  bool broken;          /* the daemon hung up or misbehaved: every call fails */
  bool user_gone;       /* gpushm_disconnect() was called; atomic */
  int timeout_ms;       /* per request (send and reply); 0: wait for ever */
  unsigned poll_us;     /* spin this long for a reply before sleeping ($GPUSHM_POLL_US) */
  uint64_t instance_id;
  uint32_t client_id;
  unsigned protocol_version; /* negotiated at Hello */
  uint64_t features;         /* GPUSHM_FEATURE_* the daemon offers */
  uint32_t backends;         /* 1 << gpushm_backend_t, what the daemon offers */
  gpushm_backend_t default_backend; /* 0: the daemon did not say (before 0.2) */
  uint64_t daemon_pid_namespace;    /* its PID namespace's inode; 0: unknown */
  /* SO_PEERCRED of the daemon: pid 0 when it is in a PID namespace this process
   * cannot see (another container's, or an ancestor's). */
  uint32_t daemon_pid, daemon_uid;
  Gpushm__Reply *hello; /* kept for the devices it lists */
  char daemon_version[32];
  char driver_version[32];   /* the NVIDIA driver's, from Hello ("" where unknown) */
  uint64_t next_request_id;
  const struct status_page *status;
  /* Its handles (buffer.c, under its cache lock): by object id and by name, growable,
   * so that an open stays as cheap with 100,000 of them as with 10; and the list of
   * connections that have any, which a fork walks. */
  struct hash_table handles_by_id, handles_by_name;
  struct gpushm *handles_next, *handles_prev;
  bool handles_listed;
  /* What it keeps of weight sets between their generations (weights.c, under its lock),
   * and what lets go of it at gpushm_disconnect(): set by weights.c, which the buffer
   * layer that disconnects lies beneath. */
  struct weights_kept *weights_kept;
  void (*drop_weights_kept)(gpushm_t *conn);
  /* Requests sent and not yet answered (pipelined opens and creates, buffer.c), oldest
   * first: the daemon answers in the order requests came, so whichever call reads next
   * takes theirs first. */
  struct client_pending_reply *pending_head, **pending_tail;
  unsigned pending_n;
  uint8_t rx[WIRE_RECV_BUF];
  uint8_t tx[WIRE_FRAME_MAX];
};

/* The wire's Kind and the API's are one numbering: a kind this library does not know
 * (a newer daemon's) reaches listings as its number. */
_Static_assert(GPUSHM__KIND__KIND_BUFFER == (int)GPUSHM_KIND_BUFFER &&
               GPUSHM__KIND__KIND_EVENT == (int)GPUSHM_KIND_EVENT &&
               GPUSHM__KIND__KIND_IMAGE == (int)GPUSHM_KIND_IMAGE, "kinds as the wire has them");

/* What an object is: its kind, or from a daemon before 0.8 (no kind) what spelt it then,
 * an event's backend and an image's description. */
static inline gpushm_kind_t client_kind_of_info(const Gpushm__BufferInfo *info)
{
  if (info->kind != GPUSHM__KIND__KIND_UNSPECIFIED)
    return (gpushm_kind_t)info->kind;
  return info->backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT ? GPUSHM_KIND_EVENT
         : info->image                                        ? GPUSHM_KIND_IMAGE
                                                              : GPUSHM_KIND_BUFFER;
}

/* Stats rows by backend (frozen before Kind) spell an event as BACKEND_CUDA_EVENT. */
static inline gpushm_kind_t client_kind_of_wire(Gpushm__Backend backend)
{
  return backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT ? GPUSHM_KIND_EVENT : GPUSHM_KIND_BUFFER;
}

/* Device memory a POSIX fd brings (cuda-fabric is cuda-fd with a fabric handle besides):
 * imported, mapped and fenced the same way. */
static inline bool client_backend_is_fd_device(gpushm_backend_t backend)
{
  return backend == GPUSHM_BACKEND_CUDA_FD || backend == GPUSHM_BACKEND_CUDA_FABRIC;
}

/* A buffer's memory backend; 0 for an event, which has none. */
static inline gpushm_backend_t client_backend_of_wire(Gpushm__Backend backend)
{
  return backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT ? GPUSHM_BACKEND_DEFAULT
                                                        : (gpushm_backend_t)backend;
}

/* fds that came with a reply; the receiver owns them */
struct client_fds {
  int fd[GPUSHM_LIMIT_FDS_PER_FRAME];
  unsigned n;
};
void client_close_fds(struct client_fds *fds);
/* Whether fd cannot shrink any more: a shared object that still could would turn a
 * later access to a mapping of it into a SIGBUS, at a peer's whim. */
bool client_fd_sealed(int fd);

/* One request/reply exchange.  On success *reply is the daemon's reply (free with
 * gpushm__reply__free_unpacked) and *fds, when given, the fds it carried; without
 * fds, any that came are closed. */
int client_call(gpushm_t *conn, Gpushm__Request *req, Gpushm__Reply **reply,
                struct client_fds *fds);
/* The same with conn->lock held by the caller (segments: a reply that says "you map
 * this segment already" must be acted on before anyone can unmap it), the request sent
 * with send_fd (-1: none), which stays the caller's. */
int client_call_locked_fd(gpushm_t *conn, Gpushm__Request *req, int send_fd,
                          Gpushm__Reply **out, struct client_fds *fds);
/* A request whose reply is taken later (gpushm_buffer_open_start() and
 * gpushm_buffer_create_start()): by client_pending_settle_locked(), or by the next call
 * on the connection, which reads past it. */
struct client_pending_reply {
  struct client_pending_reply *next;
  uint64_t request_id;
  bool answered; /* arrived() has run */
  /* Called once, with conn->lock held (by whichever thread reads the reply): r < 0 where
   * no reply came or the daemon refused (the reason is the calling thread's last error);
   * otherwise reply and fds, which it takes. */
  void (*arrived)(struct client_pending_reply *p, gpushm_t *conn, int r, Gpushm__Reply *reply,
                  struct client_fds *fds);
};
/* Sends req with conn->lock held, its reply left to p.  GPUSHM_E_LIMIT where
 * GPUSHM_LIMIT_PENDING_PER_CONN requests are out already. */
int client_send_pending_locked(gpushm_t *conn, Gpushm__Request *req,
                               struct client_pending_reply *p);
/* Reads replies, with conn->lock held, until p (NULL: every pending request) is
 * answered. */
void client_pending_settle_locked(gpushm_t *conn, struct client_pending_reply *p);
/* Pending requests out on all of this process's connections (atomic): a reply on any
 * of them may name a segment the process maps through another. */
extern unsigned client_pending_in_process;
/* A request the daemon does not answer (GPUSHM_FEATURE_ONEWAY): sent, not waited for. */
int client_send_oneway(gpushm_t *conn, Gpushm__Request *req);
int client_send_oneway_locked(gpushm_t *conn, Gpushm__Request *req);
/* The same, the reply unpacked with alloc (NULL: malloc; free it with the same). */
int client_call_alloc(gpushm_t *conn, Gpushm__Request *req, Gpushm__Reply **reply,
                      struct client_fds *fds, ProtobufCAllocator *alloc);
/* Walks the pages of a list request (req->list->after_id is where it starts, and moves
 * on): each reply is unpacked by list_codec_unpack_reply() into arena (an allocator
 * whose free does nothing; see list_codec.h) and handed to take(), which returns < 0
 * to stop with that error, 0 after the last page, 1 for more, setting *after_id to the
 * page's last id.  The next page is asked for before the last is decoded. */
int client_call_list_walk(gpushm_t *conn, Gpushm__Request *req, ProtobufCAllocator *arena,
                          int (*take)(void *ctx, Gpushm__Reply *page, uint64_t *after_id),
                          void *ctx);
void client_conn_ref(gpushm_t *conn);
void client_conn_unref(gpushm_t *conn);
uint64_t client_unlink_generation(const gpushm_t *conn);
/* The inode of this process's PID namespace (0: /proc is not mounted). */
uint64_t client_pid_namespace(void);
/* Whether this process and the daemon are in different PID namespaces of which neither
 * is the host's, where legacy CUDA IPC handles cannot be opened; why says so, for an
 * error message.  False where it cannot be told. */
bool client_ipc_namespace_problem(const gpushm_t *conn, char *why, size_t len);
/* GPUSHM_E_UNSUPPORTED, naming what, unless the daemon offers feature. */
int client_need_feature(const gpushm_t *conn, uint64_t feature, const char *what);

/* CUDA_ERROR_INVALID_CONTEXT from a legacy IPC open, explained where PID namespaces are
 * the cause; returns the error to report. */
int client_explain_ipc_failure(gpushm_t *conn);

#endif
