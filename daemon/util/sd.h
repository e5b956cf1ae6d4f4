/* SPDX-License-Identifier: MIT */
/* systemd integration: inherited fds (the listening socket and the fd store), readiness,
 * status, reload, watchdog.  Without libsystemd these do nothing and nothing is
 * inherited.  Prefixed sdn_ (sd_ is libsystemd's namespace, which this file calls). */
#ifndef GPUSHMD_SD_H
#define GPUSHMD_SD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Prefix of the names under which gpushmd deposits fds in the fd store. */
#define SDN_FDSTORE_PREFIX "gpushm1."

/* The fds systemd passed (LISTEN_FDS): at most one listening socket, and the fds the
 * previous daemon deposited in the store, with their names. */
struct sdn_passed {
  int socket_fd; /* -1: none, create one */
  size_t n_stored;
  int *stored_fds;
  char **stored_names;
};

/* Returns 0, or a negative PROTO_E_* with err set when what was passed is unusable (more than one
 * socket, or one that is not a listening AF_UNIX SOCK_SEQPACKET socket). */
int sdn_take_passed(struct sdn_passed *out, char *err, size_t errlen);
/* Frees the arrays (not the fds: they have been handed on or closed). */
void sdn_passed_free(struct sdn_passed *p);

/* Whether $NOTIFY_SOCKET was given to this process by its service manager: 1 if a
 * variable systemd sets for the process it starts ($SYSTEMD_EXEC_PID, $LISTEN_PID,
 * $WATCHDOG_PID) names it, or none is set and it is PID 1 (a container's main process);
 * 0 if there is none; -1 if it was inherited from whoever started this process, which
 * is then dropped from the environment with the watchdog's variables (why says so).
 * Called first: everything sdn_ does after goes by what is left. */
int sdn_claim_notify_socket(char *why, size_t whylen);

/* Whether fds can be deposited: a service manager is listening (NOTIFY_SOCKET). */
bool sdn_fdstore_reachable(void);
/* The store's capacity if systemd says it ($FDSTORE, systemd >= 254), else fallback. */
unsigned sdn_fdstore_max(unsigned fallback);
/* Deposits a duplicate of fd under name; returns 0 or -errno. */
int sdn_fdstore_add(const char *name, int fd);
/* Drops every fd stored under name. */
void sdn_fdstore_remove(const char *name);

void sdn_notify_ready(const char *status);
void sdn_notify_reloading(void);
void sdn_notify_status(const char *status);
void sdn_notify_stopping(void);
void sdn_notify_watchdog(void);
/* Watchdog interval systemd expects pings within (0: no watchdog), in microseconds. */
uint64_t sdn_watchdog_usec(void);

#endif
