/* SPDX-License-Identifier: MIT */
/* What the graphics examples agree on: the frame ring's name and slots, the frame's
 * size, and the picture frame f is (a colour wheel turning with f, its number's bars
 * below), so that every consumer can tell which frame it got. */
#ifndef GPUSHM_EXAMPLES_FRAMES_H
#define GPUSHM_EXAMPLES_FRAMES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define FRAME_RING "demo-frames"
#define FRAME_SLOTS 3u
#define FRAME_WIDTH 160u
#define FRAME_HEIGHT 90u

static inline void frame_render(uint8_t *rows, uint64_t pitch, unsigned f)
{
  const double cx = FRAME_WIDTH / 2.0, cy = FRAME_HEIGHT / 2.0 - 8, turn = f * 0.1;
  for (unsigned y = 0; y < FRAME_HEIGHT; y++) {
    uint8_t *p = rows + y * pitch;
    for (unsigned x = 0; x < FRAME_WIDTH; x++, p += 4) {
      double a = atan2(y - cy, x - cx) + turn, r = hypot(x - cx, y - cy) / cy;
      uint8_t on = r < 1.0 ? 255 : 40;
      p[0] = (uint8_t)(on * (0.5 + 0.5 * cos(a)));
      p[1] = (uint8_t)(on * (0.5 + 0.5 * cos(a + 2.094)));
      p[2] = (uint8_t)(on * (0.5 + 0.5 * cos(a + 4.189)));
      p[3] = 255;
      /* the frame number in binary, a bar per bit, along the bottom */
      if (y >= FRAME_HEIGHT - 8) {
        unsigned bit = x / (FRAME_WIDTH / 16);
        uint8_t v = (f >> (15 - bit)) & 1 ? 255 : 0;
        p[0] = p[1] = p[2] = v;
      }
    }
  }
}

#endif
