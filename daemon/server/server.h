/* SPDX-License-Identifier: MIT */
/* The serving side of gpushmd: its sessions and what they share (counters, the
 * handlers' view of the daemon, the status page, the processes that keep mapping after
 * their connection ended), over a listener (listener.h), a registry and a persistence
 * store that the composition root (main.c) builds and lends it. */
#ifndef GPUSHMD_SERVER_H
#define GPUSHMD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

struct registry;
struct persist;
struct server;
struct session;

/* What the settings (options.h) say about serving. */
struct server_config {
  char socket_path[108]; /* sizeof sun_path */
  uint32_t socket_mode;
  bool has_socket_group;
  gid_t socket_gid;      /* the socket file's group, if has_socket_group */
  uint32_t max_clients;
  uint32_t max_clients_per_uid; /* admins are exempt */
  uint32_t hello_timeout_ms;
  uint32_t max_queued_frames;
  uint32_t max_queued_bytes;
  uint32_t busy_poll_us; /* 0: the loop sleeps as soon as it has nothing to do */
  bool has_admin_group;
  gid_t admin_gid; /* members may list and unlink every user's buffers */
};

/* A server on loop for reg (and persist, NULL: none), not listening yet; NULL with err
 * if its status page or instance id cannot be made. */
struct server *server_new(uv_loop_t *loop, const struct server_config *cfg, struct registry *reg,
                          struct persist *persist, char *err, size_t errlen);
/* Binds cfg's socket path (listener_bind), or serves on a socket systemd passed. */
int server_listen(struct server *srv, char *err, size_t errlen);
void server_adopt_socket(struct server *srv, int fd);
/* Starts accepting clients. */
void server_start(struct server *srv);
/* Applies reloadable settings to a running daemon (SIGHUP). */
void server_reload(struct server *srv, const struct server_config *cfg);
/* Closes every client (releasing its references) and the listening socket. */
void server_shutdown(struct server *srv);
/* After the loop has run dry. */
void server_free(struct server *srv);

uint64_t server_instance_id(const struct server *srv);
bool server_socket_inherited(const struct server *srv);
uint32_t server_client_count(const struct server *srv);
/* One line for logs and systemd's status: clients, objects, bytes. */
void server_status_line(const struct server *srv, char *out, size_t len);

/* A session on fd (an accepted socket) without the admission checks that accepting
 * makes: for tests that bring their own socketpair.  NULL if it could not be set up. */
struct session *server_connect(struct server *srv, int fd);
/* Number of fds the process has open, for stats and leak tests. */
uint32_t server_count_open_fds(void);

#endif
