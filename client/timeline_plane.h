/* SPDX-License-Identifier: MIT */
/* A timeline's semaphore plane as this process signals it (timeline_plane.c). */
#ifndef GPUSHM_CLIENT_TIMELINE_PLANE_H
#define GPUSHM_CLIENT_TIMELINE_PLANE_H

#include "device.h"
#include "mapping.h"

#include <stdbool.h>
#include <stdint.h>

/* The request (SemaphoreRequest) for timeline id: register_fd >= 0 registers that
 * semaphore (on the device of uuid) first; *fd_out a new fd of the plane, *uuid_out its
 * device, *registered whether this request's semaphore became it.  0 or a GPUSHM_E_*. */
int client_plane_request(gpushm_t *conn, uint64_t id, int register_fd, const uint8_t *uuid,
                         bool to_readers, int *fd_out, uint8_t uuid_out[16], bool *registered);
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
