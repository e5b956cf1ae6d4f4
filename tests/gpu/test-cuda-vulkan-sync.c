/* SPDX-License-Identifier: MIT */
/* Timelines across CUDA and Vulkan on a real GPU, through their semaphore planes
 * (docs/sync.md#semaphore-planes): each side waits on its own GPU, no CPU wait per frame.
 *  - a ring: a CUDA producer (root) fills slot (v - 1) % SLOTS with kernels, some slowed
 *    by 2 ms, and signals "ready" v on its stream; a Vulkan consumer (uid 65534, the
 *    ready timeline open read-only, its plane given to readers) submits, for every v at
 *    once, a copy of the slot's first and last words that waits for ready v on the queue
 *    and signals its own "done" v, which the producer's stream waits for before it
 *    refills the slot.  Every frame's words checked;
 *  - dead signallers: a CUDA producer that promised ready values and is SIGKILLed with a
 *    60 s kernel queued ahead of its next signal: the Vulkan consumer's queued wait
 *    ends, its fence signalled, and the value reads lost; a Vulkan consumer that
 *    promised done values and is SIGKILLed with a submission queued behind a semaphore
 *    nobody signals: the producer's CUDA stream, waiting for done on the GPU, goes on.
 *    How long after the kill and after the reap, printed;
 *  - the round trip CUDA -> Vulkan -> CUDA on two timelines, each side waiting on its GPU
 *    or on its CPU, beside the same trip on the bare semaphores (the floor): p50, p99 and
 *    max printed (1000 rounds each, GPUSHM_RT_ROUNDS; no figure asserted: 3000 submissions
 *    queued ahead at once are what the NVIDIA driver took, 6000 it refused).
 *  - GL (GL_EXT_semaphore_fd, GL_NV_timeline_semaphore; gpushm_gl_import_timeline()): a GL
 *    consumer (uid 65534) queues a wait for a timeline value and a compute shader reading
 *    a frame before the CUDA producer starts writing it (a kernel 300 ms late): every
 *    word right only if GL waited on the GPU; and a GL wait for a promised value whose
 *    CUDA producer is SIGKILLed ends (how long after the kill, printed).
 * Skips (77) without a GPU; with one, a Vulkan driver without external semaphores fails. */
#define _GNU_SOURCE
#include "config.h"
#include "cuda-vk-roles.h"
#include "gl-verify.h"

#include <GL/glext.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 4
#define SLOT_BYTES (1u << 20)
#define FRAMES 600

static struct test_daemon d;
static char self[4096];

static void slow_fill(CUdeviceptr p, uint32_t seed, unsigned long long delay_ns, CUstream s)
{
  unsigned long long n = SLOT_BYTES / 4;
  void *args[] = { &p, &n, &seed, &delay_ns };
  CU_CHECK(CU_CALL(&drv, cuLaunchKernel, roles_kernel("slow_fill"), 64, 1, 1, 256, 1, 1, 0, s, args,
                   NULL));
}

/* A plane for tl minted in this process (a CUDA producer with a Vulkan device for just
 * that), given to readers. */
static void mint_for_readers(gpushm_timeline_t *tl)
{
  gpushm_vk_timeline_t vt;
  struct vkc c;

  roles_open_vk(&c, true);
  if (gpushm_vk_import_timeline(&c.gpushm, tl, GPUSHM_SEMAPHORE_TO_READERS, &vt) < 0) {
    fprintf(stderr, "minting '%s': %s\n", gpushm_timeline_name(tl), c.gpushm.error);
    exit(1);
  }
  gpushm_vk_destroy_timeline(&c.gpushm, &vt);
  vkc_close(&c);
}

static void import_timeline(struct vkc *c, gpushm_timeline_t *tl, gpushm_vk_timeline_t *vt)
{
  if (gpushm_vk_import_timeline(&c->gpushm, tl, 0, vt) < 0) {
    fprintf(stderr, "importing '%s': %s\n", gpushm_timeline_name(tl), c->gpushm.error);
    exit(1);
  }
}

/* ---- the ring ---------------------------------------------------------------------- */

