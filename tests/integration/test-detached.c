/* SPDX-License-Identifier: MIT */
/* Memory a live process keeps after its connection ended: an admin disconnects a client
 * that maps session buffers (which the daemon then frees) and one it shares.  Freed host
 * memory is taken back (the process's mapping reads zeros, the pages are gone); freed
 * device memory (cuda-fd, with the fake driver) stays pinned by the process, and
 * statistics list it with its buffers and count that as pinned; a non-admin sees the
 * totals but not the process; once it exits it is gone from the list.  A client that
 * simply exits is not listed (for long).  Every limit on it is crossed (test_limits).
 * (An fd kept past a close: test-attacks.) */
#include "config.h"
#include "gpushm_limits.h"
#include "harness.h"

#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1u << 20)

static struct test_daemon d;
static bool have_fake_gpu; /* the daemon and this test use the fake CUDA driver */

static int detached_is(const struct test_daemon *daemon, void *want)
{
  gpushm_stats_t *s = daemon_stats(daemon);
  int ok = gpushm_stats_detached_total(s) == *(uint32_t *)want;
  gpushm_stats_free(s);
  return ok;
}

static pid_t holder_as(uid_t uid, const int ready_pipe[2], const int go_pipe[2], bool create,
                       const char *const *names);
#define holder(...) holder_as(0, __VA_ARGS__)

/* A child that opens the named buffers (creating "mine-<pid>" as a session buffer
 * first, if create), fills what it created, says 'r' on ready and waits for a byte on
 * go: 'c' checks its data is still there and answers 'c', anything else ends it. */
static pid_t holder_as(uid_t uid, const int ready_pipe[2], const int go_pipe[2], bool create,
                       const char *const *names)
{
  pid_t pid = uid ? fork_as(uid, uid) : fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    int ready = ready_pipe[1], go = go_pipe[0];
    gpushm_t *conn;
    gpushm_buffer_t *mine = NULL, *dev = NULL, *b;
    char c;

    close(ready_pipe[0]);
    close(go_pipe[1]); /* the parent's closing it is then an end of file here */
    conn = daemon_connect(&d);

    if (create) {
      gpushm_create_opts_t opts;
      char name[64];
      gpushm_create_opts_init(&opts);
      opts.lifetime = GPUSHM_LIFETIME_SESSION; /* goes with its creator's connection */
      opts.backend = GPUSHM_BACKEND_HOST;
      snprintf(name, sizeof name, "mine-%d", (int)getpid());
      /* past the carve limit: an allocation of its own */
      CHECK_OK(gpushm_buffer_create(conn, name, 2 * MiB, &opts, &mine));
      memset(gpushm_buffer_ptr(mine), 0x6d, 2 * MiB);
      if (have_fake_gpu) {
        opts.backend = GPUSHM_BACKEND_CUDA_FD;
        snprintf(name, sizeof name, "dev-%d", (int)getpid());
        CHECK_OK(gpushm_buffer_create(conn, name, 4 * MiB, &opts, &dev));
        memset(gpushm_buffer_ptr(dev), 0x64, 4 * MiB); /* the fake's device memory */
      }
    }
    for (; names && *names; names++)
      CHECK_OK(gpushm_buffer_open(conn, *names, GPUSHM_OPEN_READONLY, &b));
    CHECK(write(ready, "r", 1) == 1);
    while (read(go, &c, 1) == 1 && c == 'c') {
      const unsigned char *p = gpushm_buffer_ptr(mine), *q = dev ? gpushm_buffer_ptr(dev) : NULL;
      /* freed host memory was taken back: still mapped (no fault), zeros; device
       * memory stays what it was in the process that maps it */
      CHECK(p[0] == 0 && p[2 * MiB - 1] == 0);
      CHECK(!q || (q[0] == 0x64 && q[4 * MiB - 1] == 0x64));
      CHECK(write(ready, "c", 1) == 1);
    }
    _exit(0);
  }
  return pid;
}

