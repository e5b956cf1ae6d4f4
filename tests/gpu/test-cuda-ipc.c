/* SPDX-License-Identifier: MIT */
/* Device buffers through a real gpushmd, over each device backend in turn: legacy CUDA
 * IPC and cuda-fd (POSIX-fd capabilities).  Every consumer is a separate process
 * started with exec (CUDA does not survive fork() alone).  Skips (77) where there is
 * no CUDA driver or device; GPUSHM_CUDA_LIBRARY points it (and the daemon) at the fake
 * driver for CI, with smaller sizes. */
#include "config.h"
#include "cuda-test.h"

#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/wait.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define MiB (1ull << 20)
#define CHUNK (16 * MiB)

static struct test_daemon d;
static const char *self;
static int fake;
/* The backend under test; children learn it from GPUSHM_TEST_BACKEND. */
static gpushm_backend_t backend = GPUSHM_BACKEND_CUDA_IPC;

static const char *backend_name(gpushm_backend_t b)
{
  return b == GPUSHM_BACKEND_CUDA_FD ? "cuda-fd" : "cuda-ipc";
}




/* --- roles run in child processes (exec'ed) ------------------------------------ */

static int role_consumer(char **argv)
{
  const char *name = argv[2];
  uint32_t seed = (uint32_t)strtoul(argv[3], NULL, 0);
  uint32_t answer = (uint32_t)strtoul(argv[4], NULL, 0);
  gpushm_t *conn;
  gpushm_buffer_t *b;

  cuda_test_setup(0);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, name, 0, &b));
  CHECK(gpushm_buffer_backend(b) == backend && gpushm_buffer_device(b) == 0);
  CHECK(cuda_test_verify(cuda_test_dptr(b), gpushm_buffer_size(b), seed));
  if (answer)
    cuda_test_fill(cuda_test_dptr(b), gpushm_buffer_size(b), answer);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

/* Pipelined: opens pipe-0 .. pipe-(N-1) all started before the first is finished,
 * finished last first, each checked to hold seed + i, then answered with seed + 100 + i. */
static int role_pipelined_consumer(char **argv)
{
  unsigned n = (unsigned)strtoul(argv[2], NULL, 0);
  uint32_t seed = (uint32_t)strtoul(argv[3], NULL, 0);
  gpushm_pending_t *p[GPUSHM_PENDING_MAX];
  gpushm_t *conn;

  CHECK(n <= GPUSHM_PENDING_MAX);
  cuda_test_setup(0);
  conn = daemon_connect(&d);
  for (unsigned i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "pipe-%u", i);
    CHECK_OK(gpushm_buffer_open_start(conn, name, 0, &p[i]));
  }
  for (unsigned i = n; i-- > 0;) {
    gpushm_buffer_t *b;
    CHECK_OK(gpushm_pending_finish(p[i], &b));
    CHECK(gpushm_buffer_backend(b) == backend && gpushm_buffer_device(b) == 0);
    CHECK(cuda_test_verify(cuda_test_dptr(b), gpushm_buffer_size(b), seed + i));
    cuda_test_fill(cuda_test_dptr(b), gpushm_buffer_size(b), seed + 100 + i);
    CHECK_OK(gpushm_buffer_close(b));
  }
  gpushm_disconnect(conn);
  return 0;
}

/* Becomes uid 65534 after exec, where the test binary's directory need not be open to
 * it (a mktemp -d); what must be loaded first (the driver, from a path that may be as
 * closed) is loaded before. */
static void become_nobody(void)
{
  CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
}

/* As another uid: opens read-only and checks every word.  The library loads its driver
 * on its first import, so one open as root comes first, on a connection of its own. */
static int role_readonly_consumer(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;

  cuda_test_setup(0);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &b));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  become_nobody();
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &b));
  CHECK(cuda_test_verify(cuda_test_dptr(b), gpushm_buffer_size(b), (uint32_t)strtoul(argv[3], NULL, 0)));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

/* As another uid: neither a read nor a read-write open is let through, nor does the
 * name leak what it is. */
