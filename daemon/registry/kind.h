/* SPDX-License-Identifier: MIT */
/* Kinds of objects: what each holds outside the registry and how it is made, sent,
 * described, adopted after a restart and given back.  The registry does names, ids,
 * references, quotas and lifetimes for every kind alike and calls these for the rest.
 * A new kind is a file with one of these and an entry in registry.c's table (or, for a
 * more particular form of a requested kind, its select()).  Kinds see the registry's
 * state (state.h) and ask backends.h which backend a create means; registry.c, which
 * calls them, they never call. */
#ifndef GPUSHMD_REGISTRY_KIND_H
#define GPUSHMD_REGISTRY_KIND_H

#include "registry/state.h"

struct reg_kind_ops {
  const char *name; /* in errors: "buffer" */
  enum reg_kind kind; /* what clients know it as */
  /* A create's arguments, before any lookup or allocation: 0, or a GPUSHM_E_* with err
   * set.  *be: the backend its memory will come from (NULL for kinds without one). */
  int (*check)(const struct registry *reg, const struct reg_create_args *args,
               const struct reg_policy *policy, const struct backend **be, char *err,
               size_t errlen);
  /* The kind that will hold this create: itself (NULL select), or a more particular one
   * (a buffer that is carved is a slot). */
  const struct reg_kind_ops *(*select)(const struct registry *reg,
                                       const struct reg_create_args *args,
                                       const struct reg_policy *policy,
                                       const struct backend *be);
  /* What the create will cost its uid before anything is allocated; the registry
   * checks the quota with these, and again with what alloc() set. */
  void (*estimate)(const struct registry *reg, const struct reg_create_args *args,
                   const struct backend *be, uint64_t *bytes, uint64_t *host_bytes);
  /* Fills obj's contents (memory, sync objects, slot, event) and obj->allocated,
   * obj->host_bytes, obj->backend, obj->device; on failure nothing is left allocated. */
  int (*alloc)(struct registry *reg, struct reg_object *obj, const struct reg_create_args *args,
               const struct backend *be, const struct reg_client *client, char *err,
               size_t errlen);
  /* Fills out with what the client needs to reach obj; on failure no fd is left open. */
  int (*export)(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                const struct reg_policy *policy, bool read_only, struct reg_export *out,
                char *err, size_t errlen);
  /* Gives back what obj holds outside the registry. */
  void (*release)(struct registry *reg, struct reg_object *obj);
  void (*describe)(const struct reg_object *obj, struct reg_description *out);
  /* A persistent object coming back after a restart (NULL: the kind never persists);
   * mem and control become obj's on success only. */
  int (*adopt)(struct registry *reg, struct reg_object *obj, const struct reg_adopt_args *args,
               struct backend_mem *mem, struct backend_mem *control, char *err, size_t errlen);
};

extern const struct reg_kind_ops reg_kind_buffer; /* kind_buffer.c: an allocation of its own */
extern const struct reg_kind_ops reg_kind_slot;   /* kind_slot.c: a slot of a segment */
extern const struct reg_kind_ops reg_kind_event;  /* kind_event.c */
extern const struct reg_kind_ops reg_kind_image;  /* kind_image.c: a linear image */
extern const struct reg_kind_ops reg_kind_external; /* kind_external.c: registered memory */

#endif
