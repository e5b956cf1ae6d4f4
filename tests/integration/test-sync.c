/* SPDX-License-Identifier: MIT */
/* Named events and acquire/release without a GPU: events through the fake driver
 * (registry, cache, kinds, permissions, cleanup, injected creation failure), and the
 * release sequence for real on host sync buffers, ping-ponged between two processes. */
#include "config.h"
#include "harness.h"
#include "raw.h"

#include <pwd.h>
#include <grp.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static struct test_daemon d;
static const char *fake_lib;

static void start(const char *faults)
{
  if (faults)
    setenv("GPUSHM_CUDA_FAULTS", faults, 1);
  daemon_start(&d, NULL);
  unsetenv("GPUSHM_CUDA_FAULTS");
}

static void test_events(void)
{
  gpushm_t *conn = daemon_connect(&d), *other = daemon_connect(&d);
  gpushm_create_opts_t opts;
  gpushm_event_t *ev, *again;
  gpushm_buffer_t *buf, *sneaky;
  const gpushm_buffer_info_t *info;
  gpushm_stats_t *s1, *s2;

  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  CHECK_OK(gpushm_event_create(conn, "ready", &opts, &ev));
  CHECK(strcmp(gpushm_event_name(ev), "ready") == 0 && gpushm_event_id(ev) > 0);
  CHECK((info = find_buffer(conn, "ready")));
  /* an event is its own kind, with no memory backend */
  CHECK(gpushm_buffer_info_kind(info) == GPUSHM_KIND_EVENT);
  CHECK(gpushm_buffer_info_backend(info) == GPUSHM_BACKEND_DEFAULT);
  CHECK(gpushm_buffer_info_size(info) == 0 && gpushm_buffer_info_refs(info) == 1);

  /* opened once per process (the same event object), a handle per connection: the
   * other connection's open is one request, its reopen none */
  CHECK_OK(gpushm_stats(conn, &s1));
  CHECK_OK(gpushm_event_open(other, "ready", &again));
  CHECK_OK(gpushm_stats(conn, &s2));
  CHECK(again != ev && gpushm_stats_requests(s2) == gpushm_stats_requests(s1) + 2);
  gpushm_stats_free(s1);
  gpushm_stats_free(s2);
  CHECK_OK(gpushm_stats(conn, &s1));
  {
    gpushm_event_t *third;
    CHECK_OK(gpushm_event_open(other, "ready", &third));
    CHECK(third == again);
    CHECK_OK(gpushm_event_close(third));
  }
  CHECK_OK(gpushm_stats(conn, &s2));
  CHECK(gpushm_stats_requests(s2) == gpushm_stats_requests(s1) + 1);
  gpushm_stats_free(s1);
  gpushm_stats_free(s2);
  CHECK_OK(gpushm_event_record(ev, NULL));
  CHECK_OK(gpushm_event_wait(again, NULL));
  CHECK_OK(gpushm_event_close(again));

  /* one namespace, two kinds: neither opens as the other */
  CHECK_ERR(gpushm_buffer_open(conn, "ready", 0, &buf), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "is an event") != NULL);
  CHECK_ERR(gpushm_buffer_open_id(conn, gpushm_event_id(ev), 0, &buf), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_buffer_create(conn, "plain", 4096, NULL, &buf));
  CHECK_ERR(gpushm_event_open(conn, "plain", &again), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "is a buffer") != NULL);
  CHECK_ERR(gpushm_event_create(conn, "plain", NULL, &again), GPUSHM_E_EXIST);
  opts.flags = GPUSHM_CREATE_OPEN_EXISTING;
  CHECK_ERR(gpushm_event_create(conn, "plain", &opts, &again), GPUSHM_E_EXIST);
  CHECK(strstr(gpushm_last_error_message(), "already exists as") != NULL);
  opts.flags = GPUSHM_CREATE_SYNC;
  CHECK_ERR(gpushm_event_create(conn, "synced-event", &opts, &again), GPUSHM_E_INVAL);
  opts.flags = 0;
  opts.backend = 4; /* reserved: how the wire spells an event */
  CHECK_ERR(gpushm_buffer_create(conn, "sneaky", 0, &opts, &sneaky), GPUSHM_E_INVAL);
  CHECK(sneaky == NULL);
  CHECK(strstr(gpushm_last_error_message(), "reserved") != NULL);
  CHECK_OK(gpushm_buffer_close(buf));
  CHECK_OK(gpushm_unlink(conn, "plain"));

  /* unlink while open, freed at the last close */
  CHECK_OK(gpushm_unlink(conn, "ready"));
  CHECK_ERR(gpushm_event_open(other, "ready", &again), GPUSHM_E_NOENT);
  CHECK_OK(gpushm_event_close(ev));
  s1 = daemon_stats(&d);
  CHECK(gpushm_stats_buffers(s1) == 0);
  gpushm_stats_free(s1);

  /* session events go with their creator */
  opts.backend = 0;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  CHECK_OK(gpushm_event_create(other, "session-event", &opts, &ev));
  gpushm_event_close(ev);
  gpushm_disconnect(other);
  for (int i = 0; i < 500 && gpushm_event_open(conn, "session-event", &ev) == 0; i++) {
    gpushm_event_close(ev);
    usleep(10000);
  }
  CHECK_ERR(gpushm_event_open(conn, "session-event", &ev), GPUSHM_E_NOENT);
  gpushm_disconnect(conn);
}

