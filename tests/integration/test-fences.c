/* SPDX-License-Identifier: MIT */
/* Memory fences of cuda-fd sync buffers, through the fake driver (its stream writes land
 * at once, or after GPUSHM_FAKE_CUDA_WRITE_DELAY_MS; its stream waits fail where a real
 * stream would hang, so a wrong order shows as an error):
 *  - which method each kind of sync buffer gets, and the fallbacks with their reasons;
 *  - release/acquire numbered across processes, the consumer as uid 65534 through a
 *    read-only open;
 *  - the CPU fallback waits for the fence itself, not for the publication;
 *  - every new driver call failing, in a process of its own (faults load with the
 *    driver) or in the daemon: a clean error, the daemon's reference given back,
 *    nothing published, no buffer left;
 *  - a new fence starts at 0 (the fake driver's new allocations end in garbage);
 *  - garbage over the control block's header stops nobody else opening the buffer;
 *  - the last close waits for this process's queued fence write, up to
 *    GPUSHM_FENCE_DRAIN_TIMEOUT_MS (crossed). */
#include "config.h"
#include "gpushm_limits.h"
#include "harness.h"
#include "shm_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct test_daemon d;
static char self[4096];

static gpushm_buffer_t *create(gpushm_t *conn, const char *name, gpushm_backend_t backend,
                               unsigned flags, uint32_t mode)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;

  gpushm_create_opts_init(&opts);
  opts.backend = backend;
  opts.flags = flags;
  opts.mode = mode;
  CHECK_OK(gpushm_buffer_create(conn, name, 1 << 20, &opts, &b));
  return b;
}

static void test_methods(gpushm_t *conn)
{
  static const struct {
    gpushm_backend_t backend;
    unsigned flags;
    gpushm_sync_method_t method;
  } cases[] = {
    { GPUSHM_BACKEND_CUDA_FD, GPUSHM_CREATE_SYNC, GPUSHM_SYNC_GPU_FENCE },
    { GPUSHM_BACKEND_CUDA_IPC, GPUSHM_CREATE_SYNC, GPUSHM_SYNC_GPU_FENCE }, /* since 0.7.1 */
    { GPUSHM_BACKEND_HOST, GPUSHM_CREATE_SYNC, GPUSHM_SYNC_HOST },
    { GPUSHM_BACKEND_CUDA_FD, 0, GPUSHM_SYNC_NONE },
  };
  const char *why;

  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gpushm_buffer_t *b = create(conn, "method", cases[i].backend, cases[i].flags, 0600);
    CHECK(gpushm_buffer_sync_method(b, &why) == cases[i].method && strcmp(why, "") == 0);
    CHECK_OK(gpushm_unlink(conn, "method"));
    CHECK_OK(gpushm_buffer_close(b));
  }
  CHECK(gpushm_buffer_sync_method(NULL, &why) == GPUSHM_SYNC_NONE);

  /* The fallback, with its reason; the attribute is asked at every open. */
  {
    gpushm_buffer_t *rw = create(conn, "fallback", GPUSHM_BACKEND_CUDA_FD, GPUSHM_CREATE_SYNC, 0600);
    gpushm_buffer_t *ro;

    setenv("GPUSHM_FAKE_CUDA_NO_MEMOPS", "1", 1);
    CHECK_OK(gpushm_buffer_open(conn, "fallback", GPUSHM_OPEN_READONLY, &ro));
    unsetenv("GPUSHM_FAKE_CUDA_NO_MEMOPS");
    CHECK(gpushm_buffer_sync_method(ro, &why) == GPUSHM_SYNC_CPU_FENCE);
    CHECK(strstr(why, "stream memory operations") != NULL);
    CHECK(gpushm_buffer_sync_method(rw, NULL) == GPUSHM_SYNC_GPU_FENCE);
    CHECK_OK(gpushm_buffer_close(ro));
    CHECK_OK(gpushm_unlink(conn, "fallback"));
    CHECK_OK(gpushm_buffer_close(rw));
  }
}

/* Producer here, consumer as nobody in a child: odd releases are the producer's, even
 * ones the consumer's (through a read-write open, as a consumer that hands buffers
 * back does); the read-only open beside it acquires and cannot release. */
