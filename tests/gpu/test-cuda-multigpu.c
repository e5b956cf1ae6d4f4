/* SPDX-License-Identifier: MIT */
/* Two GPUs: buffers on either device used by kernels and streams of either, over both
 * device backends.  The bug this guards (measured on an H200 pair): a buffer of
 * device 1 mapped in device 1's context and used by a device-0 kernel faulted with
 * CUDA_ERROR_ILLEGAL_ADDRESS, and the close after it returned the sticky error.
 *
 * For each backend and each home device, the parent creates and fills a buffer; a
 * consumer process (exec'ed: CUDA does not survive fork() alone), for each map device
 * in turn, makes that device's context current, opens the buffer (the default takes
 * the current device), checks the handle is per device, verifies the data with a
 * kernel on that device (the fake driver: a copy on its stream, which it checks
 * against the device's access) and writes a word back, which the parent reads through
 * its own mapping.  Sync buffers: releases and acquires from streams of the map device,
 * the refusals for streams the method cannot serve (naming both devices), and a slow
 * producer kernel on one device ordered before the consumer's kernel on the other.
 * Without peer access (the fake's GPUSHM_FAKE_CUDA_NO_P2P), a requested device is
 * refused and the default falls back to the buffer's own device.
 *
 * Needs two GPUs (exit 77 with fewer); tests/gpu/test-cuda-multigpu-fake.sh runs it
 * against the fake driver with two fake devices. */
#include "config.h"
#include "cuda-test.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (4u << 20)
#define WORDS (SIZE / 4)
#define WRITTEN_WORD 0x600dcafeu

static struct test_daemon d;
static char self[4096];
static bool kernels; /* a real driver: kernels check what copies cannot */
static CUfunction fill_fn; /* slow_fill, on the device test_sync_across fills on */
static CUcontext ctx[2];

extern const char test_kernels_ptx[];

static const char *backend_name(gpushm_backend_t b)
{
  return b == GPUSHM_BACKEND_CUDA_FD ? "cuda-fd" : "cuda-ipc";
}

static void setup_devices(void)
{
  int count = 0;

  cuda_test_setup(1);
  CU_CHECK(CU_CALL(&drv, cuDeviceGetCount, &count));
  if (count < 2) {
    test_log("one GPU here: this test needs two (the nvidia-h200-x2 machine)");
    exit(TEST_SKIP);
  }
  for (int i = 0; i < 2; i++) {
    CUdevice dev;
    CU_CHECK(CU_CALL(&drv, cuDeviceGet, &dev, i));
    CU_CHECK(CU_CALL(&drv, cuDevicePrimaryCtxRetain, &ctx[i], dev));
  }
}

/* Loads the kernels into both devices' contexts, where the driver runs them. */
static CUmodule modules[2];
static void load_kernels(int device)
{
  CUresult r;

  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx[device]));
  r = cuda_test_load_module(test_kernels_ptx, &modules[device]);
  kernels = r != CUDA_ERROR_NOT_SUPPORTED; /* the fake driver runs none */
}

static CUfunction function(int device, const char *name)
{
  CUfunction f;
  CU_CHECK(CU_CALL(&drv, cuModuleGetFunction, &f, modules[device], name));
  return f;
}

static CUstream stream_on(int device)
{
  CUstream s;
  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx[device]));
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  return s;
}

/* Verifies the pattern at p from a stream of device: a kernel there (real), or a copy
 * queued there into device-local memory (fake: it checks the device's access). */