static int role_refused(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;

  become_nobody();
  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  CHECK_ERR(gpushm_buffer_open(conn, argv[2], 0, &b), GPUSHM_E_NOENT);
  gpushm_disconnect(conn);
  return 0;
}

/* Opens a buffer, says so on fd argv[3], and waits to be killed while mapped. */
static int role_holder(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;
  int fd = atoi(argv[3]);

  cuda_test_setup(0);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], 0, &b));
  CU_CHECK(CU_CALL(&drv, cuMemsetD32, cuda_test_dptr(b), 0x5a5a5a5a, 1));
  CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
  CHECK(write(fd, "r", 1) == 1);
  for (;;)
    pause();
}

/* Opens a buffer read-only, checks it reads, then writes through the read-only mapping:
 * exits 3 when the driver refuses the write with an error (or dies of SIGSEGV: the fake
 * driver's mapping is the process's own), 0 when the write went through. */
static int role_write_readonly(char **argv)
{
  uint32_t seed = (uint32_t)strtoul(argv[3], NULL, 0);
  unsigned flags = strcmp(argv[4], "ro") == 0 ? GPUSHM_OPEN_READONLY : 0;
  gpushm_t *conn;
  gpushm_buffer_t *b;
  CUresult r;

  cuda_test_setup(0);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], flags, &b));
  CHECK(gpushm_buffer_is_readonly(b) == (flags != 0));
  CHECK(cuda_test_verify(cuda_test_dptr(b), gpushm_buffer_size(b), seed));
  r = CU_CALL(&drv, cuMemsetD32, cuda_test_dptr(b), 0xdeadbeef, gpushm_buffer_size(b) / 4);
  if (r == CUDA_SUCCESS)
    r = CU_CALL(&drv, cuCtxSynchronize);
  if (r != CUDA_SUCCESS)
    _exit(3); /* the context may be gone: nothing more to clean up */
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

/* With the library's driver made to fail the import: the open fails and the daemon's
 * reference is given back. */
static int role_open_fails(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;
  const gpushm_buffer_info_t *info;

  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_buffer_open(conn, argv[2], 0, &b), GPUSHM_E_CUDA);
  CHECK(strstr(gpushm_last_error_message(), argv[3]) != NULL);
  CHECK((info = find_buffer(conn, argv[2])) && gpushm_buffer_info_my_refs(info) == 0);
  gpushm_disconnect(conn);
  return 0;
}

static pid_t spawn(const char *role, const char *a, const char *b, const char *c,
                   const char *fault_env)
{
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    char text[16];
    setenv("GPUSHM_SOCKET", d.socket, 1);
    snprintf(text, sizeof text, "%d", (int)backend);
    setenv("GPUSHM_TEST_BACKEND", text, 1);
    if (fault_env)
      setenv("GPUSHM_CUDA_FAULTS", fault_env, 1);
    if (strcmp(role, "write-readonly") == 0) {
      /* the fake driver's read-only mapping answers a write with SIGSEGV: let it kill
       * the child rather than a sanitizer turn it into a report and exit 1 */
      static char asan[512];
      const char *old = getenv("ASAN_OPTIONS");
      snprintf(asan, sizeof asan, "%s%shandle_segv=0", old ? old : "", old && *old ? ":" : "");
      setenv("ASAN_OPTIONS", asan, 1);
    }
    cuda_test_child_env();
    execl(self, self, role, a, b, c, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* --- tests ------------------------------------------------------------------------- */

static gpushm_buffer_t *create_mode(gpushm_t *conn, const char *name, uint64_t size,
                                    uint32_t mode)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  gpushm_create_opts_init(&opts);
  opts.backend = backend;
  opts.device = 0;
  opts.mode = mode;
  CHECK_OK(gpushm_buffer_create(conn, name, size, &opts, &b));
  CHECK(gpushm_buffer_backend(b) == backend && gpushm_buffer_ptr(b) != NULL);
  return b;
}

static gpushm_buffer_t *create_cuda(gpushm_t *conn, const char *name, uint64_t size)
{
  return create_mode(conn, name, size, 0600);
}

/* Whether every byte of [p, p + bytes) is zero. */
static int all_zero(CUdeviceptr p, uint64_t bytes)
{
  static uint32_t host[CHUNK / 4];
  for (uint64_t off = 0; off < bytes; off += CHUNK) {
    size_t n = bytes - off < CHUNK ? (size_t)(bytes - off) : CHUNK;
    CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, host, p + off, n));
    for (size_t i = 0; i < n / 4; i++)
      if (host[i])
        return 0;
  }
  return 1;
}

