/* SPDX-License-Identifier: MIT */
/* Spinning instead of sleeping: a client's $GPUSHM_POLL_US and gpushmd's --busy-poll.
 * Each must keep every guarantee of the sleeping path (replies that come late, the
 * timeout of a daemon that stopped), refuse values past GPUSHM_LIMIT_POLL_US, and
 * spin only while asked: gpushmd does not sleep between requests within its window,
 * takes no CPU once requests stop, and sleeps again after a reload to 0. */
#include "config.h"
#include "gpushm_limits.h"
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Requests spaced closer than the window keep a polling gpushmd spinning throughout. */
#define PING_GAP_MS 5
#define PINGS 60

/* The process's CPU time so far (user + system). */
static double cpu_ms(pid_t pid)
{
  char path[64], buf[1024], *p;
  unsigned long utime, stime;
  FILE *f;
  size_t n;

  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  CHECK((f = fopen(path, "r")) != NULL);
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  CHECK((p = strrchr(buf, ')')) != NULL); /* the command may hold spaces */
  CHECK(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
               &stime) == 2);
  return (double)(utime + stime) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

/* How often the process has gone to sleep (/proc/PID/status): a spinning loop that
 * yields is switched out runnable, which counts as involuntary; one that waits in
 * epoll_wait, as voluntary.  Unlike CPU time, this does not depend on how busy the
 * machine is. */
static unsigned long sleeps(pid_t pid)
{
  char path[64], line[256];
  unsigned long n = 0;
  FILE *f;

  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  CHECK((f = fopen(path, "r")) != NULL);
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "voluntary_ctxt_switches: %lu", &n) == 1)
      break;
  fclose(f);
  return n;
}

/* How often gpushmd slept over PINGS pings PING_GAP_MS apart. */
static unsigned long sleeps_while_pinging(const struct test_daemon *d, gpushm_t *conn)
{
  unsigned long before = sleeps(d->pid);

  for (int i = 0; i < PINGS; i++) {
    CHECK_OK(gpushm_ping(conn));
    test_sleep_ms(PING_GAP_MS);
  }
  return sleeps(d->pid) - before;
}

static double cpu_while_idle(const struct test_daemon *d, unsigned ms)
{
  double before = cpu_ms(d->pid);

  test_sleep_ms(ms);
  return cpu_ms(d->pid) - before;
}

static void write_config(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");

  CHECK(f != NULL);
  CHECK(fputs(text, f) >= 0);
  CHECK(fclose(f) == 0);
}

/* Spins between requests that come within the window, sleeps once they stop, and a
 * reload to 0 stops the spinning; past the limit the option is refused. */
static void test_daemon_busy_poll(void)
{
  char conf[] = "/tmp/gpushm-test-poll.XXXXXX", arg[64], line[64];
  struct test_daemon d = { 0 };
  unsigned long busy, reloaded;
  double idle;
  gpushm_t *conn;
  int fd = mkstemp(conf);

  CHECK(fd >= 0);
  close(fd);
  snprintf(line, sizeof line, "busy-poll = %u\n", GPUSHM_LIMIT_POLL_US);
  write_config(conf, line);
  snprintf(arg, sizeof arg, "--config=%s", conf);
  daemon_start(&d, arg, NULL);
  conn = daemon_connect(&d);
  busy = sleeps_while_pinging(&d, conn);
  test_sleep_ms(GPUSHM_LIMIT_POLL_US / 1000 * 5); /* the window, passed */
  idle = cpu_while_idle(&d, 300);
  write_config(conf, "busy-poll = 0\n");
  CHECK(kill(d.pid, SIGHUP) == 0);
  CHECK_OK(gpushm_ping(conn)); /* (the reload is done before the next request is read) */
  test_sleep_ms(100);
  reloaded = sleeps_while_pinging(&d, conn);
  test_log("gpushmd over %d pings %d ms apart slept %lu times polling, %lu after a reload to "
           "0; took %.0f ms of CPU in 300 ms idle after the window", PINGS, PING_GAP_MS, busy,
           reloaded, idle);
  /* Polling, the 10 ms window outlasts each gap: it sleeps only where this process's
   * 5 ms sleep took twice as long (a loaded machine), which a few may.  Sleeping, it
   * sleeps at least once a ping.  Once the window has passed, it takes no CPU. */
  CHECK(busy <= PINGS / 4);
  CHECK(reloaded >= PINGS);
  CHECK(idle <= 60);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  CHECK(unlink(conf) == 0);

  snprintf(arg, sizeof arg, "--busy-poll=%u", GPUSHM_LIMIT_POLL_US + 1);
  {
    const char *out = test_log_file("busy-poll-over");
    CHECK(daemon_run(out, arg, "--socket", "/tmp/gpushm-test-poll-unused.sock", NULL) == 2);
    snprintf(line, sizeof line, "expected microseconds, 0 to %u", GPUSHM_LIMIT_POLL_US);
    CHECK(file_contains(out, line));
  }
}

