/* SPDX-License-Identifier: MIT */
/* Timelines (docs/sync.md): a named counter the CPU and CUDA streams signal and wait on.
 *  - values: a signal above every earlier one, refused at or below it and at 0; a wait
 *    for a reached value returns at once, for one not reached times out saying whether
 *    it was signalled; another connection's waiter (a thread) is woken by a signal;
 *  - kinds: a timeline's name opens no buffer and a buffer's no timeline; a timeline
 *    takes no backend, size or metadata;
 *  - permissions, attacked as uid 65534 (where the test is root): a 0600 timeline is
 *    not even seen; a 0644 one opens read-only and not read-write; a read-only holder
 *    signals and promises nothing through the library, and past it its control block is
 *    read-only for good (write through the mapping, mprotect, mmap of the fd, a
 *    /proc/self/fd reopen, ftruncate, fallocate: all refused, seals in place), and a raw
 *    promise request is refused;
 *  - promises: another connection's signals are refused while its promise is live; a
 *    promiser SIGKILLed releases a CPU waiter with GPUSHM_E_LOST, the counter and the
 *    fence at the promised value, the values marked lost, the promise gone by the time
 *    the waiter wakes; one that closes its last
 *    handle owing values has its promise broken too;
 *  - streams, through the fake driver where it is built: a stream signal writes the
 *    fence through the page registered with the driver; a stream wait for a promised
 *    value is queued at once, without a CPU wait; a read-only open registers the page
 *    read-only; the last close unregisters it; a device that cannot run stream memory
 *    operations falls back to the CPU, saying why;
 *  - 10,000 live timelines from 1,000 clients, each signalled and seen by another
 *    connection; the per-uid object limit crossed with timelines;
 *  - a persistent timeline survives a restart (systemd's fd store, played by the test)
 *    with its value, and a promise made to the previous daemon is broken as it comes
 *    back;
 *  - gpushmctl show says a timeline's counter, promise and reached value. */
#include "config.h"
#include "fdstore.h"
#include "harness.h"
#include "raw.h"
#include "shm_layout.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct test_daemon d;
static const char *log_path; /* gpushmd's (test_log_file()) */
static bool have_fake_cuda;

static gpushm_timeline_t *create(gpushm_t *conn, const char *name, uint32_t mode)
{
  gpushm_create_opts_t opts;
  gpushm_timeline_t *tl;

  gpushm_create_opts_init(&opts);
  opts.mode = mode;
  CHECK_OK(gpushm_timeline_create(conn, name, &opts, &tl));
  return tl;
}

static void finish(gpushm_t *conn, gpushm_timeline_t *tl)
{
  CHECK_OK(gpushm_unlink(conn, gpushm_timeline_name(tl)));
  CHECK_OK(gpushm_timeline_close(tl));
}

static unsigned long fake_count(const char *symbol)
{
  void *lib = dlopen(getenv("GPUSHM_FAKE_CUDA_LIB"), RTLD_NOW | RTLD_NOLOAD);
  unsigned long (*count)(void);
  unsigned long n;

  CHECK(lib != NULL);
  CHECK((count = (unsigned long (*)(void))dlsym(lib, symbol)));
  n = count();
  dlclose(lib);
  return n;
}

/* A CPU waiter in a thread: wait(value), its result and when it returned. */
struct waiter {
  pthread_t thread;
  gpushm_timeline_t *tl;
  uint64_t value;
  int result;
  double returned_ms;
};

static void *wait_thread(void *arg)
{
  struct waiter *w = arg;
  w->result = gpushm_timeline_wait(w->tl, w->value, 20000);
  w->returned_ms = test_clock_ms();
  return NULL;
}

/* A wait for publication (what a Vulkan queue's wait is preceded by), which sleeps in
 * slices of 200 ms: a signal must wake it, not its slice's end. */
