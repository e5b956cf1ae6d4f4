/* SPDX-License-Identifier: MIT */
/* What the GPU tests and the benchmark share: the driver table, a checked call, and
 * a current context on device 0. */
#ifndef GPUSHM_CUDA_TEST_H
#define GPUSHM_CUDA_TEST_H

#include "driver.h"
#include "harness.h"

extern struct cuda_driver drv;

#define CU_CHECK(call)                                                             \
  do {                                                                             \
    CUresult cu_r_ = (call);                                                       \
    if (cu_r_ != CUDA_SUCCESS) {                                                   \
      char cu_text_[160];                                                          \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                \
              cuda_error_text(&drv, cu_r_, cu_text_, sizeof cu_text_));            \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

/* Loads the driver and makes device 0's primary context current.  Without a driver
 * or device: exits 77 (skip) if skip_without_gpu, else 1. */
void cuda_test_setup(int skip_without_gpu);

/* Under MPS (scripts/gpu-host-test runs the GPU tests a second time with an MPS
 * control daemon up), a test process whose children run as another uid keeps itself
 * out of MPS, as gpushmd does: MPS serves one uid at a time, and a parent holding a
 * root server busy would make its uid-65534 children wait for ever.  The children
 * (cuda_test_child_env() after fork, before exec) use MPS as they found it. */
void cuda_test_parent_outside_mps(void);
void cuda_test_child_env(void);

/* Loads the test kernels (ptx, from tests/gpu/kernels.cu) into the current context:
 * CUDA_SUCCESS, or CUDA_ERROR_NOT_SUPPORTED from a driver that runs no kernels (the
 * fake).  A real driver given no PTX (a build without nvcc) ends the test, saying so. */
CUresult cuda_test_load_module(const char *ptx, CUmodule *mod);

/* A buffer's device pointer (for the device it is mapped for). */
CUdeviceptr cuda_test_dptr(gpushm_buffer_t *b);
/* A known pattern: word i of a buffer filled with seed. */
uint32_t cuda_test_word(uint64_t i, uint32_t seed);
/* Fills bytes at p with the pattern (through the current context, then synchronised);
 * verify copies them back and compares every word, saying where the first differs. */
void cuda_test_fill(CUdeviceptr p, uint64_t bytes, uint32_t seed);
int cuda_test_verify(CUdeviceptr p, uint64_t bytes, uint32_t seed);

#endif
