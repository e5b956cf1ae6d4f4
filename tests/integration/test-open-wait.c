/* SPDX-License-Identifier: MIT */
/* Opens that wait for their name (gpushm_open_opts_t.wait_ms): one made during the wait
 * is opened then, and only then; one never made ends in NOENT at the deadline, counted
 * as a wait's end and not as a failed request; a name uid 65534 may not open is no
 * reason for its wait to end early (nothing tells it the name was made); the limit is
 * refused on both sides; a waiter killed mid-wait leaves gpushmd serving; and a wait
 * "for ever" is waits one after the other. */
#include "config.h"
#include "gpushm_limits.h"
#include "harness.h"

#include <limits.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOBODY 65534

static struct test_daemon d;

static uint64_t request_errors(void)
{
  gpushm_stats_t *st = daemon_stats(&d);
  uint64_t n = gpushm_stats_request_errors(st);
  gpushm_stats_free(st);
  return n;
}

static int open_waiting(gpushm_t *conn, const char *name, int wait_ms, gpushm_buffer_t **out)
{
  gpushm_open_opts_t opts;

  gpushm_open_opts_init(&opts);
  opts.wait_ms = wait_ms;
  return gpushm_buffer_open_ex(conn, name, 0, &opts, out);
}

struct creator {
  const char *name;
  unsigned after_ms;
  uint32_t mode;
};

/* Makes the name after a while, on a connection of its own. */
static void *create_later(void *arg)
{
  const struct creator *c = arg;
  gpushm_create_opts_t opts;
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b;

  test_sleep_ms(c->after_ms);
  gpushm_create_opts_init(&opts);
  opts.mode = c->mode;
  CHECK_OK(gpushm_buffer_create(conn, c->name, 4096, &opts, &b));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return NULL;
}

static void test_made_during_the_wait(gpushm_t *conn)
{
  struct creator c = { "wait-made", 300, 0600 };
  uint64_t errors = request_errors(), start;
  gpushm_buffer_t *b;
  pthread_t t;

  CHECK(pthread_create(&t, NULL, create_later, &c) == 0);
  start = test_now_ms();
  CHECK_OK(open_waiting(conn, "wait-made", 10000, &b));
  CHECK(test_now_ms() - start >= 250 && test_now_ms() - start < 5000);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(gpushm_buffer_size(b) == 4096);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(daemon_metric(&d, "gpushm_open_waits_total") == 1);
  CHECK(daemon_metric(&d, "gpushm_open_wait_timeouts_total") == 0);
  CHECK(request_errors() == errors);
  /* a name that is there is opened at once, waiting or not */
  start = test_now_ms();
  CHECK_OK(open_waiting(conn, "wait-made", 10000, &b));
  CHECK(test_now_ms() - start < 1000);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "wait-made"));
  CHECK(daemon_metric(&d, "gpushm_open_waits_total") == 1);
}

static void test_never_made(gpushm_t *conn)
{
  uint64_t errors = request_errors(), start = test_now_ms();
  gpushm_buffer_t *b;

  CHECK_ERR(open_waiting(conn, "wait-never", 300, &b), GPUSHM_E_NOENT);
  CHECK(test_now_ms() - start >= 290 && test_now_ms() - start < 3000);
  /* (to a uid that may not see every buffer: "... 'wait-never' that uid U may open was
   * made within 300 ms ...") */
  CHECK(strstr(gpushm_last_error_message(), "no buffer named 'wait-never'") != NULL);
  CHECK(strstr(gpushm_last_error_message(), "was made within 300 ms") != NULL);
  CHECK(daemon_metric(&d, "gpushm_open_wait_timeouts_total") == 1);
  CHECK(request_errors() == errors); /* a wait's end, not a failure */
  CHECK_OK(gpushm_ping(conn));       /* and the connection serves on */
}

/* uid 65534 waits for a name root makes 0600 during its wait: it is not told, and its
 * wait ends at its deadline with the answer of a name never made. */
