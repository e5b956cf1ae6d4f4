/* SPDX-License-Identifier: MIT */
/* The table of kinds: which one a create starts from, and which outlive the daemon.  A
 * new kind is a file of its own (kind_*.c) and a line here; registry.c names none. */
#include "config.h"
#include "registry/kind.h"

/* The kind a create of each requested kind starts from (its select() may pick a more
 * particular one). */
static const struct reg_kind_ops *const requested_kinds[REG_KIND_COUNT] = {
  [REG_BUFFER] = &reg_kind_buffer,
  [REG_EVENT] = &reg_kind_event,
  [REG_TIMELINE] = &reg_kind_timeline,
  [REG_RING] = &reg_kind_ring,
  [REG_WEIGHTS] = &reg_kind_weights,
};

const struct reg_kind_ops *reg_kind_for(const struct reg_create_args *args)
{
  /* a buffer that brings registered memory or describes an image is of that kind from
   * the start (its checks are its own) */
  if (args->kind == REG_BUFFER && args->external)
    return &reg_kind_external;
  if (args->kind == REG_BUFFER && args->image)
    return &reg_kind_image;
  return requested_kinds[args->kind];
}

const struct reg_kind_ops *const reg_persistent_kinds[] = { &reg_kind_buffer, &reg_kind_slot,
                                                            &reg_kind_timeline, NULL };
