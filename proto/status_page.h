/* Layout of the read-only page gpushmd shares with every client (sent as an fd with
 * the Hello reply).  The daemon bumps unlink_generation before it answers any request
 * that removed a name, so a client that sees the same generation as when it cached a
 * name knows the name still means the same buffer, without asking. */
#ifndef GPUSHM_STATUS_PAGE_H
#define GPUSHM_STATUS_PAGE_H

#include <stdint.h>

#define STATUS_PAGE_MAGIC 0x3170616d6873706full
#define STATUS_PAGE_SIZE 4096u

struct status_page {
  uint64_t magic;
  uint64_t unlink_generation; /* accessed with __atomic builtins */
};

#endif