static void test_not_for_this_uid(void)
{
  struct creator c = { "wait-roots", 200, 0600 };
  int report[2];
  pthread_t t;
  pid_t pid;

  CHECK(pipe(report) == 0);
  pid = fork_as(NOBODY, NOBODY);
  if (pid == 0) {
    gpushm_t *conn;
    gpushm_buffer_t *b;
    uint64_t start;
    int r, took;
    CHECK_OK(gpushm_connect(d.socket, "waiter", &conn));
    start = test_now_ms();
    r = open_waiting(conn, "wait-roots", 1000, &b);
    took = (int)(test_now_ms() - start);
    CHECK(write(report[1], &r, sizeof r) == sizeof r);
    CHECK(write(report[1], &took, sizeof took) == sizeof took);
    /* in a plain open's words: the same whether a name it may not see was made or not */
    CHECK(r != GPUSHM_E_NOENT ||
          strstr(gpushm_last_error_message(), "no buffer named 'wait-roots' that uid 65534 "
                 "may open was made within 1000 ms (one it may not open is not shown "
                 "either)") != NULL);
    _exit(0);
  }
  CHECK(pthread_create(&t, NULL, create_later, &c) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  {
    int r, took;
    CHECK(read(report[0], &r, sizeof r) == sizeof r);
    CHECK(read(report[0], &took, sizeof took) == sizeof took);
    if (r != GPUSHM_E_NOENT || took < 950) {
      fprintf(stderr, "uid %d's wait for root's 0600 name: %d after %d ms\n", NOBODY, r, took);
      exit(1);
    }
  }
  check_child(pid);
  close(report[0]);
  close(report[1]);
  {
    gpushm_t *conn = daemon_connect(&d);
    CHECK_OK(gpushm_unlink(conn, "wait-roots"));
    gpushm_disconnect(conn);
  }
}

static void test_limits(gpushm_t *conn)
{
  gpushm_open_opts_t opts;
  gpushm_buffer_t *b;

  gpushm_open_opts_init(&opts);
  opts.wait_ms = (int32_t)GPUSHM_LIMIT_OPEN_WAIT_MS + 1;
  CHECK_ERR(gpushm_buffer_open_ex(conn, "wait-limit", 0, &opts, &b), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_LIMIT_OPEN_WAIT_MS") != NULL);
  opts.wait_ms = 100;
  CHECK_ERR(gpushm_buffer_open_ex(conn, NULL, 7, &opts, &b), GPUSHM_E_INVAL);
  /* the limit itself is a wait like another */
  opts.wait_ms = (int32_t)GPUSHM_LIMIT_OPEN_WAIT_MS;
  {
    struct creator c = { "wait-limit", 100, 0600 };
    pthread_t t;
    CHECK(pthread_create(&t, NULL, create_later, &c) == 0);
    CHECK_OK(gpushm_buffer_open_ex(conn, "wait-limit", 0, &opts, &b));
    CHECK(pthread_join(t, NULL) == 0);
  }
  CHECK_OK(gpushm_buffer_close_unlink(b));
}

/* A waiter killed mid-wait: gpushmd lets its wait go, and the name's making later tells
 * nobody who is gone. */
static uint32_t metric_clients(void)
{
  gpushm_stats_t *st = daemon_stats(&d);
  uint32_t n = gpushm_stats_clients(st);
  gpushm_stats_free(st);
  return n;
}

static int clients_are(const struct test_daemon *dd, void *expected)
{
  (void)dd;
  return metric_clients() == *(uint32_t *)expected;
}

static void test_waiter_killed(void)
{
  uint32_t clients, expected;
  gpushm_t *conn;
  gpushm_buffer_t *b;
  pid_t pid = fork();

  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *c;
    CHECK_OK(gpushm_connect(d.socket, "doomed", &c));
    open_waiting(c, "wait-killed", 30000, &b);
    _exit(3);
  }
  test_sleep_ms(200);
  clients = metric_clients();
  CHECK(kill(pid, SIGKILL) == 0);
  CHECK(waitpid(pid, NULL, 0) == pid);
  /* its connection ends now, while its wait has 30 s to go: what it held goes */
  expected = clients - 1;
  CHECK(wait_until(clients_are, &d, &expected));
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "wait-killed", 4096, NULL, &b));
  CHECK_OK(gpushm_ping(conn));
  CHECK_OK(gpushm_buffer_close_unlink(b));
  gpushm_disconnect(conn);
}

static void test_for_ever(gpushm_t *conn)
{
  struct creator c = { "wait-ever", 200, 0600 };
  gpushm_buffer_t *b;
  pthread_t t;

  CHECK(pthread_create(&t, NULL, create_later, &c) == 0);
  CHECK_OK(open_waiting(conn, "wait-ever", GPUSHM_TIMEOUT_INFINITE, &b));
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_OK(gpushm_buffer_close_unlink(b));
}

/* The longest request timeout a connection takes, and a wait on top: the reply's deadline
 * is their sum, which an int does not hold (UBSan's build fails a test that overflows). */
static void test_wait_past_a_long_timeout(void)
{
  gpushm_t *conn = daemon_connect(&d);
  uint64_t start = test_now_ms();
  gpushm_buffer_t *b;

  CHECK_OK(gpushm_set_timeout(conn, INT_MAX - 100));
  CHECK_ERR(open_waiting(conn, "wait-long-timeout", 200, &b), GPUSHM_E_NOENT);
  CHECK(test_now_ms() - start >= 190 && test_now_ms() - start < 3000);
  CHECK_OK(gpushm_ping(conn)); /* the connection's own timeout back in place */
  gpushm_disconnect(conn);
}

int main(void)
{
  gpushm_t *conn;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  CHECK(gpushm_daemon_has(conn, GPUSHM_FEATURE_OPEN_WAIT));
  test_made_during_the_wait(conn);
  test_never_made(conn);
  if (geteuid() == 0)
    test_not_for_this_uid();
  else
    test_log("not root: uid %d's wait not tested", NOBODY);
  test_limits(conn);
  test_waiter_killed();
  test_for_ever(conn);
  test_wait_past_a_long_timeout();
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}
