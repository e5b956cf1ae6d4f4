/* SPDX-License-Identifier: MIT */
/* A producer -> consumer ring over sync buffers: the memory fences of cuda-fd and of
 * cuda-ipc memory (since 0.7.1, where IPC events were: a releaser's death left an event
 * incomplete for ever), the same work in the same run, alternating, 5 runs each; and
 * the floor, the same ring with raw fences (each side numbers the frames itself and queues
 * cuStreamWriteValue64/cuStreamWaitValue64 on a word past each slot's data, never
 * waiting on the CPU: what the driver alone costs).
 * 4 slots of 1 MiB; per frame the producer fills its slot (cuMemsetD32Async) and
 * releases it; the consumer, another process, acquires it, copies one word out
 * (cuMemcpyDtoDAsync into a results array) and releases it back.  Neither side ever
 * waits for the GPU: only for published release numbers.  Every frame's word is
 * checked at the end.  Prints frames/s per backend (median of 5, the two processes pinned
 * to cores of their own) and each one's ratio to the raw floor; scripts/gpu-host-test
 * runs it without and with MPS.  With two GPUs,
 * the cuda-fd ring and its raw floor run again with the consumer on device 1 (slots of
 * device 0 mapped for it).
 * A third gpushm row rings on promises (0.8): each slot a cuda-fd sync buffer whose
 * values the producer promised, and a small one whose values the consumer promised to
 * hand slots back with, both released with caller-chosen values: every wait goes to the
 * GPU at once, as the raw ring's do, where a numbered acquire first waits on the CPU for
 * the release to be published.
 * A fourth rings on timelines (0.8): plain cuda-fd slots, and two timelines, "ready"
 * (the producer signals frame k as k + 1, promised whole) and "done" (the consumer the
 * same, promised whole): the waits go to the GPU at once, on a word of host memory.
 * A fifth is a frame ring (0.8, gpushm_ring_*): the same 4 slots as one ring, the
 * consumer attached (its own done timeline), acquires and releases on the streams,
 * promised ahead by the library: what issue 38 asks to be >= 0.95 x the raw floor.
 * Not part of `make check` (no timing assertions there). */
#include "config.h"
#include "cuda-test.h"

#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 4
#define SLOT_BYTES (1u << 20)
/* Raw rings: each slot's fence sits past its data. */
#define RAW_FENCE_OFFSET SLOT_BYTES
#define RAW ((gpushm_backend_t)99)
/* The ring on promises: cuda-fd slots, and "done" buffers beside them. */
#define PROMISED ((gpushm_backend_t)98)
/* The ring on timelines: plain cuda-fd slots, a "ready" and a "done" timeline. */
#define TIMELINED ((gpushm_backend_t)97)
/* The frame ring (gpushm_ring_*). */
#define RINGED ((gpushm_backend_t)96)
/* Under MPS single runs scatter in two modes (88k and 113-131k frames/s for the same
 * ring, 2026-11-29): five, pinned (pin()), where three unpinned gave a coin's median. */
#define RUNS 5

static struct test_daemon d;
static char self[4096];

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void slot_name(char *name, size_t len, gpushm_backend_t backend, unsigned i)
{
  snprintf(name, len, "ring-%d-%u", (int)backend, i);
}

static void done_name(char *name, size_t len, unsigned i)
{
  snprintf(name, len, "ring-done-%u", i);
}

/* The raw ring's acquire and release of slot b: the fence reaches 2u+1 once frame
 * use u is written, 2u+2 once it is read. */
static void raw_wait(gpushm_buffer_t *b, CUstream s, uint64_t value)
{
  CU_CHECK(CU_CALL(&drv, cuStreamWaitValue64, s, cuda_test_dptr(b) + RAW_FENCE_OFFSET, value,
                   CU_STREAM_WAIT_VALUE_GEQ));
}

static void raw_write(gpushm_buffer_t *b, CUstream s, uint64_t value)
{
  CU_CHECK(CU_CALL(&drv, cuStreamWriteValue64, s, cuda_test_dptr(b) + RAW_FENCE_OFFSET, value,
                   CU_STREAM_WRITE_VALUE_DEFAULT));
}


