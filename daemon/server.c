#include "config.h"
#include "server.h"
#include "conn.h"
#include "gpushm.h"
#include "gpushm.pb-c.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Bounded so a connect storm cannot hold the loop away from existing clients. */
#define ACCEPTS_PER_WAKEUP 64

static int make_parent_dirs(const char *path, char *err, size_t errlen)
{
  char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];

  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
      snprintf(err, errlen, "creating %s: %s", dir, strerror(errno));
      return -1;
    }
    *p = '/';
  }
  return 0;
}

/* A socket file left behind by a daemon that died is replaced; one that a live daemon
 * answers on is not. */
static int remove_stale_socket(const struct sockaddr_un *addr, char *err, size_t errlen)
{
  struct stat st;
  int probe, r;

  if (lstat(addr->sun_path, &st) < 0)
    return 0;
  if (!S_ISSOCK(st.st_mode)) {
    snprintf(err, errlen, "%s exists and is not a socket", addr->sun_path);
    return -1;
  }
  probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (probe < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return -1;
  }
  r = connect(probe, (const struct sockaddr *)addr, sizeof *addr);
  close(probe);
  if (r == 0) {
    snprintf(err, errlen, "another gpushmd is serving %s", addr->sun_path);
    return -1;
  }
  if (errno != ECONNREFUSED) {
    snprintf(err, errlen, "probing %s: %s", addr->sun_path, strerror(errno));
    return -1;
  }
  log_info("removing stale socket %s", addr->sun_path);
  if (unlink(addr->sun_path) < 0 && errno != ENOENT) {
    snprintf(err, errlen, "removing stale %s: %s", addr->sun_path, strerror(errno));
    return -1;
  }
  return 0;
}

int server_listen(struct server *srv, char *err, size_t errlen)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  const char *path = srv->cfg.socket_path;
  mode_t old_umask;
  int fd, r;

  if (strlen(path) >= sizeof addr.sun_path) {
    snprintf(err, errlen, "socket path longer than %zu bytes", sizeof addr.sun_path - 1);
    return -1;
  }
  memcpy(addr.sun_path, path, strlen(path) + 1);
  if (make_parent_dirs(path, err, errlen) < 0 || remove_stale_socket(&addr, err, errlen) < 0)
    return -1;
  fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return -1;
  }
  /* The socket file gets its mode at bind time: no window with a wider one. */
  old_umask = umask(~srv->cfg.socket_mode & 0777);
  r = bind(fd, (struct sockaddr *)&addr, sizeof addr);
  umask(old_umask);
  if (r < 0 || listen(fd, SOMAXCONN) < 0) {
    snprintf(err, errlen, "%s %s: %s", r < 0 ? "bind" : "listen", path, strerror(errno));
    close(fd);
    return -1;
  }
  srv->listen_fd = fd;
  return 0;
}

void server_adopt_socket(struct server *srv, int fd)
{
  srv->listen_fd = fd;
  srv->socket_inherited = true;
}

uint32_t server_count_open_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  uint32_t n = 0;
  struct dirent *e;

  if (!d)
    return 0;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n - 1; /* the directory's own fd */
}

static void reject_client(struct server *srv, int fd)
{
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  long len;

  reply.status = -GPUSHM_E_LIMIT;
  reply.message = "too many clients connected to gpushmd";
  len = wire_encode(srv->tx, WIRE_TYPE_REPLY, &reply.base, 0);
  if (len > 0)
    (void)wire_send_frame(fd, srv->tx, (size_t)len, NULL, 0, MSG_DONTWAIT);
  close(fd);
  srv->counters.clients_dropped++;
}

static void on_listen_readable(uv_poll_t *handle, int status, int events);

static void on_accept_backoff(uv_timer_t *timer)
{
  struct server *srv = timer->data;
  if (srv->listening)
    uv_poll_start(&srv->listen_poll, UV_READABLE, on_listen_readable);
}

static void on_listen_readable(uv_poll_t *handle, int status, int events)
{
  struct server *srv = handle->data;

  for (int i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
    int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* The pending connection stays queued and the fd stays readable: stop
         * watching it for a while instead of spinning. */
        /* once per episode: this repeats every back-off period until fds free up */
        log_msg(srv->accept_starved ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN,
                "accept: %s; pausing accepts for %u ms at a time", strerror(errno),
                GPUSHM_ACCEPT_BACKOFF_MS);
        srv->accept_starved = true;
        uv_poll_stop(&srv->listen_poll);
        uv_timer_start(&srv->accept_backoff, on_accept_backoff, GPUSHM_ACCEPT_BACKOFF_MS, 0);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        log_warn("accept: %s", strerror(errno));
      }
      return;
    }
    if (srv->accept_starved) {
      log_info("accepting clients again");
      srv->accept_starved = false;
    }
    if (srv->n_clients >= srv->cfg.max_clients) {
      log_warn("refusing a client: %u clients connected (limit)", srv->n_clients);
      reject_client(srv, fd);
      continue;
    }
    conn_start(srv, fd);
  }
}

static void on_status_unlink(void *ctx, const struct reg_buffer *buffer)
{
  struct server *srv = ctx;
  status_page_bump_unlink(&srv->status);
  log_debug("'%s' (id %llu) unlinked", buffer->name, (unsigned long long)buffer->id);
}

static void close_listener(struct server *srv)
{
  close(srv->listen_fd);
  srv->listen_fd = -1;
  if (!srv->socket_inherited && unlink(srv->cfg.socket_path) < 0 && errno != ENOENT)
    log_warn("removing %s: %s", srv->cfg.socket_path, strerror(errno));
}

int server_start(struct server *srv, uv_loop_t *loop, char *err, size_t errlen)
{
  srv->loop = loop;
  list_init(&srv->conns);
  if (getrandom(&srv->instance_id, sizeof srv->instance_id, 0) != sizeof srv->instance_id) {
    snprintf(err, errlen, "getrandom: %s", strerror(errno));
    close_listener(srv);
    return -1;
  }
  if (status_page_create(&srv->status, err, errlen) < 0) {
    close_listener(srv);
    return -1;
  }
  srv->reg.on_unlink = on_status_unlink;
  srv->reg.on_unlink_ctx = srv;
  srv->started_ms = uv_now(loop);
  uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
  srv->listen_poll.data = srv;
  uv_timer_init(loop, &srv->accept_backoff);
  srv->accept_backoff.data = srv;
  srv->listening = true;
  uv_poll_start(&srv->listen_poll, UV_READABLE, on_listen_readable);
  return 0;
}

void server_shutdown(struct server *srv)
{
  if (!srv->listening)
    return;
  srv->listening = false;
  uv_poll_stop(&srv->listen_poll);
  uv_close((uv_handle_t *)&srv->listen_poll, NULL);
  uv_close((uv_handle_t *)&srv->accept_backoff, NULL);
  close_listener(srv);
  while (!list_empty(&srv->conns))
    conn_close(list_entry(srv->conns.next, struct conn, link));
}
