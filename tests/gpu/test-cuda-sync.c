/* SPDX-License-Identifier: MIT */
/* Stream-ordered producer -> consumer synchronisation on a real GPU, across
 * processes (consumers are exec'ed), through sync buffers and named events.
 *  - ordering: a producer kernel that writes only after 500 ms, released with no
 *    host synchronisation; the consumer acquires on its own stream and verifies on
 *    the GPU.  A control run without the acquire must see stale data, which proves
 *    the check can fail.
 *  - a ring of 4 buffers, 1000 frames, both processes asynchronous, every frame
 *    verified on the GPU; frames per second for 1 MiB and 64 MiB frames.
 *  - a producer killed after releasing behind a kernel that has not written yet, on
 *    both backends: its fence write dies with it, and gpushmd raises the fence once the
 *    process is gone, so the consumer's acquire and read finish within a bound instead
 *    of hanging (seeing what the dead kernel left); stats count the raise.  (cuda-ipc
 *    sync buffers had an IPC event until 0.7.1: one recorded by a process that dies
 *    before the record runs never completes, nor does any record after it, and this
 *    consumer waited for ever.)
 *  - a ring on promises (0.8): each slot a frame buffer the producer promised and a
 *    small "done" buffer the consumer promised, both released with caller-chosen
 *    values; every wait is queued on the GPU at once (no CPU wait per frame), every
 *    frame verified on the GPU; frames per second beside the numbered ring's.
 *  - a promiser killed with its kernel running, while a consumer's stream waits on the
 *    GPU for a value it promised: gpushmd breaks the promise once the process is gone,
 *    the stream goes on, the value reads as lost; how long after the kill it went on.
 *  - timelines (0.8): a ring of 4 plain cuda-fd buffers ordered by two timelines, ready
 *    (the producer signals it, the consumer waits on it through a read-only open) and
 *    done (the other way), both promised, so that no frame waits on the CPU; every
 *    frame verified on the GPU; frames per second.  And a timeline's promiser killed
 *    mid-kernel while another process's stream waits on the GPU for a promised value:
 *    the stream goes on once gpushmd breaks the promise, the value reads as lost.
 *  - frame rings (0.8): 4 cuda-fd slots through gpushm_ring_*, the consumer another uid
 *    (nobody, where the test is root) with read access only, every acquire, present and
 *    release on a stream (promised ahead: no CPU wait per frame), every frame verified on
 *    the GPU; frames per second beside the timeline ring's.
 *  - the cost of opening an inter-process event.
 *  - what another uid can open (legacy IPC events are 0600 files of the daemon's uid).
 * Skips (77) only where there is no CUDA driver or device. */
#include "config.h"
#include "cuda-test.h"

#include <pwd.h>
#include <stdbool.h>
#include <grp.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern const char test_kernels_ptx[];

#define MiB (1ull << 20)

static CUfunction fill_fn, verify_fn;
static struct test_daemon d;
static char self[4096];
/* Under compute-sanitizer the GPU is serialised and slow: the timing control cannot
 * show stale data and the ring is shortened. */
static int sanitizer;
/* The backend of the sync buffers under test. */
static gpushm_backend_t sync_backend = GPUSHM_BACKEND_CUDA_IPC;


static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The device, plus the test kernels loaded into its context. */
static void cuda_setup(int skip_without_gpu)
{
  CUmodule mod;
  CUresult r;

  cuda_test_setup(skip_without_gpu);
  r = cuda_test_load_module(test_kernels_ptx, &mod);
  if (r == CUDA_ERROR_NOT_SUPPORTED) {
    test_log("this driver runs no kernels (the fake one?)");
    exit(skip_without_gpu ? TEST_SKIP : 1);
  }
  CU_CHECK(CU_CALL(&drv, cuModuleGetFunction, &fill_fn, mod, "slow_fill"));
  CU_CHECK(CU_CALL(&drv, cuModuleGetFunction, &verify_fn, mod, "verify"));
}

static CUstream new_stream(void)
{
  CUstream s;
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  return s;
}

static unsigned blocks_for(unsigned long long words)
{
  unsigned long long b = (words + 255) / 256;
  return b == 0 ? 1 : b > 2048 ? 2048 : (unsigned)b;
}

static void launch_fill(CUstream s, CUdeviceptr p, unsigned long long words, unsigned seed,
                        unsigned long long delay_ns)
{
  void *args[] = { &p, &words, &seed, &delay_ns };
  CU_CHECK(CU_CALL(&drv, cuLaunchKernel, fill_fn, blocks_for(words), 1, 1, 256, 1, 1, 0, s, args,
                   NULL));
}

static void launch_verify(CUstream s, CUdeviceptr p, unsigned long long words, unsigned seed,
                          CUdeviceptr errors)
{
  void *args[] = { &p, &words, &seed, &errors };
  CU_CHECK(CU_CALL(&drv, cuLaunchKernel, verify_fn, blocks_for(words), 1, 1, 256, 1, 1, 0, s,
                   args, NULL));
}


