/* The daemon's state: listening socket, accepting, connection limits, the Hello
 * deadline, the list of sessions, registry, counters. */
#ifndef GPUSHMD_SERVER_H
#define GPUSHMD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "server/detached.h"
#include "server/handlers.h"
#include "util/list.h"
#include "server/persist.h"
#include "registry/registry.h"
#include "server/session.h"
#include "server/status.h"
#include "server/transport.h"

struct uid_conns;

struct server_config {
  char socket_path[108]; /* sizeof sun_path */
  uint32_t socket_mode;
  uint32_t max_clients;
  uint32_t max_clients_per_uid; /* admins are exempt */
  uint32_t hello_timeout_ms;
  uint32_t max_queued_frames;
  uint32_t max_queued_bytes;
  bool has_admin_group;
  gid_t admin_gid; /* members may list and unlink every user's buffers */
};

struct server {
  uv_loop_t *loop;
  struct server_config cfg;
  struct registry reg;
  struct status_page_owner status;
  struct persist persist;
  int listen_fd;
  bool listening;
  bool socket_inherited; /* from systemd: the path is not ours to remove */
  bool accept_starved; /* in an EMFILE/ENFILE episode */
  uv_poll_t listen_poll;
  uv_timer_t accept_backoff;
  uv_timer_t hello_sweep; /* closes connections that never said Hello */
  struct uid_conns *uid_conns; /* connections per uid, for max_clients_per_uid */
  struct list sessions; /* session.link, in ascending client id */
  uint32_t n_clients;
  uint32_t next_client_id;
  uint64_t instance_id;
  uint64_t started_ms; /* uv_now() at start */
  struct handler_counters counters;
  struct detached_set detached; /* live processes whose connection ended while holding */
  /* What sessions and handlers see of the server (set up by server_start). */
  struct transport_limits transport_limits;
  struct session_env session_env;
  struct handler_server handler_server;
  /* Devices being warmed on libuv's thread pool (see backend_cuda_warm). */
  struct device_warmup {
    uv_work_t work;
    struct server *srv;
    int device;
    int result; /* the CUresult, from the worker */
    bool busy;
    uint64_t started_ms;
  } warmups[GPUSHM_LIMIT_DEVICES];
};

/* Serves on a listening socket someone else made (systemd socket activation). */
void server_adopt_socket(struct server *srv, int fd);
/* Applies reloadable settings to a running daemon (SIGHUP). */
void server_reconfigure(struct server *srv, const struct server_config *cfg);
/* Binds cfg.socket_path: creates its directory, refuses a path a live daemon serves,
 * replaces a stale socket.  Returns 0 or a negative GPUSHM_E_* with err set. */
int server_listen(struct server *srv, char *err, size_t errlen);
/* Starts serving on the loop; on failure the listening socket is closed and removed. */
int server_start(struct server *srv, uv_loop_t *loop, char *err, size_t errlen);
/* A session on fd (an accepted socket) without the admission checks that accepting
 * makes: for tests that bring their own socketpair.  NULL if it could not be set up. */
struct session *server_connect(struct server *srv, int fd);
/* Closes every client (releasing its references) and the listening socket. */
void server_shutdown(struct server *srv);
/* Adds delta to uid's connection count and returns the new count. */
uint32_t server_uid_conns(struct server *srv, uid_t uid, int delta);
/* Number of fds the process has open, for stats and leak tests. */
uint32_t server_count_open_fds(void);

#endif