static void verify_on(int device, CUstream s, CUdeviceptr p, uint32_t seed)
{
  CUdeviceptr scratch;

  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx[device]));
  if (kernels) {
    unsigned long long words = WORDS;
    uint32_t errors = 1;
    CU_CHECK(CU_CALL(&drv, cuMemAlloc, &scratch, 4));
    CU_CHECK(CU_CALL(&drv, cuMemsetD32Async, scratch, 0, 1, s));
    void *args[] = { &p, &words, &seed, &scratch };
    CU_CHECK(CU_CALL(&drv, cuLaunchKernel, function(device, "verify"), 256, 1, 1, 256, 1, 1, 0,
                     s, args, NULL));
    CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
    CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, &errors, scratch, 4));
    CHECK(errors == 0);
  } else {
    CU_CHECK(CU_CALL(&drv, cuMemAlloc, &scratch, SIZE));
    CU_CHECK(CU_CALL(&drv, cuMemcpyDtoDAsync, scratch, p, SIZE, s));
    CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
    CHECK(cuda_test_verify(scratch, SIZE, seed));
  }
  CU_CHECK(CU_CALL(&drv, cuMemFree, scratch));
}

/* --- the consumer (an exec'ed child): argv: self consumer BACKEND NAME HOME SEED --- */
static int role_consumer(char **argv)
{
  gpushm_backend_t backend = (gpushm_backend_t)atoi(argv[2]);
  const char *name = argv[3];
  int home = atoi(argv[4]);
  uint32_t seed = (uint32_t)strtoul(argv[5], NULL, 0);
  gpushm_buffer_t *on[2], *again;
  gpushm_t *conn;

  setup_devices();
  load_kernels(0);
  load_kernels(1);
  snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
  conn = daemon_connect(&d);
  for (int map = 0; map < 2; map++) {
    CUstream s = stream_on(map); /* leaves device map's context current */

    CHECK_OK(gpushm_buffer_open(conn, name, 0, &on[map])); /* the current device */
    CHECK(gpushm_buffer_backend(on[map]) == backend);
    CHECK(gpushm_buffer_device(on[map]) == home && gpushm_buffer_map_device(on[map]) == map);
    CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_MAP_DEVICE(map), &again));
    CHECK(again == on[map]); /* one mapping per device */
    CHECK_OK(gpushm_buffer_close(again));
    verify_on(map, s, cuda_test_dptr(on[map]), seed);
    CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
  }
  /* A write from each device, for the parent to read on the buffer's own. */
  for (int map = 0; map < 2; map++) {
    CUstream s = stream_on(map);
    CU_CHECK(CU_CALL(&drv, cuMemsetD32Async, cuda_test_dptr(on[map]) + 4u * (unsigned)map,
                     WRITTEN_WORD + (unsigned)map, 1, s));
    CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
    CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
  }
  CHECK(on[0] != on[1] && gpushm_buffer_ptr(on[0]) != gpushm_buffer_ptr(on[1]));
  /* Nothing current: the buffer's own device. */
  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, NULL));
  CHECK_OK(gpushm_buffer_open(conn, name, 0, &again));
  CHECK(again == on[home]);
  CHECK_OK(gpushm_buffer_close(again));
  CHECK(gpushm_buffer_open(conn, name, GPUSHM_MAP_DEVICE(7), &again) == GPUSHM_E_INVAL);
  /* The same through open options: the map device is a field, not flag bits. */
  for (int map = 0; map < 2; map++) {
    gpushm_open_opts_t o;

    gpushm_open_opts_init(&o);
    o.map_device = map;
    CHECK_OK(gpushm_buffer_open_ex(conn, name, 0, &o, &again));
    CHECK(again == on[map] && gpushm_buffer_map_device(again) == map);
    CHECK_OK(gpushm_buffer_close(again));
    o.flags = GPUSHM_MAP_DEVICE(map);
    CHECK(gpushm_buffer_open_ex(conn, name, 0, &o, &again) == GPUSHM_E_INVAL);
  }
  {
    gpushm_open_opts_t o;

    gpushm_open_opts_init(&o);
    CHECK_OK(gpushm_buffer_open_ex(conn, name, 0, &o, &again)); /* AUTO, nothing current */
    CHECK(again == on[home]);
    CHECK_OK(gpushm_buffer_close(again));
    o.map_device = 7;
    CHECK(gpushm_buffer_open_ex(conn, name, 0, &o, &again) == GPUSHM_E_INVAL);
  }
  for (int map = 0; map < 2; map++)
    CHECK_OK(gpushm_buffer_close(on[map])); /* no sticky error from any of it */
  gpushm_disconnect(conn);
  return 0;
}

