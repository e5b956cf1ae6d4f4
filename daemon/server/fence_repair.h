/* SPDX-License-Identifier: MIT */
/* Fences a dead releaser left short.  A cuda-fd sync buffer's release N is published as
 * soon as its fence write is queued behind the releaser's work; a releaser whose process
 * dies before its GPU runs that write (SIGKILL, a crash) takes the write with it, and
 * every stream that acquires N would wait for ever.  Once such a process has exited
 * (detached.h watches), the daemon does what the lost write would have done: it raises
 * the fence to the latest release the process signed, if the fence is below it, and
 * never higher (a later releaser's own write is not overtaken).  Waiters go on with
 * whatever the dead releaser's work left in the buffer. */
#ifndef GPUSHMD_FENCE_REPAIR_H
#define GPUSHMD_FENCE_REPAIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "registry/registry.h"

/* For client_id's process (pid), which has exited, and the buffers its connection held
 * read-write: raises each fence its releases left short, logging each (a failure as an
 * error: nothing else is touched).  instance_id is this daemon's, which salts the ids
 * releases are signed with.  Buffers freed since are skipped.  Returns how many fences
 * it raised. */
unsigned fence_repair(struct registry *reg, uint64_t instance_id, uint32_t client_id, pid_t pid,
                      const uint64_t *ids, size_t n);

#endif