static void *wait_signalled_thread(void *arg)
{
  struct waiter *w = arg;
  w->result = gpushm_timeline_wait_signalled(w->tl, w->value, 20000);
  w->returned_ms = test_clock_ms();
  return NULL;
}

static void test_values(gpushm_t *conn)
{
  gpushm_timeline_t *tl = create(conn, "frames", 0600), *other;
  gpushm_t *conn2 = daemon_connect(&d);
  struct waiter w;
  double t0, signalled;

  CHECK(gpushm_daemon_has(conn, GPUSHM_FEATURE_TIMELINES));
  CHECK(gpushm_timeline_value(tl) == 0);
  CHECK(gpushm_timeline_sync_method(tl, NULL) == GPUSHM_SYNC_HOST);
  CHECK_OK(gpushm_timeline_signal(tl, 5));
  CHECK(gpushm_timeline_value(tl) == 5);
  CHECK_ERR(gpushm_timeline_signal(tl, 5), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "'frames': signal 5 is not above its counter, 5 "
                                            "(values only grow)"));
  CHECK_ERR(gpushm_timeline_signal(tl, 4), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_timeline_signal(tl, 0), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_timeline_wait(tl, 0, 0), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_timeline_wait(tl, 3, 0));
  CHECK_OK(gpushm_timeline_wait(tl, 5, 0));
  t0 = test_clock_ms();
  CHECK_ERR(gpushm_timeline_wait(tl, 6, 50), GPUSHM_E_TIMEOUT);
  CHECK(test_clock_ms() - t0 >= 49);
  CHECK(strstr(gpushm_last_error_message(), "value 6 of 'frames' not reached within 50 ms "
                                            "(signalled up to 5, reached 5)"));
  /* another connection (the same process: one mapping, two handles) waits, this one
   * signals */
  CHECK_OK(gpushm_timeline_open(conn2, "frames", 0, &other));
  CHECK(gpushm_timeline_value(other) == 5);
  w = (struct waiter){ .tl = other, .value = 9 };
  CHECK(pthread_create(&w.thread, NULL, wait_thread, &w) == 0);
  usleep(20000);
  signalled = test_clock_ms();
  CHECK_OK(gpushm_timeline_signal(tl, 9));
  CHECK(pthread_join(w.thread, NULL) == 0);
  CHECK_OK(w.result);
  test_log("values: a sleeping CPU waiter returned %.3f ms after the signal",
           w.returned_ms - signalled);
  w = (struct waiter){ .tl = other, .value = 10 };
  CHECK(pthread_create(&w.thread, NULL, wait_signalled_thread, &w) == 0);
  usleep(50000); /* past its spins: asleep */
  signalled = test_clock_ms();
  CHECK_OK(gpushm_timeline_signal(tl, 10));
  CHECK(pthread_join(w.thread, NULL) == 0);
  CHECK_OK(w.result);
  /* woken (one wake of the sequence's word reaches it), not its 200 ms slice's end */
  CHECK(w.returned_ms - signalled < 100);
  test_log("values: a thread asleep until a value is signalled returned %.3f ms after the "
           "signal", w.returned_ms - signalled);
  CHECK(gpushm_timeline_value_lost(other, 9) == 0);
  CHECK_OK(gpushm_timeline_close(other));
  gpushm_disconnect(conn2);
  finish(conn, tl);
  test_log("values: above the last only; waits time out saying how far it got");
}

