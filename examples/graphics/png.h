/* SPDX-License-Identifier: MIT */
/* Writes an RGBA8 image as a PNG with no dependency: its zlib stream is made of stored
 * (uncompressed) blocks, which every PNG reader takes.  For the graphics examples'
 * frames, not for speed or size. */
#ifndef GPUSHM_EXAMPLES_PNG_H
#define GPUSHM_EXAMPLES_PNG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline uint32_t png_crc(uint32_t crc, const uint8_t *p, size_t n)
{
  static uint32_t table[256];
  if (!table[1])
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++)
        c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
  crc = ~crc;
  while (n--)
    crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

static inline void png_be32(uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static inline int png_chunk(FILE *f, const char *type, const uint8_t *data, uint32_t len)
{
  uint8_t head[8], tail[4];
  uint32_t crc;
  png_be32(head, len);
  memcpy(head + 4, type, 4);
  crc = png_crc(png_crc(0, head + 4, 4), data, len);
  png_be32(tail, crc);
  return fwrite(head, 1, 8, f) == 8 && fwrite(data, 1, len, f) == len &&
                 fwrite(tail, 1, 4, f) == 4 ? 0 : -1;
}

/* rows: height rows of width RGBA8 texels, stride bytes apart.  0, or -1. */
static inline int png_write(const char *path, const uint8_t *rows, uint32_t width, uint32_t height,
                            size_t stride)
{
  static const uint8_t signature[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
  size_t raw_len = (size_t)height * (1 + (size_t)width * 4), blocks = raw_len / 65535 + 1;
  uint8_t ihdr[13], *raw = malloc(raw_len), *z = malloc(raw_len + blocks * 5 + 6);
  uint32_t a = 1, b = 0;
  size_t at = 0, zn = 0;
  FILE *f;
  int r = -1;

  if (!raw || !z)
    goto out;
  for (uint32_t y = 0; y < height; y++) {
    raw[at++] = 0; /* no filter */
    memcpy(raw + at, rows + y * stride, (size_t)width * 4);
    at += (size_t)width * 4;
  }
  z[zn++] = 0x78;
  z[zn++] = 0x01;
  for (size_t off = 0; off < raw_len;) {
    size_t n = raw_len - off < 65535 ? raw_len - off : 65535;
    z[zn++] = off + n == raw_len; /* BFINAL, stored */
    z[zn++] = (uint8_t)n;
    z[zn++] = (uint8_t)(n >> 8);
    z[zn++] = (uint8_t)~n;
    z[zn++] = (uint8_t)(~n >> 8);
    memcpy(z + zn, raw + off, n);
    zn += n;
    off += n;
  }
  for (size_t i = 0; i < raw_len; i++) {
    a = (a + raw[i]) % 65521;
    b = (b + a) % 65521;
  }
  png_be32(z + zn, (b << 16) | a);
  zn += 4;
  png_be32(ihdr, width);
  png_be32(ihdr + 4, height);
  ihdr[8] = 8;  /* bits per channel */
  ihdr[9] = 6;  /* RGBA */
  ihdr[10] = ihdr[11] = ihdr[12] = 0;
  if (!(f = fopen(path, "wb")))
    goto out;
  r = fwrite(signature, 1, 8, f) == 8 && png_chunk(f, "IHDR", ihdr, 13) == 0 &&
          png_chunk(f, "IDAT", z, (uint32_t)zn) == 0 && png_chunk(f, "IEND", NULL, 0) == 0
        ? 0 : -1;
  if (fclose(f) != 0)
    r = -1;
out:
  free(raw);
  free(z);
  return r;
}

#endif