/* Consumer: argv: self consumer BACKEND FRAMES RESULT_FD DEVICE.  Works on DEVICE (the
 * slots mapped for it); writes its frames/s (a double) to RESULT_FD; exits 3 if a
 * frame's word was wrong. */
/* The producer on one core, the consumer on another, the same for every ring: the
 * scheduler moving either (onto the other's core, or the MPS server's) is noise the
 * floor and the rings must not get in different amounts.  Hosts of fewer than 4 cores:
 * unpinned. */
static void pin(int role)
{
  cpu_set_t set;
  long n = sysconf(_SC_NPROCESSORS_ONLN);

  if (n < 4)
    return;
  CPU_ZERO(&set);
  CPU_SET((int)(n / 2) + role, &set);
  (void)sched_setaffinity(0, sizeof set, &set);
}

static int consumer(char **argv)
{
  gpushm_backend_t backend = (gpushm_backend_t)atoi(argv[2]);
  bool raw = backend == RAW, promised = backend == PROMISED, timelined = backend == TIMELINED;
  bool ringed = backend == RINGED;
  gpushm_buffer_t *done[SLOTS] = { NULL };
  gpushm_timeline_t *ready_tl = NULL, *done_tl = NULL;
  gpushm_ring_t *ring = NULL;
  unsigned frames = (unsigned)atoi(argv[3]), bad = 0;
  int result_fd = atoi(argv[4]), device = atoi(argv[5]);
  gpushm_buffer_t *slots[SLOTS];
  uint32_t *words = calloc(frames, sizeof *words);
  CUdeviceptr results;
  gpushm_t *conn;
  CUstream s;
  double t0 = 0, rate;

  pin(1);
  cuda_test_setup(1);
  if (device != 0) {
    CUcontext ctx;
    CUdevice dev;
    CU_CHECK(CU_CALL(&drv, cuDeviceGet, &dev, device));
    CU_CHECK(CU_CALL(&drv, cuDevicePrimaryCtxRetain, &ctx, dev));
    CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx));
  }
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &results, frames * sizeof *words));
  snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
  conn = daemon_connect(&d);
  for (unsigned i = 0; i < SLOTS && !ringed; i++) {
    char name[64];
    slot_name(name, sizeof name, backend, i);
    CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_MAP_DEVICE(device), &slots[i]));
    if (promised) {
      done_name(name, sizeof name, i);
      CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_MAP_DEVICE(device), &done[i]));
      CHECK_OK(gpushm_buffer_promise(done[i], (frames + SLOTS - 1) / SLOTS));
    }
  }
  if (timelined) {
    CHECK_OK(gpushm_timeline_open(conn, "bench-ready", GPUSHM_OPEN_READONLY, &ready_tl));
    CHECK_OK(gpushm_timeline_open(conn, "bench-done", 0, &done_tl));
    CHECK_OK(gpushm_timeline_promise(done_tl, frames));
  }
  if (ringed) /* attached, its done timeline promised ahead */
    CHECK_OK(gpushm_ring_open(conn, "bench-ring", GPUSHM_MAP_DEVICE(device), &ring));
  if (promised || timelined || ringed) /* the producer waits for these before its first frame */
    CHECK(write(result_fd, &(double){ 0 }, sizeof(double)) == sizeof(double));
  for (unsigned k = 0; k < frames; k++) {
    gpushm_buffer_t *b = ringed ? NULL : slots[k % SLOTS];
    CUdeviceptr src = ringed ? (CUdeviceptr)(uintptr_t)gpushm_ring_slot_ptr(ring, k % SLOTS)
                             : cuda_test_dptr(b);
    gpushm_ring_frame_t f;
    uint64_t use = k / SLOTS;
    if (ringed)
      CHECK_OK(gpushm_ring_acquire_frame_stream(ring, s, 0, 0, &f)); /* promised: at once */
    else if (raw)
      raw_wait(b, s, 2 * use + 1);
    else if (promised)
      CHECK_OK(gpushm_buffer_acquire_value(b, s, use + 1, 0)); /* promised: queued at once */
    else if (timelined)
      CHECK_OK(gpushm_timeline_wait_stream(ready_tl, s, k + 1, 0)); /* promised: at once */
    else
      CHECK_OK(gpushm_buffer_acquire(b, s, 2 * use + 1, 30000));
    if (k == 0) {
      if (raw || promised || timelined || ringed) /* the producer is up with its first frame */
        CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
      t0 = now_s(); /* from the first frame on: the producer is up */
    }
    CU_CHECK(CU_CALL(&drv, cuMemcpyDtoDAsync, results + k * sizeof *words, src, sizeof *words,
                     s));
    if (ringed)
      CHECK_OK(gpushm_ring_release_stream(ring, s, &f));
    else if (raw)
      raw_write(b, s, 2 * use + 2);
    else if (promised)
      CHECK_OK(gpushm_buffer_release_value(done[k % SLOTS], s, use + 1));
    else if (timelined)
      CHECK_OK(gpushm_timeline_signal_stream(done_tl, s, k + 1));
    else
      CHECK_OK(gpushm_buffer_release(b, s, NULL));
  }
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  rate = (frames - 1) / (now_s() - t0);
  if (timelined) {
    CHECK_OK(gpushm_timeline_close(ready_tl));
    CHECK_OK(gpushm_timeline_close(done_tl));
  }
  if (ringed)
    CHECK_OK(gpushm_ring_close(ring));
  CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, words, results, frames * sizeof *words));
  for (unsigned k = 0; k < frames; k++)
    bad += words[k] != k + 1;
  CHECK(write(result_fd, &rate, sizeof rate) == sizeof rate);
  for (unsigned i = 0; i < SLOTS && !ringed; i++) {
    CHECK_OK(gpushm_buffer_close(slots[i]));
    if (done[i])
      CHECK_OK(gpushm_buffer_close(done[i]));
  }
  gpushm_disconnect(conn);
  if (bad)
    fprintf(stderr, "bench: %u of %u frames read a wrong word\n", bad, frames);
  return bad ? 3 : 0;
}

