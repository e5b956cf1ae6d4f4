/* SPDX-License-Identifier: MIT */
/* Caller-numbered releases and promises on sync buffers (docs/sync.md), on host memory,
 * and on cuda-fd memory through the fake driver where it is built:
 *  - values: a release above the counter, refused at or below it and at 0; a wait for a
 *    released value returns at once, for one neither released nor promised times out
 *    saying so; numbered and caller-numbered releases mix;
 *  - promises: the waits of a fenced buffer for a promised value are queued at once,
 *    with no CPU wait (the fake accepts a wait it cannot satisfy yet,
 *    GPUSHM_FAKE_CUDA_QUEUE_WAITS, and counts it), a host buffer's acquire still waits
 *    for the counter; another connection's release into the promise, a second promiser
 *    and a read-only promiser (uid 65534 where the test is root) are refused; a promise
 *    only grows;
 *  - a promiser SIGKILLed: a waiter blocked on a promised value is released, with
 *    GPUSHM_E_LOST, as soon as gpushmd sees the process gone; gpushm_buffer_value_lost()
 *    tells lost values from released ones; a fence is raised to the promised value;
 *    gpushm_promises_broken_total counts each break and the log names it;
 *  - the break of a fence waits for a release published before the promise whose write
 *    is still queued (another process's, delayed 300 ms), so that write cannot lower
 *    the fence after it: the fence ends at the promised value;
 *  - gpushmd records promises (the promise request) and breaks them: a promiser that
 *    closes its last handle of the buffer owing values (not one of two opens), one whose
 *    fence write of a release is still queued when it closes (the break waits for it),
 *    one whose break waits for another process's write (no promise is taken meanwhile,
 *    its own neither),
 *    a live releaser whose write never lands (the break gives up waiting after
 *    GPUSHM_PROMISE_BREAK_WAIT_MS), and a promise made to the previous daemon, after a
 *    restart with systemd's fd store (played by the test);
 *  - garbage over the control block's header: promises and lost values are not believed
 *    (releases go on), and a new promise is refused;
 *  - gpushmctl show says the counter, the live promise and its client, and what a broken
 *    one left lost. */
#include "config.h"
#include "fdstore.h"
#include "harness.h"
#include "raw.h"
#include "shm_layout.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct test_daemon d;
static const char *log_path; /* gpushmd's (test_log_file()) */
static bool have_fake_cuda;

static gpushm_buffer_t *create(gpushm_t *conn, const char *name, gpushm_backend_t backend,
                               uint32_t mode)
{
  return create_sync_buffer(conn, name, backend, 1 << 16, mode);
}

static unsigned log_lines(const char *a, const char *b)
{
  FILE *f = fopen(log_path, "r");
  char line[2048];
  unsigned n = 0;

  CHECK(f != NULL);
  while (fgets(line, sizeof line, f))
    n += strstr(line, a) && (!b || strstr(line, b));
  fclose(f);
  return n;
}

static unsigned long waits_queued(void)
{
  void *lib = dlopen(getenv("GPUSHM_FAKE_CUDA_LIB"), RTLD_NOW | RTLD_NOLOAD);
  unsigned long (*count)(void);

  CHECK(lib != NULL);
  CHECK((count = (unsigned long (*)(void))dlsym(lib, "gpushm_fake_cuda_waits_queued")));
  unsigned long n = count();
  dlclose(lib);
  return n;
}

/* A promiser in a child of its own: opens name read-write (count > 0: name0, name1, ...
 * each), releases `released` (its fence write delayed by write_delay ms where not NULL),
 * then promises up to upto (0: nothing), says so, and waits: to be killed, or (a byte,
 * count 0) to close. */
struct promiser {
  pid_t pid;
  int report, go;
};