static void ring_producer(const char *name)
{
  gpushm_t *conn = roles_connect("cuda-producer");
  gpushm_create_opts_t opts;
  gpushm_timeline_t *ready, *done;
  gpushm_buffer_t *frames;
  char n[128];
  CUstream s;
  double t0;

  cuda_test_setup(0);
  snprintf(n, sizeof n, "%s-ready", name);
  ready = roles_create_timeline(conn, n);
  mint_for_readers(ready);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.mode = 0644;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  snprintf(n, sizeof n, "%s-frames", name);
  CHECK_OK(gpushm_buffer_create(conn, n, SLOTS * SLOT_BYTES, &opts, &frames));
  CHECK_OK(gpushm_timeline_promise(ready, FRAMES));
  snprintf(n, sizeof n, "%s-done", name);
  done = roles_open_timeline(conn, n, GPUSHM_OPEN_READONLY);
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  t0 = roles_now_ms();
  for (uint64_t v = 1; v <= FRAMES; v++) {
    if (v > SLOTS)
      CHECK_OK(gpushm_timeline_wait_stream(done, s, v - SLOTS, 20000));
    slow_fill(cuda_test_dptr(frames) + (v - 1) % SLOTS * SLOT_BYTES, (uint32_t)v,
              v % 50 == 0 ? 2000000ull : 0, s);
    CHECK_OK(gpushm_timeline_signal_stream(ready, s, v));
  }
  CHECK_OK(gpushm_timeline_wait(done, FRAMES, 20000));
  printf("ring: %d frames of %u KiB in %.1f ms, %.0f frames/s\n", FRAMES, SLOT_BYTES >> 10,
         roles_now_ms() - t0, FRAMES / ((roles_now_ms() - t0) / 1e3));
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  CHECK_OK(gpushm_buffer_close(frames));
  CHECK_OK(gpushm_timeline_close(done));
  CHECK_OK(gpushm_timeline_close(ready));
  gpushm_disconnect(conn);
}

static void ring_consumer(const char *name)
{
  gpushm_t *conn = roles_connect("vk-consumer");
  gpushm_timeline_t *ready, *done;
  gpushm_vk_timeline_t vready, vdone;
  gpushm_vk_buffer_t vb;
  gpushm_buffer_t *frames;
  struct vkc_buffer words;
  struct vkc c;
  VkCommandBuffer *cbs = calloc(FRAMES + 1, sizeof *cbs);
  uint32_t wrong = 0;
  char n[128];

  CHECK(cbs != NULL);
  roles_open_vk(&c, true);
  snprintf(n, sizeof n, "%s-done", name);
  done = roles_create_timeline(conn, n);
  import_timeline(&c, done, &vdone); /* mints: read-write, this process's */
  CHECK_OK(gpushm_timeline_promise(done, FRAMES));
  /* the producer's last object: its ready timeline and that one's plane come first */
  snprintf(n, sizeof n, "%s-frames", name);
  {
    gpushm_open_opts_t o;
    int r = GPUSHM_E_NOENT;

    gpushm_open_opts_init(&o);
    o.map_device = GPUSHM_DEVICE_NONE;
    o.flags = GPUSHM_OPEN_READONLY;
    for (int i = 0; i < 1000 && (r = gpushm_buffer_open_ex(conn, n, 0, &o, &frames)) < 0; i++)
      usleep(10000);
    CHECK_OK(r);
  }
  snprintf(n, sizeof n, "%s-ready", name);
  ready = roles_open_timeline(conn, n, GPUSHM_OPEN_READONLY);
  import_timeline(&c, ready, &vready); /* the producer gave it to readers */
  CHECK(vready.fence_buffer == VK_NULL_HANDLE);
  if (gpushm_vk_import_buffer(&c.gpushm, frames, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &vb) < 0) {
    fprintf(stderr, "import: %s\n", c.gpushm.error);
    exit(1);
  }
  CHECK(vkc_host_buffer(&c, (FRAMES + 1) * 8, &words) == 0);
  /* every frame queued at once: the queue waits for each on the GPU */
  for (uint64_t v = 1; v <= FRAMES; v++) {
    VkDeviceSize slot = (v - 1) % SLOTS * SLOT_BYTES;
    VkBufferCopy copies[2] = { { slot, v * 8, 4 }, { slot + SLOT_BYTES - 4, v * 8 + 4, 4 } };
    CHECK_OK(gpushm_timeline_wait_signalled(ready, v, 20000));
    cbs[v] = vkc_begin(&c);
    vkCmdCopyBuffer(cbs[v], vb.buffer, words.buffer, 2, copies);
    CHECK(gpushm_vk_timeline_record_signal(&c.gpushm, &vdone, cbs[v], v) == 0);
    CHECK(vkEndCommandBuffer(cbs[v]) == VK_SUCCESS);
    roles_submit(&c, cbs[v], vready.semaphore, v, vdone.semaphore, v, VK_NULL_HANDLE);
    CHECK_OK(gpushm_timeline_signal_external(done, v));
  }
  CHECK(vkQueueWaitIdle(c.queue) == VK_SUCCESS);
  for (uint64_t v = 1; v <= FRAMES; v++) {
    const uint32_t *w = (const uint32_t *)words.map + v * 2;
    if (w[0] != cuda_test_word(0, (uint32_t)v) ||
        w[1] != cuda_test_word(SLOT_BYTES / 4 - 1, (uint32_t)v))
      wrong++;
  }
  printf("ring: %d frames read by the Vulkan queue, %u wrong\n", FRAMES, wrong);
  CHECK(wrong == 0);
  CHECK(gpushm_timeline_value(done) == FRAMES);
  vkFreeCommandBuffers(c.device, c.pool, FRAMES, cbs + 1);
  free(cbs);
  vkc_free_buffer(&c, &words);
  gpushm_vk_destroy_buffer(&c.gpushm, &vb);
  gpushm_vk_destroy_timeline(&c.gpushm, &vready);
  gpushm_vk_destroy_timeline(&c.gpushm, &vdone);
  CHECK_OK(gpushm_buffer_close(frames));
  CHECK_OK(gpushm_timeline_close(ready));
  CHECK_OK(gpushm_timeline_close(done));
  vkc_close(&c);
  gpushm_disconnect(conn);
}

