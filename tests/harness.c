/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A failed CHECK exits the test; the daemons it started must not outlive it (they would
 * hold the test's output pipe open, and pile up). */
static pid_t started[16];
static pid_t starter;

static void kill_started(void)
{
  if (getpid() != starter)
    return; /* a forked child exiting: the daemons are its parent's */
  for (unsigned i = 0; i < sizeof started / sizeof started[0]; i++)
    if (started[i] > 0)
      kill(started[i], SIGKILL);
}

static void track(pid_t pid, bool add)
{
  if (!starter) {
    starter = getpid();
    atexit(kill_started);
  }
  for (unsigned i = 0; i < sizeof started / sizeof started[0]; i++) {
    if (add ? started[i] == 0 : started[i] == pid) {
      started[i] = add ? pid : 0;
      return;
    }
  }
}

/* argv for the daemon: optionally under valgrind, then the extra arguments. */
static int daemon_argv(const char **argv, int max, const char *socket, va_list ap)
{
  const char *daemon = getenv("GPUSHMD");
  const char *level = getenv("GPUSHM_TEST_LOG_LEVEL");
  int argc = 0;

  CHECK(daemon != NULL);
  if (getenv("GPUSHM_TEST_VALGRIND")) {
    argv[argc++] = "valgrind";
    argv[argc++] = "-q";
    argv[argc++] = "--error-exitcode=99";
    argv[argc++] = "--leak-check=full";
    argv[argc++] = "--errors-for-leak-kinds=definite";
  }
  argv[argc++] = daemon;
  if (socket) {
    argv[argc++] = "--socket";
    argv[argc++] = socket;
    argv[argc++] = "--log-level";
    argv[argc++] = level ? level : "warn";
    /* Tests run as root, where the default refuses legacy IPC; the suite covers it.
     * A test that wants the default back passes --allow-legacy-ipc itself (last wins). */
    argv[argc++] = "--allow-legacy-ipc";
    argv[argc++] = "yes";
    /* Tests act as other uids, and this machine may have the group gpushm (from the
     * packages), which a root daemon would give its socket: open it to all, knowingly. */
    argv[argc++] = "--socket-group";
    argv[argc++] = "none";
    argv[argc++] = "--socket-mode";
    argv[argc++] = "0666";
  }
  for (const char *a; (a = va_arg(ap, const char *)) && argc < max - 1;)
    argv[argc++] = a;
  argv[argc] = NULL;
  return argc;
}

static void spawn(struct test_daemon *d, void (*in_child)(void *), void *arg, va_list ap)
{
  const char *argv[64];

  daemon_argv(argv, 64, d->socket, ap);
  d->pid = fork();
  CHECK(d->pid >= 0);
  if (d->pid == 0) {
    if (in_child)
      in_child(arg);
    /* A test that plays the service manager (tests/fdstore.c) names the process its
     * notify socket is for, as systemd does: gpushmd ignores one meant for another. */
    if (getenv("NOTIFY_SOCKET")) {
      char pid[16];
      snprintf(pid, sizeof pid, "%d", (int)getpid());
      setenv("SYSTEMD_EXEC_PID", pid, 1);
    }
    if (d->log_path) {
      int fd = open(d->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      CHECK(fd >= 0 && dup2(fd, 2) == 2);
    }
    if (d->nofile) {
      struct rlimit rl = { d->nofile, d->nofile };
      CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    }
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  track(d->pid, true);
  for (int i = 0; i < 3000; i++) {
    gpushm_t *conn;
    int status;
    if (gpushm_connect(d->socket, "harness", &conn) == 0) {
      gpushm_disconnect(conn);
      return;
    }
    if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
      fprintf(stderr, "gpushmd exited during start-up (status 0x%x)\n", status);
      exit(1);
    }
    test_sleep_ms(10);
  }
  fprintf(stderr, "gpushmd did not answer on %s\n", d->socket);
  kill(d->pid, SIGKILL);
  exit(1);
}

void daemon_start(struct test_daemon *d, ...)
{
  va_list ap;

  snprintf(d->dir, sizeof d->dir, "/tmp/gpushm-test.XXXXXX");
  CHECK(mkdtemp(d->dir) != NULL);
  /* Other uids (the permission test's child) must reach the socket. */
  CHECK(chmod(d->dir, 0755) == 0);
  snprintf(d->socket, sizeof d->socket, "%s/gpushmd.sock", d->dir);
  va_start(ap, d);
  spawn(d, NULL, NULL, ap);
  va_end(ap);
}

void daemon_respawn(struct test_daemon *d, ...)
{
  va_list ap;
  va_start(ap, d);
  spawn(d, NULL, NULL, ap);
  va_end(ap);
}

void daemon_respawn_with(struct test_daemon *d, void (*in_child)(void *), void *arg, ...)
{
  va_list ap;
  va_start(ap, arg);
  spawn(d, in_child, arg, ap);
  va_end(ap);
}

int daemon_run(const char *out_file, ...)
{
  const char *argv[64];
  va_list ap;
  int status;
  pid_t pid;

  va_start(ap, out_file);
  daemon_argv(argv, 64, NULL, ap);
  va_end(ap);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    if (out_file) {
      FILE *f = freopen(out_file, "w", stdout);
      CHECK(f != NULL);
      CHECK(dup2(fileno(stdout), 2) == 2);
    }
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  return WEXITSTATUS(status);
}

int daemon_wait_exit(struct test_daemon *d)
{
  int status;
  for (int i = 0; i < 2000; i++) {
    pid_t r = waitpid(d->pid, &status, WNOHANG);
    CHECK(r >= 0);
    if (r == d->pid) {
      track(d->pid, false);
      CHECK(WIFEXITED(status));
      unlink(d->socket);
      rmdir(d->dir);
      return WEXITSTATUS(status);
    }
    test_sleep_ms(10);
  }
  fprintf(stderr, "gpushmd did not exit\n");
  kill(d->pid, SIGKILL);
  exit(1);
}

void daemon_stop(struct test_daemon *d)
{
  int status;
  struct stat st;

  CHECK(kill(d->pid, SIGTERM) == 0);
  CHECK(waitpid(d->pid, &status, 0) == d->pid);
  track(d->pid, false);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "gpushmd ended with status 0x%x\n", status);
    exit(1);
  }
  CHECK(lstat(d->socket, &st) < 0 && errno == ENOENT);
  CHECK(rmdir(d->dir) == 0);
}