static void test_ping_pong_other_uid(gpushm_t *conn)
{
  enum { ROUNDS = 500 };
  gpushm_buffer_t *b = create(conn, "baton", GPUSHM_BACKEND_CUDA_FD, GPUSHM_CREATE_SYNC, 0666);
  gpushm_buffer_t *refused = create(conn, "private", GPUSHM_BACKEND_CUDA_FD, GPUSHM_CREATE_SYNC, 0600);
  uint64_t seq;
  pid_t pid = fork_as(65534, 65534);

  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *rw, *ro, *no;
    CHECK_ERR(gpushm_buffer_open(mine, "private", GPUSHM_OPEN_READONLY, &no), GPUSHM_E_NOENT);
    CHECK_OK(gpushm_buffer_open(mine, "baton", GPUSHM_OPEN_READONLY, &ro));
    CHECK(gpushm_buffer_sync_method(ro, NULL) == GPUSHM_SYNC_GPU_FENCE);
    CHECK_ERR(gpushm_buffer_release(ro, NULL, &seq), GPUSHM_E_PERM);
    CHECK_OK(gpushm_buffer_open(mine, "baton", 0, &rw));
    for (uint64_t i = 0; i < ROUNDS; i++) {
      CHECK_OK(gpushm_buffer_acquire(ro, NULL, 2 * i + 1, 10000));
      CHECK_OK(gpushm_buffer_release(rw, NULL, &seq));
      CHECK(seq == 2 * i + 2);
    }
    CHECK_OK(gpushm_buffer_close(ro));
    CHECK_OK(gpushm_buffer_close(rw));
    gpushm_disconnect(mine);
    _exit(0);
  }
  for (uint64_t i = 0; i < ROUNDS; i++) {
    if (i > 0)
      CHECK_OK(gpushm_buffer_acquire(b, NULL, 2 * i, 10000));
    CHECK_OK(gpushm_buffer_release(b, NULL, &seq));
    CHECK(seq == 2 * i + 1);
  }
  check_child(pid);
  CHECK(gpushm_buffer_release_seq(b) == 2 * ROUNDS);
  CHECK_OK(gpushm_buffer_acquire(b, NULL, 0, 0)); /* the latest, done */
  CHECK_OK(gpushm_unlink(conn, "baton"));
  CHECK_OK(gpushm_unlink(conn, "private"));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_close(refused));
  test_log("%d fence hand-overs with a uid-65534 consumer", ROUNDS);
}

/* A read-write holder owns nothing of the control block but the sequence: it writes
 * garbage over the header, and the next opener, of another uid, opens and synchronises
 * all the same (the fence's place comes with the daemon's reply, not from the block). */
static void test_scribbled_header(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "scribbled", GPUSHM_BACKEND_CUDA_FD, GPUSHM_CREATE_SYNC, 0666);
  struct sync_control *ctl = shared_memfd_mapping("scribbled");
  uint64_t seq;
  pid_t pid;

  CHECK(ctl->magic == SYNC_CONTROL_MAGIC);
  CHECK_OK(gpushm_buffer_release(b, NULL, &seq));
  memset(ctl, 0xff, 8);                              /* magic */
  memset((char *)ctl + 16, 0xff, SYNC_CONTROL_SIZE - 16); /* version, size, the rest */
  pid = geteuid() == 0 ? fork_as(65534, 65534) : fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *ro, *rw;
    CHECK_OK(gpushm_buffer_open(mine, "scribbled", GPUSHM_OPEN_READONLY, &ro));
    CHECK(gpushm_buffer_sync_method(ro, NULL) == GPUSHM_SYNC_GPU_FENCE);
    CHECK_OK(gpushm_buffer_acquire(ro, NULL, seq, 1000));
    CHECK_OK(gpushm_buffer_open(mine, "scribbled", 0, &rw));
    CHECK_OK(gpushm_buffer_release(rw, NULL, NULL));
    CHECK_OK(gpushm_buffer_close(rw));
    CHECK_OK(gpushm_buffer_close(ro));
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  CHECK_OK(gpushm_buffer_acquire(b, NULL, seq + 1, 1000));
  CHECK_OK(gpushm_unlink(conn, "scribbled"));
  CHECK_OK(gpushm_buffer_close(b));
}

