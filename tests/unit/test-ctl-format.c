/* SPDX-License-Identifier: MIT */
/* gpushmctl's hand formatters print what the printf formats they replace print:
 * every size near each unit's boundaries and rounding ties (where "%.1f" rounds to
 * even), random sizes of every magnitude, every age unit's edges, every mode. */
#include "config.h"
#include "harness.h"
#include "format.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;
static unsigned long checked;

static uint64_t next(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* The formats gpushmctl printed before format.c, kept here as the reference. */
static void printf_size(uint64_t bytes, bool exact, char *buf, size_t len)
{
  static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
  double v = (double)bytes;
  unsigned u = 0;

  if (exact) {
    snprintf(buf, len, "%" PRIu64, bytes);
    return;
  }
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%" PRIu64 " B", bytes);
  else
    snprintf(buf, len, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static void printf_age(uint64_t ms, char *buf, size_t len)
{
  uint64_t s = ms / 1000;
  if (s < 60)
    snprintf(buf, len, "%" PRIu64 "s", s);
  else if (s < 3600)
    snprintf(buf, len, "%" PRIu64 "m", s / 60);
  else if (s < 86400)
    snprintf(buf, len, "%" PRIu64 "h%02" PRIu64 "m", s / 3600, s / 60 % 60);
  else
    snprintf(buf, len, "%" PRIu64 "d%02" PRIu64 "h", s / 86400, s / 3600 % 24);
}

static void same_size(uint64_t bytes)
{
  char want[64], got[64];

  for (int exact = 0; exact < 2; exact++) {
    printf_size(bytes, exact, want, sizeof want);
    format_size(bytes, exact, got, sizeof got);
    if (strcmp(want, got) != 0) {
      fprintf(stderr, "size %" PRIu64 " (exact %d): printf \"%s\", format_size \"%s\"\n", bytes,
              exact, want, got);
      CHECK(!"format_size differs from printf");
    }
    checked++;
  }
}

static void same_age(uint64_t ms)
{
  char want[64], got[64];

  printf_age(ms, want, sizeof want);
  format_age(ms, got, sizeof got);
  if (strcmp(want, got) != 0) {
    fprintf(stderr, "age %" PRIu64 " ms: printf \"%s\", format_age \"%s\"\n", ms, want, got);
    CHECK(!"format_age differs from printf");
  }
  checked++;
}

static void sizes(void)
{
  for (uint64_t b = 0; b < 30000; b++)
    same_size(b);
  /* "%.1f" ties fall on odd multiples of a quarter unit (1.25 KiB is 1280 B), "%.0f"
   * ties on odd halves; tenths are where the printed digit changes. */
  for (unsigned u = 1; u <= 6; u++) {
    uint64_t unit = UINT64_C(1) << (10 * u > 63 ? 63 : 10 * u);
    const uint64_t steps[] = { unit / 4, unit / 20 };
    for (size_t i = 0; i < 2; i++)
      for (uint64_t k = 0; k < 6000 && k <= UINT64_MAX / steps[i] - 1; k++)
        for (int d = -2; d <= 2; d++)
          same_size(k * steps[i] + (uint64_t)d);
  }
  for (unsigned i = 0; i < 300000; i++)
    same_size(next() >> (next() % 64));
  same_size(UINT64_MAX);
  same_size(UINT64_C(1) << 53);
  same_size((UINT64_C(1) << 53) - 1);
}

static void ages(void)
{
  static const uint64_t edges[] = { 0, 999, 1000, 59999, 60000, 3599999, 3600000, 86399999,
                                    86400000, 864000000000, UINT64_MAX };
  for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
    for (int d = -1; d <= 1; d++)
      same_age(edges[i] + (uint64_t)d);
  for (unsigned i = 0; i < 200000; i++)
    same_age(next() >> (next() % 64));
}

static void modes(void)
{
  char want[16], got[16];

  for (uint32_t m = 0; m < 070000; m++) {
    snprintf(want, sizeof want, "%04o", m);
    CHECK(strcmp(format_mode(m, got), want) == 0);
  }
  snprintf(want, sizeof want, "%04o", UINT32_MAX);
  CHECK(strcmp(format_mode(UINT32_MAX, got), want) == 0);
  checked += 070000 + 1;
}

static void truncation(void)
{
  char want[64], got[64];

  /* too small a buffer cuts as snprintf does (gpushmctl's never are) */
  for (volatile size_t len = 1; len < 12; len++) {
    printf_size(1536 * 1024, false, want, len);
    CHECK(strcmp(format_size(1536 * 1024, false, got, len), want) == 0);
    printf_age(12 * 3600000 + 7 * 60000, want, len);
    CHECK(strcmp(format_age(12 * 3600000 + 7 * 60000, got, len), want) == 0);
  }
}

int main(void)
{
  sizes();
  ages();
  modes();
  truncation();
  printf("test-ctl-format: %lu values formatted as printf formats them\n", checked);
  return 0;
}
