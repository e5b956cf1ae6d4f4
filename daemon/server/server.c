#include "config.h"
#include "server/server.h"
#include "server/fence_repair.h"
#include "gpushm.h"
#include "util/log.h"
#include "backends/backend_cuda.h"

#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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
      return GPUSHM_E_IO;
    }
    *p = '/';
  }
  return 0;
}

static bool trusted_owner(uid_t uid)
{
  return uid == 0 || uid == geteuid();
}

/* Whoever can replace the socket's directory, or any directory above it, can put their
 * own server where clients look for gpushmd (sshd's StrictModes reasoning).  Every
 * directory on the way must belong to root or to us and be writable by nobody else --
 * except sticky ones above the last (/tmp), where others cannot replace our entries --
 * and every symlink on the way must belong to root or to us too. */
static int check_socket_dir(const char *path, char *err, size_t errlen)
{
  char dir[PATH_MAX], resolved[PATH_MAX], *slash;
  struct stat st;

  snprintf(dir, sizeof dir, "%s", path);
  if (!(slash = strrchr(dir, '/')))
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    dir[1] = '\0';
  else
    *slash = '\0';
  /* The symlinks as written... */
  for (char *p = dir;; p++) {
    char saved = *p;
    if (saved != '/' && saved != '\0')
      continue;
    *p = '\0';
    if (p > dir && lstat(dir, &st) == 0 && S_ISLNK(st.st_mode) && !trusted_owner(st.st_uid)) {
      snprintf(err, errlen, "refusing socket directory %s: symlink %s belongs to uid %u",
               path, dir, (unsigned)st.st_uid);
      return GPUSHM_E_PERM;
    }
    *p = saved;
    if (!saved)
      break;
  }
  /* ...then every directory they lead to. */
  if (!realpath(dir, resolved)) {
    snprintf(err, errlen, "resolving %s: %s", dir, strerror(errno));
    return GPUSHM_E_IO;
  }
  for (char *p = resolved;; p++) {
    char saved = *p;
    bool last = saved == '\0';
    if (saved != '/' && !last)
      continue;
    *p = '\0';
    if (stat(p == resolved ? "/" : resolved, &st) < 0) {
      snprintf(err, errlen, "checking %s: %s", resolved, strerror(errno));
      return GPUSHM_E_IO;
    }
    if (!trusted_owner(st.st_uid)) {
      snprintf(err, errlen, "refusing socket directory %s: %s belongs to uid %u (it must belong "
               "to root or to gpushmd's user)", path, p == resolved ? "/" : resolved,
               (unsigned)st.st_uid);
      return GPUSHM_E_PERM;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && (last || !(st.st_mode & S_ISVTX))) {
      snprintf(err, errlen, "refusing socket directory %s: %s is writable by %s (mode %04o)",
               path, p == resolved ? "/" : resolved,
               st.st_mode & S_IWOTH ? "everyone" : "its group", (unsigned)(st.st_mode & 07777));
      return GPUSHM_E_PERM;
    }
    *p = saved;
    if (last)
      break;
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
    return GPUSHM_E_IO;
  }
  probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (probe < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return GPUSHM_E_IO;
  }
  r = connect(probe, (const struct sockaddr *)addr, sizeof *addr);
  close(probe);
  if (r == 0) {
    snprintf(err, errlen, "another gpushmd is serving %s", addr->sun_path);
    return GPUSHM_E_IO;
  }
  if (errno != ECONNREFUSED) {
    snprintf(err, errlen, "probing %s: %s", addr->sun_path, strerror(errno));
    return GPUSHM_E_IO;
  }
  log_info("removing stale socket %s", addr->sun_path);
  if (unlink(addr->sun_path) < 0 && errno != ENOENT) {
    snprintf(err, errlen, "removing stale %s: %s", addr->sun_path, strerror(errno));
    return GPUSHM_E_IO;
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
    return GPUSHM_E_IO;
  }
  memcpy(addr.sun_path, path, strlen(path) + 1);
  if (make_parent_dirs(path, err, errlen) < 0 || check_socket_dir(path, err, errlen) < 0 ||
      remove_stale_socket(&addr, err, errlen) < 0)
    return GPUSHM_E_IO;
  fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return GPUSHM_E_IO;
  }
  /* The socket file gets its mode at bind time: no window with a wider one. */
  old_umask = umask(~srv->cfg.socket_mode & 0777);
  r = bind(fd, (struct sockaddr *)&addr, sizeof addr);
  umask(old_umask);
  if (r < 0 || listen(fd, SOMAXCONN) < 0) {
    snprintf(err, errlen, "%s %s: %s", r < 0 ? "bind" : "listen", path, strerror(errno));
    close(fd);
    return GPUSHM_E_IO;
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

struct uid_conns {
  uid_t uid;
  uint32_t n;
  struct uid_conns *next;
};

uint32_t server_uid_conns(struct server *srv, uid_t uid, int delta)
{
  struct uid_conns **p, *u;
  uint32_t n;

  for (p = &srv->uid_conns; (u = *p) && u->uid != uid; p = &u->next)
    ;
  if (!u) {
    if (delta <= 0 || !(u = calloc(1, sizeof *u)))
      return delta > 0 ? UINT32_MAX : 0; /* no memory: the caller refuses the client */
    u->uid = uid;
    *p = u;
  }
  u->n += (uint32_t)delta;
  n = u->n;
  if (n == 0) {
    *p = u->next;
    free(u);
  }
  return n;
}

/* Limits are checked with the client's identity in hand: non-admins stop at
 * max-clients and at max-clients-per-uid, so no user can take every slot; admins have
 * a reserve beyond max-clients to inspect and repair a full daemon. */
static void admit(struct server *srv, struct session *c)
{
  char why[128];
  uint32_t mine = server_uid_conns(srv, c->client.uid, 0);

  if (c->client.admin) {
    if (srv->n_clients <= srv->cfg.max_clients + GPUSHM_LIMIT_ADMIN_RESERVED_CLIENTS)
      return;
    snprintf(why, sizeof why, "too many clients connected to gpushmd (%u, admin reserve used up)",
             srv->n_clients - 1);
  } else if (srv->n_clients > srv->cfg.max_clients) {
    snprintf(why, sizeof why, "too many clients connected to gpushmd (limit %u)",
             srv->cfg.max_clients);
  } else if (mine > srv->cfg.max_clients_per_uid) {
    snprintf(why, sizeof why, "uid %u already has %u connections to gpushmd (limit %u)",
             (unsigned)c->client.uid, mine - 1, srv->cfg.max_clients_per_uid);
  } else {
    return;
  }
  srv->counters.clients_dropped++;
  session_close(c, GPUSHM_E_LIMIT, why);
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
  struct session *c;

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
    if ((c = server_connect(srv, fd)))
      admit(srv, c);
  }
}

