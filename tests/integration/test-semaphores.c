/* SPDX-License-Identifier: MIT */
/* Timelines' semaphore planes (docs/sync.md#semaphore-planes), through the fake driver,
 * whose "Vulkan timeline semaphores" are memfds this test mints as a Vulkan driver would
 * (the real thing: tests/gpu/test-cuda-vulkan-sync on the GPU host):
 *  - none at first (GPUSHM_E_NOENT, saying who mints one); the first registration makes
 *    the plane and signals it to where the fence stands; a second, of another semaphore,
 *    gets the first one's fd back (the same file), not its own;
 *  - what is not a timeline semaphore of a device gpushmd has is refused: a pipe, a
 *    memfd that is not one, a UUID of no device, a UUID of the wrong length;
 *  - every signal reaches the semaphore too: CPU signals, stream signals (the fake
 *    driver's), and another process's signals through its own import;
 *  - gpushm_timeline_signal_external() publishes without writing the fence (a Vulkan
 *    queue's submission does), and gpushm_timeline_wait_signalled() returns once a value
 *    is published or promised, times out before; gpushm_timeline_fence_page() is the
 *    control block's page;
 *  - attacked as uid 65534: a read-only holder is refused the plane unless its registrar
 *    gave it to readers, and cannot register one (library and raw request, the latter on
 *    a timeline with no plane yet, whose fence a wrongly made plane would be signalled to);
 *  - a promiser SIGKILLed: gpushmd breaks the promise and signals the semaphore to the
 *    promised value through its own import;
 *  - gpushmctl show says a timeline has a plane;
 *  - a ring takes none, nor its consumers' done timelines (rings have no planes yet);
 *  - a persistent timeline with a plane comes back from a restart (systemd's fd store,
 *    played by the test) without it: the control block's semaphore word cleared, no plane
 *    to fetch, CPU signals the fence alone, and a new plane can be registered. */
#include "config.h"
#include "fdstore.h"
#include "harness.h"
#include "raw.h"
#include "shm_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* tests/fake-cuda/fake_cuda.c's layout */
#define FAKE_SEMAPHORE_MAGIC 0x726f6870616d6573ull
struct fake_semaphore {
  uint64_t magic;
  uint64_t value;
  int32_t device;
};

static struct test_daemon d;
static uint8_t device0[16];
static const char *log_path; /* gpushmd's (test_log_file()) */

/* A fake timeline semaphore at value, and its mapping (*sem) to read it through. */
static int mint(uint64_t value, struct fake_semaphore **sem)
{
  int fd = memfd_create("fake-vk-semaphore", MFD_CLOEXEC);
  struct fake_semaphore *s;

  CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
  s = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(s != MAP_FAILED);
  s->magic = FAKE_SEMAPHORE_MAGIC;
  s->value = value;
  s->device = 0;
  *sem = s;
  return fd;
}

static uint64_t sem_value(const struct fake_semaphore *s)
{
  return __atomic_load_n(&s->value, __ATOMIC_ACQUIRE);
}

static bool same_file(int a, int b)
{
  struct stat sa, sb;
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_ino == sb.st_ino &&
         sa.st_dev == sb.st_dev;
}

static gpushm_timeline_t *create(gpushm_t *conn, const char *name, uint32_t mode)
{
  gpushm_create_opts_t opts;
  gpushm_timeline_t *tl;

  gpushm_create_opts_init(&opts);
  opts.mode = mode;
  CHECK_OK(gpushm_timeline_create(conn, name, &opts, &tl));
  return tl;
}

