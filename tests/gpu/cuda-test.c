/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "cuda-test.h"

struct cuda_driver drv;

void cuda_test_setup(int skip_without_gpu)
{
  char err[256];
  CUcontext ctx;
  CUdevice dev;
  int count = 0;

  if (cuda_driver_load(&drv, err, sizeof err) < 0) {
    test_log("%s", err);
    exit(skip_without_gpu ? TEST_SKIP : 1);
  }
  if (CU_CALL(&drv, cuInit, 0) != CUDA_SUCCESS ||
      CU_CALL(&drv, cuDeviceGetCount, &count) != CUDA_SUCCESS || count == 0) {
    test_log("no usable CUDA device");
    exit(skip_without_gpu ? TEST_SKIP : 1);
  }
  CU_CHECK(CU_CALL(&drv, cuDeviceGet, &dev, 0));
  CU_CHECK(CU_CALL(&drv, cuDevicePrimaryCtxRetain, &ctx, dev));
  CU_CHECK(CU_CALL(&drv, cuCtxSetCurrent, ctx));
}

#define SAVED_MPS_PIPE "GPUSHM_TEST_MPS_PIPE_DIRECTORY"

void cuda_test_parent_outside_mps(void)
{
  const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
  setenv(SAVED_MPS_PIPE, pipe ? pipe : "", 1);
  setenv("CUDA_MPS_PIPE_DIRECTORY", "/dev/null/test-stays-outside-mps", 1);
}

void cuda_test_child_env(void)
{
  const char *saved = getenv(SAVED_MPS_PIPE);
  if (!saved)
    return;
  if (*saved)
    setenv("CUDA_MPS_PIPE_DIRECTORY", saved, 1);
  else
    unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  unsetenv(SAVED_MPS_PIPE);
}

CUresult cuda_test_load_module(const char *ptx, CUmodule *mod)
{
  CUresult r = CU_CALL(&drv, cuModuleLoadData, mod, ptx);

  if (r != CUDA_ERROR_NOT_SUPPORTED && !ptx[0]) {
    test_log("this test was built without nvcc, so it has no kernels to run on this GPU: "
             "configure with the CUDA toolkit (--with-cuda=DIR) to test on a GPU");
    exit(1);
  }
  CU_CHECK(r == CUDA_ERROR_NOT_SUPPORTED ? CUDA_SUCCESS : r);
  return r;
}

CUdeviceptr cuda_test_dptr(gpushm_buffer_t *b)
{
  return (CUdeviceptr)(uintptr_t)gpushm_buffer_ptr(b);
}

uint32_t cuda_test_word(uint64_t i, uint32_t seed)
{
  return (uint32_t)(i * 2654435761u) ^ seed ^ (uint32_t)(i >> 32);
}

#define CHUNK (16u << 20)

void cuda_test_fill(CUdeviceptr p, uint64_t bytes, uint32_t seed)
{
  static uint32_t host[CHUNK / 4];
  for (uint64_t off = 0; off < bytes; off += CHUNK) {
    uint64_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
    for (uint64_t i = 0; i < n / 4; i++)
      host[i] = cuda_test_word(off / 4 + i, seed);
    CU_CHECK(CU_CALL(&drv, cuMemcpyHtoD, p + off, host, n));
  }
  CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
}

int cuda_test_verify(CUdeviceptr p, uint64_t bytes, uint32_t seed)
{
  static uint32_t host[CHUNK / 4];
  for (uint64_t off = 0; off < bytes; off += CHUNK) {
    uint64_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
    CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, host, p + off, n));
    for (uint64_t i = 0; i < n / 4; i++) {
      if (host[i] != cuda_test_word(off / 4 + i, seed)) {
        fprintf(stderr, "word %llu is %08x, expected %08x\n", (unsigned long long)(off / 4 + i),
                host[i], cuda_test_word(off / 4 + i, seed));
        return 0;
      }
    }
  }
  return 1;
}
