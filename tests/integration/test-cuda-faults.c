/* SPDX-License-Identifier: MIT */
/* The daemon's CUDA error handling, without a GPU: the fake driver (or none) plus
 * injected faults.  No driver or no device: a clear "unsupported"; out of memory: a
 * clean error and a healthy daemon; a failed export: nothing left behind; a sticky
 * error: the daemon exits with status 70 for the service manager to restart it. */
#include "config.h"
#include "gpushm_limits.h"
#include "harness.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *fake_lib;

static void with_env(const char *name, const char *value)
{
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
}

/* Past the carve limit: an allocation of its own, so that each create is a driver call
 * (carved buffers, which share one, are test-segments' business). */
#define OWN (GPUSHM_LIMIT_CARVE_DEVICE + 1)

static int create_cuda(gpushm_t *conn, const char *name, uint64_t size, gpushm_buffer_t **b)
{
  gpushm_create_opts_t opts;
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  return gpushm_buffer_create(conn, name, size, &opts, b);
}

/* Starts a daemon with the given driver library and fault spec in its environment
 * only. */
static void start(struct test_daemon *d, const char *library, const char *faults,
                  const char *devices)
{
  with_env("GPUSHM_CUDA_LIBRARY", library);
  with_env("GPUSHM_CUDA_FAULTS", faults);
  with_env("GPUSHM_FAKE_CUDA_DEVICES", devices);
  daemon_start(d, NULL);
  setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1); /* this process imports with the fake */
  unsetenv("GPUSHM_CUDA_FAULTS");
  unsetenv("GPUSHM_FAKE_CUDA_DEVICES");
}

