/* SPDX-License-Identifier: MIT */
/* Issue 36, item 5: uid 65534 asks, from many connections at once, for what costs the
 * daemon in proportion to what it holds (stats, list, clients).  Its requests together
 * get GPUSHM_LIMIT_COSTLY_SHARE_PERCENT of the loop: past it they wait their turn,
 * every one answered, and gpushm_requests_deferred_total counts them.  An admin's never
 * wait, and a flooder killed with requests waiting leaves nothing behind.  A
 * non-admin's open_fds is a count at most GPUSHM_LIMIT_OPEN_FDS_AGE_MS old.  What the
 * share buys root (its ping under the flood with 100,000 buffers) is gpushm-bench's
 * row 8, not a timed assertion here.  Needs root to act as another uid. */
#include "config.h"
#include "harness.h"
#include "gpushm-admin.h"
#include "gpushm_limits.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOBODY 65534
#define FLOODERS 32
#define FLOOD_MS 1500
#define BUFFERS 200

static struct test_daemon d;

struct flooder {
  gpushm_t *conn;
  atomic_bool *stop;
  unsigned long answered;
  int error;
};

/* stats, a list of all it may see, the clients it may see: in turn, until told */
static void *flood(void *arg)
{
  struct flooder *f = arg;

  for (unsigned i = 0; !atomic_load(f->stop); i++) {
    gpushm_stats_t *st;
    gpushm_buffer_list_t *l;
    gpushm_client_list_t *c;
    if (i % 3 == 0 && (f->error = gpushm_stats(f->conn, &st)) == 0) {
      f->error = gpushm_stats_buffers(st) >= BUFFERS ? 0 : -1000;
      gpushm_stats_free(st);
    } else if (i % 3 == 1 && (f->error = gpushm_list(f->conn, 0, &l)) == 0) {
      f->error = gpushm_buffer_list_count(l) == BUFFERS ? 0 : -1001;
      gpushm_buffer_list_free(l);
    } else if (i % 3 == 2 && (f->error = gpushm_clients(f->conn, &c)) == 0) {
      gpushm_client_list_free(c);
    }
    if (f->error < 0)
      break;
    f->answered++;
  }
  return NULL;
}

/* FLOODERS connections of this process flood for ms milliseconds; returns how many
 * requests were answered, every one of them right. */
static unsigned long flood_for(unsigned ms)
{
  static struct flooder f[FLOODERS];
  pthread_t th[FLOODERS];
  atomic_bool stop = false;
  unsigned long answered = 0;
  struct timespec pause = { ms / 1000, (long)(ms % 1000) * 1000000 };

  for (unsigned i = 0; i < FLOODERS; i++) {
    f[i] = (struct flooder){ .stop = &stop };
    CHECK_OK(gpushm_connect(d.socket, "costly-flood", &f[i].conn));
  }
  for (unsigned i = 0; i < FLOODERS; i++)
    CHECK(pthread_create(&th[i], NULL, flood, &f[i]) == 0);
  nanosleep(&pause, NULL);
  atomic_store(&stop, true);
  for (unsigned i = 0; i < FLOODERS; i++) {
    CHECK(pthread_join(th[i], NULL) == 0);
    if (f[i].error < 0)
      fprintf(stderr, "flooder %u: %d (%s)\n", i, f[i].error, gpushm_last_error_message());
    CHECK(f[i].error == 0);
    answered += f[i].answered;
    gpushm_disconnect(f[i].conn);
  }
  return answered;
}

/* uid 65534 past its share: its requests wait, all are answered, root's go on. */
static void test_nonadmin_waits(gpushm_t *conn)
{
  uint64_t before = daemon_metric(&d, "gpushm_requests_deferred_total");
  unsigned long root_pings = 0;
  int status, out[2];
  unsigned long answered;
  pid_t pid;

  CHECK(pipe(out) == 0);
  pid = fork_as(NOBODY, NOBODY);
  if (pid == 0) {
    close(out[0]);
    answered = flood_for(FLOOD_MS);
    CHECK(write(out[1], &answered, sizeof answered) == (ssize_t)sizeof answered);
    _exit(0);
  }
  close(out[1]);
  /* root meanwhile: its pings and its own stats are answered throughout */
  for (;;) {
    gpushm_stats_t *st;
    int r = waitpid(pid, &status, WNOHANG);
    CHECK(r >= 0);
    if (r == pid)
      break;
    CHECK_OK(gpushm_ping(conn));
    CHECK_OK(gpushm_stats(conn, &st));
    gpushm_stats_free(st);
    root_pings++;
  }
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(read(out[0], &answered, sizeof answered) == (ssize_t)sizeof answered);
  close(out[0]);
  CHECK(answered > 0 && root_pings > 0);
  CHECK(daemon_metric(&d, "gpushm_requests_deferred_total") > before);
  test_log("uid 65534's flood from %d connections: %lu requests answered, %llu waited their "
           "turn; root's %lu pings and stats answered meanwhile", FLOODERS, answered,
           (unsigned long long)(daemon_metric(&d, "gpushm_requests_deferred_total") - before),
           root_pings);
}

