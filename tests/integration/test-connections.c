/* SPDX-License-Identifier: MIT */
/* Connection limits a hostile uid runs into (per-uid cap, max-clients with a reserve for
 * admins, a Hello deadline for silent sockets) and client timeouts against a daemon
 * that stopped answering.  Needs root to act as other uids; skips otherwise. */
#include "config.h"
#include "gpushm_limits.h"
#include "harness.h"
#include "raw.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOBODY 65534
#define OTHER 65533

static struct test_daemon d;

/* Asked over a connection held from the start: a new one might not get a slot. */
static gpushm_t *watcher;

static int clients_are(const struct test_daemon *dd, void *expected)
{
  gpushm_stats_t *s;
  int are;
  (void)dd;
  CHECK_OK(gpushm_stats(watcher, &s));
  are = gpushm_stats_clients(s) == *(uint32_t *)expected;
  gpushm_stats_free(s);
  return are;
}

/* Holds n connections as uid until told to let go; reports how many it got. */
static pid_t hold_as(uid_t uid, int n, int report[2], int release[2])
{
  pid_t pid = fork_as(uid, uid);
  if (pid == 0) {
    gpushm_t *conns[64];
    int got = 0, r = 0;
    char c;
    while (got < n && (r = gpushm_connect(d.socket, "holder", &conns[got])) == 0)
      got++;
    CHECK(write(report[1], &got, sizeof got) == sizeof got);
    CHECK(write(report[1], &r, sizeof r) == sizeof r);
    CHECK(read(release[0], &c, 1) == 1);
    while (got)
      gpushm_disconnect(conns[--got]);
    _exit(0);
  }
  return pid;
}

static void expect_held(int report[2], int want, int want_error)
{
  int got, r;
  CHECK(read(report[0], &got, sizeof got) == sizeof got);
  CHECK(read(report[0], &r, sizeof r) == sizeof r);
  if (got != want || r != want_error) {
    fprintf(stderr, "holder got %d connections (wanted %d), then %d (wanted %d)\n", got, want,
            r, want_error);
    exit(1);
  }
}

static void test_limits(void)
{
  int report[2], release[2];
  gpushm_t *admin[20], *extra;
  pid_t a, b;
  uint32_t n;
  int i;

  daemon_start(&d, "--max-clients", "5", "--max-clients-per-uid", "3", NULL);
  CHECK(pipe(report) == 0 && pipe(release) == 0);
  watcher = daemon_connect(&d);
  n = 1;
  CHECK(wait_until(clients_are, &d, &n)); /* the harness's start-up probe is gone */
  /* one uid stops at its own cap... */
  a = hold_as(NOBODY, 5, report, release);
  expect_held(report, 3, GPUSHM_E_LIMIT);
  /* ...so another uid still gets in, up to max-clients in all */
  b = hold_as(OTHER, 5, report, release);
  expect_held(report, 1, GPUSHM_E_LIMIT); /* 5 = the watcher + 3 + 1 */
  n = 5;
  CHECK(wait_until(clients_are, &d, &n));
  /* admins (root) have a reserve of 16 beyond max-clients */
  for (i = 0; i < 20 && gpushm_connect(d.socket, "admin", &admin[i]) == 0; i++)
    ;
  CHECK(i == 16);
  CHECK(strstr(gpushm_last_error_message(), "admin reserve") != NULL);
  CHECK(write(release[1], "xx", 2) == 2);
  check_child(a);
  check_child(b);
  while (i)
    gpushm_disconnect(admin[--i]);
  n = 1;
  CHECK(wait_until(clients_are, &d, &n));
  CHECK_OK(gpushm_connect(d.socket, "later", &extra));
  gpushm_disconnect(extra);
  gpushm_disconnect(watcher);
  daemon_stop(&d);
}

/* Issue 29, item 3: four uids that each take all the per-uid limit allows fill all but
 * the last slots, which stay for a fifth uid; root keeps its reserve. */