static void test_unavailable(void)
{
  struct test_daemon d = { 0 };
  gpushm_t *conn;
  gpushm_buffer_t *b;

  start(&d, "/nonexistent/libcuda.so.1", NULL, NULL);
  conn = daemon_connect(&d);
  CHECK_ERR(create_cuda(conn, "x", 1, &b), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "no CUDA driver") != NULL);
  CHECK_OK(gpushm_buffer_create(conn, "host-still-works", 1, NULL, &b));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);

  start(&d, fake_lib, NULL, "0");
  conn = daemon_connect(&d);
  CHECK_ERR(create_cuda(conn, "x", 1, &b), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "no CUDA device") != NULL);
  gpushm_disconnect(conn);
  daemon_stop(&d);

  /* a malformed fault spec is refused, not half-applied */
  start(&d, fake_lib, "cuMemAlloc=NOT_AN_ERROR", NULL);
  conn = daemon_connect(&d);
  CHECK_ERR(create_cuda(conn, "x", 1, &b), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_CUDA_FAULTS") != NULL);
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

static void test_out_of_memory(void)
{
  struct test_daemon d = { 0 };
  gpushm_t *conn;
  gpushm_buffer_t *b;
  gpushm_stats_t *s;

  /* the second allocation (and every later one) fails */
  start(&d, fake_lib, "cuMemAlloc=CUDA_ERROR_OUT_OF_MEMORY@2", NULL);
  conn = daemon_connect(&d);
  CHECK_OK(create_cuda(conn, "first", OWN, &b));
  CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_CUDA_IPC);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_ERR(create_cuda(conn, "second", OWN, &b), GPUSHM_E_NOMEM);
  CHECK(strstr(gpushm_last_error_message(), "cuMemAlloc") != NULL);
  CHECK_OK(gpushm_ping(conn));
  s = daemon_stats(&d);
  CHECK(gpushm_stats_buffers(s) == 1 &&
        gpushm_stats_bytes_allocated(s) == GPUSHM_LIMIT_CARVE_DEVICE + (2u << 20)); /* "first" */
  gpushm_stats_free(s);
  /* the failed create charged no quota and left no name */
  CHECK_OK(gpushm_buffer_create(conn, "second", 1, NULL, &b));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

static void test_export_failure(void)
{
  struct test_daemon d = { 0 };
  gpushm_t *conn;
  gpushm_buffer_t *b;
  gpushm_stats_t *s;

  start(&d, fake_lib, "cuIpcGetMemHandle=CUDA_ERROR_INVALID_VALUE", NULL);
  conn = daemon_connect(&d);
  CHECK_ERR(create_cuda(conn, "unexportable", 1, &b), GPUSHM_E_CUDA);
  CHECK(strstr(gpushm_last_error_message(), "cuIpcGetMemHandle") != NULL);
  s = daemon_stats(&d);
  /* allocated, then given back */
  CHECK(gpushm_stats_buffers(s) == 0 && gpushm_stats_bytes_allocated(s) == 0);
  gpushm_stats_free(s);
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

static void test_sticky_error(void)
{
  struct test_daemon d = { 0 };
  gpushm_t *conn, *bystander;
  gpushm_buffer_t *b;

  start(&d, fake_lib, "cuMemFree=CUDA_ERROR_ILLEGAL_ADDRESS", NULL);
  conn = daemon_connect(&d);
  bystander = daemon_connect(&d);
  CHECK_OK(create_cuda(conn, "poisoned", OWN, &b));
  CHECK_OK(gpushm_unlink(conn, "poisoned"));
  /* the release is answered, then the daemon stops */
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(daemon_wait_exit(&d) == 70);
  CHECK_ERR(gpushm_ping(bystander), GPUSHM_E_DISCONNECTED);
  gpushm_disconnect(conn);
  gpushm_disconnect(bystander);
}

/* More GPUs than GPUSHM_LIMIT_DEVICES: the daemon uses (and reports) the first 32. */
static void test_device_limit(void)
{
  struct test_daemon d = { 0 };
  gpushm_t *conn;
  gpushm_buffer_t *b;
  gpushm_create_opts_t opts;
  gpushm_stats_t *s;
  uint8_t uuid31[16];

  start(&d, fake_lib, NULL, "40");
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_stats(conn, &s));
  CHECK(gpushm_stats_device_count(s) == GPUSHM_LIMIT_DEVICES);
  CHECK(gpushm_device_stats_ordinal(gpushm_stats_device(s, 31)) == 31);
  CHECK(gpushm_stats_device(s, GPUSHM_LIMIT_DEVICES) == NULL);
  CHECK_OK(gpushm_device_stats_uuid(gpushm_stats_device(s, 31), uuid31));
  gpushm_stats_free(s);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  /* The daemon allocates on its device 31; this process's driver shows one GPU, so
   * the UUID match fails cleanly and the reference goes back. */
  opts.device = 31;
  CHECK_ERR(gpushm_buffer_create(conn, "last-device", 1, &opts, &b), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "not visible to this process") != NULL);
  {
    const gpushm_buffer_info_t *info;
    uint8_t uuid[16];
    CHECK((info = find_buffer(conn, "last-device")) && gpushm_buffer_info_device(info) == 31 &&
          gpushm_buffer_info_refs(info) == 0);
    /* the UUID that tells the daemon's device 31 apart from this process's devices */
    CHECK_OK(gpushm_buffer_info_device_uuid(info, uuid));
    CHECK(memcmp(uuid, uuid31, sizeof uuid) == 0);
  }
  opts.device = 32;
  CHECK_ERR(gpushm_buffer_create(conn, "beyond", 1, &opts, &b), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "has 32") != NULL);
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* cuda-fd: every driver call of the daemon's allocation failing gives a clean error
 * naming it and leaves nothing allocated; a sticky release stops the daemon; a device
 * without virtual memory management is refused with the reason, cuda-ipc still works
 * there. */
