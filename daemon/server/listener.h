/* SPDX-License-Identifier: MIT */
/* Where clients come in: the socket path's trust checks, binding it (or serving on a
 * socket systemd passed), accepting without a busy loop when fds run out, and the
 * admission rules (max-clients, max-clients-per-uid, the admins' reserve).  Knows
 * nothing of sessions: a new connection is handed to on_accept, and whoever keeps it
 * asks listener_admit() and reports its end with listener_left(). */
#ifndef GPUSHMD_LISTENER_H
#define GPUSHMD_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

struct uid_conns;

struct listener {
  uv_loop_t *loop;
  char path[108]; /* sizeof sun_path; empty: an inherited socket */
  int fd;
  bool inherited; /* from systemd: the path is not ours to remove */
  bool listening;
  bool accept_starved; /* in an EMFILE/ENFILE episode */
  uv_poll_t poll;
  uv_timer_t backoff;
  void (*on_accept)(void *ctx, int fd);
  void *ctx;
  /* Admission */
  uint32_t max_clients, max_clients_per_uid;
  uint32_t n_clients;
  struct uid_conns *uid_conns; /* connections per uid */
};

/* Binds path (mode: the socket file's, from the start): checks the whole path first
 * and creates nothing on a path it refuses, creates the missing directories, refuses a
 * path a live daemon serves, replaces a stale socket.  0 or a PROTO_E_* with err. */
int listener_bind(struct listener *l, const char *path, uint32_t mode, const gid_t *group,
                  char *err, size_t errlen);
/* Serves on a listening socket someone else made (systemd socket activation). */
void listener_adopt(struct listener *l, int fd);
/* Starts accepting on loop: each new connection's fd goes to on_accept. */
void listener_start(struct listener *l, uv_loop_t *loop, void (*on_accept)(void *ctx, int fd),
                    void *ctx);
/* Stops accepting, closes the socket and removes its path (unless inherited). */
void listener_stop(struct listener *l);
/* The connection limits (a reload may change them; those connected keep their slots). */
void listener_set_limits(struct listener *l, uint32_t max_clients, uint32_t max_clients_per_uid);
/* A new client of uid: counted, then judged: 0, or PROTO_E_LIMIT/NOMEM with why (it is
 * counted all the same, until listener_left()).  Admins stop only past max-clients
 * plus their reserve; nobody else past max-clients or max-clients-per-uid. */
int listener_admit(struct listener *l, uid_t uid, bool admin, char *why, size_t why_len);
void listener_left(struct listener *l, uid_t uid);

#endif