static void test_fair_share(void)
{
  enum { MAX = 64, PER_UID = 16, KEPT = MAX / GPUSHM_LIMIT_NEWCOMER_SLOTS_DIV };
  static const uid_t uids[5] = { 65530, 65531, 65532, 65533, NOBODY };
  int report[2], release[2];
  pid_t pids[5];
  gpushm_t *admin;
  uint32_t n;

  daemon_start(&d, "--max-clients", "64", "--max-clients-per-uid", "16", NULL);
  CHECK(pipe(report) == 0 && pipe(release) == 0);
  watcher = daemon_connect(&d);
  n = 1;
  CHECK(wait_until(clients_are, &d, &n));
  for (int i = 0; i < 3; i++) {
    pids[i] = hold_as(uids[i], PER_UID, report, release);
    expect_held(report, PER_UID, 0);
  }
  /* the fourth gets what is left before the kept slots (the watcher holds one)... */
  pids[3] = hold_as(uids[3], PER_UID, report, release);
  expect_held(report, MAX - KEPT - 1 - 3 * PER_UID, GPUSHM_E_LIMIT);
  /* ...and a fifth uid still gets in, though no more than its share of them */
  pids[4] = hold_as(uids[4], PER_UID, report, release);
  expect_held(report, KEPT / GPUSHM_LIMIT_NEWCOMER_SHARE_DIV ? KEPT / GPUSHM_LIMIT_NEWCOMER_SHARE_DIV : 1,
              GPUSHM_E_LIMIT);
  CHECK_OK(gpushm_connect(d.socket, "admin", &admin));
  gpushm_disconnect(admin);
  CHECK(write(release[1], "xxxxx", 5) == 5);
  for (int i = 0; i < 5; i++)
    check_child(pids[i]);
  close(report[0]), close(report[1]), close(release[0]), close(release[1]);
  gpushm_disconnect(watcher);
  daemon_stop(&d);
  test_log("four uids filling their limits left the last %u of %u slots to a fifth", KEPT, MAX);
}

static void test_hello_deadline(void)
{
  uint8_t buf[WIRE_RECV_BUF];
  struct wire_frame frame;
  const char *why;
  Gpushm__Reply *reply;
  uint64_t start;
  int sock, status_fd;

  daemon_start(&d, "--hello-timeout", "300", NULL);
  start = test_now_ms();
  sock = raw_connect(d.socket);
  /* silence: told why, then hung up on, after about the deadline */
  CHECK(wire_recv_frame(sock, buf, WIRE_TYPE_REPLY, 0, &frame, &why) == 0);
  reply = gpushm__reply__unpack(NULL, frame.header.body_len, frame.body);
  CHECK(reply && reply->request_id == 0 && reply->status == -GPUSHM_E_TIMEOUT);
  CHECK(strstr(reply->message, "no hello within 300 ms") != NULL);
  gpushm__reply__free_unpacked(reply, NULL);
  CHECK(recv(sock, buf, sizeof buf, 0) == 0);
  CHECK(test_now_ms() - start >= 300 && test_now_ms() - start < 3000);
  close(sock);
  /* a client that says hello in time stays, however quiet it is later */
  sock = raw_connect(d.socket);
  CHECK(raw_hello(sock, "prompt", &status_fd) == 0);
  close(status_fd);
  usleep(700 * 1000);
  CHECK(recv(sock, buf, sizeof buf, MSG_DONTWAIT) < 0 && errno == EAGAIN);
  close(sock);
  daemon_stop(&d);
}