static void test_fd_backend_faults(void)
{
  static const struct {
    const char *fault;
    int expect;
  } cases[] = {
    { "cuMemGetAllocationGranularity=CUDA_ERROR_INVALID_VALUE", GPUSHM_E_CUDA },
    { "cuMemCreate=CUDA_ERROR_OUT_OF_MEMORY", GPUSHM_E_NOMEM },
    { "cuMemExportToShareableHandle=CUDA_ERROR_INVALID_VALUE", GPUSHM_E_CUDA },
  };
  struct test_daemon d = { 0 };
  gpushm_create_opts_t opts;
  gpushm_t *conn;
  gpushm_buffer_t *b;
  gpushm_stats_t *s;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char call[64];
    snprintf(call, sizeof call, "%.*s", (int)strcspn(cases[i].fault, "="), cases[i].fault);
    start(&d, fake_lib, cases[i].fault, NULL);
    conn = daemon_connect(&d);
    CHECK_ERR(gpushm_buffer_create(conn, "fd-buf", 1, &opts, &b), cases[i].expect);
    CHECK(strstr(gpushm_last_error_message(), call) != NULL);
    s = daemon_stats(&d);
    CHECK(gpushm_stats_buffers(s) == 0 && gpushm_stats_bytes_allocated(s) == 0);
    gpushm_stats_free(s);
    /* the daemon is fine and the name is free */
    CHECK_OK(gpushm_buffer_create(conn, "fd-buf", 1, NULL, &b));
    CHECK_OK(gpushm_buffer_close(b));
    gpushm_disconnect(conn);
    daemon_stop(&d);
    memset(&d, 0, sizeof d);
  }

  start(&d, fake_lib, "cuMemRelease=CUDA_ERROR_ILLEGAL_ADDRESS", NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "poisoned-fd", OWN, &opts, &b));
  CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_CUDA_FD);
  CHECK_OK(gpushm_unlink(conn, "poisoned-fd"));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(daemon_wait_exit(&d) == 70);
  gpushm_disconnect(conn);
  memset(&d, 0, sizeof d);

  setenv("GPUSHM_FAKE_CUDA_NO_VMM", "1", 1);
  start(&d, fake_lib, NULL, NULL);
  unsetenv("GPUSHM_FAKE_CUDA_NO_VMM");
  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_buffer_create(conn, "no-vmm", 1, &opts, &b), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "virtual memory management") != NULL);
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  CHECK_OK(gpushm_buffer_create(conn, "no-vmm", 1, &opts, &b));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* The system service's safe default: run as root, "auto" refuses legacy IPC (creates and
 * opens, and Hello does not offer it), and default-backend makes GPUSHM_BACKEND_DEFAULT
 * device memory as fd capabilities.  "yes" turns legacy IPC back on. */
static void test_legacy_ipc_policy(void)
{
  struct test_daemon d = { 0 };
  gpushm_create_opts_t opts;
  gpushm_t *conn;
  gpushm_buffer_t *b, *held;

  CHECK(geteuid() == 0); /* the suite runs as root, as the system service does */
  setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1);
  daemon_start(&d, "--allow-legacy-ipc", "auto", "--default-backend", "cuda-fd", NULL);
  conn = daemon_connect(&d);
  CHECK(!(gpushm_daemon_backends(conn) & (1u << GPUSHM_BACKEND_CUDA_IPC)));
  CHECK(gpushm_daemon_backends(conn) & (1u << GPUSHM_BACKEND_CUDA_FD));
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  CHECK_ERR(gpushm_buffer_create(conn, "legacy", 1, &opts, &b), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "allow-legacy-ipc") != NULL);
  CHECK_OK(gpushm_buffer_create(conn, "by-default", 1, NULL, &b));
  CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_CUDA_FD);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);

  /* Turned on: a legacy buffer is made and opened... */
  memset(&d, 0, sizeof d);
  daemon_start(&d, "--allow-legacy-ipc", "yes", NULL);
  conn = daemon_connect(&d);
  CHECK(gpushm_daemon_backends(conn) & (1u << GPUSHM_BACKEND_CUDA_IPC));
  CHECK_OK(gpushm_buffer_create(conn, "legacy", 1, &opts, &held));
  CHECK(gpushm_buffer_backend(held) == GPUSHM_BACKEND_CUDA_IPC);
  CHECK_OK(gpushm_buffer_create(conn, "host-default", 1, NULL, &b));
  CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_HOST); /* the built-in default */
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_close(held));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* default-backend = auto, which the installed settings file asks for: cuda-fd where
 * the first GPU can share fd memory, host where it cannot or where there is no GPU. */
