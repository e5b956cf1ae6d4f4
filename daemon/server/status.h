/* SPDX-License-Identifier: MIT */
/* The daemon's side of the shared status page (layout: proto/shm_layout.h). */
#ifndef GPUSHMD_STATUS_H
#define GPUSHMD_STATUS_H

#include "backends/backend.h"
#include "shm_layout.h"

struct status_page_owner {
  struct backend_mem mem;
  struct status_page *page;
};

int status_page_create(struct status_page_owner *sp, char *err, size_t errlen);
void status_page_destroy(struct status_page_owner *sp);
/* A read-only fd for a client; the caller owns it. */
int status_page_export(const struct status_page_owner *sp, int *fd_out, char *err, size_t errlen);
void status_page_bump_unlink(struct status_page_owner *sp);

#endif
