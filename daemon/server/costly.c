/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/costly.h"
#include "gpushm_limits.h"

#include <time.h>

#define BURST_NS ((int64_t)GPUSHM_LIMIT_COSTLY_BURST_US * 1000)

static uint64_t monotonic_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fill(struct costly_share *c, uint64_t now_ns)
{
  uint64_t elapsed = now_ns > c->filled_at_ns ? now_ns - c->filled_at_ns : 0;

  c->filled_at_ns = now_ns;
  /* past a second the bucket is full whatever it owed: no overflow below */
  if (elapsed >= 1000000000u) {
    c->tokens_ns = BURST_NS;
    return;
  }
  c->tokens_ns += (int64_t)(elapsed * GPUSHM_LIMIT_COSTLY_SHARE_PERCENT / 100u);
  if (c->tokens_ns > BURST_NS)
    c->tokens_ns = BURST_NS;
}

static void on_filled(uv_timer_t *timer);

/* Wakes when what is owed has been filled again (the loop's clock counts milliseconds:
 * at least one). */
static void arm(struct costly_share *c)
{
  uint64_t owed = c->tokens_ns < 0 ? (uint64_t)-c->tokens_ns : 0;
  uint64_t wait_ns = owed * 100u / GPUSHM_LIMIT_COSTLY_SHARE_PERCENT + 1;

  uv_timer_start(&c->timer, on_filled, (wait_ns + 999999u) / 1000000u, 0);
}

static void on_filled(uv_timer_t *timer)
{
  struct costly_share *c = timer->data;

  fill(c, monotonic_ns());
  while (c->tokens_ns > 0 && !list_empty(&c->waiting)) {
    struct list *link = c->waiting.next;
    list_del(link);
    c->resume(link); /* charges what it took */
  }
  if (!list_empty(&c->waiting))
    arm(c);
}

void costly_share_init(struct costly_share *c, uv_loop_t *loop, void (*resume)(struct list *))
{
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  c->tokens_ns = BURST_NS;
  c->filled_at_ns = monotonic_ns();
  list_init(&c->waiting);
  c->resume = resume;
}

void costly_share_close(struct costly_share *c)
{
  if (!uv_is_closing((uv_handle_t *)&c->timer))
    uv_close((uv_handle_t *)&c->timer, NULL);
}

bool costly_share_admit(struct costly_share *c, uint64_t now_ns)
{
  fill(c, now_ns);
  return c->tokens_ns > 0 && list_empty(&c->waiting);
}

void costly_share_wait(struct costly_share *c, struct list *link)
{
  list_add_tail(&c->waiting, link);
  if (!uv_is_active((uv_handle_t *)&c->timer))
    arm(c);
}

void costly_share_charge(struct costly_share *c, uint64_t ns)
{
  /* what one request can owe: a second (fill() forgives the rest after one) */
  c->tokens_ns -= ns > 1000000000u ? 1000000000 : (int64_t)ns;
}
