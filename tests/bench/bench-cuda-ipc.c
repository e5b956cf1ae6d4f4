/* SPDX-License-Identifier: MIT */
/* Costs of sharing device memory through gpushmd, each printed with the floor it
 * is compared against, measured in the same run on the same GPU:
 *   open+close of a buffer    vs  raw cuIpcOpenMemHandle+Close plus two socket round trips
 *   open+close, cuda-fd       vs  the same over cuda-ipc (fd import + reserve + map +
 *                                 access, then unmap + free + release)
 *   cached reopen             vs  one socket round trip (what it avoids)
 *   copy out of an import     vs  the same copy between local buffers
 *   two GPUs: a copy into device 1 out of a buffer of device 0 mapped for device 1
 *   (cuda-ipc and cuda-fd)    vs  a raw peer copy (cuMemAlloc on device 0, peer access
 *                                 enabled, the same copy)
 * Not part of `make check` (no timing assertions there); run by gpu-host-test. */
#include "config.h"
#include "cuda-test.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 200
#define COPY_BYTES (1ull << 30)

static struct test_daemon d;


static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}


/* Best of 10 copies of COPY_BYTES from src to dst in the current context: bytes/s / 1e9. */
static double copy_gbs(CUdeviceptr dst, CUdeviceptr src)
{
  double best = 1e30, t;

  for (int i = 0; i < 10; i++) {
    CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
    t = now_us();
    CU_CHECK(CU_CALL(&drv, cuMemcpyDtoD, dst, src, COPY_BYTES));
    CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
    t = now_us() - t;
    best = t < best ? t : best;
  }
  return COPY_BYTES / best / 1e3;
}

/* Two GPUs: copies into device 1 out of device 0's memory, over NVLink or PCIe as the
 * host has it.  The floor is the driver's own peer copy; gpushm's buffers (of device 0,
 * cuda-ipc NAME and cuda-fd FD_NAME) are opened mapped for device 1. */
static void peer_copy_rows(gpushm_t *conn, const char *name, const char *fd_name)
{
  CUcontext ctx[2];
  CUdeviceptr raw_src, dst;
  gpushm_buffer_t *b;
  double raw_gbs, gbs[2];
  int count = 0, can = 0;
  CUresult r;

  CU_CHECK(CU_CALL(&drv, cuDeviceGetCount, &count));
  if (count < 2) {
    printf("bench: peer copy rows: one GPU here (they need two)\n");
    return;
  }
  for (int i = 0; i < 2; i++) {
    CUdevice dev;
    CU_CHECK(CU_CALL(&drv, cuDeviceGet, &dev, i));
    CU_CHECK(CU_CALL(&drv, cuDevicePrimaryCtxRetain, &ctx[i], dev));
  }
  CU_CHECK(CU_CALL(&drv, cuDeviceCanAccessPeer, &can, 1, 0));
  if (!can) {
    printf("bench: peer copy rows: device 1 has no peer access to device 0\n");
    return;
  }
  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx[0]));
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &raw_src, COPY_BYTES));
  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx[1]));
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &dst, COPY_BYTES));
  r = CU_CALL(&drv, cuCtxEnablePeerAccess, ctx[0], 0);
  CHECK(r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  raw_gbs = copy_gbs(dst, raw_src);
  for (int i = 0; i < 2; i++) {
    CHECK_OK(gpushm_buffer_open(conn, i ? fd_name : name, GPUSHM_MAP_DEVICE(1), &b));
    CHECK(gpushm_buffer_device(b) == 0 && gpushm_buffer_map_device(b) == 1);
    CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx[1]));
    gbs[i] = copy_gbs(dst, cuda_test_dptr(b));
    CHECK_OK(gpushm_buffer_close(b));
  }
  printf("bench: 1 GiB peer copy dev0 -> dev1, raw    %8.0f GB/s\n", raw_gbs);
  printf("bench: 1 GiB peer copy, cuda-ipc mapped on dev1 %4.0f GB/s   ratio to raw %.3f "
         "(target >= 0.98)\n", gbs[0], gbs[0] / raw_gbs);
  printf("bench: 1 GiB peer copy, cuda-fd mapped on dev1  %4.0f GB/s   ratio to raw %.3f "
         "(target >= 0.98)\n", gbs[1], gbs[1] / raw_gbs);
  CU_CHECK(CU_CALL(&drv, cuMemFree, dst));
  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx[0]));
  CU_CHECK(CU_CALL(&drv, cuMemFree, raw_src));
}