/* A new buffer reads zero, also where the memory just held another buffer's data: the
 * daemon's context recycles freed device memory without clearing it (the fake driver's
 * new allocations start with garbage). */
static void test_new_memory_is_zero(gpushm_t *conn)
{
  const uint64_t size = 64 * MiB;
  gpushm_buffer_t *b;

  for (int round = 0; round < 3; round++) {
    b = create_cuda(conn, "recycled", size);
    CHECK(all_zero(cuda_test_dptr(b), gpushm_buffer_size(b)));
    cuda_test_fill(cuda_test_dptr(b), size, 0x5ec + (uint32_t)round); /* what the next one must not see */
    CHECK_OK(gpushm_unlink(conn, "recycled"));
    CHECK_OK(gpushm_buffer_close(b));
  }
  test_log("%s: new buffers read zero, also in memory another buffer just freed",
           backend_name(backend));
}

static void test_producer_consumer(gpushm_t *conn)
{
  uint64_t size = 64 * MiB;
  gpushm_buffer_t *b = create_cuda(conn, "frames", size);
  const gpushm_buffer_info_t *info;

  cuda_test_fill(cuda_test_dptr(b), size, 0x1111);
  check_child(spawn("consumer", "frames", "0x1111", "0x2222", NULL));
  CHECK(cuda_test_verify(cuda_test_dptr(b), size, 0x2222)); /* the consumer's answer, seen by the producer */
  CHECK((info = find_buffer(conn, "frames")) && gpushm_buffer_info_allocated(info) == size &&
        gpushm_buffer_info_device(info) == 0);
  CHECK_OK(gpushm_unlink(conn, "frames"));
  CHECK_OK(gpushm_buffer_close(b));
  test_log("%s: 64 MiB producer -> consumer -> producer round trip verified",
           backend_name(backend));
}

/* Pipelined creates (a ping between start and finish, which reads past their replies)
 * and a consumer's pipelined opens, of carved buffers (1 MiB, in segments) and whole
 * ones (40 MiB, past the carve limit): the two ways a reply becomes a mapping. */
static void test_pipelined(gpushm_t *conn)
{
  enum { N = 8 };
  const uint32_t seed = 0x7100;
  gpushm_create_opts_t opts;
  gpushm_pending_t *p[N];
  gpushm_buffer_t *b[N];

  gpushm_create_opts_init(&opts);
  opts.backend = backend;
  opts.device = 0;
  opts.mode = 0600;
  for (unsigned i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "pipe-%u", i);
    CHECK_OK(gpushm_buffer_create_start(conn, name, i % 2 ? 40 * MiB : MiB, &opts, &p[i]));
  }
  CHECK_OK(gpushm_ping(conn));
  for (unsigned i = 0; i < N; i++) {
    CHECK_OK(gpushm_pending_finish(p[i], &b[i]));
    CHECK(gpushm_buffer_backend(b[i]) == backend);
    CHECK(gpushm_buffer_size(b[i]) == (i % 2 ? 40 * MiB : MiB));
    CHECK(all_zero(cuda_test_dptr(b[i]), gpushm_buffer_size(b[i])));
    cuda_test_fill(cuda_test_dptr(b[i]), gpushm_buffer_size(b[i]), seed + i);
  }
  check_child(spawn("pipelined-consumer", "8", "0x7100", NULL, NULL));
  for (unsigned i = 0; i < N; i++) {
    CHECK(cuda_test_verify(cuda_test_dptr(b[i]), gpushm_buffer_size(b[i]), seed + 100 + i));
    CHECK_OK(gpushm_buffer_close_unlink(b[i]));
  }
  test_log("%s: 8 pipelined creates and opens (carved and whole) verified",
           backend_name(backend));
}