/* ---- dead signallers --------------------------------------------------------------- */

/* Signals ready 1, promises 100, queues a 60 s kernel and ready 2 behind it. */
static void dying_producer(const char *name)
{
  gpushm_t *conn = roles_connect("dying-cuda-producer");
  gpushm_timeline_t *ready;
  gpushm_buffer_t *scratch;
  gpushm_create_opts_t opts;
  char n[128];
  CUstream s;

  cuda_test_setup(0);
  snprintf(n, sizeof n, "%s-ready", name);
  ready = roles_create_timeline(conn, n);
  mint_for_readers(ready);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  CHECK_OK(gpushm_buffer_create(conn, "scratch-dying", SLOT_BYTES, &opts, &scratch));
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  CHECK_OK(gpushm_timeline_signal(ready, 1));
  CHECK_OK(gpushm_timeline_promise(ready, 100));
  slow_fill(cuda_test_dptr(scratch), 1, 60000000000ull, s);
  CHECK_OK(gpushm_timeline_signal_stream(ready, s, 2));
  roles_report("p");
  pause();
}

/* Queues a wait for ready 3 (promised, never signalled) with a fence, says so, and
 * reports when the fence came. */
static void waiting_consumer(const char *name)
{
  gpushm_t *conn = roles_connect("waiting-vk-consumer");
  gpushm_timeline_t *ready;
  gpushm_vk_timeline_t vready;
  VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
  VkFence fence;
  struct vkc c;
  char n[128], line[64];
  int lost;

  roles_open_vk(&c, true);
  snprintf(n, sizeof n, "%s-ready", name);
  ready = roles_open_timeline(conn, n, GPUSHM_OPEN_READONLY);
  CHECK_OK(gpushm_timeline_wait_signalled(ready, 3, 20000)); /* promised */
  import_timeline(&c, ready, &vready);
  CHECK(vkCreateFence(c.device, &fci, NULL, &fence) == VK_SUCCESS);
  roles_submit(&c, VK_NULL_HANDLE, vready.semaphore, 3, VK_NULL_HANDLE, 0, fence);
  roles_report("q");
  CHECK(vkWaitForFences(c.device, 1, &fence, VK_TRUE, 30000000000ull) == VK_SUCCESS);
  snprintf(line, sizeof line, "%.3f", roles_now_ms());
  lost = gpushm_timeline_value_lost(ready, 3);
  CHECK(lost == 1);
  roles_report(line);
  vkDestroyFence(c.device, fence, NULL);
  gpushm_vk_destroy_timeline(&c.gpushm, &vready);
  vkc_close(&c);
  gpushm_disconnect(conn);
}

/* A Vulkan consumer that promised done 1..100, signalled 1 from its queue and queued 2
 * behind a semaphore nobody signals. */
