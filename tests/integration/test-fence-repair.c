/* SPDX-License-Identifier: MIT */
/* Fences a dead releaser left short, repaired by gpushmd (daemon/fence_repair.h), through
 * the fake driver: releasers are children whose fence writes never land
 * (GPUSHM_FAKE_CUDA_WRITE_DELAY_MS=-1, their GPU work never done), killed with SIGKILL.
 *  - a releaser killed: a CPU-fence consumer's acquire, which waits for the fence
 *    itself, returns within a bound; the fence holds exactly the release's number; the
 *    stats counter says 1 and the daemon's log names buffer, release, client and pid;
 *  - a releaser whose connection an admin ends while its process lives (and which
 *    releases again after): nothing is raised while it lives, its last release once it
 *    has exited;
 *  - a later release by a live client: the dead one's number is raised, never the live
 *    one's; one pushed out of the last GPUSHM_LIMIT_RELEASERS_KEPT releases is not;
 *  - an earlier release by a live client, its write still queued: the dead one's number
 *    is raised only once that write has landed, so that it cannot lower the fence after;
 *  - forged signatures in the control block: one naming a live client raises nothing
 *    until that client's process is gone (then only a published number), one naming a
 *    read-only holder (uid 65534 where the test is root) never; under a scribbled
 *    header none is believed;
 *  - a releaser past the limits of what the daemon lists is still watched (swept);
 *  - the daemon's own driver calls for it failing: an error logged, nothing raised,
 *    the daemon and the buffer unharmed. */
#include "config.h"
#include "gpushm_limits.h"
#include "harness.h"
#include "shm_layout.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A daemon whose log goes to a file of its own, for the lines the repair writes. */
struct logged_daemon {
  struct test_daemon t;
  char log[64];
};

static void logged_start(struct logged_daemon *ld, const char *faults)
{
  int saved = fcntl(2, F_DUPFD_CLOEXEC, 0), fd;

  /* close-on-exec: the daemon gets the log as its stderr and nothing else */
  snprintf(ld->log, sizeof ld->log, "/tmp/gpushm-fence-repair-XXXXXX");
  CHECK(saved >= 0 && (fd = mkostemp(ld->log, O_CLOEXEC)) >= 0);
  if (faults)
    setenv("GPUSHM_CUDA_FAULTS", faults, 1);
  fflush(stderr);
  CHECK(dup2(fd, 2) == 2);
  memset(&ld->t, 0, sizeof ld->t);
  daemon_start(&ld->t, NULL);
  CHECK(dup2(saved, 2) == 2);
  close(saved);
  close(fd);
  unsetenv("GPUSHM_CUDA_FAULTS");
}

/* Lines of the daemon's log holding a and, where not NULL, b and c. */
static int log_lines(const struct logged_daemon *ld, const char *a, const char *b, const char *c)
{
  FILE *f = fopen(ld->log, "r");
  char line[2048];
  int n = 0;

  CHECK(f != NULL);
  while (fgets(line, sizeof line, f))
    n += strstr(line, a) && (!b || strstr(line, b)) && (!c || strstr(line, c));
  fclose(f);
  return n;
}

/* Stops the daemon and copies its log into the test's. */
static void logged_stop(struct logged_daemon *ld)
{
  FILE *f;
  char line[2048];

  daemon_stop(&ld->t);
  CHECK((f = fopen(ld->log, "r")) != NULL);
  while (fgets(line, sizeof line, f))
    fprintf(stderr, "  %s", line);
  fclose(f);
  unlink(ld->log);
}

static gpushm_buffer_t *create(gpushm_t *conn, const char *name, uint32_t mode)
{
  return create_sync_buffer(conn, name, GPUSHM_BACKEND_CUDA_FD, 1 << 20, mode);
}

/* A read-only open that orders acquires on the CPU: it waits for the fence itself,
 * with a timeout, where a GPU stream would wait for ever. */
