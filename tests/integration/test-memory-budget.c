/* SPDX-License-Identifier: MIT */
/* Host memory is capped before the kernel would step in: creates beyond the daemon's
 * host-memory budget fail with GPUSHM_E_NOMEM, beyond a uid's host quota with
 * GPUSHM_E_LIMIT, and the daemon lives on.  Device memory has a per-uid quota too (by
 * default half of each GPU, through the fake driver here), so one uid cannot take a GPU.  With a memory cgroup (where this machine
 * lets the test make one) the default budget is derived from the cgroup's limit, and a
 * client asking for more than the cgroup holds gets an error, not an OOM-killed daemon. */
#include "config.h"
#include "harness.h"
#include "gpushm-admin.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
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
  /* in sizes people read, naming the setting that raises it and who may */
  CHECK(strstr(gpushm_last_error_message(), "uid 0 would hold 6 MiB of host memory (limit 5 MiB; "
               "gpushmd's administrator may raise max-host-bytes-per-uid in gpushmd.conf)"));
  /* another uid fills the rest of the budget, then the budget says no */
  pid = fork_as(65534, 65534);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *x, *y;
    CHECK_OK(gpushm_buffer_create(mine, "x", 3 * MiB, NULL, &x));
    CHECK_OK(gpushm_buffer_close(x));
    CHECK_ERR(gpushm_buffer_create(mine, "y", 2 * MiB, NULL, &y), GPUSHM_E_NOMEM);
    CHECK(strstr(gpushm_last_error_message(), "host-memory budget is used up: 7 MiB of 8 MiB "
                 "allocated, 2 MiB more asked for (gpushmd's administrator may raise "
                 "host-memory-budget in gpushmd.conf)") != NULL);
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

/* gpushm_uid_limit_bytes{memory="device",device=DEVICE}, or 0 where the daemon sends
 * no such row (no limit). */
static uint64_t device_limit_row(const struct test_daemon *d, const char *device)
{
  gpushm_stats_t *st = daemon_stats(d);
  uint64_t value = 0;

  for (size_t i = 0; i < gpushm_stats_metric_count(st); i++) {
    const gpushm_metric_t *m = gpushm_stats_metric(st, i);
    bool is_device = false, this_device = false;
    if (strcmp(gpushm_metric_name(m), "gpushm_uid_limit_bytes") != 0)
      continue;
    for (size_t j = 0; j < gpushm_metric_label_count(m); j++) {
      const gpushm_metric_label_t *l = gpushm_metric_label(m, j);
      if (strcmp(gpushm_metric_label_name(l), "memory") == 0)
        is_device = strcmp(gpushm_metric_label_value(l), "device") == 0;
      if (strcmp(gpushm_metric_label_name(l), "device") == 0)
        this_device = strcmp(gpushm_metric_label_value(l), device) == 0;
    }
    if (is_device && this_device)
      value = gpushm_metric_value(m);
  }
  gpushm_stats_free(st);
  return value;
}

static int create_on_gpu(gpushm_t *conn, const char *name, uint64_t size, gpushm_buffer_t **out)
{
  gpushm_create_opts_t opts;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.device = 0;
  opts.lifetime = GPUSHM_LIFETIME_PERSISTENT;
  opts.mode = 0644;
  return gpushm_buffer_create(conn, name, size, &opts, out);
}

/* The default device quota is half of each GPU (the fake's is 256 MiB here): uid 65534
 * gets 128 MiB of it and is refused beyond, with the setting's name; root still
 * creates; an explicit size and 0 (no limit) are obeyed. */
