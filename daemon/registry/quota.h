/* SPDX-License-Identifier: MIT */
/* Private to daemon/registry/.  What each uid is charged with (objects, bytes, host bytes, each device's bytes) and
 * the checks against its limits and the daemon's host-memory budget.  Knows amounts,
 * not objects. */
#ifndef GPUSHMD_REGISTRY_QUOTA_H
#define GPUSHMD_REGISTRY_QUOTA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpushm_limits.h"

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
  const uint64_t *max_device_bytes_per_uid; /* [GPUSHM_LIMIT_DEVICES], by ordinal */
};

/* What one object costs: bytes of any memory, of them host memory, and device memory
 * of one device (device -1: none, or not known yet). */
struct quota_cost {
  uint64_t bytes;
  uint64_t host;
  int device;
  uint64_t device_bytes;
};

void quota_destroy(struct quota *q);
/* One object counts against uid, or no longer. */
void quota_charge(struct quota *q, uid_t uid, const struct quota_cost *c);
void quota_release(struct quota *q, uid_t uid, const struct quota_cost *c);
/* The daemon's host memory (the budget), apart from any uid. */
void quota_host_add(struct quota *q, uint64_t host);
void quota_host_sub(struct quota *q, uint64_t host);
void quota_of(const struct quota *q, uid_t uid, uint32_t *objects, uint64_t *bytes,
              uint64_t *host_bytes);
/* Device memory of device charged to uid. */
uint64_t quota_device_of(const struct quota *q, uid_t uid, int device);
/* Device memory charged to uid apart from its objects (its segments, segment.h's
 * seg_charge); add fails only for lack of memory. */
int quota_device_add(struct quota *q, uid_t uid, int device, uint64_t bytes);
void quota_device_sub(struct quota *q, uid_t uid, int device, uint64_t bytes);
/* Whether uid may take bytes more of device's memory: 0 or PROTO_E_LIMIT with err. */
int quota_check_device(const struct quota *q, const struct quota_limits *lim, uid_t uid,
                       int device, uint64_t bytes, char *err, size_t errlen);
/* Whether uid may take one more object costing c: 0, or PROTO_E_LIMIT (a per-uid
 * limit: the caller's problem) or PROTO_E_NOMEM (the daemon's budget, as an allocation
 * failure would be) with err saying which. */
int quota_check(const struct quota *q, const struct quota_limits *lim, uid_t uid,
                const struct quota_cost *c, char *err, size_t errlen);

#endif