static pid_t spawn(const char *role, const char *a, const char *b, const char *c, const char *e,
                   const char *f)
{
  pid_t pid;
  fflush(stdout);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("GPUSHM_SOCKET", d.socket, 1);
    /* The producer the test kills mid-kernel stays outside MPS, as this parent does:
     * an MPS client SIGKILLed with a kernel running faults the MPS server (Xid 31,
     * measured on the H100) and fails every client it serves, which is MPS's doing,
     * not the fence's (docs/sync.md).  Its consumer still runs inside. */
    if (strcmp(role, "dying-producer") != 0 && strcmp(role, "dying-promiser") != 0 &&
        strcmp(role, "timeline-dying") != 0)
      cuda_test_child_env();
    execl(self, self, role, a, b, c, e, f, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* spawn(), with the child's stdout read through *out. */
static pid_t spawn_read(FILE **out, const char *role, const char *a, const char *b,
                        const char *c, const char *e)
{
  int fds[2], saved;
  pid_t pid;

  CHECK(pipe(fds) == 0);
  fflush(stdout);
  CHECK((saved = dup(1)) >= 0 && dup2(fds[1], 1) == 1);
  pid = spawn(role, a, b, c, e, NULL);
  CHECK(dup2(saved, 1) == 1);
  close(saved);
  close(fds[1]);
  CHECK((*out = fdopen(fds[0], "r")) != NULL);
  return pid;
}

static int child_status(pid_t pid)
{
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  return WEXITSTATUS(status);
}

/* --- consumer roles ------------------------------------------------------------- */

/* argv: buffer seq seed mode(acquire|no-acquire).  Exit 0: saw the pattern whole;
 * 3: saw wrong words. */
static int role_check(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;
  CUstream s;
  CUdeviceptr errors;
  unsigned bad = 0;
  uint64_t seq = strtoull(argv[3], NULL, 10);
  unsigned seed = (unsigned)strtoul(argv[4], NULL, 10);
  int acquire = strcmp(argv[5], "acquire") == 0;

  if (argv[6] && strcmp(argv[6], "nobody") == 0) /* before any CUDA: all of it as nobody */
    CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
  cuda_setup(0);
  s = new_stream();
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &errors, sizeof bad));
  CU_CHECK(CU_CALL(&drv, cuMemsetD32, errors, 0, 1));
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &b));
  test_log("consumer uid %u, sync method %d", (unsigned)getuid(), gpushm_buffer_sync_method(b, NULL));
  CHECK(gpushm_buffer_sync_method(b, NULL) == GPUSHM_SYNC_IPC_EVENT ||
        gpushm_buffer_sync_method(b, NULL) == GPUSHM_SYNC_GPU_FENCE);
  if (acquire) {
    CHECK_OK(gpushm_buffer_acquire(b, s, seq, 30000));
  } else {
    /* the control: the release is published, but the stream does not wait for it */
    while (gpushm_buffer_release_seq(b) < seq)
      usleep(100);
  }
  launch_verify(s, cuda_test_dptr(b), gpushm_buffer_size(b) / 4, seed, errors);
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, &bad, errors, sizeof bad));
  test_log("consumer (%s): %u of %llu words not yet written", argv[5], bad,
           (unsigned long long)(gpushm_buffer_size(b) / 4));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return bad ? 3 : 0;
}

/* argv: ring_size frames frame_bytes [promised].  Verifies every frame on the GPU.
 * Numbered: frame k of slot i is release 2u+1 of ring-i (u = k / ring_size), handed back
 * with release 2u+2.  On promises: frame k is value u+1 of prom-i, handed back with value
 * u+1 of prom-done-i, whose values this consumer promised. */
static int role_ring(char **argv)
{
  unsigned ring = (unsigned)atoi(argv[2]), frames = (unsigned)atoi(argv[3]);
  uint64_t bytes = strtoull(argv[4], NULL, 10);
  bool promised = argv[5] && strcmp(argv[5], "promised") == 0;
  gpushm_buffer_t *bufs[16], *done[16];
  unsigned *bad = calloc(frames, sizeof *bad);
  unsigned long long total_bad = 0;
  CUdeviceptr errors;
  gpushm_t *conn;
  CUstream s;
  double t0, t;

  cuda_setup(0);
  s = new_stream();
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &errors, frames * sizeof *bad));
  CU_CHECK(CU_CALL(&drv, cuMemsetD32, errors, 0, frames));
  conn = daemon_connect(&d);
  for (unsigned i = 0; i < ring; i++) {
    char name[32];
    snprintf(name, sizeof name, promised ? "prom-%u" : "ring-%u", i);
    CHECK_OK(gpushm_buffer_open(conn, name, 0, &bufs[i]));
    if (promised) {
      snprintf(name, sizeof name, "prom-done-%u", i);
      CHECK_OK(gpushm_buffer_open(conn, name, 0, &done[i]));
      CHECK_OK(gpushm_buffer_promise(done[i], (frames + ring - 1) / ring));
    }
  }
  if (promised) {
    printf("promised\n");
    fflush(stdout);
  }
  t0 = now_s();
  for (unsigned k = 0; k < frames; k++) {
    gpushm_buffer_t *b = bufs[k % ring];
    uint64_t use = k / ring, seq;
    if (promised) /* promised by the producer: queued on the GPU at once */
      CHECK_OK(gpushm_buffer_acquire_value(b, s, use + 1, 0));
    else
      CHECK_OK(gpushm_buffer_acquire(b, s, 2 * use + 1, 30000)); /* the producer's frame k */
    launch_verify(s, cuda_test_dptr(b), bytes / 4, k + 1, errors + k * sizeof *bad);
    if (promised) {
      CHECK_OK(gpushm_buffer_release_value(done[k % ring], s, use + 1));
    } else {
      CHECK_OK(gpushm_buffer_release(b, s, &seq)); /* hand it back */
      CHECK(seq == 2 * use + 2);
    }
  }
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  t = now_s() - t0;
  CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, bad, errors, frames * sizeof *bad));
  for (unsigned k = 0; k < frames; k++)
    total_bad += bad[k];
  printf("ring of %u x %llu MiB, %s: %u frames in %.3f s = %.0f frames/s (%.1f GB/s verified), "
         "%llu bad words\n", ring, (unsigned long long)(bytes >> 20),
         promised ? "fences on promises (no CPU wait per frame)"
         : gpushm_buffer_sync_method(bufs[0], NULL) == GPUSHM_SYNC_GPU_FENCE ? "fences"
                                                                            : "IPC events",
         frames, t, frames / t, frames * (double)bytes / t / 1e9, total_bad);
  fflush(stdout);
  for (unsigned i = 0; i < ring; i++) {
    CHECK_OK(gpushm_buffer_close(bufs[i]));
    if (promised)
      CHECK_OK(gpushm_buffer_close(done[i]));
  }
  gpushm_disconnect(conn);
  free(bad);
  return total_bad ? 3 : 0;
}

/* argv: buffer.  Releases it behind a kernel that spins for a minute before it writes,
 * then waits to be killed: its fence write is queued and will never run. */
static int role_dying_producer(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;
  CUstream s;
  uint64_t seq;

  cuda_setup(0);
  s = new_stream();
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], 0, &b));
  CHECK(gpushm_buffer_sync_method(b, NULL) == GPUSHM_SYNC_GPU_FENCE);
  launch_fill(s, cuda_test_dptr(b), gpushm_buffer_size(b) / 4, 99, 60000000000ull);
  CHECK_OK(gpushm_buffer_release(b, s, &seq));
  test_log("producer: release %llu queued behind a 60 s kernel; waiting to be killed",
           (unsigned long long)seq);
  for (;;)
    pause();
}

