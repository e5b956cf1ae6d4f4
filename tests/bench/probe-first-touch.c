/* SPDX-License-Identifier: MIT */
/* Facts for weight sets (docs/weights.md), no gpushm: what the first copy out of a
 * fresh mapping of device memory costs against the same copy again, by the alignment
 * of the mapping's address range; what of a mapping's cost is cuMemMap and what
 * cuMemSetAccess; and whether mapping in pieces, each piece's copy issued as soon as it
 * is mapped, hides the mapping behind the copy.  One cuMemCreate'd allocation (the
 * set), written through a first mapping; then mappings of it as a reader's import
 * makes them.  Prints rows; not part of make check.  Needs a GPU (77 without). */
#include "config.h"
#include "cuda-test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define BYTES (16ull << 30)

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double timed_copy(CUdeviceptr dst, CUdeviceptr src, CUstream s)
{
  double t0 = now_ms();
  CU_CHECK(CU_CALL(&drv, cuMemcpyDtoDAsync, dst, src, BYTES, s));
  CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  return now_ms() - t0;
}

static CUdeviceptr map_at(CUmemGenericAllocationHandle h, size_t align, double *map_ms)
{
  CUmemAccessDesc access = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
  CUdeviceptr va;
  double t0 = now_ms();

  CU_CHECK(CU_CALL(&drv, cuMemAddressReserve, &va, BYTES, align, 0, 0));
  CU_CHECK(CU_CALL(&drv, cuMemMap, va, BYTES, 0, h, 0));
  CU_CHECK(CU_CALL(&drv, cuMemSetAccess, va, BYTES, &access, 1));
  *map_ms = now_ms() - t0;
  return va;
}

static void unmap(CUdeviceptr va)
{
  CU_CHECK(CU_CALL(&drv, cuMemUnmap, va, BYTES));
  CU_CHECK(CU_CALL(&drv, cuMemAddressFree, va, BYTES));
}


static const CUmemAccessDesc read_access = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
                                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READ };

/* The piece sizes tried: 0 the whole set at once; else the first piece, doubled each time
 * up to the last size. */
struct pieces {
  size_t first, most;
};

static const struct pieces pieces[] = {
  { BYTES, BYTES }, { 64ull << 20, 1ull << 30 }, { 256ull << 20, 2ull << 30 },
  { 1ull << 30, 1ull << 30 }, { 2ull << 30, 2ull << 30 },
};

/* A copy of the set out of a fresh import of it, mapped three ways, against floor_ms
 * (the same copy out of memory mapped all along, just before): (a) cuMemMap and
 * cuMemSetAccess whole, each timed, then the copy; (b) cuMemMap whole, then per piece
 * cuMemSetAccess and its copy; (c) per piece cuMemMap at its offset, cuMemSetAccess and
 * its copy, unmapped in one call over all pieces when the driver takes that. */