/* CUDA_VISIBLE_DEVICES (set by the parent) reorders or hides devices here: the buffer is
 * found by its device's UUID, never by the daemon's ordinal.  argv: self visible BACKEND
 * NAME HOME SEED EXPECT, EXPECT this process's ordinal of the daemon's device HOME, or
 * -1 where that device is hidden. */
static int role_visible(char **argv)
{
  gpushm_backend_t backend = (gpushm_backend_t)atoi(argv[2]);
  const char *name = argv[3];
  uint32_t seed = (uint32_t)strtoul(argv[5], NULL, 0);
  int expect = atoi(argv[6]), count = 0;
  gpushm_buffer_t *b;
  gpushm_t *conn;
  CUstream s;

  cuda_test_setup(1);
  CU_CHECK(CU_CALL(&drv, cuDeviceGetCount, &count));
  for (int i = 0; i < count && i < 2; i++) {
    CUdevice dev;
    CU_CHECK(CU_CALL(&drv, cuDeviceGet, &dev, i));
    CU_CHECK(CU_CALL(&drv, cuDevicePrimaryCtxRetain, &ctx[i], dev));
    load_kernels(i);
  }
  snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
  conn = daemon_connect(&d);
  if (expect < 0) {
    CHECK(gpushm_buffer_open(conn, name, 0, &b) == GPUSHM_E_UNSUPPORTED);
    CHECK(strstr(gpushm_last_error_message(), "not visible to this process"));
  } else {
    CHECK(expect < count);
    CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_MAP_DEVICE(expect), &b));
    CHECK(gpushm_buffer_backend(b) == backend);
    CHECK(gpushm_buffer_device(b) == expect && gpushm_buffer_map_device(b) == expect);
    s = stream_on(expect);
    verify_on(expect, s, cuda_test_dptr(b), seed);
    CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
    CHECK_OK(gpushm_buffer_close(b));
  }
  gpushm_disconnect(conn);
  return 0;
}

/* Without peer access (fake only): a requested other device is refused, naming both;
 * the default falls back to the buffer's own.  argv: self no-p2p NAME HOME */
static int role_no_p2p(char **argv)
{
  const char *name = argv[2];
  int home = atoi(argv[3]), other = 1 - home;
  gpushm_buffer_t *b;
  gpushm_t *conn;

  setup_devices();
  snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
  conn = daemon_connect(&d);
  CHECK(gpushm_buffer_open(conn, name, GPUSHM_MAP_DEVICE(other), &b) == GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "no peer access"));
  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx[other]));
  CHECK_OK(gpushm_buffer_open(conn, name, 0, &b));
  CHECK(gpushm_buffer_map_device(b) == home);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

/* Sync buffers across devices.  argv: self sync BACKEND NAME HOME SEED: the parent
 * fills on HOME (slowly, with a real GPU) and releases; this process, mapped on the
 * other device, acquires on that device's stream and verifies there, then checks what
 * each method refuses. */
