/* SPDX-License-Identifier: MIT */
/* --busy-poll: after a request the loop polls its sockets without sleeping for a window,
 * so that a client's next request, if it comes within it, costs gpushmd no wake-up.  A
 * CPU is kept busy meanwhile: for hosts that give one to latency. */
#ifndef GPUSHMD_BUSY_POLL_H
#define GPUSHMD_BUSY_POLL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct busy_poll {
  uv_idle_t idle; /* while active, libuv polls with a zero timeout */
  uint64_t window_ns; /* 0: off */
  uint64_t last_request_ns;
  bool closed;
};

void busy_poll_init(struct busy_poll *bp, uv_loop_t *loop, uint32_t window_us);
/* A settings reload: a window of 0 stops polling at once. */
void busy_poll_set(struct busy_poll *bp, uint32_t window_us);
/* A request came at now_ns (CLOCK_MONOTONIC): poll for the window from then. */
void busy_poll_request(struct busy_poll *bp, uint64_t now_ns);
void busy_poll_close(struct busy_poll *bp);

#endif