/* Child: everything measured from a consumer's side. argv: self child NAME HANDLE_HEX */
static int child(char **argv)
{
  double ping[ROUNDS], raw[ROUNDS], open_close[ROUNDS], cached[ROUNDS], fd_cycle[ROUNDS];
  double floor_us, cycle_us, t, local_gbs = 0, import_gbs = 0;
  CUipcMemHandle h;
  CUdeviceptr raw_ptr, local_a, local_b;
  gpushm_buffer_t *b, *again;
  gpushm_t *conn;

  cuda_test_setup(1);
  snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
  conn = daemon_connect(&d);
  for (int i = 0; i < 64; i++)
    sscanf(argv[3] + 2 * i, "%2hhx", (unsigned char *)&h.reserved[i]);

  for (int i = 0; i < ROUNDS; i++) {
    t = now_us();
    CHECK_OK(gpushm_ping(conn));
    ping[i] = now_us() - t;
  }
  /* first-ever open in a process costs more; warm both paths before timing */
  CU_CHECK(CU_CALL(&drv, cuIpcOpenMemHandle, &raw_ptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CU_CHECK(CU_CALL(&drv, cuIpcCloseMemHandle, raw_ptr));
  CHECK_OK(gpushm_buffer_open(conn, argv[2], 0, &b));
  CHECK_OK(gpushm_buffer_close(b));
  for (int i = 0; i < ROUNDS; i++) {
    t = now_us();
    CU_CHECK(CU_CALL(&drv, cuIpcOpenMemHandle, &raw_ptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CU_CHECK(CU_CALL(&drv, cuIpcCloseMemHandle, raw_ptr));
    raw[i] = now_us() - t;
    t = now_us();
    CHECK_OK(gpushm_buffer_open(conn, argv[2], 0, &b));
    CHECK_OK(gpushm_buffer_close(b));
    open_close[i] = now_us() - t;
  }
  CHECK_OK(gpushm_buffer_open(conn, "bench-fd", 0, &b));
  CHECK_OK(gpushm_buffer_close(b));
  for (int i = 0; i < ROUNDS; i++) {
    t = now_us();
    CHECK_OK(gpushm_buffer_open(conn, "bench-fd", 0, &b));
    CHECK_OK(gpushm_buffer_close(b));
    fd_cycle[i] = now_us() - t;
  }
  CHECK_OK(gpushm_buffer_open(conn, argv[2], 0, &b));
  for (int i = 0; i < ROUNDS; i++) {
    t = now_us();
    CHECK_OK(gpushm_buffer_open(conn, argv[2], 0, &again));
    cached[i] = now_us() - t;
    CHECK_OK(gpushm_buffer_close(again));
  }

  floor_us = median(raw, ROUNDS) + 2 * median(ping, ROUNDS);
  cycle_us = median(open_close, ROUNDS);
  printf("bench: socket round trip (ping)            %8.1f us\n", median(ping, ROUNDS));
  printf("bench: raw cuIpcOpenMemHandle+Close        %8.1f us\n", median(raw, ROUNDS));
  printf("bench: gpushm open+close, uncached         %8.1f us   ratio to floor (raw + 2 pings) %.2f\n",
         cycle_us, cycle_us / floor_us);
  printf("bench: gpushm open+close, cuda-fd          %8.1f us   ratio to cuda-ipc %.2f\n",
         median(fd_cycle, ROUNDS), median(fd_cycle, ROUNDS) / cycle_us);
  printf("bench: gpushm reopen, cached               %8.3f us   ratio to one ping %.4f\n",
         median(cached, ROUNDS), median(cached, ROUNDS) / median(ping, ROUNDS));

  /* copy bandwidth: out of the imported buffer vs between two local buffers */
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &local_a, COPY_BYTES));
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &local_b, COPY_BYTES));
  for (int pass = 0; pass < 2; pass++) {
    CUdeviceptr src = pass ? (CUdeviceptr)(uintptr_t)gpushm_buffer_ptr(b) : local_a;
    double best = 1e30;
    for (int i = 0; i < 10; i++) {
      CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
      t = now_us();
      CU_CHECK(CU_CALL(&drv, cuMemcpyDtoD, local_b, src, COPY_BYTES));
      CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
      t = now_us() - t;
      best = t < best ? t : best;
    }
    /* a device-to-device copy reads and writes every byte */
    *(pass ? &import_gbs : &local_gbs) = 2.0 * COPY_BYTES / best / 1e3;
  }
  printf("bench: 1 GiB DtoD copy, local -> local     %8.0f GB/s\n", local_gbs);
  printf("bench: 1 GiB DtoD copy, imported -> local  %8.0f GB/s   ratio to local %.3f\n",
         import_gbs, import_gbs / local_gbs);
  CU_CHECK(CU_CALL(&drv, cuMemFree, local_a));
  CU_CHECK(CU_CALL(&drv, cuMemFree, local_b));
  CHECK_OK(gpushm_buffer_close(b));
  peer_copy_rows(conn, argv[2], "bench-fd-1g");
  gpushm_disconnect(conn);
  return 0;
}