static void test_eight_consumers(gpushm_t *conn)
{
  uint64_t size = 64 * MiB;
  gpushm_buffer_t *b = create_cuda(conn, "fanout", size);
  pid_t pids[8];

  cuda_test_fill(cuda_test_dptr(b), size, 0xabcd);
  for (int i = 0; i < 8; i++)
    pids[i] = spawn("consumer", "fanout", "0xabcd", "0", NULL);
  for (int i = 0; i < 8; i++)
    check_child(pids[i]);
  CHECK_OK(gpushm_unlink(conn, "fanout"));
  CHECK_OK(gpushm_buffer_close(b));
  test_log("%s: 8 concurrent consumers verified", backend_name(backend));
}

static void test_same_process_twice(gpushm_t *conn)
{
  gpushm_buffer_t *b = create_cuda(conn, "twice", 2 * MiB), *again;
  gpushm_t *other = daemon_connect(&d);
  const gpushm_buffer_info_t *info;

  CHECK_OK(gpushm_buffer_open(other, "twice", 0, &again));
  /* a handle (and daemon reference) per connection, one mapping per process */
  CHECK(again != b && gpushm_buffer_ptr(again) == gpushm_buffer_ptr(b));
  CHECK((info = find_buffer(conn, "twice")) && gpushm_buffer_info_refs(info) == 2 &&
        gpushm_buffer_info_my_refs(info) == 1);
  CHECK_OK(gpushm_buffer_close(again));
  CHECK(((volatile char *)gpushm_buffer_ptr(b) != NULL)); /* still mapped, by b */
  CHECK_OK(gpushm_unlink(conn, "twice"));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(other);
}

static uint64_t daemon_free_memory(void)
{
  gpushm_stats_t *s = daemon_stats(&d);
  uint64_t free_memory;
  CHECK(gpushm_stats_device_count(s) >= 1);
  free_memory = gpushm_device_stats_free_memory(gpushm_stats_device(s, 0));
  gpushm_stats_free(s);
  return free_memory;
}

/* The device's free memory once it has stopped moving: a child of an earlier test that
 * has exited may still be giving its context's memory back (hundreds of MiB, on the
 * driver's time), which would hide an allocation made meanwhile. */
static uint64_t settled_free_memory(void)
{
  uint64_t was = daemon_free_memory(), now;

  for (int i = 0; i < 50; i++, was = now) {
    usleep(100 * 1000);
    if ((now = daemon_free_memory()) == was)
      return now;
  }
  test_log("the device's free memory still moves after 5 s (last %llu MiB)",
           (unsigned long long)(was >> 20));
  return was;
}

/* Whether statistics count exactly *bytes as freed by the daemon but still mapped by a
 * process whose connection ended (that process listed, when there are any). */
static int pinned_after_release_is(const struct test_daemon *daemon, void *bytes)
{
  gpushm_stats_t *s = daemon_stats(daemon);
  uint64_t want = *(uint64_t *)bytes;
  int is = gpushm_stats_bytes_pinned_after_release(s) >= want &&
           gpushm_stats_bytes_pinned_after_release(s) < want + 64 * MiB && /* rounded up */
           gpushm_stats_detached_total(s) == (want ? 1u : 0u) &&
           gpushm_stats_bytes_allocated(s) == 0;
  if (want && is)
    is = gpushm_detached_buffer_released(gpushm_detached_buffer(gpushm_stats_detached(s, 0), 0));
  gpushm_stats_free(s);
  return is;
}

