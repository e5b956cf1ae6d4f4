/* SPDX-License-Identifier: MIT */
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
  gpushm_stats_t *s = daemon_stats(daemon);
  int freed = gpushm_stats_buffers(s) == 0 && gpushm_stats_bytes_allocated(s) == 0 &&
              gpushm_stats_clients(s) == 1 /* this query */ &&
              gpushm_stats_open_fds(s) == *(uint32_t *)baseline_fds;
  gpushm_stats_free(s);
  return freed;
}

int main(void)
{
  gpushm_stats_t *base;
  uint32_t base_fds;
  gpushm_t *conn;
  gpushm_buffer_t *buf;
  const gpushm_buffer_info_t *info;
  gpushm_buffer_list_t *list;
  int ready[2];
  char c;
  pid_t victims[3];

  daemon_start(&d, NULL);
  base = daemon_stats(&d);
  base_fds = gpushm_stats_open_fds(base);
  gpushm_stats_free(base);
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
  CHECK_OK(gpushm_list(conn, 0, &list));
  CHECK(gpushm_buffer_list_count(list) == 1 && (info = gpushm_buffer_list_get(list, 0)));
  CHECK(gpushm_buffer_info_holders_total(info) == 4 && gpushm_buffer_info_holder_count(info) == 4);
  CHECK(gpushm_buffer_info_holder(info, 4) == NULL && gpushm_buffer_list_get(list, 1) == NULL);
  for (int i = 0; i < 3; i++) {
    int seen = 0;
    for (size_t h = 0; h < gpushm_buffer_info_holder_count(info); h++)
      seen |= gpushm_holder_pid(gpushm_buffer_info_holder(info, h)) == (uint32_t)victims[i];
    CHECK(seen);
  }
  gpushm_buffer_list_free(list);

  /* Unlink and close ours: the victims alone keep it alive. */
  CHECK_OK(gpushm_unlink(conn, "victim"));
  CHECK_OK(gpushm_buffer_close(buf));
  CHECK((info = find_buffer(conn, "victim")) && gpushm_buffer_info_refs(info) == 3 &&
        !gpushm_buffer_info_linked(info));
  gpushm_disconnect(conn);

  for (int i = 0; i < 3; i++) {
    int status;
    CHECK(kill(victims[i], SIGKILL) == 0);
    CHECK(waitpid(victims[i], &status, 0) == victims[i]);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
  CHECK(wait_until(all_freed, &d, &base_fds));
  daemon_stop(&d);
  return 0;
}