/* One run of the ring over backend's sync buffers (of device 0), the consumer on
 * consumer_device; returns the consumer's frames/s. */
static double run_ring(gpushm_t *conn, gpushm_backend_t backend, unsigned frames,
                       gpushm_sync_method_t expect, int consumer_device)
{
  bool raw = backend == RAW, promised = backend == PROMISED, timelined = backend == TIMELINED;
  bool ringed = backend == RINGED;
  const uint64_t uses = (frames + SLOTS - 1) / SLOTS;
  gpushm_buffer_t *slots[SLOTS] = { NULL }, *done[SLOTS] = { NULL };
  gpushm_timeline_t *ready_tl = NULL, *done_tl = NULL;
  gpushm_ring_t *ring = NULL;
  gpushm_create_opts_t opts;
  char frames_text[16], backend_text[8], fd_text[8], device_text[8];
  int pipe_fds[2];
  double rate = 0;
  CUstream s;
  pid_t pid;

  gpushm_create_opts_init(&opts);
  opts.backend = raw || promised || timelined ? GPUSHM_BACKEND_CUDA_FD : backend;
  opts.flags = raw || timelined ? 0 : GPUSHM_CREATE_SYNC;
  if (ringed) {
    opts.flags = 0;
    opts.backend = GPUSHM_BACKEND_CUDA_FD;
    opts.lifetime = GPUSHM_LIFETIME_SESSION;
    CHECK_OK(gpushm_ring_create(conn, "bench-ring", SLOTS, SLOT_BYTES, &opts, &ring));
  }
  for (unsigned i = 0; i < SLOTS && !ringed; i++) {
    char name[64];
    slot_name(name, sizeof name, backend, i);
    CHECK_OK(gpushm_buffer_create(conn, name, raw ? SLOT_BYTES + 8 : SLOT_BYTES, &opts,
                                  &slots[i]));
    CHECK(gpushm_buffer_sync_method(slots[i], NULL) == expect);
    if (promised) {
      CHECK_OK(gpushm_buffer_promise(slots[i], uses));
      done_name(name, sizeof name, i);
      CHECK_OK(gpushm_buffer_create(conn, name, 8, &opts, &done[i]));
    }
  }
  if (timelined) {
    gpushm_create_opts_t t_opts;
    gpushm_create_opts_init(&t_opts);
    t_opts.mode = 0644;
    CHECK_OK(gpushm_timeline_create(conn, "bench-ready", &t_opts, &ready_tl));
    CHECK_OK(gpushm_timeline_create(conn, "bench-done", &t_opts, &done_tl));
    CHECK_OK(gpushm_timeline_promise(ready_tl, frames));
  }
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  CHECK(pipe(pipe_fds) == 0);
  snprintf(frames_text, sizeof frames_text, "%u", frames);
  snprintf(backend_text, sizeof backend_text, "%d", (int)backend);
  snprintf(fd_text, sizeof fd_text, "%d", pipe_fds[1]);
  snprintf(device_text, sizeof device_text, "%d", consumer_device);
  fflush(stdout);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("GPUSHM_SOCKET", d.socket, 1);
    execl(self, self, "consumer", backend_text, frames_text, fd_text, device_text, (char *)NULL);
    _exit(127);
  }
  close(pipe_fds[1]);
  if (promised || timelined || ringed) /* the consumer's promises are made */
    CHECK(read(pipe_fds[0], &rate, sizeof rate) == sizeof rate);
  for (unsigned k = 0; k < frames; k++) {
    gpushm_buffer_t *b = slots[k % SLOTS];
    CUdeviceptr dst = ringed ? (CUdeviceptr)(uintptr_t)gpushm_ring_slot_ptr(ring, k % SLOTS)
                             : cuda_test_dptr(b);
    gpushm_ring_frame_t f;
    uint64_t use = k / SLOTS;
    if (ringed)
      CHECK_OK(gpushm_ring_acquire_slot_stream(ring, s, 0, &f)); /* handed back: promised */
    else if (use > 0 && raw)
      raw_wait(b, s, 2 * use);
    else if (use > 0 && promised)
      CHECK_OK(gpushm_buffer_acquire_value(done[k % SLOTS], s, use, 0)); /* handed back */
    else if (use > 0 && timelined)
      CHECK_OK(gpushm_timeline_wait_stream(done_tl, s, k + 1 - SLOTS, 0)); /* handed back */
    else if (use > 0)
      CHECK_OK(gpushm_buffer_acquire(b, s, 2 * use, 30000)); /* handed back */
    CU_CHECK(CU_CALL(&drv, cuMemsetD32Async, dst, k + 1, SLOT_BYTES / 4, s));
    if (ringed)
      CHECK_OK(gpushm_ring_present_stream(ring, s, &f));
    else if (raw)
      raw_write(b, s, 2 * use + 1);
    else if (promised)
      CHECK_OK(gpushm_buffer_release_value(b, s, use + 1));
    else if (timelined)
      CHECK_OK(gpushm_timeline_signal_stream(ready_tl, s, k + 1));
    else
      CHECK_OK(gpushm_buffer_release(b, s, NULL));
  }
  CHECK(read(pipe_fds[0], &rate, sizeof rate) == sizeof rate);
  close(pipe_fds[0]);
  check_child(pid);
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
  if (ringed)
    CHECK_OK(gpushm_ring_close_unlink(ring));
  for (unsigned i = 0; i < SLOTS && !ringed; i++) {
    char name[64];
    slot_name(name, sizeof name, backend, i);
    CHECK_OK(gpushm_unlink(conn, name));
    CHECK_OK(gpushm_buffer_close(slots[i]));
    if (done[i])
      CHECK_OK(gpushm_buffer_close_unlink(done[i]));
  }
  if (timelined) {
    CHECK_OK(gpushm_timeline_close_unlink(ready_tl));
    CHECK_OK(gpushm_timeline_close_unlink(done_tl));
  }
  return rate;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v)
{
  double sorted[RUNS];

  memcpy(sorted, v, sizeof sorted);
  qsort(sorted, RUNS, sizeof sorted[0], cmp_double);
  return sorted[RUNS / 2];
}

