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

/* The live promise as gpushmd recorded it (the control block's copy is for readers, and
 * any read-write holder can write it): the promising connection, its releaser id (what
 * it signs with), and the values (from, upto]. */
struct sync_promise_record {
  uint32_t client_id; /* 0: none */
  uint32_t releaser;
  uint64_t from, upto;
  /* Its promiser went owing values and the break is under way (it may wait for earlier
   * releases to land): no promise is taken meanwhile, its own neither. */
  bool breaking;
};

struct sync_state {
  struct backend_mem control;
  const struct event_source *events; /* NULL: no event */
  void *event;
  struct sync_promise_record promise;
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
 * in *seq, 0 if none; in *before, the latest release before it by another releaser
 * (whose fence write may still be queued: the dead one's own never land) where the
 * signatures still show it, else 0.  Returns 0,
 * or a negative PROTO_E_* with err set (the block cannot be mapped, or its header was
 * overwritten and its signatures are not believed). */
int sync_signed_release(const struct sync_state *s, uint32_t releaser_id, uint64_t *seq,
                        uint64_t *before, char *err, size_t errlen);
/* Records client_id's promise to release every value up to upto (releaser: the id it
 * signs with) and writes it into the block: a new promise starts at the counter, the
 * client's own live one grows.  0, or a negative PROTO_E_* with err set: PROTO_E_INVAL
 * for upto not above the counter, a promise that does not grow, another client's live
 * promise (one promiser at a time), one being broken, or a scribbled header. */
int sync_promise(struct sync_state *s, uint32_t client_id, uint32_t releaser, uint64_t upto,
                 char *err, size_t errlen);
/* The promise client_id made and has not kept (the counter is below its upto): *upto
 * (0: none; one it kept is forgotten here) and *last, the counter.  0, or a negative
 * PROTO_E_* with err set. */
int sync_unkept_promise(struct sync_state *s, uint32_t client_id, uint64_t *upto,
                        uint64_t *last, char *err, size_t errlen);
/* A break given up (the block cannot be written, the driver failed): the record goes,
 * and the block's copy (best effort), so that the buffer takes promises again. */
void sync_forget_promise(struct sync_state *s);
/* Breaks the recorded promise, in two steps around the caller's raise of the fence
 * (where there is one): sync_lose_promise() records the values above the counter up to
 * upto as lost (*lost_from: the counter), before any waiter can pass;
 * sync_keep_broken_promise() then raises the counter to upto, forgets the promise (in
 * the block too) and wakes every waiter.  0, or a negative PROTO_E_* with err set. */
int sync_lose_promise(struct sync_state *s, uint64_t *lost_from, char *err, size_t errlen);
int sync_keep_broken_promise(struct sync_state *s, char *err, size_t errlen);
/* After an adoption: a live promise the block names (made to a previous daemon, whose
 * connections all ended with it) becomes the record, under client id UINT32_MAX (none
 * of this daemon's), for the caller to break at once.  *upto 0: none; *last: the
 * counter. */
int sync_adopted_promise(struct sync_state *s, uint64_t *upto, uint64_t *last, char *err,
                         size_t errlen);
/* A timeline's fence, in the control block: raised to value with a compare-and-swap
 * if below it (value 0: read only), the futex waiters woken.  *was: what it held.
 * Returns 1 (raised), 0 (at or above value already), or a negative PROTO_E_* with err
 * set; the header is not checked (the fence's place is fixed, and a holder that
 * scribbled over the header must not keep waiters waiting). */
int sync_fence_raise(struct sync_state *s, uint64_t value, uint64_t *was, char *err,
                     size_t errlen);
/* Semaphore planes (kind_timeline.c).  sync_fence: a timeline's fence now (0 if the
 * block cannot be mapped).  sync_mark_semaphore: the block's semaphore word set (every
 * signaller signals the plane too) or cleared (a timeline back after a restart, its
 * plane gone with the previous daemon). */
uint64_t sync_fence(const struct sync_state *s);
int sync_mark_semaphore(struct sync_state *s, bool plane, char *err, size_t errlen);
/* Frame rings (kind_ring.c).  sync_counter: the counter (release_seq) now, 0 if the
 * block cannot be mapped.  sync_start_at: a new timeline's counter and fence both at
 * value (a consumer's done timeline starts at the frame last presented).
 * sync_raise_all: counter and fence raised to value (never lowered), every waiter woken
 * (a detached consumer's done timeline).  sync_ring_table_write: the ring's table of
 * consumers (shm_layout.h) set to done_ids[0..n), planes its bits of those with a
 * ready plane. */
uint64_t sync_counter(const struct sync_state *s);
int sync_start_at(struct sync_state *s, uint64_t value, char *err, size_t errlen);
int sync_raise_all(struct sync_state *s, uint64_t value, char *err, size_t errlen);
int sync_ring_table_write(struct sync_state *s, const uint64_t *done_ids, uint32_t n,
                          uint32_t planes, char *err, size_t errlen);
/* Weight sets (kind_weights.c): the oldest generation of the set still held, written at
 * WEIGHTS_HELD_OFFSET (shm_layout.h), its waiters woken. */
int sync_weights_held_write(struct sync_state *s, uint64_t oldest, char *err, size_t errlen);
/* The control block's fd for a client (read-only for a read-only opener) and the
 * event's handle bytes (event_handle_len 0: no event).  No fd is left on failure. */
int sync_export(struct sync_state *s, bool read_only, int *control_fd, uint8_t event_handle[64],
                size_t *event_handle_len, char *err, size_t errlen);

#endif
