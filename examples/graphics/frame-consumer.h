/* SPDX-License-Identifier: MIT */
/* What both graphics consumers do around their API: find the producer's objects, wait
 * for a frame number, tell which frame they got and whether it is whole, write it. */
#ifndef GPUSHM_EXAMPLES_FRAME_CONSUMER_H
#define GPUSHM_EXAMPLES_FRAME_CONSUMER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gpushm-graphics.h>

#include "frames.h"
#include "png.h"

/* Opens the image for graphics (GPUSHM_DEVICE_NONE) and its sequence, waiting up to 10 s
 * for the producer to make them. */
static inline int consumer_open(gpushm_t *conn, gpushm_buffer_t **image, gpushm_buffer_t **seq)
{
  gpushm_open_opts_t o;
  gpushm_open_opts_init(&o);
  o.map_device = GPUSHM_DEVICE_NONE;
  o.flags = GPUSHM_OPEN_READONLY;
  *image = NULL;
  for (int i = 0; i < 1000; i++) {
    struct timespec pause = { 0, 10000000 };
    /* the image first: the producer creates it before the sequence */
    if ((*image || gpushm_buffer_open_ex(conn, FRAME_IMAGE, 0, &o, image) == 0) &&
        gpushm_buffer_open(conn, FRAME_SEQ, GPUSHM_OPEN_READONLY, seq) == 0)
      return 0;
    nanosleep(&pause, NULL);
  }
  fprintf(stderr, "no %s from a producer within 10 s: %s\n", *image ? FRAME_SEQ : FRAME_IMAGE,
          gpushm_last_error_message());
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

/* Checks a frame read back against what the producer renders for its number, and writes
 * it as PREFIX-frame-NNN.png in dir: 1 whole, 0 torn (the producer wrote on meanwhile),
 * -1 could not write. */
static inline int consumer_keep(const char *dir, const char *prefix, const uint8_t *rgba,
                                unsigned *number)
{
  static uint8_t want[FRAME_WIDTH * FRAME_HEIGHT * 4];
  char path[512];

  *number = consumer_frame_number(rgba);
  frame_render(want, FRAME_WIDTH * 4, *number);
  if (memcmp(want, rgba, sizeof want) != 0)
    return 0;
  snprintf(path, sizeof path, "%s/%s-frame-%03u.png", dir, prefix, *number);
  if (png_write(path, rgba, FRAME_WIDTH, FRAME_HEIGHT, FRAME_WIDTH * 4) < 0)
    return -1;
  printf("%s\n", path);
  return 1;
}

#endif
