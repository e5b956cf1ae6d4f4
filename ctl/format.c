/* SPDX-License-Identifier: MIT */
#include "format.h"
#include "gpushm-graphics.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *format_decimal(uint64_t v, char *buf)
{
  char digits[20];
  size_t n = 0, i = 0;

  do
    digits[n++] = (char)('0' + v % 10);
  while ((v /= 10));
  while (n)
    buf[i++] = digits[--n];
  buf[i] = '\0';
  return buf;
}

const char *format_mode(uint32_t mode, char *buf)
{
  char digits[11];
  size_t n = 0, i = 0;

  do
    digits[n++] = (char)('0' + (mode & 7));
  while ((mode >>= 3));
  while (n < 4)
    digits[n++] = '0';
  while (n)
    buf[i++] = digits[--n];
  buf[i] = '\0';
  return buf;
}

/* n / 2^shift rounded to an integer the way printf rounds a double that holds it
 * exactly: to nearest, ties to even. */
static uint64_t shift_round_even(uint64_t n, unsigned shift)
{
  uint64_t q, rem, half;

  if (!shift)
    return n;
  q = n >> shift;
  rem = n & ((UINT64_C(1) << shift) - 1);
  half = UINT64_C(1) << (shift - 1);
  return q + (rem > half || (rem == half && (q & 1)));
}

/* s after the at bytes already in buf, cut to fit as snprintf cuts. */
static size_t append(char *buf, size_t at, size_t len, const char *s)
{
  size_t n = strlen(s);

  if (at >= len)
    return at;
  if (n > len - 1 - at)
    n = len - 1 - at;
  memcpy(buf + at, s, n);
  buf[at + n] = '\0';
  return at + n;
}

const char *format_size(uint64_t bytes, bool exact, char *buf, size_t len)
{
  static const char *units[] = { " B", " KiB", " MiB", " GiB", " TiB" };
  char digits[21];
  unsigned u = 0;
  size_t at;

  if (exact || bytes < 1024) {
    at = append(buf, 0, len, format_decimal(bytes, digits));
    if (!exact)
      append(buf, at, len, units[0]);
    return buf;
  }
  /* Past 2^53 a double no longer holds every byte count: let printf round those. */
  if (bytes >> 53) {
    double v = (double)bytes;
    while (v >= 1024 && u < 4) {
      v /= 1024;
      u++;
    }
    snprintf(buf, len, v < 10 ? "%.1f%s" : "%.0f%s", v, units[u]);
    return buf;
  }
  while (u < 4 && bytes >> (10 * (u + 1)))
    u++;
  if (bytes < (UINT64_C(10) << (10 * u))) {
    uint64_t tenths = shift_round_even(bytes * 10, 10 * u);
    char frac[3] = { '.', (char)('0' + tenths % 10), '\0' };
    at = append(buf, 0, len, format_decimal(tenths / 10, digits));
    at = append(buf, at, len, frac);
  } else {
    at = append(buf, 0, len, format_decimal(shift_round_even(bytes, 10 * u), digits));
  }
  append(buf, at, len, units[u]);
  return buf;
}

const char *format_age(uint64_t ms, char *buf, size_t len)
{
  uint64_t s = ms / 1000, major, minor;
  const char *major_unit, *minor_unit;
  char digits[21], two[3];
  size_t at;

  if (s < 3600) {
    at = append(buf, 0, len, format_decimal(s < 60 ? s : s / 60, digits));
    append(buf, at, len, s < 60 ? "s" : "m");
    return buf;
  }
  if (s < 86400) {
    major = s / 3600, minor = s / 60 % 60, major_unit = "h", minor_unit = "m";
  } else {
    major = s / 86400, minor = s / 3600 % 24, major_unit = "d", minor_unit = "h";
  }
  two[0] = (char)('0' + minor / 10);
  two[1] = (char)('0' + minor % 10);
  two[2] = '\0';
  at = append(buf, 0, len, format_decimal(major, digits));
  at = append(buf, at, len, major_unit);
  at = append(buf, at, len, two);
  append(buf, at, len, minor_unit);
  return buf;
}

const char *ctl_uuid_text(const uint8_t u[16], bool mig, char *buf, size_t len)
{
  char hex[GPUSHM_UUID_TEXT_SIZE];

  snprintf(buf, len, "%s-%s", mig ? "MIG" : "GPU", gpushm_uuid_text(u, hex));
  return buf;
}

bool ctl_is_mig(const char *device_name)
{
  return strstr(device_name, " MIG ") != NULL;
}

