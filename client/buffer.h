/* SPDX-License-Identifier: MIT */
/* Buffers and events (buffer.c): the process-wide mappings and the per-connection
 * handles on them. */
#ifndef GPUSHM_CLIENT_BUFFER_H
#define GPUSHM_CLIENT_BUFFER_H

#include "conn.h"
#include "gpushm-graphics.h"
#include "hash_table.h"
#include "mapping.h"

/* A handle: one connection's opens of one mapping, holding that connection's daemon
 * reference (gpushm_buffer_t, gpushm_event_t). */
struct gpushm_buffer {
  struct hash_link by_id, by_name; /* in its connection's handle tables */
  struct gpushm_buffer *inherited_next; /* a forked child's list of its parent's */
  struct client_mapping *map;
  gpushm_t *conn; /* holds the daemon's reference; a reference to it is held */
  unsigned refs;  /* opens through conn; under the cache lock */
  /* The daemon's unlink generation read before the name was resolved: while it is
   * unchanged, the name still means this buffer. */
  uint64_t name_generation;
  /* Opened by the parent of this (forked) process: never closed here, since its socket
   * is the parent's.  Under the cache lock. */
  bool inherited;
  /* Every open of it promised GPUSHM_OPEN_WRITE_DISCARD.  Under the cache lock. */
  bool write_discard;
};

/* What a create or an open means: a buffer (or an image), an event, a timeline or a
 * ring; a name of one kind never yields another. */
enum client_kind { CLIENT_BUFFER, CLIENT_EVENT, CLIENT_TIMELINE, CLIENT_RING };

/* Create and open objects of kind ck, through the process cache. */
int client_create(gpushm_t *conn, const char *name, uint64_t size,
                  const gpushm_create_opts_t *opts, enum client_kind ck, gpushm_buffer_t **out);
int client_open(gpushm_t *conn, const char *name, uint64_t id, unsigned flags,
                enum client_kind ck, gpushm_buffer_t **out);
/* An image create (desc checked by the caller, the wire's spelling), and a registration
 * whose request goes with send_fd: adopted as opens, the registrar's mapping nothing
 * (GPUSHM_DEVICE_NONE). */
int client_create_image(gpushm_t *conn, const char *name, const Gpushm__ImageDesc *desc,
                        const gpushm_create_opts_t *opts, gpushm_buffer_t **out);
int client_register(gpushm_t *conn, Gpushm__Request *req, int send_fd, gpushm_buffer_t **out);
/* A ring's create (slots of slot_size bytes, or of image, the wire's spelling), and a
 * consumer's attach to a ring this connection holds (ring_id): its done timeline,
 * opened read-write. */
int client_create_ring(gpushm_t *conn, const char *name, uint64_t slot_size, uint32_t slots,
                       const Gpushm__ImageDesc *image, const gpushm_create_opts_t *opts,
                       gpushm_buffer_t **out);
int client_ring_attach(gpushm_t *conn, uint64_t ring_id, gpushm_buffer_t **done);
/* Drops the connection's daemon reference to object id (one round trip). */
int client_release_id(gpushm_t *conn, uint64_t id);
/* Buffer id opened read-only as one of weight-set generation via's (which conn holds),
 * mapped as the default rule says. */
int client_open_via(gpushm_t *conn, uint64_t id, uint64_t via, gpushm_buffer_t **out);
/* Whether buf's only open is the caller's (no tensor or other user holds one more). */
bool client_buffer_sole_open(gpushm_buffer_t *buf);
/* An open by name whose memory stays unmapped (GPUSHM_DEVICE_NONE: device memory's fd
 * kept for a graphics API, not imported into CUDA). */
int client_open_unmapped(gpushm_t *conn, const char *name, bool read_only, enum client_kind ck,
                         gpushm_buffer_t **out);

#endif
