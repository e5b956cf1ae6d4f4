/* SPDX-License-Identifier: MIT */
/* Per-backend importers (importers.c): how this process maps what an open reply brings,
 * and lets it go. */
#ifndef GPUSHM_CLIENT_IMPORTERS_H
#define GPUSHM_CLIENT_IMPORTERS_H

#include "conn.h"
#include "mapping.h"

/* What an open brought, for an importer to map. */
struct client_import {
  gpushm_t *conn;
  const Gpushm__OpenReply *open;
  const struct client_fds *fds; /* the memory's first (memory_fds of them) */
  int map_request;              /* the map device asked for (-1: the default rule) */
};

struct client_importer {
  const char *name;
  unsigned memory_fds; /* fds the memory comes with (a sync buffer's control block: +1) */
  bool keeps_fd;       /* a GPUSHM_DEVICE_NONE open keeps its fd, for graphics */
  /* Maps m (ptr, map_len, devices set); 0 or a GPUSHM_E_* with the error set. */
  int (*map)(struct client_mapping *m, const struct client_import *in);
  /* Lets m's mapping go (called only when map succeeded); 0 or a GPUSHM_E_*. */
  int (*unmap)(struct client_mapping *m);
};

/* m's importer, or NULL for a backend this library does not know. */
const struct client_importer *client_importer_of(const struct client_mapping *m);

#endif