static int free_is(const struct test_daemon *daemon, void *expected)
{
  gpushm_stats_t *s = daemon_stats(daemon);
  int is = gpushm_stats_device_count(s) >= 1 &&
           gpushm_device_stats_free_memory(gpushm_stats_device(s, 0)) == *(uint64_t *)expected &&
           gpushm_stats_bytes_allocated(s) == 0;
  gpushm_stats_free(s);
  return is;
}

static void test_freed_after_last_release(gpushm_t *conn)
{
  uint64_t size = 256 * MiB, baseline, during;
  gpushm_buffer_t *b;
  int ready[2];
  char c, fd_text[16];
  pid_t holder;
  int status;

  /* The daemon holds a context from the earlier tests: its free memory is known. */
  baseline = settled_free_memory();
  CHECK(baseline > 0);

  /* unlink + last close */
  b = create_cuda(conn, "transient", size);
  during = daemon_free_memory();
  if (during > baseline - size)
    test_log("free before the create %llu MiB, after %llu MiB, now %llu MiB",
             (unsigned long long)(baseline >> 20), (unsigned long long)(during >> 20),
             (unsigned long long)(daemon_free_memory() >> 20));
  CHECK(during <= baseline - size);
  CHECK_OK(gpushm_unlink(conn, "transient"));
  CHECK(daemon_free_memory() == during); /* still held by us */
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(wait_until(free_is, &d, &baseline));

  /* a consumer SIGKILLed while it maps the buffer */
  b = create_cuda(conn, "killed", size);
  CHECK(pipe(ready) == 0);
  snprintf(fd_text, sizeof fd_text, "%d", ready[1]);
  holder = spawn("holder", "killed", fd_text, NULL, NULL);
  CHECK(read(ready[0], &c, 1) == 1);
  CHECK_OK(gpushm_unlink(conn, "killed"));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(daemon_free_memory() <= baseline - size); /* the holder keeps it */
  CHECK(kill(holder, SIGKILL) == 0);
  CHECK(waitpid(holder, &status, 0) == holder && WIFSIGNALED(status));
  CHECK(wait_until(free_is, &d, &baseline));

  /* a consumer whose connection an admin ends while it maps the buffer: the daemon lets
   * go, the consumer's mapping keeps the memory, and statistics say who keeps what until
   * the consumer exits */
  b = create_cuda(conn, "detached", size);
  holder = spawn("holder", "detached", fd_text, NULL, NULL);
  CHECK(read(ready[0], &c, 1) == 1);
  CHECK_OK(gpushm_client_disconnect(conn, client_id_of(conn, holder)));
  CHECK_OK(gpushm_unlink(conn, "detached"));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(wait_until(pinned_after_release_is, &d, &size));
  if (!fake) /* the fake driver's books are the daemon's own */
    CHECK(daemon_free_memory() <= baseline - size);
  CHECK(kill(holder, SIGKILL) == 0);
  CHECK(waitpid(holder, &status, 0) == holder && WIFSIGNALED(status));
  CHECK(wait_until(free_is, &d, &baseline));
  {
    uint64_t none = 0;
    CHECK(wait_until(pinned_after_release_is, &d, &none));
  }
  close(ready[0]);
  close(ready[1]);
  test_log("%s: device memory back to baseline (%llu MiB free) after release, after "
           "SIGKILL, and after a disconnected holder that stats showed pinning it exited",
           backend_name(backend), (unsigned long long)(baseline >> 20));
}

static void test_big_buffer(gpushm_t *conn)
{
  uint64_t size = fake ? 512 * MiB : 8192 * MiB;
  gpushm_buffer_t *b = create_cuda(conn, "big", size);

  cuda_test_fill(cuda_test_dptr(b), size, 0xb16);
  check_child(spawn("consumer", "big", "0xb16", "0xb17", NULL));
  CHECK(cuda_test_verify(cuda_test_dptr(b), size, 0xb17));
  CHECK_OK(gpushm_unlink(conn, "big"));
  CHECK_OK(gpushm_buffer_close(b));
  test_log("%s: %llu MiB buffer round trip verified", backend_name(backend),
           (unsigned long long)(size >> 20));
}

