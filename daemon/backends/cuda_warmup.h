/* SPDX-License-Identifier: MIT */
/* Making a device's primary context takes 100-350 ms, which must never happen on the
 * event loop: a request that needs a device not warm yet waits while the context is
 * made on libuv's thread pool, one warm-up per device at a time.  done() runs on the
 * loop with 0, or a PROTO_E_* and why (a sticky error also stops the daemon through
 * backend_cuda's fatal hook). */
#ifndef GPUSHMD_CUDA_WARMUP_H
#define GPUSHMD_CUDA_WARMUP_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "gpushm_limits.h"

struct cuda_warmup {
  uv_loop_t *loop;
  void (*done)(void *ctx, int device, int status, const char *why);
  void *ctx;
  struct cuda_warmup_device {
    uv_work_t work;
    struct cuda_warmup *owner;
    int device;
    int result; /* the CUresult, from the worker */
    bool busy;
    uint64_t started_ms;
  } devices[GPUSHM_LIMIT_DEVICES];
};

void cuda_warmup_init(struct cuda_warmup *w, uv_loop_t *loop,
                      void (*done)(void *ctx, int device, int status, const char *why), void *ctx);
/* Whether requests on device can go on now; a device the daemon does not have (an
 * ordinal out of range) counts as warm: the request itself then says what is wrong. */
bool cuda_warmup_ready(int device);
/* Starts warming device unless that is under way already; done() follows either way. */
void cuda_warmup_start(struct cuda_warmup *w, int device);

#endif