static void test_kinds(gpushm_t *conn)
{
  gpushm_timeline_t *tl = create(conn, "kind-timeline", 0600), *t2;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  static const uint8_t meta[4] = { 1, 2, 3, 4 };

  CHECK_ERR(gpushm_buffer_open(conn, "kind-timeline", 0, &b), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "'kind-timeline' is a timeline, not a buffer"));
  gpushm_create_opts_init(&opts);
  CHECK_OK(gpushm_buffer_create(conn, "kind-buffer", 4096, &opts, &b));
  CHECK_ERR(gpushm_timeline_open(conn, "kind-buffer", 0, &t2), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "'kind-buffer' is a buffer, not a timeline"));
  CHECK_ERR(gpushm_timeline_create(conn, "kind-buffer", NULL, &t2), GPUSHM_E_EXIST);
  opts.backend = GPUSHM_BACKEND_HOST;
  CHECK_ERR(gpushm_timeline_create(conn, "kind-x", &opts, &t2), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "a timeline has no backend"));
  gpushm_create_opts_init(&opts);
  opts.metadata = meta;
  opts.metadata_size = sizeof meta;
  CHECK_ERR(gpushm_timeline_create(conn, "kind-x", &opts, &t2), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "a timeline carries no metadata"));
  /* joining an existing one */
  gpushm_create_opts_init(&opts);
  opts.flags = GPUSHM_CREATE_OPEN_EXISTING;
  CHECK_OK(gpushm_timeline_create(conn, "kind-timeline", &opts, &t2));
  CHECK(gpushm_timeline_id(t2) == gpushm_timeline_id(tl));
  CHECK_OK(gpushm_timeline_close(t2));
  /* the listing calls it a timeline */
  {
    const gpushm_buffer_info_t *info = find_buffer(conn, "kind-timeline");
    CHECK(info && gpushm_buffer_info_kind(info) == GPUSHM_KIND_TIMELINE &&
          gpushm_buffer_info_size(info) == 0 && gpushm_buffer_info_sync(info));
  }
  CHECK_OK(gpushm_buffer_close_unlink(b));
  finish(conn, tl);
  test_log("kinds: a timeline's name opens no buffer, and the other way round");
}

/* A raw open of a timeline as a hostile client sends it; its status, fds into fds. */
static int raw_open_timeline(int sock, const char *name, bool read_only, int *fds,
                             unsigned *n_fds)
{
  return raw_open_kind(sock, name, 0, GPUSHM__KIND__KIND_TIMELINE, read_only, false, fds, n_fds);
}

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

/* What a holder of a read-only control block fd can do with it: nothing that writes. */
static void check_fd_read_only(int fd)
{
  char path[64];
  void *p;

  CHECK(mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
  CHECK((p = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ, MAP_SHARED, fd, 0)) != MAP_FAILED);
  CHECK(mprotect(p, SYNC_CONTROL_SIZE, PROT_READ | PROT_WRITE) < 0 && errno == EACCES);
  munmap(p, SYNC_CONTROL_SIZE);
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  CHECK(open(path, O_RDWR) < 0);
  CHECK(ftruncate(fd, 0) < 0);
  CHECK(fallocate(fd, 0, 0, 2 * SYNC_CONTROL_SIZE) < 0);
  CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, SYNC_CONTROL_SIZE) < 0);
  CHECK((fcntl(fd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_SEAL)) == (F_SEAL_SHRINK | F_SEAL_SEAL));
}

