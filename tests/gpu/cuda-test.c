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