/* A daemon that stopped (SIGSTOP) must not hang its clients. */
static void test_client_timeouts(void)
{
  gpushm_t *conn, *late;
  uint64_t start;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_set_timeout(conn, 300));
  CHECK(kill(d.pid, SIGSTOP) == 0);
  start = test_now_ms();
  CHECK_ERR(gpushm_ping(conn), GPUSHM_E_TIMEOUT);
  CHECK(test_now_ms() - start >= 250 && test_now_ms() - start < 3000);
  CHECK(strstr(gpushm_last_error_message(), "no reply from gpushmd within 300 ms") != NULL);
  /* a reply could still come and answer the wrong request: the connection is done */
  CHECK_ERR(gpushm_ping(conn), GPUSHM_E_DISCONNECTED);
  /* connecting waits for the hello reply only as long as $GPUSHM_TIMEOUT_MS */
  setenv("GPUSHM_TIMEOUT_MS", "300", 1);
  start = test_now_ms();
  CHECK_ERR(gpushm_connect(d.socket, "late", &late), GPUSHM_E_TIMEOUT);
  CHECK(test_now_ms() - start < 3000);
  unsetenv("GPUSHM_TIMEOUT_MS");
  CHECK(kill(d.pid, SIGCONT) == 0);
  late = daemon_connect(&d);
  CHECK_OK(gpushm_ping(late));
  gpushm_disconnect(late);
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* A listener whose queue is full and never accepts: connect itself times out. */
static void test_connect_timeout(void)
{
  char dir[] = "/tmp/gpushm-backlog.XXXXXX", path[128];
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  int listener, queued[8], n = 0;
  gpushm_t *conn;
  uint64_t start;

  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/full.sock", dir);
  memcpy(addr.sun_path, path, strlen(path) + 1);
  listener = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  CHECK(listener >= 0 && bind(listener, (struct sockaddr *)&addr, sizeof addr) == 0);
  CHECK(listen(listener, 0) == 0);
  /* fill the queue without blocking */
  for (; n < 8; n++) {
    queued[n] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);
    if (connect(queued[n], (struct sockaddr *)&addr, sizeof addr) < 0) {
      close(queued[n]);
      break;
    }
  }
  CHECK(n >= 1 && n < 8);
  setenv("GPUSHM_TIMEOUT_MS", "300", 1);
  start = test_now_ms();
  CHECK_ERR(gpushm_connect(path, "queued", &conn), GPUSHM_E_TIMEOUT);
  CHECK(test_now_ms() - start >= 250 && test_now_ms() - start < 3000);
  CHECK(strstr(gpushm_last_error_message(), "did not accept the connection") != NULL);
  unsetenv("GPUSHM_TIMEOUT_MS");
  while (n)
    close(queued[--n]);
  close(listener);
  unlink(path);
  rmdir(dir);
}

/* gpushmd as a user starts it by hand (no harness settings): socket at path, stderr to
 * log; returns its pid once it answers. */
static pid_t start_by_hand(const char *path, const char *log, const char *group)
{
  const char *daemon = getenv("GPUSHMD");
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    CHECK(freopen(log, "w", stderr) != NULL);
    if (group)
      execl(daemon, daemon, "--socket", path, "--log-level", "info", "--socket-group", group,
            (char *)NULL);
    else
      execl(daemon, daemon, "--socket", path, "--log-level", "info", (char *)NULL);
    _exit(127);
  }
  /* Listening, not only bound: the socket gets its group between the two (nobody can
   * connect before), which a slow start (valgrind) showed to a stat right after bind. */
  for (int i = 0; i < 500 && !(access(path, F_OK) == 0 && file_contains(log, "listening on"));
       i++)
    usleep(20 * 1000);
  CHECK(access(path, F_OK) == 0 && file_contains(log, "listening on"));
  return pid;
}

/* Whether uid (with gid as its only group) may connect: 0, 1 (permission denied), 2. */
static int connects_as(uid_t uid, gid_t gid, const char *path)
{
  int status;
  pid_t pid = fork_as(uid, gid);
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *c;
    int r = gpushm_connect(path, "who", &c);
    if (r == 0)
      gpushm_disconnect(c);
    _exit(r == 0 ? 0 : gpushm_last_error_errno() == EACCES ? 1 : 2);
  }
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
  return WEXITSTATUS(status);
}

/* Issue 29, item 6: a daemon started by hand no longer opens its socket to every user
 * without saying so.  With a group (named, or gpushm where it exists: the packaged
 * unit's policy) the socket is 0660 and that group's: a member connects, another uid
 * cannot; without one it is 0666 and the start-up log warns who may connect. */