static void on_hello_sweep(uv_timer_t *timer)
{
  struct server *srv = timer->data;
  uint64_t now = uv_now(srv->loop);
  char why[96];

  snprintf(why, sizeof why, "no hello within %u ms", srv->cfg.hello_timeout_ms);
  for (struct list *l = srv->sessions.next, *next; l != &srv->sessions; l = next) {
    struct session *s = list_entry(l, struct session, link);
    next = l->next;
    if (!s->hello_done && now - s->accepted_loop_ms >= srv->cfg.hello_timeout_ms)
      session_close(s, GPUSHM_E_TIMEOUT, why);
  }
}

static void warm_work(uv_work_t *req)
{
  struct device_warmup *w = req->data;
  w->result = backend_cuda_warm(w->device);
}

/* Back on the loop: every request parked on the device goes on (or gets the error). */
static void warm_done(uv_work_t *req, int status)
{
  struct device_warmup *w = req->data;
  struct server *srv = w->srv;
  char err[256] = "";
  int r;

  w->busy = false;
  if (status < 0) {
    snprintf(err, sizeof err, "warming device %d: %s", w->device, uv_strerror(status));
    r = GPUSHM_E_IO;
  } else {
    r = backend_cuda_warm_result(w->device, w->result, err, sizeof err);
  }
  if (r == 0)
    log_info("device %d ready (context made in %llu ms, off the event loop)", w->device,
             (unsigned long long)(uv_now(srv->loop) - w->started_ms));
  else
    log_warn("device %d: %s", w->device, err);
  for (struct list *l = srv->sessions.next, *next; l != &srv->sessions; l = next) {
    struct session *s = list_entry(l, struct session, link);
    next = l->next;
    if (s->waiting_device == w->device)
      session_resume(s, r, err);
  }
}

