/* SPDX-License-Identifier: MIT */
/* The daemon's counters and gauges as rows that describe themselves (name, help, type,
 * unit, labels, value: StatsReply.metrics), from one table in metrics.c: a new counter
 * is one row there, and every tool (gpushmctl stats in all its forms, the Python
 * package) shows it without knowing it. */
#ifndef GPUSHMD_METRICS_H
#define GPUSHMD_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "gpushm.pb-c.h"
#include "registry/registry.h"
#include "server/counters.h"

/* What the rows read: the registry, the request counters; and the reply so far, for
 * what stats computes once for its other fields (uptime, clients, open fds, the
 * detached processes' totals). */
struct metrics_source {
  const struct registry *reg;
  const struct request_counters *counters;
  const Gpushm__StatsReply *stats;
  /* The reader renders rows alone (StatsRequest.all_rows): send rows for what the
   * frozen fields carry too. */
  bool all_rows;
};

/* Fills s->metrics from the table; the rows live in one allocation, returned in *block
 * for the caller to free with the reply.  0, or PROTO_E_NOMEM. */
int metrics_fill(const struct metrics_source *src, Gpushm__StatsReply *s, void **block);

#endif