static void dying_consumer(const char *name)
{
  gpushm_t *conn = roles_connect("dying-vk-consumer");
  gpushm_timeline_t *done;
  gpushm_vk_timeline_t vdone;
  VkSemaphoreTypeCreateInfo type = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                     .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE };
  VkSemaphoreCreateInfo sci = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &type };
  VkSemaphore never;
  VkCommandBuffer cb;
  struct vkc c;
  char n[128];

  roles_open_vk(&c, true);
  snprintf(n, sizeof n, "%s-done", name);
  done = roles_create_timeline(conn, n);
  import_timeline(&c, done, &vdone);
  CHECK_OK(gpushm_timeline_promise(done, 100));
  cb = vkc_begin(&c);
  CHECK(gpushm_vk_timeline_record_signal(&c.gpushm, &vdone, cb, 1) == 0);
  CHECK(vkEndCommandBuffer(cb) == VK_SUCCESS);
  roles_submit(&c, cb, VK_NULL_HANDLE, 0, vdone.semaphore, 1, VK_NULL_HANDLE);
  CHECK_OK(gpushm_timeline_signal_external(done, 1));
  CHECK(vkQueueWaitIdle(c.queue) == VK_SUCCESS);
  CHECK(vkCreateSemaphore(c.device, &sci, NULL, &never) == VK_SUCCESS);
  cb = vkc_begin(&c);
  CHECK(gpushm_vk_timeline_record_signal(&c.gpushm, &vdone, cb, 2) == 0);
  CHECK(vkEndCommandBuffer(cb) == VK_SUCCESS);
  roles_submit(&c, cb, never, 1, vdone.semaphore, 2, VK_NULL_HANDLE);
  CHECK_OK(gpushm_timeline_signal_external(done, 2));
  roles_report("p");
  pause();
}

/* Waits on its CUDA stream for done 3 (queued at once: promised), reports when the
 * stream went on. */
static void waiting_producer(const char *name)
{
  gpushm_t *conn = roles_connect("waiting-cuda-producer");
  gpushm_timeline_t *done;
  char n[128], line[64];
  CUstream s;

  cuda_test_setup(0);
  snprintf(n, sizeof n, "%s-done", name);
  done = roles_open_timeline(conn, n, GPUSHM_OPEN_READONLY);
  CHECK_OK(gpushm_timeline_wait(done, 1, 20000)); /* the queue's fence write landed */
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  CHECK_OK(gpushm_timeline_wait_stream(done, s, 3, 20000));
  roles_report("q");
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  snprintf(line, sizeof line, "%.3f", roles_now_ms());
  CHECK(gpushm_timeline_value_lost(done, 3) == 1);
  roles_report(line);
  gpushm_disconnect(conn);
}

/* ---- the round trip ---------------------------------------------------------------- */