/* argv: buffer upto.  Promises values up to upto, then releases 1 behind a kernel that
 * spins for a minute, and waits to be killed. */
static int role_dying_promiser(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;
  CUstream s;

  cuda_setup(0);
  s = new_stream();
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], 0, &b));
  CHECK_OK(gpushm_buffer_promise(b, strtoull(argv[3], NULL, 10)));
  launch_fill(s, cuda_test_dptr(b), gpushm_buffer_size(b) / 4, 98, 60000000000ull);
  CHECK_OK(gpushm_buffer_release_value(b, s, 1));
  for (;;)
    pause();
}

/* argv: buffer value.  Queues its stream's wait for value (promised: no CPU wait), says
 * "queued", then reports when the stream got past it ("done <CLOCK_MONOTONIC s>") and
 * exits 0 if value reads as lost then. */
static int role_promise_waiter(char **argv)
{
  uint64_t value = strtoull(argv[3], NULL, 10);
  gpushm_t *conn;
  gpushm_buffer_t *b;
  CUstream s;
  int r;

  cuda_setup(0);
  s = new_stream();
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &b));
  CHECK_OK(gpushm_buffer_acquire_value(b, s, value, 0));
  printf("queued\n");
  fflush(stdout);
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  printf("done %.6f\n", now_s());
  fflush(stdout);
  r = gpushm_buffer_value_lost(b, value) == 1 ? 0 : 3;
  if (r)
    test_log("waiter: value %llu went by, and does not read as lost", (unsigned long long)value);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return r;
}

/* argv: ring frames bytes.  The consumer of the timeline ring: waits for each frame on
 * "tl-ready" (read-only: it never signals it), verifies it on the GPU, hands its slot
 * back on "tl-done", which it promised whole; nothing waits on the CPU per frame. */
static int role_timeline_ring(char **argv)
{
  unsigned ring = (unsigned)atoi(argv[2]), frames = (unsigned)atoi(argv[3]);
  uint64_t bytes = strtoull(argv[4], NULL, 10);
  gpushm_buffer_t *bufs[16];
  gpushm_timeline_t *ready, *done;
  unsigned *bad = calloc(frames, sizeof *bad);
  unsigned long long total_bad = 0;
  CUdeviceptr errors;
  gpushm_t *conn;
  CUstream s;
  double t0, t;

  cuda_setup(0);
  s = new_stream();
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &errors, frames * sizeof *bad));
  CU_CHECK(CU_CALL(&drv, cuMemsetD32, errors, 0, frames));
  conn = daemon_connect(&d);
  for (unsigned i = 0; i < ring; i++) {
    char name[32];
    snprintf(name, sizeof name, "tl-slot-%u", i);
    CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_OPEN_READONLY, &bufs[i]));
  }
  CHECK_OK(gpushm_timeline_open(conn, "tl-ready", GPUSHM_OPEN_READONLY, &ready));
  CHECK_OK(gpushm_timeline_open(conn, "tl-done", 0, &done));
  CHECK_OK(gpushm_timeline_promise(done, frames));
  printf("promised\n");
  fflush(stdout);
  t0 = now_s();
  for (unsigned k = 0; k < frames; k++) {
    CHECK_OK(gpushm_timeline_wait_stream(ready, s, k + 1, 0)); /* promised: no CPU wait */
    launch_verify(s, cuda_test_dptr(bufs[k % ring]), bytes / 4, k + 1, errors + k * sizeof *bad);
    CHECK_OK(gpushm_timeline_signal_stream(done, s, k + 1));
  }
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  t = now_s() - t0;
  CHECK(gpushm_timeline_sync_method(ready, NULL) == GPUSHM_SYNC_GPU_FENCE &&
        gpushm_timeline_sync_method(done, NULL) == GPUSHM_SYNC_GPU_FENCE);
  CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, bad, errors, frames * sizeof *bad));
  for (unsigned k = 0; k < frames; k++)
    total_bad += bad[k];
  printf("ring of %u x %llu MiB on timelines (ready, done; promised, no CPU wait per frame): "
         "%u frames in %.3f s = %.0f frames/s (%.1f GB/s verified), %llu bad words\n", ring,
         (unsigned long long)(bytes >> 20), frames, t, frames / t,
         frames * (double)bytes / t / 1e9, total_bad);
  fflush(stdout);
  for (unsigned i = 0; i < ring; i++)
    CHECK_OK(gpushm_buffer_close(bufs[i]));
  CHECK_OK(gpushm_timeline_close(ready));
  CHECK_OK(gpushm_timeline_close(done));
  gpushm_disconnect(conn);
  free(bad);
  return total_bad ? 3 : 0;
}

/* argv: ring frames bytes.  The consumer of the frame ring (gpushm_ring_*), as nobody
 * where the test is root (it needs read access alone, and hands frames back through a
 * done timeline of its own): waits for each frame on its stream, verifies it on the GPU,
 * releases it on the stream; nothing waits on the CPU per frame. */
static int role_frame_ring(char **argv)
{
  unsigned frames = (unsigned)atoi(argv[3]);
  uint64_t bytes = strtoull(argv[4], NULL, 10);
  struct passwd *nobody = getuid() == 0 ? getpwnam("nobody") : NULL;
  unsigned *bad = calloc(frames, sizeof *bad);
  unsigned long long total_bad = 0;
  gpushm_ring_t *ring;
  CUdeviceptr errors;
  gpushm_t *conn;
  CUstream s;
  double t0, t;

  if (nobody)
    CHECK(setgroups(0, NULL) == 0 && setgid(nobody->pw_gid) == 0 &&
          setuid(nobody->pw_uid) == 0);
  cuda_setup(0);
  s = new_stream();
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &errors, frames * sizeof *bad));
  CU_CHECK(CU_CALL(&drv, cuMemsetD32, errors, 0, frames));
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_ring_open(conn, argv[2], 0, &ring));
  CHECK(gpushm_ring_slots(ring) == 4 && gpushm_ring_slot_size(ring) == bytes);
  printf("attached\n");
  fflush(stdout);
  t0 = now_s();
  for (unsigned k = 0; k < frames; k++) {
    gpushm_ring_frame_t f;
    /* promised (by the ring's creator, ahead): queued with no CPU wait */
    CHECK_OK(gpushm_ring_acquire_frame_stream(ring, s, 0, 0, &f));
    CHECK(f.frame == k + 1);
    launch_verify(s, (CUdeviceptr)(uintptr_t)gpushm_ring_slot_ptr(ring, f.slot), bytes / 4,
                  k + 1, errors + k * sizeof *bad);
    CHECK_OK(gpushm_ring_release_stream(ring, s, &f));
  }
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  t = now_s() - t0;
  CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, bad, errors, frames * sizeof *bad));
  for (unsigned k = 0; k < frames; k++)
    total_bad += bad[k];
  printf("frame ring of 4 x %llu MiB (gpushm_ring_*, consumer uid %u; no CPU wait per frame): "
         "%u frames in %.3f s = %.0f frames/s (%.1f GB/s verified), %llu bad words\n",
         (unsigned long long)(bytes >> 20), (unsigned)getuid(), frames, t, frames / t,
         frames * (double)bytes / t / 1e9, total_bad);
  fflush(stdout);
  CHECK_OK(gpushm_ring_close(ring));
  gpushm_disconnect(conn);
  free(bad);
  return total_bad ? 3 : 0;
}

