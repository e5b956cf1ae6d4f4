/* systemd integration: an inherited listening socket, readiness, status, watchdog.
 * Without libsystemd these do nothing (and no socket is inherited). */
#ifndef GPUSHMD_SD_H
#define GPUSHMD_SD_H

#include <stddef.h>
#include <stdint.h>

/* The socket systemd passed (LISTEN_FDS): its fd, -1 if none, or -2 with err set
 * when what was passed is unusable (not one listening AF_UNIX SOCK_SEQPACKET socket). */
int sd_inherited_socket(char *err, size_t errlen);
void sd_notify_ready(const char *status);
void sd_notify_status(const char *status);
void sd_notify_stopping(void);
void sd_notify_watchdog(void);
/* Watchdog interval systemd expects pings within (0: no watchdog), in microseconds. */
uint64_t sd_watchdog_usec(void);

#endif