static void warm_device(void *ctx, int device)
{
  struct server *srv = ctx;
  struct device_warmup *w = &srv->warmups[device];

  if (w->busy)
    return; /* its end resumes every session parked on it */
  w->busy = true;
  w->srv = srv;
  w->device = device;
  w->work.data = w;
  w->started_ms = uv_now(srv->loop);
  if (uv_queue_work(srv->loop, &w->work, warm_work, warm_done) < 0) {
    /* Cannot happen with these arguments; if it did, block rather than lose requests. */
    warm_work(&w->work);
    warm_done(&w->work, 0);
  }
}

/* A process that held cuda-fd sync buffers read-write has exited (detached.h). */
static void on_process_exit(void *ctx, uint32_t client_id, pid_t pid, const uint64_t *ids,
                            size_t n)
{
  struct server *srv = ctx;
  srv->counters.fences_raised += fence_repair(&srv->reg, srv->instance_id, client_id, pid, ids, n);
}

static void on_session_gone(void *ctx, struct session *s)
{
  struct server *srv = ctx;

  list_del(&s->link);
  srv->n_clients--;
  server_uid_conns(srv, s->client.uid, -1);
  /* Not while stopping: every connection ends then, and nobody is left to ask. */
  if (srv->listening)
    detached_track(&srv->detached, &s->client);
}

struct session *server_connect(struct server *srv, int fd)
{
  struct session *s = session_start(&srv->session_env, fd, ++srv->next_client_id,
                                    srv->cfg.has_admin_group ? &srv->cfg.admin_gid : NULL);

  if (!s)
    return NULL;
  list_add_tail(&srv->sessions, &s->link);
  srv->n_clients++;
  if (server_uid_conns(srv, s->client.uid, +1) == UINT32_MAX) {
    /* Uncounted, it would slip past the per-uid cap: refuse it instead. */
    session_close(s, GPUSHM_E_NOMEM, "daemon out of memory");
    return NULL;
  }
  return s;
}

/* The handlers' view of the server. */
static uint64_t handler_uptime_ms(void *ctx)
{
  struct server *srv = ctx;
  return uv_now(srv->loop) - srv->started_ms;
}

static uint32_t handler_n_clients(void *ctx)
{
  return ((struct server *)ctx)->n_clients;
}

static bool handler_each_client(void *ctx, bool (*fn)(void *arg, const struct handler_peer *peer),
                                void *arg)
{
  struct server *srv = ctx;

  for (const struct list *l = srv->sessions.next; l != &srv->sessions; l = l->next) {
    const struct session *s = list_entry(l, struct session, link);
    const struct handler_peer peer = {
      .client = &s->client,
      .name = s->name,
      .connected_unix_ms = s->connected_unix_ms,
    };
    if (!fn(arg, &peer))
      return true;
  }
  return false;
}

static void handler_disconnect(void *ctx, uint32_t client_id, int status, const char *why)
{
  struct server *srv = ctx;

  for (struct list *l = srv->sessions.next; l != &srv->sessions; l = l->next) {
    struct session *s = list_entry(l, struct session, link);
    if (s->client.id == client_id) {
      session_close(s, status, why);
      return;
    }
  }
}

static void on_unlink(void *ctx, struct reg_object *buffer)
{
  struct server *srv = ctx;
  status_page_bump_unlink(&srv->status);
  persist_unlinked(&srv->persist, buffer);
  log_event(LOG_LEVEL_DEBUG, LOG_FIELDS(.buffer = buffer->name, .buffer_id = buffer->id),
            "'%s' (id %llu) unlinked", buffer->name, (unsigned long long)buffer->id);
}