static gpushm_buffer_t *open_cpu_consumer(gpushm_t *conn, const char *name)
{
  gpushm_buffer_t *b;

  setenv("GPUSHM_FAKE_CUDA_NO_MEMOPS", "1", 1);
  CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_OPEN_READONLY, &b));
  unsetenv("GPUSHM_FAKE_CUDA_NO_MEMOPS");
  CHECK(gpushm_buffer_sync_method(b, NULL) == GPUSHM_SYNC_CPU_FENCE);
  return b;
}

static uint64_t fences_raised(const struct test_daemon *t)
{
  gpushm_stats_t *st = daemon_stats(t);
  uint64_t n = gpushm_stats_fences_raised(st);
  gpushm_stats_free(st);
  return n;
}

/* Signs release seq in client_id's name: over the slot whose signature names seq (a
 * 0.8 library signs the next slot in turn), else slot seq % KEPT (as before 0.8). */
static void forge(gpushm_t *conn, const char *name, uint32_t client_id, uint64_t seq)
{
  struct sync_control *ctl = shared_memfd_mapping(name);
  uint32_t who = sync_releaser_id(gpushm_instance_id(conn), client_id);
  unsigned slot = seq % GPUSHM_LIMIT_RELEASERS_KEPT;

  for (unsigned i = 0; i < GPUSHM_LIMIT_RELEASERS_KEPT; i++)
    if (ctl->released_by[i] && (uint32_t)ctl->released_by[i] == (uint32_t)seq)
      slot = i;
  __atomic_store_n(&ctl->released_by[slot], sync_releaser(who, seq), __ATOMIC_RELAXED);
}

/* A holder in a child of its own: opens name (read-only if ro, then as uid 65534 where
 * this is root), releases `before` times with fence writes that never land, reports the
 * last number, and if `after`, waits for a byte and releases that many times more and
 * reports again.  Then it waits to be killed. */
struct holder {
  pid_t pid;
  uint32_t client_id;
  int report, go;
};

/* GPUSHM_FAKE_CUDA_WRITE_DELAY_MS for the holders started next ("-1": never land) */
static const char *holder_write_delay = "-1";

static uint64_t holder_report(const struct holder *h)
{
  uint64_t seq;
  CHECK(read(h->report, &seq, sizeof seq) == sizeof seq);
  return seq;
}

static struct holder holder_start(const struct test_daemon *t, gpushm_t *admin, const char *name,
                                  bool ro, unsigned before, unsigned after)
{
  int report[2], go[2];
  struct holder h;

  CHECK(pipe(report) == 0 && pipe(go) == 0);
  h.pid = ro && geteuid() == 0 ? fork_as(65534, 65534) : fork();
  CHECK(h.pid >= 0);
  if (h.pid == 0) {
    gpushm_t *conn = daemon_connect(t);
    gpushm_buffer_t *b;
    uint64_t seq = 0;
    char byte;

    close(report[0]);
    close(go[1]);
    setenv("GPUSHM_FAKE_CUDA_WRITE_DELAY_MS", holder_write_delay, 1);
    CHECK_OK(gpushm_buffer_open(conn, name, ro ? GPUSHM_OPEN_READONLY : 0, &b));
    for (unsigned i = 0; i < before; i++)
      CHECK_OK(gpushm_buffer_release(b, NULL, &seq));
    CHECK(write(report[1], &seq, sizeof seq) == sizeof seq);
    if (after) {
      CHECK(read(go[0], &byte, 1) == 1);
      /* the connection may be gone by now: releasing needs no daemon */
      for (unsigned i = 0; i < after; i++)
        CHECK_OK(gpushm_buffer_release(b, NULL, &seq));
      CHECK(write(report[1], &seq, sizeof seq) == sizeof seq);
    }
    for (;;)
      pause();
  }
  close(report[1]);
  close(go[0]);
  h.report = report[0];
  h.go = go[1];
  holder_report(&h); /* connected and done: */
  h.client_id = client_id_of(admin, h.pid);
  return h;
}

