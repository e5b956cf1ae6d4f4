/* SPDX-License-Identifier: MIT */
/* A semaphore plane as gpushmd keeps it (plane.c): a Vulkan timeline semaphore a client
 * minted and registered, held as an fd (holders get dups) and an import into gpushmd's
 * own CUDA context on its device, through which repairs signal it. */
#ifndef GPUSHM_DAEMON_REGISTRY_PLANE_H
#define GPUSHM_DAEMON_REGISTRY_PLANE_H

#include "registry/types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct reg_object;

struct reg_plane {
  int fd;
  int device;
  void *cuda; /* CUexternalSemaphore */
  bool to_readers;
};

/* Checks fd by importing it into CUDA on the device of uuid (what is not a timeline
 * semaphore there is refused) and keeps a dup of it; 0 or a negative PROTO_E_* with
 * err set.  fd stays the caller's. */
int reg_plane_make(int fd, const uint8_t uuid[16], bool to_readers, struct reg_plane **out,
                   char *err, size_t errlen);
void reg_plane_free(struct reg_plane *p);
/* Signals value through gpushmd's import, logging a failure against obj's name
 * (what: whose plane, for the log). */
void reg_plane_signal(struct reg_plane *p, uint64_t value, const struct reg_object *obj,
                      const char *what);
/* A new fd of the plane and its device's UUID into out; 0 or PROTO_E_IO with err. */
int reg_plane_hand_out(const struct reg_plane *p, struct reg_semaphore *out, char *err,
                       size_t errlen);

#endif
