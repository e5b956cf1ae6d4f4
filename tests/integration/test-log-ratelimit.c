/* SPDX-License-Identifier: MIT */
/* A client that makes the daemon warn on every request (here: creates past its uid's
 * buffer quota) gets GPUSHM_LIMIT_CLIENT_WARNINGS_PER_INTERVAL lines, then one line
 * saying how many more there were; another client's warnings still show, and the
 * daemon keeps serving.  Many connections together get no more than
 * GPUSHM_LIMIT_ALL_CLIENT_WARNINGS_PER_INTERVAL lines, and gpushmd says, as it stops,
 * how many it left out. */
#include "config.h"
#include "harness.h"
#include "gpushm_limits.h"

#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FLOOD 100u

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

struct summary {
  const char *log;
  char needle[64];
  unsigned long long suppressed; /* summed over every summary line for the client */
  unsigned lines;
};

static void read_summaries(struct summary *s)
{
  char line[4096];
  FILE *f = fopen(s->log, "r");

  s->suppressed = 0;
  s->lines = 0;
  if (!f)
    return;
  while (fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "suppressed ");
    unsigned long long n;
    if (p && strstr(line, s->needle) && sscanf(p, "suppressed %llu warnings", &n) == 1) {
      s->suppressed += n;
      s->lines++;
    }
  }
  fclose(f);
}

static int summary_written(const struct test_daemon *d, void *arg)
{
  (void)d;
  read_summaries(arg);
  return ((struct summary *)arg)->lines > 0;
}

#define CONNECTIONS 30u

/* CONNECTIONS connections, each within its own budget, together past the shared one. */
static void all_connections(const char *log)
{
  const unsigned attempts = CONNECTIONS * GPUSHM_LIMIT_CLIENT_WARNINGS_PER_INTERVAL;
  struct test_daemon d = { 0 };
  gpushm_t *conns[CONNECTIONS], *owner;
  gpushm_buffer_t *keep, *b;
  struct summary global = { .log = log, .needle = "from all connections together" };
  unsigned logged;
  double started;

  _Static_assert(CONNECTIONS * GPUSHM_LIMIT_CLIENT_WARNINGS_PER_INTERVAL >
                     GPUSHM_LIMIT_ALL_CLIENT_WARNINGS_PER_INTERVAL,
                 "the connections together must cross the shared budget");
  d.log_path = log;
  daemon_start(&d, "--max-buffers-per-uid", "1", NULL);
  owner = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(owner, "keep", 4096, NULL, &keep));
  for (unsigned i = 0; i < CONNECTIONS; i++)
    conns[i] = daemon_connect(&d);
  started = now_s();
  for (unsigned i = 0; i < CONNECTIONS; i++)
    for (unsigned j = 0; j < GPUSHM_LIMIT_CLIENT_WARNINGS_PER_INTERVAL; j++)
      CHECK_ERR(gpushm_buffer_create(conns[i], "over", 4096, NULL, &b), GPUSHM_E_LIMIT);
  CHECK_OK(gpushm_ping(owner)); /* still served */
  for (unsigned i = 0; i < CONNECTIONS; i++)
    gpushm_disconnect(conns[i]);
  CHECK_OK(gpushm_buffer_close(keep));
  gpushm_disconnect(owner);
  daemon_stop(&d); /* says what the shared budget left out */

  logged = file_count_lines(log, "): create refused");
  read_summaries(&global);
  test_log("%u connections, %u refusals: %u logged, %llu suppressed in %u shared summaries",
           CONNECTIONS, attempts, logged, global.suppressed, global.lines);
  CHECK(global.lines >= 1);
  /* each connection stayed within its own budget: the shared one left out the rest */
  CHECK(file_count_lines(log, "warnings from client ") == 0);
  CHECK(logged + global.suppressed == attempts);
  if (now_s() - started < GPUSHM_LIMIT_CLIENT_WARNING_INTERVAL_MS / 1000.0)
    CHECK(logged == GPUSHM_LIMIT_ALL_CLIENT_WARNINGS_PER_INTERVAL);
}

int main(void)
{
  struct test_daemon d = { 0 };
  char dir[] = "/tmp/gpushm-log.XXXXXX", log[64], pidtext[48];
  gpushm_buffer_t *keep, *b;
  struct summary sum;
  unsigned warned;
  gpushm_t *conn;
  double started;
  pid_t child;

  CHECK(mkdtemp(dir) != NULL);
  snprintf(log, sizeof log, "%s/gpushmd.log", dir);
  d.log_path = log;
  daemon_start(&d, "--max-buffers-per-uid", "1", NULL);

  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "keep", 4096, NULL, &keep));
  started = now_s();
  for (unsigned i = 0; i < FLOOD; i++)
    CHECK_ERR(gpushm_buffer_create(conn, "over", 4096, NULL, &b), GPUSHM_E_LIMIT);

  /* Another connection (another process, so its lines can be told apart) has a budget
   * of its own: the flood above does not silence it. */
  child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    gpushm_t *other = daemon_connect(&d);
    CHECK_ERR(gpushm_buffer_create(other, "other", 4096, NULL, &b), GPUSHM_E_LIMIT);
    gpushm_disconnect(other);
    _exit(0);
  }
  check_child(child);
  CHECK_OK(gpushm_ping(conn)); /* still served */
  CHECK_OK(gpushm_buffer_close(keep));
  gpushm_disconnect(conn);

  /* The summary comes as the connection ends, which the daemon sees a little later. */
  memset(&sum, 0, sizeof sum);
  sum.log = log;
  snprintf(sum.needle, sizeof sum.needle, "(pid %d, uid 0)", (int)getpid());
  CHECK(wait_until(summary_written, &d, &sum));

  snprintf(pidtext, sizeof pidtext, "(pid %d, uid 0): create refused", (int)getpid());
  warned = file_count_lines(log, pidtext);
  test_log("%u warnings logged, %llu suppressed in %u summaries", warned, sum.suppressed,
           sum.lines);
  /* None lost, none doubled. */
  CHECK(warned + sum.suppressed == FLOOD);
  CHECK(warned >= GPUSHM_LIMIT_CLIENT_WARNINGS_PER_INTERVAL);
  if (now_s() - started < GPUSHM_LIMIT_CLIENT_WARNING_INTERVAL_MS / 1000.0) {
    /* All within one interval: exactly the budget, one summary. */
    CHECK(warned == GPUSHM_LIMIT_CLIENT_WARNINGS_PER_INTERVAL);
    CHECK(sum.lines == 1);
  }
  CHECK(file_count_lines(log, "uid 0 already has 1 buffers") == warned + 1);

  snprintf(pidtext, sizeof pidtext, "(pid %d, uid 0): create refused", (int)child);
  CHECK(file_count_lines(log, pidtext) == 1);
  snprintf(sum.needle, sizeof sum.needle, "(pid %d, uid 0)", (int)child);
  read_summaries(&sum);
  CHECK(sum.lines == 0);

  /* A fresh connection is served and warned as usual. */
  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_buffer_create(conn, "again", 4096, NULL, &b), GPUSHM_E_LIMIT);
  CHECK_OK(gpushm_unlink(conn, "keep"));
  CHECK_OK(gpushm_buffer_create(conn, "again", 4096, NULL, &b));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);

  CHECK(unlink(log) == 0);
  all_connections(log);
  CHECK(unlink(log) == 0 && rmdir(dir) == 0);
  return 0;
}