static int client_ended(const struct test_daemon *t, void *arg)
{
  const struct holder *h = arg;
  gpushm_t *conn = daemon_connect(t);
  gpushm_client_list_t *list;
  int listed = 0;

  CHECK_OK(gpushm_clients(conn, &list));
  for (size_t i = 0; i < gpushm_client_list_count(list); i++)
    listed |= gpushm_client_info_client_id(gpushm_client_list_get(list, i)) == h->client_id;
  gpushm_client_list_free(list);
  gpushm_disconnect(conn);
  return !listed;
}

/* Whether the daemon is done with a killed holder's end: its connection gone, and no
 * process left that it lists (the repair, if any, ran as the process was found gone). */
static int holder_gone(const struct test_daemon *t, void *arg)
{
  gpushm_stats_t *st;
  int listed;

  if (!client_ended(t, arg))
    return 0;
  st = daemon_stats(t);
  listed = gpushm_stats_detached_total(st) != 0;
  gpushm_stats_free(st);
  return !listed;
}

static void holder_kill_only(struct holder *h)
{
  int status;

  CHECK(kill(h->pid, SIGKILL) == 0);
  CHECK(waitpid(h->pid, &status, 0) == h->pid && WIFSIGNALED(status));
  close(h->report);
  close(h->go);
}

static void holder_kill(const struct test_daemon *t, struct holder *h)
{
  holder_kill_only(h);
  CHECK(wait_until(holder_gone, t, h));
}

static int fence_reaches(const struct test_daemon *t, void *arg)
{
  void **a = arg;
  (void)t;
  return fake_fence_of(a[0], a[1]) >= *(uint64_t *)a[2];
}

static void wait_fence(const struct test_daemon *t, gpushm_t *conn, gpushm_buffer_t *b,
                       uint64_t want)
{
  void *arg[] = { conn, b, &want };
  CHECK(wait_until(fence_reaches, t, arg));
  CHECK(fake_fence_of(conn, b) == want); /* exactly: never past the dead releaser's number */
}

static void finish(gpushm_t *conn, gpushm_buffer_t *b, gpushm_buffer_t *cpu)
{
  char name[GPUSHM_LIMIT_NAME_LEN + 1];

  snprintf(name, sizeof name, "%s", gpushm_buffer_name(b));
  CHECK_OK(gpushm_unlink(conn, name));
  if (cpu)
    CHECK_OK(gpushm_buffer_close(cpu));
  CHECK_OK(gpushm_buffer_close(b));
}

/* (a) The releaser dies: the acquire that would hang returns. */
static void test_killed_releaser(struct logged_daemon *ld, gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "dead-releaser", 0600), *cpu;
  struct holder h;
  char who[96];
  double t;

  cpu = open_cpu_consumer(conn, "dead-releaser");
  h = holder_start(&ld->t, conn, "dead-releaser", false, 1, 0);
  CHECK(gpushm_buffer_release_seq(b) == 1 && fake_fence_of(conn, b) == 0);
  /* published, never done: the CPU-fence consumer times out, and a GPU stream's wait
   * (an error in the fake, where a real stream would hang) is refused */
  CHECK_ERR(gpushm_buffer_acquire(cpu, NULL, 1, 200), GPUSHM_E_TIMEOUT);
  CHECK(strstr(gpushm_last_error_message(), "published but not done") != NULL);
  CHECK_ERR(gpushm_buffer_acquire(b, NULL, 1, 0), GPUSHM_E_CUDA);
  holder_kill_only(&h);
  t = test_clock_ms();
  CHECK_OK(gpushm_buffer_acquire(cpu, NULL, 1, 10000));
  test_log("the releaser killed, the consumer's acquire returned %.0f ms after",
           test_clock_ms() - t);
  CHECK(wait_until(holder_gone, &ld->t, &h));
  CHECK(fake_fence_of(conn, b) == 1);
  CHECK_OK(gpushm_buffer_acquire(b, NULL, 1, 0));
  CHECK(fences_raised(&ld->t) == 1);
  snprintf(who, sizeof who, "release 1 by client %u (pid %d)", h.client_id, (int)h.pid);
  CHECK(log_lines(ld, "'dead-releaser'", who,
                  "fence raised: waiters go on with what its work left") == 1);
  /* the buffer goes on: the next release is done as usual */
  CHECK_OK(gpushm_buffer_release(b, NULL, NULL));
  CHECK_OK(gpushm_buffer_acquire(cpu, NULL, 2, 1000));
  finish(conn, b, cpu);
}