static struct promiser promiser_start_many(const char *name, int count, uint64_t released,
                                           uint64_t upto, const char *write_delay)
{
  int report[2], go[2];
  struct promiser p;

  CHECK(pipe(report) == 0 && pipe(go) == 0);
  CHECK((p.pid = fork()) >= 0);
  if (p.pid == 0) {
    gpushm_t *conn;
    gpushm_buffer_t *b;
    char byte = 1;

    close(report[0]);
    close(go[1]);
    if (write_delay)
      setenv("GPUSHM_FAKE_CUDA_WRITE_DELAY_MS", write_delay, 1);
    conn = daemon_connect(&d);
    for (int i = 0; i < (count ? count : 1); i++) {
      char each[GPUSHM_LIMIT_NAME_LEN + 1];
      snprintf(each, sizeof each, count ? "%s%d" : "%s", name, i);
      CHECK_OK(gpushm_buffer_open(conn, each, 0, &b));
      if (released)
        CHECK_OK(gpushm_buffer_release_value(b, NULL, released));
      if (upto)
        CHECK_OK(gpushm_buffer_promise(b, upto));
    }
    CHECK(write(report[1], &byte, 1) == 1);
    if (read(go[0], &byte, 1) == 1) {
      CHECK_OK(gpushm_buffer_close(b));
      CHECK(write(report[1], &byte, 1) == 1);
    }
    for (;;)
      pause();
  }
  close(report[1]);
  close(go[0]);
  p.report = report[0];
  p.go = go[1];
  {
    char byte;
    CHECK(read(p.report, &byte, 1) == 1);
  }
  return p;
}

static struct promiser promiser_start(const char *name, uint64_t released, uint64_t upto,
                                      const char *write_delay)
{
  return promiser_start_many(name, 0, released, upto, write_delay);
}

static double promiser_kill(struct promiser *p)
{
  int status;
  double at = test_clock_ms();

  CHECK(kill(p->pid, SIGKILL) == 0);
  CHECK(waitpid(p->pid, &status, 0) == p->pid && WIFSIGNALED(status));
  close(p->report);
  close(p->go);
  return at;
}

static void promiser_close(struct promiser *p)
{
  char byte = 1;
  int status;

  CHECK(write(p->go, &byte, 1) == 1);
  CHECK(read(p->report, &byte, 1) == 1);
  CHECK(kill(p->pid, SIGKILL) == 0);
  CHECK(waitpid(p->pid, &status, 0) == p->pid);
  close(p->report);
  close(p->go);
}

static void finish(gpushm_t *conn, gpushm_buffer_t *b)
{
  CHECK_OK(gpushm_unlink(conn, gpushm_buffer_name(b)));
  CHECK_OK(gpushm_buffer_close(b));
}

static void test_values(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "values", GPUSHM_BACKEND_HOST, 0600);
  uint64_t seq;
  double t0;

  CHECK(gpushm_daemon_has(conn, GPUSHM_FEATURE_PROMISES));
  CHECK_OK(gpushm_buffer_release_value(b, NULL, 5));
  CHECK(gpushm_buffer_release_seq(b) == 5);
  CHECK_ERR(gpushm_buffer_release_value(b, NULL, 5), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "not above its counter, 5"));
  CHECK_ERR(gpushm_buffer_release_value(b, NULL, 4), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_release_value(b, NULL, 0), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_acquire_value(b, NULL, 0, 0), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_buffer_acquire_value(b, NULL, 3, 0));
  CHECK_OK(gpushm_buffer_acquire_value(b, NULL, 5, 0));
  t0 = test_clock_ms();
  CHECK_ERR(gpushm_buffer_acquire_value(b, NULL, 6, 50), GPUSHM_E_TIMEOUT);
  CHECK(test_clock_ms() - t0 >= 49);
  CHECK(strstr(gpushm_last_error_message(), "value 6 of 'values' neither released nor promised "
                                            "within 50 ms (its counter is at 5)"));
  /* a numbered release takes the next number after a caller's; and the other way */
  CHECK_OK(gpushm_buffer_release(b, NULL, &seq));
  CHECK(seq == 6);
  CHECK_OK(gpushm_buffer_release_value(b, NULL, 100));
  CHECK_OK(gpushm_buffer_acquire(b, NULL, 100, 0));
  CHECK(gpushm_buffer_value_lost(b, 50) == 0);
  finish(conn, b);
  test_log("values: above the counter only; waits time out naming the value; both kinds mix");
}