/* argv: timeline upto.  Promises values up to upto, signals 1 behind a kernel that spins
 * for a minute, and waits to be killed. */
static int role_timeline_dying(char **argv)
{
  gpushm_timeline_t *tl;
  gpushm_t *conn;
  CUdeviceptr scratch;
  CUstream s;

  cuda_setup(0);
  s = new_stream();
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &scratch, MiB));
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_timeline_open(conn, argv[2], 0, &tl));
  CHECK_OK(gpushm_timeline_promise(tl, strtoull(argv[3], NULL, 10)));
  launch_fill(s, scratch, MiB / 4, 97, 60000000000ull);
  CHECK_OK(gpushm_timeline_signal_stream(tl, s, 1));
  for (;;)
    pause();
}

/* argv: timeline value.  Queues its stream's wait for value (promised: no CPU wait),
 * says "queued", then when the stream got past it ("done <CLOCK_MONOTONIC s>"); exits 0
 * if value reads as lost then. */
static int role_timeline_waiter(char **argv)
{
  uint64_t value = strtoull(argv[3], NULL, 10);
  gpushm_timeline_t *tl;
  gpushm_t *conn;
  CUstream s;
  int r;

  cuda_setup(0);
  s = new_stream();
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_timeline_open(conn, argv[2], GPUSHM_OPEN_READONLY, &tl));
  r = gpushm_timeline_wait_stream(tl, s, value, 0);
  CHECK(r == 0);
  printf("queued\n");
  fflush(stdout);
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  printf("done %.6f\n", now_s());
  fflush(stdout);
  r = gpushm_timeline_value_lost(tl, value) == 1 ? 0 : 3;
  if (r)
    test_log("waiter: value %llu went by, and does not read as lost", (unsigned long long)value);
  CHECK_OK(gpushm_timeline_close(tl));
  gpushm_disconnect(conn);
  return r;
}

/* argv: count.  Opens events ev-0..ev-(count-1), each once (uncached). */
static int role_event_open(char **argv)
{
  int n = atoi(argv[2]);
  double *cost = calloc((size_t)n, sizeof *cost), first;
  gpushm_event_t **evs = calloc((size_t)n, sizeof *evs);
  gpushm_t *conn;
  CUstream s;

  cuda_setup(0);
  s = new_stream();
  conn = daemon_connect(&d);
  for (int i = 0; i < n; i++) {
    char name[32];
    double t = now_s();
    snprintf(name, sizeof name, "ev-%d", i);
    CHECK_OK(gpushm_event_open(conn, name, &evs[i]));
    cost[i] = (now_s() - t) * 1e6;
  }
  first = cost[0];
  /* the named event works: the producer recorded ev-0 after its work */
  CHECK_OK(gpushm_event_wait(evs[0], s));
  CHECK_OK(gpushm_event_record(evs[1], s));
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  for (int i = 1; i < n; i++)
    for (int j = i; j > 1 && cost[j] < cost[j - 1]; j--) {
      double tmp = cost[j];
      cost[j] = cost[j - 1];
      cost[j - 1] = tmp;
    }
  printf("event open (round trip + cuIpcOpenEventHandle): first %.0f us, median of %d more %.0f us\n",
         first, n - 1, cost[1 + (n - 1) / 2]);
  fflush(stdout);
  for (int i = 0; i < n; i++)
    CHECK_OK(gpushm_event_close(evs[i]));
  gpushm_disconnect(conn);
  return 0;
}

/* As nobody: which objects of a root daemon can another uid use?  Reports, and checks
 * that whatever fails, fails cleanly with an explanation. */
