/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/listener.h"
#include "protocol.h"
#include "gpushm_limits.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Bounded so a connect storm cannot hold the loop away from existing clients. */
#define ACCEPTS_PER_WAKEUP 64

/* What the operator does about a refused path. */
#define SOCKET_FIX                                                                       \
  "put the socket in a directory that only root (or gpushmd's user) owns and writes "     \
  "(--socket /run/gpushm/gpushmd.sock, or $XDG_RUNTIME_DIR/gpushm/gpushmd.sock for a "     \
  "per-user gpushmd), or make that directory so (chown root DIR; chmod go-w DIR)"

static bool trusted_owner(uid_t uid)
{
  return uid == 0 || uid == geteuid();
}

/* Whoever can replace the socket's directory, or any directory above it, can put their
 * own server where clients look for gpushmd (sshd's StrictModes reasoning).  Every
 * directory on the way must belong to root or to us and be writable by nobody else --
 * except sticky ones above the last (/tmp), where others cannot replace our entries --
 * and every symlink on the way must belong to root or to us too. */
/* dir: the socket's directory (final: it must exist and be checked as the last), or
 * the part of the way to it that exists so far (not final: sticky is fine at its end,
 * since what is created inside it is ours). */
static int check_dirs(const char *path, const char *dir_in, bool final, char *err, size_t errlen)
{
  char dir[PATH_MAX], resolved[PATH_MAX];
  struct stat st;

  snprintf(dir, sizeof dir, "%s", dir_in);
  /* The symlinks as written... */
  for (char *p = dir;; p++) {
    char saved = *p;
    if (saved != '/' && saved != '\0')
      continue;
    *p = '\0';
    if (p > dir && lstat(dir, &st) == 0 && S_ISLNK(st.st_mode) && !trusted_owner(st.st_uid)) {
      snprintf(err, errlen, "refusing socket %s: the symlink %s on its way belongs to uid %u, "
               "who could point it elsewhere; %s", path, dir, (unsigned)st.st_uid, SOCKET_FIX);
      return PROTO_E_PERM;
    }
    *p = saved;
    if (!saved)
      break;
  }
  /* ...then every directory they lead to. */
  if (!realpath(dir, resolved)) {
    snprintf(err, errlen, "resolving %s: %s", dir, strerror(errno));
    return PROTO_E_IO;
  }
  for (char *p = resolved;; p++) {
    char saved = *p;
    bool last = saved == '\0';
    if (saved != '/' && !last)
      continue;
    *p = '\0';
    if (stat(p == resolved ? "/" : resolved, &st) < 0) {
      snprintf(err, errlen, "checking %s: %s", resolved, strerror(errno));
      return PROTO_E_IO;
    }
    if (!trusted_owner(st.st_uid)) {
      snprintf(err, errlen, "refusing socket %s: directory %s on its way belongs to uid %u "
               "(it must belong to root or to gpushmd's user); %s", path,
               p == resolved ? "/" : resolved, (unsigned)st.st_uid, SOCKET_FIX);
      return PROTO_E_PERM;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && ((last && final) || !(st.st_mode & S_ISVTX))) {
      snprintf(err, errlen, "refusing socket %s: directory %s on its way is writable by %s "
               "(mode %04o), who could replace it; %s", path, p == resolved ? "/" : resolved,
               st.st_mode & S_IWOTH ? "everyone" : "its group", (unsigned)(st.st_mode & 07777),
               SOCKET_FIX);
      return PROTO_E_PERM;
    }
    *p = saved;
    if (last)
      break;
  }
  return 0;
}

/* The missing part of dir's way, from missing on, one directory at a time through
 * directory fds: what someone made in its place after the check (a link, a file, a
 * directory of theirs) is refused, never followed; then the whole way is checked again. */
static int make_missing_dirs(const char *path, char *dir, char *missing, char *err,
                             size_t errlen)
{
  struct stat st;
  int dfd, fd;

  if (missing == dir)
    dfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  else if (missing == dir + 1)
    dfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  else {
    missing[-1] = '\0';
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    missing[-1] = '/';
  }
  if (dfd < 0) {
    snprintf(err, errlen, "opening the way to %s: %s", path, strerror(errno));
    return PROTO_E_IO;
  }
  for (char *name = missing, *p = missing;; p++) {
    char saved = *p;
    if (saved != '/' && saved != '\0')
      continue;
    *p = '\0';
    if (*name) {
      if (mkdirat(dfd, name, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "creating %s: %s", dir, strerror(errno));
        close(dfd);
        return PROTO_E_IO;
      }
      fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0 || fstat(fd, &st) < 0 || !trusted_owner(st.st_uid) ||
          (st.st_mode & (S_IWGRP | S_IWOTH))) {
        snprintf(err, errlen, "refusing socket %s: %s appeared as someone else's (or as a "
                 "link) while gpushmd made the way to it; %s", path, dir, SOCKET_FIX);
        if (fd >= 0)
          close(fd);
        close(dfd);
        return PROTO_E_PERM;
      }
      close(dfd);
      dfd = fd;
    }
    *p = saved;
    name = p + 1;
    if (!saved)
      break;
  }
  close(dfd);
  return check_dirs(path, dir, true, err, errlen);
}