/* Runs this program as role in a fresh process (the driver, and its faults, load once
 * per process), with env "NAME=VALUE" set there; returns its exit status. */
static int run_role(const char *role, const char *env)
{
  pid_t pid = fork();
  int status;

  CHECK(pid >= 0);
  if (pid == 0) {
    if (env)
      putenv((char *)env);
    setenv("GPUSHM_SOCKET", d.socket, 1);
    execl(self, self, role, (char *)NULL);
    _exit(127);
  }
  CHECK(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Role: the releaser's fence write lands 300 ms after the release (work still running
 * on the GPU); a CPU-fallback consumer must wait for it, though the number is published
 * at once, and this process's close must wait for it too. */
static int role_slow_producer(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b;
  uint64_t seq;
  double t;

  CHECK_OK(gpushm_buffer_open(conn, "slow", 0, &b));
  CHECK_OK(gpushm_buffer_release(b, NULL, &seq));
  t = test_clock_ms();
  CHECK_OK(gpushm_buffer_close(b));
  t = test_clock_ms() - t;
  test_log("close waited %.0f ms for the queued fence write", t);
  CHECK(t >= 250);
  gpushm_disconnect(conn);
  return 0;
}

static void test_cpu_fallback_waits_for_the_fence(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "slow", GPUSHM_BACKEND_CUDA_FD, GPUSHM_CREATE_SYNC, 0600);
  gpushm_buffer_t *cpu;
  double t;

  setenv("GPUSHM_FAKE_CUDA_NO_MEMOPS", "1", 1);
  CHECK_OK(gpushm_buffer_open(conn, "slow", GPUSHM_OPEN_READONLY, &cpu));
  unsetenv("GPUSHM_FAKE_CUDA_NO_MEMOPS");
  CHECK(gpushm_buffer_sync_method(cpu, NULL) == GPUSHM_SYNC_CPU_FENCE);
  CHECK(run_role("slow-producer", "GPUSHM_FAKE_CUDA_WRITE_DELAY_MS=300") == 0);
  CHECK(gpushm_buffer_release_seq(cpu) == 1);
  /* the close above waited for the write: the fence is there now */
  CHECK_OK(gpushm_buffer_acquire(cpu, NULL, 1, 0));

  /* again, acquiring while the write is still on its way: the acquire takes it */
  CHECK_OK(gpushm_buffer_release(b, NULL, NULL)); /* 2, at once */
  {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
      _exit(run_role("slow-producer", "GPUSHM_FAKE_CUDA_WRITE_DELAY_MS=300"));
    while (gpushm_buffer_release_seq(cpu) < 3)
      usleep(1000);
    t = test_clock_ms();
    CHECK_OK(gpushm_buffer_acquire(cpu, NULL, 3, 5000));
    t = test_clock_ms() - t;
    check_child(pid);
  }
  test_log("the CPU-fence consumer waited %.0f ms after release 3 was published", t);
  CHECK(t >= 150);
  CHECK_OK(gpushm_unlink(conn, "slow"));
  CHECK_OK(gpushm_buffer_close(cpu));
  CHECK_OK(gpushm_buffer_close(b));
}

/* Role: the fence write never lands (a stuck stream): close gives up after the limit,
 * keeping the mapping, and says so; the daemon's reference goes back all the same. */
static int role_stuck_producer(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b;
  double t;

  CHECK_OK(gpushm_buffer_open(conn, "stuck", 0, &b));
  CHECK_OK(gpushm_buffer_release(b, NULL, NULL));
  t = test_clock_ms();
  /* the mapping stays (unmapping under the queued write would fault the process) */
  CHECK_ERR(gpushm_buffer_close(b), GPUSHM_E_TIMEOUT);
  CHECK(strstr(gpushm_last_error_message(), "stays mapped") != NULL);
  t = test_clock_ms() - t;
  test_log("close gave up on a fence write that never landed after %.0f ms (limit %u)", t,
           GPUSHM_FENCE_DRAIN_TIMEOUT_MS);
  CHECK(t >= GPUSHM_FENCE_DRAIN_TIMEOUT_MS && t < GPUSHM_FENCE_DRAIN_TIMEOUT_MS + 5000);
  gpushm_disconnect(conn);
  return 0;
}