static void test_permissions(gpushm_t *conn)
{
  gpushm_timeline_t *shared = create(conn, "perm-shared", 0644);
  gpushm_timeline_t *private = create(conn, "perm-private", 0600);
  uint64_t id = gpushm_timeline_id(shared);
  pid_t pid;

  CHECK_OK(gpushm_timeline_signal(shared, 3));
  pid = geteuid() == 0 ? fork_as(65534, 65534) : fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_timeline_t *ro;
    int sock = raw_connect(d.socket), fds[GPUSHM_LIMIT_FDS_PER_FRAME], status_fd;
    unsigned n_fds = 0;

    if (geteuid() != 0) {
      CHECK_ERR(gpushm_timeline_open(mine, "perm-private", GPUSHM_OPEN_READONLY, &ro),
                GPUSHM_E_NOENT);
      CHECK_ERR(gpushm_timeline_open(mine, "perm-shared", 0, &ro), GPUSHM_E_PERM);
    }
    CHECK_OK(gpushm_timeline_open(mine, "perm-shared", GPUSHM_OPEN_READONLY, &ro));
    CHECK(gpushm_timeline_value(ro) == 3);
    CHECK_OK(gpushm_timeline_wait(ro, 3, 0));
    CHECK_ERR(gpushm_timeline_signal(ro, 4), GPUSHM_E_PERM);
    CHECK(strstr(gpushm_last_error_message(), "'perm-shared' is open read-only: signalling is "
                                              "a write"));
    CHECK_ERR(gpushm_timeline_promise(ro, 10), GPUSHM_E_PERM);
    /* past the library: the mapping it has is read-only */
    {
      void *ctl = read_only_memfd_mapping("perm-shared");
      CHECK(mprotect(ctl, SYNC_CONTROL_SIZE, PROT_READ | PROT_WRITE) < 0 && errno == EACCES);
    }
    /* and so is every fd the daemon hands it */
    CHECK(sock >= 0 && raw_hello_features(sock, "attacker", GPUSHM_FEATURE_PROMISES |
                                          GPUSHM_FEATURE_TIMELINES, &status_fd) == 0);
    CHECK(raw_promise(sock, id, 9) == -GPUSHM_E_NOENT); /* holding nothing */
    CHECK(raw_open_timeline(sock, "perm-shared", true, fds, &n_fds) == 0 && n_fds == 1);
    check_fd_read_only(fds[0]);
    close(fds[0]);
    CHECK(raw_promise(sock, id, 9) == -GPUSHM_E_PERM);
    if (geteuid() != 0) {
      CHECK(raw_open_timeline(sock, "perm-shared", false, fds, &n_fds) == -GPUSHM_E_PERM);
      CHECK(raw_open_timeline(sock, "perm-private", true, fds, &n_fds) == -GPUSHM_E_NOENT);
    }
    _exit(0);
  }
  check_child(pid);
  CHECK(gpushm_timeline_value(shared) == 3);
  {
    gpushm_sync_state_t st;
    CHECK_OK(gpushm_timeline_state(shared, &st));
    CHECK(st.counter == 3 && st.promised_upto == 0);
  }
  finish(conn, shared);
  finish(conn, private);
  test_log("permissions as uid %u: unseen at 0600; read-only at 0644, and its control block "
           "cannot be made writable", geteuid() == 0 ? 65534u : (unsigned)geteuid());
}

/* A promiser in a child: opens name, signals `signalled`, promises upto, reports, then
 * waits to be killed or (a byte) to close. */
struct promiser {
  pid_t pid;
  int report, go;
};

static struct promiser promiser_start(const char *name, uint64_t signalled, uint64_t upto)
{
  int report[2], go[2];
  struct promiser p;
  char byte = 1;