static void test_event_permissions(void)
{
  struct passwd *nobody = getpwnam("nobody");
  gpushm_t *conn = daemon_connect(&d);
  gpushm_event_t *priv, *pub;
  gpushm_create_opts_t opts;
  pid_t pid;

  if (geteuid() != 0 || !nobody) {
    test_log("not root: event permissions as another uid not checked here");
    gpushm_disconnect(conn);
    return;
  }
  gpushm_create_opts_init(&opts);
  CHECK_OK(gpushm_event_create(conn, "private-event", &opts, &priv));
  opts.mode = 0644;
  CHECK_OK(gpushm_event_create(conn, "public-event", &opts, &pub));
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *mine;
    gpushm_event_t *ev;
    CHECK(setgroups(0, NULL) == 0 && setgid(nobody->pw_gid) == 0 && setuid(nobody->pw_uid) == 0);
    mine = daemon_connect(&d);
    /* 0600: not even told it exists */
    CHECK_ERR(gpushm_event_open(mine, "private-event", &ev), GPUSHM_E_NOENT);
    /* 0644 grants read only, and an event is opened for use: refused too */
    CHECK_ERR(gpushm_event_open(mine, "public-event", &ev), GPUSHM_E_PERM);
    CHECK_ERR(gpushm_unlink(mine, "public-event"), GPUSHM_E_PERM);
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  CHECK_OK(gpushm_unlink(conn, "private-event"));
  CHECK_OK(gpushm_unlink(conn, "public-event"));
  CHECK_OK(gpushm_event_close(priv));
  CHECK_OK(gpushm_event_close(pub));
  gpushm_disconnect(conn);
}

/* Two processes hand one host buffer back and forth 1000 times; each side acquires
 * the other's release by number before touching the data. */
static void test_host_ping_pong(void)
{
  enum { ROUNDS = 1000 };
  gpushm_t *conn = daemon_connect(&d);
  gpushm_create_opts_t opts;
  gpushm_buffer_t *buf, *plain;
  uint64_t seq;
  volatile uint64_t *data;
  pid_t pid;

  gpushm_create_opts_init(&opts);
  opts.flags = GPUSHM_CREATE_SYNC;
  opts.mode = 0600;
  CHECK_OK(gpushm_buffer_create(conn, "baton", 4096, &opts, &buf));
  CHECK(gpushm_buffer_release_seq(buf) == 0);
  /* nothing released: seq 0 does not wait; a number not yet published times out */
  CHECK_OK(gpushm_buffer_acquire(buf, NULL, 0, 0));
  CHECK_ERR(gpushm_buffer_acquire(buf, NULL, 1, 20), GPUSHM_E_TIMEOUT);
  CHECK_ERR(gpushm_buffer_acquire(buf, (void *)0x1, 0, 0), GPUSHM_E_INVAL); /* host: no stream */
  CHECK_OK(gpushm_buffer_create(conn, "unsynced", 4096, NULL, &plain));
  CHECK_ERR(gpushm_buffer_release(plain, NULL, &seq), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_CREATE_SYNC") != NULL);
  CHECK_OK(gpushm_buffer_close(plain));
  CHECK_OK(gpushm_unlink(conn, "unsynced"));
  {
    const gpushm_buffer_info_t *info;
    CHECK((info = find_buffer(conn, "baton")) && gpushm_buffer_info_sync(info));
  }

  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *b;
    CHECK_OK(gpushm_buffer_open(mine, "baton", 0, &b));
    volatile uint64_t *w = gpushm_buffer_ptr(b);
    for (uint64_t i = 0; i < ROUNDS; i++) {
      uint64_t got;
      CHECK_OK(gpushm_buffer_acquire(b, NULL, 2 * i + 1, 10000));
      CHECK(w[0] == i && w[1] == ~i); /* what the parent wrote before release 2i+1 */
      w[0] = i + 1000000;
      w[1] = ~(i + 1000000);
      CHECK_OK(gpushm_buffer_release(b, NULL, &got));
      CHECK(got == 2 * i + 2);
    }
    CHECK_OK(gpushm_buffer_close(b));
    gpushm_disconnect(mine);
    _exit(0);
  }
  data = gpushm_buffer_ptr(buf);
  for (uint64_t i = 0; i < ROUNDS; i++) {
    if (i > 0) {
      CHECK_OK(gpushm_buffer_acquire(buf, NULL, 2 * i, 10000));
      CHECK(data[0] == i - 1 + 1000000 && data[1] == ~(i - 1 + 1000000));
    }
    data[0] = i;
    data[1] = ~i;
    CHECK_OK(gpushm_buffer_release(buf, NULL, &seq));
    CHECK(seq == 2 * i + 1);
  }
  check_child(pid);
  CHECK(gpushm_buffer_release_seq(buf) == 2 * ROUNDS);
  CHECK_OK(gpushm_unlink(conn, "baton"));
  CHECK_OK(gpushm_buffer_close(buf));
  gpushm_disconnect(conn);
  test_log("%d host hand-overs in each direction verified", ROUNDS);
}