static int role_other_uid(char **argv)
{
  struct passwd *nobody = getpwnam("nobody");
  gpushm_t *conn;
  gpushm_buffer_t *b;
  gpushm_event_t *ev;
  int r;

  CHECK(nobody && setgroups(0, NULL) == 0 && setgid(nobody->pw_gid) == 0 &&
        setuid(nobody->pw_uid) == 0);
  cuda_setup(0);
  conn = daemon_connect(&d);
  r = gpushm_buffer_open(conn, "shared-memory", 0, &b);
  printf("uid %u: plain device buffer: %s%s%s\n", (unsigned)getuid(), r ? gpushm_strerror(r) : "opened",
         r ? ": " : "", r ? gpushm_last_error_message() : "");
  if (r == 0) {
    CU_CHECK(CU_CALL(&drv, cuMemsetD32, cuda_test_dptr(b), 7, 1));
    CHECK_OK(gpushm_buffer_close(b));
  } else {
    CHECK(r == GPUSHM_E_CUDA || r == GPUSHM_E_PERM);
  }
  r = gpushm_event_open(conn, "shared-event", &ev);
  printf("uid %u: named event: %s%s%s\n", (unsigned)getuid(), r ? gpushm_strerror(r) : "opened",
         r ? ": " : "", r ? gpushm_last_error_message() : "");
  if (r == 0)
    CHECK_OK(gpushm_event_close(ev));
  else
    CHECK(r == GPUSHM_E_PERM && strstr(gpushm_last_error_message(), "per-user gpushmd"));
  /* a cuda-fd sync buffer: its fd and its fence work for any uid its mode admits */
  CHECK_OK(gpushm_buffer_open(conn, "shared-fd-sync", 0, &b));
  printf("uid %u: cuda-fd sync buffer: opened, sync method %d\n", (unsigned)getuid(),
         gpushm_buffer_sync_method(b, NULL));
  CHECK(gpushm_buffer_sync_method(b, NULL) == GPUSHM_SYNC_GPU_FENCE);
  {
    CUstream s = new_stream();
    CHECK_OK(gpushm_buffer_acquire(b, s, 1, 10000)); /* the producer's release */
    CU_CHECK(CU_CALL(&drv, cuMemsetD32, cuda_test_dptr(b), 7, 1));
    CHECK_OK(gpushm_buffer_release(b, s, NULL));
    CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  }
  CHECK_OK(gpushm_buffer_close(b));
  /* a cuda-ipc sync buffer: as its memory opens or not (its fence is in it; its IPC
   * event, before 0.7.1, was a 0600 file of the daemon's uid) */
  r = gpushm_buffer_open(conn, "shared-sync", 0, &b);
  printf("uid %u: cuda-ipc sync buffer: %s%s%s\n", (unsigned)getuid(),
         r ? gpushm_strerror(r) : "opened", r ? ": " : "", r ? gpushm_last_error_message() : "");
  if (r == 0) {
    CHECK(gpushm_buffer_sync_method(b, NULL) == GPUSHM_SYNC_GPU_FENCE);
    CHECK_OK(gpushm_buffer_close(b));
  } else {
    CHECK(r == GPUSHM_E_CUDA || r == GPUSHM_E_PERM);
  }
  {
    const gpushm_buffer_info_t *info;
    /* nothing kept */
    CHECK((info = find_buffer(conn, "shared-sync")) && gpushm_buffer_info_my_refs(info) == 0);
  }
  fflush(stdout);
  gpushm_disconnect(conn);
  return 0;
}

/* --- the producer side ------------------------------------------------------------ */

static gpushm_buffer_t *create_sync(gpushm_t *conn, const char *name, uint64_t bytes, uint32_t mode)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  gpushm_create_opts_init(&opts);
  opts.backend = sync_backend;
  opts.flags = GPUSHM_CREATE_SYNC;
  opts.mode = mode;
  CHECK_OK(gpushm_buffer_create(conn, name, bytes, &opts, &b));
  return b;
}

static void test_ordering(gpushm_t *conn)
{
  gpushm_buffer_t *b = create_sync(conn, "ordered", 64 * MiB, 0644);
  CUstream s = new_stream();
  const char *modes[] = { "acquire", "no-acquire" };

  for (unsigned round = 0; round < 2; round++) {
    char seq_text[16], seed_text[16];
    uint64_t seq;
    pid_t consumer;
    int status;

    CU_CHECK(CU_CALL(&drv, cuMemsetD32, cuda_test_dptr(b), 0, 16 * MiB));
    CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
    snprintf(seq_text, sizeof seq_text, "%llu", (unsigned long long)gpushm_buffer_release_seq(b) + 1);
    snprintf(seed_text, sizeof seed_text, "%u", round + 1);
    consumer = spawn("check", "ordered", seq_text, seed_text, modes[round],
                     sync_backend == GPUSHM_BACKEND_CUDA_FD && geteuid() == 0 ? "nobody" : NULL);
    /* give the consumer time to be waiting, then produce: 500 ms of kernel, and
     * the release right behind it, no host synchronisation in between */
    usleep(300000);
    launch_fill(s, cuda_test_dptr(b), 16 * MiB, round + 1, 500000000ull);
    CHECK_OK(gpushm_buffer_release(b, s, &seq));
    status = child_status(consumer);
    CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
    if (round == 0) {
      CHECK(status == 0); /* acquire waited for the slow kernel */
    } else if (!sanitizer) {
      /* without the acquire the consumer must have seen unwritten words: otherwise
       * this test could not tell ordering from luck */
      CHECK(status == 3);
    } else {
      test_log("control run under a sanitizer (kernels serialised): %s",
               status == 3 ? "stale data seen" : "no stale data, as expected there");
    }
  }
  CHECK_OK(gpushm_unlink(conn, "ordered"));
  CHECK_OK(gpushm_buffer_close(b));
  CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
  test_log("acquire waited for a 500 ms producer kernel%s",
           sanitizer ? "" : "; without it the consumer saw stale data");
}

/* The ring, numbered or (promised) on promises: prom-i carries frames (the producer
 * promised all their values), prom-done-i hands slots back (the consumer promised
 * those), and nobody waits on the CPU for a frame. */
static void test_ring(gpushm_t *conn, uint64_t bytes, bool promised)
{
  enum { RING = 4 };
  const unsigned FRAMES = sanitizer ? 40 : 1000, USES = (FRAMES + RING - 1) / RING;
  gpushm_buffer_t *bufs[RING], *done[RING];
  char ring_text[8], frames_text[16], bytes_text[32], line[256];
  CUstream s = new_stream();
  FILE *out;
  pid_t consumer;

  for (unsigned i = 0; i < RING; i++) {
    char name[32];
    snprintf(name, sizeof name, promised ? "prom-%u" : "ring-%u", i);
    bufs[i] = create_sync(conn, name, bytes, 0600);
    if (promised) {
      CHECK_OK(gpushm_buffer_promise(bufs[i], USES));
      snprintf(name, sizeof name, "prom-done-%u", i);
      done[i] = create_sync(conn, name, 4096, 0600);
    }
  }
  snprintf(ring_text, sizeof ring_text, "%d", RING);
  snprintf(frames_text, sizeof frames_text, "%u", FRAMES);
  snprintf(bytes_text, sizeof bytes_text, "%llu", (unsigned long long)bytes);
  consumer = spawn_read(&out, "ring", ring_text, frames_text, bytes_text,
                        promised ? "promised" : NULL);
  if (promised) /* the consumer's promises are made */
    CHECK(fgets(line, sizeof line, out) && strcmp(line, "promised\n") == 0);
  for (unsigned k = 0; k < FRAMES; k++) {
    unsigned i = k % RING;
    uint64_t use = k / RING, seq;
    if (use > 0 && promised) /* promised by the consumer: queued at once */
      CHECK_OK(gpushm_buffer_acquire_value(done[i], s, use, 0));
    else if (use > 0)
      CHECK_OK(gpushm_buffer_acquire(bufs[i], s, 2 * use, 30000)); /* the consumer is done */
    /* every 50th frame is slow: the consumer must wait for it, not race it */
    launch_fill(s, cuda_test_dptr(bufs[i]), bytes / 4, k + 1, k % 50 == 0 ? 2000000ull : 0);
    if (promised) {
      CHECK_OK(gpushm_buffer_release_value(bufs[i], s, use + 1));
    } else {
      CHECK_OK(gpushm_buffer_release(bufs[i], s, &seq));
      CHECK(seq == 2 * use + 1);
    }
  }
  while (fgets(line, sizeof line, out))
    fputs(line, stdout);
  fclose(out);
  CHECK(child_status(consumer) == 0);
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  for (unsigned i = 0; i < RING; i++) {
    CHECK(gpushm_buffer_value_lost(bufs[i], 1) == 0);
    CHECK_OK(gpushm_buffer_close_unlink(bufs[i]));
    if (promised)
      CHECK_OK(gpushm_buffer_close_unlink(done[i]));
  }
  CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
}

