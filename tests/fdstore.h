/* SPDX-License-Identifier: MIT */
/* systemd's side of the file-descriptor store, played by a test: a notify socket the
 * daemons it starts report to (NOTIFY_SOCKET; FDSTORE=1 / FDSTOREREMOVE=1 with FDNAME),
 * the deposited fds kept under their names, and the hand-over to the next daemon
 * (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID), so that restarts are tested without systemd. */
#ifndef GPUSHM_TEST_FDSTORE_H
#define GPUSHM_TEST_FDSTORE_H

#define FDSTORE_MAX 1024

struct fdstore_entry {
  char name[256];
  int fd;
};

/* What the daemons deposited, in the order they did (a removal moves the last entry
 * into the gap). */
extern struct fdstore_entry fdstore[FDSTORE_MAX];
extern int fdstore_n;
/* RELOADING=1 and READY=1 notifications received. */
extern int fdstore_reloading_seen, fdstore_ready_seen;

/* Binds the notify socket in dir and exports NOTIFY_SOCKET (daemons started later
 * inherit it; libgpushm never looks at it). */
void fdstore_open(const char *dir);
/* Empties the store and removes the socket. */
void fdstore_close(void);
/* Index of the first entry whose name starts with prefix, or -1. */
int fdstore_find(const char *prefix);
/* How many entries' names contain text. */
int fdstore_count(const char *text);
/* Drops (and closes) every entry stored under name. */
void fdstore_remove(const char *name);
void fdstore_clear(void);
/* Takes in everything the daemon has said so far (it says it before answering the
 * request that caused it, so a short quiet period means all of it). */
void fdstore_drain(void);
/* For daemon_respawn_with(), in the child: puts the stored fds at 3, 4, ... and sets
 * LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID as systemd would.  arg is unused. */
void fdstore_pass(void *arg);
/* The same, the records in the reverse order: systemd promises none, and a kind must not
 * take another's record for its own whichever comes first. */
void fdstore_pass_reversed(void *arg);

#endif
