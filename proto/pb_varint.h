/* SPDX-License-Identifier: MIT */
/* The protobuf wire format's varints and tags, for the codecs written by hand
 * (list_codec.c, manifest_codec.c): what protobuf-c writes, read back strictly. */
#ifndef GPUSHM_PB_VARINT_H
#define GPUSHM_PB_VARINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { PB_WT_VARINT = 0, PB_WT_FIXED64 = 1, PB_WT_LEN = 2, PB_WT_FIXED32 = 5 };

static inline size_t pb_varint_size(uint64_t v)
{
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static inline uint8_t *pb_put_varint(uint8_t *p, uint64_t v)
{
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

static inline size_t pb_tag_size(unsigned field)
{
  return pb_varint_size((uint64_t)field << 3);
}

static inline uint8_t *pb_put_tag(uint8_t *p, unsigned field, unsigned wire_type)
{
  return pb_put_varint(p, (uint64_t)field << 3 | wire_type);
}

/* Bytes [p, end) still to read. */
struct pb_reader {
  const uint8_t *p, *end;
};

/* Any varint of up to ten bytes; false where it runs past the end or past 64 bits. */
static inline bool pb_get_varint_slow(struct pb_reader *r, uint64_t *out)
{
  uint64_t v = 0;

  for (unsigned shift = 0; shift < 64; shift += 7) {
    uint8_t b;
    if (r->p == r->end)
      return false;
    b = *r->p++;
    /* the tenth byte may carry only bit 63 */
    if (shift == 63 && b > 1)
      return false;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

#endif