  CHECK(pipe(report) == 0 && pipe(go) == 0);
  CHECK((p.pid = fork()) >= 0);
  if (p.pid == 0) {
    gpushm_t *conn;
    gpushm_timeline_t *tl;

    close(report[0]);
    close(go[1]);
    conn = daemon_connect(&d);
    CHECK_OK(gpushm_timeline_open(conn, name, 0, &tl));
    if (signalled)
      CHECK_OK(gpushm_timeline_signal(tl, signalled));
    CHECK_OK(gpushm_timeline_promise(tl, upto));
    CHECK(write(report[1], &byte, 1) == 1);
    if (read(go[0], &byte, 1) == 1) {
      CHECK_OK(gpushm_timeline_close(tl));
      CHECK(write(report[1], &byte, 1) == 1);
    }
    for (;;)
      pause();
  }
  close(report[1]);
  close(go[0]);
  p.report = report[0];
  p.go = go[1];
  CHECK(read(p.report, &byte, 1) == 1);
  return p;
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

static void test_promises(gpushm_t *conn)
{
  gpushm_timeline_t *tl = create(conn, "promised", 0600);
  uint64_t broken = daemon_metric(&d, "gpushm_promises_broken_total");
  struct promiser p = promiser_start("promised", 2, 10);
  struct waiter w = { .tl = tl, .value = 8 };
  double killed;

  CHECK_ERR(gpushm_timeline_signal(tl, 3), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "signal 3 refused: another connection promised "
                                            "the values up to 10"));
  CHECK_ERR(gpushm_timeline_signal(tl, 11), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_timeline_promise(tl, 20), GPUSHM_E_INVAL);
  {
    char text[96];
    snprintf(text, sizeof text, "counter:    2; promised up to 10 by client %u\nreached:    2\n",
             client_id_of(conn, p.pid));
    ctl_show_says(d.socket, "promised", text);
  }
  CHECK(pthread_create(&w.thread, NULL, wait_thread, &w) == 0);
  usleep(100000);
  killed = promiser_kill(&p);
  CHECK(pthread_join(w.thread, NULL) == 0);
  CHECK(w.result == GPUSHM_E_LOST);
  {
    /* the waiter woke on the fence, raised last: the break is whole by then */
    gpushm_sync_state_t st;
    CHECK_OK(gpushm_timeline_state(tl, &st));
    CHECK(st.promised_upto == 0 && st.counter == 10 && st.lost_upto == 10);
  }
  test_log("a CPU waiter for a promised value returned %.1f ms after its promiser was killed",
           w.returned_ms - killed);
  CHECK(gpushm_timeline_value(tl) == 10);
  CHECK(gpushm_timeline_value_lost(tl, 2) == 0 && gpushm_timeline_value_lost(tl, 3) == 1 &&
        gpushm_timeline_value_lost(tl, 10) == 1 && gpushm_timeline_value_lost(tl, 11) == 0);
  CHECK_ERR(gpushm_timeline_wait(tl, 9, 0), GPUSHM_E_LOST);
  CHECK(strstr(gpushm_last_error_message(), "signaller lost"));
  CHECK(daemon_metric(&d, "gpushm_promises_broken_total") == broken + 1);
  /* the place is free: this connection signals on */
  CHECK_OK(gpushm_timeline_signal(tl, 11));
  /* a promiser that closes owing values */
  {
    char byte = 1;
    int status;
    p = promiser_start("promised", 12, 15);
    CHECK(write(p.go, &byte, 1) == 1 && read(p.report, &byte, 1) == 1);
    CHECK(gpushm_timeline_wait(tl, 15, 5000) == GPUSHM_E_LOST);
    CHECK(gpushm_timeline_value_lost(tl, 13) == 1 && gpushm_timeline_value_lost(tl, 12) == 0);
    CHECK(kill(p.pid, SIGKILL) == 0 && waitpid(p.pid, &status, 0) == p.pid);
    close(p.report);
    close(p.go);
  }
  CHECK(daemon_metric(&d, "gpushm_promises_broken_total") == broken + 2);
  finish(conn, tl);
  test_log("promises: a killed promiser and one that closed owing values were broken");
}