static void test_socket_access(void)
{
  char dir[] = "/tmp/gpushm-access.XXXXXX", path[128], log[128];
  struct group *gpushm = getgrnam(GPUSHM_SOCKET_GROUP);
  struct stat st;
  pid_t pid;

  CHECK(mkdtemp(dir) != NULL && chmod(dir, 0755) == 0);
  snprintf(path, sizeof path, "%s/gpushmd.sock", dir);
  snprintf(log, sizeof log, "%s/log", dir);

  pid = start_by_hand(path, log, "nogroup");
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0660 && st.st_gid == 65534);
  CHECK(connects_as(NOBODY, 65534, path) == 0);       /* a member of nogroup */
  CHECK(connects_as(OTHER, OTHER, path) == 1);        /* anyone else: permission denied */
  CHECK(kill(pid, SIGTERM) == 0 && waitpid(pid, NULL, 0) == pid);
  CHECK(file_contains(log, "members of nogroup may connect"));

  pid = start_by_hand(path, log, "none");
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0666);
  CHECK(connects_as(OTHER, OTHER, path) == 0);
  CHECK(kill(pid, SIGTERM) == 0 && waitpid(pid, NULL, 0) == pid);
  CHECK(file_contains(log, "warn") && file_contains(log, "every local user may connect"));

  /* the default: gpushm's where the group exists, else open and said so */
  pid = start_by_hand(path, log, NULL);
  CHECK(stat(path, &st) == 0);
  if (gpushm) {
    CHECK((st.st_mode & 0777) == 0660 && st.st_gid == gpushm->gr_gid);
    CHECK(connects_as(OTHER, OTHER, path) == 1);
  } else {
    CHECK((st.st_mode & 0777) == 0666 && file_contains(log, "groupadd --system gpushm"));
  }
  CHECK(kill(pid, SIGTERM) == 0 && waitpid(pid, NULL, 0) == pid);
  unlink(log);
  CHECK(rmdir(dir) == 0);
  test_log("by hand: socket 0660 of its group (%s), or 0666 with a warning",
           gpushm ? "the group gpushm exists here" : "no group gpushm here");
}

/* A stop asked for while the daemon still initialises CUDA (a real cuInit takes 100-365
 * ms; the fake one is slowed down to 800 ms here) still stops it cleanly: the socket,
 * already bound, is removed and the log says why it stopped.  The default action of
 * SIGTERM had killed it there and left the socket behind (issue 35, item 3). */
static void test_stop_during_start(void)
{
  char dir[] = "/tmp/gpushm-stop.XXXXXX", path[128], log[128];
  const char *fake = getenv("GPUSHM_FAKE_CUDA_LIB");
  int status;
  pid_t pid;

  if (!fake || access(fake, R_OK) < 0) {
    test_log("stop during start-up: no fake CUDA driver (built without CUDA)");
    return;
  }
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/gpushmd.sock", dir);
  snprintf(log, sizeof log, "%s/log", dir);
  CHECK(setenv("GPUSHM_CUDA_LIBRARY", fake, 1) == 0);
  CHECK(setenv("GPUSHM_FAKE_CUDA_INIT_DELAY_MS", "800", 1) == 0);
  pid = start_by_hand(path, log, "none");
  CHECK(unsetenv("GPUSHM_CUDA_LIBRARY") == 0 && unsetenv("GPUSHM_FAKE_CUDA_INIT_DELAY_MS") == 0);
  CHECK(kill(pid, SIGTERM) == 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(access(path, F_OK) < 0 && errno == ENOENT);
  CHECK(file_contains(log, "shutting down"));
  unlink(log);
  CHECK(rmdir(dir) == 0);
  test_log("SIGTERM while CUDA initialises: gpushmd stops cleanly once it is up, socket removed");
}

/* Expects a connect to path to fail GPUSHM_E_CONNECT with errno err and a message
 * holding text (the cause and its fix). */
static void expect_connect_error(const char *path, int err, const char *text)
{
  gpushm_t *c = NULL;

  CHECK_ERR(gpushm_connect(path, "lost", &c), GPUSHM_E_CONNECT);
  CHECK(c == NULL);
  CHECK(gpushm_last_error_errno() == err);
  if (!strstr(gpushm_last_error_message(), text)) {
    test_log("connect %s: '%s' lacks '%s'", path, gpushm_last_error_message(), text);
    CHECK(!"the message names the cause");
  }
}

/* A socket nothing listens on: what a gpushmd that was killed leaves behind. */
static void make_stale_socket(const char *path, mode_t mode, gid_t gid)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

  CHECK(strlen(path) < sizeof addr.sun_path);
  memcpy(addr.sun_path, path, strlen(path) + 1);
  CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0);
  close(fd);
  CHECK(chown(path, 0, gid) == 0 && chmod(path, mode) == 0);
}