static void test_disconnected_holder(gpushm_t *conn)
{
  static const char *const shared[] = { "shared", NULL };
  gpushm_buffer_t *b;
  gpushm_stats_t *s;
  const gpushm_detached_t *det;
  int ready[2], go[2];
  uint32_t one = 1, none = 0;
  uint64_t released = 0, pinned = 0;
  bool saw_mine = false, saw_shared = false;
  size_t n;
  pid_t pid;
  char c;

  CHECK_OK(gpushm_buffer_create(conn, "shared", MiB, NULL, &b));
  CHECK(pipe(ready) == 0 && pipe(go) == 0);
  pid = holder(ready, go, true, shared);
  CHECK(read(ready[0], &c, 1) == 1 && c == 'r');
  CHECK_OK(gpushm_client_disconnect(conn, client_id_of(conn, pid)));
  CHECK(wait_until(detached_is, &d, &one));

  s = daemon_stats(&d);
  CHECK(gpushm_stats_detached_count(s) == 1 && (det = gpushm_stats_detached(s, 0)));
  CHECK(gpushm_detached_pid(det) == (uint32_t)pid && gpushm_detached_uid(det) == geteuid());
  n = have_fake_gpu ? 3 : 2;
  CHECK(gpushm_detached_buffers_total(det) == n && gpushm_detached_buffer_count(det) == n);
  for (size_t i = 0; i < n; i++) {
    const gpushm_detached_buffer_t *db = gpushm_detached_buffer(det, i);
    const char *name = gpushm_detached_buffer_name(db);
    if (strcmp(name, "shared") == 0) {
      saw_shared = true;
      CHECK(!gpushm_detached_buffer_released(db)); /* this process still holds it */
      continue;
    }
    /* session buffers of the disconnected client: the daemon freed them */
    CHECK(gpushm_detached_buffer_released(db));
    released += gpushm_detached_buffer_allocated(db);
    if (strncmp(name, "mine-", 5) == 0) {
      saw_mine = gpushm_detached_buffer_backend(db) == GPUSHM_BACKEND_HOST;
    } else {
      CHECK(strncmp(name, "dev-", 4) == 0 &&
            gpushm_detached_buffer_backend(db) == GPUSHM_BACKEND_CUDA_FD);
      pinned = gpushm_detached_buffer_allocated(db);
    }
  }
  CHECK(saw_mine && saw_shared);
  CHECK(gpushm_detached_bytes_released(det) == released);
  /* host memory was taken back as it was freed: only device memory stays pinned */
  CHECK(gpushm_stats_bytes_pinned_after_release(s) == pinned);
  gpushm_stats_free(s);

  /* The process's mappings hold what the daemon left there... */
  CHECK(write(go[1], "c", 1) == 1);
  CHECK(read(ready[0], &c, 1) == 1 && c == 'c');
  /* ...and a non-admin sees that there is such memory, not whose or what */
  {
    pid_t nobody = fork_as(65534, 65534);
    CHECK(nobody >= 0);
    if (nobody == 0) {
      gpushm_t *mine = daemon_connect(&d);
      gpushm_stats_t *st;
      CHECK_OK(gpushm_stats(mine, &st));
      CHECK(gpushm_stats_detached_total(st) == 1 && gpushm_stats_detached_count(st) == 0);
      CHECK(gpushm_stats_bytes_pinned_after_release(st) == (have_fake_gpu ? 4 * MiB : 0));
      gpushm_stats_free(st);
      gpushm_disconnect(mine);
      _exit(0);
    }
    check_child(nobody);
  }
  /* it exits: nothing is pinned any more */
  CHECK(write(go[1], "x", 1) == 1);
  check_child(pid);
  CHECK(wait_until(detached_is, &d, &none));
  s = daemon_stats(&d);
  CHECK(gpushm_stats_bytes_pinned_after_release(s) == 0);
  gpushm_stats_free(s);
  close(ready[0]), close(ready[1]), close(go[0]), close(go[1]);
  CHECK_OK(gpushm_unlink(conn, "shared"));
  CHECK_OK(gpushm_buffer_close(b));
  test_log("a disconnected holder was listed with its freed buffer until it exited");
}

/* A client that exits is not a detached one, even if it held buffers. */
static void test_exited_holder(gpushm_t *conn)
{
  static const char *const shared[] = { "exiting", NULL };
  gpushm_buffer_t *b;
  int ready[2], go[2];
  uint32_t none = 0;
  pid_t pid;
  char c;

  CHECK_OK(gpushm_buffer_create(conn, "exiting", MiB, NULL, &b));
  CHECK(pipe(ready) == 0 && pipe(go) == 0);
  pid = holder(ready, go, false, shared);
  CHECK(read(ready[0], &c, 1) == 1);
  CHECK(write(go[1], "x", 1) == 1);
  check_child(pid);
  CHECK(wait_until(detached_is, &d, &none));
  close(ready[0]), close(ready[1]), close(go[0]), close(go[1]);
  CHECK_OK(gpushm_unlink(conn, "exiting"));
  CHECK_OK(gpushm_buffer_close(b));
}

/* Disconnects every client but this process's own. */
static void disconnect_others(gpushm_t *conn)
{
  gpushm_client_list_t *list;

  CHECK_OK(gpushm_clients(conn, &list));
  for (size_t i = 0; i < gpushm_client_list_count(list); i++) {
    const gpushm_client_info_t *ci = gpushm_client_list_get(list, i);
    if (gpushm_client_info_pid(ci) != (uint32_t)getpid())
      CHECK_OK(gpushm_client_disconnect(conn, gpushm_client_info_client_id(ci)));
  }
  gpushm_client_list_free(list);
}

