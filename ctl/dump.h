/* SPDX-License-Identifier: MIT */
/* gpushmctl dump: a buffer's bytes, read through a read-only open like any client's
 * (so the buffer's mode decides), device memory through a copy to host. */
#ifndef GPUSHMCTL_DUMP_H
#define GPUSHMCTL_DUMP_H

#include <stdbool.h>
#include <stdint.h>

#include "gpushm-admin.h"

struct dump_request {
  const char *arg;   /* NAME or ID, as given */
  bool by_id;
  uint64_t id;
  uint64_t offset;
  uint64_t length;
  bool has_length;   /* else: to the end */
  bool raw;          /* else: hex, as xxd -a lays it out */
};

/* Opens what req names (info: its listing, where the caller can see it, else NULL) and
 * writes the range to stdout.  Returns 0 or EXIT_FAILED, having said why. */
int ctl_dump(gpushm_t *conn, const gpushm_buffer_info_t *info, const struct dump_request *req);

#endif
