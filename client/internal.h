/* libgpushm internals shared by its modules. */
#ifndef GPUSHM_CLIENT_INTERNAL_H
#define GPUSHM_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpushm.h"
#include "gpushm.pb-c.h"
#include "status_page.h"
#include "wire.h"

struct gpushm {
  pthread_mutex_t lock; /* one request in flight per connection */
  int fd;
  unsigned refs;        /* the user's handle + one per open buffer; atomic */
  bool broken;          /* the daemon hung up or misbehaved: every call fails */
  uint64_t instance_id;
  uint32_t client_id;
  uint64_t next_request_id;
  const struct status_page *status;
  uint8_t rx[WIRE_RECV_BUF];
  uint8_t tx[WIRE_FRAME_MAX];
};

struct gpushm_buffer {
  struct gpushm_buffer *next_by_id, *next_by_name;
  uint64_t instance_id;
  uint64_t id;
  bool read_only;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  /* The daemon's unlink generation read before the name was resolved: while it is
   * unchanged, the name still means this buffer. */
  uint64_t name_generation;
  unsigned refs; /* opens in this process; under the cache lock */
  gpushm_t *conn; /* holds the daemon's reference */
  gpushm_backend_t backend;
  int device; /* this process's ordinal for CUDA backends */
  uint64_t size;
  void *ptr;
  size_t map_len;
};

/* Records the detail for gpushm_last_error_message() and returns err. */
int client_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void client_clear_error(void);

/* One request/reply exchange.  On success *reply is the daemon's reply (free with
 * gpushm__reply__free_unpacked) and *fd_out, when given, the fd it carried (or -1). */
int client_call(gpushm_t *conn, Gpushm__Request *req, Gpushm__Reply **reply, int *fd_out);
void client_conn_ref(gpushm_t *conn);
void client_conn_unref(gpushm_t *conn);
uint64_t client_unlink_generation(const gpushm_t *conn);

/* CUDA IPC (client/cuda.c): maps a daemon-exported handle on the device with that
 * UUID (or ordinal, when no UUID is given) and unmaps it. */
int client_cuda_import_ipc(const uint8_t *handle, size_t handle_len, const uint8_t *uuid,
                           size_t uuid_len, int ordinal, void **ptr, int *local_device);
int client_cuda_close_ipc(void *ptr, int local_device);

#endif
