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

/* A sync buffer's control block (a 4 KiB memfd, mapped read-write by every holder):
 * release_seq counts the releases published so far; a release records the buffer's
 * event first and increments release_seq after, so whoever sees N published knows
 * the event's latest record is release N or a later one. */
struct sync_control {
  uint64_t magic;
  uint64_t release_seq; /* accessed with __atomic builtins */
};
#define SYNC_CONTROL_MAGIC 0x6c6f72746e6f6373ull
#define SYNC_CONTROL_SIZE 4096u

#endif
