/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "backends/cuda_warmup.h"
#include "backends/backend_cuda.h"
#include "protocol.h"
#include "util/log.h"

#include <stdio.h>
#include <string.h>

void cuda_warmup_init(struct cuda_warmup *w, uv_loop_t *loop,
                      void (*done)(void *ctx, int device, int status, const char *why), void *ctx)
{
  memset(w, 0, sizeof *w);
  w->loop = loop;
  w->done = done;
  w->ctx = ctx;
}

bool cuda_warmup_ready(int device)
{
  return device < 0 || device >= backend_cuda_device_count() || backend_cuda_device_ready(device);
}

static void warm_work(uv_work_t *req)
{
  struct cuda_warmup_device *d = req->data;
  d->result = backend_cuda_warm(d->device);
}

static void warm_done(uv_work_t *req, int status)
{
  struct cuda_warmup_device *d = req->data;
  struct cuda_warmup *w = d->owner;
  char err[256] = "";
  int r;

  d->busy = false;
  if (status < 0) {
    snprintf(err, sizeof err, "warming device %d: %s", d->device, uv_strerror(status));
    r = PROTO_E_IO;
  } else {
    r = backend_cuda_warm_result(d->device, d->result, err, sizeof err);
  }
  if (r == 0)
    log_info("device %d ready (context made in %llu ms, off the event loop)", d->device,
             (unsigned long long)(uv_now(w->loop) - d->started_ms));
  else
    log_warn("device %d: %s", d->device, err);
  w->done(w->ctx, d->device, r, err);
}

void cuda_warmup_start(struct cuda_warmup *w, int device)
{
  struct cuda_warmup_device *d = &w->devices[device];

  if (d->busy)
    return; /* its end tells everyone waiting */
  d->busy = true;
  d->owner = w;
  d->device = device;
  d->work.data = d;
  d->started_ms = uv_now(w->loop);
  if (uv_queue_work(w->loop, &d->work, warm_work, warm_done) < 0) {
    /* Cannot happen with these arguments; if it did, block rather than lose requests. */
    warm_work(&d->work);
    warm_done(&d->work, 0);
  }
}