static void test_register(gpushm_t *conn)
{
  gpushm_timeline_t *tl = create(conn, "planes", 0644), *other;
  gpushm_t *conn2 = daemon_connect(&d);
  struct fake_semaphore *sem, *sem2;
  int fd = mint(0, &sem), fd2 = mint(0, &sem2), got = -1, got2 = -1, pipefd[2];
  uint8_t uuid[16], bogus[16];
  gpushm_sync_state_t st;

  CHECK(gpushm_daemon_has(conn, GPUSHM_FEATURE_SEMAPHORES));
  CHECK_ERR(gpushm_timeline_semaphore(tl, -1, NULL, 0, &got, uuid), GPUSHM_E_NOENT);
  CHECK(strstr(gpushm_last_error_message(), "'planes' has no semaphore plane: a process with "
                                            "a Vulkan device"));
  CHECK_OK(gpushm_timeline_signal(tl, 4)); /* before the plane: the fence alone */
  CHECK(sem_value(sem) == 0 && gpushm_timeline_has_semaphore(tl) == 0);

  /* not semaphores */
  CHECK(pipe(pipefd) == 0);
  CHECK_ERR(gpushm_timeline_semaphore(tl, pipefd[0], device0, 0, &got, uuid), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "not a timeline semaphore of device 0"));
  close(pipefd[0]);
  close(pipefd[1]);
  {
    int junk = memfd_create("junk", MFD_CLOEXEC);
    CHECK(junk >= 0 && ftruncate(junk, 4096) == 0);
    CHECK_ERR(gpushm_timeline_semaphore(tl, junk, device0, 0, &got, uuid), GPUSHM_E_INVAL);
    close(junk);
  }
  memset(bogus, 0x11, sizeof bogus);
  CHECK_ERR(gpushm_timeline_semaphore(tl, fd, bogus, 0, &got, uuid), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "is not one of gpushmd's"));
  {
    int sock = raw_connect(d.socket), status_fd;
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__SemaphoreRequest body = GPUSHM__SEMAPHORE_REQUEST__INIT;
    Gpushm__Reply *reply;
    int fds[GPUSHM_LIMIT_FDS_PER_FRAME];
    unsigned n_fds = 0;

    CHECK(raw_hello_features(sock, "short-uuid", GPUSHM_FEATURE_TIMELINES |
                             GPUSHM_FEATURE_SEMAPHORES, &status_fd) == 0);
    CHECK(raw_open_kind(sock, "planes", 0, GPUSHM__KIND__KIND_TIMELINE, 0, false, fds, &n_fds) == 0 && n_fds == 1);
    close(fds[0]);
    body.id = gpushm_timeline_id(tl);
    body.device_uuid.data = device0;
    body.device_uuid.len = 15;
    req.body_case = GPUSHM__REQUEST__BODY_SEMAPHORE;
    req.semaphore = &body;
    CHECK((reply = raw_call_fd(sock, &req, fd, fds, &n_fds)) != NULL);
    CHECK(reply->status == -GPUSHM_E_INVAL && n_fds == 0);
    CHECK(strstr(reply->message, "UUID (16 bytes)"));
    gpushm__reply__free_unpacked(reply, NULL);
    close(sock);
    close(status_fd);
  }

  /* the plane: registered, and signalled to where the fence stands */
  CHECK(gpushm_timeline_semaphore(tl, fd, device0, 0, &got, uuid) == 1);
  CHECK(got >= 0 && same_file(got, fd) && memcmp(uuid, device0, 16) == 0);
  CHECK((fcntl(got, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(sem_value(sem) == 4);
  /* a second minter gets the first plane back */
  CHECK_OK(gpushm_timeline_open(conn2, "planes", 0, &other));
  CHECK(gpushm_timeline_semaphore(other, fd2, device0, 0, &got2, uuid) == 0);
  CHECK(same_file(got2, fd) && !same_file(got2, fd2));
  close(got2);

  /* every signal reaches it: CPU, stream, another process */
  CHECK_OK(gpushm_timeline_signal(tl, 5));
  CHECK(sem_value(sem) == 5 && gpushm_timeline_value(tl) == 5);
  CHECK_OK(gpushm_timeline_signal_stream(other, NULL, 6));
  CHECK(sem_value(sem) == 6);
  {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      gpushm_t *c = daemon_connect(&d);
      gpushm_timeline_t *t;
      CHECK_OK(gpushm_timeline_open(c, "planes", 0, &t));
      CHECK_OK(gpushm_timeline_signal_stream(t, NULL, 7));
      CHECK_OK(gpushm_timeline_signal(t, 8));
      CHECK_OK(gpushm_timeline_close(t));
      gpushm_disconnect(c);
      _exit(0);
    }
    check_child(pid);
  }
  CHECK(sem_value(sem) == 8 && gpushm_timeline_value(tl) == 8);
  CHECK(gpushm_timeline_has_semaphore(tl) == 1);
  ctl_show_says(d.socket, "planes", "semaphore:  a plane (a Vulkan timeline semaphore");

  /* a Vulkan queue's signal: published here, the fence and semaphore its submission's */
  CHECK_ERR(gpushm_timeline_wait_signalled(tl, 9, 0), GPUSHM_E_TIMEOUT);
  CHECK_OK(gpushm_timeline_signal_external(tl, 9));
  CHECK_OK(gpushm_timeline_state(tl, &st));
  CHECK(st.counter == 9 && gpushm_timeline_value(tl) == 8 && sem_value(sem) == 8);
  CHECK_OK(gpushm_timeline_wait_signalled(tl, 9, 0));
  CHECK_ERR(gpushm_timeline_signal_external(tl, 9), GPUSHM_E_INVAL);
  {
    void *page;
    size_t at;
    CHECK_OK(gpushm_timeline_fence_page(tl, &page, &at));
    CHECK(at == offsetof(struct sync_control, fence));
    __atomic_store_n((uint64_t *)((char *)page + at), 9, __ATOMIC_RELEASE);
  }
  CHECK_OK(gpushm_timeline_wait(other, 9, 0));
  close(got);
  close(fd);
  close(fd2);
  munmap(sem2, 4096);
  CHECK_OK(gpushm_timeline_close(other));
  gpushm_disconnect(conn2);
  test_log("planes: none at first; the first registration wins and is signalled to the "
           "fence; pipes, junk and unknown or short UUIDs refused; CPU, stream and other "
           "processes' signals reach it; external signals publish");

  /* a promiser SIGKILLed: gpushmd signals the semaphore to what it promised */
  {
    int report[2];
    char byte;
    pid_t pid;
    struct timespec t0, t1;

    CHECK(pipe(report) == 0);
    CHECK((pid = fork()) >= 0);
    if (pid == 0) {
      gpushm_t *c = daemon_connect(&d);
      gpushm_timeline_t *t;
      CHECK_OK(gpushm_timeline_open(c, "planes", 0, &t));
      CHECK_OK(gpushm_timeline_signal(t, 10));
      CHECK_OK(gpushm_timeline_promise(t, 20));
      CHECK(write(report[1], "r", 1) == 1);
      pause();
      _exit(0);
    }
    close(report[1]);
    CHECK(read(report[0], &byte, 1) == 1);
    CHECK(sem_value(sem) == 10);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kill(pid, SIGKILL);
    CHECK(waitpid(pid, NULL, 0) == pid);
    CHECK_ERR(gpushm_timeline_wait(tl, 20, 5000), GPUSHM_E_LOST);
    for (int i = 0; i < 5000 && sem_value(sem) != 20; i++)
      usleep(1000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(sem_value(sem) == 20);
    close(report[0]);
    test_log("a promiser SIGKILLed: its semaphore at the promised 20 %.1f ms after the kill",
             (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
  }
  munmap(sem, 4096);
  CHECK_OK(gpushm_timeline_close_unlink(tl));
}

/* Read-only holders, attacked as uid 65534 where the test is root. */
static void test_readers(gpushm_t *conn)
{
  gpushm_timeline_t *closed = create(conn, "planes-closed", 0644);
  gpushm_timeline_t *open = create(conn, "planes-open", 0644);
  struct fake_semaphore *s1, *s2;
  int f1 = mint(0, &s1), f2 = mint(0, &s2), got;
  uint64_t bare_id;
  uint8_t uuid[16];
  pid_t pid;

  gpushm_timeline_t *bare = create(conn, "planes-none", 0644);

  CHECK_OK(gpushm_timeline_signal(bare, 5)); /* a plane made now would be signalled to 5 */
  CHECK(gpushm_timeline_semaphore(closed, f1, device0, 0, &got, uuid) == 1);
  close(got);
  CHECK(gpushm_timeline_semaphore(open, f2, device0, GPUSHM_SEMAPHORE_TO_READERS, &got,
                                  uuid) == 1);
  close(got);
  CHECK_ERR(gpushm_timeline_semaphore(open, -1, NULL, 0x80, &got, uuid), GPUSHM_E_INVAL);
  bare_id = gpushm_timeline_id(bare);
  pid = geteuid() == 0 ? fork_as(65534, 65534) : fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_timeline_t *ro_closed, *ro_open;
    struct fake_semaphore *own;
    int own_fd = mint(0, &own), sock = raw_connect(d.socket), status_fd;
    int fds[GPUSHM_LIMIT_FDS_PER_FRAME];
    unsigned n_fds = 0;

    CHECK_OK(gpushm_timeline_open(mine, "planes-closed", GPUSHM_OPEN_READONLY, &ro_closed));
    CHECK_ERR(gpushm_timeline_semaphore(ro_closed, -1, NULL, 0, &got, uuid), GPUSHM_E_PERM);
    CHECK(strstr(gpushm_last_error_message(), "its registrar did not give it to readers"));
    CHECK_ERR(gpushm_timeline_semaphore(ro_closed, own_fd, device0, 0, &got, uuid),
              GPUSHM_E_PERM);
    CHECK_OK(gpushm_timeline_open(mine, "planes-open", GPUSHM_OPEN_READONLY, &ro_open));
    CHECK(gpushm_timeline_semaphore(ro_open, -1, NULL, 0, &got, uuid) == 0);
    CHECK(memcmp(uuid, device0, 16) == 0);
    close(got);
    /* past the library: gpushmd refuses a reader's registration itself, on a timeline
     * with no plane yet (where nothing else would refuse it) */
    CHECK(sock >= 0 && raw_hello_features(sock, "attacker", GPUSHM_FEATURE_TIMELINES |
                                          GPUSHM_FEATURE_SEMAPHORES, &status_fd) == 0);
    CHECK(raw_open_kind(sock, "planes-none", 0, GPUSHM__KIND__KIND_TIMELINE, 1, false, fds,
                        &n_fds) == 0 && n_fds == 1);
    close(fds[0]);
    CHECK(raw_open_kind(sock, "planes-closed", 0, GPUSHM__KIND__KIND_TIMELINE, 1, false, fds,
                        &n_fds) == 0 && n_fds == 1);
    close(fds[0]);
    {
      Gpushm__Request req = GPUSHM__REQUEST__INIT;
      Gpushm__SemaphoreRequest body = GPUSHM__SEMAPHORE_REQUEST__INIT;
      Gpushm__Reply *reply;

      body.id = bare_id;
      body.device_uuid.data = device0;
      body.device_uuid.len = 16;
      req.body_case = GPUSHM__REQUEST__BODY_SEMAPHORE;
      req.semaphore = &body;
      CHECK((reply = raw_call_fd(sock, &req, own_fd, fds, &n_fds)) != NULL);
      CHECK(reply->status == -GPUSHM_E_PERM && n_fds == 0);
      CHECK(strstr(reply->message, "registering one is a write"));
      gpushm__reply__free_unpacked(reply, NULL);
      CHECK((reply = raw_call(sock, &req, fds, &n_fds)) != NULL);
      CHECK(reply->status == -GPUSHM_E_NOENT && n_fds == 0); /* still none */
      gpushm__reply__free_unpacked(reply, NULL);
      body.id = gpushm_timeline_id(ro_closed);
      CHECK((reply = raw_call(sock, &req, fds, &n_fds)) != NULL);
      CHECK(reply->status == -GPUSHM_E_PERM && n_fds == 0);
      gpushm__reply__free_unpacked(reply, NULL);
      body.id = 999999; /* holding nothing */
      CHECK((reply = raw_call(sock, &req, fds, &n_fds)) != NULL);
      CHECK(reply->status == -GPUSHM_E_NOENT && n_fds == 0);
      gpushm__reply__free_unpacked(reply, NULL);
    }
    CHECK(sem_value(own) == 0); /* a plane made of it would have been signalled to 5 */
    _exit(0);
  }
  check_child(pid);
  CHECK(gpushm_timeline_has_semaphore(bare) == 0);
  CHECK_OK(gpushm_timeline_close_unlink(bare));
  munmap(s1, 4096);
  munmap(s2, 4096);
  close(f1);
  close(f2);
  CHECK_OK(gpushm_timeline_close_unlink(closed));
  CHECK_OK(gpushm_timeline_close_unlink(open));
  test_log("read-only holders as uid %u: refused a plane not given to readers, given one "
           "that is; no registration through the library or past it",
           geteuid() == 0 ? 65534u : (unsigned)geteuid());
}

/* A ring orders itself (rings have no planes yet): gpushmd refuses one. */
static void test_ring(gpushm_t *conn)
{
  gpushm_create_opts_t opts;
  gpushm_ring_t *ring;
  struct fake_semaphore *s;
  int fd = mint(0, &s), sock = raw_connect(d.socket), status_fd;
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME];
  unsigned n_fds = 0;
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__SemaphoreRequest body = GPUSHM__SEMAPHORE_REQUEST__INIT;
  Gpushm__Reply *reply;

  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  CHECK_OK(gpushm_ring_create(conn, "planes-ring", 2, 4096, &opts, &ring));
  CHECK(sock >= 0 && raw_hello_features(sock, "ring", GPUSHM_FEATURE_TIMELINES |
                                        GPUSHM_FEATURE_RINGS | GPUSHM_FEATURE_SEMAPHORES,
                                        &status_fd) == 0);
  CHECK(raw_open_kind(sock, "planes-ring", 0, GPUSHM__KIND__KIND_RING, 0, false, fds, &n_fds) == 0);
  while (n_fds)
    close(fds[--n_fds]);
  body.id = gpushm_ring_id(ring);
  body.device_uuid.data = device0;
  body.device_uuid.len = 16;
  req.body_case = GPUSHM__REQUEST__BODY_SEMAPHORE;
  req.semaphore = &body;
  CHECK((reply = raw_call_fd(sock, &req, fd, fds, &n_fds)) != NULL);
  CHECK(reply->status == -GPUSHM_E_INVAL && n_fds == 0);
  CHECK(strstr(reply->message, "semaphore planes are timelines'"));
  gpushm__reply__free_unpacked(reply, NULL);
  close(sock);
  /* nor a consumer's done timeline, which its ring orders */
  {
    int csock = raw_connect(d.socket), cstatus;
    Gpushm__Request open = GPUSHM__REQUEST__INIT;
    Gpushm__OpenRequest ob = GPUSHM__OPEN_REQUEST__INIT;
    uint64_t done_id;

    CHECK(csock >= 0 && raw_hello_features(csock, "consumer", GPUSHM_FEATURE_TIMELINES |
                                           GPUSHM_FEATURE_RINGS | GPUSHM_FEATURE_SEMAPHORES,
                                           &cstatus) == 0);
    CHECK(raw_open_kind(csock, "planes-ring", 0, GPUSHM__KIND__KIND_RING, 1, false, fds,
                        &n_fds) == 0);
    while (n_fds)
      close(fds[--n_fds]);
    ob.key_case = GPUSHM__OPEN_REQUEST__KEY_ID;
    ob.id = gpushm_ring_id(ring);
    ob.kind = GPUSHM__KIND__KIND_TIMELINE;
    ob.ring_attach = true;
    open.body_case = GPUSHM__REQUEST__BODY_OPEN;
    open.open = &ob;
    CHECK((reply = raw_call(csock, &open, fds, &n_fds)) != NULL);
    CHECK(reply->status == 0 && reply->open && reply->open->info);
    done_id = reply->open->info->id;
    gpushm__reply__free_unpacked(reply, NULL);
    while (n_fds)
      close(fds[--n_fds]);
    body.id = done_id;
    CHECK((reply = raw_call_fd(csock, &req, fd, fds, &n_fds)) != NULL);
    CHECK(reply->status == -GPUSHM_E_UNSUPPORTED && n_fds == 0);
    CHECK(strstr(reply->message, "ring consumer's done timeline"));
    gpushm__reply__free_unpacked(reply, NULL);
    close(csock);
    close(cstatus);
  }
  close(status_fd);
  CHECK_OK(gpushm_ring_close_unlink(ring));
  munmap(s, 4096);
  close(fd);
  test_log("a ring takes no plane, nor does a consumer's done timeline");
}

static uint64_t semaphore_word(gpushm_timeline_t *tl)
{
  void *page;
  size_t at;

  CHECK_OK(gpushm_timeline_fence_page(tl, &page, &at));
  return __atomic_load_n((uint64_t *)((char *)page + offsetof(struct sync_control, semaphore)),
                         __ATOMIC_ACQUIRE);
}

static void test_restart(void)
{
  char dir[] = "/tmp/gpushm-semaphores-store-XXXXXX";
  struct test_daemon r = { .log_path = log_path };
  struct fake_semaphore *sem, *again;
  gpushm_timeline_t *tl;
  gpushm_t *conn;
  int fd = mint(0, &sem), fd2 = mint(0, &again), got, status;
  uint8_t uuid[16];

  CHECK(mkdtemp(dir) != NULL);
  fdstore_open(dir);
  daemon_start(&r, NULL);
  conn = daemon_connect(&r);
  CHECK_OK(gpushm_timeline_create(conn, "kept-plane", NULL, &tl));
  CHECK(gpushm_timeline_semaphore(tl, fd, device0, 0, &got, uuid) == 1);
  close(got);
  CHECK_OK(gpushm_timeline_signal(tl, 3));
  CHECK(sem_value(sem) == 3 && semaphore_word(tl) != 0);
  fdstore_drain();
  CHECK(kill(r.pid, SIGKILL) == 0);
  CHECK(waitpid(r.pid, &status, 0) == r.pid);
  daemon_respawn_with(&r, fdstore_pass_reversed, NULL, NULL);
  gpushm_disconnect(conn);
  conn = daemon_connect(&r);
  CHECK_OK(gpushm_timeline_open(conn, "kept-plane", 0, &tl));
  CHECK(gpushm_timeline_value(tl) == 3 && semaphore_word(tl) == 0);
  CHECK_ERR(gpushm_timeline_semaphore(tl, -1, NULL, 0, &got, uuid), GPUSHM_E_NOENT);
  CHECK_OK(gpushm_timeline_signal(tl, 4));
  CHECK(sem_value(sem) == 3 && gpushm_timeline_value(tl) == 4);
  CHECK(gpushm_timeline_semaphore(tl, fd2, device0, 0, &got, uuid) == 1);
  CHECK(same_file(got, fd2) && sem_value(again) == 4);
  close(got);
  CHECK_OK(gpushm_timeline_close_unlink(tl));
  gpushm_disconnect(conn);
  daemon_stop(&r);
  fdstore_close();
  munmap(sem, 4096);
  munmap(again, 4096);
  close(fd);
  close(fd2);
  test_log("a persistent timeline back from a restart without its plane: the word cleared, "
           "signals to the fence alone, a new plane registered");
}

int main(void)
{
  const char *fake_lib = getenv("GPUSHM_FAKE_CUDA_LIB");
  gpushm_t *conn;

  if (!fake_lib || access(fake_lib, R_OK) != 0) {
    fprintf(stderr, "test-semaphores: no fake CUDA driver (GPUSHM_FAKE_CUDA_LIB)\n");
    return 1;
  }
  setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1);
  memset(device0, 0xfa, sizeof device0);
  device0[15] = 0;
  d.log_path = log_path = test_log_file("semaphores");
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  test_register(conn);
  test_readers(conn);
  test_ring(conn);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  test_restart();
  return 0;
}
