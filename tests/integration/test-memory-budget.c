/* Host memory is capped before the kernel would step in: creates beyond the daemon's
 * host-memory budget fail with GPUSHM_E_NOMEM, beyond a uid's host quota with
 * GPUSHM_E_LIMIT, and the daemon lives on.  With a memory cgroup (where this machine
 * lets the test make one) the default budget is derived from the cgroup's limit, and a
 * client asking for more than the cgroup holds gets an error, not an OOM-killed daemon. */
#include "config.h"
#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)

static void test_explicit_budget(void)
{
  struct test_daemon d = { 0 };
  static gpushm_t *conn; /* reachable in forked children too (valgrind) */
  gpushm_buffer_t *a, *b, *c;
  pid_t pid;

  daemon_start(&d, "--host-memory-budget", "8M", "--max-host-bytes-per-uid", "5M", NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "a", 4 * MiB, NULL, &a));
  /* the uid's quota first: 4 + 2 > 5 */
  CHECK_ERR(gpushm_buffer_create(conn, "b", 2 * MiB, NULL, &b), GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "bytes of host memory (limit 5242880)") != NULL);
  /* another uid fills the rest of the budget, then the budget says no */
  pid = fork_as(65534, 65534);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *x, *y;
    CHECK_OK(gpushm_buffer_create(mine, "x", 3 * MiB, NULL, &x));
    CHECK_OK(gpushm_buffer_close(x));
    CHECK_ERR(gpushm_buffer_create(mine, "y", 2 * MiB, NULL, &y), GPUSHM_E_NOMEM);
    CHECK(strstr(gpushm_last_error_message(), "host-memory budget is used up") != NULL);
    CHECK_OK(gpushm_ping(mine)); /* an error, not a hang-up */
    gpushm_disconnect(mine); /* x stays: persistent */
    _exit(0);
  }
  check_child(pid);
  CHECK_OK(gpushm_unlink(conn, "x"));
  CHECK_OK(gpushm_unlink(conn, "a"));
  CHECK_OK(gpushm_buffer_close(a));
  CHECK_OK(gpushm_buffer_create(conn, "c", 5 * MiB, NULL, &c));
  CHECK_OK(gpushm_buffer_close(c));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* A memory cgroup of our own under the one this process is in (v1 or v2); NULL where
 * the machine does not allow it. */
static const char *make_memory_cgroup(uint64_t limit, char *dir, size_t len)
{
  char line[512], path[1024];
  FILE *f = fopen("/proc/self/cgroup", "r");
  const char *limit_file = NULL;

  if (!f)
    return NULL;
  while (fgets(line, sizeof line, f)) {
    char *ctl = strchr(line, ':'), *cg;
    if (!ctl || !(cg = strchr(ctl + 1, ':')))
      continue;
    *cg++ = '\0';
    cg[strcspn(cg, "\n")] = '\0';
    if (strcmp(ctl + 1, "memory") == 0) {
      snprintf(dir, len, "/sys/fs/cgroup/memory%s/gpushm-budget-%d", cg, (int)getpid());
      limit_file = "memory.limit_in_bytes";
      break;
    }
    if (ctl[1] == '\0' && !limit_file) {
      snprintf(dir, len, "/sys/fs/cgroup%s/gpushm-budget-%d", cg, (int)getpid());
      limit_file = "memory.max";
    }
  }
  fclose(f);
  if (!limit_file || mkdir(dir, 0755) < 0)
    return NULL;
  snprintf(path, sizeof path, "%s/%s", dir, limit_file);
  if (!(f = fopen(path, "w")) || fprintf(f, "%llu\n", (unsigned long long)limit) < 0 ||
      fclose(f) != 0) {
    rmdir(dir);
    return NULL;
  }
  return dir;
}

static void join_cgroup(void *dir)
{
  char path[700];
  FILE *f;

  snprintf(path, sizeof path, "%s/cgroup.procs", (const char *)dir);
  CHECK((f = fopen(path, "w")) != NULL);
  fprintf(f, "%d\n", (int)getpid());
  CHECK(fclose(f) == 0);
  /* Valgrind's own memory would be charged here too; this test is about the kernel. */
  unsetenv("GPUSHM_TEST_VALGRIND");
}

static void test_cgroup_budget(void)
{
  const uint64_t limit = 512 * MiB, chunk = 32 * MiB;
  struct test_daemon d = { 0 };
  char cgroup[600];
  gpushm_t *conn;
  gpushm_buffer_t *bufs[64];
  int n = 0, r = 0, status;

  if (!make_memory_cgroup(limit, cgroup, sizeof cgroup)) {
    test_log("cannot make a memory cgroup here (%s); the cgroup part is skipped",
             strerror(errno));
    return;
  }
  snprintf(d.dir, sizeof d.dir, "/tmp/gpushm-test.XXXXXX");
  CHECK(mkdtemp(d.dir) != NULL);
  snprintf(d.socket, sizeof d.socket, "%s/gpushmd.sock", d.dir);
  /* the budget alone, not the per-uid share of it */
  daemon_respawn_with(&d, join_cgroup, cgroup, "--max-host-bytes-per-uid", "0", NULL);
  conn = daemon_connect(&d);
  /* far more than the cgroup holds: every create must be answered */
  while (n < 64 && (r = gpushm_buffer_create(conn, "chunk", chunk, NULL, &bufs[n])) == 0) {
    CHECK_OK(gpushm_unlink(conn, "chunk")); /* held, not named: the name is reused */
    n++;
  }
  test_log("%d creates of 32 MiB fit under the 512 MiB cgroup", n);
  CHECK(r == GPUSHM_E_NOMEM);
  CHECK(strstr(gpushm_last_error_message(), "host-memory budget") != NULL);
  /* the default budget is 75% of the cgroup's limit */
  CHECK((uint64_t)n * chunk <= limit / 100 * 75 && (uint64_t)(n + 1) * chunk > limit / 100 * 75);
  CHECK(waitpid(d.pid, &status, WNOHANG) == 0);
  CHECK_OK(gpushm_ping(conn));
  while (n)
    CHECK_OK(gpushm_buffer_close(bufs[--n]));
  CHECK_OK(gpushm_buffer_create(conn, "again", chunk, NULL, &bufs[0]));
  CHECK_OK(gpushm_buffer_close(bufs[0]));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  CHECK(rmdir(cgroup) == 0);
}

int main(void)
{
  if (geteuid() != 0) {
    test_log("needs root to act as another uid and to make cgroups; skipping");
    return TEST_SKIP;
  }
  test_explicit_budget();
  test_cgroup_budget();
  return 0;
}
