/* Two processes share a host buffer through a real gpushmd and see each other's
 * writes; read-only opens are enforced by the kernel; create/open errors; sized
 * option structs from older and newer callers. */
#include "config.h"
#include "harness.h"

#include <errno.h>
#include <stddef.h>
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

/* gpushm_create_opts_t as a caller built against a newer gpushm.h has it: two more
 * fields this library does not know. */
struct newer_opts {
  gpushm_create_opts_t known;
  uint64_t future[2];
};

/* The size field (copy_struct_from_user()'s convention): too small is invalid, a larger
 * struct passes while what the library does not know is zero, bytes past size are
 * never read, and NULL means the defaults. */
static void test_sized_opts(gpushm_t *conn)
{
  struct newer_opts newer;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  gpushm_event_t *ev;
  const gpushm_buffer_info_t *info;
  char offset[64];

  gpushm_create_opts_init(&opts);
  CHECK(opts.size == sizeof opts && sizeof opts >= GPUSHM_CREATE_OPTS_SIZE_V1);
  opts.size = 0; /* never initialised */
  CHECK_ERR(gpushm_buffer_create(conn, "sized", 1, &opts, &b), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "gpushm_create_opts_t") != NULL);
  opts.size = GPUSHM_CREATE_OPTS_SIZE_V1 - 4;
  CHECK_ERR(gpushm_buffer_create(conn, "sized", 1, &opts, &b), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_event_create(conn, "sized", &opts, &ev), GPUSHM_E_INVAL);

  /* a newer caller asking for nothing new: as if it were this library's own layout */
  memset(&newer, 0, sizeof newer);
  gpushm_create_opts_init(&newer.known);
  newer.known.size = sizeof newer;
  newer.known.mode = 0640;
  CHECK_OK(gpushm_buffer_create(conn, "sized", 1, &newer.known, &b));
  CHECK((info = find_buffer(conn, "sized")) && gpushm_buffer_info_mode(info) == 0640);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "sized"));

  /* a newer caller asking for something this library cannot do */
  newer.future[1] = 1;
  CHECK_ERR(gpushm_buffer_create(conn, "sized", 1, &newer.known, &b), GPUSHM_E_UNSUPPORTED);
  snprintf(offset, sizeof offset, "offset %zu", offsetof(struct newer_opts, future[1]));
  CHECK(strstr(gpushm_last_error_message(), offset) != NULL);
  CHECK_ERR(gpushm_buffer_open(conn, "sized", 0, &b), GPUSHM_E_NOENT); /* nothing made */

  /* what lies past size is not the caller's struct: never read */
  newer.known.size = sizeof newer.known;
  CHECK_OK(gpushm_buffer_create(conn, "sized", 1, &newer.known, &b));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "sized"));

  /* NULL: the defaults */
  CHECK_OK(gpushm_buffer_create(conn, "sized", 1, NULL, &b));
  CHECK((info = find_buffer(conn, "sized")) && gpushm_buffer_info_mode(info) == 0600 &&
        gpushm_buffer_info_backend(info) == GPUSHM_BACKEND_HOST &&
        gpushm_buffer_info_kind(info) == GPUSHM_KIND_BUFFER &&
        gpushm_buffer_info_lifetime(info) == GPUSHM_LIFETIME_PERSISTENT);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "sized"));
}

static uint32_t pooled_segments(const gpushm_stats_t *s)
{
  uint32_t n = 0;
  for (size_t i = 0; i < gpushm_stats_segment_usage_count(s); i++)
    n += gpushm_segment_usage_pooled(gpushm_stats_segment_usage(s, i));
  return n;
}

int main(void)
{
  gpushm_t *conn;
  gpushm_buffer_t *buf, *again;
  gpushm_create_opts_t opts;
  gpushm_stats_t *before, *after;
  pid_t pid;

  daemon_start(&d, NULL);
  before = daemon_stats(&d);
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
  opts.flags = 0x80;
  CHECK_ERR(gpushm_buffer_create(conn, "flagged", 1, &opts, &again), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_unlink(conn, "missing"), GPUSHM_E_NOENT);
  test_sized_opts(conn);

  CHECK_OK(gpushm_unlink(conn, "shared"));
  CHECK_OK(gpushm_buffer_close(buf));
  CHECK_OK(gpushm_ping(conn));
  gpushm_disconnect(conn);

  after = daemon_stats(&d);
  CHECK(gpushm_stats_buffers(after) == 0 && gpushm_stats_bytes_allocated(after) == 0);
  /* no fd leaks in the daemon: what is left is the warm pool, one memfd a segment */
  CHECK(gpushm_stats_open_fds(after) == gpushm_stats_open_fds(before) + pooled_segments(after));
  gpushm_stats_free(before);
  gpushm_stats_free(after);
  daemon_stop(&d);
  return 0;
}
