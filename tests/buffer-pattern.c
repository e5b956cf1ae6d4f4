/* SPDX-License-Identifier: MIT */
/* Test helper: a host buffer with a deterministic pattern, for checks that span
 * processes and daemon restarts (tests/system/test-systemd-pid1.sh).
 *
 *   buffer-pattern write NAME SIZE SEED [--session]
 *     creates the buffer (persistent: it outlives this process; --session: it lives
 *     while this process does, so the process prints "ready NAME" and then stays
 *     until its connection to gpushmd goes away or it is killed), fills SIZE bytes.
 *   buffer-pattern verify NAME SEED
 *     opens the buffer read-only and checks every byte.
 *
 * SIZE takes K, M and G suffixes.  Exit status: 0 ok, 1 failure (the reason on
 * stderr; a missing buffer reads "no such buffer"), 2 usage. */
#include "gpushm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t pattern_word(uint64_t seed, uint64_t i)
{
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ (seed * 0xd6e8feb86659fd93ull);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}

/* Byte i of the pattern: little-endian bytes of consecutive words. */
static uint8_t pattern_byte(uint64_t seed, uint64_t i)
{
  return (uint8_t)(pattern_word(seed, i / 8) >> (8 * (i % 8)));
}

static int parse_u64(const char *s, uint64_t *out, int suffixes)
{
  char *end;
  unsigned long long v;
  errno = 0;
  v = strtoull(s, &end, 0);
  if (errno || end == s || *s == '-')
    return -1;
  if (suffixes && *end) {
    unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (!shift || end[1] || v > (UINT64_MAX >> shift))
      return -1;
    v <<= shift;
    end++;
  }
  if (*end)
    return -1;
  *out = v;
  return 0;
}

static int fail(const char *what, const char *name, int r)
{
  fprintf(stderr, "buffer-pattern: %s %s: %s (%s)\n", what, name, gpushm_strerror(r),
          gpushm_last_error_message());
  return 1;
}

static int usage(void)
{
  fprintf(stderr, "usage: buffer-pattern write NAME SIZE SEED [--session]\n"
                  "       buffer-pattern verify NAME SEED\n");
  return 2;
}

static int cmd_write(gpushm_t *conn, const char *name, uint64_t size, uint64_t seed, int session)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *buf;
  struct timespec tick = { 0, 200 * 1000 * 1000 };
  uint8_t *p;
  int r;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST;
  opts.lifetime = session ? GPUSHM_LIFETIME_SESSION : GPUSHM_LIFETIME_PERSISTENT;
  if ((r = gpushm_buffer_create(conn, name, size, &opts, &buf)) < 0)
    return fail("create", name, r);
  p = gpushm_buffer_ptr(buf);
  for (uint64_t i = 0; i < size; i++)
    p[i] = pattern_byte(seed, i);
  if (!session) {
    gpushm_buffer_close(buf);
    printf("wrote %s: %" PRIu64 " bytes, seed %" PRIu64 "\n", name, size, seed);
    return 0;
  }
  printf("ready %s: %" PRIu64 " bytes, seed %" PRIu64 "\n", name, size, seed);
  fflush(stdout);
  /* The buffer lives as long as this connection: hold it until the daemon goes. */
  while ((r = gpushm_ping(conn)) == 0)
    nanosleep(&tick, NULL);
  printf("session holder of %s: connection ended (%s)\n", name, gpushm_strerror(r));
  return 0;
}

static int cmd_verify(gpushm_t *conn, const char *name, uint64_t seed)
{
  gpushm_buffer_t *buf;
  const uint8_t *p;
  uint64_t size, bad = 0, first = 0;
  int r;

  if ((r = gpushm_buffer_open(conn, name, GPUSHM_OPEN_READONLY, &buf)) < 0)
    return fail("open", name, r);
  p = gpushm_buffer_ptr(buf);
  size = gpushm_buffer_size(buf);
  for (uint64_t i = 0; i < size; i++)
    if (p[i] != pattern_byte(seed, i) && bad++ == 0)
      first = i;
  if (bad) {
    fprintf(stderr, "buffer-pattern: %s: %" PRIu64 " of %" PRIu64 " bytes differ from seed %" PRIu64
            "; first at offset %" PRIu64 ": 0x%02x, expected 0x%02x\n", name, bad, size, seed, first,
            p[first], pattern_byte(seed, first));
    gpushm_buffer_close(buf);
    return 1;
  }
  gpushm_buffer_close(buf);
  printf("verified %s: %" PRIu64 " bytes, seed %" PRIu64 "\n", name, size, seed);
  return 0;
}

int main(int argc, char **argv)
{
  gpushm_t *conn;
  uint64_t size = 0, seed;
  int write, session = 0, r;

  if (argc < 4)
    return usage();
  write = strcmp(argv[1], "write") == 0;
  if (write) {
    if (argc < 5 || argc > 6 || parse_u64(argv[3], &size, 1) < 0 || size == 0 ||
        parse_u64(argv[4], &seed, 0) < 0)
      return usage();
    if (argc == 6) {
      if (strcmp(argv[5], "--session") != 0)
        return usage();
      session = 1;
    }
  } else if (strcmp(argv[1], "verify") == 0) {
    if (argc != 4 || parse_u64(argv[3], &seed, 0) < 0)
      return usage();
  } else {
    return usage();
  }
  if ((r = gpushm_connect(NULL, "buffer-pattern", &conn)) < 0)
    return fail("connect", "", r);
  r = write ? cmd_write(conn, argv[2], size, seed, session) : cmd_verify(conn, argv[2], seed);
  gpushm_disconnect(conn);
  return r;
}