static void on_created(void *ctx, struct reg_object *buffer)
{
  struct server *srv = ctx;
  persist_created(&srv->persist, buffer);
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
  list_init(&srv->sessions);
  if (getrandom(&srv->instance_id, sizeof srv->instance_id, 0) != sizeof srv->instance_id) {
    snprintf(err, errlen, "getrandom: %s", strerror(errno));
    close_listener(srv);
    return GPUSHM_E_IO;
  }
  if (status_page_create(&srv->status, err, errlen) < 0) {
    close_listener(srv);
    return GPUSHM_E_IO;
  }
  srv->reg.on_unlink = on_unlink;
  srv->reg.on_created = on_created;
  srv->reg.on_unlink_ctx = srv;
  srv->started_ms = uv_now(loop);
  detached_init(&srv->detached, loop, on_process_exit, srv);
  srv->detached.segs = &srv->reg.segs;
  srv->transport_limits = (struct transport_limits){
    .max_queued_frames = srv->cfg.max_queued_frames,
    .max_queued_bytes = srv->cfg.max_queued_bytes,
  };
  srv->handler_server = (struct handler_server){
    .ctx = srv,
    .instance_id = srv->instance_id,
    .features = GPUSHM_FEATURE_DISCONNECT | GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_ONEWAY |
                GPUSHM_FEATURE_METADATA |
                (srv->persist.enabled ? GPUSHM_FEATURE_FDSTORE : 0),
    .status = &srv->status,
    .counters = &srv->counters,
    .uptime_ms = handler_uptime_ms,
    .n_clients = handler_n_clients,
    .open_fds = server_count_open_fds,
    .each_client = handler_each_client,
    .disconnect = handler_disconnect,
    .detached = &srv->detached,
  };
  srv->session_env = (struct session_env){
    .loop = loop,
    .reg = &srv->reg,
    .limits = &srv->transport_limits,
    .handler_server = &srv->handler_server,
    .counters = &srv->counters,
    .gone = on_session_gone,
    .warm_device = warm_device,
    .ctx = srv,
  };
  uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
  srv->listen_poll.data = srv;
  uv_timer_init(loop, &srv->accept_backoff);
  srv->accept_backoff.data = srv;
  /* A few sweeps per deadline bound how late a silent connection is closed. */
  uv_timer_init(loop, &srv->hello_sweep);
  srv->hello_sweep.data = srv;
  uv_timer_start(&srv->hello_sweep, on_hello_sweep, srv->cfg.hello_timeout_ms / 4 + 1,
                 srv->cfg.hello_timeout_ms / 4 + 1);
  srv->listening = true;
  uv_poll_start(&srv->listen_poll, UV_READABLE, on_listen_readable);
  return 0;
}

void server_reconfigure(struct server *srv, const struct server_config *cfg)
{
  struct server_config next = *cfg;
  uint32_t sweep_ms = next.hello_timeout_ms / 4 + 1;

  /* The socket is bound once; connections already open keep their slots. */
  memcpy(next.socket_path, srv->cfg.socket_path, sizeof next.socket_path);
  next.socket_mode = srv->cfg.socket_mode;
  srv->cfg = next;
  srv->transport_limits.max_queued_frames = next.max_queued_frames;
  srv->transport_limits.max_queued_bytes = next.max_queued_bytes;
  if (srv->listening)
    uv_timer_start(&srv->hello_sweep, on_hello_sweep, sweep_ms, sweep_ms);
}

void server_shutdown(struct server *srv)
{
  if (!srv->listening)
    return;
  srv->listening = false;
  uv_poll_stop(&srv->listen_poll);
  uv_close((uv_handle_t *)&srv->listen_poll, NULL);
  uv_close((uv_handle_t *)&srv->accept_backoff, NULL);
  uv_close((uv_handle_t *)&srv->hello_sweep, NULL);
  close_listener(srv);
  while (!list_empty(&srv->sessions))
    session_close(list_entry(srv->sessions.next, struct session, link), 0, NULL);
  detached_shutdown(&srv->detached);
}
