/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/counters.h"

const uint64_t counters_latency_bounds_ns[] = GPUSHM_LATENCY_BOUNDS_NS;
_Static_assert(sizeof counters_latency_bounds_ns / sizeof counters_latency_bounds_ns[0] == GPUSHM_LATENCY_BOUNDS,
               "GPUSHM_LATENCY_BOUNDS counts GPUSHM_LATENCY_BOUNDS_NS");

void counters_observe_latency(struct request_counters *c, unsigned slot, uint64_t ns)
{
  unsigned b = 0;

  /* A linear scan: 16 compares cost less than the clock reads around the request. */
  while (b < GPUSHM_LATENCY_BOUNDS && ns > counters_latency_bounds_ns[b])
    b++;
  c->latency[slot][b]++;
  c->latency_sum_ns[slot] += ns;
}

void counters_count_open(struct request_counters *c, const Gpushm__OpenReply *open)
{
  const Gpushm__BufferInfo *info = open->info;
  unsigned backend = info ? (unsigned)info->backend : 0;
  int dev = info ? info->device : -1;

  if (backend > GPUSHM_BACKEND_COUNT || dev >= (int)GPUSHM_LIMIT_DEVICES)
    return;
  (open->created ? c->creates : c->opens)[backend][dev < 0 ? 0 : (unsigned)dev + 1]++;
}

