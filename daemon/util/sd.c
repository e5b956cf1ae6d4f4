/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "protocol.h"
#include "util/sd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void sdn_passed_free(struct sdn_passed *p)
{
  for (size_t i = 0; i < p->n_stored; i++)
    free(p->stored_names[i]);
  free(p->stored_fds);
  free(p->stored_names);
  p->stored_fds = NULL;
  p->stored_names = NULL;
  p->n_stored = 0;
}

/* The variables systemd sets to name the process it started.  NOTIFY_SOCKET names no
 * process, and every child inherits it: a gpushmd started by hand from a shell of a
 * service, or inside `systemd-nspawn --pipe`, would notify a manager that never started
 * it and take it for one that keeps its persistent buffers. */
static const char *const sdn_pid_vars[] = { "SYSTEMD_EXEC_PID", "LISTEN_PID", "WATCHDOG_PID" };

static bool names_this_process(const char *value)
{
  char *end;
  unsigned long pid = strtoul(value, &end, 10);
  return !*end && end != value && pid == (unsigned long)getpid();
}

int sdn_claim_notify_socket(char *why, size_t whylen)
{
  const char *notify = getenv("NOTIFY_SOCKET"), *named = NULL, *value = NULL;

  if (!notify || !*notify)
    return 0;
  for (size_t i = 0; i < sizeof sdn_pid_vars / sizeof sdn_pid_vars[0]; i++) {
    const char *v = getenv(sdn_pid_vars[i]);
    if (!v || !*v)
      continue;
    if (names_this_process(v))
      return 1;
    named = sdn_pid_vars[i];
    value = v;
  }
  /* A container's main process: managers that start one with a notify socket
   * (podman --sdnotify=container) name no pid, and nothing else can have inherited it. */
  if (!named && getpid() == 1)
    return 1;
  if (named)
    snprintf(why, whylen, "NOTIFY_SOCKET=%s is meant for pid %s (%s), not this process (pid %d)",
             notify, value, named, (int)getpid());
  else
    snprintf(why, whylen, "NOTIFY_SOCKET=%s names no process: none of SYSTEMD_EXEC_PID, "
             "LISTEN_PID, WATCHDOG_PID is set, so it was inherited, not given to this process "
             "(pid %d) by a service manager", notify, (int)getpid());
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
  return -1;
}

unsigned sdn_fdstore_max(unsigned fallback)
{
  const char *v = getenv("FDSTORE");
  char *end;
  unsigned long n;

  if (!v || !*v)
    return fallback;
  n = strtoul(v, &end, 10);
  return *end || n > 1u << 30 ? fallback : (unsigned)n;
}

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>

int sdn_take_passed(struct sdn_passed *out, char *err, size_t errlen)
{
  char **names = NULL;
  int n = sd_listen_fds_with_names(1, &names), r = 0;

  memset(out, 0, sizeof *out);
  out->socket_fd = -1;
  if (n < 0) {
    snprintf(err, errlen, "the fds systemd passed are unusable: %s", strerror(-n));
    return PROTO_E_IO;
  }
  if (n > 0 && (!(out->stored_fds = calloc((size_t)n, sizeof *out->stored_fds)) ||
                !(out->stored_names = calloc((size_t)n, sizeof *out->stored_names)))) {
    snprintf(err, errlen, "out of memory");
    r = -1;
  }
  for (int i = 0; i < n; i++) {
    int fd = SD_LISTEN_FDS_START + i, flags;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (r == 0 && strncmp(names[i], SDN_FDSTORE_PREFIX, strlen(SDN_FDSTORE_PREFIX)) == 0) {
      out->stored_fds[out->n_stored] = fd;
      out->stored_names[out->n_stored++] = names[i];
      names[i] = NULL;
      continue;
    }
    if (r == 0 && out->socket_fd >= 0) {
      snprintf(err, errlen, "systemd passed more than one socket; gpushmd takes one");
      r = -1;
    } else if (r == 0 && sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, NULL, 0) <= 0) {
      snprintf(err, errlen, "the socket systemd passed is not a listening AF_UNIX SOCK_SEQPACKET "
               "socket (use ListenSequentialPacket=)");
      r = -1;
    } else if (r == 0 && ((flags = fcntl(fd, F_GETFL)) < 0 ||
                          fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)) {
      /* The accept loop relies on EAGAIN; systemd hands sockets over blocking. */
      snprintf(err, errlen, "preparing the inherited socket failed: %s", strerror(errno));
      r = -1;
    } else if (r == 0) {
      out->socket_fd = fd;
      continue;
    }
    close(fd);
  }
  for (int i = 0; i < n; i++)
    free(names ? names[i] : NULL);
  free(names);
  if (r < 0) {
    for (size_t i = 0; i < out->n_stored; i++)
      close(out->stored_fds[i]);
    if (out->socket_fd >= 0)
      close(out->socket_fd);
    out->socket_fd = -1;
    sdn_passed_free(out);
  }
  return r;
}

bool sdn_fdstore_reachable(void)
{
  const char *e = getenv("NOTIFY_SOCKET");
  return e && *e;
}

int sdn_fdstore_add(const char *name, int fd)
{
  char msg[320];
  int r;

  /* FDPOLL=0: systemd otherwise drops a stored fd that polls POLLHUP or POLLERR, which
   * a device handle's fd (the driver's poll) may well do. */
  snprintf(msg, sizeof msg, "FDSTORE=1\nFDPOLL=0\nFDNAME=%s", name);
  r = sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
  return r > 0 ? 0 : r == 0 ? -ENOTCONN : r;
}

void sdn_fdstore_remove(const char *name)
{
  sd_notifyf(0, "FDSTOREREMOVE=1\nFDNAME=%s", name);
}

void sdn_notify_ready(const char *status)
{
  sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void sdn_notify_reloading(void)
{
  sd_notify(0, "RELOADING=1");
}

void sdn_notify_status(const char *status)
{
  sd_notifyf(0, "STATUS=%s", status);
}

void sdn_notify_stopping(void)
{
  sd_notify(0, "STOPPING=1");
}

void sdn_notify_watchdog(void)
{
  sd_notify(0, "WATCHDOG=1");
}

uint64_t sdn_watchdog_usec(void)
{
  uint64_t usec = 0;
  return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}

#else

int sdn_take_passed(struct sdn_passed *out, char *err, size_t errlen)
{
  (void)err;
  (void)errlen;
  memset(out, 0, sizeof *out);
  out->socket_fd = -1;
  return 0;
}

bool sdn_fdstore_reachable(void) { return false; }
int sdn_fdstore_add(const char *name, int fd) { (void)name; (void)fd; return -ENOTSUP; }
void sdn_fdstore_remove(const char *name) { (void)name; }
void sdn_notify_ready(const char *status) { (void)status; }
void sdn_notify_reloading(void) {}
void sdn_notify_status(const char *status) { (void)status; }
void sdn_notify_stopping(void) {}
void sdn_notify_watchdog(void) {}
uint64_t sdn_watchdog_usec(void) { return 0; }

#endif
