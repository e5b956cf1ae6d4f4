/* SPDX-License-Identifier: MIT */
/* What the daemon counts of the requests it handles: by type, errors, latency buckets,
 * opens and creates by backend and device.  Sessions count, handlers and the metrics
 * rows read. */
#ifndef GPUSHMD_COUNTERS_H
#define GPUSHMD_COUNTERS_H

#include <stdint.h>

#include "gpushm.pb-c.h"
#include "gpushm_limits.h"
#include "backends/backend.h"

/* Request counters are kept by the request's body case (a small protocol number). */
#define HANDLER_REQUEST_TYPES 32

struct request_counters {
  uint64_t requests;
  uint64_t request_errors;
  uint64_t by_type[HANDLER_REQUEST_TYPES];
  uint64_t errors_by_type[HANDLER_REQUEST_TYPES];
  uint64_t protocol_errors;
  uint64_t clients_dropped;
  uint64_t fences_raised; /* for releasers that died with their fence write queued */
  uint64_t promises_broken; /* for promisers that died owing values */
  uint64_t oneway_errors;  /* one-way requests that failed: nobody was told */
  uint64_t costly_deferred; /* non-admins' costly requests that waited their turn */
  uint64_t open_waits;      /* opens that waited for their name to be made */
  uint64_t open_wait_timeouts; /* of those, the ones whose wait ended without it */
  /* Per request type, how long handling took: requests per bucket (not cumulative:
   * stats adds them up), the last past every bound; and their sum. */
  uint64_t latency[HANDLER_REQUEST_TYPES][GPUSHM_LATENCY_BOUNDS + 1];
  uint64_t latency_sum_ns[HANDLER_REQUEST_TYPES];
  /* Successful opens and creates by wire backend (events included) and device + 1
   * (0: host memory). */
  uint64_t opens[GPUSHM_BACKEND_COUNT + 1][GPUSHM_LIMIT_DEVICES + 1];
  uint64_t creates[GPUSHM_BACKEND_COUNT + 1][GPUSHM_LIMIT_DEVICES + 1];
};

/* Counts one request of body case slot that took ns nanoseconds. */
void counters_observe_latency(struct request_counters *c, unsigned slot, uint64_t ns);
/* Counts a successful open or create reply (its buffer's backend and device). */
void counters_count_open(struct request_counters *c, const Gpushm__OpenReply *open);

/* The latency buckets' upper bounds (GPUSHM_LATENCY_BOUNDS of them). */
extern const uint64_t counters_latency_bounds_ns[];

#endif
