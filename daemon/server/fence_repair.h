/* SPDX-License-Identifier: MIT */
/* What a dead signaller left undone on sync buffers, done by the daemon once its
 * process has exited (detached.h watches).
 *  - Fences a dead releaser left short.  A fenced sync buffer's release N is published
 *    as soon as its fence write is queued behind the releaser's work; a releaser whose
 *    process dies before its GPU runs that write (SIGKILL, a crash) takes the write with
 *    it, and every stream that acquires N would wait for ever.  The daemon raises the
 *    fence to the latest release the process signed, if the fence is below it, and
 *    never higher (a later releaser's own write is not overtaken), once the fence holds
 *    the latest release before it by another releaser (whose write, still queued, would
 *    lower it again), tried again and done regardless as a promise's break below.
 *    Waiters go on with whatever the dead releaser's work left in the buffer.
 *  - Promises a promiser did not keep (docs/sync.md), once its process has exited or it
 *    closed its last handle of the buffer: the counter and the fence go to the promised
 *    value and the values count as lost.  The fence is raised only once it holds the
 *    counter (writes of releases published before may still be queued, and would lower
 *    it again); until then the break is tried again, GPUSHM_PROMISE_BREAK_RETRY_MS later
 *    and twice as long each time after (up to GPUSHM_PROMISE_BREAK_RETRY_MAX_MS), and
 *    done regardless after GPUSHM_PROMISE_BREAK_WAIT_MS or past
 *    GPUSHM_LIMIT_PENDING_BREAKS waiting. */
#ifndef GPUSHMD_FENCE_REPAIR_H
#define GPUSHMD_FENCE_REPAIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "registry/registry.h"

struct pending_break;

struct fence_repair {
  struct registry *reg;
  uint64_t instance_id; /* salts the ids releases and promises are signed with */
  uint64_t *fences_raised, *promises_broken; /* the server's counters */
  uv_timer_t retry;
  struct pending_break *pending;
  size_t n_pending, cap;
};

void fence_repair_init(struct fence_repair *fr, uv_loop_t *loop, struct registry *reg,
                       uint64_t instance_id, uint64_t *fences_raised, uint64_t *promises_broken);
/* Breaks what is pending without waiting longer (logged) and closes the timer. */
void fence_repair_shutdown(struct fence_repair *fr);
/* client_id (pid, of uid) closed its last handle of buffer id, whose promise it made:
 * breaks what it still owes. */
void fence_repair_closed(struct fence_repair *fr, uint64_t id, uint32_t client_id, pid_t pid,
                         uid_t uid);
/* For client_id's process (pid, of uid), which has exited, and the sync buffers its
 * connection held read-write: raises each fence its releases left short and breaks its
 * promises, logging each (a failure as an error: nothing else is touched).  pid 0 (a
 * process gpushmd cannot see): its promises only.  Buffers freed since are skipped. */
void fence_repair_exited(struct fence_repair *fr, uint32_t client_id, pid_t pid, uid_t uid,
                         const uint64_t *ids, size_t n);

#endif