/* A device sync buffer through the fake driver: the event and the control block
 * travel with the buffer, and releases are numbered across processes. */
/* Whether process pid's only thread is blocked in a futex wait now (/proc says which
 * system call a blocked task is in). */
static bool blocked_in_futex(pid_t pid)
{
  char path[64], line[256];
  FILE *f;
  long nr = -1;

  snprintf(path, sizeof path, "/proc/%d/syscall", (int)pid);
  if (!(f = fopen(path, "r")))
    return false;
  if (fgets(line, sizeof line, f))
    nr = strtol(line, NULL, 10);
  fclose(f);
  return nr == SYS_futex;
}

/* A consumer waiting for a release sleeps (on a futex) instead of spinning or napping:
 * over a second of waiting it is switched out a handful of times, not hundreds; and a
 * release wakes it at once, long before its fallback recheck (200 ms) would: the
 * release comes as soon as /proc shows the consumer asleep in its futex wait, so a
 * consumer left to its recheck would sleep on for most of those 200 ms. */
static void test_acquire_sleeps(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *buf;
  gpushm_create_opts_t opts;
  struct rusage ru;
  int ready[2], status;
  uint64_t released_at, woke_at;
  pid_t pid;
  char c;

  gpushm_create_opts_init(&opts);
  opts.flags = GPUSHM_CREATE_SYNC;
  opts.mode = 0644;
  CHECK_OK(gpushm_buffer_create(conn, "sleeper", 4096, &opts, &buf));
  CHECK(pipe(ready) == 0);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *b;
    struct rusage before, after;
    CHECK_OK(gpushm_buffer_open(mine, "sleeper", GPUSHM_OPEN_READONLY, &b));
    CHECK(getrusage(RUSAGE_SELF, &before) == 0);
    CHECK_ERR(gpushm_buffer_acquire(b, NULL, 1, 1000), GPUSHM_E_TIMEOUT);
    CHECK(getrusage(RUSAGE_SELF, &after) == 0);
    test_log("idle acquire for 1 s: %ld voluntary context switches",
             after.ru_nvcsw - before.ru_nvcsw);
    CHECK(after.ru_nvcsw - before.ru_nvcsw < 50);
    CHECK(write(ready[1], "w", 1) == 1);
    CHECK_OK(gpushm_buffer_acquire(b, NULL, 1, 10000));
    _exit(0);
  }
  close(ready[1]); /* a child that fails ends the read below */
  CHECK(read(ready[0], &c, 1) == 1);
  for (int i = 0; !blocked_in_futex(pid); i++) {
    CHECK(i < 10000); /* 10 s */
    usleep(1000);
  }
  released_at = test_now_ms();
  CHECK_OK(gpushm_buffer_release(buf, NULL, NULL));
  CHECK(wait4(pid, &status, 0, &ru) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  woke_at = test_now_ms();
  test_log("woken %llu ms after the release", (unsigned long long)(woke_at - released_at));
  CHECK(woke_at - released_at < 100);
  CHECK_OK(gpushm_unlink(conn, "sleeper"));
  CHECK_OK(gpushm_buffer_close(buf));
  gpushm_disconnect(conn);
}