static int role_sync(char **argv)
{
  gpushm_backend_t backend = (gpushm_backend_t)atoi(argv[2]);
  const char *name = argv[3];
  int home = atoi(argv[4]), map = 1 - home;
  uint32_t seed = (uint32_t)strtoul(argv[5], NULL, 0);
  CUstream on_map, on_home;
  gpushm_buffer_t *b;
  gpushm_t *conn;
  uint64_t seq;

  setup_devices();
  load_kernels(home);
  load_kernels(map);
  snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
  conn = daemon_connect(&d);
  on_home = stream_on(home);
  on_map = stream_on(map);
  if (backend == GPUSHM_BACKEND_CUDA_IPC) {
    /* A named event of the home device, recorded behind the producer's slow kernel:
     * waited on by the other device's stream, it alone orders the check after the
     * writes (the real driver kills a process that waits there on the event object of
     * the home device's context: the library opens the handle again for this one). */
    char event_name[80];
    gpushm_event_t *ev;
    snprintf(event_name, sizeof event_name, "%s-event", name);
    CHECK_OK(gpushm_event_open(conn, event_name, &ev));
    CHECK_OK(gpushm_event_wait(ev, on_map));
    CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_MAP_DEVICE(map), &b));
    verify_on(map, on_map, cuda_test_dptr(b), seed);
    CHECK(gpushm_event_record(ev, on_map) == GPUSHM_E_UNSUPPORTED);
    CHECK_OK(gpushm_event_record(ev, on_home));
    CHECK_OK(gpushm_event_wait(ev, on_home));
    CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, on_home));
    CHECK_OK(gpushm_buffer_close(b));
    CHECK_OK(gpushm_event_close(ev));
  }
  CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_MAP_DEVICE(map), &b));
  CHECK(gpushm_buffer_map_device(b) == map);
  CHECK_OK(gpushm_buffer_acquire(b, on_map, 1, 30000));
  verify_on(map, on_map, cuda_test_dptr(b), seed);
  /* The fence (cuda-ipc's too, since 0.7.1) is mapped for this device only: the other's
   * streams are refused. */
  CHECK(gpushm_buffer_sync_method(b, NULL) == GPUSHM_SYNC_GPU_FENCE);
  CHECK(gpushm_buffer_acquire(b, on_home, 1, 1000) == GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "mapped for device"));
  CHECK(gpushm_buffer_release(b, on_home, NULL) == GPUSHM_E_UNSUPPORTED);
  CHECK_OK(gpushm_buffer_release(b, on_map, &seq));
  CHECK(seq == 2);
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, on_map));
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, on_home));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

/* Fake driver only: the new driver calls failing give clear errors and queue nothing.
 * argv: self faults NAME HOME (a cuda-fd sync buffer on HOME, released once). */
static int role_faults(char **argv)
{
  const char *name = argv[2];
  int home = atoi(argv[3]), other = 1 - home;
  CUstream on_home, on_other;
  gpushm_buffer_t *b;
  gpushm_t *conn;

  setup_devices();
  snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
  conn = daemon_connect(&d);
  on_home = stream_on(home);
  on_other = stream_on(other);
  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, NULL));
  CHECK(gpushm_buffer_open(conn, name, GPUSHM_MAP_DEVICE(other), &b) == GPUSHM_E_CUDA);
  CHECK(strstr(gpushm_last_error_message(), "cuDeviceCanAccessPeer"));
  CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_MAP_DEVICE(home), &b));
  /* Another device's stream, whose primary context this library has not retained:
   * its device is asked of the driver (cuCtxGetDevice). */
  CHECK(gpushm_buffer_release(b, on_other, NULL) == GPUSHM_E_CUDA);
  CHECK(strstr(gpushm_last_error_message(), "cuCtxGetDevice"));
  CHECK(gpushm_buffer_release(b, on_home, NULL) == GPUSHM_E_CUDA);
  CHECK(strstr(gpushm_last_error_message(), "cuStreamGetCtx"));
  CHECK(gpushm_buffer_release_seq(b) == 1); /* nothing published */
  CHECK_OK(gpushm_buffer_release(b, NULL, NULL)); /* the default stream needs neither */
  CHECK(gpushm_buffer_release_seq(b) == 2);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