static int detached_count_is(const struct test_daemon *t, void *arg)
{
  gpushm_stats_t *st = daemon_stats(t);
  int is = gpushm_stats_detached_total(st) == *(uint32_t *)arg;
  gpushm_stats_free(st);
  return is;
}

/* (b) An admin ends the releaser's connection while its process lives: its context and
 * its queued writes live too, so nothing is raised; it releases again, without the
 * daemon, and once it has exited that last release is raised. */
static void test_disconnected_releaser(struct logged_daemon *ld, gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "detached-releaser", 0600), *cpu;
  uint64_t before = fences_raised(&ld->t);
  uint32_t one = 1;
  struct holder h;
  char who[96];

  cpu = open_cpu_consumer(conn, "detached-releaser");
  h = holder_start(&ld->t, conn, "detached-releaser", false, 1, 1);
  CHECK_OK(gpushm_client_disconnect(conn, h.client_id));
  CHECK(wait_until(detached_count_is, &ld->t, &one)); /* its connection's end was seen */
  CHECK(write(h.go, "g", 1) == 1);
  CHECK(holder_report(&h) == 2);
  CHECK_ERR(gpushm_buffer_acquire(cpu, NULL, 1, 500), GPUSHM_E_TIMEOUT);
  CHECK(fake_fence_of(conn, b) == 0 && fences_raised(&ld->t) == before);
  CHECK(kill(h.pid, 0) == 0);
  holder_kill(&ld->t, &h);
  CHECK_OK(gpushm_buffer_acquire(cpu, NULL, 2, 10000));
  CHECK(fake_fence_of(conn, b) == 2 && fences_raised(&ld->t) == before + 1);
  snprintf(who, sizeof who, "release 2 by client %u (pid %d)", h.client_id, (int)h.pid);
  CHECK(log_lines(ld, "'detached-releaser'", who, "fence raised") == 1);
  test_log("a releaser disconnected while alive was waited for; raised to its last release "
           "once it exited");
  finish(conn, b, cpu);
}

/* (c) Releases after the dead one's, by a live client whose writes have not landed: the
 * dead one's number is raised, not the live one's.  Once more releases than the block
 * remembers came after it, the dead one's is not found, and nothing is raised. */
static void test_later_live_release(struct logged_daemon *ld, gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "later-release", 0600);
  uint64_t before = fences_raised(&ld->t);
  struct holder dead, live;

  dead = holder_start(&ld->t, conn, "later-release", false, 1, 0);
  live = holder_start(&ld->t, conn, "later-release", false, 1, 0);
  CHECK(gpushm_buffer_release_seq(b) == 2);
  holder_kill(&ld->t, &dead);
  wait_fence(&ld->t, conn, b, 1); /* 1, not 2: the live client's write is still its own */
  CHECK(fences_raised(&ld->t) == before + 1);
  holder_kill(&ld->t, &live);
  wait_fence(&ld->t, conn, b, 2);
  CHECK(fences_raised(&ld->t) == before + 2);
  finish(conn, b, NULL);

  b = create(conn, "later-releases", 0600);
  dead = holder_start(&ld->t, conn, "later-releases", false, 1, 0);
  live = holder_start(&ld->t, conn, "later-releases", false, GPUSHM_LIMIT_RELEASERS_KEPT, 0);
  CHECK(gpushm_buffer_release_seq(b) == 1 + GPUSHM_LIMIT_RELEASERS_KEPT);
  holder_kill(&ld->t, &dead);
  CHECK(fake_fence_of(conn, b) == 0 && fences_raised(&ld->t) == before + 2);
  CHECK(log_lines(ld, "'later-releases'", "fence raised", NULL) == 0);
  holder_kill(&ld->t, &live);
  wait_fence(&ld->t, conn, b, 1 + GPUSHM_LIMIT_RELEASERS_KEPT);
  finish(conn, b, NULL);
  test_log("a later live release was not overtaken; a release %u back was not found",
           GPUSHM_LIMIT_RELEASERS_KEPT);
}

