/* Where a buffer's memory comes from.  The registry owns buffers; a backend only
 * allocates, exports and frees their memory. */
#ifndef GPUSHMD_BACKEND_H
#define GPUSHMD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct backend_mem {
  int fd;       /* host: the sealed memfd */
  void *priv;
};

struct backend {
  const char *name;
  int kind; /* gpushm_backend_t */
  /* Reserves at least size bytes.  Returns 0 or a negative GPUSHM_E_* with err set. */
  int (*alloc)(const struct backend *be, uint64_t size, int device, const char *label,
               struct backend_mem *mem, uint64_t *allocated, char *err, size_t errlen);
  /* A new fd the caller owns and sends to a client: read-only access where asked,
   * enforced by the kernel, not by trust. */
  int (*export_fd)(const struct backend *be, const struct backend_mem *mem, bool read_only,
                   int *fd_out, char *err, size_t errlen);
  void (*release)(const struct backend *be, struct backend_mem *mem);
};

extern const struct backend backend_host;

#endif
