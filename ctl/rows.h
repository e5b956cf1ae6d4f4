/* SPDX-License-Identifier: MIT */
/* The daemon's metric rows looked up by name and labels: what gpushmctl stats renders
 * (StatsReply's typed fields are frozen; from 0.8 the rows carry all of them). */
#ifndef GPUSHMCTL_ROWS_H
#define GPUSHMCTL_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpushm-admin.h"

/* A label's value, or NULL where the row has no such label. */
const char *row_label(const gpushm_metric_t *m, const char *label);

/* The first row named name whose labels include each (label, value) pair given (NULL
 * ends the pairs early), from index *from on when from is not NULL (then *from is left
 * one past it, for the next call).  NULL when there is none. */
const gpushm_metric_t *row_find(const gpushm_stats_t *s, size_t *from, const char *name,
                                const char *l1, const char *v1, const char *l2, const char *v2);

/* The value in units of 10^exponent (-3: thousandths), rounded down; 0 for NULL m. */
uint64_t row_whole(const gpushm_metric_t *m, int exponent);

/* What row_find() finds, as row_whole(..., 0); 0 when there is no such row. */
uint64_t row_value(const gpushm_stats_t *s, const char *name, const char *l1, const char *v1,
                   const char *l2, const char *v2);

/* The sum of every row of that name (a metric's series added up). */
uint64_t row_sum(const gpushm_stats_t *s, const char *name);

#endif