/* Each reason a connect fails gets its own message with its fix, and its errno: nothing
 * there, a directory or a file instead of a socket, a stale socket, a path through a
 * file, a socket of a group the caller is not in, a directory it may not enter. */
static void test_connect_errors(void)
{
  char dir[] = "/tmp/gpushm-connect-XXXXXX", path[256];
  pid_t pid;

  CHECK(mkdtemp(dir) != NULL && chmod(dir, 0755) == 0);
  snprintf(path, sizeof path, "%s/gpushmd.sock", dir);
  expect_connect_error(path, ENOENT, "no gpushmd socket at");
  expect_connect_error(path, ENOENT, "(as given): gpushmd is not running there; start it");
  setenv("GPUSHM_SOCKET", path, 1);
  expect_connect_error(NULL, ENOENT, "(from $GPUSHM_SOCKET)");
  unsetenv("GPUSHM_SOCKET");
  expect_connect_error(dir, ECONNREFUSED, "is a directory, not gpushmd's socket");
  snprintf(path, sizeof path, "%s/file", dir);
  CHECK(close(open(path, O_CREAT | O_WRONLY, 0644)) == 0);
  expect_connect_error(path, ECONNREFUSED, "is a regular file, not gpushmd's socket");
  snprintf(path, sizeof path, "%s/file/gpushmd.sock", dir);
  expect_connect_error(path, ENOTDIR, "a part of the path is not a directory");
  snprintf(path, sizeof path, "%s/stale.sock", dir);
  make_stale_socket(path, 0660, 0);
  expect_connect_error(path, ECONNREFUSED, "nothing listens on");
  expect_connect_error(path, ECONNREFUSED, "start gpushmd");
  snprintf(path, sizeof path, "%s/private", dir);
  CHECK(mkdir(path, 0700) == 0);
  snprintf(path, sizeof path, "%s/stale.sock", dir);
  pid = fork_as(65534, 65534);
  if (pid == 0) {
    char priv[300];
    expect_connect_error(path, EACCES, "and this process (uid 65534) is not in group root: "
                         "join it");
    snprintf(priv, sizeof priv, "%s/private/gpushmd.sock", dir);
    expect_connect_error(priv, EACCES, "may not enter directory");
    _exit(0);
  }
  check_child(pid);
  snprintf(path, sizeof path, "%s/private", dir);
  CHECK(rmdir(path) == 0);
  snprintf(path, sizeof path, "%s/stale.sock", dir);
  CHECK(unlink(path) == 0);
  snprintf(path, sizeof path, "%s/file", dir);
  CHECK(unlink(path) == 0 && rmdir(dir) == 0);
}

int main(void)
{
  if (geteuid() != 0) {
    test_log("needs root to act as other uids; skipping");
    return TEST_SKIP;
  }
  test_limits();
  test_fair_share();
  test_socket_access();
  test_stop_during_start();
  test_hello_deadline();
  test_client_timeouts();
  test_connect_timeout();
  test_connect_errors();
  return 0;
}
