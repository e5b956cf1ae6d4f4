/* SPDX-License-Identifier: MIT */
/* Persistent objects across daemon restarts, in systemd's fd store: each kind that
 * outlives the daemon deposits its objects there as records (a name and an fd: a host
 * buffer's memfd, a cuda-fd buffer's exported fd, under its id, owner, mode, size and
 * name; registry/kind_buffer.c), and a restarted daemon finds them in LISTEN_FDS and
 * hands them back to the registry, which asks the kinds to adopt them. */
#ifndef GPUSHMD_PERSIST_H
#define GPUSHMD_PERSIST_H

#include <stdbool.h>

#include "registry/registry.h"
#include "util/sd.h"

struct persist {
  bool enabled;
  unsigned stored; /* fds deposited by this daemon and its predecessors */
  unsigned max;
  bool warned_full;
};

/* Decides whether deposits are possible and logs what that means for restarts. */
void persist_init(struct persist *p);
bool persist_enabled(const struct persist *p);
/* Registry hooks: deposit a new persistent buffer; withdraw one whose name went away. */
void persist_created(struct persist *p, struct registry *reg, struct reg_object *obj);
void persist_unlinked(struct persist *p, struct registry *reg, struct reg_object *obj);
/* At shutdown: warns, with their number and bytes, of the linked persistent buffers that
 * this stop loses because the fd store does not hold them (none without systemd). */
void persist_report_dropped(const struct persist *p, const struct registry *reg);
/* Adopts the buffers a previous daemon deposited; consumes passed's stored fds (the
 * ones that do not make a valid buffer, or whose device or import fails, are closed and
 * dropped from the store, with a warning).  Needs the CUDA backend initialised when
 * there is device memory to take back, and retains those devices' contexts itself.
 * Returns the number of buffers that came back. */
unsigned persist_adopt(struct persist *p, struct registry *reg, struct sdn_passed *passed);

#endif