static uint64_t promises_broken(void)
{
  gpushm_stats_t *st = daemon_stats(&d);
  uint64_t v = 0;

  for (size_t i = 0; i < gpushm_stats_metric_count(st); i++)
    if (strcmp(gpushm_metric_name(gpushm_stats_metric(st, i)),
               "gpushm_promises_broken_total") == 0)
      v = gpushm_metric_value(gpushm_stats_metric(st, i));
  gpushm_stats_free(st);
  return v;
}

/* A promiser killed mid-kernel while another process's stream waits on the GPU for a
 * value it promised: without the daemon's break that stream would wait for ever. */
static void test_dying_promiser(gpushm_t *conn)
{
  gpushm_buffer_t *b = create_sync(conn, "dying-promiser", 64 * MiB, 0644);
  uint64_t broken = promises_broken();
  char line[256];
  double killed, reaped, done;
  pid_t promiser, waiter;
  int status;
  FILE *out;

  promiser = spawn("dying-promiser", "dying-promiser", "5", NULL, NULL, NULL);
  for (killed = now_s(); gpushm_buffer_release_seq(b) < 1; usleep(1000))
    CHECK(now_s() - killed < 60);
  waiter = spawn_read(&out, "promise-waiter", "dying-promiser", "5", NULL, NULL);
  CHECK(fgets(line, sizeof line, out) && strcmp(line, "queued\n") == 0);
  usleep(300000); /* the wait is on the GPU, and holds */
  CHECK(waitpid(waiter, &status, WNOHANG) == 0);
  killed = now_s();
  CHECK(kill(promiser, SIGKILL) == 0);
  CHECK(waitpid(promiser, &status, 0) == promiser && WIFSIGNALED(status));
  reaped = now_s(); /* its death: the driver has torn its context down */
  CHECK(fgets(line, sizeof line, out) && sscanf(line, "done %lf", &done) == 1);
  fclose(out);
  test_log("promiser SIGKILLed mid-kernel: the stream waiting on the GPU for a value it "
           "promised went on %.1f ms after the kill, %.1f ms after the process was reaped "
           "(its teardown took %.1f ms)", (done - killed) * 1e3, (done - reaped) * 1e3,
           (reaped - killed) * 1e3);
  CHECK(child_status(waiter) == 0); /* and value 5 read as lost as it went on */
  CHECK(done - killed < 20);
  CHECK(promises_broken() == broken + 1);
  CHECK(gpushm_buffer_release_seq(b) == 5 && gpushm_buffer_value_lost(b, 5) == 1);
  CHECK_OK(gpushm_buffer_close_unlink(b));
}

/* The ring on timelines: plain buffers, a producer signalling "tl-ready" and waiting
 * on "tl-done", both promised whole, nothing on the CPU per frame. */
static void test_timeline_ring(gpushm_t *conn, uint64_t bytes)
{
  enum { RING = 4 };
  const unsigned FRAMES = sanitizer ? 40 : 1000;
  gpushm_buffer_t *bufs[RING];
  gpushm_timeline_t *ready, *done;
  gpushm_create_opts_t opts;
  char ring_text[8], frames_text[16], bytes_text[32], line[256];
  CUstream s = new_stream();
  FILE *out;
  pid_t consumer;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.mode = 0644;
  for (unsigned i = 0; i < RING; i++) {
    char name[32];
    snprintf(name, sizeof name, "tl-slot-%u", i);
    CHECK_OK(gpushm_buffer_create(conn, name, bytes, &opts, &bufs[i]));
  }
  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  CHECK_OK(gpushm_timeline_create(conn, "tl-ready", &opts, &ready));
  opts.mode = 0666;
  CHECK_OK(gpushm_timeline_create(conn, "tl-done", &opts, &done));
  CHECK_OK(gpushm_timeline_promise(ready, FRAMES));
  snprintf(ring_text, sizeof ring_text, "%d", RING);
  snprintf(frames_text, sizeof frames_text, "%u", FRAMES);
  snprintf(bytes_text, sizeof bytes_text, "%llu", (unsigned long long)bytes);
  consumer = spawn_read(&out, "timeline-ring", ring_text, frames_text, bytes_text, NULL);
  CHECK(fgets(line, sizeof line, out) && strcmp(line, "promised\n") == 0);
  for (unsigned k = 0; k < FRAMES; k++) {
    if (k >= RING) /* the consumer is done with frame k - RING: promised, queued at once */
      CHECK_OK(gpushm_timeline_wait_stream(done, s, k + 1 - RING, 0));
    /* every 50th frame is slow: the consumer must wait for it, not race it */
    launch_fill(s, cuda_test_dptr(bufs[k % RING]), bytes / 4, k + 1,
                k % 50 == 0 ? 2000000ull : 0);
    CHECK_OK(gpushm_timeline_signal_stream(ready, s, k + 1));
  }
  while (fgets(line, sizeof line, out))
    fputs(line, stdout);
  fclose(out);
  CHECK(child_status(consumer) == 0);
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  CHECK(gpushm_timeline_value(ready) == FRAMES && gpushm_timeline_value(done) == FRAMES);
  CHECK(gpushm_timeline_value_lost(ready, FRAMES) == 0);
  for (unsigned i = 0; i < RING; i++)
    CHECK_OK(gpushm_buffer_close_unlink(bufs[i]));
  CHECK_OK(gpushm_timeline_close_unlink(ready));
  CHECK_OK(gpushm_timeline_close_unlink(done));
  CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
}