/* (e) A live client's release 1, its write behind 3 s of work, then a dead one's 2: a
 * raise to 2 at once would be undone when 1 lands (a plain store), and acquirers of 2
 * would wait for ever.  The daemon waits for 1, then raises; the fence stays at 2. */
static void test_earlier_release_queued(struct logged_daemon *ld, gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "earlier-queued", 0600);
  uint64_t before = fences_raised(&ld->t);
  struct holder dead, live;
  char who[96];
  double t;

  holder_write_delay = "3000";
  live = holder_start(&ld->t, conn, "earlier-queued", false, 1, 0);
  t = test_clock_ms();
  holder_write_delay = "-1";
  dead = holder_start(&ld->t, conn, "earlier-queued", false, 1, 0);
  CHECK(gpushm_buffer_release_seq(b) == 2);
  holder_kill(&ld->t, &dead);
  CHECK(test_clock_ms() - t < 2500); /* else 1 may have landed: the test proves nothing */
  CHECK(fake_fence_of(conn, b) == 0 && fences_raised(&ld->t) == before);
  wait_fence(&ld->t, conn, b, 2);
  test_log("a dead releaser's fence raised %.0f ms after the live release before it was "
           "queued (its write lands at 3000 ms)", test_clock_ms() - t);
  CHECK(test_clock_ms() - t >= 3000);
  usleep(200 * 1000);
  CHECK(fake_fence_of(conn, b) == 2 && fences_raised(&ld->t) == before + 1);
  snprintf(who, sizeof who, "release 2 by client %u (pid %d)", dead.client_id, (int)dead.pid);
  CHECK(log_lines(ld, "'earlier-queued'", who, "fence raised: waiters") == 1);
  holder_kill(&ld->t, &live);
  CHECK(fake_fence_of(conn, b) == 2 && fences_raised(&ld->t) == before + 1);
  finish(conn, b, NULL);
}

/* (d) A read-write holder forges signatures: the dead releaser's release signed by a
 * live client, and an unpublished number signed by the dead one.  The death raises
 * nothing; the forgery takes effect once the client it names has exited, and then
 * only up to a published number, which the forger could have written itself. */
static void test_forged_signatures(struct logged_daemon *ld, gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "forged", 0600);
  uint64_t before = fences_raised(&ld->t);
  struct holder dead, live;

  dead = holder_start(&ld->t, conn, "forged", false, 1, 0);
  live = holder_start(&ld->t, conn, "forged", false, 0, 0);
  forge(conn, "forged", live.client_id, 1);
  forge(conn, "forged", dead.client_id, 5);
  holder_kill(&ld->t, &dead);
  CHECK(fake_fence_of(conn, b) == 0 && fences_raised(&ld->t) == before);
  holder_kill(&ld->t, &live);
  wait_fence(&ld->t, conn, b, 1);
  CHECK(fences_raised(&ld->t) == before + 1);
  finish(conn, b, NULL);

  /* garbage over the header: the signatures are not believed, and the daemon says so */
  b = create(conn, "scribbled", 0600);
  dead = holder_start(&ld->t, conn, "scribbled", false, 1, 0);
  ((struct sync_control *)shared_memfd_mapping("scribbled"))->magic = ~0ull;
  holder_kill(&ld->t, &dead);
  CHECK(fake_fence_of(conn, b) == 0 && fences_raised(&ld->t) == before + 1);
  CHECK(log_lines(ld, "warn: 'scribbled'", "header was overwritten (wrong magic)", NULL) == 1);
  finish(conn, b, NULL);
}

/* (e) A read-only holder cannot release, so its death is never a repair, even when a
 * forged signature names it. */