/* "bench:   <what> <median> frames/s   (runs ...)" */
static void print_row(const char *what, double med, const double *v)
{
  printf("bench:   %-22s %8.0f frames/s   (runs", what, med);
  for (int r = 0; r < RUNS; r++)
    printf(" %.0f", v[r]);
  printf(")\n");
}

int main(int argc, char **argv)
{
  const char *mps = getenv("CUDA_MPS_PIPE_DIRECTORY");
  unsigned frames = argc > 1 && strcmp(argv[1], "consumer") ? (unsigned)atoi(argv[1]) : 20000;
  double fence[RUNS], ipc[RUNS], prom[RUNS], tl[RUNS], rg[RUNS], floor_[RUNS], f, e, p, t, g, raw;
  gpushm_t *conn;
  int count = 0;

  if (argc > 1 && strcmp(argv[1], "consumer") == 0)
    return consumer(argv);
  CHECK(readlink("/proc/self/exe", self, sizeof self - 1) > 0);
  cuda_test_setup(1);
  daemon_start(&d, NULL);
  pin(0); /* after gpushmd's start: it runs wherever it likes */
  conn = daemon_connect(&d);
  for (int r = 0; r < RUNS; r++) {
    ipc[r] = run_ring(conn, GPUSHM_BACKEND_CUDA_IPC, frames, GPUSHM_SYNC_GPU_FENCE, 0);
    fence[r] = run_ring(conn, GPUSHM_BACKEND_CUDA_FD, frames, GPUSHM_SYNC_GPU_FENCE, 0);
    prom[r] = run_ring(conn, PROMISED, frames, GPUSHM_SYNC_GPU_FENCE, 0);
    tl[r] = run_ring(conn, TIMELINED, frames, GPUSHM_SYNC_NONE, 0);
    rg[r] = run_ring(conn, RINGED, frames, GPUSHM_SYNC_NONE, 0);
    floor_[r] = run_ring(conn, RAW, frames, GPUSHM_SYNC_NONE, 0);
  }
  f = median(fence);
  e = median(ipc);
  p = median(prom);
  t = median(tl);
  g = median(rg);
  raw = median(floor_);
  printf("bench: sync ring %s, %u slots x 1 MiB, %u frames, median of %d:\n",
         mps ? "under MPS" : "without MPS", SLOTS, frames, RUNS);
  print_row("fences (cuda-fd)", f, fence);
  print_row("fences (cuda-ipc)", e, ipc);
  print_row("promises (cuda-fd)", p, prom);
  print_row("timelines", t, tl);
  print_row("frame ring", g, rg);
  print_row("raw fences (floor)", raw, floor_);
  printf("bench:   ratio fences (cuda-fd) / raw floor %.3f   (target %s)\n", f / raw,
         mps ? ">= 0.9, and >= 130000 frames/s" : ">= 0.9");
  printf("bench:   ratio fences (cuda-ipc) / raw floor %.3f   (target >= 0.9)\n", e / raw);
  printf("bench:   ratio promises (cuda-fd) / raw floor %.3f   (target >= 0.95)\n", p / raw);
  printf("bench:   ratio timelines / raw floor %.3f   (target >= 0.95)\n", t / raw);
  printf("bench:   ratio frame ring / raw floor %.3f   (target >= 0.95)\n", g / raw);
  CU_CHECK(CU_CALL(&drv, cuDeviceGetCount, &count));
  if (count >= 2) {
    for (int r = 0; r < RUNS; r++) {
      fence[r] = run_ring(conn, GPUSHM_BACKEND_CUDA_FD, frames, GPUSHM_SYNC_GPU_FENCE, 1);
      floor_[r] = run_ring(conn, RAW, frames, GPUSHM_SYNC_NONE, 1);
    }
    f = median(fence);
    raw = median(floor_);
    printf("bench: sync ring across GPUs %s, producer on device 0, consumer on device 1:\n",
           mps ? "under MPS" : "without MPS");
    print_row("fences (cuda-fd)", f, fence);
    print_row("raw fences (floor)", raw, floor_);
    printf("bench:   ratio fences / raw floor %.3f\n", f / raw);
  } else {
    printf("bench: sync ring across GPUs: one GPU here (it needs two)\n");
  }
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}
