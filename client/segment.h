/* SPDX-License-Identifier: MIT */
/* Carved buffers' segments (segment.c). */
#ifndef GPUSHM_CLIENT_SEGMENT_H
#define GPUSHM_CLIENT_SEGMENT_H

#include "conn.h"
#include "device.h"

/* Segments (client/segment.c): mapped once per process and access, whichever
 * connection and buffer brought them, per map device for device memory.  With
 * conn->lock held: takes a use of the segment a carved open reply names (mapping it
 * from the reply's fds or handle, or from the mapping this process has), mapped for
 * the map device; *ptr is the buffer's address, *devices where it lives and is mapped.
 * fds are consumed.  read_only: the access the reply grants. */
struct client_segment;
int client_segment_attach(gpushm_t *conn, const Gpushm__OpenReply *open, bool read_only,
                          struct client_fds *fds, int map_request, struct client_segment **out,
                          void **ptr, struct client_devices *devices);
/* A buffer in it was closed (its daemon reference released): the segment stays mapped
 * while idle, up to GPUSHM_LIMIT_IDLE_SEGMENTS per process, least recently used out. */
void client_segment_put(struct client_segment *seg);
/* For graphics importers of a carved buffer: the segment's fd (cuda-fd; -1 otherwise),
 * its size, and its host mapping (host segments). */
int client_segment_fd(const struct client_segment *seg);
uint64_t client_segment_size(const struct client_segment *seg);
void *client_segment_host(const struct client_segment *seg);
/* Unmaps the idle segments conn brought (gpushm_disconnect). */
void client_segment_disconnect(gpushm_t *conn);
/* What evict() kept while replies were out: idle segments past the limit, and those of
 * connections the user dropped, unmapped (no lock held). */
void client_segment_trim(void);
/* With conn->lock held, where evicting could take it again: drops a use without
 * unmapping anything (the next client_segment_put trims the idle list). */
void client_segment_unuse(struct client_segment *seg);
/* With conn->lock held: a reply attached a segment this process does not keep (it could
 * not make an entry for the buffer): the daemon is told it is not mapped. */
void client_segment_attach_refused(gpushm_t *conn, uint64_t segment_id, bool read_only);

#endif