static void test_device_sync_plumbing(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_create_opts_t opts;
  gpushm_buffer_t *buf;
  uint64_t seq;
  pid_t pid;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  opts.flags = GPUSHM_CREATE_SYNC;
  CHECK_OK(gpushm_buffer_create(conn, "device-baton", 1 << 20, &opts, &buf));
  CHECK_OK(gpushm_buffer_release(buf, NULL, &seq));
  CHECK(seq == 1);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_buffer_t *b;
    CHECK_OK(gpushm_buffer_open(mine, "device-baton", GPUSHM_OPEN_READONLY, &b));
    CHECK(gpushm_buffer_release_seq(b) == 1);
    CHECK_OK(gpushm_buffer_acquire(b, NULL, 1, 1000));
    /* releasing is a write: not through a read-only open */
    CHECK_ERR(gpushm_buffer_release(b, NULL, &seq), GPUSHM_E_PERM);
    CHECK_OK(gpushm_buffer_close(b));
    CHECK_OK(gpushm_buffer_open(mine, "device-baton", 0, &b));
    CHECK_OK(gpushm_buffer_release(b, NULL, &seq)); /* a reader hands it back */
    CHECK(seq == 2);
    CHECK_OK(gpushm_buffer_close(b));
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  CHECK_OK(gpushm_buffer_acquire(buf, NULL, 2, 1000));
  CHECK_OK(gpushm_unlink(conn, "device-baton"));
  CHECK_OK(gpushm_buffer_close(buf));
  gpushm_disconnect(conn);
}

static void test_event_creation_failure(void)
{
  gpushm_t *conn;
  gpushm_create_opts_t opts;
  gpushm_event_t *ev;
  gpushm_buffer_t *buf;
  gpushm_stats_t *s;

  start("cuEventCreate=CUDA_ERROR_OUT_OF_MEMORY");
  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_event_create(conn, "no-event", NULL, &ev), GPUSHM_E_NOMEM);
  CHECK(strstr(gpushm_last_error_message(), "cuEventCreate") != NULL);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  opts.flags = GPUSHM_CREATE_SYNC;
  /* a cuda-ipc sync buffer needs no event since 0.7.1: its fence is in its memory */
  CHECK_OK(gpushm_buffer_create(conn, "fenced", 1 << 20, &opts, &buf));
  CHECK(gpushm_buffer_sync_method(buf, NULL) == GPUSHM_SYNC_GPU_FENCE);
  CHECK_OK(gpushm_unlink(conn, "fenced"));
  CHECK_OK(gpushm_buffer_close(buf));
  /* one for a library that does not know that needs an event, and fails without one,
   * leaving nothing behind */
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__CreateRequest cr = GPUSHM__CREATE_REQUEST__INIT;
    int sock = raw_connect(d.socket), status_fd, fds[GPUSHM_LIMIT_FDS_PER_FRAME];
    unsigned n = 0;
    Gpushm__Reply *reply;

    CHECK(raw_hello(sock, "gpushm-0.7.0", &status_fd) == 0);
    close(status_fd);
    cr.name = "no-sync";
    cr.size = 1 << 20;
    cr.backend = GPUSHM__BACKEND__BACKEND_CUDA_IPC;
    cr.sync = true;
    req.body_case = GPUSHM__REQUEST__BODY_CREATE;
    req.create = &cr;
    CHECK((reply = raw_call(sock, &req, fds, &n)) != NULL);
    CHECK(reply->status == -GPUSHM_E_NOMEM && n == 0);
    CHECK(strstr(reply->message, "cuEventCreate") != NULL);
    gpushm__reply__free_unpacked(reply, NULL);
    close(sock);
  }
  s = daemon_stats(&d);
  /* the memory went back too */
  CHECK(gpushm_stats_buffers(s) == 0 && gpushm_stats_bytes_allocated(s) == 0);
  gpushm_stats_free(s);
  opts.flags = 0;
  CHECK_OK(gpushm_buffer_create(conn, "no-sync", 1 << 20, &opts, &buf)); /* name is free */
  CHECK_OK(gpushm_buffer_close(buf));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

int main(void)
{
  fake_lib = getenv("GPUSHM_FAKE_CUDA_LIB");
  if (!fake_lib || access(fake_lib, R_OK) != 0) {
    test_log("built without CUDA headers: no fake driver for events");
    return TEST_SKIP;
  }
  setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1);
  start(NULL);
  test_events();
  test_event_permissions();
  test_host_ping_pong();
  test_acquire_sleeps();
  test_device_sync_plumbing();
  daemon_stop(&d);
  test_event_creation_failure();
  return 0;
}