static int rounds(void)
{
  const char *r = getenv("GPUSHM_RT_ROUNDS");
  return r && atoi(r) > 0 ? atoi(r) : 1000;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void print_trip(const char *what, double *us, int n)
{
  qsort(us, (size_t)n, sizeof *us, cmp_double);
  printf("round trip CUDA -> Vulkan -> CUDA, %-38s p50 %7.1f us  p99 %7.1f us  max %8.1f us  p99/p50 %.1f  (%d rounds)\n",
         what, us[n / 2], us[n * 99 / 100], us[n - 1], us[n * 99 / 100] / us[n / 2], n);
}

/* The trip's variants, each on a pair of timelines of its own ("trip-ping-X", minted by
 * the CUDA side; "trip-pong-X", the Vulkan side's), in this order:
 *  gpu: both sides wait on their GPUs, the Vulkan side's every round queued ahead;
 *  raw: the same on the bare semaphores of gpu's pair (values n + v), CUDA waiting on the
 *       semaphore itself, the Vulkan side signalling it without the fence write: the floor;
 *  cuda-cpu: the CUDA side waits for pong on its CPU (the fence word), Vulkan as gpu;
 *  vk-cpu: the Vulkan side waits for ping on its CPU and then submits, CUDA as gpu;
 *  both-cpu: both wait on their CPUs. */
enum trip { TRIP_GPU, TRIP_RAW, TRIP_CUDA_CPU, TRIP_VK_CPU, TRIP_BOTH_CPU, TRIPS };
static const char *const trip_names[TRIPS] = { "gpu", "raw", "cuda-cpu", "vk-cpu", "both-cpu" };
static const char *const trip_what[TRIPS] = {
  "gpushm timelines, GPU waits (default)", "bare semaphores, GPU waits (floor)",
  "gpushm, CUDA waits on its CPU", "gpushm, Vulkan waits on its CPU",
  "gpushm, both wait on their CPUs",
};

static bool cuda_waits_on_gpu(enum trip t)
{
  return t == TRIP_GPU || t == TRIP_VK_CPU;
}

static bool vk_waits_on_gpu(enum trip t)
{
  return t == TRIP_GPU || t == TRIP_RAW || t == TRIP_CUDA_CPU;
}

static void trip_cuda(const char *name)
{
  gpushm_t *conn = roles_connect("trip-cuda");
  gpushm_timeline_t *ping[TRIPS] = { NULL }, *pong[TRIPS] = { NULL };
  gpushm_sync_state_t st;
  int n = rounds(), fd;
  double *us = calloc((size_t)n, sizeof *us);
  CUexternalSemaphore raw[2];
  uint8_t uuid[16];
  char tn[64];
  CUstream s;

  CHECK(us != NULL);
  cuda_test_setup(0);
  printf("round trips, the Vulkan side on a %s queue:\n",
         strstr(name, "transfer") ? "transfer-only (copy engine)" : "graphics");
  for (int t = 0; t < TRIPS; t++) {
    if (t == TRIP_RAW)
      continue;
    snprintf(tn, sizeof tn, "trip-ping-%s", trip_names[t]);
    ping[t] = roles_create_timeline(conn, tn);
    mint_for_readers(ping[t]);
    CHECK_OK(gpushm_timeline_promise(ping[t], (uint64_t)n));
  }
  for (int t = 0; t < TRIPS; t++) {
    if (t == TRIP_RAW)
      continue;
    snprintf(tn, sizeof tn, "trip-pong-%s", trip_names[t]);
    pong[t] = roles_open_timeline(conn, tn, 0);
  }
  /* the queued-ahead rounds all queued before the first */
  for (int i = 0; i < 20000; i++) {
    CHECK_OK(gpushm_timeline_state(pong[TRIP_CUDA_CPU], &st));
    if (st.counter >= (uint64_t)n)
      break;
    usleep(1000);
  }
  CHECK(st.counter == (uint64_t)n);
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 2; i++) {
    CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC desc = {
      .type = CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD };
    CHECK(gpushm_timeline_semaphore(i ? pong[TRIP_GPU] : ping[TRIP_GPU], -1, NULL, 0, &fd,
                                    uuid) == 0);
    desc.handle.fd = fd;
    CU_CHECK(CU_CALL(&drv, cuImportExternalSemaphore, &raw[i], &desc));
  }
  for (int t = 0; t < TRIPS; t++) {
    for (int v = 1; v <= n; v++) {
      double t0 = roles_now_ms();
      if (t == TRIP_RAW) {
        CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS sp = { .params.fence.value = (uint64_t)(n + v) };
        CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS wp = { .params.fence.value = (uint64_t)(n + v) };
        CU_CHECK(CU_CALL(&drv, cuSignalExternalSemaphoresAsync, &raw[0], &sp, 1, s));
        CU_CHECK(CU_CALL(&drv, cuWaitExternalSemaphoresAsync, &raw[1], &wp, 1, s));
        CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
      } else {
        CHECK_OK(gpushm_timeline_signal_stream(ping[t], s, (uint64_t)v));
        if (cuda_waits_on_gpu((enum trip)t)) {
          CHECK_OK(gpushm_timeline_wait_stream(pong[t], s, (uint64_t)v, 20000));
          CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
        } else {
          CHECK_OK(gpushm_timeline_wait(pong[t], (uint64_t)v, 20000));
        }
      }
      us[v - 1] = (roles_now_ms() - t0) * 1e3;
    }
    print_trip(trip_what[t], us, n);
  }
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  for (int i = 0; i < 2; i++)
    CU_CHECK(CU_CALL(&drv, cuDestroyExternalSemaphore, raw[i]));
  free(us);
  gpushm_disconnect(conn);
}

