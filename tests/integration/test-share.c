/* SPDX-License-Identifier: MIT */
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

/* gpushm_buffer_open_ex(): sized as the create options are; by name or id; its map
 * device a field (checked here, used on two GPUs by test-cuda-multigpu); a creator's
 * map device in create_opts.open, named once. */
static void test_open_opts(gpushm_t *conn)
{
  struct {
    gpushm_open_opts_t known;
    uint32_t future[2];
  } newer;
  gpushm_open_opts_t o;
  gpushm_create_opts_t c;
  gpushm_buffer_t *b, *again, *ro;

  CHECK_OK(gpushm_buffer_create(conn, "open-ex", 64, NULL, &b));
  gpushm_open_opts_init(&o);
  CHECK(o.size == sizeof o && sizeof o >= GPUSHM_OPEN_OPTS_SIZE_V1 &&
        o.map_device == GPUSHM_DEVICE_AUTO && o.flags == 0);
  CHECK_OK(gpushm_buffer_open_ex(conn, "open-ex", 0, &o, &again));
  CHECK(again == b);
  CHECK_OK(gpushm_buffer_close(again));
  CHECK_OK(gpushm_buffer_open_ex(conn, NULL, gpushm_buffer_id(b), NULL, &again)); /* by id */
  CHECK(again == b);
  CHECK_OK(gpushm_buffer_close(again));
  o.flags = GPUSHM_OPEN_READONLY;
  CHECK_OK(gpushm_buffer_open_ex(conn, "open-ex", 0, &o, &ro));
  CHECK(ro != b && gpushm_buffer_is_readonly(ro));
  CHECK_OK(gpushm_buffer_close(ro));
  /* a map device is a field: in flags it is refused, saying where it goes */
  o.flags = GPUSHM_MAP_DEVICE(0);
  CHECK_ERR(gpushm_buffer_open_ex(conn, "open-ex", 0, &o, &again), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "map_device") != NULL);
  o.flags = 0x4;
  CHECK_ERR(gpushm_buffer_open_ex(conn, "open-ex", 0, &o, &again), GPUSHM_E_INVAL);
  o.flags = GPUSHM_OPEN_READONLY | GPUSHM_OPEN_WRITE_DISCARD; /* a promise to write */
  CHECK_ERR(gpushm_buffer_open_ex(conn, "open-ex", 0, &o, &again), GPUSHM_E_INVAL);
  o.flags = 0;
  o.map_device = 32; /* GPUSHM_LIMIT_DEVICES */
  CHECK_ERR(gpushm_buffer_open_ex(conn, "open-ex", 0, &o, &again), GPUSHM_E_INVAL);
  o.map_device = -3; /* -1 and -2 are AUTO and NONE */
  CHECK_ERR(gpushm_buffer_open_ex(conn, "open-ex", 0, &o, &again), GPUSHM_E_INVAL);
  o.map_device = 0; /* host memory: the same mapping for every device */
  CHECK_OK(gpushm_buffer_open_ex(conn, "open-ex", 0, &o, &again));
  CHECK(again == b);
  CHECK_OK(gpushm_buffer_close(again));
  gpushm_open_opts_init(&o);
  o.size = GPUSHM_OPEN_OPTS_SIZE_V1 - 4;
  CHECK_ERR(gpushm_buffer_open_ex(conn, "open-ex", 0, &o, &again), GPUSHM_E_INVAL);
  memset(&newer, 0, sizeof newer);
  gpushm_open_opts_init(&newer.known);
  newer.known.size = sizeof newer;
  CHECK_OK(gpushm_buffer_open_ex(conn, "open-ex", 0, &newer.known, &again));
  CHECK_OK(gpushm_buffer_close(again));
  newer.future[0] = 1;
  CHECK_ERR(gpushm_buffer_open_ex(conn, "open-ex", 0, &newer.known, &again),
            GPUSHM_E_UNSUPPORTED);
  CHECK_ERR(gpushm_buffer_open_ex(conn, "no-such", 0, NULL, &again), GPUSHM_E_NOENT);
  CHECK_ERR(gpushm_buffer_open_ex(conn, "bad/name", 0, NULL, &again), GPUSHM_E_NAME);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "open-ex"));

  /* a creator's open options: the map device once, and no flags */
  gpushm_create_opts_init(&c);
  gpushm_open_opts_init(&o);
  o.map_device = 0;
  c.open = &o;
  CHECK_OK(gpushm_buffer_create(conn, "open-ex", 64, &c, &b));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "open-ex"));
  c.flags = GPUSHM_MAP_DEVICE(0);
  CHECK_ERR(gpushm_buffer_create(conn, "open-ex", 64, &c, &b), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "twice") != NULL);
  c.flags = 0;
  o.flags = GPUSHM_OPEN_READONLY;
  CHECK_ERR(gpushm_buffer_create(conn, "open-ex", 64, &c, &b), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_open(conn, "open-ex", 0, &b), GPUSHM_E_NOENT); /* nothing made */
}

/* One timeout convention: negative waits for ever, everywhere. */
static void test_timeouts(gpushm_t *conn)
{
  CHECK_OK(gpushm_set_timeout(conn, GPUSHM_TIMEOUT_INFINITE));
  CHECK_OK(gpushm_ping(conn));
  CHECK_OK(gpushm_set_timeout(conn, -5));
  CHECK_OK(gpushm_set_timeout(conn, 0)); /* for ever too, as before 0.7 */
  CHECK_OK(gpushm_set_timeout(conn, GPUSHM_DEFAULT_TIMEOUT_MS));
  CHECK_ERR(gpushm_set_timeout(NULL, 10), GPUSHM_E_INVAL);
}

/* The one table of backend names, both ways. */
static void test_backend_names(void)
{
  static const struct {
    int value;
    const char *name;
  } known[] = { { GPUSHM_BACKEND_HOST, "host" }, { GPUSHM_BACKEND_CUDA_IPC, "cuda-ipc" },
                { GPUSHM_BACKEND_CUDA_FD, "cuda-fd" }, { 4, "cuda-event" },
                { GPUSHM_BACKEND_CUDA_FABRIC, "cuda-fabric" } };

  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    CHECK(gpushm_backend_name(known[i].value) &&
          strcmp(gpushm_backend_name(known[i].value), known[i].name) == 0);
    CHECK(gpushm_backend_from_name(known[i].name) == known[i].value);
  }
  CHECK(gpushm_backend_name(0) == NULL && gpushm_backend_name(-1) == NULL &&
        gpushm_backend_name(99) == NULL);
  CHECK(gpushm_backend_from_name("default") == -1 && gpushm_backend_from_name("HOST") == -1 &&
        gpushm_backend_from_name("") == -1 && gpushm_backend_from_name(NULL) == -1);
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
  test_open_opts(conn);
  test_timeouts(conn);
  test_backend_names();

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