static void test_read_only_holder(struct logged_daemon *ld, gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "read-only-holder", 0644);
  uint64_t before = fences_raised(&ld->t);
  struct holder dead, ro;

  dead = holder_start(&ld->t, conn, "read-only-holder", false, 1, 0);
  ro = holder_start(&ld->t, conn, "read-only-holder", true, 0, 0);
  forge(conn, "read-only-holder", ro.client_id, 1);
  holder_kill(&ld->t, &dead);
  holder_kill(&ld->t, &ro);
  CHECK(fake_fence_of(conn, b) == 0 && fences_raised(&ld->t) == before);
  finish(conn, b, NULL);
  test_log("a read-only holder%s named as the releaser: nothing raised",
           geteuid() == 0 ? " of uid 65534" : "");
}

/* (f) Past the limits of what the daemon lists (its uid has GPUSHM_LIMIT_DETACHED_PER_UID
 * disconnected processes listed already), a disconnected releaser is not listed, but
 * still watched for its fences, by the sweep: nothing raised while it lives, its
 * release once it has exited. */
static void test_past_the_limits(struct logged_daemon *ld, gpushm_t *conn)
{
  enum { FILL = GPUSHM_LIMIT_DETACHED_PER_UID };
  gpushm_buffer_t *b = create(conn, "past-the-limits", 0600), *cpu;
  uint64_t before = fences_raised(&ld->t);
  struct holder fill[FILL], h;
  uint32_t full = FILL, none = 0;
  double t;

  cpu = open_cpu_consumer(conn, "past-the-limits");
  for (unsigned i = 0; i < FILL; i++) {
    fill[i] = holder_start(&ld->t, conn, "past-the-limits", false, 0, 0);
    CHECK_OK(gpushm_client_disconnect(conn, fill[i].client_id));
  }
  CHECK(wait_until(detached_count_is, &ld->t, &full));
  h = holder_start(&ld->t, conn, "past-the-limits", false, 1, 0);
  CHECK_OK(gpushm_client_disconnect(conn, h.client_id));
  CHECK(wait_until(client_ended, &ld->t, &h));
  CHECK(detached_count_is(&ld->t, &full)); /* not listed */
  CHECK(log_lines(ld, "keeps 1 buffers mapped after its connection ended; not listed", NULL,
                  NULL) == 1);
  /* alive: longer than a sweep, and still nothing */
  CHECK_ERR(gpushm_buffer_acquire(cpu, NULL, 1, 2 * GPUSHM_DETACHED_SWEEP_MS), GPUSHM_E_TIMEOUT);
  CHECK(fences_raised(&ld->t) == before);
  holder_kill_only(&h);
  t = test_clock_ms();
  CHECK_OK(gpushm_buffer_acquire(cpu, NULL, 1, 10000));
  test_log("a releaser past the detached limits: raised by the sweep %.0f ms after it was "
           "killed", test_clock_ms() - t);
  CHECK(fake_fence_of(conn, b) == 1 && fences_raised(&ld->t) == before + 1);
  for (unsigned i = 0; i < FILL; i++)
    holder_kill_only(&fill[i]);
  CHECK(wait_until(detached_count_is, &ld->t, &none));
  finish(conn, b, cpu);
}

/* (g) Each driver call the repair makes, failing in the daemon: logged, nothing
 * raised, the daemon and the buffer unharmed.  (The create's zeroing makes the first
 * map and synchronisation: the repair's are the second.) */