gpushm_t *daemon_connect(const struct test_daemon *d)
{
  gpushm_t *conn = NULL;
  CHECK_OK(gpushm_connect(d->socket, "test", &conn));
  return conn;
}

gpushm_stats_t *daemon_stats(const struct test_daemon *d)
{
  gpushm_t *conn = daemon_connect(d);
  gpushm_stats_t *s;
  CHECK_OK(gpushm_stats(conn, &s));
  gpushm_disconnect(conn);
  return s;
}

uint64_t daemon_metric(const struct test_daemon *d, const char *name)
{
  gpushm_stats_t *st = daemon_stats(d);
  uint64_t value = 0;
  bool found = false;

  for (size_t i = 0; i < gpushm_stats_metric_count(st) && !found; i++) {
    const gpushm_metric_t *m = gpushm_stats_metric(st, i);
    if ((found = strcmp(gpushm_metric_name(m), name) == 0))
      value = gpushm_metric_value(m);
  }
  gpushm_stats_free(st);
  if (!found) {
    fprintf(stderr, "gpushmd has no metric row %s\n", name);
    exit(1);
  }
  return value;
}

/* The list find_buffer() last answered from (a test's process is single-threaded). */
static gpushm_buffer_list_t *found_in;

static void free_found_in(void)
{
  gpushm_buffer_list_free(found_in);
  found_in = NULL;
}

gpushm_buffer_t *open_unmapped(gpushm_t *conn, const char *name, unsigned flags)
{
  gpushm_open_opts_t o;
  gpushm_buffer_t *b;

  gpushm_open_opts_init(&o);
  o.map_device = GPUSHM_DEVICE_NONE;
  o.flags = flags;
  CHECK_OK(gpushm_buffer_open_ex(conn, name, 0, &o, &b));
  return b;
}

gpushm_buffer_t *create_sync_buffer(gpushm_t *conn, const char *name, gpushm_backend_t backend,
                                    uint64_t size, uint32_t mode)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;

  gpushm_create_opts_init(&opts);
  opts.backend = backend;
  opts.flags = GPUSHM_CREATE_SYNC;
  opts.mode = mode;
  CHECK_OK(gpushm_buffer_create(conn, name, size, &opts, &b));
  return b;
}

uint64_t fake_fence_of(gpushm_t *conn, gpushm_buffer_t *b)
{
  const gpushm_buffer_info_t *info = find_buffer(conn, gpushm_buffer_name(b));
  CHECK(info != NULL);
  return __atomic_load_n((const uint64_t *)((const char *)gpushm_buffer_ptr(b) +
                                            gpushm_buffer_info_allocated(info) - 8),
                         __ATOMIC_ACQUIRE);
}

const gpushm_buffer_info_t *find_buffer(gpushm_t *conn, const char *name)
{
  static bool registered;
  const gpushm_buffer_info_t *found = NULL;

  if (!registered)
    registered = atexit(free_found_in) == 0;
  free_found_in();
  CHECK_OK(gpushm_list(conn, 0, &found_in));
  for (size_t i = 0; i < gpushm_buffer_list_count(found_in); i++) {
    const gpushm_buffer_info_t *info = gpushm_buffer_list_get(found_in, i);
    if (strcmp(gpushm_buffer_info_name(info), name) == 0)
      found = info;
  }
  return found;
}