/* A host waiter in a thread: acquire_value(value), its result and when it returned. */
struct waiter {
  pthread_t thread;
  gpushm_buffer_t *b;
  uint64_t value;
  int result;
  double returned_ms;
};

static void *wait_thread(void *arg)
{
  struct waiter *w = arg;
  w->result = gpushm_buffer_acquire_value(w->b, NULL, w->value, 20000);
  w->returned_ms = test_clock_ms();
  return NULL;
}

static void test_promises_host(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "promised", GPUSHM_BACKEND_HOST, 0666), *ro;
  uint64_t broken = daemon_metric(&d, "gpushm_promises_broken_total");
  struct promiser p = promiser_start("promised", 2, 10, NULL);
  struct waiter w = { .b = b, .value = 8 };
  uint32_t promiser_client;
  double killed;
  pid_t pid;

  /* the promiser is the only signaller of 3..10 */
  CHECK_ERR(gpushm_buffer_release_value(b, NULL, 3), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "release 3 refused: another connection promised "
                                            "the values up to 10"));
  CHECK_ERR(gpushm_buffer_release(b, NULL, NULL), GPUSHM_E_INVAL);
  /* above the promise too: it would reach every promised value */
  CHECK_ERR(gpushm_buffer_release_value(b, NULL, 11), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_promise(b, 20), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "promised the values up to 10 and is their only "
                                            "signaller (one promiser at a time)"));
  CHECK(gpushm_buffer_release_seq(b) == 2);
  /* a read-only holder promises nothing (uid 65534 where the test is root) */
  pid = geteuid() == 0 ? fork_as(65534, 65534) : fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    CHECK_OK(gpushm_buffer_open(mine, "promised", GPUSHM_OPEN_READONLY, &ro));
    CHECK_ERR(gpushm_buffer_promise(ro, 50), GPUSHM_E_PERM);
    CHECK_ERR(gpushm_buffer_release_value(ro, NULL, 50), GPUSHM_E_PERM);
    /* ... and may wait: host memory waits for the counter itself */
    CHECK_ERR(gpushm_buffer_acquire_value(ro, NULL, 8, 20), GPUSHM_E_TIMEOUT);
    _exit(0);
  }
  check_child(pid);
  {
    char text[96];
    promiser_client = client_id_of(conn, p.pid);
    snprintf(text, sizeof text, "counter:    2; promised up to 10 by client %u\n",
             promiser_client);
    ctl_show_says(d.socket, "promised", text);
  }
  CHECK(pthread_create(&w.thread, NULL, wait_thread, &w) == 0);
  usleep(100000);
  killed = promiser_kill(&p);
  CHECK(pthread_join(w.thread, NULL) == 0);
  CHECK(w.result == GPUSHM_E_LOST);
  test_log("a host waiter for a promised value returned %.1f ms after its promiser was killed",
           w.returned_ms - killed);
  CHECK(gpushm_buffer_release_seq(b) == 10);
  CHECK(gpushm_buffer_value_lost(b, 2) == 0 && gpushm_buffer_value_lost(b, 3) == 1 &&
        gpushm_buffer_value_lost(b, 10) == 1 && gpushm_buffer_value_lost(b, 11) == 0);
  CHECK_ERR(gpushm_buffer_acquire_value(b, NULL, 9, 0), GPUSHM_E_LOST);
  CHECK(strstr(gpushm_last_error_message(), "value 9 was reached because the connection that "
                                            "promised it"));
  CHECK(daemon_metric(&d, "gpushm_promises_broken_total") == broken + 1);
  CHECK(log_lines("warn: 'promised'", "has exited owing values 3 to 10 it promised") == 1);
  {
    char text[96];
    snprintf(text, sizeof text, "counter:    10; lost 3..10 (client %u went owing them)\n",
             promiser_client);
    ctl_show_says(d.socket, "promised", text);
  }
  /* the place is free again: this connection promises, keeps it, and a promise grows */
  CHECK_OK(gpushm_buffer_promise(b, 12));
  CHECK_ERR(gpushm_buffer_promise(b, 11), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_buffer_promise(b, 13));
  CHECK_OK(gpushm_buffer_release_value(b, NULL, 13));
  CHECK_ERR(gpushm_buffer_promise(b, 13), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_buffer_acquire_value(b, NULL, 13, 0));
  CHECK(gpushm_buffer_value_lost(b, 13) == 0);
  finish(conn, b);
}

