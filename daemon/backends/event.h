/* SPDX-License-Identifier: MIT */
/* Where an event comes from.  Events are objects of their own kind in the registry:
 * no size, no memory, no backend; a sync buffer on a device owns one too.  The only
 * source today is a CUDA inter-process event; memory fences are the next. */
#ifndef GPUSHMD_EVENT_H
#define GPUSHMD_EVENT_H

#include <stddef.h>
#include <stdint.h>

struct event_source {
  const char *name;
  /* Makes an event on device.  Returns 0 or a negative PROTO_E_* with err set. */
  int (*alloc)(const struct event_source *src, int device, const char *label, void **event,
               char *err, size_t errlen);
  /* The handle bytes a client opens the event with (at most 64). */
  int (*export)(const struct event_source *src, void *event, uint8_t handle[64],
                size_t *handle_len, char *err, size_t errlen);
  void (*release)(const struct event_source *src, void *event);
  /* NULL when usable, else why not. */
  const char *(*unavailable)(const struct event_source *src);
};

extern const struct event_source event_cuda_ipc;

#endif