static pid_t spawn_with(const char *role, const char *a, const char *b, const char *c,
                        const char *e, const char *f, const char *extra_env)
{
  pid_t pid;

  fflush(stdout);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("GPUSHM_SOCKET", d.socket, 1);
    if (extra_env)
      putenv((char *)extra_env);
    execl(self, self, role, a, b, c, e, f, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static pid_t spawn(const char *role, const char *a, const char *b, const char *c,
                   const char *e, const char *extra_env)
{
  return spawn_with(role, a, b, c, e, NULL, extra_env);
}

static gpushm_buffer_t *create_on(gpushm_t *conn, const char *name, gpushm_backend_t backend,
                                  int home, unsigned flags)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;

  gpushm_create_opts_init(&opts);
  opts.backend = backend;
  opts.device = home;
  opts.flags = flags | GPUSHM_MAP_DEVICE(home);
  CHECK_OK(gpushm_buffer_create(conn, name, SIZE, &opts, &b));
  CHECK(gpushm_buffer_map_device(b) == home && gpushm_buffer_device(b) == home);
  return b;
}

static void test_kernels_on_both(gpushm_t *conn, gpushm_backend_t backend, int home)
{
  char name[64], backend_text[8], home_text[8], seed_text[16];
  uint32_t seed = 0x1000u * (unsigned)backend + (unsigned)home, got[2];
  gpushm_buffer_t *b;

  snprintf(name, sizeof name, "mg-%s-on-%d", backend_name(backend), home);
  b = create_on(conn, name, backend, home, 0);
  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx[home]));
  cuda_test_fill(cuda_test_dptr(b), SIZE, seed);
  snprintf(backend_text, sizeof backend_text, "%d", (int)backend);
  snprintf(home_text, sizeof home_text, "%d", home);
  snprintf(seed_text, sizeof seed_text, "%u", seed);
  check_child(spawn("consumer", backend_text, name, home_text, seed_text, NULL));
  CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, got, cuda_test_dptr(b), sizeof got));
  CHECK(got[0] == WRITTEN_WORD && got[1] == WRITTEN_WORD + 1);
  test_log("%s: a buffer on device %d used by kernels of devices 0 and 1, one mapping each",
           backend_name(backend), home);
  /* Other ordinals in the consumer: reversed, this device alone, the other alone. */
  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx[home]));
  cuda_test_fill(cuda_test_dptr(b), SIZE, seed); /* the words the consumer wrote */
  {
    static const struct { const char *env; int expect_of_home[2]; } views[] = {
      { "CUDA_VISIBLE_DEVICES=1,0", { 1, 0 } },
      { "CUDA_VISIBLE_DEVICES=0", { 0, -1 } },
      { "CUDA_VISIBLE_DEVICES=1", { -1, 0 } },
    };
    for (size_t v = 0; v < sizeof views / sizeof views[0]; v++) {
      char expect_text[8];
      snprintf(expect_text, sizeof expect_text, "%d", views[v].expect_of_home[home]);
      check_child(spawn_with("visible", backend_text, name, home_text, seed_text, expect_text,
                             views[v].env));
    }
    test_log("%s: found by UUID under CUDA_VISIBLE_DEVICES=1,0, =0 and =1 in the consumer "
             "(refused where its device is hidden)", backend_name(backend));
  }
  if (!kernels)
    check_child(spawn("no-p2p", name, home_text, NULL, NULL, "GPUSHM_FAKE_CUDA_NO_P2P=1"));
  CHECK_OK(gpushm_unlink(conn, name));
  CHECK_OK(gpushm_buffer_close(b));
}

