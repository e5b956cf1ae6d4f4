/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/busy_poll.h"

#include <sched.h>
#include <time.h>

static uint64_t monotonic_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Runs once per turn of the loop while polling: stops once the window has passed with
 * no request, and the loop sleeps in epoll_wait again. */
static void on_idle(uv_idle_t *idle)
{
  struct busy_poll *bp = idle->data;

  if (monotonic_ns() - bp->last_request_ns >= bp->window_ns)
    uv_idle_stop(idle);
  else
    sched_yield(); /* a client that shares this CPU may be the one about to ask */
}

void busy_poll_init(struct busy_poll *bp, uv_loop_t *loop, uint32_t window_us)
{
  uv_idle_init(loop, &bp->idle);
  bp->idle.data = bp;
  bp->last_request_ns = 0;
  bp->closed = false;
  busy_poll_set(bp, window_us);
}

void busy_poll_set(struct busy_poll *bp, uint32_t window_us)
{
  bp->window_ns = (uint64_t)window_us * 1000u;
  if (!bp->window_ns && !bp->closed)
    uv_idle_stop(&bp->idle);
}

void busy_poll_request(struct busy_poll *bp, uint64_t now_ns)
{
  if (!bp || !bp->window_ns || bp->closed)
    return;
  bp->last_request_ns = now_ns;
  if (!uv_is_active((uv_handle_t *)&bp->idle))
    uv_idle_start(&bp->idle, on_idle);
}

void busy_poll_close(struct busy_poll *bp)
{
  if (bp->closed)
    return;
  bp->closed = true;
  uv_close((uv_handle_t *)&bp->idle, NULL);
}
