/* SPDX-License-Identifier: MIT */
/* Test helper: a persistent buffer holding a file's bytes, for gpushmctl dump to read
 * back (tests/integration/test-ctl.sh).
 *
 *   load-buffer NAME FILE [BACKEND [MODE]]
 *
 * BACKEND as gpushmctl names it (default: the daemon's); MODE octal (default 0600).
 * Device memory is written through the CUDA driver table, as an application's copy
 * would be ($GPUSHM_CUDA_LIBRARY: the fake driver in CI).  Exit status: 0 ok, 1 failure
 * (the reason on stderr), 2 usage. */
#include "config.h"
#include "gpushm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

static int fail(const char *what, int r)
{
  fprintf(stderr, "load-buffer: %s: %s (%s)\n", what, gpushm_strerror(r),
          gpushm_last_error_message());
  return 1;
}

static int device_write(gpushm_buffer_t *b, const void *data, size_t n)
{
  static struct cuda_driver drv;
  char err[256];
  CUcontext ctx;
  CUdevice dev;

  if (cuda_driver_load(&drv, err, sizeof err) < 0) {
    fprintf(stderr, "load-buffer: %s\n", err);
    return 1;
  }
  if (CU_CALL(&drv, cuInit, 0) != CUDA_SUCCESS ||
      CU_CALL(&drv, cuDeviceGet, &dev, gpushm_buffer_map_device(b)) != CUDA_SUCCESS ||
      CU_CALL(&drv, cuDevicePrimaryCtxRetain, &ctx, dev) != CUDA_SUCCESS ||
      CU_CALL(&drv, cuCtxSetCurrent, ctx) != CUDA_SUCCESS ||
      CU_CALL(&drv, cuMemcpyHtoD, (CUdeviceptr)(uintptr_t)gpushm_buffer_ptr(b), data, n) !=
        CUDA_SUCCESS) {
    fprintf(stderr, "load-buffer: the copy to device memory failed\n");
    return 1;
  }
  CU_CALL(&drv, cuDevicePrimaryCtxRelease, dev);
  return 0;
}

int main(int argc, char **argv)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  gpushm_t *conn;
  char *data;
  long n;
  FILE *f;
  int r;

  if (argc < 3 || argc > 5)
    return 2;
  if (!(f = fopen(argv[2], "rb")) || fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) <= 0) {
    perror(argv[2]);
    return 1;
  }
  rewind(f);
  if (!(data = malloc((size_t)n)) || fread(data, 1, (size_t)n, f) != (size_t)n) {
    perror(argv[2]);
    return 1;
  }
  fclose(f);
  gpushm_create_opts_init(&opts);
  if (argc > 3 && (r = gpushm_backend_from_name(argv[3])) <= 0) {
    fprintf(stderr, "load-buffer: unknown backend '%s'\n", argv[3]);
    return 2;
  }
  opts.backend = argc > 3 ? (uint32_t)r : 0;
  opts.mode = argc > 4 ? (uint32_t)strtoul(argv[4], NULL, 8) : 0600;
  if ((r = gpushm_connect(NULL, "load-buffer", &conn)) < 0)
    return fail("connect", r);
  if ((r = gpushm_buffer_create(conn, argv[1], (uint64_t)n, &opts, &b)) < 0)
    return fail(argv[1], r);
  if (gpushm_buffer_backend(b) == GPUSHM_BACKEND_HOST)
    memcpy(gpushm_buffer_ptr(b), data, (size_t)n);
  else if (device_write(b, data, (size_t)n))
    return 1;
  if ((r = gpushm_buffer_close(b)) < 0)
    return fail("close", r);
  gpushm_disconnect(conn);
  free(data);
  return 0;
}
