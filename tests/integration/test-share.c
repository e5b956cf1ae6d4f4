/* Two processes share a host buffer through a real gpushmd and see each other's
 * writes; read-only opens are enforced by the kernel; create/open errors. */
#include "config.h"
#include "harness.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIZE (3u << 20)

static struct test_daemon d;

static void fill(uint32_t *w, uint32_t seed)
{
  for (size_t i = 0; i < SIZE / 4; i++)
    w[i] = (uint32_t)i * 2654435761u ^ seed;
}

static int verify(const uint32_t *w, uint32_t seed)
{
  for (size_t i = 0; i < SIZE / 4; i++)
    if (w[i] != ((uint32_t)i * 2654435761u ^ seed))
      return 0;
  return 1;
}

static void consumer_process(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *rw, *ro;
  uint32_t *p;

  CHECK_OK(gpushm_buffer_open(conn, "shared", 0, &rw));
  p = gpushm_buffer_ptr(rw);
  CHECK(gpushm_buffer_size(rw) == SIZE && gpushm_buffer_backend(rw) == GPUSHM_BACKEND_HOST);
  CHECK(gpushm_buffer_device(rw) == -1 && !gpushm_buffer_is_readonly(rw));
  CHECK(verify(p, 0x1111));
  fill(p, 0x2222);

  /* Read-only: a second mapping that sees the same memory and cannot be made writable. */
  CHECK_OK(gpushm_buffer_open(conn, "shared", GPUSHM_OPEN_READONLY, &ro));
  CHECK(ro != rw && gpushm_buffer_is_readonly(ro));
  CHECK(verify(gpushm_buffer_ptr(ro), 0x2222));
  CHECK(mprotect(gpushm_buffer_ptr(ro), SIZE, PROT_READ | PROT_WRITE) < 0 && errno == EACCES);
  CHECK_OK(gpushm_buffer_close(ro));
  CHECK_OK(gpushm_buffer_close(rw));
  gpushm_disconnect(conn);
  exit(0);
}

int main(void)
{
  gpushm_t *conn;
  gpushm_buffer_t *buf, *again;
  gpushm_create_opts_t opts;
  gpushm_stats_t before, after;
  pid_t pid;

  daemon_start(&d, NULL);
  daemon_stats(&d, &before);
  conn = daemon_connect(&d);

  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  CHECK_OK(gpushm_buffer_create(conn, "shared", SIZE, &opts, &buf));
  CHECK(strcmp(gpushm_buffer_name(buf), "shared") == 0 && gpushm_buffer_id(buf) > 0);
  fill(gpushm_buffer_ptr(buf), 0x1111);

  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0)
    consumer_process();
  check_child(pid);
  CHECK(verify(gpushm_buffer_ptr(buf), 0x2222)); /* the consumer's writes */

  /* O_EXCL by default; open-or-create joins the existing buffer (same handle). */
  CHECK_ERR(gpushm_buffer_create(conn, "shared", SIZE, &opts, &again), GPUSHM_E_EXIST);
  CHECK(strstr(gpushm_last_error_message(), "exists") != NULL);
  opts.flags = GPUSHM_CREATE_OPEN_EXISTING;
  CHECK_OK(gpushm_buffer_create(conn, "shared", SIZE, &opts, &again));
  CHECK(again == buf);
  CHECK_OK(gpushm_buffer_close(again));

  CHECK_ERR(gpushm_buffer_open(conn, "missing", 0, &again), GPUSHM_E_NOENT);
  CHECK(strstr(gpushm_last_error_message(), "missing") != NULL);
  CHECK_ERR(gpushm_buffer_open(conn, "../etc", 0, &again), GPUSHM_E_NAME);
  CHECK_ERR(gpushm_buffer_open(conn, "shared", 0x80, &again), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_create(conn, "empty", 0, NULL, &again), GPUSHM_E_INVAL);
  opts.flags = 0;
  opts.reserved_[0] = 1;
  CHECK_ERR(gpushm_buffer_create(conn, "reserved", 1, &opts, &again), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_unlink(conn, "missing"), GPUSHM_E_NOENT);

  CHECK_OK(gpushm_unlink(conn, "shared"));
  CHECK_OK(gpushm_buffer_close(buf));
  CHECK_OK(gpushm_ping(conn));
  gpushm_disconnect(conn);

  daemon_stats(&d, &after);
  CHECK(after.buffers == 0 && after.bytes_allocated == 0);
  CHECK(after.open_fds == before.open_fds); /* no fd leaks in the daemon */
  daemon_stop(&d);
  return 0;
}
