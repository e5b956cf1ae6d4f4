/* SPDX-License-Identifier: MIT */
/* What both graphics consumers do around their API: open the producer's frame ring, take
 * frames from it, tell which frame they got and whether it is whole, write it. */
#ifndef GPUSHM_EXAMPLES_FRAME_CONSUMER_H
#define GPUSHM_EXAMPLES_FRAME_CONSUMER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gpushm-graphics.h>

#include "frames.h"
#include "png.h"

/* Opens the frame ring as a consumer, its memory for a graphics API to import
 * (GPUSHM_RING_UNMAPPED), waiting up to 10 s for the producer to make it. */
static inline int consumer_open(gpushm_t *conn, gpushm_ring_t **ring)
{
  for (int i = 0; i < 1000; i++) {
    struct timespec pause = { 0, 10000000 };
    if (gpushm_ring_open(conn, FRAME_RING, GPUSHM_RING_UNMAPPED, ring) == 0)
      return 0;
    nanosleep(&pause, NULL);
  }
  fprintf(stderr, "no %s from a producer within 10 s: %s\n", FRAME_RING,
          gpushm_last_error_message());
  return -1;
}

/* The next frame numbered want or later: frames before it are released unread (the
 * producer goes on), the one returned is held until gpushm_ring_release(). */
static inline int consumer_next(gpushm_ring_t *ring, unsigned want, gpushm_ring_frame_t *f)
{
  int r;

  for (;;) {
    if ((r = gpushm_ring_acquire_frame(ring, 0, 10000, f)) < 0)
      return r;
    if (f->frame >= want)
      return 0;
    if ((r = gpushm_ring_release(ring, f)) < 0)
      return r;
  }
}

/* --help, and frame numbers: each from 1. */
static inline int consumer_args(const char *prog, int argc, char **argv)
{
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ||
        (i > 1 && (!*argv[i] || strspn(argv[i], "0123456789") != strlen(argv[i]) ||
                   atoi(argv[i]) < 1)) ||
        (i == 1 && argv[i][0] == '-')) {
      int help = strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
      fprintf(help ? stdout : stderr,
              "%s%susage: %s DIR [FRAME...]\n"
              "  Takes frames FRAME... (default 10 30 50) from the frame ring '%s' that\n"
              "  frame-producer presents, checks each is whole and writes DIR/*-frame-NNN.png;\n"
              "  where one has gone by, a later one.  Start frame-producer beside it\n"
              "  (examples/README.md).  Success ends with '%s: N frames, each identical\n"
              "  to what the producer rendered', exit 0.\n",
              help ? "" : prog, help ? "" : ": unknown argument\n", prog, FRAME_RING, prog);
      return help ? 0 : 2;
    }
  }
  return -1;
}

/* The frame number the bars of a frame's bottom rows say (tight RGBA8 rows). */
static inline unsigned consumer_frame_number(const uint8_t *rgba)
{
  unsigned n = 0;
  const uint8_t *row = rgba + (FRAME_HEIGHT - 4) * FRAME_WIDTH * 4;
  for (unsigned bit = 0; bit < 16; bit++)
    n = n << 1 | (row[(bit * (FRAME_WIDTH / 16) + FRAME_WIDTH / 32) * 4] > 127);
  return n;
}

/* What a frame that is not whole holds, in words: the number its bars say, how many of
 * its pixels differ from that frame's picture and in which rows, and whether it is blank
 * (a torn write, a read of the wrong slot and a failed read each look different). */
static inline void consumer_diagnose(const uint8_t *rgba, const uint8_t *want, unsigned number,
                                     char *why, size_t len)
{
  unsigned differ = 0, first_row = FRAME_HEIGHT, last_row = 0, blank = 1;

  for (unsigned i = 0; i < FRAME_WIDTH * FRAME_HEIGHT; i++) {
    if (memcmp(rgba + i * 4, want + i * 4, 4) != 0) {
      unsigned row = i / FRAME_WIDTH;
      differ++;
      first_row = row < first_row ? row : first_row;
      last_row = row > last_row ? row : last_row;
    }
    if (rgba[i * 4] | rgba[i * 4 + 1] | rgba[i * 4 + 2] | rgba[i * 4 + 3])
      blank = 0;
  }
  snprintf(why, len, "its bars say frame %u, %u of its %u pixels differ from that frame's "
           "(rows %u to %u)%s", number, differ, FRAME_WIDTH * FRAME_HEIGHT, first_row,
           last_row, blank ? "; every byte is zero" : "");
}

/* Checks a frame read back against what the producer renders for its number, and writes
 * it as PREFIX-frame-NNN.png in dir: 1 whole; 0 not (never while the ring holds the slot
 * for the consumer, unless the GPU failed the read: docs/python.md, read-only opens),
 * said on stderr and written as PREFIX-frame-NNN-torn.png for a look; -1 could not
 * write.  taken: the ring's number for the frame. */
static inline int consumer_keep(const char *dir, const char *prefix, const uint8_t *rgba,
                                unsigned taken, unsigned *number)
{
  static uint8_t want[FRAME_WIDTH * FRAME_HEIGHT * 4];
  char path[512], why[256];
  int whole;

  *number = consumer_frame_number(rgba);
  frame_render(want, FRAME_WIDTH * 4, *number);
  whole = memcmp(want, rgba, sizeof want) == 0;
  if (!whole) {
    consumer_diagnose(rgba, want, *number, why, sizeof why);
    fprintf(stderr, "frame-%s-consumer: frame %u: %s\n", prefix, taken, why);
  }
  snprintf(path, sizeof path, "%s/%s-frame-%03u%s.png", dir, prefix, whole ? *number : taken,
           whole ? "" : "-torn");
  if (png_write(path, rgba, FRAME_WIDTH, FRAME_HEIGHT, FRAME_WIDTH * 4) < 0)
    return -1;
  if (whole)
    printf("%s\n", path);
  return whole;
}

/* Seconds on a monotonic clock: how long a step took, where one took too long. */
static inline double consumer_now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#endif