int wait_until(int (*pred)(const struct test_daemon *, void *), const struct test_daemon *d,
               void *arg)
{
  for (int i = 0; i < 1000; i++) {
    if (pred(d, arg))
      return 1;
    test_sleep_ms(10);
  }
  return 0;
}

void check_child(pid_t pid)
{
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "child %d ended with status 0x%x\n", (int)pid, status);
    exit(1);
  }
}

pid_t fork_as(uid_t uid, gid_t gid)
{
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    CHECK(setgroups(0, NULL) == 0);
    CHECK(setgid(gid) == 0);
    CHECK(setuid(uid) == 0);
    CHECK(getuid() == uid && geteuid() == uid);
  }
  return pid;
}

unsigned file_count_lines(const char *path, const char *text)
{
  char line[4096];
  unsigned n = 0;
  FILE *f = fopen(path, "r");

  if (!f)
    return 0;
  while (fgets(line, sizeof line, f))
    n += strstr(line, text) != NULL;
  fclose(f);
  return n;
}

int file_contains(const char *path, const char *text)
{
  char buf[16384];
  FILE *f = fopen(path, "r");
  size_t n;

  if (!f)
    return 0;
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, text) != NULL;
}

uint32_t client_id_of(gpushm_t *conn, pid_t pid)
{
  gpushm_client_list_t *list;
  uint32_t id = 0;

  CHECK_OK(gpushm_clients(conn, &list));
  for (size_t i = 0; i < gpushm_client_list_count(list); i++)
    if (gpushm_client_info_pid(gpushm_client_list_get(list, i)) == (uint32_t)pid)
      id = gpushm_client_info_client_id(gpushm_client_list_get(list, i));
  gpushm_client_list_free(list);
  CHECK(id != 0);
  return id;
}

/* The first mapping of memfd name with those permissions (" rw-s ", " r--s "). */
static void *memfd_mapping_with(const char *name, const char *perms)
{
  char line[512], want[160];
  void *found = NULL;
  FILE *maps = fopen("/proc/self/maps", "r");

  snprintf(want, sizeof want, "/memfd:%s ", name);
  CHECK(maps != NULL);
  while (fgets(line, sizeof line, maps))
    if (strstr(line, want) && strstr(line, perms) && !found)
      found = (void *)(uintptr_t)strtoull(line, NULL, 16);
  fclose(maps);
  CHECK(found != NULL);
  return found;
}

void *shared_memfd_mapping(const char *name)
{
  return memfd_mapping_with(name, " rw-s ");
}

void *read_only_memfd_mapping(const char *name)
{
  return memfd_mapping_with(name, " r--s ");
}

void ctl_show_says(const char *socket, const char *name, const char *text)
{
  const char *builddir = getenv("GPUSHM_TEST_BUILDDIR");
  char cmd[1024], out[8192];
  size_t n = 0, got;
  FILE *p;

  CHECK(builddir != NULL);
  snprintf(cmd, sizeof cmd, "GPUSHM_SOCKET='%s' '%s/ctl/gpushmctl' show %s", socket, builddir,
           name);
  CHECK((p = popen(cmd, "r")) != NULL);
  while (n < sizeof out - 1 && (got = fread(out + n, 1, sizeof out - 1 - n, p)) > 0)
    n += got;
  out[n] = '\0';
  CHECK(pclose(p) == 0);
  if (!strstr(out, text)) {
    fprintf(stderr, "gpushmctl show %s lacks '%s':\n%s", name, text, out);
    exit(1);
  }
}

static char log_file[64];

static void dump_log_file(void)
{
  FILE *f = fopen(log_file, "r");
  char line[2048];

  if (!f)
    return;
  while (fgets(line, sizeof line, f))
    fprintf(stderr, "  %s", line);
  fclose(f);
  unlink(log_file);
}

const char *test_log_file(const char *tag)
{
  int fd;

  CHECK(!log_file[0]); /* one a test */
  snprintf(log_file, sizeof log_file, "/tmp/gpushm-%s-XXXXXX", tag);
  CHECK((fd = mkostemp(log_file, O_CLOEXEC)) >= 0);
  close(fd);
  atexit(dump_log_file);
  return log_file;
}

ssize_t test_recv_polling(int fd, void *buf, size_t len, int flags, unsigned poll_us)
{
  if (poll_us && !(flags & MSG_DONTWAIT)) {
    struct timespec now, until;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long)(poll_us % 1000000u) * 1000L;
    until.tv_sec += poll_us / 1000000u + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    do {
      ssize_t n = recv(fd, buf, len, flags | MSG_DONTWAIT);
      if (n >= 0 || errno != EAGAIN)
        return n;
      sched_yield();
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec < until.tv_sec ||
             (now.tv_sec == until.tv_sec && now.tv_nsec < until.tv_nsec));
  }
  return recv(fd, buf, len, flags);
}
