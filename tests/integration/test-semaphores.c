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
 *  - gpushmctl show says a timeline has a plane, and how many of a ring's consumers have;
 *  - rings' consumers' ready planes (docs/rings.md#vulkan-consumers): a producer registers
 *    none; a consumer registers its own once, frames presented before skipped, every
 *    later present (CPU, stream) signals it; external acquires and releases; as uid
 *    65534, another consumer or a mere reader gets no one's plane but its own, and a
 *    done timeline takes none; a producer SIGKILLed: gpushmd signals it to the promise,
 *    and the consumer's acquire says GPUSHM_E_LOST; one evicted: its plane past every
 *    frame promised, by gpushmd at once and by the producer after its queued signals;
 *    a consumer's done plane: registered by it (for the producers, whatever it asked),
 *    the producer's stream acquires wait on it, its releases signal it;
 *  - gpushmd destroys no import of a plane before its own signals of it are done;
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

/* A SemaphoreRequest on sock; the reply's status (0 or a negative GPUSHM_E_*), its
 * message into why, and the fd it brought (-1: none) into *got. */
static int raw_semaphore(int sock, uint64_t id, uint64_t consumer, int fd, int *got,
                         char *why, size_t whylen)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__SemaphoreRequest body = GPUSHM__SEMAPHORE_REQUEST__INIT;
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME];
  unsigned n_fds = 0;
  Gpushm__Reply *reply;
  int status;

  body.id = id;
  body.consumer = consumer;
  if (fd >= 0) {
    body.device_uuid.data = device0;
    body.device_uuid.len = 16;
  }
  req.body_case = GPUSHM__REQUEST__BODY_SEMAPHORE;
  req.semaphore = &body;
  CHECK((reply = fd >= 0 ? raw_call_fd(sock, &req, fd, fds, &n_fds)
                         : raw_call(sock, &req, fds, &n_fds)) != NULL);
  status = reply->status;
  snprintf(why, whylen, "%s", reply->message ? reply->message : "");
  CHECK(n_fds == (status == 0 ? 1u : 0u));
  *got = n_fds ? fds[0] : -1;
  gpushm__reply__free_unpacked(reply, NULL);
  return status;
}

/* A raw connection that opened ring name (read_only) and, consumer, attached: *done_id
 * its done timeline's id. */
static int raw_ring_holder(const char *name, int read_only, bool consumer, uint64_t ring_id,
                           uint64_t *done_id, int *status_fd)
{
  int sock = raw_connect(d.socket), fds[GPUSHM_LIMIT_FDS_PER_FRAME];
  unsigned n_fds = 0;

  CHECK(sock >= 0 && raw_hello_features(sock, "ring-holder", GPUSHM_FEATURE_TIMELINES |
                                        GPUSHM_FEATURE_RINGS | GPUSHM_FEATURE_SEMAPHORES,
                                        status_fd) == 0);
  CHECK(raw_open_kind(sock, name, 0, GPUSHM__KIND__KIND_RING, read_only, false, fds,
                      &n_fds) == 0);
  while (n_fds)
    close(fds[--n_fds]);
  if (consumer) {
    Gpushm__Request open = GPUSHM__REQUEST__INIT;
    Gpushm__OpenRequest ob = GPUSHM__OPEN_REQUEST__INIT;
    Gpushm__Reply *reply;

    ob.key_case = GPUSHM__OPEN_REQUEST__KEY_ID;
    ob.id = ring_id;
    ob.kind = GPUSHM__KIND__KIND_TIMELINE;
    ob.ring_attach = true;
    open.body_case = GPUSHM__REQUEST__BODY_OPEN;
    open.open = &ob;
    CHECK((reply = raw_call(sock, &open, fds, &n_fds)) != NULL);
    CHECK(reply->status == 0 && reply->open && reply->open->info);
    *done_id = reply->open->info->id;
    gpushm__reply__free_unpacked(reply, NULL);
    while (n_fds)
      close(fds[--n_fds]);
  }
  return sock;
}

static void present_n(gpushm_ring_t *ring, int n, bool on_stream)
{
  gpushm_ring_frame_t f;

  for (int i = 0; i < n; i++) {
    CHECK_OK(gpushm_ring_acquire_slot(ring, 1000, &f));
    CHECK_OK(on_stream ? gpushm_ring_present_stream(ring, NULL, &f) : gpushm_ring_present(ring, &f));
  }
}