/* Streams, through the fake driver. */
static void test_streams(gpushm_t *conn)
{
  gpushm_timeline_t *tl = create(conn, "streamed", 0644), *ro;
  unsigned long queued;
  const char *why;
  pid_t pid;

  CHECK_OK(gpushm_timeline_signal_stream(tl, NULL, 4));
  CHECK(gpushm_timeline_sync_method(tl, &why) == GPUSHM_SYNC_GPU_FENCE && *why == '\0');
  CHECK(gpushm_timeline_value(tl) == 4); /* the fake's write lands at once */
  CHECK(fake_count("gpushm_fake_cuda_host_registered") == 1);
  CHECK_OK(gpushm_timeline_wait_stream(tl, NULL, 4, 0));
  /* a promised value: the wait is queued without a CPU wait */
  CHECK_OK(gpushm_timeline_promise(tl, 6));
  queued = fake_count("gpushm_fake_cuda_waits_queued");
  CHECK_OK(gpushm_timeline_wait_stream(tl, NULL, 6, 0));
  CHECK(fake_count("gpushm_fake_cuda_waits_queued") == queued + 1);
  /* not promised, not signalled: the CPU waits for one of the two, then times out */
  CHECK_ERR(gpushm_timeline_wait_stream(tl, NULL, 7, 30), GPUSHM_E_TIMEOUT);
  CHECK(strstr(gpushm_last_error_message(), "value 7 of 'streamed' neither signalled nor "
                                            "promised within 30 ms"));
  CHECK_OK(gpushm_timeline_signal_stream(tl, NULL, 6));
  CHECK(gpushm_timeline_value(tl) == 6);
  /* a read-only open registers the page read-only: waits work, signals are refused */
  CHECK_OK(gpushm_timeline_open(conn, "streamed", GPUSHM_OPEN_READONLY, &ro));
  CHECK_OK(gpushm_timeline_wait_stream(ro, NULL, 6, 0));
  CHECK(gpushm_timeline_sync_method(ro, NULL) == GPUSHM_SYNC_GPU_FENCE);
  CHECK(fake_count("gpushm_fake_cuda_host_registered") == 2);
  CHECK_ERR(gpushm_timeline_signal_stream(ro, NULL, 7), GPUSHM_E_PERM);
  CHECK_OK(gpushm_timeline_close(ro));
  CHECK(fake_count("gpushm_fake_cuda_host_registered") == 1);
  /* a device without stream memory operations: the CPU stands in, saying why */
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *mine;
    gpushm_timeline_t *cpu;
    setenv("GPUSHM_FAKE_CUDA_NO_MEMOPS", "1", 1);
    mine = daemon_connect(&d);
    CHECK_OK(gpushm_timeline_open(mine, "streamed", 0, &cpu));
    CHECK_OK(gpushm_timeline_signal_stream(cpu, NULL, 8));
    CHECK(gpushm_timeline_sync_method(cpu, &why) == GPUSHM_SYNC_CPU_FENCE &&
          strstr(why, "64-bit stream memory operations"));
    CHECK(gpushm_timeline_value(cpu) == 8);
    CHECK_OK(gpushm_timeline_wait_stream(cpu, NULL, 8, 0));
    CHECK_ERR(gpushm_timeline_wait_stream(cpu, NULL, 9, 20), GPUSHM_E_TIMEOUT);
    _exit(0);
  }
  check_child(pid);
  CHECK(gpushm_timeline_value(tl) == 8);
  finish(conn, tl);
  CHECK(fake_count("gpushm_fake_cuda_host_registered") == 0);
  test_log("streams (fake driver): signals write the fence through the registered page; "
           "promised waits queue at once; the CPU stands in where the device cannot");
}

/* 10,000 live timelines from 1,000 clients: each client creates 10, signals them, and
 * another connection opens every one and sees its value. */
#define MANY_CLIENTS 1000
#define PER_CLIENT 10

