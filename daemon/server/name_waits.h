/* SPDX-License-Identifier: MIT */
/* Opens that wait for their name (OpenRequest.wait_ms): each waiter is a session's
 * parked open, told when an object of its name is made (it then runs again, and parks
 * again if its client may still not open it) or when its deadline passes.  One timer
 * for all of them, set for the earliest deadline. */
#ifndef GPUSHMD_NAME_WAITS_H
#define GPUSHMD_NAME_WAITS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "util/list.h"

struct name_wait {
  struct list link; /* on the waits' list while waiting */
  bool waiting;
  bool made;            /* its name was made: told at the timer's next run */
  uint64_t deadline_ns; /* CLOCK_MONOTONIC */
  const char *name;     /* the parked request's: lives as long as the wait */
};

struct name_waits {
  uv_timer_t timer;
  struct list waiting;
  bool closed;
  /* Called with the wait already ended: made, run it again; expired, answer it. */
  void (*made)(struct name_wait *w);
  void (*expired)(struct name_wait *w);
};

void name_waits_init(struct name_waits *nw, uv_loop_t *loop, void (*made)(struct name_wait *),
                     void (*expired)(struct name_wait *));
void name_waits_add(struct name_waits *nw, struct name_wait *w, const char *name,
                    uint64_t deadline_ns);
/* No-op for a wait that is not waiting. */
void name_waits_remove(struct name_waits *nw, struct name_wait *w);
/* An object named name was made: every wait for it is ended and told, from the loop
 * (not from within the create that made it, whose registry call is still under way). */
void name_waits_made(struct name_waits *nw, const char *name);
unsigned name_waits_count(const struct name_waits *nw);
void name_waits_close(struct name_waits *nw);

#endif