/* Rings' consumers' ready planes (docs/rings.md#vulkan-consumers). */
static void test_ring(gpushm_t *conn)
{
  gpushm_create_opts_t opts;
  gpushm_ring_t *ring, *cons;
  gpushm_ring_frame_t f;
  struct fake_semaphore *s, *s2;
  gpushm_t *conn2 = daemon_connect(&d);
  int fd = mint(0, &s), fd2 = mint(0, &s2), sock, status_fd, got;
  uint64_t ring_id, cons_done, evicted_at;
  struct fake_semaphore *ds;
  int dfd = mint(0, &ds);
  char why[512];
  void *page;
  size_t at;
  pid_t pid;

  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  CHECK_OK(gpushm_ring_create(conn, "planes-ring", 2, 4096, &opts, &ring));
  ring_id = gpushm_ring_id(ring);
  present_n(ring, 2, false);

  /* a producer registers nothing, and asks by consumer */
  sock = raw_ring_holder("planes-ring", 0, false, ring_id, NULL, &status_fd);
  CHECK(raw_semaphore(sock, ring_id, 0, fd, &got, why, sizeof why) == -GPUSHM_E_INVAL);
  CHECK(strstr(why, "a producer registers no plane"));
  CHECK(raw_semaphore(sock, ring_id, 12345, -1, &got, why, sizeof why) == -GPUSHM_E_NOENT);
  close(sock);
  close(status_fd);

  /* the library's consumer: frames presented before its registration skipped */
  CHECK_OK(gpushm_ring_open(conn2, "planes-ring", 0, &cons));
  CHECK_ERR(gpushm_ring_acquire_frame_external(cons, 0, 0, &f), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "gpushm_ring_register_semaphore"));
  present_n(ring, 1, false); /* frame 3: before the plane, not signalled on it */
  CHECK(sem_value(s) == 0);
  CHECK_OK(gpushm_ring_register_semaphore(cons, fd, device0));
  CHECK_ERR(gpushm_ring_register_semaphore(cons, fd2, device0), GPUSHM_E_EXIST);
  ctl_show_says(d.socket, "planes-ring", "planes:     1 consumer on a ready plane");
  cons_done = gpushm_timeline_id(gpushm_ring_done_timeline(cons));
  CHECK(gpushm_timeline_value(gpushm_ring_done_timeline(cons)) == 3); /* skipped: released */
  present_n(ring, 1, false);
  CHECK(sem_value(s) == 4);
  CHECK_OK(gpushm_ring_acquire_frame_external(cons, 0, 1000, &f));
  CHECK(f.frame == 4 && f.slot == 1);
  /* a frame promised, not presented: taken at once (the queue waits on the GPU) */
  CHECK_OK(gpushm_ring_acquire_frame_external(cons, 0, 0, &f));
  CHECK(f.frame == 5);
  present_n(ring, 1, true); /* frame 5, from a stream */
  CHECK(sem_value(s) == 5);
  /* the queue's release: the fence written by the GPU, published by the library */
  CHECK_OK(gpushm_timeline_fence_page(gpushm_ring_done_timeline(cons), &page, &at));
  __atomic_store_n((uint64_t *)((char *)page + at), 5, __ATOMIC_RELEASE);
  CHECK_OK(gpushm_ring_release_external(cons, &f));
  CHECK_ERR(gpushm_ring_release_external(cons, &f), GPUSHM_E_INVAL); /* released */
  present_n(ring, 2, false); /* frame 7 waits for frame 5's release */
  CHECK(sem_value(s) == 7);
  test_log("a ring consumer's ready plane: frames before its registration skipped, every "
           "later one signalled on it (CPU and stream presents); external acquires and "
           "releases; a producer registers none");

  /* its done plane (docs/rings.md#done-planes): registered at the fence, and what a
   * producer's stream waits on, not the fence word (the fake driver's waits fail unmet) */
  {
    gpushm_timeline_t *done_tl = gpushm_ring_done_timeline(cons);
    int dgot;
    uint8_t duuid[16];
    gpushm_ring_frame_t g;

    CHECK_OK(gpushm_timeline_semaphore(done_tl, dfd, device0, 0, &dgot, duuid));
    close(dgot);
    CHECK(sem_value(ds) == 5);
    /* frame 8 needs frame 6 back: the fence word says so, the plane not yet */
    CHECK_OK(gpushm_ring_acquire_frame_external(cons, 0, 1000, &f));
    CHECK_OK(gpushm_ring_acquire_frame_external(cons, 0, 1000, &g));
    CHECK(f.frame == 6 && g.frame == 7);
    __atomic_store_n((uint64_t *)((char *)page + at), 6, __ATOMIC_RELEASE);
    CHECK_OK(gpushm_ring_release_external(cons, &f));
    CHECK(gpushm_ring_acquire_slot_stream(ring, NULL, 0, &f) < 0);
    __atomic_store_n(&ds->value, 6, __ATOMIC_RELEASE); /* the queue's signal */
    CHECK_OK(gpushm_ring_acquire_slot_stream(ring, NULL, 0, &f));
    CHECK(f.frame == 8);
    CHECK_OK(gpushm_ring_present_stream(ring, NULL, &f));
    /* a CPU release signals it too (through the library's import) */
    CHECK_OK(gpushm_ring_release(cons, &g));
    CHECK(sem_value(ds) == 7);
  }
  test_log("a ring consumer's done plane: registered at the fence, a producer's stream "
           "waits on it, a CPU release signals it");

  /* attacked as uid 65534: another consumer takes no one's plane but its own */
  pid = geteuid() == 0 ? fork_as(65534, 65534) : fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    struct fake_semaphore *own, *own_done;
    int own_fd = mint(0, &own), done_fd = mint(0, &own_done), again;
    uint64_t mine;

    sock = raw_ring_holder("planes-ring", 1, true, ring_id, &mine, &status_fd);
    CHECK(raw_semaphore(sock, ring_id, cons_done, -1, &got, why, sizeof why) == -GPUSHM_E_PERM);
    CHECK(raw_semaphore(sock, ring_id, 0, -1, &got, why, sizeof why) == -GPUSHM_E_NOENT);
    /* its done timeline's plane, for the producers; a second is the first */
    CHECK(raw_semaphore(sock, mine, 0, done_fd, &got, why, sizeof why) == 0);
    CHECK(raw_semaphore(sock, mine, 0, own_fd, &again, why, sizeof why) == 0);
    CHECK(same_file(got, again) && same_file(got, done_fd));
    close(got);
    close(again);
    CHECK(raw_semaphore(sock, ring_id, 0, own_fd, &got, why, sizeof why) == 0);
    close(got);
    CHECK(raw_semaphore(sock, ring_id, 0, own_fd, &got, why, sizeof why) == -GPUSHM_E_EXIST);
    close(sock);
    close(status_fd);
    /* a reader that is no consumer */
    sock = raw_ring_holder("planes-ring", 1, false, ring_id, NULL, &status_fd);
    CHECK(raw_semaphore(sock, ring_id, 0, own_fd, &got, why, sizeof why) == -GPUSHM_E_PERM);
    CHECK(raw_semaphore(sock, ring_id, cons_done, -1, &got, why, sizeof why) == -GPUSHM_E_PERM);
    close(sock);
    close(status_fd);
    _exit(0);
  }
  check_child(pid);
  /* the producer hands a consumer's plane to nobody else, and finds it by done id */
  sock = raw_ring_holder("planes-ring", 0, false, ring_id, NULL, &status_fd);
  CHECK(raw_semaphore(sock, ring_id, cons_done, -1, &got, why, sizeof why) == 0);
  CHECK(same_file(got, fd));
  close(got);
  close(sock);
  close(status_fd);
  test_log("as uid %u: no other consumer's plane, none for a reader that does not consume, "
           "no plane on a done timeline, one registration a consumer",
           geteuid() == 0 ? 65534u : (unsigned)geteuid());

  /* evicted, with waits maybe queued on its plane: gpushmd signals it past every frame
   * promised, and the producer signals its own promise once its queued signals of it
   * landed, at its next look at the table (one landing late sets gpushmd's back) */
  CHECK_OK(gpushm_ring_evict(ring, cons_done));
  evicted_at = sem_value(s);
  CHECK(evicted_at > 7 + GPUSHM_LIMIT_RING_SLOTS); /* the producer's promise ran ahead */
  __atomic_store_n(&s->value, 7, __ATOMIC_RELEASE); /* a producer's signal landing late */
  present_n(ring, 1, true);
  CHECK(sem_value(s) == evicted_at);
  /* its done plane past every frame a producer can wait for, not to RING_DONE_DETACHED
   * (beyond what a Vulkan semaphore may jump) */
  CHECK(sem_value(ds) == evicted_at);
  CHECK_ERR(gpushm_ring_acquire_frame_external(cons, 0, 0, &f), GPUSHM_E_PERM);
  test_log("an evicted consumer's planes past the promised %llu at once (its ready plane "
           "again after its producer's queued signals)", (unsigned long long)evicted_at);
  munmap(ds, 4096);
  close(dfd);
  CHECK_OK(gpushm_ring_close_unlink(ring));

  /* a producer SIGKILLed: gpushmd signals every consumer's plane to what it promised */
  {
    int up[2], go[2];
    char byte;
    struct timespec t0, t1;
    uint64_t upto;

    CHECK(pipe(up) == 0 && pipe(go) == 0);
    CHECK((pid = fork()) >= 0);
    if (pid == 0) {
      gpushm_t *c = daemon_connect(&d);
      gpushm_ring_t *r;
      CHECK_OK(gpushm_ring_create(c, "planes-ring2", 2, 4096, &opts, &r));
      CHECK(write(up[1], "c", 1) == 1);
      CHECK(read(go[0], &byte, 1) == 1);
      present_n(r, 2, false);
      CHECK(write(up[1], "p", 1) == 1);
      pause();
      _exit(0);
    }
    CHECK(read(up[0], &byte, 1) == 1 && byte == 'c');
    munmap(s2, 4096);
    close(fd2);
    fd2 = mint(0, &s2);
    CHECK_OK(gpushm_ring_close(cons));
    CHECK_OK(gpushm_ring_open(conn2, "planes-ring2", 0, &cons));
    CHECK_OK(gpushm_ring_register_semaphore(cons, fd2, device0));
    CHECK(write(go[1], "g", 1) == 1);
    CHECK(read(up[0], &byte, 1) == 1 && byte == 'p');
    CHECK(sem_value(s2) == 2);
    CHECK_OK(gpushm_ring_acquire_frame_external(cons, 0, 1000, &f));
    CHECK(f.frame == 1);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kill(pid, SIGKILL);
    CHECK(waitpid(pid, NULL, 0) == pid);
    for (int i = 0; i < 5000 && sem_value(s2) == 2; i++)
      usleep(1000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    upto = sem_value(s2);
    CHECK(upto > 2 + GPUSHM_LIMIT_RING_SLOTS); /* its promise ran ahead */
    CHECK_OK(gpushm_ring_acquire_frame_external(cons, 0, 1000, &f));
    CHECK(f.frame == 2); /* presented before the kill */
    CHECK_ERR(gpushm_ring_acquire_frame_external(cons, 0, 1000, &f), GPUSHM_E_LOST);
    CHECK(f.frame == upto);
    CHECK(strstr(gpushm_last_error_message(), "signaller lost"));
    CHECK_OK(gpushm_ring_release_external(cons, &f));
    close(up[0]);
    close(up[1]);
    close(go[0]);
    close(go[1]);
    test_log("a producer SIGKILLed: the consumer's plane at the promised %llu %.1f ms after "
             "the kill, its acquire GPUSHM_E_LOST there", (unsigned long long)upto,
             (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
  }
  CHECK_OK(gpushm_ring_close(cons));
  gpushm_disconnect(conn2);
  munmap(s, 4096);
  munmap(s2, 4096);
  close(fd);
  close(fd2);
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
  /* every plane's import let go after gpushmd's signals of it (the fake driver refuses a
   * destroy before: the real one's behaviour is undefined) */
  CHECK(!file_contains(log_path, "cuDestroyExternalSemaphore"));
  test_restart();
  return 0;
}