static int seq_reaches(const struct test_daemon *t, void *arg)
{
  void **a = arg;
  (void)t;
  return gpushm_buffer_release_seq(a[0]) >= *(uint64_t *)a[1];
}

static void wait_seq(gpushm_buffer_t *b, uint64_t want)
{
  void *arg[] = { b, &want };
  CHECK(wait_until(seq_reaches, &d, arg));
}

/* A promiser that closes its last handle owing values: gpushmd breaks the promise, not
 * at the first of two closes of one connection's handle. */
static void test_close_breaks(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "closed-owing", GPUSHM_BACKEND_HOST, 0600), *h1, *h2;
  uint64_t broken = daemon_metric(&d, "gpushm_promises_broken_total");
  gpushm_t *other = daemon_connect(&d);
  struct promiser p;

  CHECK_OK(gpushm_buffer_open(other, "closed-owing", 0, &h1));
  CHECK_OK(gpushm_buffer_open(other, "closed-owing", 0, &h2));
  CHECK_OK(gpushm_buffer_promise(h1, 4));
  CHECK_OK(gpushm_buffer_close(h2));
  CHECK_OK(gpushm_ping(other)); /* the close is one-way: the ping comes after it */
  CHECK_ERR(gpushm_buffer_release_value(b, NULL, 1), GPUSHM_E_INVAL); /* still promised */
  CHECK(gpushm_buffer_release_seq(b) == 0);
  CHECK_OK(gpushm_buffer_close(h1));
  CHECK_OK(gpushm_ping(other));
  wait_seq(b, 4);
  CHECK_ERR(gpushm_buffer_acquire_value(b, NULL, 4, 0), GPUSHM_E_LOST);
  CHECK(gpushm_buffer_value_lost(b, 1) == 1);
  CHECK(daemon_metric(&d, "gpushm_promises_broken_total") == broken + 1);
  gpushm_disconnect(other);
  /* a promiser in a process of its own closing: the same */
  p = promiser_start("closed-owing", 0, 8, NULL);
  promiser_close(&p);
  wait_seq(b, 8);
  CHECK(gpushm_buffer_value_lost(b, 5) == 1);
  CHECK(daemon_metric(&d, "gpushm_promises_broken_total") == broken + 2);
  finish(conn, b);
  test_log("a promiser's last close owing values broke its promise; the first of two did not");
}

/* The promise request as a hostile client sends it, past the library's checks: as uid
 * 65534 (where the test is root) holding the buffer read-only, holding none of it, and
 * for a buffer that is not a sync buffer.  Returns the reply's status. */
static int raw_promise(int sock, uint64_t id, uint64_t upto)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__PromiseRequest body = GPUSHM__PROMISE_REQUEST__INIT;
  Gpushm__Reply *reply;
  unsigned n_fds;
  int status;

  body.id = id;
  body.upto = upto;
  req.body_case = GPUSHM__REQUEST__BODY_PROMISE;
  req.promise = &body;
  CHECK((reply = raw_call(sock, &req, NULL, &n_fds)) != NULL && n_fds == 0);
  status = reply->status;
  gpushm__reply__free_unpacked(reply, NULL);
  return status;
}

