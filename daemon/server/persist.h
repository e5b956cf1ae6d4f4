/* SPDX-License-Identifier: MIT */
/* Persistent buffers across daemon restarts.  Each persistent host buffer's memfd, and
 * each persistent cuda-fd buffer's exported fd, is deposited in systemd's fd store under
 * a name that is its registry record (id, owner, mode, size, name; for device memory also
 * the allocated size and the device's UUID); a restarted daemon finds the fds in
 * LISTEN_FDS and adopts the buffers with their data, importing device memory again on
 * the device with that UUID. */
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
void persist_created(struct persist *p, struct reg_object *buffer);
void persist_unlinked(struct persist *p, struct reg_object *buffer);
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
