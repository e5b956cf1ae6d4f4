#include "config.h"
#include "sd.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>

int sd_inherited_socket(char *err, size_t errlen)
{
  int n = sd_listen_fds(1), fd = SD_LISTEN_FDS_START, flags;

  if (n < 0) {
    snprintf(err, errlen, "the sockets systemd passed are unusable: %s", strerror(-n));
    return -2;
  }
  if (n == 0)
    return -1;
  if (n > 1) {
    snprintf(err, errlen, "systemd passed %d sockets; gpushmd takes one", n);
    return -2;
  }
  if (sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, NULL, 0) <= 0) {
    snprintf(err, errlen, "the socket systemd passed is not a listening AF_UNIX SOCK_SEQPACKET "
             "socket (use ListenSequentialPacket=)");
    return -2;
  }
  /* The accept loop relies on EAGAIN; systemd hands sockets over blocking. */
  if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
      fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
    snprintf(err, errlen, "preparing the inherited socket failed");
    return -2;
  }
  return fd;
}

void sd_notify_ready(const char *status)
{
  sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void sd_notify_status(const char *status)
{
  sd_notifyf(0, "STATUS=%s", status);
}

void sd_notify_stopping(void)
{
  sd_notify(0, "STOPPING=1");
}

void sd_notify_watchdog(void)
{
  sd_notify(0, "WATCHDOG=1");
}

uint64_t sd_watchdog_usec(void)
{
  uint64_t usec = 0;
  return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}

#else

int sd_inherited_socket(char *err, size_t errlen)
{
  (void)err;
  (void)errlen;
  return -1;
}

void sd_notify_ready(const char *status) { (void)status; }
void sd_notify_status(const char *status) { (void)status; }
void sd_notify_stopping(void) {}
void sd_notify_watchdog(void) {}
uint64_t sd_watchdog_usec(void) { return 0; }

#endif