static void test_raw_attacks(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "raw-promised", GPUSHM_BACKEND_HOST, 0644), *plain;
  gpushm_create_opts_t opts;
  uint64_t id = gpushm_buffer_id(b);
  pid_t pid;

  gpushm_create_opts_init(&opts);
  CHECK_OK(gpushm_buffer_create(conn, "raw-plain", 4096, &opts, &plain));
  pid = geteuid() == 0 ? fork_as(65534, 65534) : fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    int sock = raw_connect(d.socket), fds[GPUSHM_LIMIT_FDS_PER_FRAME], status_fd;
    unsigned n_fds = 0;

    CHECK(sock >= 0 && raw_hello_features(sock, "attacker", GPUSHM_FEATURE_SEGMENTS |
                                          GPUSHM_FEATURE_PROMISES, &status_fd) == 0);
    /* holding nothing: not even told whether it exists */
    CHECK(raw_promise(sock, id, 9) == -GPUSHM_E_NOENT);
    CHECK(raw_promise(sock, 999999, 9) == -GPUSHM_E_NOENT);
    /* holding it read-only (its mode lets this uid read): a promise is a write */
    CHECK(raw_open(sock, "raw-promised", 1, fds, &n_fds) == 0);
    for (unsigned i = 0; i < n_fds; i++)
      close(fds[i]);
    CHECK(raw_promise(sock, id, 9) == -GPUSHM_E_PERM);
    _exit(0);
  }
  check_child(pid);
  CHECK(gpushm_buffer_release_seq(b) == 0);
  CHECK_OK(gpushm_buffer_promise(b, 2)); /* nobody took the place */
  /* not a sync buffer */
  CHECK_ERR(gpushm_buffer_promise(plain, 2), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_buffer_release_value(b, NULL, 2));
  CHECK_OK(gpushm_buffer_close_unlink(plain));
  finish(conn, b);
  test_log("raw promise requests as uid %u: refused holding nothing and holding read-only",
           geteuid() == 0 ? 65534u : (unsigned)geteuid());
}

/* name's control block as this process maps it: of its memfds (a host buffer's data is
 * one too), the writable mapping of SYNC_CONTROL_SIZE bytes. */
static struct sync_control *control_block(const char *name)
{
  char line[512], want[160];
  struct sync_control *found = NULL;
  FILE *maps = fopen("/proc/self/maps", "r");

  snprintf(want, sizeof want, "/memfd:%s ", name);
  CHECK(maps != NULL);
  while (fgets(line, sizeof line, maps)) {
    unsigned long long start, end;
    if (strstr(line, want) && strstr(line, " rw-s ") &&
        sscanf(line, "%llx-%llx", &start, &end) == 2 && end - start == SYNC_CONTROL_SIZE)
      found = (struct sync_control *)(uintptr_t)start;
  }
  fclose(maps);
  CHECK(found != NULL && found->magic == SYNC_CONTROL_MAGIC);
  return found;
}

/* Garbage over the header: the sequence goes on; promises and lost values are not
 * believed, then are again once the header is whole. */
static void test_scribbled(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "scribbled", GPUSHM_BACKEND_HOST, 0600);
  struct sync_control *ctl = control_block("scribbled");
  uint64_t magic = ctl->magic;

  CHECK_OK(gpushm_buffer_promise(b, 3));
  ctl->lost_from = 5;
  ctl->lost_upto = 9;
  CHECK(gpushm_buffer_value_lost(b, 6) == 1);
  ctl->magic = ~0ull;
  CHECK(gpushm_buffer_value_lost(b, 6) == 0);
  CHECK_OK(gpushm_buffer_release_value(b, NULL, 2)); /* under its own promise: fine */
  CHECK_ERR(gpushm_buffer_promise(b, 9), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "header was overwritten"));
  ctl->magic = magic;
  CHECK(gpushm_buffer_value_lost(b, 6) == 1);
  finish(conn, b);
  test_log("garbage over the header: releases go on, promises and lost values not believed");
}