static void test_many(void)
{
  struct test_daemon big = { .log_path = log_path };
  static gpushm_t *conns[MANY_CLIENTS];
  static gpushm_timeline_t *tls[MANY_CLIENTS * PER_CLIENT];
  gpushm_t *reader;
  char why[160], name[32];
  double t0;

  if (!test_raise_nofile(MANY_CLIENTS + 200, why, sizeof why)) {
    test_log("10,000 timelines from 1,000 clients not tried: %s", why);
    CHECK(geteuid() != 0); /* root raises its own limit: this must run in CI */
    return;
  }
  daemon_start(&big, "--max-clients", "2000", "--max-clients-per-uid", "2000",
               "--max-buffers-per-uid", "20000", NULL);
  t0 = test_clock_ms();
  for (int c = 0; c < MANY_CLIENTS; c++) {
    conns[c] = daemon_connect(&big);
    for (int i = 0; i < PER_CLIENT; i++) {
      gpushm_create_opts_t opts;
      gpushm_create_opts_init(&opts);
      opts.lifetime = GPUSHM_LIFETIME_SESSION;
      snprintf(name, sizeof name, "tl-%d-%d", c, i);
      CHECK_OK(gpushm_timeline_create(conns[c], name, &opts, &tls[c * PER_CLIENT + i]));
      CHECK_OK(gpushm_timeline_signal(tls[c * PER_CLIENT + i], (uint64_t)(c * PER_CLIENT + i + 1)));
    }
  }
  test_log("10,000 timelines from 1,000 clients created and signalled in %.0f ms",
           test_clock_ms() - t0);
  reader = daemon_connect(&big);
  for (int c = 0; c < MANY_CLIENTS; c += 37)
    for (int i = 0; i < PER_CLIENT; i++) {
      gpushm_timeline_t *tl;
      snprintf(name, sizeof name, "tl-%d-%d", c, i);
      CHECK_OK(gpushm_timeline_open(reader, name, GPUSHM_OPEN_READONLY, &tl));
      CHECK_OK(gpushm_timeline_wait(tl, (uint64_t)(c * PER_CLIENT + i + 1), 0));
      CHECK_OK(gpushm_timeline_close(tl));
    }
  {
    gpushm_buffer_list_t *list;
    CHECK_OK(gpushm_list(reader, 0, &list));
    CHECK(gpushm_buffer_list_count(list) == MANY_CLIENTS * PER_CLIENT);
    gpushm_buffer_list_free(list);
  }
  /* Session timelines go with their creators' connections. */
  for (int c = 0; c < MANY_CLIENTS; c++) {
    for (int i = 0; i < PER_CLIENT; i++)
      CHECK_OK(gpushm_timeline_close(tls[c * PER_CLIENT + i]));
    gpushm_disconnect(conns[c]);
  }
  for (size_t named = 1, tries = 0; named; tries++) {
    gpushm_buffer_list_t *list;
    CHECK(tries < 500); /* 5 s for the daemon to see 1,000 hang-ups */
    CHECK_OK(gpushm_list(reader, 0, &list));
    named = 0;
    for (size_t i = 0; i < gpushm_buffer_list_count(list); i++)
      named += gpushm_buffer_info_linked(gpushm_buffer_list_get(list, i));
    if (named)
      usleep(10000);
    gpushm_buffer_list_free(list);
  }
  gpushm_disconnect(reader);
  daemon_stop(&big);
  test_log("10,000 live timelines from 1,000 clients: each seen by another connection, all "
           "gone with their sessions");
}

/* The per-uid object limit counts timelines. */
static void test_limit(void)
{
  struct test_daemon small = { .log_path = log_path };
  gpushm_timeline_t *tls[3], *over;
  gpushm_t *conn;

  daemon_start(&small, "--max-buffers-per-uid", "3", NULL);
  conn = daemon_connect(&small);
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "lim-%d", i);
    CHECK_OK(gpushm_timeline_create(conn, name, NULL, &tls[i]));
  }
  CHECK_ERR(gpushm_timeline_create(conn, "lim-over", NULL, &over), GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "3"));
  test_log("the object limit (--max-buffers-per-uid 3) refused a 4th timeline: %s",
           gpushm_last_error_message());
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpushm_timeline_close(tls[i]));
  gpushm_disconnect(conn);
  daemon_stop(&small);
}

/* A persistent timeline across a restart with systemd's fd store (played by the test):
 * its value comes back; a promise made to the previous daemon is broken.  Beside it a
 * persistent carved buffer, whose segment leaves a slot table record ("t."): systemd
 * hands records back in no promised order, here the reverse of their deposit, and each
 * kind must take only its own (the timeline's "l." record once took the slot table's
 * under systemd as PID 1). */
