/* SPDX-License-Identifier: MIT */
/* What each uid is charged with (objects, bytes, host bytes) and the checks against its
 * limits and the daemon's host-memory budget.  Knows amounts, not objects. */
#ifndef GPUSHMD_REGISTRY_QUOTA_H
#define GPUSHMD_REGISTRY_QUOTA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct quota_usage;

struct quota {
  struct quota_usage *usage;
  uint64_t host_bytes; /* of every object: what the host-memory budget counts */
};

/* The limits a create is checked against (0 for a byte limit: none). */
struct quota_limits {
  uint32_t max_objects_per_uid;
  uint64_t max_bytes_per_uid;
  uint64_t max_host_bytes_per_uid;
  uint64_t host_budget;
};

void quota_destroy(struct quota *q);
/* One object of bytes (host of them host memory) counts against uid, or no longer. */
void quota_charge(struct quota *q, uid_t uid, uint64_t bytes, uint64_t host);
void quota_release(struct quota *q, uid_t uid, uint64_t bytes, uint64_t host);
/* The daemon's host memory (the budget), apart from any uid. */
void quota_host_add(struct quota *q, uint64_t host);
void quota_host_sub(struct quota *q, uint64_t host);
void quota_of(const struct quota *q, uid_t uid, uint32_t *objects, uint64_t *bytes,
              uint64_t *host_bytes);
/* Whether uid may take one more object of bytes (host of them host memory): 0, or
 * GPUSHM_E_LIMIT (a per-uid limit: the caller's problem) or GPUSHM_E_NOMEM (the
 * daemon's budget, as an allocation failure would be) with err saying which. */
int quota_check(const struct quota *q, const struct quota_limits *lim, uid_t uid, uint64_t bytes,
                uint64_t host, char *err, size_t errlen);

#endif
