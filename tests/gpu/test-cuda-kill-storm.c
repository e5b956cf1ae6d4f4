/* SPDX-License-Identifier: MIT */
/* Kill storms on one daemon: clients SIGKILLed at random moments of their lives (in
 * cuInit, connecting, opening, with memsets queued, between acquire and release, while
 * closing), storm after storm, cuda-fd buffers then cuda-ipc ones, every other one a
 * sync buffer.  After each storm a fresh checker must open every buffer, acquire every
 * sync buffer within its timeout, write a word behind the acquire and see its stream
 * finish; the daemon must answer and hold no reference of a dead client.
 *
 * A checker that does not finish is not waited for: a watchdog prints where it waits
 * (its threads' kernel stacks and wait channels, a user-space backtrace from the
 * harness's crash report on SIGQUIT, the daemon's view of every buffer and its holders)
 * and the test fails.  GPUSHM_STORMS storms per backend (5; 2 with a fake driver),
 * GPUSHM_STORM_VICTIMS clients per storm (80).  Skips (77) only without a CUDA driver
 * and device; tests/gpu/test-cuda-kill-storm-fake.sh runs it on the fake driver. */
#include "config.h"
#include "cuda-test.h"

#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1ull << 20)
#define N_BUFFERS 16
#define BUFFER_BYTES (4 * MiB)
#define ACQUIRE_TIMEOUT_MS 5000
/* What "no more than a few milliseconds" past a caller's timeout means here. */
#define ACQUIRE_SLACK_MS 50
/* Clients alive at once, and the longest a victim lives. */
#define CONCURRENT 16
#define MAX_LIFE_MS 400
/* How long the checker's stream may take for one word behind an acquire. */
#define STREAM_BOUND_S 20.0
/* How long the whole checker may take before the watchdog reports it stuck. */
#define CHECKER_BOUND_S 90.0

static struct test_daemon d;
static const gpushm_backend_t backends[] = { GPUSHM_BACKEND_CUDA_FD, GPUSHM_BACKEND_CUDA_IPC };

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void buffer_name(char *out, size_t len, gpushm_backend_t backend, unsigned i)
{
  snprintf(out, len, "storm-%s-%u", backend == GPUSHM_BACKEND_CUDA_FD ? "fd" : "ipc", i);
}

static int is_sync(unsigned i)
{
  return i % 2 == 1;
}

