/* SPDX-License-Identifier: MIT */
/* What sync buffers (sync.c) and timelines (timeline.c) share: a counter published in a
 * control block, its promises and the waits for its values (docs/sync.md). */
#ifndef GPUSHM_CLIENT_SYNC_H
#define GPUSHM_CLIENT_SYNC_H

#include "buffer.h"
#include "device.h"

#include <sched.h>

/* Queues (or makes) the completion marker of value v behind s's work (s NULL: the
 * CPU's, done now); 0 or a GPUSHM_E_*. */
typedef int (*client_sync_mark_fn)(struct client_mapping *buf, const struct client_stream *s,
                                   uint64_t v);
/* Publishes value want (0: the next number) once mark() has queued its marker: refused
 * if not above the counter or owed by another connection's promise.  *seq: what was
 * published. */
int client_sync_publish(struct client_mapping *buf, const gpushm_t *conn,
                        const struct client_stream *s, client_sync_mark_fn mark, uint64_t want,
                        uint64_t *seq);
/* Wakes whoever sleeps on the counter after a publication. */
void client_sync_wake(struct client_mapping *buf, const gpushm_t *conn);
/* Sleeps until ctl's wake word or its sequence's word changes from w and last (what the
 * caller read before its last check), or for slice_ns at most: what a signaller's
 * client_sync_wake() ends. */
void client_sync_sleep(struct sync_control *ctl, uint32_t w, uint64_t last, uint64_t slice_ns);
/* Waits in this thread until value is published, or (promised_enough) promised by a live
 * promiser, up to timeout_ms (< 0: for ever) by deadline (CLOCK_MONOTONIC ns). */
int client_sync_wait_published(struct client_mapping *buf, uint64_t value, bool promised_enough,
                               int timeout_ms, uint64_t deadline);
/* GPUSHM_E_LOST, said for value of buf. */
int client_sync_lost_error(const struct client_mapping *buf, uint64_t value);
/* gpushm_buffer_promise(), _value_lost() and _sync_state() for any handle with a control
 * block (the public ones take sync buffers only). */
int client_sync_promise(gpushm_buffer_t *handle, uint64_t upto);
int client_sync_value_lost(const gpushm_buffer_t *handle, uint64_t value);
int client_sync_state(const gpushm_buffer_t *handle, gpushm_sync_state_t *out);
uint64_t client_sync_now_ns(void);
/* One pause of a spinning waiter. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* A waiter spins before it sleeps: a signaller on another CPU answers within a
 * microsecond or two, sooner than a futex wake-up. A signaller waiting for this CPU
 * cannot answer while it spins, though: with a ring's producer and consumer on one CPU,
 * each wait spun its whole 50 us away (57-60 us a 4 KiB frame, 9-14 socket round trips,
 * on the 2-core CI machine: bench-handoff-host's ring line). So every
 * SPIN_YIELD_EVERY-th step yields: a signaller runnable here gets the CPU (1.3 round
 * trips a frame since), and with nobody else runnable here the yield returns at once.
 * Not sooner than 64: yielding every 32 steps cost a cross-CPU ring 12% a frame.
 * step counts from 0 in each wait. */
#define SPIN_YIELD_EVERY 64u

static inline void spin_wait_step(unsigned step)
{
  if (step % SPIN_YIELD_EVERY == SPIN_YIELD_EVERY - 1)
    sched_yield();
  else
    cpu_relax();
}

#endif
