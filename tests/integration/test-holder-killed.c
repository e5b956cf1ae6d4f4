/* A holder killed with SIGKILL: the daemon releases its references when the socket
 * closes and frees memory nobody else holds. */
#include "config.h"
#include "harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <string.h>
#include <unistd.h>

static struct test_daemon d;

static int all_freed(const struct test_daemon *daemon, void *baseline_fds)
{
  gpushm_stats_t s;
  daemon_stats(daemon, &s);
  return s.buffers == 0 && s.bytes_allocated == 0 && s.clients == 1 /* this query */ &&
         s.open_fds == *(uint32_t *)baseline_fds;
}

int main(void)
{
  gpushm_stats_t base;
  gpushm_t *conn;
  gpushm_buffer_t *buf;
  gpushm_buffer_info_t info, *infos;
  size_t n;
  int ready[2];
  char c;
  pid_t victims[3];

  daemon_start(&d, NULL);
  daemon_stats(&d, &base);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "victim", 8u << 20, NULL, &buf));
  CHECK(pipe(ready) == 0);

  for (int i = 0; i < 3; i++) {
    victims[i] = fork();
    CHECK(victims[i] >= 0);
    if (victims[i] == 0) {
      gpushm_t *mine = daemon_connect(&d);
      gpushm_buffer_t *b;
      CHECK_OK(gpushm_buffer_open(mine, "victim", 0, &b));
      ((volatile char *)gpushm_buffer_ptr(b))[i] = 1; /* really mapped */
      CHECK(write(ready[1], "r", 1) == 1);
      for (;;)
        pause();
    }
  }
  for (int i = 0; i < 3; i++)
    CHECK(read(ready[0], &c, 1) == 1);

  /* The holders are listed with their pids. */
  CHECK_OK(gpushm_list(conn, &infos, &n));
  CHECK(n == 1 && infos[0].holders_total == 4 && infos[0].n_holders == 4);
  for (int i = 0; i < 3; i++) {
    int seen = 0;
    for (size_t h = 0; h < infos[0].n_holders; h++)
      seen |= infos[0].holders[h].pid == (uint32_t)victims[i];
    CHECK(seen);
  }
  gpushm_buffer_info_free(infos, n);

  /* Unlink and close ours: the victims alone keep it alive. */
  CHECK_OK(gpushm_unlink(conn, "victim"));
  CHECK_OK(gpushm_buffer_close(buf));
  CHECK(find_buffer(conn, "victim", &info) == 0 && info.refs == 3 && !info.linked);
  gpushm_disconnect(conn);

  for (int i = 0; i < 3; i++) {
    int status;
    CHECK(kill(victims[i], SIGKILL) == 0);
    CHECK(waitpid(victims[i], &status, 0) == victims[i]);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
  CHECK(wait_until(all_freed, &d, &base.open_fds));
  daemon_stop(&d);
  return 0;
}