/* The frame ring: 4 cuda-fd slots, a producer here and a consumer of another uid, every
 * wait on a stream (promised ahead), every frame verified on the GPU. */
static void test_frame_ring(gpushm_t *conn, uint64_t bytes)
{
  const unsigned FRAMES = sanitizer ? 40 : 1000;
  char frames_text[16], bytes_text[32], line[256];
  gpushm_create_opts_t opts;
  gpushm_ring_t *ring;
  CUstream s = new_stream();
  FILE *out;
  pid_t consumer;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.mode = 0644; /* read access is all a consumer needs */
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  CHECK_OK(gpushm_ring_create(conn, "frame-ring", 4, bytes, &opts, &ring));
  snprintf(frames_text, sizeof frames_text, "%u", FRAMES);
  snprintf(bytes_text, sizeof bytes_text, "%llu", (unsigned long long)bytes);
  consumer = spawn_read(&out, "frame-ring", "frame-ring", frames_text, bytes_text, NULL);
  CHECK(fgets(line, sizeof line, out) && strcmp(line, "attached\n") == 0);
  CHECK(gpushm_ring_consumers(ring) == 1);
  for (unsigned k = 0; k < FRAMES; k++) {
    gpushm_ring_frame_t f;
    CHECK_OK(gpushm_ring_acquire_slot_stream(ring, s, 0, &f)); /* promised: queued at once */
    CHECK(f.frame == k + 1);
    /* every 50th frame is slow: the consumer must wait for it, not race it */
    launch_fill(s, (CUdeviceptr)(uintptr_t)gpushm_ring_slot_ptr(ring, f.slot), bytes / 4, k + 1,
                k % 50 == 0 ? 2000000ull : 0);
    CHECK_OK(gpushm_ring_present_stream(ring, s, &f));
  }
  while (fgets(line, sizeof line, out))
    fputs(line, stdout);
  fclose(out);
  CHECK(child_status(consumer) == 0);
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  CHECK(gpushm_ring_presented(ring) == FRAMES);
  CHECK_OK(gpushm_ring_close_unlink(ring));
  CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
}

/* A timeline's promiser killed mid-kernel while another process's stream waits on the
 * GPU for a value it promised. */
static void test_timeline_dying(gpushm_t *conn)
{
  gpushm_create_opts_t opts;
  gpushm_timeline_t *tl;
  uint64_t broken = promises_broken();
  gpushm_sync_state_t st;
  char line[256];
  double killed, reaped, done;
  pid_t promiser, waiter;
  int status;
  FILE *out;

  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  CHECK_OK(gpushm_timeline_create(conn, "tl-dying", &opts, &tl));
  promiser = spawn("timeline-dying", "tl-dying", "5", NULL, NULL, NULL);
  for (killed = now_s(); gpushm_timeline_state(tl, &st) < 0 || st.counter < 1; usleep(1000))
    CHECK(now_s() - killed < 60);
  CHECK(gpushm_timeline_value(tl) == 0); /* signalled behind a kernel that spins */
  waiter = spawn_read(&out, "timeline-waiter", "tl-dying", "5", NULL, NULL);
  CHECK(fgets(line, sizeof line, out) && strcmp(line, "queued\n") == 0);
  usleep(300000); /* the wait is on the GPU, and holds */
  CHECK(waitpid(waiter, &status, WNOHANG) == 0);
  killed = now_s();
  CHECK(kill(promiser, SIGKILL) == 0);
  CHECK(waitpid(promiser, &status, 0) == promiser && WIFSIGNALED(status));
  reaped = now_s();
  CHECK(fgets(line, sizeof line, out) && sscanf(line, "done %lf", &done) == 1);
  fclose(out);
  test_log("timeline promiser SIGKILLed mid-kernel: the stream waiting on the GPU for a value "
           "it promised went on %.1f ms after the kill, %.1f ms after the process was reaped "
           "(its teardown took %.1f ms)", (done - killed) * 1e3, (done - reaped) * 1e3,
           (reaped - killed) * 1e3);
  CHECK(child_status(waiter) == 0); /* value 5 read as lost as it went on */
  CHECK(done - killed < 20);
  CHECK(promises_broken() == broken + 1);
  CHECK(gpushm_timeline_value(tl) == 5 && gpushm_timeline_value_lost(tl, 5) == 1);
  CHECK_OK(gpushm_timeline_close_unlink(tl));
}

static uint64_t fences_raised(void)
{
  gpushm_stats_t *st = daemon_stats(&d);
  uint64_t n = gpushm_stats_fences_raised(st);
  gpushm_stats_free(st);
  return n;
}

/* A producer killed while its release's kernel still runs: without the daemon's repair
 * the consumer's stream would wait on the fence for ever. */
static void test_dying_producer(gpushm_t *conn)
{
  const double bound_s = 20;
  gpushm_buffer_t *b = create_sync(conn, "dying", 64 * MiB, 0644);
  uint64_t seq = gpushm_buffer_release_seq(b) + 1, raised = fences_raised();
  char seq_text[16];
  pid_t producer, consumer, done = 0;
  int status = 0;
  double t0;

  CU_CHECK(CU_CALL(&drv, cuMemsetD32, cuda_test_dptr(b), 0, 16 * MiB));
  CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
  producer = spawn("dying-producer", "dying", NULL, NULL, NULL, NULL);
  for (t0 = now_s(); gpushm_buffer_release_seq(b) < seq; usleep(1000))
    CHECK(now_s() - t0 < 60);
  usleep(200000); /* the kernel under way */
  CHECK(kill(producer, SIGKILL) == 0);
  CHECK(waitpid(producer, &status, 0) == producer && WIFSIGNALED(status));
  t0 = now_s();
  snprintf(seq_text, sizeof seq_text, "%llu", (unsigned long long)seq);
  consumer = spawn("check", "dying", seq_text, "99", "acquire", NULL);
  while (now_s() - t0 < bound_s && (done = waitpid(consumer, &status, WNOHANG)) == 0)
    usleep(10000);
  if (done != consumer) {
    kill(consumer, SIGKILL);
    waitpid(consumer, &status, 0);
    fprintf(stderr, "the consumer of a dead producer's release still waits after %.0f s\n",
            bound_s);
    exit(1);
  }
  /* 3: it saw words the killed kernel never wrote, as it should */
  CHECK(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3));
  test_log("producer killed with its release queued: the consumer acquired and read in "
           "%.2f s (%s)", now_s() - t0,
           WEXITSTATUS(status) == 3 ? "the data as the dead kernel left it" : "data whole");
  CHECK(fences_raised() == raised + 1);
  CHECK_OK(gpushm_buffer_acquire(b, NULL, seq, 0));
  CHECK_OK(gpushm_unlink(conn, "dying"));
  CHECK_OK(gpushm_buffer_close(b));
}

