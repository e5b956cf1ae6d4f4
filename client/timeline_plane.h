/* SPDX-License-Identifier: MIT */
/* A timeline's semaphore plane as this process signals it (timeline_plane.c). */
#ifndef GPUSHM_CLIENT_TIMELINE_PLANE_H
#define GPUSHM_CLIENT_TIMELINE_PLANE_H

#include "device.h"
#include "mapping.h"

#include <stdbool.h>
#include <stdint.h>

/* What a SemaphoreRequest asks: of timeline or ring id, register_fd >= 0 registers that
 * semaphore (on the device of uuid) first; consumer: a ring producer's ask for that
 * consumer's plane (its done timeline's id). */
struct client_plane_ask {
  uint64_t id;
  uint64_t consumer;
  int register_fd;
  const uint8_t *uuid;
  bool to_readers;
};

/* What came back: a new fd of the plane, its device, whether this request's semaphore
 * became it, and (a ring consumer's registration) the frame above which producers
 * signal it. */
struct client_plane_reply {
  int fd;
  uint8_t uuid[16];
  bool registered;
  uint64_t from;
};

/* The request (SemaphoreRequest); 0 or a GPUSHM_E_*. */
int client_plane_request(gpushm_t *conn, const struct client_plane_ask *ask,
                         struct client_plane_reply *out);
/* Whether buf's control block says its timeline has a plane. */
bool client_plane_wanted(const struct client_mapping *buf);
/* The plane imported into CUDA (once per mapping, its fd asked of gpushmd over conn);
 * device >= 0: a stream of that device will signal it, which must be the plane's.  0 or
 * a GPUSHM_E_*. */
int client_plane_prepare(struct client_mapping *buf, gpushm_t *conn, int device);
/* Signals v behind s's work (NULL: now, waited for); after client_plane_prepare(). */
int client_plane_signal(struct client_mapping *buf, const struct client_stream *s, uint64_t v);
/* The import let go, with the mapping. */
void client_plane_detach(struct client_mapping *buf);

#endif