static const gpushm_buffer_info_t *info_of(gpushm_t *conn, const char *name)
{
  const gpushm_buffer_info_t *info = find_buffer(conn, name);
  CHECK(info != NULL);
  return info;
}

/* Roles under injected faults; each checks its own outcome. */
static int role_fault_register(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b;
  const char *spec = getenv("GPUSHM_CUDA_FAULTS");
  char call[64];

  snprintf(call, sizeof call, "%.*s", (int)strcspn(spec, "="), spec);
  CHECK_ERR(gpushm_buffer_open(conn, "faulty", 0, &b), GPUSHM_E_CUDA);
  CHECK(strstr(gpushm_last_error_message(), call) != NULL);
  CHECK(gpushm_buffer_info_my_refs(info_of(conn, "faulty")) == 0);
  gpushm_disconnect(conn);
  return 0;
}

static int role_fault_write(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b;
  const char *spec = getenv("GPUSHM_CUDA_FAULTS");
  char call[64];
  uint64_t before;

  snprintf(call, sizeof call, "%.*s", (int)strcspn(spec, "="), spec);
  CHECK_OK(gpushm_buffer_open(conn, "faulty", 0, &b));
  before = gpushm_buffer_release_seq(b);
  CHECK_ERR(gpushm_buffer_release(b, NULL, NULL), GPUSHM_E_CUDA);
  CHECK(strstr(gpushm_last_error_message(), call) != NULL);
  CHECK(gpushm_buffer_release_seq(b) == before); /* nothing published without its fence */
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

static int role_fault_wait(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b;
  const char *spec = getenv("GPUSHM_CUDA_FAULTS");
  char call[64];

  snprintf(call, sizeof call, "%.*s", (int)strcspn(spec, "="), spec);
  CHECK_OK(gpushm_buffer_open(conn, "faulty", GPUSHM_OPEN_READONLY, &b));
  CHECK_ERR(gpushm_buffer_acquire(b, NULL, 1, 1000), GPUSHM_E_CUDA);
  CHECK(strstr(gpushm_last_error_message(), call) != NULL);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

/* Every driver call fences add, failing in the library (a process each) and in the
 * daemon (zeroing a new fence): clean errors, no reference or buffer left behind. */
static void test_faults(gpushm_t *conn)
{
  static const char *const daemon_faults[] = {
    "cuMemsetD32=CUDA_ERROR_INVALID_VALUE", "cuMemMap=CUDA_ERROR_OUT_OF_MEMORY",
    "cuMemAddressReserve=CUDA_ERROR_OUT_OF_MEMORY", "cuMemSetAccess=CUDA_ERROR_INVALID_VALUE",
    "cuCtxSynchronize=CUDA_ERROR_INVALID_VALUE",
  };
  gpushm_buffer_t *b = create(conn, "faulty", GPUSHM_BACKEND_CUDA_FD, GPUSHM_CREATE_SYNC, 0600);

  CHECK_OK(gpushm_buffer_release(b, NULL, NULL)); /* 1, for the waiters */
  CHECK(run_role("fault-register", "GPUSHM_CUDA_FAULTS=cuDeviceGetAttribute=CUDA_ERROR_INVALID_VALUE") == 0);
  CHECK(run_role("fault-write", "GPUSHM_CUDA_FAULTS=cuStreamWriteValue64=CUDA_ERROR_INVALID_VALUE") == 0);
  CHECK(run_role("fault-wait", "GPUSHM_CUDA_FAULTS=cuStreamWaitValue64=CUDA_ERROR_INVALID_VALUE") == 0);
  /* the CPU fallback's own calls */
  putenv("GPUSHM_FAKE_CUDA_NO_MEMOPS=1");
  CHECK(run_role("fault-write", "GPUSHM_CUDA_FAULTS=cuMemcpyHtoDAsync=CUDA_ERROR_INVALID_VALUE") == 0);
  CHECK(run_role("fault-write", "GPUSHM_CUDA_FAULTS=cuStreamSynchronize=CUDA_ERROR_INVALID_VALUE") == 0);
  CHECK(run_role("fault-wait", "GPUSHM_CUDA_FAULTS=cuMemcpyDtoHAsync=CUDA_ERROR_INVALID_VALUE") == 0);
  unsetenv("GPUSHM_FAKE_CUDA_NO_MEMOPS");
  CHECK(gpushm_buffer_release_seq(b) == 1);
  CHECK(gpushm_buffer_info_refs(info_of(conn, "faulty")) == 1); /* only ours is left */
  CHECK_OK(gpushm_unlink(conn, "faulty"));
  CHECK_OK(gpushm_buffer_close(b));

  for (size_t i = 0; i < sizeof daemon_faults / sizeof daemon_faults[0]; i++) {
    struct test_daemon faulty = { 0 };
    gpushm_create_opts_t opts;
    gpushm_stats_t *st;
    gpushm_t *c;
    char call[64];

    snprintf(call, sizeof call, "%.*s", (int)strcspn(daemon_faults[i], "="), daemon_faults[i]);
    setenv("GPUSHM_CUDA_FAULTS", daemon_faults[i], 1);
    daemon_start(&faulty, NULL);
    unsetenv("GPUSHM_CUDA_FAULTS");
    c = daemon_connect(&faulty);
    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_CUDA_FD;
    opts.flags = GPUSHM_CREATE_SYNC;
    CHECK(gpushm_buffer_create(c, "no-fence", 1 << 20, &opts, &b) < 0);
    CHECK(strstr(gpushm_last_error_message(), call) != NULL);
    st = daemon_stats(&faulty);
    CHECK(gpushm_stats_buffers(st) == 0 && gpushm_stats_bytes_allocated(st) == 0);
    gpushm_stats_free(st);
    gpushm_disconnect(c);
    daemon_stop(&faulty);
  }
}

static void test_drain_limit(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "stuck", GPUSHM_BACKEND_CUDA_FD, GPUSHM_CREATE_SYNC, 0600);
  CHECK(run_role("stuck-producer", "GPUSHM_FAKE_CUDA_WRITE_DELAY_MS=-1") == 0);
  CHECK(gpushm_buffer_release_seq(b) == 1);
  CHECK(gpushm_buffer_info_refs(info_of(conn, "stuck")) == 1); /* only ours */
  CHECK_OK(gpushm_unlink(conn, "stuck"));
  CHECK_OK(gpushm_buffer_close(b));
}

int main(int argc, char **argv)
{
  const char *fake_lib = getenv("GPUSHM_FAKE_CUDA_LIB");
  gpushm_t *conn;
  gpushm_stats_t *st;

  if (!fake_lib || access(fake_lib, R_OK) != 0) {
    test_log("built without CUDA headers: no fake driver for fences");
    return TEST_SKIP;
  }
  setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1);
  if (argc > 1) {
    snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
    if (strcmp(argv[1], "slow-producer") == 0)
      return role_slow_producer();
    if (strcmp(argv[1], "stuck-producer") == 0)
      return role_stuck_producer();
    if (strcmp(argv[1], "fault-register") == 0)
      return role_fault_register();
    if (strcmp(argv[1], "fault-write") == 0)
      return role_fault_write();
    if (strcmp(argv[1], "fault-wait") == 0)
      return role_fault_wait();
    return 2;
  }
  CHECK(readlink("/proc/self/exe", self, sizeof self - 1) > 0);
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  test_methods(conn);
  if (geteuid() == 0)
    test_ping_pong_other_uid(conn);
  else
    test_log("not root: the uid-65534 consumer is not examined");
  test_cpu_fallback_waits_for_the_fence(conn);
  test_scribbled_header(conn);
  test_faults(conn);
  test_drain_limit(conn);
  st = daemon_stats(&d);
  CHECK(gpushm_stats_buffers(st) == 0 && gpushm_stats_bytes_allocated(st) == 0);
  gpushm_stats_free(st);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}