/* The socket's directory: what exists of the way to it is checked before anything is
 * created, so a refused path creates nothing (a directory made through someone else's
 * symlink would land wherever it points: issue 29); each missing directory is then made
 * (0755) in a checked one, and the whole way is checked again. */
static int make_socket_dir(const char *path, char *err, size_t errlen)
{
  char dir[PATH_MAX], *slash, *missing = NULL;
  struct stat st;
  int r;

  snprintf(dir, sizeof dir, "%s", path);
  if (!(slash = strrchr(dir, '/')))
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    dir[1] = '\0';
  else
    *slash = '\0';
  /* the first component that does not exist (lstat: a dangling link exists) */
  for (char *p = dir + 1;; p++) {
    char saved = *p;
    if (saved != '/' && saved != '\0')
      continue;
    *p = '\0';
    if (lstat(dir, &st) < 0) {
      if (errno != ENOENT) {
        snprintf(err, errlen, "checking %s: %s", dir, strerror(errno));
        return PROTO_E_IO;
      }
      *p = saved;
      missing = p - 1;
      while (missing > dir && missing[-1] != '/')
        missing--;
      break;
    }
    *p = saved;
    if (!saved)
      break;
  }
  if (!missing)
    return check_dirs(path, dir, true, err, errlen);
  if (missing > dir + 1) {
    missing[-1] = '\0';
    r = check_dirs(path, dir, false, err, errlen);
    missing[-1] = '/';
  } else {
    r = check_dirs(path, missing == dir ? "." : "/", false, err, errlen);
  }
  if (r < 0)
    return r;
  return make_missing_dirs(path, dir, missing, err, errlen);
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
    return PROTO_E_IO;
  }
  probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (probe < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return PROTO_E_IO;
  }
  r = connect(probe, (const struct sockaddr *)addr, sizeof *addr);
  close(probe);
  if (r == 0) {
    snprintf(err, errlen, "another gpushmd is serving %s", addr->sun_path);
    return PROTO_E_IO;
  }
  if (errno != ECONNREFUSED) {
    snprintf(err, errlen, "probing %s: %s", addr->sun_path, strerror(errno));
    return PROTO_E_IO;
  }
  log_info("removing stale socket %s", addr->sun_path);
  if (unlink(addr->sun_path) < 0 && errno != ENOENT) {
    snprintf(err, errlen, "removing stale %s: %s", addr->sun_path, strerror(errno));
    return PROTO_E_IO;
  }
  return 0;
}

int listener_bind(struct listener *l, const char *path, uint32_t mode, const gid_t *group,
                  char *err, size_t errlen)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  mode_t old_umask;
  int fd, r;

  if (strlen(path) >= sizeof addr.sun_path) {
    snprintf(err, errlen, "socket path longer than %zu bytes", sizeof addr.sun_path - 1);
    return PROTO_E_IO;
  }
  memcpy(addr.sun_path, path, strlen(path) + 1);
  if (make_socket_dir(path, err, errlen) < 0 || remove_stale_socket(&addr, err, errlen) < 0)
    return PROTO_E_IO;
  fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return PROTO_E_IO;
  }
  /* The socket file gets its mode at bind time: no window with a wider one. */
  old_umask = umask(~mode & 0777);
  r = bind(fd, (struct sockaddr *)&addr, sizeof addr);
  umask(old_umask);
  /* The group before listen: until then nobody can connect, whatever the mode says. */
  if (r == 0 && group && chown(path, (uid_t)-1, *group) < 0) {
    snprintf(err, errlen, "giving %s to group %u: %s", path, (unsigned)*group, strerror(errno));
    close(fd);
    unlink(path);
    return PROTO_E_IO;
  }
  if (r < 0 || listen(fd, SOMAXCONN) < 0) {
    snprintf(err, errlen, "%s %s: %s", r < 0 ? "bind" : "listen", path, strerror(errno));
    close(fd);
    return PROTO_E_IO;
  }
  snprintf(l->path, sizeof l->path, "%s", path);
  l->fd = fd;
  l->inherited = false;
  return 0;
}

void listener_adopt(struct listener *l, int fd)
{
  l->path[0] = '\0';
  l->fd = fd;
  l->inherited = true;
}

struct uid_conns {
  uid_t uid;
  uint32_t n;
  struct uid_conns *next;
};

/* Adds delta to uid's connection count and returns the new count (UINT32_MAX: no memory
 * to count a new one). */