static void trip_vk(const char *name)
{
  gpushm_t *conn = roles_connect("trip-vk");
  gpushm_timeline_t *ping[TRIPS] = { NULL }, *pong[TRIPS] = { NULL };
  gpushm_vk_timeline_t vping[TRIPS], vpong[TRIPS];
  int n = rounds();
  VkCommandBuffer *cbs = calloc((size_t)n * TRIPS, sizeof *cbs);
  struct vkc c;
  char tn[64];

  if (strstr(name, "transfer"))
    setenv("GPUSHM_VK_QUEUE", "transfer", 1);
  CHECK(cbs != NULL);
  memset(vping, 0, sizeof vping);
  memset(vpong, 0, sizeof vpong);
  roles_open_vk(&c, true);
  for (int t = 0; t < TRIPS; t++) {
    if (t == TRIP_RAW)
      continue;
    snprintf(tn, sizeof tn, "trip-pong-%s", trip_names[t]);
    pong[t] = roles_create_timeline(conn, tn);
    import_timeline(&c, pong[t], &vpong[t]);
    CHECK_OK(gpushm_timeline_promise(pong[t], (uint64_t)n));
  }
  for (int t = 0; t < TRIPS; t++) {
    if (t == TRIP_RAW)
      continue;
    snprintf(tn, sizeof tn, "trip-ping-%s", trip_names[t]);
    ping[t] = roles_open_timeline(conn, tn, GPUSHM_OPEN_READONLY);
    CHECK_OK(gpushm_timeline_wait_signalled(ping[t], 1, 20000)); /* promised once minted */
    import_timeline(&c, ping[t], &vping[t]);
  }
  for (int t = 0; t < TRIPS; t++) {
    gpushm_vk_timeline_t *vi = &vping[t == TRIP_RAW ? TRIP_GPU : t];
    gpushm_vk_timeline_t *vo = &vpong[t == TRIP_RAW ? TRIP_GPU : t];
    for (int v = 1; v <= n; v++) {
      VkCommandBuffer *cb = &cbs[(size_t)t * n + (size_t)v - 1];
      if (t == TRIP_RAW) {
        roles_submit(&c, VK_NULL_HANDLE, vi->semaphore, (uint64_t)(n + v), vo->semaphore,
               (uint64_t)(n + v), VK_NULL_HANDLE);
        continue;
      }
      if (vk_waits_on_gpu((enum trip)t))
        CHECK_OK(gpushm_timeline_wait_signalled(ping[t], (uint64_t)v, 20000));
      else
        CHECK_OK(gpushm_timeline_wait(ping[t], (uint64_t)v, 20000));
      *cb = vkc_begin(&c);
      CHECK(gpushm_vk_timeline_record_signal(&c.gpushm, vo, *cb, (uint64_t)v) == 0);
      CHECK(vkEndCommandBuffer(*cb) == VK_SUCCESS);
      roles_submit(&c, *cb, vk_waits_on_gpu((enum trip)t) ? vi->semaphore : VK_NULL_HANDLE,
             (uint64_t)v, vo->semaphore, (uint64_t)v, VK_NULL_HANDLE);
      CHECK_OK(gpushm_timeline_signal_external(pong[t], (uint64_t)v));
    }
  }
  CHECK(vkQueueWaitIdle(c.queue) == VK_SUCCESS);
  for (int t = 0; t < TRIPS; t++) {
    if (t == TRIP_RAW)
      continue;
    CHECK(gpushm_timeline_value(pong[t]) == (uint64_t)n);
    vkFreeCommandBuffers(c.device, c.pool, (uint32_t)n, cbs + (size_t)t * n);
    gpushm_vk_destroy_timeline(&c.gpushm, &vping[t]);
    gpushm_vk_destroy_timeline(&c.gpushm, &vpong[t]);
  }
  free(cbs);
  vkc_close(&c);
  gpushm_disconnect(conn);
}

/* A role in a fresh process, as uid 65534 if asked; fd 3 its report pipe. */
static pid_t start_role(const char *role, const char *name, bool as_nobody, int *report_fd)
{
  char *argv[] = { self, (char *)role, (char *)name, NULL };
  return roles_start(self, d.socket, argv, as_nobody, report_fd);
}

/* ---- GL waits ----------------------------------------------------------------------- */

static void open_gl(struct eglc *e, gpushm_gl_t *gl)
{
  char why[256] = "";
  if (eglc_open(e, why, sizeof why) < 0 || gpushm_gl_init(gl, eglc_proc) < 0) {
    fprintf(stderr, "GL on a GPU host: %s %s\n", why, gl->error);
    exit(1);
  }
}

static void import_gl_timeline(gpushm_gl_t *gl, gpushm_timeline_t *tl, gpushm_gl_timeline_t *t)
{
  if (gpushm_gl_import_timeline(gl, NULL, tl, t) < 0) {
    fprintf(stderr, "GL import of '%s': %s\n", gpushm_timeline_name(tl), gl->error);
    exit(1);
  }
}

/* Once the GL consumer says go (1), fills "<name>-frames" with seed 7 by a kernel that
 * starts 300 ms late, and signals ready 1 behind it; stays until the consumer is done
 * (go 2). */
static void gl_slow_producer(const char *name)
{
  gpushm_t *conn = roles_connect("cuda-producer");
  gpushm_timeline_t *ready, *go;
  gpushm_buffer_t *frames;
  gpushm_create_opts_t opts;
  char n[128];
  CUstream s;

  cuda_test_setup(0);
  snprintf(n, sizeof n, "%s-ready", name);
  ready = roles_create_timeline(conn, n);
  mint_for_readers(ready);
  CHECK_OK(gpushm_timeline_promise(ready, 1));
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.mode = 0644;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  snprintf(n, sizeof n, "%s-frames", name);
  CHECK_OK(gpushm_buffer_create(conn, n, SLOT_BYTES, &opts, &frames));
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  snprintf(n, sizeof n, "%s-go", name);
  go = roles_open_timeline(conn, n, GPUSHM_OPEN_READONLY);
  CHECK_OK(gpushm_timeline_wait(go, 1, 20000));
  slow_fill(cuda_test_dptr(frames), 7, 300000000ull, s);
  CHECK_OK(gpushm_timeline_signal_stream(ready, s, 1));
  CHECK_OK(gpushm_timeline_wait(go, 2, 20000));
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  CHECK_OK(gpushm_timeline_close(go));
  CHECK_OK(gpushm_buffer_close(frames));
  CHECK_OK(gpushm_timeline_close(ready));
  gpushm_disconnect(conn);
}

