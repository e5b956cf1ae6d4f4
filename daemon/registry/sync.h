/* SPDX-License-Identifier: MIT */
/* Private to daemon/registry/.  A sync buffer's synchronisation objects: the release sequence's control block
 * (host memory, so CPU and GPU holders alike can publish and read it; layout in
 * proto/shm_layout.h) and, for cuda-ipc memory, an event (cuda-fd buffers carry their
 * fence in their own allocation).  The registry owns one per
 * sync buffer. */
#ifndef GPUSHMD_SYNC_H
#define GPUSHMD_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/event.h"

struct sync_state {
  struct backend_mem control;
  const struct event_source *events; /* NULL: no event */
  void *event;
};

/* Makes the control block and, with an event source, the event on device.  Returns 0
 * or a negative PROTO_E_* with err set; on failure nothing is left allocated. */
int sync_alloc(struct sync_state *s, const struct event_source *events, int device,
               const char *label, char *err, size_t errlen);
/* Takes over a control block a previous daemon made (systemd's fd store), writing
 * its header anew (release_seq is kept); no event.  On failure (it cannot be mapped)
 * the control block is left to the caller. */
int sync_adopt(struct sync_state *s, const struct backend_mem *control, const char *label,
               char *err, size_t errlen);
void sync_release(struct sync_state *s);
/* The latest published release signed by releaser_id (sync_releaser_id(),
 * proto/shm_layout.h) among the GPUSHM_LIMIT_RELEASERS_KEPT signatures the block keeps,
 * in *seq, 0 if none.  Returns 0,
 * or a negative PROTO_E_* with err set (the block cannot be mapped, or its header was
 * overwritten and its signatures are not believed). */
int sync_signed_release(const struct sync_state *s, uint32_t releaser_id, uint64_t *seq,
                        char *err, size_t errlen);
/* The promise releaser_id made on the block and has not kept (proto/shm_layout.h):
 * *from (the counter when it was made) and *upto (0: none).  Returns 0, or a negative
 * PROTO_E_* with err set, as sync_signed_release(). */
int sync_unkept_promise(const struct sync_state *s, uint32_t releaser_id, uint64_t *from,
                        uint64_t *upto, char *err, size_t errlen);
/* Breaks that promise, in two steps around the caller's raise of the fence (where there
 * is one): sync_lose_promise() records the values above the counter up to upto as lost
 * (*lost_from: the counter), before any waiter can pass; sync_keep_broken_promise()
 * then raises the counter to upto, frees the promise's place (if releaser_id holds it)
 * and wakes every waiter.  0, or a negative PROTO_E_* with err set. */
int sync_lose_promise(struct sync_state *s, uint32_t releaser_id, uint64_t upto,
                      uint64_t *lost_from, char *err, size_t errlen);
int sync_keep_broken_promise(struct sync_state *s, uint32_t releaser_id, uint64_t upto,
                             char *err, size_t errlen);
/* The control block's fd for a client (read-only for a read-only opener) and the
 * event's handle bytes (event_handle_len 0: no event).  No fd is left on failure. */
int sync_export(struct sync_state *s, bool read_only, int *control_fd, uint8_t event_handle[64],
                size_t *event_handle_len, char *err, size_t errlen);

#endif