static void test_too_big(gpushm_t *conn)
{
  gpushm_stats_t *s;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  uint64_t total;

  s = daemon_stats(&d);
  total = gpushm_device_stats_total_memory(gpushm_stats_device(s, 0));
  gpushm_stats_free(s);
  gpushm_create_opts_init(&opts);
  opts.backend = backend;
  CHECK_ERR(gpushm_buffer_create(conn, "huge", total + 1024 * MiB, &opts, &b), GPUSHM_E_NOMEM);
  CHECK(strstr(gpushm_last_error_message(), "OUT_OF_MEMORY") != NULL);
  CHECK_OK(gpushm_ping(conn));
  /* and a normal allocation still works */
  b = create_cuda(conn, "after-oom", 2 * MiB);
  CHECK_OK(gpushm_unlink(conn, "after-oom"));
  CHECK_OK(gpushm_buffer_close(b));
  opts.device = 7777;
  CHECK_ERR(gpushm_buffer_create(conn, "nodev", 1, &opts, &b), GPUSHM_E_INVAL);
}

static void test_open_after_free(gpushm_t *conn)
{
  gpushm_buffer_t *b = create_cuda(conn, "gone", 2 * MiB), *again;
  uint64_t id = gpushm_buffer_id(b);
  CHECK_OK(gpushm_unlink(conn, "gone"));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_ERR(gpushm_buffer_open(conn, "gone", 0, &again), GPUSHM_E_NOENT);
  CHECK_ERR(gpushm_buffer_open_id(conn, id, 0, &again), GPUSHM_E_NOENT);
}

static void test_client_import_failure(gpushm_t *conn)
{
  static const char *const steps[] = { "cuMemImportFromShareableHandle", "cuMemAddressReserve",
                                       "cuMemMap", "cuMemSetAccess" };
  gpushm_buffer_t *b = create_cuda(conn, "unopenable", 2 * MiB);
  char fault[96];

  if (backend == GPUSHM_BACKEND_CUDA_IPC) {
    check_child(spawn("open-fails", "unopenable", "cuIpcOpenMemHandle", NULL,
                      "cuIpcOpenMemHandle=CUDA_ERROR_INVALID_HANDLE"));
  } else {
    /* each step of the import failing leaves nothing mapped and nothing held */
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
      snprintf(fault, sizeof fault, "%s=CUDA_ERROR_INVALID_VALUE", steps[i]);
      check_child(spawn("open-fails", "unopenable", steps[i], NULL, fault));
    }
  }
  CHECK_OK(gpushm_unlink(conn, "unopenable"));
  CHECK_OK(gpushm_buffer_close(b));
}

/* cuda-fd is a capability: another uid gets the fd, and so the memory, exactly when the
 * mode bits let it open the buffer. */
static void test_other_uid(gpushm_t *conn)
{
  gpushm_buffer_t *open = create_mode(conn, "for-everyone", 4 * MiB, 0644);
  gpushm_buffer_t *closed = create_mode(conn, "private", 4 * MiB, 0600);
  pid_t pid;
  int status;

  cuda_test_fill(cuda_test_dptr(open), 4 * MiB, 0x0644);
  cuda_test_fill(cuda_test_dptr(closed), 4 * MiB, 0x0600);
  pid = spawn("readonly-consumer", "for-everyone", "0x0644", NULL, NULL);
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  pid = spawn("refused", "private", NULL, NULL, NULL);
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(cuda_test_verify(cuda_test_dptr(closed), 4 * MiB, 0x0600));
  CHECK_OK(gpushm_unlink(conn, "for-everyone"));
  CHECK_OK(gpushm_unlink(conn, "private"));
  CHECK_OK(gpushm_buffer_close(open));
  CHECK_OK(gpushm_buffer_close(closed));
  test_log("cuda-fd: uid 65534 read a 0644 buffer and was refused a 0600 one");
}

/* A read-only open maps the memory read-only: a write through it fails.  The control
 * run (a read-write open doing the same write) proves the check can fail. */
