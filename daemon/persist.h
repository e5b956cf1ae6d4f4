/* Persistent buffers across daemon restarts.  Each persistent host buffer's memfd is
 * deposited in systemd's fd store under a name that is its registry record (id, owner,
 * mode, size, name); a restarted daemon finds the fds in LISTEN_FDS and adopts the
 * buffers with their data.  Records carry the backend, so a device-memory fd backend
 * can deposit its exported fds the same way. */
#ifndef GPUSHMD_PERSIST_H
#define GPUSHMD_PERSIST_H

#include <stdbool.h>

#include "registry.h"
#include "sd.h"

struct persist {
  bool enabled;
  unsigned stored; /* fds deposited by this daemon and its predecessors */
  unsigned max;
  bool warned_full;
};

/* Decides whether deposits are possible and logs what that means for restarts. */
void persist_init(struct persist *p);
/* Registry hooks: deposit a new persistent buffer; withdraw one whose name went away. */
void persist_created(struct persist *p, struct reg_object *buffer);
void persist_unlinked(struct persist *p, struct reg_object *buffer);
/* Adopts the buffers a previous daemon deposited; consumes passed's stored fds (the
 * ones that do not make a valid buffer are closed and dropped from the store).
 * Returns the number of buffers that came back. */
unsigned persist_adopt(struct persist *p, struct registry *reg, struct sdn_passed *passed);

#endif