static void test_faults(void)
{
  static const char *const faults[] = {
    "cuMemcpyDtoH=CUDA_ERROR_INVALID_VALUE", "cuMemcpyHtoD=CUDA_ERROR_INVALID_VALUE",
    "cuMemAddressReserve=CUDA_ERROR_OUT_OF_MEMORY@2", "cuMemMap=CUDA_ERROR_OUT_OF_MEMORY@2",
    "cuMemSetAccess=CUDA_ERROR_INVALID_VALUE@2", "cuCtxSynchronize=CUDA_ERROR_INVALID_VALUE@2",
  };

  for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
    struct logged_daemon ld;
    gpushm_buffer_t *b;
    gpushm_stats_t *st;
    struct holder h;
    gpushm_t *conn;
    char call[64];
    uint64_t seq;

    snprintf(call, sizeof call, "%.*s", (int)strcspn(faults[i], "="), faults[i]);
    logged_start(&ld, faults[i]);
    conn = daemon_connect(&ld.t);
    b = create(conn, "faulty-repair", 0600);
    h = holder_start(&ld.t, conn, "faulty-repair", false, 1, 0);
    holder_kill(&ld.t, &h);
    CHECK(log_lines(&ld, "'faulty-repair'", "raising its fence failed", call) == 1);
    CHECK(fences_raised(&ld.t) == 0);
    /* (the fake's copy lands at once, so a failed synchronisation after it is no test
     * of the fence) */
    CHECK(fake_fence_of(conn, b) == 0 || strcmp(call, "cuCtxSynchronize") == 0);
    CHECK_OK(gpushm_buffer_release(b, NULL, &seq));
    CHECK(seq == 2);
    CHECK_OK(gpushm_buffer_acquire(b, NULL, 2, 0));
    finish(conn, b, NULL);
    st = daemon_stats(&ld.t);
    CHECK(gpushm_stats_buffers(st) == 0 && gpushm_stats_bytes_allocated(st) == 0);
    gpushm_stats_free(st);
    gpushm_disconnect(conn);
    logged_stop(&ld);
  }
  test_log("%zu failing driver calls: each logged, nothing raised, the daemon unharmed",
           sizeof faults / sizeof faults[0]);
}

/* gpushmctl stats (with args) says text. */
static void ctl_shows(const struct test_daemon *t, const char *args, const char *text)
{
  const char *builddir = getenv("GPUSHM_TEST_BUILDDIR");
  /* --json lists every row (the latency histogram's too, 0.8): read it all, or
   * gpushmctl dies writing into a closed pipe */
  static char out[1 << 20];
  char cmd[1024];
  size_t n = 0, got;
  FILE *p;

  CHECK(builddir != NULL);
  snprintf(cmd, sizeof cmd, "GPUSHM_SOCKET='%s' '%s/ctl/gpushmctl' stats%s", t->socket,
           builddir, args);
  CHECK((p = popen(cmd, "r")) != NULL);
  while (n < sizeof out - 1 && (got = fread(out + n, 1, sizeof out - 1 - n, p)) > 0)
    n += got;
  out[n] = '\0';
  CHECK(pclose(p) == 0);
  if (!strstr(out, text)) {
    fprintf(stderr, "gpushmctl stats%s lacks '%s':\n%s", args, text, out);
    exit(1);
  }
}

int main(void)
{
  const char *fake_lib = getenv("GPUSHM_FAKE_CUDA_LIB");
  struct logged_daemon ld;
  gpushm_stats_t *st;
  gpushm_t *conn;

  if (!fake_lib || access(fake_lib, R_OK) != 0) {
    test_log("built without CUDA headers: no fake driver for fences");
    return TEST_SKIP;
  }
  setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1);
  logged_start(&ld, NULL);
  conn = daemon_connect(&ld.t);
  test_killed_releaser(&ld, conn);
  test_disconnected_releaser(&ld, conn);
  test_later_live_release(&ld, conn);
  test_earlier_release_queued(&ld, conn);
  test_forged_signatures(&ld, conn);
  test_read_only_holder(&ld, conn);
  test_past_the_limits(&ld, conn);
  st = daemon_stats(&ld.t);
  CHECK(gpushm_stats_buffers(st) == 0 && gpushm_stats_bytes_allocated(st) == 0);
  CHECK(gpushm_stats_fences_raised(st) == 8);
  gpushm_stats_free(st);
  ctl_shows(&ld.t, "", "fences raised:  8 (releasers died before their GPU wrote the fence");
  ctl_shows(&ld.t, " --json", "\"fences_raised\":8,");
  ctl_shows(&ld.t, " --prometheus", "\ngpushm_fences_raised_total 8\n");
  gpushm_disconnect(conn);
  logged_stop(&ld);
  test_faults();
  return 0;
}