/* Admins never wait: the same flood from root defers nothing. */
static void test_admin_exempt(void)
{
  uint64_t before = daemon_metric(&d, "gpushm_requests_deferred_total");
  unsigned long answered = flood_for(FLOOD_MS / 3);

  CHECK(answered > 0);
  CHECK(daemon_metric(&d, "gpushm_requests_deferred_total") == before);
  test_log("root's flood: %lu requests answered, none deferred", answered);
}

/* A flooder killed while its requests wait: the daemon serves on, nobody is left. */
static void test_killed_while_waiting(gpushm_t *conn)
{
  struct timespec pause = { 0, 300000000 };
  gpushm_stats_t *st;
  int status;
  pid_t pid = fork_as(NOBODY, NOBODY);

  if (pid == 0) {
    flood_for(60000);
    _exit(0);
  }
  nanosleep(&pause, NULL);
  CHECK(kill(pid, SIGKILL) == 0);
  CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
  CHECK_OK(gpushm_ping(conn));
  for (int i = 0; i < 200; i++) {
    struct timespec tick = { 0, 10000000 };
    CHECK_OK(gpushm_stats(conn, &st));
    status = (int)gpushm_stats_clients(st);
    gpushm_stats_free(st);
    if (status == 1)
      break;
    nanosleep(&tick, NULL);
  }
  CHECK(status == 1);
  test_log("a flooder killed mid-flood: its %d connections gone, the daemon serving", FLOODERS);
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint32_t open_fds(gpushm_t *conn)
{
  gpushm_stats_t *st;
  uint32_t n;

  CHECK_OK(gpushm_stats(conn, &st));
  n = gpushm_stats_open_fds(st);
  gpushm_stats_free(st);
  return n;
}

/* A non-admin's open_fds is a count at most GPUSHM_LIMIT_OPEN_FDS_AGE_MS old (counting
 * walks /proc/self/fd); past that age it is counted again.  An admin's is exact. */
static void test_open_fds_age(gpushm_t *root)
{
  pid_t pid = fork_as(NOBODY, NOBODY);

  if (pid == 0) {
    struct timespec age = { 0, (GPUSHM_LIMIT_OPEN_FDS_AGE_MS + 100) % 1000 * 1000000L };
    gpushm_create_opts_t opts;
    gpushm_buffer_t *b;
    gpushm_t *c;
    uint32_t before, stale, later;
    double t0;

    age.tv_sec = (GPUSHM_LIMIT_OPEN_FDS_AGE_MS + 100) / 1000;
    CHECK_OK(gpushm_connect(d.socket, "fds-age", &c));
    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_HOST;
    nanosleep(&age, NULL); /* so that this first read counts them */
    t0 = now_s();
    before = open_fds(c);
    /* past the carve limit: an allocation, and an fd in gpushmd, of its own */
    CHECK_OK(gpushm_buffer_create(c, "fds-age", 2u << 20, &opts, &b));
    stale = open_fds(c);
    if (now_s() - t0 < GPUSHM_LIMIT_OPEN_FDS_AGE_MS / 1000.0 * 0.9)
      CHECK(stale == before);
    nanosleep(&age, NULL);
    later = open_fds(c);
    CHECK(later > before);
    CHECK_OK(gpushm_buffer_close(b));
    gpushm_disconnect(c);
    _exit(0);
  }
  check_child(pid);
  CHECK(open_fds(root) > 0);
  test_log("uid 65534's open_fds: the count of up to %u ms ago, then counted again",
           GPUSHM_LIMIT_OPEN_FDS_AGE_MS);
}

int main(void)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  gpushm_t *conn;
  char name[32];

  if (geteuid() != 0) {
    fprintf(stderr, "SKIP: needs root to act as uid %d\n", NOBODY);
    return TEST_SKIP;
  }
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  gpushm_create_opts_init(&opts);
  opts.mode = 0644; /* uid 65534 lists them all */
  for (unsigned i = 0; i < BUFFERS; i++) {
    snprintf(name, sizeof name, "costly-%u", i);
    CHECK_OK(gpushm_buffer_create(conn, name, 4096, &opts, &b));
    CHECK_OK(gpushm_buffer_close(b));
  }
  test_nonadmin_waits(conn);
  test_admin_exempt();
  test_killed_while_waiting(conn);
  test_open_fds_age(conn);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}
