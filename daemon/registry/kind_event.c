/* SPDX-License-Identifier: MIT */
/* Named inter-process events, from the registry's event source (the composition root
 * sets it: CUDA IPC events).  An event has no size, no memory and no sync objects. */
#include "config.h"
#include "registry/kind.h"
#include "registry/backends.h"
#include "protocol.h"

#include <string.h>

#include <stdio.h>

static int event_check(const struct registry *reg, const struct reg_create_args *args,
                       const struct reg_policy *policy, const struct backend **be, char *err,
                       size_t errlen)
{
  const char *why;

  (void)policy;
  *be = NULL;
  if (args->size != 0 || args->sync || args->metadata_len) {
    snprintf(err, errlen, "an event has no size, no sync and no metadata of its own");
    return PROTO_E_INVAL;
  }
  if (!reg->events) {
    snprintf(err, errlen, "unsupported: this gpushmd offers no events");
    return PROTO_E_UNSUPPORTED;
  }
  if (reg->events->unavailable && (why = reg->events->unavailable(reg->events))) {
    snprintf(err, errlen, "unsupported: events unavailable: %s", why);
    return PROTO_E_UNSUPPORTED;
  }
  return 0;
}

static void event_estimate(const struct registry *reg, const struct reg_create_args *args,
                           const struct backend *be, struct quota_cost *cost)
{
  (void)reg;
  (void)args;
  (void)be;
  *cost = (struct quota_cost){ .device = -1 };
}

struct reg_event {
  struct reg_object obj;
  void *event; /* the event source's */
};

static int event_alloc(struct registry *reg, struct reg_object *obj,
                       const struct reg_create_args *args, const struct backend *be,
                       const struct reg_client *client, char *err, size_t errlen)
{
  (void)be;
  (void)client;
  obj->device = args->device;
  return reg->events->alloc(reg->events, args->device, args->name,
                            &((struct reg_event *)obj)->event, err, errlen);
}

static int event_export(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                        const struct reg_policy *policy, bool read_only, struct reg_export *out,
                        char *err, size_t errlen)
{
  (void)client;
  (void)policy;
  (void)read_only;
  return reg->events->export(reg->events, ((struct reg_event *)obj)->event, out->handle,
                             &out->handle_len, err, errlen);
}

static void event_release(struct registry *reg, struct reg_object *obj)
{
  struct reg_event *e = (struct reg_event *)obj;

  reg->events->release(reg->events, e->event);
  e->event = NULL;
}

static void event_describe(const struct reg_object *obj, struct reg_description *out)
{
  (void)obj;
  memset(out, 0, sizeof *out);
  out->kind = "event";
  out->backend = REG_EVENT_BACKEND;
}

const struct reg_kind_ops reg_kind_event = {
  .name = "event",
  .kind = REG_EVENT,
  .object_size = sizeof(struct reg_event),
  .check = event_check,
  .estimate = event_estimate,
  .alloc = event_alloc,
  .export = event_export,
  .release = event_release,
  .describe = event_describe,
};
