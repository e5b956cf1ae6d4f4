/* A sync buffer's synchronisation objects: the release sequence's control block
 * (host memory, so CPU and GPU holders alike can publish and read it) and, for device
 * memory, an inter-process event.  The registry owns one per sync buffer. */
#ifndef GPUSHMD_SYNC_H
#define GPUSHMD_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

struct sync_state {
  struct backend_mem control;
  const struct backend *event_backend; /* NULL: no event */
  struct backend_mem event;
};

/* Makes the control block and, with an event_backend, the event on device.  Returns 0
 * or a negative GPUSHM_E_* with err set; on failure nothing is left allocated. */
int sync_alloc(struct sync_state *s, const struct backend *event_backend, int device,
               const char *label, char *err, size_t errlen);
/* Takes over a control block a previous daemon made (systemd's fd store); no event. */
void sync_adopt(struct sync_state *s, const struct backend_mem *control);
void sync_release(struct sync_state *s);
/* The control block's fd for a client (read-only for a read-only opener) and the
 * event's handle bytes (event_handle_len 0: no event).  No fd is left on failure. */
int sync_export(struct sync_state *s, bool read_only, int *control_fd, uint8_t event_handle[64],
                size_t *event_handle_len, char *err, size_t errlen);

#endif