static void test_sync_across(gpushm_t *conn, gpushm_backend_t backend, int home)
{
  char name[64], backend_text[8], home_text[8], seed_text[16];
  uint32_t seed = 0x2000u * (unsigned)backend + (unsigned)home;
  gpushm_event_t *ev = NULL;
  gpushm_buffer_t *b;
  CUstream s;
  pid_t pid;

  snprintf(name, sizeof name, "mg-sync-%s-on-%d", backend_name(backend), home);
  b = create_on(conn, name, backend, home, GPUSHM_CREATE_SYNC);
  snprintf(backend_text, sizeof backend_text, "%d", (int)backend);
  snprintf(home_text, sizeof home_text, "%d", home);
  snprintf(seed_text, sizeof seed_text, "%u", seed);
  if (backend == GPUSHM_BACKEND_CUDA_IPC) {
    char event_name[80];
    gpushm_create_opts_t opts;
    gpushm_create_opts_init(&opts);
    opts.device = home;
    snprintf(event_name, sizeof event_name, "%s-event", name);
    CHECK_OK(gpushm_event_create(conn, event_name, &opts, &ev));
  }
  s = stream_on(home);
  if (kernels) {
    /* Still writing for a second when released (and the consumer's CUDA start takes
     * 0.1-0.4 s): only the acquire, or the event, keeps the consumer's kernel on the
     * other device from reading early. */
    CUdeviceptr p = cuda_test_dptr(b);
    unsigned long long words = WORDS, delay_ns = 1000000000ull;
    void *args[] = { &p, &words, &seed, &delay_ns };
    CU_CHECK(CU_CALL(&drv, cuLaunchKernel, fill_fn, 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
  } else {
    cuda_test_fill(cuda_test_dptr(b), SIZE, seed);
  }
  if (ev)
    CHECK_OK(gpushm_event_record(ev, s));
  pid = spawn("sync", backend_text, name, home_text, seed_text, NULL);
  CHECK_OK(gpushm_buffer_release(b, s, NULL));
  check_child(pid);
  if (ev)
    CHECK_OK(gpushm_event_close(ev));
  CHECK(gpushm_buffer_release_seq(b) == 2);
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  CU_CHECK(CU_CALL(&drv, cuStreamDestroy, s));
  test_log("%s: released on device %d, acquired and verified on device %d; other streams "
           "refused by name%s", backend_name(backend), home, 1 - home,
           backend == GPUSHM_BACKEND_CUDA_IPC ? "; a named event of the releasing device waited "
                                                "on there" : "");
  CHECK_OK(gpushm_unlink(conn, name));
  CHECK_OK(gpushm_buffer_close(b));
  if (!kernels && backend == GPUSHM_BACKEND_CUDA_FD) {
    snprintf(name, sizeof name, "mg-faults-on-%d", home);
    b = create_on(conn, name, backend, home, GPUSHM_CREATE_SYNC);
    CHECK_OK(gpushm_buffer_release(b, NULL, NULL));
    check_child(spawn("faults", name, home_text, NULL, NULL,
                      "GPUSHM_CUDA_FAULTS=cuDeviceCanAccessPeer=CUDA_ERROR_UNKNOWN,"
                      "cuCtxGetDevice=CUDA_ERROR_UNKNOWN,cuStreamGetCtx=CUDA_ERROR_UNKNOWN@2"));
    CHECK(gpushm_buffer_release_seq(b) == 2);
    CHECK_OK(gpushm_unlink(conn, name));
    CHECK_OK(gpushm_buffer_close(b));
    test_log("driver faults in peer checks and stream lookups: clear errors, nothing queued");
  }
}

int main(int argc, char **argv)
{
  gpushm_t *conn;

  if (argc > 1 && strcmp(argv[1], "consumer") == 0)
    return role_consumer(argv);
  if (argc > 1 && strcmp(argv[1], "visible") == 0)
    return role_visible(argv);
  if (argc > 1 && strcmp(argv[1], "no-p2p") == 0)
    return role_no_p2p(argv);
  if (argc > 1 && strcmp(argv[1], "sync") == 0)
    return role_sync(argv);
  if (argc > 1 && strcmp(argv[1], "faults") == 0)
    return role_faults(argv);
  CHECK(readlink("/proc/self/exe", self, sizeof self - 1) > 0);
  setup_devices();
  load_kernels(1);
  load_kernels(0);
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  for (int b = 0; b < 2; b++) {
    gpushm_backend_t backend = b ? GPUSHM_BACKEND_CUDA_FD : GPUSHM_BACKEND_CUDA_IPC;
    for (int home = 0; home < 2; home++) {
      test_kernels_on_both(conn, backend, home);
      if (kernels)
        fill_fn = function(home, "slow_fill");
      test_sync_across(conn, backend, home);
    }
  }
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}