/* Queues, in GL, a wait for ready 1 and a compute shader reading the frame, before the
 * producer has even started writing it (go 1 comes after): every word right only if GL
 * waited on the GPU. */
static void gl_ordered_consumer(const char *name)
{
  gpushm_t *conn = roles_connect("gl-consumer");
  gpushm_timeline_t *ready, *go;
  gpushm_gl_timeline_t t;
  gpushm_buffer_t *frames;
  gpushm_open_opts_t o;
  GLuint buffer, memory;
  void (*flush)(void);
  struct eglc e;
  gpushm_gl_t gl;
  char n[128];
  long wrong;
  int r = GPUSHM_E_NOENT;

  open_gl(&e, &gl);
  *(void **)&flush = eglc_proc("glFlush");
  CHECK(flush != NULL);
  snprintf(n, sizeof n, "%s-go", name);
  go = roles_create_timeline(conn, n);
  gpushm_open_opts_init(&o);
  o.map_device = GPUSHM_DEVICE_NONE;
  o.flags = GPUSHM_OPEN_READONLY;
  snprintf(n, sizeof n, "%s-frames", name);
  for (int i = 0; i < 1000 && (r = gpushm_buffer_open_ex(conn, n, 0, &o, &frames)) < 0; i++)
    usleep(10000);
  CHECK_OK(r);
  snprintf(n, sizeof n, "%s-ready", name);
  ready = roles_open_timeline(conn, n, GPUSHM_OPEN_READONLY);
  if (gpushm_gl_import_buffer(&gl, frames, 0, &buffer, &memory) < 0) {
    fprintf(stderr, "GL import: %s\n", gl.error);
    exit(1);
  }
  import_gl_timeline(&gl, ready, &t);
  CHECK_OK(gpushm_timeline_wait_signalled(ready, 1, 20000)); /* promised */
  CHECK(gpushm_gl_timeline_wait(&gl, &t, 1, 1, &buffer, 0, NULL, NULL) == 0);
  flush();
  CHECK_OK(gpushm_timeline_signal(go, 1));
  wrong = glv_words(&gl, buffer, SLOT_BYTES / 4, 7); /* dispatched behind the wait */
  printf("GL: a frame read behind a GPU wait for its timeline: %ld words wrong\n", wrong);
  CHECK(wrong == 0);
  CHECK_OK(gpushm_timeline_signal(go, 2));
  gpushm_gl_destroy_timeline(&t);
  gl.DeleteBuffers(1, &buffer);
  gl.DeleteMemoryObjectsEXT(1, &memory);
  CHECK_OK(gpushm_buffer_close(frames));
  CHECK_OK(gpushm_timeline_close(ready));
  eglc_close(&e);
  gpushm_disconnect(conn);
}

/* GL's version of waiting_consumer: a wait for ready 3 (promised, never signalled), a
 * fence sync behind it; reports when the sync came. */
static void gl_waiting_consumer(const char *name)
{
  gpushm_t *conn = roles_connect("waiting-gl-consumer");
  gpushm_timeline_t *ready;
  gpushm_gl_timeline_t t;
  GLsync (*fence_sync)(GLenum, GLbitfield);
  GLenum (*client_wait)(GLsync, GLbitfield, GLuint64);
  void (*delete_sync)(GLsync), (*flush)(void);
  GLsync sync;
  GLenum w;
  struct eglc e;
  gpushm_gl_t gl;
  char n[128], line[64];

  open_gl(&e, &gl);
  *(void **)&fence_sync = eglc_proc("glFenceSync");
  *(void **)&client_wait = eglc_proc("glClientWaitSync");
  *(void **)&delete_sync = eglc_proc("glDeleteSync");
  *(void **)&flush = eglc_proc("glFlush");
  CHECK(fence_sync && client_wait && delete_sync && flush);
  snprintf(n, sizeof n, "%s-ready", name);
  ready = roles_open_timeline(conn, n, GPUSHM_OPEN_READONLY);
  CHECK_OK(gpushm_timeline_wait_signalled(ready, 3, 20000)); /* promised */
  import_gl_timeline(&gl, ready, &t);
  CHECK(gpushm_gl_timeline_wait(&gl, &t, 3, 0, NULL, 0, NULL, NULL) == 0);
  CHECK((sync = fence_sync(GL_SYNC_GPU_COMMANDS_COMPLETE, 0)) != NULL);
  flush();
  roles_report("q");
  w = client_wait(sync, GL_SYNC_FLUSH_COMMANDS_BIT, 30000000000ull);
  CHECK(w == GL_CONDITION_SATISFIED || w == GL_ALREADY_SIGNALED);
  snprintf(line, sizeof line, "%.3f", roles_now_ms());
  CHECK(gpushm_timeline_value_lost(ready, 3) == 1);
  roles_report(line);
  delete_sync(sync);
  gpushm_gl_destroy_timeline(&t);
  CHECK_OK(gpushm_timeline_close(ready));
  eglc_close(&e);
  gpushm_disconnect(conn);
}