static void test_readonly_mapping(gpushm_t *conn)
{
  gpushm_buffer_t *b = create_mode(conn, "ro-map", 2 * MiB, 0644);
  pid_t pid;
  int status;

  cuda_test_fill(cuda_test_dptr(b), 2 * MiB, 0x7070);
  pid = spawn("write-readonly", "ro-map", "0x7070", "ro", NULL);
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 3) ||
        (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV));
  CHECK(cuda_test_verify(cuda_test_dptr(b), 2 * MiB, 0x7070)); /* untouched */
  test_log("cuda-fd: a write through a read-only mapping was refused (%s)",
           WIFEXITED(status) ? "driver error" : "SIGSEGV");
  pid = spawn("write-readonly", "ro-map", "0x7070", "rw", NULL);
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(!cuda_test_verify(cuda_test_dptr(b), 2 * MiB, 0x7070)); /* control: a read-write open did write */
  CHECK_OK(gpushm_unlink(conn, "ro-map"));
  CHECK_OK(gpushm_buffer_close(b));
}

#define MAX_PINGS (1u << 20)

struct pinger {
  const struct test_daemon *d;
  int stop;
  unsigned n;
  double slowest_us;
  float *latency_us; /* MAX_PINGS */
  int started[2];
};

static int by_value(const void *a, const void *b)
{
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void *ping_loop(void *arg)
{
  struct pinger *p = arg;
  gpushm_t *conn = daemon_connect(p->d);

  CHECK_OK(gpushm_ping(conn));
  CHECK(write(p->started[1], "p", 1) == 1);
  while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
    double t = now_us();
    CHECK_OK(gpushm_ping(conn));
    t = now_us() - t;
    if (t > p->slowest_us)
      p->slowest_us = t;
    if (p->n < MAX_PINGS)
      p->latency_us[p->n++] = (float)t;
  }
  gpushm_disconnect(conn);
  return NULL;
}

/* The first create on a device makes the daemon's context there (100-350 ms on an
 * H100/H200); that happens on a worker thread, so other clients are answered meanwhile. */
static void test_first_create_does_not_block(void)
{
  struct test_daemon fresh = { 0 };
  struct pinger p = { .d = &fresh, .latency_us = malloc(MAX_PINGS * sizeof(float)) };
  double start, create_ms, limit_us, slowest_limit_us, p99;
  bool instrumented;
  gpushm_buffer_t *b;
  gpushm_t *conn;
  pthread_t thread;
  char c;

  if (fake)
    setenv("GPUSHM_FAKE_CTX_DELAY_MS", "300", 1); /* what a real GPU takes */
  daemon_start(&fresh, NULL);
  unsetenv("GPUSHM_FAKE_CTX_DELAY_MS");
  conn = daemon_connect(&fresh);
  CHECK(pipe(p.started) == 0);
  CHECK(pthread_create(&thread, NULL, ping_loop, &p) == 0);
  CHECK(read(p.started[0], &c, 1) == 1);
  start = now_us();
  b = create_cuda(conn, "first", 2 * MiB);
  create_ms = (now_us() - start) / 1e3;
  __atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(p.latency_us != NULL && p.n >= 10);
  qsort(p.latency_us, p.n, sizeof *p.latency_us, by_value);
  p99 = p.latency_us[p.n * 99 / 100];
  /* On the GPU host: under 1 ms at the 99th percentile.  A few pings may still wait
   * behind the create itself (its first cuMemAlloc runs on the loop once the context is
   * warm: up to ~6 ms seen) or behind other tests on the same cores, so the slowest only
   * has to stay far from the create itself, which is what a blocked loop would cost.  Under
   * valgrind or a sanitizer every request is slow, and on a shared 2-core CI machine
   * scheduling alone costs milliseconds: there the fake driver's 300 ms retain is the
   * yardstick. */
  instrumented = getenv("GPUSHM_TEST_VALGRIND") || getenv("GPUSHM_TEST_SANITIZER");
  limit_us = instrumented ? 150000 : fake ? 30000 : 1000;
  /* A blocked loop makes the slowest ping as slow as the whole create. */
  slowest_limit_us = create_ms * 1000 / (instrumented || fake ? 2 : 4);
  test_log("first create on a fresh device: %.1f ms; %u pings meanwhile, 99th percentile "
           "%.1f us, the slowest %.1f us (limits %.0f / %.0f us)", create_ms, p.n, p99,
           p.slowest_us, limit_us, slowest_limit_us);
  CHECK(create_ms >= 50);
  CHECK(p99 < limit_us);
  CHECK(p.slowest_us < slowest_limit_us);
  CHECK_OK(gpushm_unlink(conn, "first"));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  close(p.started[0]);
  close(p.started[1]);
  free(p.latency_us);
  daemon_stop(&fresh);
}