static void test_promises_fenced(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "fenced", GPUSHM_BACKEND_CUDA_FD, 0600);
  uint64_t broken = daemon_metric(&d, "gpushm_promises_broken_total");
  unsigned long queued;
  struct promiser p;
  double t0;

  CHECK(gpushm_buffer_sync_method(b, NULL) == GPUSHM_SYNC_GPU_FENCE);
  /* unpromised and unreleased: the CPU waits, and times out */
  CHECK_ERR(gpushm_buffer_acquire_value(b, NULL, 1, 20), GPUSHM_E_TIMEOUT);
  p = promiser_start("fenced", 0, 6, NULL);
  /* promised: the stream's wait is queued at once, with nothing released */
  setenv("GPUSHM_FAKE_CUDA_QUEUE_WAITS", "1", 1);
  queued = waits_queued();
  t0 = test_clock_ms();
  CHECK_OK(gpushm_buffer_acquire_value(b, NULL, 6, -1));
  CHECK(test_clock_ms() - t0 < 5000 && waits_queued() == queued + 1);
  unsetenv("GPUSHM_FAKE_CUDA_QUEUE_WAITS");
  CHECK(gpushm_buffer_release_seq(b) == 0 && fake_fence_of(conn, b) == 0);
  promiser_kill(&p);
  for (int i = 0; i < 1000 && fake_fence_of(conn, b) < 6; i++)
    usleep(5000);
  CHECK(fake_fence_of(conn, b) == 6 && gpushm_buffer_release_seq(b) == 6);
  CHECK(gpushm_buffer_value_lost(b, 6) == 1);
  CHECK(daemon_metric(&d, "gpushm_promises_broken_total") == broken + 1);
  finish(conn, b);

  /* a release published before the promise by another process, its write queued
   * 300 ms behind: the break waits for it, else that write would land after and lower
   * the fence to 1 */
  b = create(conn, "fenced-late", GPUSHM_BACKEND_CUDA_FD, 0600);
  {
    struct promiser slow = promiser_start("fenced-late", 1, 0, "300");
    struct promiser early = promiser_start("fenced-late", 0, 5, NULL);
    t0 = promiser_kill(&early);
    for (int i = 0; i < 1000 && gpushm_buffer_release_seq(b) < 5; i++)
      usleep(1000);
    test_log("the break waited %.0f ms for the write published before the promise "
             "(queued 300 ms behind)", test_clock_ms() - t0);
    CHECK(fake_fence_of(conn, b) == 5 && gpushm_buffer_release_seq(b) == 5);
    usleep(400000); /* past the delayed write, had it come after */
    CHECK(fake_fence_of(conn, b) == 5);
    promiser_kill(&slow);
  }
  finish(conn, b);

  /* the promiser closes with its own release's write queued 300 ms behind: its close
   * waits for it (the mapping goes only once its fence operations are done), and the
   * break comes after; the fence is never lowered below the promise */
  b = create(conn, "fenced-close", GPUSHM_BACKEND_CUDA_FD, 0600);
  {
    struct promiser closer = promiser_start("fenced-close", 1, 6, "300");
    promiser_close(&closer);
    wait_seq(b, 6);
    CHECK(fake_fence_of(conn, b) == 6);
    usleep(400000);
    CHECK(fake_fence_of(conn, b) == 6 && gpushm_buffer_value_lost(b, 2) == 1);
  }
  finish(conn, b);

  /* a close whose break must wait (another process's release, its write 300 ms behind):
   * meanwhile the promise is being broken, and nobody, its promiser neither, promises */
  b = create(conn, "fenced-reopen", GPUSHM_BACKEND_CUDA_FD, 0600);
  {
    struct promiser slow = promiser_start("fenced-reopen", 1, 0, "300");
    gpushm_t *other = daemon_connect(&d);
    gpushm_buffer_t *h;

    CHECK_OK(gpushm_buffer_open(other, "fenced-reopen", 0, &h));
    CHECK_OK(gpushm_buffer_promise(h, 5));
    CHECK_OK(gpushm_buffer_close(h));
    CHECK_OK(gpushm_buffer_open(other, "fenced-reopen", 0, &h));
    CHECK_ERR(gpushm_buffer_promise(h, 8), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), "is being broken"));
    CHECK(gpushm_buffer_release_seq(b) == 1);
    wait_seq(b, 5);
    CHECK(fake_fence_of(conn, b) == 5 && gpushm_buffer_value_lost(b, 2) == 1);
    CHECK_OK(gpushm_buffer_promise(h, 8)); /* broken: the place is free */
    CHECK_OK(gpushm_buffer_close(h));
    gpushm_disconnect(other);
    wait_seq(b, 8);
    promiser_kill(&slow);
  }
  finish(conn, b);

  /* a live releaser's write that never lands: the break waits for it, then gives up */
  b = create(conn, "fenced-stuck", GPUSHM_BACKEND_CUDA_FD, 0600);
  {
    struct promiser stuck = promiser_start("fenced-stuck", 1, 0, "-1");
    struct promiser early = promiser_start("fenced-stuck", 0, 3, NULL);
    t0 = promiser_kill(&early);
    usleep(1000000);
    CHECK(gpushm_buffer_release_seq(b) == 1 && fake_fence_of(conn, b) == 0);
    for (int i = 0; i < 3000 && gpushm_buffer_release_seq(b) < 3; i++)
      usleep(10000);
    CHECK(gpushm_buffer_release_seq(b) == 3 && fake_fence_of(conn, b) == 3);
    test_log("a break whose earlier release never landed waited %.1f s, then went ahead",
             (test_clock_ms() - t0) / 1e3);
    CHECK(test_clock_ms() - t0 >= GPUSHM_PROMISE_BREAK_WAIT_MS - 100);
    CHECK(log_lines("warn: 'fenced-stuck'", "without waiting longer") == 1);
    promiser_kill(&stuck);
  }
  finish(conn, b);
  /* GPUSHM_LIMIT_PENDING_BREAKS_PER_UID crossed: one uid's promiser leaves that many
   * breaks waiting (each buffer's earlier release stuck), and the next is done at once */
  {
    enum { N = GPUSHM_LIMIT_PENDING_BREAKS_PER_UID + 1 };
    gpushm_buffer_t *bufs[N];
    struct promiser stuck, gone;
    char name[32];

    for (int i = 0; i < N; i++) {
      snprintf(name, sizeof name, "pending-%d", i);
      bufs[i] = create(conn, name, GPUSHM_BACKEND_CUDA_FD, 0600);
    }
    stuck = promiser_start_many("pending-", N, 1, 0, "-1");
    gone = promiser_start_many("pending-", N, 0, 3, NULL);
    promiser_kill(&gone);
    /* N - 1 wait (their fence below the counter), one (the last the daemon came to)
     * went at once */
    int went = 0, waiting = 0;
    for (int round = 0; round < 500 && went == 0; round++, usleep(10000)) {
      went = waiting = 0;
      for (int i = 0; i < N; i++) {
        went += gpushm_buffer_release_seq(bufs[i]) == 3;
        waiting += gpushm_buffer_release_seq(bufs[i]) == 1;
      }
    }
    CHECK(went == 1 && waiting == N - 1);
    CHECK(log_lines("too many repairs of its uid waiting", "without waiting") == 1);
    promiser_kill(&stuck);
    for (int i = 0; i < N; i++)
      finish(conn, bufs[i]); /* freed: their waiting breaks are dropped */
  }
  test_log("%u breaks of one uid waited, the next went at once",
           GPUSHM_LIMIT_PENDING_BREAKS_PER_UID);
  test_log("fenced: promised waits queued at once; a dead promiser's fence raised to its "
           "promise, after the writes published before it (or, one never landing, 10 s)");
}