static void test_default_backend_auto(void)
{
  static const struct {
    const char *library, *no_vmm;
    gpushm_backend_t expect;
  } cases[] = {
    { "fake", NULL, GPUSHM_BACKEND_CUDA_FD },
    { "fake", "1", GPUSHM_BACKEND_HOST },
    { "/nonexistent/libcuda.so.1", NULL, GPUSHM_BACKEND_HOST },
  };
  char config[4096];

  /* the flag, and the installed settings file as the system service reads it */
  snprintf(config, sizeof config, "--config=%s/systemd/gpushmd.conf", getenv("GPUSHM_TEST_SRCDIR"));
  for (size_t i = 0; i < 2 * (sizeof cases / sizeof cases[0]); i++) {
    const char *library = cases[i / 2].library;
    struct test_daemon d = { 0 };
    gpushm_buffer_t *b;
    gpushm_t *conn;

    with_env("GPUSHM_FAKE_CUDA_NO_VMM", cases[i / 2].no_vmm);
    with_env("GPUSHM_CUDA_LIBRARY", strcmp(library, "fake") == 0 ? fake_lib : library);
    if (i % 2)
      daemon_start(&d, config, NULL);
    else
      daemon_start(&d, "--default-backend", "auto", NULL);
    unsetenv("GPUSHM_FAKE_CUDA_NO_VMM");
    setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1); /* this process imports with the fake */
    conn = daemon_connect(&d);
    CHECK(gpushm_daemon_default_backend(conn) == cases[i / 2].expect);
    CHECK_OK(gpushm_buffer_create(conn, "by-default", 1, NULL, &b));
    CHECK(gpushm_buffer_backend(b) == cases[i / 2].expect);
    CHECK_OK(gpushm_buffer_close(b));
    gpushm_disconnect(conn);
    daemon_stop(&d);
  }
}

/* gpushmd never joins an MPS server, whatever its environment says: its cuInit sees
 * a pipe directory that cannot exist. */
static void test_outside_mps(void)
{
  struct test_daemon d = { 0 };
  char log[512], line[256], expect[64];
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  gpushm_t *conn;
  FILE *f;
  int seen = 0;

  setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/some-mps-pipe", 1);
  snprintf(log, sizeof log, "/tmp/gpushm-init-log.%d", (int)getpid());
  unlink(log);
  setenv("GPUSHM_FAKE_CUDA_INIT_LOG", log, 1);
  start(&d, fake_lib, NULL, NULL);
  unsetenv("GPUSHM_FAKE_CUDA_INIT_LOG");
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  conn = daemon_connect(&d);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  CHECK_OK(gpushm_buffer_create(conn, "initialised", 1, &opts, &b)); /* the daemon's cuInit */
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  snprintf(expect, sizeof expect, "%d ", (int)d.pid);
  CHECK((f = fopen(log, "r")) != NULL);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, expect, strlen(expect)) == 0) {
      seen = 1;
      CHECK(strncmp(line + strlen(expect), "/dev/null/", 10) == 0);
    }
  fclose(f);
  CHECK(seen);
  unlink(log);
  daemon_stop(&d);
}

int main(void)
{
  fake_lib = getenv("GPUSHM_FAKE_CUDA_LIB");
  if (!fake_lib || access(fake_lib, R_OK) != 0) {
    test_log("built without CUDA headers: no fake driver to test against");
    return TEST_SKIP;
  }
  test_unavailable();
  test_out_of_memory();
  test_export_failure();
  test_sticky_error();
  test_device_limit();
  test_fd_backend_faults();
  test_legacy_ipc_policy();
  test_outside_mps();
  test_default_backend_auto();
  return 0;
}
