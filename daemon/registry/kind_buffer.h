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
  struct sync_state sync_state;
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

#endif