static void test_event_open_cost(gpushm_t *conn)
{
  enum { N = 40 };
  gpushm_event_t *evs[N];
  CUstream s = new_stream();
  char n_text[8];

  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "ev-%d", i);
    CHECK_OK(gpushm_event_create(conn, name, NULL, &evs[i]));
  }
  launch_fill(s, 0, 0, 0, 1000000ull);
  CHECK_OK(gpushm_event_record(evs[0], s));
  snprintf(n_text, sizeof n_text, "%d", N);
  CHECK(child_status(spawn("event-open", n_text, NULL, NULL, NULL, NULL)) == 0);
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "ev-%d", i);
    CHECK_OK(gpushm_unlink(conn, name));
    CHECK_OK(gpushm_event_close(evs[i]));
  }
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
}

static void test_other_uid(gpushm_t *conn)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *mem, *sync, *fd_sync;
  gpushm_event_t *ev;

  if (geteuid() != 0 || !getpwnam("nobody")) {
    test_log("not root: cross-uid behaviour not examined");
    return;
  }
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  opts.mode = 0666;
  CHECK_OK(gpushm_buffer_create(conn, "shared-memory", 2 * MiB, &opts, &mem));
  opts.backend = 0;
  CHECK_OK(gpushm_event_create(conn, "shared-event", &opts, &ev));
  sync = create_sync(conn, "shared-sync", 2 * MiB, 0666);
  sync_backend = GPUSHM_BACKEND_CUDA_FD;
  fd_sync = create_sync(conn, "shared-fd-sync", 2 * MiB, 0666);
  sync_backend = GPUSHM_BACKEND_CUDA_IPC;
  CHECK_OK(gpushm_buffer_release(fd_sync, NULL, NULL));
  CHECK(child_status(spawn("other-uid", NULL, NULL, NULL, NULL, NULL)) == 0);
  CHECK(gpushm_buffer_release_seq(fd_sync) == 2); /* nobody handed it back */
  CHECK_OK(gpushm_buffer_acquire(fd_sync, NULL, 2, 1000));
  CHECK_OK(gpushm_unlink(conn, "shared-fd-sync"));
  CHECK_OK(gpushm_buffer_close(fd_sync));
  CHECK_OK(gpushm_unlink(conn, "shared-memory"));
  CHECK_OK(gpushm_unlink(conn, "shared-event"));
  CHECK_OK(gpushm_unlink(conn, "shared-sync"));
  CHECK_OK(gpushm_buffer_close(mem));
  CHECK_OK(gpushm_event_close(ev));
  CHECK_OK(gpushm_buffer_close(sync));
}

int main(int argc, char **argv)
{
  gpushm_t *conn;
  gpushm_stats_t *st;

  if (argc > 1) {
    snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
    if (strcmp(argv[1], "check") == 0 && (argc == 6 || argc == 7))
      return role_check(argv);
    if (strcmp(argv[1], "ring") == 0)
      return role_ring(argv);
    if (strcmp(argv[1], "event-open") == 0)
      return role_event_open(argv);
    if (strcmp(argv[1], "other-uid") == 0)
      return role_other_uid(argv);
    if (strcmp(argv[1], "dying-producer") == 0 && argc == 3)
      return role_dying_producer(argv);
    if (strcmp(argv[1], "dying-promiser") == 0 && argc == 4)
      return role_dying_promiser(argv);
    if (strcmp(argv[1], "promise-waiter") == 0 && argc == 4)
      return role_promise_waiter(argv);
    if (strcmp(argv[1], "timeline-ring") == 0)
      return role_timeline_ring(argv);
    if (strcmp(argv[1], "frame-ring") == 0 && argc == 5)
      return role_frame_ring(argv);
    if (strcmp(argv[1], "timeline-dying") == 0 && argc == 4)
      return role_timeline_dying(argv);
    if (strcmp(argv[1], "timeline-waiter") == 0 && argc == 4)
      return role_timeline_waiter(argv);
    return 2;
  }
  CHECK(readlink("/proc/self/exe", self, sizeof self - 1) > 0);
  sanitizer = getenv("GPUSHM_TEST_SANITIZER") != NULL;
  cuda_test_parent_outside_mps();
  cuda_setup(1);
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);

  test_ordering(conn);
  test_ring(conn, 1 * MiB, false);
  test_ring(conn, 64 * MiB, false);
  sync_backend = GPUSHM_BACKEND_CUDA_FD; /* the same through memory fences */
  test_ordering(conn);
  test_ring(conn, 1 * MiB, false);
  test_ring(conn, 64 * MiB, false);
  test_ring(conn, 1 * MiB, true);
  test_ring(conn, 64 * MiB, true);
  test_dying_producer(conn);
  test_dying_promiser(conn);
  test_timeline_ring(conn, 1 * MiB);
  test_timeline_ring(conn, 64 * MiB);
  test_frame_ring(conn, 1 * MiB);
  test_frame_ring(conn, 64 * MiB);
  test_timeline_dying(conn);
  sync_backend = GPUSHM_BACKEND_CUDA_IPC;
  test_ring(conn, 1 * MiB, true);
  test_dying_producer(conn);
  test_dying_promiser(conn);
  test_event_open_cost(conn);
  test_other_uid(conn);

  st = daemon_stats(&d);
  CHECK(gpushm_stats_buffers(st) == 0 && gpushm_stats_bytes_allocated(st) == 0);
  gpushm_stats_free(st);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}