static pid_t spawn(const char *role, unsigned backend_index, unsigned seed)
{
  char b[16], s[16];
  pid_t pid;

  snprintf(b, sizeof b, "%u", backend_index);
  snprintf(s, sizeof s, "%u", seed);
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("GPUSHM_SOCKET", d.socket, 1);
    cuda_test_child_env();
    execl(test_self_path(), test_self_path(), role, b, s, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* --- the victim: works until it is killed ------------------------------------------ */

static int role_victim(gpushm_backend_t backend, unsigned seed)
{
  gpushm_buffer_t *held[N_BUFFERS] = { 0 };
  gpushm_t *conn;
  CUstream s;

  srand(seed);
  cuda_test_setup(0);
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  if (gpushm_connect(getenv("GPUSHM_SOCKET"), "victim", &conn) < 0)
    return 1;
  for (unsigned op = 1;; op++) {
    unsigned i = (unsigned)rand() % N_BUFFERS;
    char name[32];

    buffer_name(name, sizeof name, backend, i);
    if (!held[i] && gpushm_buffer_open(conn, name, 0, &held[i]) < 0)
      return 1;
    if (is_sync(i))
      gpushm_buffer_acquire(held[i], s, 0, ACQUIRE_TIMEOUT_MS); /* a timeout is no error here */
    CU_CALL(&drv, cuMemsetD32Async, cuda_test_dptr(held[i]), op, BUFFER_BYTES / 4, s);
    if (is_sync(i))
      gpushm_buffer_release(held[i], s, NULL);
    if (rand() % 16 == 0) { /* a last close with its work still queued */
      gpushm_buffer_close(held[i]);
      held[i] = NULL;
    }
    if (op % 32 == 0)
      CU_CALL(&drv, cuStreamSynchronize, s);
  }
}

/* --- the checker: must get through every buffer ------------------------------------ */

/* Waits for what stream s has queued, up to STREAM_BOUND_S (polling an event recorded
 * behind it: a stream synchronisation has no timeout): 0, or -1 if it is still busy. */
static int stream_done(CUstream s, CUevent done)
{
  double t0 = now_s();
  CUresult r;

  CU_CHECK(CU_CALL(&drv, cuEventRecord, done, s));
  while ((r = CU_CALL(&drv, cuEventQuery, done)) == CUDA_ERROR_NOT_READY) {
    if (now_s() - t0 > STREAM_BOUND_S)
      return -1;
    usleep(1000);
  }
  CU_CHECK(r);
  return 0;
}

static int role_check(gpushm_backend_t backend, unsigned storm)
{
  unsigned opened = 0, acquired = 0, problems = 0, syncs = 0;
  gpushm_t *conn;
  CUstream s;
  CUevent done;

  cuda_test_setup(0);
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  CU_CHECK(CU_CALL(&drv, cuEventCreate, &done, CU_EVENT_DISABLE_TIMING));
  CHECK_OK(gpushm_connect(getenv("GPUSHM_SOCKET"), "checker", &conn));
  for (unsigned i = 0; i < N_BUFFERS; i++) {
    gpushm_buffer_t *b;
    char name[32];
    uint64_t seq = 0;
    double t0;
    int r;

    buffer_name(name, sizeof name, backend, i);
    if ((r = gpushm_buffer_open(conn, name, 0, &b)) < 0) {
      fprintf(stderr, "checker: '%s' does not open: %s\n", name, gpushm_last_error_message());
      problems++;
      continue;
    }
    opened++;
    if (is_sync(i)) {
      syncs++;
      seq = gpushm_buffer_release_seq(b);
      t0 = now_s();
      r = gpushm_buffer_acquire(b, s, 0, ACQUIRE_TIMEOUT_MS);
      if ((now_s() - t0) * 1000 > ACQUIRE_TIMEOUT_MS + ACQUIRE_SLACK_MS) {
        fprintf(stderr, "checker: acquiring '%s' took %.0f ms, its timeout is %d ms\n", name,
                (now_s() - t0) * 1000, ACQUIRE_TIMEOUT_MS);
        problems++;
      }
      if (r < 0) {
        fprintf(stderr, "checker: '%s' does not acquire: %s\n", name, gpushm_last_error_message());
        problems++;
      } else {
        acquired++;
      }
    }
    CU_CHECK(CU_CALL(&drv, cuMemsetD32Async, cuda_test_dptr(b), 0xc0de0000u + storm, 1, s));
    if (is_sync(i))
      CHECK_OK(gpushm_buffer_release(b, s, NULL));
    if (stream_done(s, done) < 0) {
      /* What the watchdog then shows is where this process waits. */
      fprintf(stderr, "checker: one word written behind the acquire of '%s' (release %llu, "
              "sync method %d) is still queued after %.0f s\n", name, (unsigned long long)seq,
              gpushm_buffer_sync_method(b, NULL), STREAM_BOUND_S);
      fflush(stderr);
      for (;;)
        pause();
    }
    CHECK_OK(gpushm_buffer_close(b));
  }
  gpushm_disconnect(conn);
  CU_CHECK(CU_CALL(&drv, cuEventDestroy, done));
  CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
  test_log("checker after storm %u: %u/%u opened, %u/%u acquired, %u problems", storm, opened,
           N_BUFFERS, acquired, syncs, problems);
  return problems ? 3 : 0;
}

/* --- the parent -------------------------------------------------------------------- */

static void print_file(const char *label, const char *path)
{
  char line[512];
  FILE *f = fopen(path, "r");

  if (!f)
    return;
  while (fgets(line, sizeof line, f))
    fprintf(stderr, "  %s: %s", label, line);
  fclose(f);
}

/* Where each thread of pid waits: its state, wait channel and kernel stack. */
static void print_threads(const char *who, pid_t pid)
{
  char path[64];
  struct dirent *e;
  DIR *dir;

  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  if (!(dir = opendir(path))) {
    fprintf(stderr, "%s (pid %d): gone\n", who, (int)pid);
    return;
  }
  while ((e = readdir(dir))) {
    char file[600];
    if (e->d_name[0] == '.')
      continue;
    fprintf(stderr, "%s (pid %d), thread %s:\n", who, (int)pid, e->d_name);
    snprintf(file, sizeof file, "%s/%s/stat", path, e->d_name);
    print_file("stat", file);
    snprintf(file, sizeof file, "%s/%s/wchan", path, e->d_name);
    print_file("wchan", file);
    fputc('\n', stderr);
    snprintf(file, sizeof file, "%s/%s/stack", path, e->d_name);
    print_file("stack", file);
  }
  closedir(dir);
}

/* The daemon's view: every object, its sequence, its holders. */
static void print_daemon_state(void)
{
  char cmd[1024];
  const char *b = getenv("GPUSHM_TEST_BUILDDIR");

  fflush(stderr);
  snprintf(cmd, sizeof cmd, "%s/ctl/gpushmctl --socket %s list --all >&2; "
           "%s/ctl/gpushmctl --socket %s clients >&2; %s/ctl/gpushmctl --socket %s stats >&2",
           b ? b : ".", d.socket, b ? b : ".", d.socket, b ? b : ".", d.socket);
  if (system(cmd) != 0)
    fprintf(stderr, "(gpushmctl did not answer)\n");
}

/* Waits up to bound_s for pid; if it is still there, reports where it waits (and
 * where the daemon's threads are), kills it and fails. */
static int wait_or_report(pid_t pid, const char *who, double bound_s)
{
  double t0 = now_s();
  int status;
  pid_t r;

  while ((r = waitpid(pid, &status, WNOHANG)) == 0 && now_s() - t0 < bound_s)
    usleep(10000);
  if (r == pid)
    return status;
  fprintf(stderr, "\n*** %s (pid %d) still runs after %.0f s; where it waits:\n", who, (int)pid,
          bound_s);
  print_threads(who, pid);
  print_threads("gpushmd", d.pid);
  print_daemon_state();
  kill(pid, SIGQUIT); /* the harness's crash report: its user-space backtrace */
  usleep(500000);
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  fprintf(stderr, "*** %s stuck: see above\n", who);
  exit(1);
}

/* One storm: victims, CONCURRENT at a time, each SIGKILLed 0-MAX_LIFE_MS ms in. */
static void storm(unsigned backend_index, unsigned victims, unsigned *seed)
{
  struct { pid_t pid; double kill_at; } alive[CONCURRENT] = { 0 };
  unsigned started = 0, running = 0, exited_first = 0;

  while (started < victims || running) {
    for (unsigned k = 0; k < CONCURRENT; k++) {
      if (!alive[k].pid && started < victims) {
        unsigned life = (unsigned)rand_r(seed) % (MAX_LIFE_MS + 1);
        alive[k].pid = spawn("victim", backend_index, rand_r(seed));
        alive[k].kill_at = now_s() + life / 1000.0;
        started++;
        running++;
      } else if (alive[k].pid && now_s() >= alive[k].kill_at) {
        int status = 0;
        CHECK(kill(alive[k].pid, SIGKILL) == 0);
        status = wait_or_report(alive[k].pid, "a SIGKILLed victim", 30);
        if (!WIFSIGNALED(status))
          exited_first++; /* it failed before its time: its death is a storm all the same */
        alive[k].pid = 0;
        running--;
      }
    }
    usleep(1000);
  }
  if (exited_first)
    test_log("storm: %u of %u victims had exited before their kill", exited_first, victims);
}

/* Every buffer is held by the parent's connection alone once the daemon has seen every
 * victim's connection end. */
static int only_parent_holds(const struct test_daemon *daemon, void *arg)
{
  gpushm_t *conn = daemon_connect(daemon);
  gpushm_buffer_list_t *list;
  int ok = 1;

  (void)arg;
  CHECK_OK(gpushm_list(conn, 0, &list));
  for (size_t i = 0; i < gpushm_buffer_list_count(list); i++)
    ok &= gpushm_buffer_info_holders_total(gpushm_buffer_list_get(list, i)) == 1;
  gpushm_buffer_list_free(list);
  gpushm_disconnect(conn);
  return ok;
}

int main(int argc, char **argv)
{
  const char *env_storms = getenv("GPUSHM_STORMS"), *env_victims = getenv("GPUSHM_STORM_VICTIMS");
  gpushm_buffer_t *bufs[2][N_BUFFERS];
  unsigned storms, victims, seed = (unsigned)getpid();
  int fake = getenv("GPUSHM_CUDA_LIBRARY") != NULL;
  gpushm_t *conn;

  if (argc == 4) {
    unsigned b = (unsigned)atoi(argv[2]), n = (unsigned)strtoul(argv[3], NULL, 10);
    CHECK(b < 2);
    if (strcmp(argv[1], "victim") == 0)
      return role_victim(backends[b], n);
    if (strcmp(argv[1], "check") == 0)
      return role_check(backends[b], n);
    return 2;
  }
  storms = env_storms ? (unsigned)atoi(env_storms) : fake ? 2 : 5;
  victims = env_victims ? (unsigned)atoi(env_victims) : 80;
  cuda_test_parent_outside_mps();
  cuda_test_setup(1);
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  test_log("seed %u: %u storms of %u victims per backend", seed, storms, victims);
  for (unsigned b = 0; b < 2; b++) {
    for (unsigned i = 0; i < N_BUFFERS; i++) {
      gpushm_create_opts_t opts;
      char name[32];
      gpushm_create_opts_init(&opts);
      opts.backend = backends[b];
      opts.flags = is_sync(i) ? GPUSHM_CREATE_SYNC : 0;
      opts.mode = 0600;
      buffer_name(name, sizeof name, backends[b], i);
      CHECK_OK(gpushm_buffer_create(conn, name, BUFFER_BYTES, &opts, &bufs[b][i]));
    }
    for (unsigned n = 1; n <= storms; n++) {
      double t0 = now_s();
      int status;

      storm(b, victims, &seed);
      if (!wait_until(only_parent_holds, &d, NULL)) {
        print_daemon_state();
        fprintf(stderr, "storm %u: references of dead victims are still held\n", n);
        exit(1);
      }
      CHECK_OK(gpushm_ping(conn));
      status = wait_or_report(spawn("check", b, n), "the checker", CHECKER_BOUND_S);
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      test_log("%s storm %u: %u victims killed, checker through in %.1f s in all",
               b == 0 ? "cuda-fd" : "cuda-ipc", n, victims, now_s() - t0);
    }
    CHECK(kill(d.pid, 0) == 0);
  }
  for (unsigned b = 0; b < 2; b++)
    for (unsigned i = 0; i < N_BUFFERS; i++) {
      char name[32];
      buffer_name(name, sizeof name, backends[b], i);
      CHECK_OK(gpushm_unlink(conn, name));
      CHECK_OK(gpushm_buffer_close(bufs[b][i]));
    }
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}