/* Crossed: processes per uid (one uid's 33 processes), processes in all (one past 256,
 * over 9 uids), processes listed (32), buffers listed per process (4 of the first one's)
 * and buffers remembered per process (its 1025, of which 1024 are). */
static void test_limits(gpushm_t *conn)
{
  enum { B = GPUSHM_LIMIT_DETACHED_BUFFERS_KEPT + 1, PER_UID = GPUSHM_LIMIT_DETACHED_PER_UID,
         N = GPUSHM_LIMIT_DETACHED_PROCESSES + 1 };
  static pid_t pids[N + PER_UID];
  static const char *names[B + 1];
  static char text[B][16];
  static gpushm_buffer_t *bufs[B];
  gpushm_stats_t *s;
  const gpushm_detached_t *first;
  int ready[2], go[2];
  uint32_t want, none = 0;
  char c;

  for (int i = 0; i < B; i++) {
    snprintf(text[i], sizeof text[i], "many-%d", i);
    names[i] = text[i];
    CHECK_OK(gpushm_buffer_create(conn, text[i], 4096, NULL, &bufs[i]));
  }

  /* one uid's 33 processes: 32 tracked */
  CHECK(pipe(ready) == 0 && pipe(go) == 0);
  names[1] = NULL;
  for (int i = 0; i <= PER_UID; i++)
    pids[i] = holder_as(60000, ready, go, false, names);
  for (int i = 0; i <= PER_UID; i++)
    CHECK(read(ready[0], &c, 1) == 1);
  disconnect_others(conn);
  want = PER_UID;
  CHECK(wait_until(detached_is, &d, &want));
  close(go[1]);
  for (int i = 0; i <= PER_UID; i++)
    check_child(pids[i]);
  CHECK(wait_until(detached_is, &d, &none));
  close(ready[0]), close(ready[1]), close(go[0]);

  /* 257 processes over 9 uids: 256 tracked */
  CHECK(pipe(ready) == 0 && pipe(go) == 0);
  names[1] = text[1];
  pids[0] = holder(ready, go, false, names);  /* all B buffers, connected first: */
  CHECK(read(ready[0], &c, 1) == 1);          /* the first disconnected, the first listed */
  names[1] = NULL;
  for (int i = 1; i < N; i++)
    pids[i] = holder_as(60001 + (uid_t)((i - 1) / PER_UID), ready, go, false, names);
  for (int i = 1; i < N; i++)
    CHECK(read(ready[0], &c, 1) == 1);
  disconnect_others(conn);
  want = GPUSHM_LIMIT_DETACHED_PROCESSES;
  CHECK(wait_until(detached_is, &d, &want));
  s = daemon_stats(&d);
  CHECK(gpushm_stats_detached_count(s) == GPUSHM_LIMIT_DETACHED_LISTED);
  first = gpushm_stats_detached(s, 0);
  CHECK(gpushm_detached_pid(first) == (uint32_t)pids[0]);
  CHECK(gpushm_detached_buffers_total(first) == B);
  CHECK(gpushm_detached_bytes_total(first) == (uint64_t)B * 4096);
  CHECK(gpushm_detached_buffer_count(first) == GPUSHM_LIMIT_DETACHED_BUFFERS_LISTED);
  gpushm_stats_free(s);
  close(go[1]); /* every holder reads end of file and exits */
  for (int i = 0; i < N; i++)
    check_child(pids[i]);
  CHECK(wait_until(detached_is, &d, &none));
  close(ready[0]), close(ready[1]), close(go[0]);
  for (int i = 0; i < B; i++) {
    CHECK_OK(gpushm_unlink(conn, text[i]));
    CHECK_OK(gpushm_buffer_close(bufs[i]));
  }
  test_log("%d processes of one uid: %u tracked; %d over 9 uids: %u tracked, %u listed; "
           "%u buffers listed and %u remembered of %d", PER_UID + 1, PER_UID, N,
           GPUSHM_LIMIT_DETACHED_PROCESSES, GPUSHM_LIMIT_DETACHED_LISTED,
           GPUSHM_LIMIT_DETACHED_BUFFERS_LISTED, GPUSHM_LIMIT_DETACHED_BUFFERS_KEPT, B);
}

int main(void)
{
  const char *fake = getenv("GPUSHM_FAKE_CUDA_LIB");
  gpushm_t *conn;

  if (geteuid() != 0) {
    test_log("not root: disconnecting other clients needs an admin");
    return TEST_SKIP;
  }
  signal(SIGPIPE, SIG_IGN);
  if (fake && access(fake, R_OK) == 0) {
    setenv("GPUSHM_CUDA_LIBRARY", fake, 1); /* the daemon's driver, and the children's */
    have_fake_gpu = true;
  }
  daemon_start(&d, "--max-clients-per-uid", "400", "--default-mode", "0644", NULL);
  conn = daemon_connect(&d);
  test_disconnected_holder(conn);
  test_exited_holder(conn);
  test_limits(conn);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}