static uint32_t uid_conns(struct listener *l, uid_t uid, int delta)
{
  struct uid_conns **p, *u;
  uint32_t n;

  for (p = &l->uid_conns; (u = *p) && u->uid != uid; p = &u->next)
    ;
  if (!u) {
    if (delta <= 0 || !(u = calloc(1, sizeof *u)))
      return delta > 0 ? UINT32_MAX : 0;
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

void listener_set_limits(struct listener *l, uint32_t max_clients, uint32_t max_clients_per_uid)
{
  l->max_clients = max_clients;
  l->max_clients_per_uid = max_clients_per_uid;
}

/* Limits are checked with the client's identity in hand: non-admins stop at
 * max-clients and at max-clients-per-uid, so no user can take every slot, and the last
 * slots go only to uids that hold few, so that a few users cannot take them all either;
 * admins have a reserve beyond max-clients to inspect and repair a full daemon. */
int listener_admit(struct listener *l, uid_t uid, bool admin, char *why, size_t why_len)
{
  const uint32_t kept = l->max_clients / GPUSHM_LIMIT_NEWCOMER_SLOTS_DIV;
  const uint32_t few = kept / GPUSHM_LIMIT_NEWCOMER_SHARE_DIV ? kept / GPUSHM_LIMIT_NEWCOMER_SHARE_DIV : 1;
  uint32_t mine;

  l->n_clients++;
  if ((mine = uid_conns(l, uid, +1)) == UINT32_MAX) {
    /* Uncounted, it would slip past the per-uid cap: refuse it instead. */
    l->n_clients--;
    snprintf(why, why_len, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  if (admin) {
    if (l->n_clients <= l->max_clients + GPUSHM_LIMIT_ADMIN_RESERVED_CLIENTS)
      return 0;
    snprintf(why, why_len, "too many clients connected to gpushmd (%u, admin reserve used up)",
             l->n_clients - 1);
  } else if (l->n_clients > l->max_clients) {
    snprintf(why, why_len, "too many clients connected to gpushmd (limit %u)", l->max_clients);
  } else if (mine > l->max_clients_per_uid) {
    snprintf(why, why_len, "uid %u already has %u connections to gpushmd (limit %u)",
             (unsigned)uid, mine - 1, l->max_clients_per_uid);
  } else if (l->n_clients > l->max_clients - kept && mine > few) {
    snprintf(why, why_len, "gpushmd is nearly full (%u of %u clients): its last %u slots are "
             "kept for users holding fewer than %u connections, and uid %u holds %u",
             l->n_clients - 1, l->max_clients, kept, few, (unsigned)uid, mine - 1);
  } else {
    return 0;
  }
  return PROTO_E_LIMIT;
}

void listener_left(struct listener *l, uid_t uid)
{
  l->n_clients--;
  uid_conns(l, uid, -1);
}

/* Bounded so a connect storm cannot hold the loop away from existing clients. */
#define ACCEPTS_PER_WAKEUP 64

static void on_readable(uv_poll_t *handle, int status, int events);

static void on_backoff(uv_timer_t *timer)
{
  struct listener *l = timer->data;
  if (l->listening)
    uv_poll_start(&l->poll, UV_READABLE, on_readable);
}

static void on_readable(uv_poll_t *handle, int status, int events)
{
  struct listener *l = handle->data;

  (void)status;
  (void)events;
  for (int i = 0; i < ACCEPTS_PER_WAKEUP && l->listening; i++) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* The pending connection stays queued and the fd stays readable: stop watching
         * it for a while instead of spinning; said once per episode (this repeats every
         * back-off period until fds free up). */
        log_msg(l->accept_starved ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN,
                "accept: %s; pausing accepts for %u ms at a time", strerror(errno),
                GPUSHM_ACCEPT_BACKOFF_MS);
        l->accept_starved = true;
        uv_poll_stop(&l->poll);
        uv_timer_start(&l->backoff, on_backoff, GPUSHM_ACCEPT_BACKOFF_MS, 0);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        log_warn("accept: %s", strerror(errno));
      }
      return;
    }
    if (l->accept_starved) {
      log_info("accepting clients again");
      l->accept_starved = false;
    }
    l->on_accept(l->ctx, fd);
  }
}

void listener_start(struct listener *l, uv_loop_t *loop, void (*on_accept)(void *ctx, int fd),
                    void *ctx)
{
  l->loop = loop;
  l->on_accept = on_accept;
  l->ctx = ctx;
  uv_poll_init(loop, &l->poll, l->fd);
  l->poll.data = l;
  uv_timer_init(loop, &l->backoff);
  l->backoff.data = l;
  l->listening = true;
  uv_poll_start(&l->poll, UV_READABLE, on_readable);
}

void listener_stop(struct listener *l)
{
  if (l->listening) {
    l->listening = false;
    uv_poll_stop(&l->poll);
    uv_close((uv_handle_t *)&l->poll, NULL);
    uv_close((uv_handle_t *)&l->backoff, NULL);
  }
  if (l->fd >= 0)
    close(l->fd);
  l->fd = -1;
  if (!l->inherited && l->path[0] && unlink(l->path) < 0 && errno != ENOENT)
    log_warn("removing %s: %s", l->path, strerror(errno));
  l->path[0] = '\0';
  while (l->uid_conns) {
    struct uid_conns *u = l->uid_conns;
    l->uid_conns = u->next;
    free(u);
  }
}