/* 20 creates of 64 MiB with opts, each unlinked and closed again. */
static void time_creates(gpushm_t *conn, const gpushm_create_opts_t *opts, double us[20])
{
  gpushm_buffer_t *b;
  double t;

  for (int i = 0; i < 20; i++) {
    char name[32];
    snprintf(name, sizeof name, "create-%d", i);
    t = now_us();
    CHECK_OK(gpushm_buffer_create(conn, name, 64ull << 20, opts, &b));
    us[i] = now_us() - t;
    CHECK_OK(gpushm_unlink(conn, name));
    CHECK_OK(gpushm_buffer_close(b));
  }
}

int main(int argc, char **argv)
{
  static char self[4096], hex[129];
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  gpushm_t *conn;
  CUdeviceptr mine;
  CUipcMemHandle h;
  double create_us[20];
  pid_t pid;

  if (argc > 1)
    return child(argv);
  cuda_test_setup(1);
  CHECK(readlink("/proc/self/exe", self, sizeof self - 1) > 0);

  /* the floor's handle: exported by this process, opened raw by the child */
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &mine, COPY_BYTES));
  CU_CHECK(CU_CALL(&drv, cuIpcGetMemHandle, &h, mine));
  for (int i = 0; i < 64; i++)
    snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h.reserved[i]);

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  time_creates(conn, &opts, create_us);
  printf("bench: create 64 MiB (alloc+export+map)    %8.1f us   (median of 20, first %.0f us)\n",
         median(create_us + 1, 19), create_us[0]);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  time_creates(conn, &opts, create_us);
  printf("bench: create 64 MiB cuda-fd (create+export+import+map) %8.1f us   (median of 20)\n",
         median(create_us + 1, 19));
  CHECK_OK(gpushm_buffer_create(conn, "bench-fd", 64ull << 20, &opts, &b));
  CHECK_OK(gpushm_buffer_close(b)); /* kept by its name */
  CHECK_OK(gpushm_buffer_create(conn, "bench-fd-1g", COPY_BYTES, &opts, &b));
  CHECK_OK(gpushm_buffer_close(b)); /* kept by its name, for the peer copy rows */
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  CHECK_OK(gpushm_buffer_create(conn, "bench", COPY_BYTES, &opts, &b));

  fflush(stdout);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("GPUSHM_SOCKET", d.socket, 1);
    execl(self, self, "child", "bench", hex, (char *)NULL);
    _exit(127);
  }
  check_child(pid);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  CU_CHECK(CU_CALL(&drv, cuMemFree, mine));
  return 0;
}
