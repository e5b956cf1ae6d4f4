/* SPDX-License-Identifier: MIT */
/* Private to daemon/registry/: a buffer with an allocation of its own (kind_buffer.c),
 * what the buffer kind and the kinds built on it (kind_image.c) keep beside the
 * object's header. */
#ifndef GPUSHMD_REGISTRY_KIND_BUFFER_H
#define GPUSHMD_REGISTRY_KIND_BUFFER_H

#include "registry/kind.h"
#include "registry/sync.h"

struct reg_buffer {
  struct reg_object obj;
  struct backend_mem mem;
  bool sync; /* sync_state holds its control block (and event) */
  uint64_t fence_offset; /* a sync buffer's fence, in its allocation; 0: none */
  /* A timeline's fence is in its control block (kind_timeline.c), not in memory. */
  bool fence_in_control;
  struct sync_state sync_state;
  struct reg_plane *plane; /* a timeline's semaphore plane (kind_timeline.c); NULL: none */
};

/* obj is a buffer, or a kind built on one (its struct begins with struct reg_buffer). */
static inline struct reg_buffer *reg_buffer_of(struct reg_object *obj)
{
  return (struct reg_buffer *)obj;
}

static inline const struct reg_buffer *reg_buffer_of_const(const struct reg_object *obj)
{
  return (const struct reg_buffer *)obj;
}

/* What the buffer kind does for every kind with a control block and a fence (sync
 * buffers and timelines): the ops of the same names in kind.h. */
int reg_buffer_raise_fence(struct registry *reg, struct reg_object *obj, uint32_t releaser,
                           bool force, struct reg_raised_fence *out, char *err, size_t errlen);
int reg_buffer_promise(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                       uint32_t releaser, uint64_t upto, char *err, size_t errlen);
int reg_buffer_break_promise(struct registry *reg, struct reg_object *obj, uint32_t client_id,
                             bool force, struct reg_broken_promise *out, char *err,
                             size_t errlen);
/* A detached ring consumer's done timeline, raised past every frame (kind_ring.c). */
int reg_ring_done_raise(struct registry *reg, struct reg_object *done, char *err,
                        size_t errlen);
/* After an adoption: breaks a promise made to the previous daemon (logged as what). */
void reg_buffer_break_adopted_promise(struct reg_object *obj, const char *what);

#endif
