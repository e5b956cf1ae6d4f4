/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "rows.h"

#include <string.h>

const char *row_label(const gpushm_metric_t *m, const char *label)
{
  for (size_t i = 0; i < gpushm_metric_label_count(m); i++) {
    const gpushm_metric_label_t *l = gpushm_metric_label(m, i);
    if (strcmp(gpushm_metric_label_name(l), label) == 0)
      return gpushm_metric_label_value(l);
  }
  return NULL;
}

static bool has(const gpushm_metric_t *m, const char *label, const char *value)
{
  const char *v;
  return !label || ((v = row_label(m, label)) && strcmp(v, value) == 0);
}

const gpushm_metric_t *row_find(const gpushm_stats_t *s, size_t *from, const char *name,
                                const char *l1, const char *v1, const char *l2, const char *v2)
{
  for (size_t i = from ? *from : 0; i < gpushm_stats_metric_count(s); i++) {
    const gpushm_metric_t *m = gpushm_stats_metric(s, i);
    if (strcmp(gpushm_metric_name(m), name) != 0 || !has(m, l1, v1) || !has(m, l2, v2))
      continue;
    if (from)
      *from = i + 1;
    return m;
  }
  if (from)
    *from = gpushm_stats_metric_count(s);
  return NULL;
}

uint64_t row_whole(const gpushm_metric_t *m, int exponent)
{
  uint64_t v = m ? gpushm_metric_value(m) : 0;
  int shift = m ? gpushm_metric_exponent(m) - exponent : 0;

  /* a daemon sends small exponents: each step is a digit (past 19, a uint64 is gone) */
  if (shift > 19)
    return v ? UINT64_MAX : 0;
  for (; shift > 0 && v; shift--)
    v = v > UINT64_MAX / 10 ? UINT64_MAX : v * 10;
  for (; shift < 0 && v; shift++)
    v /= 10;
  return v;
}

uint64_t row_value(const gpushm_stats_t *s, const char *name, const char *l1, const char *v1,
                   const char *l2, const char *v2)
{
  return row_whole(row_find(s, NULL, name, l1, v1, l2, v2), 0);
}

uint64_t row_sum(const gpushm_stats_t *s, const char *name)
{
  uint64_t sum = 0;
  size_t at = 0;
  const gpushm_metric_t *m;

  while ((m = row_find(s, &at, name, NULL, NULL, NULL, NULL)))
    sum += row_whole(m, 0);
  return sum;
}
