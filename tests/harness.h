/* SPDX-License-Identifier: MIT */
/* Test helpers: assertions that say where and why, and a real gpushmd on a
 * temporary socket. */
#ifndef GPUSHM_TEST_HARNESS_H
#define GPUSHM_TEST_HARNESS_H

#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "gpushm-admin.h"

#define TEST_SKIP 77

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* expr must return 0 (or a non-negative value). */
#define CHECK_OK(expr)                                                           \
  do {                                                                           \
    int check_r_ = (expr);                                                       \
    if (check_r_ < 0) {                                                          \
      fprintf(stderr, "%s:%d: %s = %d (%s: %s)\n", __FILE__, __LINE__, #expr,    \
              check_r_, gpushm_strerror(check_r_), gpushm_last_error_message()); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* expr must fail with exactly err. */
#define CHECK_ERR(expr, err)                                                     \
  do {                                                                           \
    int check_r_ = (expr);                                                       \
    if (check_r_ != (err)) {                                                     \
      fprintf(stderr, "%s:%d: %s = %d (%s), expected %d (%s)\n", __FILE__,       \
              __LINE__, #expr, check_r_, gpushm_strerror(check_r_), (int)(err),  \
              gpushm_strerror(err));                                             \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

struct test_daemon {
  pid_t pid;
  unsigned nofile; /* if set, the daemon's RLIMIT_NOFILE (soft and hard) */
  /* If set, the daemon's stderr (its log) is appended to this file instead of the
   * test's own, for the test to read. */
  const char *log_path;
  char dir[256];
  char socket[300];
};

/* A temporary file for gpushmd's log (struct test_daemon.log_path), named after tag,
 * copied to the test's stderr and removed when the test exits: a failing test shows
 * what its daemons said. */
const char *test_log_file(const char *tag);

/* Starts $GPUSHMD on a socket in a fresh temporary directory, with extra arguments
 * (NULL-terminated), and waits until it answers. */
void daemon_start(struct test_daemon *d, ...);
/* Starts another daemon on d's existing socket path and waits until it answers. */
void daemon_respawn(struct test_daemon *d, ...);
/* daemon_respawn, with in_child(arg) run in the child just before exec (to set up
 * inherited fds and environment). */
void daemon_respawn_with(struct test_daemon *d, void (*in_child)(void *), void *arg, ...);
/* Runs $GPUSHMD with arguments (NULL-terminated) to completion, output to out_file
 * (may be NULL); returns its exit status. */
int daemon_run(const char *out_file, ...);
/* Waits (up to ~20 s) for the daemon to exit on its own; returns its exit status. */
int daemon_wait_exit(struct test_daemon *d);
/* SIGTERM, then checks it exited 0 and removed its socket. */
void daemon_stop(struct test_daemon *d);
gpushm_t *daemon_connect(const struct test_daemon *d);
/* The daemon's statistics, asked over a connection of their own; free with
 * gpushm_stats_free(). */
gpushm_stats_t *daemon_stats(const struct test_daemon *d);
/* Looks a buffer or event up by name in the list the connection sees (the last of that
 * name): NULL if there is none.  What it returns stays valid until the next call. */
const gpushm_buffer_info_t *find_buffer(gpushm_t *conn, const char *name);
/* Opens name with no CUDA mapping (map_device GPUSHM_DEVICE_NONE), as exporters and
 * graphics importers take it, with open flags; fails the test if it cannot. */
gpushm_buffer_t *open_unmapped(gpushm_t *conn, const char *name, unsigned flags);
/* Creates a sync buffer (GPUSHM_CREATE_SYNC) of backend, size bytes and mode; fails the
 * test if it cannot. */
gpushm_buffer_t *create_sync_buffer(gpushm_t *conn, const char *name, gpushm_backend_t backend,
                                    uint64_t size, uint32_t mode);
/* A fenced sync buffer's fence under the fake driver, read directly: the fake's device
 * memory is this process's memory, and the daemon puts the fence in the allocation's
 * last 8 bytes. */
uint64_t fake_fence_of(gpushm_t *conn, gpushm_buffer_t *b);
/* The value of the daemon's metric row name (its first series); fails the test where
 * the daemon has no such row. */
uint64_t daemon_metric(const struct test_daemon *d, const char *name);
/* Polls until pred(d) is true, up to about 10 s; false if it never was. */
int wait_until(int (*pred)(const struct test_daemon *, void *), const struct test_daemon *d,
               void *arg);
/* Waits for a child and checks it exited 0. */
void check_child(pid_t pid);
/* fork() whose child runs as uid:gid with no supplementary groups (needs root);
 * returns as fork() does. */
pid_t fork_as(uid_t uid, gid_t gid);
/* The client id of pid's connection, as conn (an admin's) lists clients; checked to
 * exist. */
uint32_t client_id_of(gpushm_t *conn, pid_t pid);
/* Where this process maps the memfd named name read-write and shared (a sync buffer's
 * control block is named after its buffer); fails the test if it does not. */
void *shared_memfd_mapping(const char *name);
/* The same mapped read-only (a read-only holder's control block). */
void *read_only_memfd_mapping(const char *name);
/* gpushmctl show NAME, against the daemon at socket, prints text (the test fails
 * otherwise, with what it printed). */
void ctl_show_says(const char *socket, const char *name, const char *text);
/* How many lines of the file at path contain text. */
unsigned file_count_lines(const char *path, const char *text);
/* Whether the file at path (its first 16 KiB) contains text. */
int file_contains(const char *path, const char *text);
/* This test program's path, for re-running itself in a child role: a path rather than
 * /proc/self/exe, which names whoever looks, so that it survives a child's change of
 * uid and shows in the daemon's client list as the test. */
const char *test_self_path(void);
/* Raises this process's soft open-file limit to at least need, as far as the hard limit
 * allows (a fresh machine's soft limit is 1024); false when the hard limit is lower,
 * with why saying so. */
bool test_raise_nofile(unsigned long need, char *why, size_t why_len);
/* The CPU time, in ms, of the thread of this process named name (prctl PR_SET_NAME),
 * from its schedstat; fails the test where no such thread runs. */
double test_thread_cpu_ms(const char *name);
/* A monotonic clock in milliseconds (whole, and with their fraction for what takes less
 * than one), and a sleep of that many. */
uint64_t test_now_ms(void);
double test_clock_ms(void);
void test_sleep_ms(unsigned ms);
void test_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* recv() that first looks for the message for poll_us without sleeping, as libgpushm
 * waits for a reply with $GPUSHM_POLL_US (the benchmarks' --poll); 0: plain recv(). */
ssize_t test_recv_polling(int fd, void *buf, size_t len, int flags, unsigned poll_us);

#endif