static void test_restart(void)
{
  char dir[] = "/tmp/gpushm-timelines-store-XXXXXX";
  struct test_daemon r = { .log_path = log_path };
  gpushm_create_opts_t opts;
  gpushm_timeline_t *tl;
  gpushm_buffer_t *carved;
  gpushm_t *conn;
  int status;

  CHECK(mkdtemp(dir) != NULL);
  fdstore_open(dir);
  daemon_start(&r, NULL);
  conn = daemon_connect(&r);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST;
  CHECK_OK(gpushm_buffer_create(conn, "kept-carved", 4096, &opts, &carved));
  memset(gpushm_buffer_ptr(carved), 0x5a, 4096);
  CHECK_OK(gpushm_buffer_close(carved));
  CHECK_OK(gpushm_timeline_create(conn, "kept-timeline", NULL, &tl));
  CHECK_OK(gpushm_timeline_signal(tl, 7));
  CHECK_OK(gpushm_timeline_promise(tl, 12));
  fdstore_drain();
  CHECK(fdstore_find("gpushm1.l.") >= 0 && fdstore_find("gpushm1.t.") >= 0);
  CHECK(kill(r.pid, SIGKILL) == 0);
  CHECK(waitpid(r.pid, &status, 0) == r.pid);
  daemon_respawn_with(&r, fdstore_pass_reversed, NULL, NULL);
  /* the old mapping sees the break: the counter and the fence at the promise */
  CHECK(gpushm_timeline_value(tl) == 12);
  CHECK(gpushm_timeline_value_lost(tl, 8) == 1 && gpushm_timeline_value_lost(tl, 7) == 0);
  CHECK(file_count_lines(log_path, "persistent timeline 'kept-timeline': values 8 to 12 "
                                   "promised before the restart count as lost") == 1);
  gpushm_disconnect(conn);
  conn = daemon_connect(&r);
  CHECK_OK(gpushm_timeline_open(conn, "kept-timeline", 0, &tl));
  CHECK(gpushm_timeline_value(tl) == 12);
  CHECK_OK(gpushm_timeline_signal(tl, 13));
  CHECK_OK(gpushm_timeline_wait(tl, 13, 0));
  CHECK_OK(gpushm_timeline_close_unlink(tl));
  CHECK_OK(gpushm_buffer_open(conn, "kept-carved", GPUSHM_OPEN_READONLY, &carved));
  for (unsigned i = 0; i < 4096; i++)
    CHECK(((const uint8_t *)gpushm_buffer_ptr(carved))[i] == 0x5a);
  CHECK_OK(gpushm_buffer_close(carved));
  CHECK_OK(gpushm_unlink(conn, "kept-carved"));
  CHECK(file_count_lines(log_path, "dropping") == 0);
  gpushm_disconnect(conn);
  daemon_stop(&r);
  fdstore_close();
  rmdir(dir);
  test_log("a persistent timeline came back at its value, its old promise broken; a carved "
           "buffer beside it too, the records handed back in reverse");
}

int main(void)
{
  const char *fake_lib = getenv("GPUSHM_FAKE_CUDA_LIB");
  gpushm_t *conn;

  have_fake_cuda = fake_lib && access(fake_lib, R_OK) == 0;
  if (have_fake_cuda) {
    setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1);
    setenv("GPUSHM_FAKE_CUDA_QUEUE_WAITS", "1", 1);
  }
  d.log_path = log_path = test_log_file("timelines");
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  test_values(conn);
  test_kinds(conn);
  test_permissions(conn);
  test_promises(conn);
  if (have_fake_cuda)
    test_streams(conn);
  else
    test_log("built without CUDA headers: no fake driver, streams not tried");
  gpushm_disconnect(conn);
  daemon_stop(&d);
  test_limit();
  test_many();
  test_restart();
  return 0;
}
