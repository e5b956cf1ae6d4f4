/* SPDX-License-Identifier: MIT */
/* Facts for weight sets (docs/weights.md), no gpushm: what the first copy out of a
 * fresh mapping of device memory costs against the same copy again, by the alignment
 * of the mapping's address range.  One cuMemCreate'd allocation (the set), written
 * through a first mapping; then for each alignment a second mapping (as a reader's
 * import makes), its first copy whole into memory of this process's own, the same copy
 * again, unmapped.  Prints rows; not part of make check.  Needs a GPU (77 without). */
#include "config.h"
#include "cuda-test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
  for (int round = 0; round < 3; round++)
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
  }
  return 0;
}