static void *resume_later(void *arg)
{
  const struct test_daemon *d = arg;

  test_sleep_ms(100);
  CHECK(kill(d->pid, SIGCONT) == 0);
  return NULL;
}

/* $GPUSHM_POLL_US: values past the limit or not numbers fail the connect and say why;
 * a reply later than the window is still taken, and a daemon that stopped still times
 * out. */
static void test_client_poll(void)
{
  static const char *const bad[] = { "x", "-1", "12abc", "10001", "99999999999999999999" };
  struct test_daemon d = { 0 };
  gpushm_buffer_t *b, *seen;
  gpushm_t *conn;
  pthread_t resumer;
  uint64_t start;
  char text[32];

  daemon_start(&d, NULL);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("GPUSHM_POLL_US", bad[i], 1);
    CHECK_ERR(gpushm_connect(d.socket, "poll", &conn), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), "GPUSHM_POLL_US=") != NULL);
    CHECK(strstr(gpushm_last_error_message(), "0 to 10000") != NULL);
  }
  snprintf(text, sizeof text, "%u", GPUSHM_LIMIT_POLL_US);
  setenv("GPUSHM_POLL_US", text, 1);
  conn = daemon_connect(&d);
  /* the calls work as ever */
  CHECK_OK(gpushm_buffer_create(conn, "polled", 4096, NULL, &b));
  CHECK_OK(gpushm_buffer_open(conn, "polled", GPUSHM_OPEN_READONLY, &seen));
  CHECK_OK(gpushm_buffer_close(seen));
  CHECK_OK(gpushm_buffer_close_unlink(b));
  gpushm_disconnect(conn);

  /* a reply that comes after the window: the client sleeps for it as without polling */
  setenv("GPUSHM_POLL_US", "10", 1);
  conn = daemon_connect(&d);
  CHECK(kill(d.pid, SIGSTOP) == 0);
  CHECK(pthread_create(&resumer, NULL, resume_later, &d) == 0);
  start = test_now_ms();
  CHECK_OK(gpushm_ping(conn));
  CHECK(test_now_ms() - start >= 80);
  CHECK(pthread_join(resumer, NULL) == 0);

  /* nor does polling outlast the timeout */
  setenv("GPUSHM_POLL_US", text, 1);
  gpushm_disconnect(conn);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_set_timeout(conn, 300));
  CHECK(kill(d.pid, SIGSTOP) == 0);
  start = test_now_ms();
  CHECK_ERR(gpushm_ping(conn), GPUSHM_E_TIMEOUT);
  CHECK(test_now_ms() - start >= 250 && test_now_ms() - start < 3000);
  CHECK(kill(d.pid, SIGCONT) == 0);
  gpushm_disconnect(conn);
  unsetenv("GPUSHM_POLL_US");
  daemon_stop(&d);
}

int main(void)
{
  test_client_poll();
  test_daemon_busy_poll();
  return 0;
}
