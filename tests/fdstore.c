/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "fdstore.h"
#include "harness.h"

#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

struct fdstore_entry fdstore[FDSTORE_MAX];
int fdstore_n;
int fdstore_reloading_seen, fdstore_ready_seen;

static char notify_path[200];
static int notify_sock = -1;

void fdstore_open(const char *dir)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };

  snprintf(notify_path, sizeof notify_path, "%s/notify", dir);
  CHECK(strlen(notify_path) < sizeof addr.sun_path);
  memcpy(addr.sun_path, notify_path, strlen(notify_path) + 1);
  notify_sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  CHECK(notify_sock >= 0 && bind(notify_sock, (struct sockaddr *)&addr, sizeof addr) == 0);
  setenv("NOTIFY_SOCKET", notify_path, 1);
}

void fdstore_close(void)
{
  fdstore_clear();
  unsetenv("NOTIFY_SOCKET");
  if (notify_sock >= 0)
    close(notify_sock);
  notify_sock = -1;
  unlink(notify_path);
}

int fdstore_find(const char *prefix)
{
  for (int i = 0; i < fdstore_n; i++)
    if (strncmp(fdstore[i].name, prefix, strlen(prefix)) == 0)
      return i;
  return -1;
}

int fdstore_count(const char *text)
{
  int n = 0;
  for (int i = 0; i < fdstore_n; i++)
    n += strstr(fdstore[i].name, text) != NULL;
  return n;
}

void fdstore_remove(const char *name)
{
  for (int i = 0; i < fdstore_n;) {
    if (strcmp(fdstore[i].name, name) == 0) {
      close(fdstore[i].fd);
      fdstore[i] = fdstore[--fdstore_n];
    } else {
      i++;
    }
  }
}

void fdstore_clear(void)
{
  while (fdstore_n)
    fdstore_remove(fdstore[0].name);
}

/* One datagram of the notify protocol: newline-separated assignments, fds with it. */
static int step(int timeout_ms)
{
  char text[4096], *line, *save, *fdname = NULL;
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 16)];
  } control;
  struct iovec iov = { text, sizeof text - 1 };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                        .msg_controllen = sizeof control.buf };
  int fds[16], n_fds = 0, store_it = 0, remove_it = 0;
  struct timeval tv = { 0, timeout_ms * 1000 };
  ssize_t n;

  setsockopt(notify_sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if ((n = recvmsg(notify_sock, &msg, MSG_CMSG_CLOEXEC)) < 0)
    return 0;
  text[n] = '\0';
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      n_fds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)n_fds);
    }
  for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (strcmp(line, "FDSTORE=1") == 0)
      store_it = 1;
    else if (strcmp(line, "FDSTOREREMOVE=1") == 0)
      remove_it = 1;
    else if (strncmp(line, "FDNAME=", 7) == 0)
      fdname = line + 7;
    else if (strcmp(line, "RELOADING=1") == 0)
      fdstore_reloading_seen++;
    else if (strcmp(line, "READY=1") == 0)
      fdstore_ready_seen++;
  }
  if (store_it) {
    /* what systemd would refuse (fdname_is_valid) */
    CHECK(fdname != NULL && n_fds == 1 && fdstore_n < FDSTORE_MAX);
    CHECK(strlen(fdname) < 256 && strchr(fdname, ':') == NULL);
    for (const char *c = fdname; *c; c++)
      CHECK(*c > ' ' && *c < 127);
    snprintf(fdstore[fdstore_n].name, sizeof fdstore[fdstore_n].name, "%s", fdname);
    fdstore[fdstore_n++].fd = fds[0];
  } else {
    for (int i = 0; i < n_fds; i++)
      close(fds[i]);
  }
  if (remove_it) {
    CHECK(fdname != NULL);
    fdstore_remove(fdname);
  }
  return 1;
}

void fdstore_drain(void)
{
  while (step(100))
    ;
}

static void pass(bool reversed)
{
  static char names[FDSTORE_MAX * 257];
  char count[16], pid[16];
  int high[FDSTORE_MAX];

  if (fdstore_n == 0) {
    /* as systemd: nothing passed, nothing said */
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    unsetenv("LISTEN_PID");
    return;
  }
  names[0] = '\0';
  /* Out of the way first (past 3 + n), so that placing fd 3+i never overwrites one still
   * needed. */
  for (int i = 0; i < fdstore_n; i++) {
    int from = reversed ? fdstore_n - 1 - i : i;
    CHECK((high[i] = fcntl(fdstore[from].fd, F_DUPFD_CLOEXEC, 3 + fdstore_n)) >= 0);
  }
  for (int i = 0; i < fdstore_n; i++) {
    CHECK(dup2(high[i], 3 + i) == 3 + i);
    strcat(names, i ? ":" : "");
    strcat(names, fdstore[reversed ? fdstore_n - 1 - i : i].name);
  }
  snprintf(count, sizeof count, "%d", fdstore_n);
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  setenv("LISTEN_FDS", count, 1);
  setenv("LISTEN_FDNAMES", names, 1);
  setenv("LISTEN_PID", pid, 1);
}

void fdstore_pass(void *arg)
{
  (void)arg;
  pass(false);
}

void fdstore_pass_reversed(void *arg)
{
  (void)arg;
  pass(true);
}
