/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/name_waits.h"

#include <string.h>
#include <time.h>

static uint64_t monotonic_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_timer(uv_timer_t *timer);

/* The timer, set for the earliest deadline, or at once for a wait whose name was made
 * (a walk of the waits: there are at most as many as connections, and a wait is added
 * or ended once a request). */
static void rearm(struct name_waits *nw)
{
  uint64_t earliest = UINT64_MAX, now;

  if (nw->closed)
    return;
  for (struct list *l = nw->waiting.next; l != &nw->waiting; l = l->next) {
    const struct name_wait *w = list_entry(l, struct name_wait, link);
    uint64_t due = w->made ? 0 : w->deadline_ns; /* a made one: at once */
    if (due < earliest)
      earliest = due;
  }
  if (earliest == UINT64_MAX) {
    uv_timer_stop(&nw->timer);
    return;
  }
  now = monotonic_ns();
  /* (rounded up: a wait is never answered before its deadline) */
  uv_timer_start(&nw->timer, on_timer, earliest > now ? (earliest - now + 999999) / 1000000 : 0,
                 0);
}

static void end_wait(struct name_wait *w)
{
  list_del(&w->link);
  w->waiting = false;
}

/* Every wait whose name was made or whose deadline has passed is taken off first and
 * told after: telling one may add or end others (its session's next request, or its
 * end; a wait ended meanwhile is taken off the due list by name_waits_remove()). */
static void on_timer(uv_timer_t *timer)
{
  struct name_waits *nw = timer->data;
  struct list due;
  uint64_t now = monotonic_ns();

  list_init(&due);
  for (struct list *l = nw->waiting.next, *next; l != &nw->waiting; l = next) {
    struct name_wait *w = list_entry(l, struct name_wait, link);
    next = l->next;
    if (w->made || w->deadline_ns <= now) {
      list_del(&w->link);
      list_add_tail(&due, &w->link);
    }
  }
  while (!list_empty(&due)) {
    struct name_wait *w = list_entry(due.next, struct name_wait, link);
    /* past its deadline it has expired, made or not: a wait ends as it would have */
    bool made = w->made && w->deadline_ns > now;
    end_wait(w);
    if (made)
      nw->made(w);
    else
      nw->expired(w);
  }
  rearm(nw);
}

void name_waits_init(struct name_waits *nw, uv_loop_t *loop, void (*made)(struct name_wait *),
                     void (*expired)(struct name_wait *))
{
  uv_timer_init(loop, &nw->timer);
  nw->timer.data = nw;
  list_init(&nw->waiting);
  nw->closed = false;
  nw->made = made;
  nw->expired = expired;
}

void name_waits_add(struct name_waits *nw, struct name_wait *w, const char *name,
                    uint64_t deadline_ns)
{
  w->name = name;
  w->deadline_ns = deadline_ns;
  w->waiting = true;
  w->made = false;
  list_add_tail(&nw->waiting, &w->link);
  rearm(nw);
}

void name_waits_remove(struct name_waits *nw, struct name_wait *w)
{
  if (!w->waiting)
    return;
  end_wait(w);
  rearm(nw);
}

void name_waits_made(struct name_waits *nw, const char *name)
{
  bool any = false;

  for (struct list *l = nw->waiting.next; l != &nw->waiting; l = l->next) {
    struct name_wait *w = list_entry(l, struct name_wait, link);
    if (!w->made && strcmp(w->name, name) == 0)
      w->made = any = true;
  }
  if (any && !nw->closed)
    uv_timer_start(&nw->timer, on_timer, 0, 0);
}

unsigned name_waits_count(const struct name_waits *nw)
{
  unsigned n = 0;

  for (const struct list *l = nw->waiting.next; l != &nw->waiting; l = l->next)
    n++;
  return n;
}

void name_waits_close(struct name_waits *nw)
{
  if (nw->closed)
    return;
  nw->closed = true;
  uv_close((uv_handle_t *)&nw->timer, NULL);
}