static void test_device_quota(void)
{
  struct test_daemon d = { 0 };
  static gpushm_t *conn;
  gpushm_buffer_t *r, *big;
  pid_t pid;

  setenv("GPUSHM_FAKE_CUDA_MEMORY", "268435456", 1);
  daemon_start(&d, NULL);
  CHECK(device_limit_row(&d, "0") == 128 * MiB);
  /* root's first: the GPU is not the first comer's (and the driver is then loaded in
   * this process, which the children inherit: uid 65534 could not read it from a build
   * tree in a 0700 home) */
  conn = daemon_connect(&d);
  CHECK_OK(create_on_gpu(conn, "root-1", 96 * MiB, &r));
  CHECK_OK(gpushm_buffer_close(r));
  pid = fork_as(65534, 65534);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *x, *y;
    CHECK_OK(create_on_gpu(mine, "nobody-1", 96 * MiB, &x));
    CHECK_OK(gpushm_buffer_close(x));
    CHECK_ERR(create_on_gpu(mine, "nobody-2", 64 * MiB, &y), GPUSHM_E_LIMIT);
    CHECK(strstr(gpushm_last_error_message(), "uid 65534 would hold 160 MiB of device 0's memory "
                 "(limit 128 MiB; gpushmd's administrator may raise max-device-bytes-per-uid in "
                 "gpushmd.conf)") != NULL);
    /* closing does not free a persistent buffer: still refused */
    CHECK_ERR(create_on_gpu(mine, "nobody-2", 64 * MiB, &y), GPUSHM_E_LIMIT);
    CHECK_OK(create_on_gpu(mine, "nobody-3", 32 * MiB, &y)); /* exactly the rest */
    CHECK_OK(gpushm_buffer_close(y));
    CHECK_OK(gpushm_ping(mine));
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  /* root's half was its own: still room for it */
  CHECK_OK(create_on_gpu(conn, "root-2", 32 * MiB, &r));
  CHECK_OK(gpushm_buffer_close(r));
  /* what nobody unlinks comes back to it */
  CHECK_OK(gpushm_unlink(conn, "nobody-1"));
  pid = fork_as(65534, 65534);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *y;
    CHECK_OK(create_on_gpu(mine, "nobody-2", 64 * MiB, &y));
    CHECK_OK(gpushm_buffer_close(y));
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  gpushm_disconnect(conn);
  daemon_stop(&d);

  daemon_start(&d, "--max-device-bytes-per-uid", "32M", NULL);
  CHECK(device_limit_row(&d, "0") == 32 * MiB);
  conn = daemon_connect(&d);
  CHECK_ERR(create_on_gpu(conn, "big", 64 * MiB, &big), GPUSHM_E_LIMIT);
  gpushm_disconnect(conn);
  daemon_stop(&d);

  daemon_start(&d, "--max-device-bytes-per-uid", "0", NULL);
  CHECK(device_limit_row(&d, "0") == 0);
  conn = daemon_connect(&d);
  CHECK_OK(create_on_gpu(conn, "big", 192 * MiB, &big));
  CHECK_OK(gpushm_buffer_close(big));
  gpushm_disconnect(conn);
  daemon_stop(&d);

  daemon_start(&d, "--max-device-bytes-per-uid", "25%", NULL);
  CHECK(device_limit_row(&d, "0") == 64 * MiB);
  daemon_stop(&d);
  CHECK(daemon_run(NULL, "--max-device-bytes-per-uid", "101%", NULL) != 0);
  CHECK(daemon_run(NULL, "--max-device-bytes-per-uid", "half", NULL) != 0);
  unsetenv("GPUSHM_FAKE_CUDA_MEMORY");
}

/* Live (not pooled) cuda-fd segment bytes of device 0, from the daemon's stats. */
static uint64_t device_segment_bytes(const struct test_daemon *d)
{
  gpushm_stats_t *st = daemon_stats(d);
  uint64_t bytes = 0;

  for (size_t i = 0; i < gpushm_stats_segment_usage_count(st); i++) {
    const gpushm_segment_usage_t *u = gpushm_stats_segment_usage(st, i);
    if (gpushm_segment_usage_backend(u) == GPUSHM_BACKEND_CUDA_FD &&
        gpushm_segment_usage_device(u) == 0)
      bytes += gpushm_segment_usage_bytes(u);
  }
  gpushm_stats_free(st);
  return bytes;
}

/* Carved buffers count their segments whole: uid 65534 spreading 1 MiB buffers over
 * permission classes (each a segment of its own, 2 MiB at least) is refused once its
 * segments fill its quota, not once its slots would; and segments it keeps alive with
 * nothing in them (closed, unlinked, still mapped) still count. */