static void piecewise(int fd, struct pieces p, CUdeviceptr dst, CUdeviceptr own, CUstream s,
                      double floor_ms)
{
  for (int how = 0; how < 3; how++) {
    CUmemGenericAllocationHandle imported;
    CUdeviceptr va;
    double t0 = now_ms(), t_map = 0, t_access = 0, total;
    size_t n = 0, len = p.first;
    CUresult r = CUDA_SUCCESS;

    if (how == 0 && p.first != BYTES)
      continue;
    CU_CHECK(CU_CALL(&drv, cuMemImportFromShareableHandle, &imported, (void *)(uintptr_t)fd,
                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CU_CHECK(CU_CALL(&drv, cuMemAddressReserve, &va, BYTES, 0, 0, 0));
    if (how < 2) {
      double t1 = now_ms();
      CU_CHECK(CU_CALL(&drv, cuMemMap, va, BYTES, 0, imported, 0));
      t_map = now_ms() - t1;
    }
    for (size_t off = 0; off < BYTES; off += len, len = len * 2 > p.most ? p.most : len * 2) {
      double t1;
      if (len > BYTES - off)
        len = BYTES - off;
      if (how == 2) {
        t1 = now_ms();
        if ((r = CU_CALL(&drv, cuMemMap, va + off, len, off, imported, 0)) != CUDA_SUCCESS)
          break;
        t_map += now_ms() - t1;
      }
      t1 = now_ms();
      if ((r = CU_CALL(&drv, cuMemSetAccess, va + off, len, &read_access, 1)) != CUDA_SUCCESS)
        break;
      t_access += now_ms() - t1;
      CU_CHECK(CU_CALL(&drv, cuMemcpyDtoDAsync, dst + off, va + off, len, s));
      n++;
    }
    CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
    total = now_ms() - t0;
    if (r != CUDA_SUCCESS) {
      printf("pieces %zu..%zu MiB, %s: refused at piece %zu (%d)\n", p.first >> 20,
             p.most >> 20, how == 1 ? "access per piece" : "mapped per piece", n, (int)r);
    } else {
      printf("pieces %zu..%zu MiB (%zu), %s: import+map+copy %.3f ms vs floor %.3f = %.3f x; "
             "cuMemMap %.3f ms, cuMemSetAccess %.3f ms\n", p.first >> 20, p.most >> 20, n,
             how == 0 ? "whole" : how == 1 ? "access per piece" : "mapped per piece",
             total, floor_ms, total / floor_ms, t_map, t_access);
    }
    if (how < 2 || (r = CU_CALL(&drv, cuMemUnmap, va, BYTES)) != CUDA_SUCCESS) {
      if (how == 2)
        printf("  cuMemUnmap over all pieces refused (%d): per piece\n", (int)r);
      size_t o = 0, l = p.first;
      for (; how == 2 && o < BYTES; o += l, l = l * 2 > p.most ? p.most : l * 2) {
        if (l > BYTES - o)
          l = BYTES - o;
        CU_CALL(&drv, cuMemUnmap, va + o, l);
      }
      if (how < 2)
        CU_CHECK(CU_CALL(&drv, cuMemUnmap, va, BYTES));
    }
    CU_CHECK(CU_CALL(&drv, cuMemAddressFree, va, BYTES));
    CU_CHECK(CU_CALL(&drv, cuMemRelease, imported));
  }
  (void)own;
}

/* Whether importing and mapping memory waits for stream work in flight: 16 allocations
 * of 1 GiB (exported fds), each imported and mapped (timed call by call) with the GPU
 * idle, then again while one copy of the whole set runs; the copy alone beside them. */
static void map_while_copying(CUdeviceptr dst, CUdeviceptr src, CUstream s)
{
  enum { PIECES = 16 };
  const size_t piece = 1ull << 30;
  CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                               .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                               .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
  CUmemGenericAllocationHandle made[PIECES];
  int fds[PIECES];

  for (int i = 0; i < PIECES; i++) {
    CU_CHECK(CU_CALL(&drv, cuMemCreate, &made[i], piece, &prop, 0));
    CU_CHECK(CU_CALL(&drv, cuMemExportToShareableHandle, &fds[i], made[i],
                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  }
  for (int busy = 0; busy < 2; busy++)
    for (int round = 0; round < 3; round++) {
      CUmemGenericAllocationHandle h[PIECES];
      CUdeviceptr va[PIECES];
      double t_import = 0, t_map = 0, t_access = 0, worst = 0, t0 = now_ms(), t_calls, total;

      if (busy)
        CU_CHECK(CU_CALL(&drv, cuMemcpyDtoDAsync, dst, src, BYTES, s));
      for (int i = 0; i < PIECES; i++) {
        double a = now_ms(), b, c, e;
        CU_CHECK(CU_CALL(&drv, cuMemImportFromShareableHandle, &h[i], (void *)(uintptr_t)fds[i],
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        b = now_ms();
        CU_CHECK(CU_CALL(&drv, cuMemAddressReserve, &va[i], piece, 0, 0, 0));
        CU_CHECK(CU_CALL(&drv, cuMemMap, va[i], piece, 0, h[i], 0));
        c = now_ms();
        CU_CHECK(CU_CALL(&drv, cuMemSetAccess, va[i], piece, &read_access, 1));
        e = now_ms();
        t_import += b - a;
        t_map += c - b;
        t_access += e - c;
        if (e - a > worst)
          worst = e - a;
      }
      t_calls = now_ms() - t0;
      CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
      total = now_ms() - t0;
      printf("16 x 1 GiB imported and mapped, GPU %s: calls %.3f ms (import %.3f, reserve+map "
             "%.3f, access %.3f; slowest piece %.3f); with the copy done %.3f ms\n",
             busy ? "copying 16 GiB meanwhile" : "idle", t_calls, t_import, t_map, t_access,
             worst, total);
      for (int i = 0; i < PIECES; i++) {
        CU_CHECK(CU_CALL(&drv, cuMemUnmap, va[i], piece));
        CU_CHECK(CU_CALL(&drv, cuMemAddressFree, va[i], piece));
        CU_CHECK(CU_CALL(&drv, cuMemRelease, h[i]));
      }
    }
  printf("the copy alone: %.3f ms\n", timed_copy(dst, src, s));
  for (int i = 0; i < PIECES; i++) {
    close(fds[i]);
    CU_CHECK(CU_CALL(&drv, cuMemRelease, made[i]));
  }
}

int main(void)
{
  static const size_t aligns[] = { 0, 2ull << 20, 512ull << 20, 1ull << 30, 2ull << 30 };
  CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                               .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                               .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
  CUmemGenericAllocationHandle h;
  CUdeviceptr first, dst, own;
  size_t gmin = 0, grec = 0;
  CUstream s;
  double map_ms;

  cuda_test_setup(1);
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  CU_CHECK(CU_CALL(&drv, cuMemGetAllocationGranularity, &gmin, &prop,
                   CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CU_CHECK(CU_CALL(&drv, cuMemGetAllocationGranularity, &grec, &prop,
                   (CUmemAllocationGranularity_flags)1 /* RECOMMENDED */));
  printf("probe-first-touch: granularity minimum %zu, recommended %zu\n", gmin, grec);
  CU_CHECK(CU_CALL(&drv, cuMemCreate, &h, BYTES, &prop, 0));
  first = map_at(h, 0, &map_ms);
  CU_CHECK(CU_CALL(&drv, cuMemsetD32, first, 0x12341234u, BYTES / 4));
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &dst, BYTES));
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &own, BYTES));
  CU_CHECK(CU_CALL(&drv, cuMemsetD32, own, 0, BYTES / 4));
  CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
  printf("the first mapping, warm (written through it): %.3f ms; own cuMemAlloc: %.3f ms\n",
         timed_copy(dst, first, s), timed_copy(dst, own, s));
  for (int round = 0; round < 1; round++)
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
      CUdeviceptr va = map_at(h, aligns[i], &map_ms);
      double a = timed_copy(dst, va, s), b = timed_copy(dst, va, s), c = timed_copy(dst, own, s);
      double t0 = now_ms();
      unmap(va);
      printf("alignment %5zu MiB (va %#llx): map %.3f ms, first copy %.3f ms, again %.3f, "
             "own %.3f: first/again %.3f; unmap %.3f ms\n", aligns[i] >> 20,
             (unsigned long long)va, map_ms, a, b, c, a / b, now_ms() - t0);
    }
  /* as a reader's open does it: the allocation imported from its exported fd, mapped */
  {
    int fd = -1;
    CU_CHECK(CU_CALL(&drv, cuMemExportToShareableHandle, &fd, h,
                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    for (int round = 0; round < 5; round++) {
      CUmemGenericAllocationHandle imported;
      double t0 = now_ms(), import_ms;
      CU_CHECK(CU_CALL(&drv, cuMemImportFromShareableHandle, &imported,
                       (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      import_ms = now_ms() - t0;
      CUdeviceptr va = map_at(imported, 0, &map_ms);
      double a = timed_copy(dst, va, s), b = timed_copy(dst, va, s);
      unmap(va);
      CU_CHECK(CU_CALL(&drv, cuMemRelease, imported));
      printf("imported from its fd: import %.3f ms, map %.3f ms, first copy %.3f ms, again "
             "%.3f\n", import_ms, map_ms, a, b);
    }
    map_while_copying(dst, own, s);
    for (int round = 0; round < 1; round++)
      for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        double floor_ms = timed_copy(dst, own, s);
        piecewise(fd, pieces[i], dst, own, s, floor_ms);
      }
  }
  return 0;
}