/* A persistent sync buffer promised before a restart (systemd's fd store, played by
 * this test): the next daemon breaks the promise as it adopts the buffer, since the
 * promiser's connection ended with the previous one. */
static void test_restart(void)
{
  char dir[] = "/tmp/gpushm-promises-store-XXXXXX";
  struct test_daemon r = { .log_path = log_path };
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b, *fenced = NULL;
  struct promiser stuck;
  double t0;
  gpushm_t *conn;
  int status;

  CHECK(mkdtemp(dir) != NULL);
  fdstore_open(dir);
  daemon_start(&r, NULL);
  conn = daemon_connect(&r);
  gpushm_create_opts_init(&opts);
  opts.flags = GPUSHM_CREATE_SYNC;
  CHECK_OK(gpushm_buffer_create(conn, "kept-promise", 4096, &opts, &b));
  CHECK_OK(gpushm_buffer_release_value(b, NULL, 2));
  CHECK_OK(gpushm_buffer_promise(b, 9));
  if (have_fake_cuda) {
    /* a fenced one whose earlier release (another process's, alive) never lands: the
     * next daemon waits GPUSHM_PROMISE_ADOPT_WAIT_MS for it, then breaks regardless */
    struct test_daemon saved = d;
    d = r; /* promiser_start() connects to d */
    fenced = create_sync_buffer(conn, "kept-fenced", GPUSHM_BACKEND_CUDA_FD, 1 << 16, 0600);
    stuck = promiser_start("kept-fenced", 1, 0, "-1");
    CHECK_OK(gpushm_buffer_promise(fenced, 4));
    d = saved;
  }
  fdstore_drain();
  CHECK(kill(r.pid, SIGKILL) == 0);
  CHECK(waitpid(r.pid, &status, 0) == r.pid);
  t0 = test_clock_ms();
  daemon_respawn_with(&r, fdstore_pass, NULL, NULL);
  CHECK(gpushm_buffer_release_seq(b) == 9); /* the old mapping sees the break */
  CHECK(gpushm_buffer_value_lost(b, 3) == 1 && gpushm_buffer_value_lost(b, 2) == 0);
  CHECK(log_lines("warn: persistent sync buffer 'kept-promise'",
                  "values 3 to 9 promised before the restart count as lost") == 1);
  {
    gpushm_t *fresh = daemon_connect(&r); /* the old connection's daemon is gone */
    if (have_fake_cuda) {
      CHECK(test_clock_ms() - t0 >= GPUSHM_PROMISE_ADOPT_WAIT_MS);
      CHECK(gpushm_buffer_release_seq(fenced) == 4 && fake_fence_of(fresh, fenced) == 4);
      CHECK(log_lines("warn: persistent sync buffer 'kept-fenced'",
                      "had not landed in time") == 1);
      promiser_kill(&stuck);
      test_log("a fenced one whose earlier release never landed: broken after %.1f s of "
               "start-up", (test_clock_ms() - t0) / 1e3);
    }
    gpushm_disconnect(conn);
    conn = fresh;
  }
  CHECK_OK(gpushm_buffer_open(conn, "kept-promise", 0, &b));
  CHECK_OK(gpushm_buffer_promise(b, 10)); /* its place is free */
  CHECK_OK(gpushm_buffer_close_unlink(b));
  gpushm_disconnect(conn);
  daemon_stop(&r);
  fdstore_close();
  rmdir(dir);
  test_log("a promise made before a restart was broken as the buffer came back");
}

/* The daemon's log into the test's, whichever way the test ends. */
int main(void)
{
  const char *fake_lib = getenv("GPUSHM_FAKE_CUDA_LIB");
  gpushm_t *conn;

  have_fake_cuda = fake_lib && access(fake_lib, R_OK) == 0;
  if (have_fake_cuda)
    setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1);
  d.log_path = log_path = test_log_file("promises");
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  test_values(conn);
  test_promises_host(conn);
  test_close_breaks(conn);
  test_scribbled(conn);
  test_raw_attacks(conn);
  if (have_fake_cuda)
    test_promises_fenced(conn);
  else
    test_log("built without CUDA headers: no fake driver, fenced buffers not tried");
  gpushm_disconnect(conn);
  daemon_stop(&d);
  test_restart();
  return 0;
}