int main(int argc, char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *warm;
  gpushm_stats_t *s;

  self = "/proc/self/exe";
  if (argc > 1) {
    /* a child role: the daemon's socket comes through GPUSHM_SOCKET */
    snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
    if (getenv("GPUSHM_TEST_BACKEND"))
      backend = (gpushm_backend_t)atoi(getenv("GPUSHM_TEST_BACKEND"));
    if (strcmp(argv[1], "consumer") == 0)
      return role_consumer(argv);
    if (strcmp(argv[1], "pipelined-consumer") == 0)
      return role_pipelined_consumer(argv);
    if (strcmp(argv[1], "holder") == 0)
      return role_holder(argv);
    if (strcmp(argv[1], "open-fails") == 0)
      return role_open_fails(argv);
    if (strcmp(argv[1], "write-readonly") == 0)
      return role_write_readonly(argv);
    if (strcmp(argv[1], "readonly-consumer") == 0)
      return role_readonly_consumer(argv);
    if (strcmp(argv[1], "refused") == 0)
      return role_refused(argv);
    return 2;
  }
  self = test_self_path();
  fake = getenv("GPUSHM_CUDA_LIBRARY") && strstr(getenv("GPUSHM_CUDA_LIBRARY"), "fake");
  cuda_test_parent_outside_mps();
  cuda_test_setup(1);

  test_first_create_does_not_block();
  /* test_too_big asks the driver for more than the GPU has: without the per-uid quota
   * (half the GPU, test-memory-budget's), so that the driver's answer is what it sees */
  daemon_start(&d, "--max-device-bytes-per-uid", "0", NULL);
  conn = daemon_connect(&d);
  s = daemon_stats(&d);
  CHECK(gpushm_stats_device_count(s) >= 1 &&
        gpushm_device_stats_total_memory(gpushm_stats_device(s, 0)) > 0);
  test_log("device 0: %s, %llu MiB", gpushm_device_stats_name(gpushm_stats_device(s, 0)),
           (unsigned long long)(gpushm_device_stats_total_memory(gpushm_stats_device(s, 0)) >> 20));
  gpushm_stats_free(s);
  /* the daemon retains its context on first use */
  warm = create_cuda(conn, "warm-up", 2 * MiB);
  CHECK_OK(gpushm_unlink(conn, "warm-up"));
  CHECK_OK(gpushm_buffer_close(warm));

  for (int i = 0; i < 2; i++) {
    backend = i == 0 ? GPUSHM_BACKEND_CUDA_IPC : GPUSHM_BACKEND_CUDA_FD;
    test_new_memory_is_zero(conn);
    test_producer_consumer(conn);
    test_eight_consumers(conn);
    test_pipelined(conn);
    test_same_process_twice(conn);
    test_freed_after_last_release(conn);
    test_big_buffer(conn);
    test_too_big(conn);
    test_open_after_free(conn);
    test_client_import_failure(conn);
  }
  test_other_uid(conn);
  test_readonly_mapping(conn);

  s = daemon_stats(&d);
  CHECK(gpushm_stats_buffers(s) == 0 && gpushm_stats_bytes_allocated(s) == 0);
  gpushm_stats_free(s);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  CU_CALL(&drv, cuDevicePrimaryCtxRelease, 0);
  return 0;
}