static const struct {
  const char *name;
  void (*fn)(const char *);
} roles[] = {
  { "ring-producer", ring_producer },       { "ring-consumer", ring_consumer },
  { "dying-producer", dying_producer },     { "waiting-consumer", waiting_consumer },
  { "dying-consumer", dying_consumer },     { "waiting-producer", waiting_producer },
  { "trip-cuda", trip_cuda },               { "trip-vk", trip_vk },
  { "gl-slow-producer", gl_slow_producer }, { "gl-ordered-consumer", gl_ordered_consumer },
  { "gl-waiting-consumer", gl_waiting_consumer },
};

/* The signaller killed once both have said they are ready; how long the waiter took,
 * after the kill and after the reap. */
static void dead_signaller(const char *signaller, const char *waiter, const char *name,
                           bool waiter_nobody, const char *what)
{
  int sfd, wfd;
  pid_t spid = start_role(signaller, name, !waiter_nobody && geteuid() == 0, &sfd);
  pid_t wpid = start_role(waiter, name, waiter_nobody && geteuid() == 0, &wfd);
  double killed, reaped, woke;
  int status;

  roles_expect(sfd, 'p');
  roles_expect(wfd, 'q');
  usleep(100000); /* the waits are on the GPU now */
  killed = roles_now_ms();
  kill(spid, SIGKILL);
  CHECK(waitpid(spid, &status, 0) == spid);
  reaped = roles_now_ms();
  close(sfd);
  woke = roles_read_number(wfd);
  CHECK(roles_finish(wpid, wfd) == 0);
  CHECK(woke > killed);
  test_log("%s: the waiter went on %.1f ms after the kill, %.1f ms after the reap", what,
           woke - killed, woke - reaped);
}

int main(int argc, char **argv)
{
  bool nobody;
  int pfd, cfd;
  pid_t p, c;

  if (argc == 3) {
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
      if (strcmp(argv[1], roles[i].name) == 0) {
        roles[i].fn(argv[2]);
        return 0;
      }
    return 2;
  }
  snprintf(self, sizeof self, "%s", test_self_path());
  cuda_test_setup(1); /* 77 without a GPU */
  cuda_test_parent_outside_mps();
  daemon_start(&d, NULL);
  nobody = geteuid() == 0;

  p = start_role("ring-producer", "ring", false, &pfd);
  c = start_role("ring-consumer", "ring", nobody, &cfd);
  CHECK(roles_finish(p, pfd) == 0);
  CHECK(roles_finish(c, cfd) == 0);
  test_log("ring: %d frames, CUDA producer -> Vulkan consumer%s, each side waiting on its "
           "GPU, every frame's words right", FRAMES, nobody ? " (uid 65534)" : "");

  dead_signaller("dying-producer", "waiting-consumer", "die1", true,
                 "a CUDA producer SIGKILLed owing promised values, a Vulkan queue waiting");
  dead_signaller("dying-consumer", "waiting-producer", "die2", false,
                 "a Vulkan consumer SIGKILLed with a signal queued, a CUDA stream waiting");

  p = start_role("gl-slow-producer", "glw", false, &pfd);
  c = start_role("gl-ordered-consumer", "glw", nobody, &cfd);
  CHECK(roles_finish(c, cfd) == 0);
  CHECK(roles_finish(p, pfd) == 0);
  test_log("GL%s: a compute shader queued behind a GPU wait for a timeline value read the "
           "frame a CUDA kernel wrote after it was queued, every word right",
           nobody ? " (uid 65534)" : "");
  dead_signaller("dying-producer", "gl-waiting-consumer", "die3", true,
                 "a CUDA producer SIGKILLed owing promised values, a GL wait");

  for (int q = 0; q < 2; q++) {
    const char *queue = q ? "trip-transfer" : "trip";
    c = start_role("trip-vk", queue, false, &cfd);
    p = start_role("trip-cuda", queue, false, &pfd);
    CHECK(roles_finish(p, pfd) == 0);
    CHECK(roles_finish(c, cfd) == 0);
  }
  daemon_stop(&d);
  return 0;
}
