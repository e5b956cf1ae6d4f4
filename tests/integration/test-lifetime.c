/* SPDX-License-Identifier: MIT */
/* Lifetimes: unlink while open (shm_unlink semantics), persistent buffers without
 * holders, session buffers whose creator goes away. */
#include "config.h"
#include "harness.h"

#include <string.h>
#include <unistd.h>

static struct test_daemon d;

static void expect_totals(uint32_t buffers, uint32_t linked, uint64_t bytes)
{
  gpushm_stats_t *s = daemon_stats(&d);
  uint32_t has = gpushm_stats_buffers(s), has_linked = gpushm_stats_buffers_linked(s);
  uint64_t has_bytes = gpushm_stats_bytes_allocated(s);

  gpushm_stats_free(s);
  if (has != buffers || has_linked != linked || has_bytes != bytes) {
    fprintf(stderr, "daemon has %u buffers (%u linked, %llu bytes); expected %u (%u, %llu)\n",
            has, has_linked, (unsigned long long)has_bytes, buffers, linked,
            (unsigned long long)bytes);
    exit(1);
  }
}

/* A child that creates buffers and exits without closing anything. */
static pid_t creator_child(int ready_fd, int hold_fd, int hold_write_end, gpushm_t **inherited)
{
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *conn = daemon_connect(&d);
    gpushm_create_opts_t opts;
    gpushm_buffer_t *b;
    char c;
    close(hold_write_end); /* so the parent's close reaches us as end of file */
    gpushm_disconnect(inherited[0]);
    gpushm_disconnect(inherited[1]);
    gpushm_create_opts_init(&opts);
    opts.mode = 0644;
    opts.lifetime = GPUSHM_LIFETIME_SESSION;
    CHECK_OK(gpushm_buffer_create(conn, "session", 4096, &opts, &b));
    strcpy(gpushm_buffer_ptr(b), "from the creator");
    opts.lifetime = GPUSHM_LIFETIME_PERSISTENT;
    CHECK_OK(gpushm_buffer_create(conn, "persistent", 4096, &opts, &b));
    CHECK(write(ready_fd, "r", 1) == 1);
    CHECK(read(hold_fd, &c, 1) == 0); /* until the parent lets go */
    _exit(0);
  }
  return pid;
}

int main(void)
{
  gpushm_t *conn, *other;
  gpushm_buffer_t *buf, *b2;
  const gpushm_buffer_info_t *info;
  uint64_t id;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  other = daemon_connect(&d);

  /* unlink while open: name gone now, memory gone at the last close */
  CHECK_OK(gpushm_buffer_create(conn, "doomed", 10000, NULL, &buf));
  id = gpushm_buffer_id(buf);
  memset(gpushm_buffer_ptr(buf), 0xab, 10000);
  CHECK_OK(gpushm_unlink(conn, "doomed"));
  expect_totals(1, 0, 12288);
  CHECK((info = find_buffer(conn, "doomed")) && !gpushm_buffer_info_linked(info) &&
        gpushm_buffer_info_refs(info) == 1);
  CHECK_ERR(gpushm_buffer_open(other, "doomed", 0, &b2), GPUSHM_E_NOENT);
  /* by id through the daemon (read-only is not in this process's cache) */
  CHECK_ERR(gpushm_buffer_open_id(other, id, GPUSHM_OPEN_READONLY, &b2), GPUSHM_E_NOENT);
  CHECK_ERR(gpushm_unlink(conn, "doomed"), GPUSHM_E_NOENT);
  CHECK(((unsigned char *)gpushm_buffer_ptr(buf))[9999] == 0xab); /* still usable */
  CHECK_OK(gpushm_buffer_create(other, "doomed", 100, NULL, &b2)); /* name is free */
  CHECK(gpushm_buffer_id(b2) != id);
  CHECK_OK(gpushm_buffer_close(buf));
  expect_totals(1, 1, 4096);

  /* close, then unlink: a persistent buffer outlives its holders */
  CHECK_OK(gpushm_buffer_close(b2));
  expect_totals(1, 1, 4096);
  CHECK((info = find_buffer(conn, "doomed")) && gpushm_buffer_info_linked(info) &&
        gpushm_buffer_info_refs(info) == 0);
  CHECK_OK(gpushm_unlink(other, "doomed"));
  expect_totals(0, 0, 0);

  /* session lifetime: the creator's exit unlinks; a holder keeps the memory */
  {
    int ready[2], hold[2];
    char c;
    pid_t pid;
    CHECK(pipe(ready) == 0 && pipe(hold) == 0);
    pid = creator_child(ready[1], hold[0], hold[1], (gpushm_t *[]){ conn, other });
    CHECK(read(ready[0], &c, 1) == 1);
    CHECK_OK(gpushm_buffer_open(conn, "session", GPUSHM_OPEN_READONLY, &buf));
    CHECK((info = find_buffer(conn, "session")) &&
          gpushm_buffer_info_lifetime(info) == GPUSHM_LIFETIME_SESSION);
    CHECK(gpushm_buffer_info_creator_pid(info) == (uint32_t)pid);
    close(hold[1]);
    check_child(pid);
    close(ready[0]);
    close(ready[1]);
    close(hold[0]);
  }
  /* The child's connection closing is seen asynchronously: wait for the unlink. */
  for (int i = 0; i < 500; i++) {
    if (gpushm_buffer_open(other, "session", GPUSHM_OPEN_READONLY, &b2) == GPUSHM_E_NOENT)
      break;
    gpushm_buffer_close(b2);
    usleep(10000);
  }
  CHECK_ERR(gpushm_buffer_open(other, "session", GPUSHM_OPEN_READONLY, &b2), GPUSHM_E_NOENT);
  CHECK(strcmp(gpushm_buffer_ptr(buf), "from the creator") == 0);
  expect_totals(2, 1, 8192); /* session (unlinked, held) + persistent */
  CHECK_OK(gpushm_buffer_close(buf));
  expect_totals(1, 1, 4096);
  CHECK((info = find_buffer(conn, "persistent")) && gpushm_buffer_info_linked(info) &&
        gpushm_buffer_info_refs(info) == 0);
  CHECK_OK(gpushm_unlink(conn, "persistent"));
  expect_totals(0, 0, 0);

  gpushm_disconnect(conn);
  gpushm_disconnect(other);
  daemon_stop(&d);
  return 0;
}