static void test_device_quota_segments(void)
{
  struct test_daemon d = { 0 };
  pid_t pid;

  setenv("GPUSHM_FAKE_CUDA_MEMORY", "268435456", 1);
  daemon_start(&d, "--max-device-bytes-per-uid", "16M", "--pool-bytes", "0", NULL);
  pid = fork_as(65534, 65534);
  if (pid == 0) {
    static const uint32_t modes[] = { 0600, 0640, 0604, 0660, 0606, 0644, 0666, 0400, 0440,
                                      0404, 0460, 0406, 0620, 0602, 0642, 0624, 0662 };
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *b[sizeof modes / sizeof modes[0]];
    unsigned n = 0;
    int r = 0;
    for (; n < sizeof modes / sizeof modes[0]; n++) {
      gpushm_create_opts_t opts;
      char name[32];
      gpushm_create_opts_init(&opts);
      opts.backend = GPUSHM_BACKEND_CUDA_FD;
      opts.mode = modes[n];
      opts.lifetime = GPUSHM_LIFETIME_SESSION;
      snprintf(name, sizeof name, "class-%u", n);
      if ((r = gpushm_buffer_create(mine, name, MiB, &opts, &b[n])) < 0)
        break;
    }
    CHECK_ERR(r, GPUSHM_E_LIMIT);
    CHECK(strstr(gpushm_last_error_message(), "max-device-bytes-per-uid") != NULL);
    CHECK(n >= 4 && n <= 8); /* 16 MiB of segments of 2 MiB or more: not 16 slots */
    CHECK(device_segment_bytes(&d) <= 16 * MiB);
    /* emptied but still mapped by this connection: the segments are still this uid's */
    for (unsigned i = 0; i < n; i++)
      CHECK_OK(gpushm_buffer_close_unlink(b[i]));
    CHECK_OK(gpushm_ping(mine));
    {
      gpushm_create_opts_t opts;
      gpushm_buffer_t *more;
      gpushm_create_opts_init(&opts);
      opts.backend = GPUSHM_BACKEND_CUDA_FD;
      opts.mode = 0422; /* a class of its own: a new segment */
      opts.lifetime = GPUSHM_LIFETIME_SESSION;
      if (device_segment_bytes(&d) > 14 * MiB)
        CHECK_ERR(gpushm_buffer_create(mine, "one-more", MiB, &opts, &more), GPUSHM_E_LIMIT);
    }
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  /* its connection gone, its segments went with it, and so did their charge */
  pid = fork_as(65534, 65534);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_create_opts_t opts;
    gpushm_buffer_t *b;
    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_CUDA_FD;
    opts.lifetime = GPUSHM_LIFETIME_SESSION;
    CHECK_OK(gpushm_buffer_create(mine, "again", 12 * MiB, &opts, &b));
    CHECK_OK(gpushm_buffer_close(b));
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  daemon_stop(&d);
  unsetenv("GPUSHM_FAKE_CUDA_MEMORY");
}

/* A uid can be over its limit without having asked: it holds another user's buffer that
 * was unlinked (charged to its holders, unchecked), or a reload lowered the limit.  Then
 * every create is refused, not waved through (the room left was computed by wrapping
 * subtraction). */
static void test_over_the_limit(void)
{
  struct test_daemon d = { 0 };
  static gpushm_t *conn;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *theirs;
  int to_child[2], to_parent[2];
  char go;
  pid_t pid;

  daemon_start(&d, "--max-host-bytes-per-uid", "8M", NULL);
  conn = daemon_connect(&d);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST;
  opts.mode = 0644;
  CHECK_OK(gpushm_buffer_create(conn, "roots", 6 * MiB, &opts, &theirs));
  CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0);
  pid = fork_as(65534, 65534);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *own, *held, *more;
    CHECK_OK(gpushm_buffer_create(mine, "nobodys", 6 * MiB, &opts, &own));
    CHECK_OK(gpushm_buffer_open(mine, "roots", GPUSHM_OPEN_READONLY, &held));
    CHECK(write(to_parent[1], "h", 1) == 1);
    CHECK(read(to_child[0], &go, 1) == 1); /* root unlinked it: 12 MiB are ours now */
    CHECK_ERR(gpushm_buffer_create(mine, "more", MiB, &opts, &more), GPUSHM_E_LIMIT);
    CHECK(strstr(gpushm_last_error_message(), "would hold 13 MiB of host memory (limit 8 MiB") !=
          NULL);
    CHECK_OK(gpushm_buffer_close(held));
    CHECK_OK(gpushm_buffer_close(own));
    gpushm_disconnect(mine);
    _exit(0);
  }
  CHECK(read(to_parent[0], &go, 1) == 1);
  CHECK_OK(gpushm_buffer_close_unlink(theirs));
  CHECK_OK(gpushm_ping(conn)); /* the close is one-way: done once the ping is answered */
  CHECK(write(to_child[1], "g", 1) == 1);
  check_child(pid);
  close(to_child[0]), close(to_child[1]), close(to_parent[0]), close(to_parent[1]);
  CHECK_OK(gpushm_unlink(conn, "nobodys"));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

int main(void)
{
  const char *fake;

  if (geteuid() != 0) {
    test_log("needs root to act as another uid and to make cgroups; skipping");
    return TEST_SKIP;
  }
  test_explicit_budget();
  test_over_the_limit();
  test_cgroup_budget();
  fake = getenv("GPUSHM_FAKE_CUDA_LIB");
  if (fake && access(fake, R_OK) == 0) {
    setenv("GPUSHM_CUDA_LIBRARY", fake, 1);
    test_device_quota();
    test_device_quota_segments();
  } else {
    test_log("built without CUDA headers: no fake driver for the device quota");
  }
  return 0;
}
