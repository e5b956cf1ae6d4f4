/* SPDX-License-Identifier: MIT */
/* The share of the loop that non-admins' costly requests may take, all of them
 * together.  A costly request is one whose cost grows with what the daemon holds
 * (stats, list, clients): one uid's stats flood from 200 connections, with 100,000
 * buffers, kept root's ping at p50 158 ms (issue 36).  A bucket of loop time fills at
 * GPUSHM_LIMIT_COSTLY_SHARE_PERCENT of the wall clock, up to GPUSHM_LIMIT_COSTLY_BURST_US,
 * and each such request empties it by what it took; one that finds it empty waits, in
 * arrival order, its connection paused, until it has filled again.  Admins never wait,
 * so that a flooded daemon stays inspectable.  Knows nothing of sessions: a waiter is
 * a list link, resumed through a callback. */
#ifndef GPUSHMD_COSTLY_H
#define GPUSHMD_COSTLY_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "util/list.h"

struct costly_share {
  uv_timer_t timer;
  int64_t tokens_ns;     /* loop time left; negative: owed */
  uint64_t filled_at_ns; /* CLOCK_MONOTONIC of the last fill */
  struct list waiting;   /* links of waiters, in arrival order */
  /* Runs a waiter's request now (it may end its session); its link is off the list. */
  void (*resume)(struct list *link);
};

void costly_share_init(struct costly_share *c, uv_loop_t *loop, void (*resume)(struct list *));
/* For shutdown: closes the timer (waiters are ended with their sessions). */
void costly_share_close(struct costly_share *c);
/* Whether a costly request may run now: loop time is left and nobody waits before it. */
bool costly_share_admit(struct costly_share *c, uint64_t now_ns);
/* Queues link until its turn (costly_share_admit said no). */
void costly_share_wait(struct costly_share *c, struct list *link);
/* A costly request took ns of the loop. */
void costly_share_charge(struct costly_share *c, uint64_t ns);

#endif
