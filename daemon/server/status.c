/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/status.h"
#include "protocol.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

/* The page is a small host-backend allocation: sealed, and exported read-only the
 * same way buffers are. */
int status_page_create(struct status_page_owner *sp, char *err, size_t errlen)
{
  uint64_t allocated;
  int r = backend_host.alloc(&backend_host, STATUS_PAGE_SIZE, -1, "gpushmd-status", &sp->mem,
                             &allocated, err, errlen);
  if (r < 0)
    return r;
  sp->page = mmap(NULL, STATUS_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, sp->mem.fd, 0);
  if (sp->page == MAP_FAILED) {
    snprintf(err, errlen, "mapping status page: %s", strerror(errno));
    backend_host.release(&backend_host, &sp->mem);
    sp->page = NULL;
    return PROTO_E_IO;
  }
  shm_layout_init(sp->page, STATUS_PAGE_MAGIC, sizeof *sp->page);
  return 0;
}

void status_page_destroy(struct status_page_owner *sp)
{
  if (sp->page)
    munmap(sp->page, STATUS_PAGE_SIZE);
  sp->page = NULL;
  backend_host.release(&backend_host, &sp->mem);
}

int status_page_export(const struct status_page_owner *sp, int *fd_out, char *err, size_t errlen)
{
  return backend_host_export_fd(&sp->mem, true, fd_out, err, errlen);
}

void status_page_bump_unlink(struct status_page_owner *sp)
{
  __atomic_add_fetch(&sp->page->unlink_generation, 1, __ATOMIC_RELEASE);
}
