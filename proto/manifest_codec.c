/* SPDX-License-Identifier: MIT */
/* WeightManifest coded and checked by hand: see manifest_codec.h for why.  Field numbers
 * are WeightManifest's and WeightTensor's in gpushm.proto.  proto3 rules: a scalar at
 * its zero value and an empty string are left out, repeated int64s are packed (a reader
 * takes them unpacked too), negative int64s are ten-byte varints. */
#include "config.h"
#include "manifest_codec.h"
#include "pb_varint.h"
#include "gpushm_limits.h"
#include "protocol.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>


enum { F_VERSION = 1, F_TENSORS = 2 };
enum {
  F_NAME = 1,
  F_DTYPE_CODE = 2,
  F_DTYPE_BITS = 3,
  F_DTYPE_LANES = 4,
  F_SHAPE = 5,
  F_STRIDES = 6,
  F_BUFFER = 7,
  F_OFFSET = 8,
};

#define NDIM_MAX GPUSHM_LIMIT_TENSOR_NDIM
#define MANIFEST_VERSION 1u
/* The widest element alignment asked for: what a 16-byte vector load needs. */
#define ALIGN_MAX 16u
/* Bytes of a name an error message shows (escaped, up to four characters a byte). */
#define NAME_SHOWN 64u

/* ---- refusals -------------------------------------------------------------------- */

/* Which tensor a refusal is about (NO_TENSOR: the manifest as a whole), and its name
 * once known. */
#define NO_TENSOR SIZE_MAX
struct where {
  size_t tensor;
  const uint8_t *name;
  size_t name_len;
};

/* A name as an error message may show it whatever bytes it holds: printable ASCII as
 * is, anything else (a terminal's escape sequence, a line break, UTF-8) as \xNN. */
static void escape_name(char *out, size_t out_size, const uint8_t *name, size_t len)
{
  static const char hex[] = "0123456789abcdef";
  size_t n = 0, shown = len < NAME_SHOWN ? len : NAME_SHOWN;

  for (size_t i = 0; i < shown && n + 5 < out_size; i++) {
    uint8_t c = name[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out[n++] = (char)c;
    } else {
      out[n++] = '\\';
      out[n++] = 'x';
      out[n++] = hex[c >> 4];
      out[n++] = hex[c & 15];
    }
  }
  if (shown < len && n + 4 < out_size) {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = '\0';
}

#define ESCAPED_NAME_SIZE (4 * NAME_SHOWN + 8)

__attribute__((format(printf, 5, 6))) static int refuse(int code, char *err, size_t errlen,
                                                        const struct where *at,
                                                        const char *fmt, ...)
{
  char reason[256], name[ESCAPED_NAME_SIZE];
  va_list ap;

  if (!err || !errlen)
    return code;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  if (at->tensor == NO_TENSOR) {
    snprintf(err, errlen, "manifest: %s", reason);
  } else if (at->name_len) {
    escape_name(name, sizeof name, at->name, at->name_len);
    snprintf(err, errlen, "tensor %zu \"%s\": %s", at->tensor, name, reason);
  } else {
    snprintf(err, errlen, "tensor %zu: %s", at->tensor, reason);
  }
  return code;
}

/* ---- reading protobuf ------------------------------------------------------------ */

/* Tags, lengths, dtypes and buffer indexes are mostly one byte, extents two */
static inline __attribute__((always_inline)) bool get_varint(struct pb_reader *r, uint64_t *out)
{
  if (r->p < r->end && *r->p < 0x80) {
    *out = *r->p++;
    return true;
  }
  if (r->end - r->p >= 2 && r->p[1] < 0x80) {
    *out = (uint64_t)(r->p[0] & 0x7f) | (uint64_t)r->p[1] << 7;
    r->p += 2;
    return true;
  }
  return pb_get_varint_slow(r, out);
}

/* Why a varint starting at p could not be read. */
static const char *varint_problem(const uint8_t *p, const uint8_t *end)
{
  for (unsigned i = 0; i < 10; i++) {
    if (p + i == end)
      return "truncated varint";
    if (!(p[i] & 0x80))
      break;
  }
  return "varint longer than 64 bits";
}

/* One field: its number and wire type, a varint's value, a length-delimited field's
 * contents (fixed-size ones are skipped: no field of ours is one). */
struct field {
  const uint8_t *start;
  unsigned number, wire_type;
  uint64_t value;
  struct pb_reader contents;
};

static inline __attribute__((always_inline)) bool next_field(struct pb_reader *r, struct field *f,
                                                              const char **why)
{
  const uint8_t *at;
  uint64_t v;

  f->start = r->p;
  if (!get_varint(r, &v)) {
    *why = varint_problem(f->start, r->end);
    return false;
  }
  /* protobuf-c reads tags of at most five bytes, field numbers of at most 29 bits */
  if (r->p - f->start > 5 || v >> 3 == 0 || v >> 3 > 0x1fffffff) {
    *why = "bad tag";
    return false;
  }
  f->number = (unsigned)(v >> 3);
  f->wire_type = (unsigned)(v & 7);
  at = r->p;
  switch (f->wire_type) {
  case PB_WT_VARINT:
    if (!get_varint(r, &f->value)) {
      *why = varint_problem(at, r->end);
      return false;
    }
    return true;
  case PB_WT_FIXED64:
  case PB_WT_FIXED32: {
    size_t size = f->wire_type == PB_WT_FIXED64 ? 8 : 4;
    if ((size_t)(r->end - r->p) < size) {
      *why = "truncated fixed-size field";
      return false;
    }
    r->p += size;
    return true;
  }
  case PB_WT_LEN:
    if (!get_varint(r, &v)) {
      *why = varint_problem(at, r->end);
      return false;
    }
    if (r->p - at > 5) {
      *why = "length prefix longer than 5 bytes";
      return false;
    }
    if (v > (uint64_t)(r->end - r->p)) {
      *why = "truncated: a length runs past the end";
      return false;
    }
    f->contents.p = r->p;
    f->contents.end = r->p + v;
    r->p += v;
    return true;
  default:
    *why = "unsupported wire type (a group?)";
    return false;
  }
}

/* The state of one decode, for the positions and texts of its refusals. */
struct decoder {
  const uint8_t *base;
  char *err;
  size_t errlen;
};

static int malformed(const struct decoder *d, const struct where *at, const uint8_t *pos,
                     const char *why)
{
  return refuse(PROTO_E_INVAL, d->err, d->errlen, at, "malformed protobuf at byte %zu: %s",
                (size_t)(pos - d->base), why);
}

static int wrong_wire_type(const struct decoder *d, const struct where *at,
                           const struct field *f)
{
  return refuse(PROTO_E_INVAL, d->err, d->errlen, at,
                "malformed protobuf at byte %zu: wrong wire type %u for field %u",
                (size_t)(f->start - d->base), f->wire_type, f->number);
}

/* ---- checking a tensor ----------------------------------------------------------- */

/* What a manifest (or a writer's caller) says of one tensor, unchecked.  The counts are
 * as given; shape and strides hold the first NDIM_MAX of them. */
struct claim {
  const uint8_t *name;
  size_t name_len;
  uint64_t dtype_code, dtype_bits, dtype_lanes, buffer, offset;
  size_t ndim, n_strides;
  const int64_t *shape, *strides;
};

/* NULL if name is valid UTF-8 (no overlong form, surrogate or code point past U+10FFFF)
 * without control characters (C0, DEL, C1: what a terminal or log would act on); else
 * why, and *at the byte. */
static const char *name_problem(const uint8_t *s, size_t len, size_t *at)
{
  const uint64_t ones = 0x0101010101010101ull, high_bits = 0x8080808080808080ull;
  size_t i = 0;

  while (i < len) {
    uint8_t c = s[i], lo = 0x80, hi = 0xbf;
    size_t follow;
    uint32_t cp;

    /* Names are ASCII mostly: eight bytes at a time while none is >= 0x80, < 0x20 (it
     * would borrow into its top bit in x - 0x20...) or 0x7f (likewise in (x ^ 0x7f...) - 1...) */
    if (len - i >= 8) {
      uint64_t x;
      memcpy(&x, s + i, 8);
      if (!((x | (x - 0x20 * ones) | ((x ^ 0x7f * ones) - ones)) & high_bits)) {
        i += 8;
        continue;
      }
    }
    if (c >= 0x20 && c < 0x7f) {
      i++;
      continue;
    }
    *at = i;
    if (c < 0x80)
      return "has a control character";
    if (c >= 0xc2 && c <= 0xdf) {
      follow = 1;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      follow = 2;
      cp = c & 0x0f;
      lo = c == 0xe0 ? 0xa0 : 0x80; /* shorter forms are overlong */
      hi = c == 0xed ? 0x9f : 0xbf; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
      follow = 3;
      cp = c & 0x07;
      lo = c == 0xf0 ? 0x90 : 0x80;
      hi = c == 0xf4 ? 0x8f : 0xbf; /* past U+10FFFF */
    } else {
      return "is not valid UTF-8";
    }
    if (len - i - 1 < follow)
      return "is not valid UTF-8";
    for (size_t k = 1; k <= follow; k++) {
      uint8_t b = s[i + k];
      if (b < lo || b > hi)
        return "is not valid UTF-8";
      lo = 0x80;
      hi = 0xbf;
      cp = cp << 6 | (b & 0x3f);
    }
    if (cp >= 0x80 && cp <= 0x9f)
      return "has a control character";
    i += follow + 1;
  }
  return NULL;
}

enum span_result { SPAN_OK, SPAN_EMPTY, SPAN_OVERFLOW, SPAN_BEFORE_START };

/* [*first, *end): the bytes from the lowest element's first to the highest element's
 * last + 1, relative to the buffer, for strides of either sign. */
static enum span_result tensor_span(uint64_t offset, size_t ndim, const int64_t *shape,
                                    const int64_t *strides, uint64_t elem_size,
                                    uint64_t *first, uint64_t *end)
{
  int64_t low = 0, high = 0, low_bytes, high_bytes; /* from element [0,...,0] */
  uint64_t below;

  for (size_t k = 0; k < ndim; k++)
    if (shape[k] == 0)
      return SPAN_EMPTY;
  for (size_t k = 0; k < ndim; k++) {
    int64_t reach;
    if (__builtin_mul_overflow(shape[k] - 1, strides[k], &reach) ||
        (reach < 0 ? __builtin_add_overflow(low, reach, &low)
                   : __builtin_add_overflow(high, reach, &high)))
      return SPAN_OVERFLOW;
  }
  if (__builtin_mul_overflow(low, (int64_t)elem_size, &low_bytes) ||
      __builtin_mul_overflow(high, (int64_t)elem_size, &high_bytes))
    return SPAN_OVERFLOW;
  below = (uint64_t)0 - (uint64_t)low_bytes; /* INT64_MIN too */
  if (below > offset)
    return SPAN_BEFORE_START;
  *first = offset - below;
  if (__builtin_add_overflow(offset, (uint64_t)high_bytes, end) ||
      __builtin_add_overflow(*end, elem_size, end))
    return SPAN_OVERFLOW;
  return SPAN_OK;
}

static uint64_t element_size(const struct manifest_tensor *t)
{
  return (uint64_t)(t->dtype_bits / 8) * t->dtype_lanes;
}

bool manifest_tensor_span(const struct manifest_tensor *t, uint64_t *first, uint64_t *end)
{
  /* decode checked the span: only an empty one is not OK */
  return tensor_span(t->offset, t->ndim, t->shape, t->strides, element_size(t), first, end) ==
         SPAN_OK;
}

/* Checks c (against the buffers if buffer_sizes) and fills t but for its name, shape and
 * strides, and strides_out (ndim strides: C-contiguous where c has none). */
static int check_tensor(const struct claim *c, const uint64_t *buffer_sizes,
                        uint32_t n_buffers, const struct where *at, char *err, size_t errlen,
                        struct manifest_tensor *t, int64_t *strides_out)
{
  uint64_t lanes = c->dtype_lanes ? c->dtype_lanes : 1, elem_size, align, first, end;
  const char *problem;
  size_t pos;

  if (c->name_len == 0)
    return refuse(PROTO_E_INVAL, err, errlen, at, "name is empty");
  if (c->name_len > GPUSHM_LIMIT_WEIGHT_NAME)
    return refuse(PROTO_E_LIMIT, err, errlen, at, "name is %zu bytes long, over the limit of %u",
                  c->name_len, GPUSHM_LIMIT_WEIGHT_NAME);
  if ((problem = name_problem(c->name, c->name_len, &pos)))
    return refuse(PROTO_E_INVAL, err, errlen, at, "name %s (at byte %zu)", problem, pos);
  if (c->dtype_code > 255)
    return refuse(PROTO_E_INVAL, err, errlen, at, "dtype code %llu is over 255",
                  (unsigned long long)c->dtype_code);
  if (c->dtype_bits > 255)
    return refuse(PROTO_E_INVAL, err, errlen, at, "dtype bits %llu are over 255",
                  (unsigned long long)c->dtype_bits);
  if (c->dtype_bits == 0 || c->dtype_bits % 8)
    return refuse(PROTO_E_INVAL, err, errlen, at,
                  "dtype bits %llu are not a whole number of bytes (or 0)",
                  (unsigned long long)c->dtype_bits);
  if (c->dtype_lanes > 65535)
    return refuse(PROTO_E_INVAL, err, errlen, at, "dtype lanes %llu are over 65535",
                  (unsigned long long)c->dtype_lanes);
  if (buffer_sizes && c->buffer >= n_buffers)
    return refuse(PROTO_E_INVAL, err, errlen, at,
                  "buffer index %llu, but the generation has %u buffers",
                  (unsigned long long)c->buffer, n_buffers);
  if (c->ndim > NDIM_MAX)
    return refuse(PROTO_E_INVAL, err, errlen, at, "%zu dimensions, over the limit of %u",
                  c->ndim, NDIM_MAX);
  if (c->n_strides && c->n_strides != c->ndim)
    return refuse(PROTO_E_INVAL, err, errlen, at, "%zu strides for %zu dimensions",
                  c->n_strides, c->ndim);
  for (size_t k = 0; k < c->ndim; k++)
    if (c->shape[k] < 0)
      return refuse(PROTO_E_INVAL, err, errlen, at, "dimension %zu has a negative extent (%lld)",
                    k, (long long)c->shape[k]);
  if (c->n_strides) {
    memcpy(strides_out, c->strides, c->ndim * sizeof *strides_out);
  } else {
    /* an extent of 0 counts as 1, as NumPy and PyTorch have it: no zero strides */
    int64_t stride = 1;
    for (size_t k = c->ndim; k-- > 0;) {
      strides_out[k] = stride;
      if (__builtin_mul_overflow(stride, c->shape[k] ? c->shape[k] : 1, &stride) && k > 0)
        return refuse(PROTO_E_INVAL, err, errlen, at,
                      "arithmetic overflow in its C-contiguous strides");
    }
  }

  t->dtype_code = (uint8_t)c->dtype_code;
  t->dtype_bits = (uint8_t)c->dtype_bits;
  t->dtype_lanes = (uint16_t)lanes;
  t->ndim = (uint32_t)c->ndim;
  t->buffer = (uint32_t)c->buffer;
  t->offset = c->offset;
  elem_size = element_size(t);

  switch (tensor_span(c->offset, c->ndim, c->shape, strides_out, elem_size, &first, &end)) {
  case SPAN_OVERFLOW:
    return refuse(PROTO_E_INVAL, err, errlen, at,
                  "arithmetic overflow in the bytes its elements span");
  case SPAN_BEFORE_START:
    return refuse(PROTO_E_INVAL, err, errlen, at,
                  "an element lies outside buffer %llu, before its start (offset %llu)",
                  (unsigned long long)c->buffer, (unsigned long long)c->offset);
  case SPAN_EMPTY:
    /* no element to be outside; a pointer to the first may still point just past it */
    if (buffer_sizes && c->offset > buffer_sizes[c->buffer])
      return refuse(PROTO_E_INVAL, err, errlen, at,
                    "offset %llu lies outside buffer %llu (%llu bytes)",
                    (unsigned long long)c->offset, (unsigned long long)c->buffer,
                    (unsigned long long)buffer_sizes[c->buffer]);
    break;
  case SPAN_OK:
    if (buffer_sizes && end > buffer_sizes[c->buffer])
      return refuse(PROTO_E_INVAL, err, errlen, at,
                    "elements up to byte %llu lie outside buffer %llu (%llu bytes)",
                    (unsigned long long)end, (unsigned long long)c->buffer,
                    (unsigned long long)buffer_sizes[c->buffer]);
    break;
  }
  /* strides count in elements, so every element is as aligned as the first */
  align = elem_size & (~elem_size + 1);
  if (align > ALIGN_MAX)
    align = ALIGN_MAX;
  if (c->offset % align)
    return refuse(PROTO_E_INVAL, err, errlen, at,
                  "offset %llu is not aligned to %llu bytes (elements of %llu bytes)",
                  (unsigned long long)c->offset, (unsigned long long)align,
                  (unsigned long long)elem_size);
  return 0;
}

/* ---- the name index -------------------------------------------------------------- */

/* SipHash-1-3 under a key chosen at random for each manifest: a manifest's author, who
 * does not know the key, cannot make names collide and the index slow. */
#define ROTL64(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                         \
  do {                                                                                   \
    v0 += v1;                                                                            \
    v1 = ROTL64(v1, 13);                                                                 \
    v1 ^= v0;                                                                            \
    v0 = ROTL64(v0, 32);                                                                 \
    v2 += v3;                                                                            \
    v3 = ROTL64(v3, 16);                                                                 \
    v3 ^= v2;                                                                            \
    v0 += v3;                                                                            \
    v3 = ROTL64(v3, 21);                                                                 \
    v3 ^= v0;                                                                            \
    v2 += v1;                                                                            \
    v1 = ROTL64(v1, 17);                                                                 \
    v1 ^= v2;                                                                            \
    v2 = ROTL64(v2, 32);                                                                 \
  } while (0)

static uint64_t name_hash(const uint64_t key[2], const uint8_t *s, size_t len)
{
  uint64_t v0 = 0x736f6d6570736575ull ^ key[0], v1 = 0x646f72616e646f6dull ^ key[1];
  uint64_t v2 = 0x6c7967656e657261ull ^ key[0], v3 = 0x7465646279746573ull ^ key[1];
  uint64_t last = (uint64_t)len << 56;
  const uint8_t *whole_end = s + (len & ~(size_t)7);

  for (; s != whole_end; s += 8) {
    uint64_t m;
    memcpy(&m, s, 8); /* the host's byte order: the hash never leaves the process */
    v3 ^= m;
    SIPROUND;
    v0 ^= m;
  }
  for (size_t i = 0; i < (len & 7); i++)
    last |= (uint64_t)s[i] << (8 * i);
  v3 ^= last;
  SIPROUND;
  v0 ^= last;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

#undef SIPROUND
#undef ROTL64

static void random_key(uint64_t key[2])
{
  struct timespec now;

  if (getrandom(key, 2 * sizeof *key, GRND_NONBLOCK) == (ssize_t)(2 * sizeof *key))
    return;
  /* Only early in boot, before the pool is ready: unknown enough to another process */
  clock_gettime(CLOCK_MONOTONIC, &now);
  key[0] = ((uint64_t)now.tv_nsec * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uintptr_t)key;
  key[1] = ((uint64_t)now.tv_sec << 20) ^ ((uint64_t)getpid() << 40) ^
           (uint64_t)(uintptr_t)&now;
}

/* An index slot: a tag of the name's hash (its top bits) above the tensor's index + 1;
 * 0 is free.  Four bytes, not eight: the index is a fifth of what a decode touches. */
#define SLOT_INDEX_BITS 20
#define SLOT_TAG_BITS (32 - SLOT_INDEX_BITS)
_Static_assert(GPUSHM_LIMIT_WEIGHT_TENSORS < (1u << SLOT_INDEX_BITS),
               "a tensor's index + 1 fits below an index slot's tag");

static uint32_t slot_tag(uint64_t hash)
{
  return (uint32_t)(hash >> (64 - SLOT_TAG_BITS)) << SLOT_INDEX_BITS;
}

/* What storage_ begins with; the tensors, the index, the names, then the shapes and
 * strides follow in the same allocation. */
struct manifest_storage {
  uint64_t hash_key[2];
  uint32_t *index;
  size_t index_mask;
  size_t mapped_size; /* 0: from calloc() */
};

/* The slot holding the tensor named name, or the free slot it would take. */
static uint32_t *index_slot(const struct manifest_storage *st,
                            const struct manifest_tensor *tensors, uint64_t hash,
                            const char *name, size_t len)
{
  const uint32_t tag = slot_tag(hash), tag_mask = ~((1u << SLOT_INDEX_BITS) - 1);

  for (size_t pos = (size_t)hash & st->index_mask;; pos = (pos + 1) & st->index_mask) {
    uint32_t *slot = &st->index[pos];
    const struct manifest_tensor *t;
    if (!*slot)
      return slot;
    if ((*slot & tag_mask) != tag)
      continue;
    t = &tensors[(*slot & ~tag_mask) - 1];
    if (t->name_len == len && memcmp(t->name, name, len) == 0)
      return slot;
  }
}

static long slot_tensor(uint32_t slot)
{
  return (long)(slot & ((1u << SLOT_INDEX_BITS) - 1)) - 1;
}

long manifest_find(const struct manifest *m, const char *name, size_t len)
{
  const struct manifest_storage *st = m->storage_;

  if (!st || len > GPUSHM_LIMIT_WEIGHT_NAME || (len && !name))
    return -1;
  return slot_tensor(*index_slot(st, m->tensors,
                                 name_hash(st->hash_key, (const uint8_t *)name, len), name,
                                 len));
}

/* Indexes every tensor's name, refusing one seen twice.  The slots are scattered over
 * megabytes: each is fetched a few names ahead of its insertion, so that the misses
 * overlap instead of coming one after the other. */
#define INDEX_PREFETCH 8
static int build_index(struct manifest_storage *st, const struct manifest_tensor *tensors,
                       size_t n, char *err, size_t errlen)
{
  uint64_t ahead[INDEX_PREFETCH];

  for (size_t i = 0; i < n + INDEX_PREFETCH; i++) {
    if (i >= INDEX_PREFETCH) {
      size_t due = i - INDEX_PREFETCH; /* the tensor hashed INDEX_PREFETCH names ago */
      const struct manifest_tensor *t = &tensors[due];
      uint64_t hash = ahead[due % INDEX_PREFETCH];
      uint32_t *slot = index_slot(st, tensors, hash, t->name, t->name_len);
      if (*slot) {
        struct where at = { due, (const uint8_t *)t->name, t->name_len };
        return refuse(PROTO_E_INVAL, err, errlen, &at, "name seen twice (first as tensor %ld)",
                      slot_tensor(*slot));
      }
      *slot = slot_tag(hash) | (uint32_t)(due + 1);
    }
    if (i < n) {
      uint64_t hash = name_hash(st->hash_key, (const uint8_t *)tensors[i].name,
                                tensors[i].name_len);
      __builtin_prefetch(&st->index[hash & st->index_mask], 1);
      ahead[i % INDEX_PREFETCH] = hash;
    }
  }
  return 0;
}

/* ---- decoding -------------------------------------------------------------------- */

/* What the first pass finds: how much the arena must hold. */
struct sizes {
  size_t n_tensors, name_bytes, n_values;
  uint64_t version;
};

/* Packed varints: as many as bytes without the continuation bit (the second pass reads
 * them properly and refuses a malformed run). */
static size_t count_packed(struct pb_reader r)
{
  size_t n = 0;

  for (; r.p < r.end; r.p++)
    n += *r.p < 0x80;
  return n;
}

/* First pass over a tensor: its structure, the bytes its last name takes and the shape
 * values it may keep. */
static int measure_tensor(const struct decoder *d, struct pb_reader r, size_t index,
                          struct sizes *s)
{
  struct where at = { index, NULL, 0 };
  size_t n_shape = 0;
  const char *why;
  struct field f = { 0 };

  while (r.p < r.end) {
    if (!next_field(&r, &f, &why))
      return malformed(d, &at, f.start, why);
    switch (f.number) {
    case F_NAME:
      if (f.wire_type != PB_WT_LEN)
        return wrong_wire_type(d, &at, &f);
      at.name = f.contents.p;
      at.name_len = (size_t)(f.contents.end - f.contents.p);
      break;
    case F_SHAPE:
    case F_STRIDES:
      if (f.wire_type != PB_WT_LEN && f.wire_type != PB_WT_VARINT)
        return wrong_wire_type(d, &at, &f);
      if (f.number == F_SHAPE)
        n_shape += f.wire_type == PB_WT_VARINT ? 1 : count_packed(f.contents);
      break;
    case F_DTYPE_CODE:
    case F_DTYPE_BITS:
    case F_DTYPE_LANES:
    case F_BUFFER:
    case F_OFFSET:
      if (f.wire_type != PB_WT_VARINT)
        return wrong_wire_type(d, &at, &f);
      break;
    default: /* a newer writer's field */
      break;
    }
  }
  /* a longer name is refused before it is copied; the arena needs none of its bytes */
  if (at.name_len <= GPUSHM_LIMIT_WEIGHT_NAME)
    s->name_bytes += at.name_len + 1;
  s->n_values += 2 * (n_shape < NDIM_MAX ? n_shape : NDIM_MAX);
  return 0;
}

/* ---- chunks, and the threads that take them --------------------------------------- */

/* A large manifest is measured and decoded in chunks of this many tensors, by up to
 * DECODE_THREADS_MAX threads (the caller one of them) where the process may run on more
 * than one CPU: a 100,000-tensor manifest took 10 of a 12.7 ms first open on one.  Fewer
 * than PARALLEL_MIN_CHUNKS chunks are not worth a thread's start. */
#ifndef MANIFEST_CHUNK_TENSORS /* a fuzz build takes fewer, to reach the chunks' code */
#define MANIFEST_CHUNK_TENSORS 4096u
#endif
#define CHUNK_TENSORS MANIFEST_CHUNK_TENSORS
#define DECODE_THREADS_MAX 8u
#define PARALLEL_MIN_CHUNKS 4u
/* An error's text while it is a thread's (refuse() writes at most this much). */
#define CHUNK_ERR_SIZE 1024u

/* The top-level fields [start, end) holding tensors first .. first + n - 1 (and whatever
 * other fields lie between them), and what they need of the arena. */
struct chunk {
  const uint8_t *start, *end;
  size_t first, n;
  size_t name_bytes, n_values; /* measured */
  size_t names_at, values_at;  /* where its names and values go in the arena */
};

/* Top-level walk: the version, the tensor count, the chunks.  A refusal here is held in
 * *scan_rc / scan_err, not returned: a tensor before it that is refused itself is
 * reported instead, as one pass in order would have it.  0, or PROTO_E_NOMEM. */
static int scan(const struct decoder *d, struct pb_reader r, struct sizes *s,
                struct chunk **chunks_out, size_t *n_chunks_out, int *scan_rc, char *scan_err)
{
  struct where manifest = { NO_TENSOR, NULL, 0 };
  struct chunk *chunks = NULL, *c = NULL;
  size_t n_chunks = 0, cap = 0;
  const char *why;
  struct field f = { 0 };

  memset(s, 0, sizeof *s);
  *scan_rc = 0;
  while (r.p < r.end) {
    if (!next_field(&r, &f, &why)) {
      *scan_rc = refuse(PROTO_E_INVAL, scan_err, CHUNK_ERR_SIZE, &manifest,
                        "malformed protobuf at byte %zu: %s", (size_t)(f.start - d->base), why);
      break;
    }
    if ((f.number == F_VERSION && f.wire_type != PB_WT_VARINT) ||
        (f.number == F_TENSORS && f.wire_type != PB_WT_LEN)) {
      *scan_rc = refuse(PROTO_E_INVAL, scan_err, CHUNK_ERR_SIZE, &manifest,
                        "malformed protobuf at byte %zu: wrong wire type %u for field %u",
                        (size_t)(f.start - d->base), f.wire_type, f.number);
      break;
    }
    if (f.number == F_VERSION)
      s->version = f.value;
    if (f.number != F_TENSORS)
      continue;
    if (s->n_tensors == GPUSHM_LIMIT_WEIGHT_TENSORS) {
      *scan_rc = refuse(PROTO_E_LIMIT, scan_err, CHUNK_ERR_SIZE, &manifest,
                        "more than %u tensors", GPUSHM_LIMIT_WEIGHT_TENSORS);
      break;
    }
    if (!c || c->n == CHUNK_TENSORS) {
      if (c)
        c->end = f.start;
      if (n_chunks == cap) {
        struct chunk *grown;
        cap = cap ? 2 * cap : 16;
        if (!(grown = realloc(chunks, cap * sizeof *chunks))) {
          free(chunks);
          return PROTO_E_NOMEM;
        }
        chunks = grown;
      }
      c = &chunks[n_chunks++];
      memset(c, 0, sizeof *c);
      c->start = f.start;
      c->first = s->n_tensors;
    }
    c->n++;
    s->n_tensors++;
  }
  if (c)
    c->end = *scan_rc ? f.start : r.p; /* a refused field is no chunk's */
  *chunks_out = chunks;
  *n_chunks_out = n_chunks;
  return 0;
}

/* One decode's shared state while threads take its chunks. */
struct chunk_work {
  const struct decoder *d;
  struct chunk *chunks;
  size_t n_chunks;
  unsigned threads; /* decode_threads() of n_chunks: each pass runs on as many */
  const uint64_t *buffer_sizes;
  uint32_t n_buffers;
  char *arena_names;     /* the decode phase's */
  int64_t *arena_values;
  struct manifest_tensor *tensors;
  const struct manifest_storage *storage; /* the index phase's */
  int (*run)(struct chunk_work *w, size_t chunk, const struct decoder *d);
  size_t next;           /* the next chunk to take (atomic) */
  pthread_mutex_t lock;  /* over the three below */
  size_t failed;         /* the lowest chunk refused, or SIZE_MAX */
  int rc;
  char err[CHUNK_ERR_SIZE];
};

static void take_chunks(struct chunk_work *w)
{
  char err[CHUNK_ERR_SIZE];
  struct decoder d = { w->d->base, err, sizeof err };
  size_t i;
  int rc;

  while ((i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED)) < w->n_chunks) {
    /* chunks are taken in order: every one below i is someone's, so a refusal past
     * the lowest one known cannot be the one reported */
    if (i > __atomic_load_n(&w->failed, __ATOMIC_RELAXED))
      break;
    err[0] = '\0';
    if (!(rc = w->run(w, i, &d)))
      continue;
    pthread_mutex_lock(&w->lock);
    if (i < w->failed) {
      __atomic_store_n(&w->failed, i, __ATOMIC_RELAXED);
      w->rc = rc;
      memcpy(w->err, err, sizeof err);
    }
    pthread_mutex_unlock(&w->lock);
  }
}

static void *chunk_thread(void *arg)
{
  take_chunks(arg);
  return NULL;
}

/* $GPUSHM_MANIFEST_THREADS caps the threads (1: the caller alone), for a process that
 * would rather keep its CPUs and for comparing the two (tests/bench/bench-weights). */
static unsigned decode_threads(size_t n_chunks)
{
  const char *cap;
  cpu_set_t cpus;
  unsigned n;

  if (n_chunks < PARALLEL_MIN_CHUNKS || sched_getaffinity(0, sizeof cpus, &cpus) != 0)
    return 1;
  cap = secure_getenv("GPUSHM_MANIFEST_THREADS");
  n = (unsigned)CPU_COUNT(&cpus);
  if (cap && *cap >= '1' && *cap <= '9' && !cap[1] && (unsigned)(*cap - '0') < n)
    n = (unsigned)(*cap - '0');
  if (n > DECODE_THREADS_MAX)
    n = DECODE_THREADS_MAX;
  return n > n_chunks ? (unsigned)n_chunks : (n ? n : 1);
}

/* Runs w->run on every chunk, on threads where they pay; 0, or the refusal of the
 * lowest chunk refused (its text in the decoder's err).  A thread that cannot be
 * started leaves its share to the others: the outcome is the same. */
static int run_chunks(struct chunk_work *w)
{
  pthread_t threads[DECODE_THREADS_MAX];
  unsigned n_threads = w->threads, started = 0;
  sigset_t all, old;

  w->next = 0;
  w->failed = SIZE_MAX;
  w->rc = 0;
  if (n_threads > 1) {
    /* no signal of the caller's is delivered to a thread of ours */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (started + 1 < n_threads &&
           pthread_create(&threads[started], NULL, chunk_thread, w) == 0)
      started++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  take_chunks(w);
  for (unsigned i = 0; i < started; i++)
    pthread_join(threads[i], NULL);
  if (w->rc && w->d->err && w->d->errlen)
    snprintf(w->d->err, w->d->errlen, "%s", w->err);
  return w->rc;
}

/* First pass over a chunk: its tensors' structure and the arena they need. */
static int measure_chunk(struct chunk_work *w, size_t i, const struct decoder *d)
{
  struct chunk *c = &w->chunks[i];
  struct pb_reader r = { c->start, c->end };
  struct sizes s = { 0 };
  size_t index = c->first;
  const char *why;
  struct field f = { 0 };
  int rc;

  while (r.p < r.end) {
    if (!next_field(&r, &f, &why) || (f.number == F_TENSORS && f.wire_type != PB_WT_LEN))
      return refuse(PROTO_E_INVAL, d->err, d->errlen, &(struct where){ NO_TENSOR, NULL, 0 },
                    "changed while it was read");
    if (f.number != F_TENSORS)
      continue;
    if (index == c->first + c->n)
      return refuse(PROTO_E_INVAL, d->err, d->errlen, &(struct where){ NO_TENSOR, NULL, 0 },
                    "changed while it was read");
    if ((rc = measure_tensor(d, f.contents, index++, &s)))
      return rc;
  }
  if (index != c->first + c->n)
    return refuse(PROTO_E_INVAL, d->err, d->errlen, &(struct where){ NO_TENSOR, NULL, 0 },
                  "changed while it was read");
  c->name_bytes = s.name_bytes;
  c->n_values = s.n_values;
  return 0;
}

/* A model repeats a few shapes (every layer's q_proj is alike): tensors of the same
 * shape and strides share one copy of them, found in a small cache of those seen last.
 * Less to write and, above all, fewer fresh pages for the kernel to clear. */
#define LAYOUT_CACHE_SIZE 64
struct layout {
  const int64_t *values; /* ndim extents, then ndim strides */
  size_t ndim;
};

/* Where the second pass puts a tensor's names and values: the arena's free parts. */
struct fill {
  struct manifest_tensor *tensors;
  int64_t *values;
  size_t values_left;
  char *names;
  size_t names_left;
  struct layout layouts[LAYOUT_CACHE_SIZE];
};

/* The shape and strides in the arena: a copy made earlier, or a new one. */
static const int64_t *store_layout(struct fill *fill, const int64_t *shape,
                                   const int64_t *strides, size_t ndim)
{
  uint64_t h = ndim;
  struct layout *cached;
  int64_t *copy;

  for (size_t k = 0; k < ndim; k++)
    h = (h ^ (uint64_t)shape[k] ^ (uint64_t)strides[k] << 17) * 0x9e3779b97f4a7c15ull;
  cached = &fill->layouts[h >> 58];
  if (cached->values && cached->ndim == ndim &&
      memcmp(cached->values, shape, ndim * sizeof *shape) == 0 &&
      memcmp(cached->values + ndim, strides, ndim * sizeof *strides) == 0)
    return cached->values;
  copy = fill->values;
  memcpy(copy, shape, ndim * sizeof *shape);
  memcpy(copy + ndim, strides, ndim * sizeof *strides);
  fill->values += 2 * ndim;
  fill->values_left -= 2 * ndim;
  cached->values = copy;
  cached->ndim = ndim;
  return copy;
}

static const char *uint32_field_name(unsigned number)
{
  switch (number) {
  case F_DTYPE_CODE: return "dtype_code";
  case F_DTYPE_BITS: return "dtype_bits";
  case F_DTYPE_LANES: return "dtype_lanes";
  default: return "buffer";
  }
}

/* Second pass over tensor index: read, copied into the arena, checked and indexed.  The
 * bytes may be a mapping another process can still write: nothing here relies on what
 * the first pass saw but the sizes, which it checks before using. */
static int decode_tensor(const struct decoder *d, struct pb_reader r, size_t index,
                         const uint64_t *buffer_sizes, uint32_t n_buffers, struct fill *fill)
{
  int64_t shape[NDIM_MAX], strides[NDIM_MAX], strides_out[NDIM_MAX];
  struct claim c = { .shape = shape, .strides = strides };
  struct where at = { index, NULL, 0 };
  struct manifest_tensor *t = &fill->tensors[index];
  const char *why;
  struct field f = { 0 };
  int rc;

  while (r.p < r.end) {
    if (!next_field(&r, &f, &why))
      return malformed(d, &at, f.start, why);
    switch (f.number) {
    case F_NAME:
      if (f.wire_type != PB_WT_LEN)
        return wrong_wire_type(d, &at, &f);
      at.name = c.name = f.contents.p;
      at.name_len = c.name_len = (size_t)(f.contents.end - f.contents.p);
      break;
    case F_DTYPE_CODE:
    case F_DTYPE_BITS:
    case F_DTYPE_LANES:
    case F_BUFFER:
      if (f.wire_type != PB_WT_VARINT)
        return wrong_wire_type(d, &at, &f);
      /* protobuf would keep the low 32 bits; no writer of ours sends more */
      if (f.value > UINT32_MAX)
        return refuse(PROTO_E_INVAL, d->err, d->errlen, &at,
                      "malformed protobuf at byte %zu: %llu is too large for uint32 %s",
                      (size_t)(f.start - d->base), (unsigned long long)f.value,
                      uint32_field_name(f.number));
      if (f.number == F_DTYPE_CODE)
        c.dtype_code = f.value;
      else if (f.number == F_DTYPE_BITS)
        c.dtype_bits = f.value;
      else if (f.number == F_DTYPE_LANES)
        c.dtype_lanes = f.value;
      else
        c.buffer = f.value;
      break;
    case F_OFFSET:
      if (f.wire_type != PB_WT_VARINT)
        return wrong_wire_type(d, &at, &f);
      c.offset = f.value;
      break;
    case F_SHAPE:
    case F_STRIDES: {
      int64_t *values = f.number == F_SHAPE ? shape : strides;
      size_t *count = f.number == F_SHAPE ? &c.ndim : &c.n_strides;
      if (f.wire_type == PB_WT_VARINT) {
        if (*count < NDIM_MAX)
          values[*count] = (int64_t)f.value;
        ++*count;
        break;
      }
      if (f.wire_type != PB_WT_LEN)
        return wrong_wire_type(d, &at, &f);
      while (f.contents.p < f.contents.end) {
        const uint8_t *value_start = f.contents.p;
        uint64_t v;
        if (!get_varint(&f.contents, &v))
          return malformed(d, &at, value_start, varint_problem(value_start, f.contents.end));
        if (*count < NDIM_MAX)
          values[*count] = (int64_t)v;
        ++*count;
      }
      break;
    }
    default: /* a newer writer's field */
      break;
    }
  }
  /* Checked as copied (the copy is what the manifest keeps): a name over the limit is
   * refused without one. */
  if (c.name_len && c.name_len <= GPUSHM_LIMIT_WEIGHT_NAME) {
    if (c.name_len + 1 > fill->names_left)
      return refuse(PROTO_E_INVAL, d->err, d->errlen, &at, "changed while it was read");
    memcpy(fill->names, c.name, c.name_len);
    fill->names[c.name_len] = '\0';
    at.name = c.name = (const uint8_t *)fill->names;
  }
  if ((rc = check_tensor(&c, buffer_sizes, n_buffers, &at, d->err, d->errlen, t, strides_out)))
    return rc;
  if (2 * c.ndim > fill->values_left)
    return refuse(PROTO_E_INVAL, d->err, d->errlen, &at, "changed while it was read");
  t->name = fill->names;
  t->name_len = (uint32_t)c.name_len;
  fill->names += c.name_len + 1;
  fill->names_left -= c.name_len + 1;
  t->shape = store_layout(fill, shape, strides_out, c.ndim);
  t->strides = t->shape + c.ndim;
  return 0;
}

/* Second pass over a chunk: its tensors read, checked and copied into its part of the
 * arena. */
static int decode_chunk(struct chunk_work *w, size_t i, const struct decoder *d)
{
  const struct chunk *c = &w->chunks[i];
  struct where manifest = { NO_TENSOR, NULL, 0 };
  struct pb_reader r = { c->start, c->end };
  struct fill fill = {
    .tensors = w->tensors,
    .names = w->arena_names + c->names_at,
    .names_left = c->name_bytes,
    .values = w->arena_values + c->values_at,
    .values_left = c->n_values,
  };
  size_t index = c->first;
  const char *why;
  struct field f = { 0 };
  int rc;

  while (r.p < r.end) {
    if (!next_field(&r, &f, &why) ||
        (f.number == F_TENSORS && (f.wire_type != PB_WT_LEN || index == c->first + c->n)))
      return refuse(PROTO_E_INVAL, d->err, d->errlen, &manifest, "changed while it was read");
    if (f.number != F_TENSORS)
      continue;
    if ((rc = decode_tensor(d, f.contents, index++, w->buffer_sizes, w->n_buffers, &fill)))
      return rc;
  }
  if (index != c->first + c->n)
    return refuse(PROTO_E_INVAL, d->err, d->errlen, &manifest, "changed while it was read");
  return 0;
}

/* Third pass over a chunk: its names into the index, slots claimed with a compare and
 * swap (the tensors are all written: the decode's threads are joined).  A name seen twice
 * is refused without a message: build_index(), in order, finds the one to report. */
static int index_chunk(struct chunk_work *w, size_t i, const struct decoder *d)
{
  const uint32_t tag_mask = ~((1u << SLOT_INDEX_BITS) - 1);
  const struct manifest_storage *st = w->storage;
  const struct chunk *c = &w->chunks[i];
  const size_t end = c->first + c->n;
  uint64_t ahead[INDEX_PREFETCH];

  (void)d;
  /* each name hashed and its slot fetched INDEX_PREFETCH names ahead of its insertion,
   * as build_index() does */
  for (size_t k = c->first; k < end + INDEX_PREFETCH; k++) {
    if (k >= c->first + INDEX_PREFETCH) {
      const size_t due = k - INDEX_PREFETCH;
      const struct manifest_tensor *t = &w->tensors[due];
      const uint64_t hash = ahead[due % INDEX_PREFETCH];
      const uint32_t tag = slot_tag(hash), mine = tag | (uint32_t)(due + 1);

      for (size_t pos = (size_t)hash & st->index_mask;; pos = (pos + 1) & st->index_mask) {
        uint32_t *slot = &st->index[pos], seen = __atomic_load_n(slot, __ATOMIC_RELAXED);
        const struct manifest_tensor *other;
        if (!seen && __atomic_compare_exchange_n(slot, &seen, mine, false, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED))
          break;
        if ((seen & tag_mask) != tag)
          continue;
        other = &w->tensors[(seen & ~tag_mask) - 1];
        if (other->name_len == t->name_len && memcmp(other->name, t->name, t->name_len) == 0)
          return PROTO_E_INVAL;
      }
    }
    if (k < end) {
      const struct manifest_tensor *t = &w->tensors[k];
      const uint64_t hash = name_hash(st->hash_key, (const uint8_t *)t->name, t->name_len);
      __builtin_prefetch(&st->index[hash & st->index_mask], 1);
      ahead[k % INDEX_PREFETCH] = hash;
    }
  }
  return 0;
}

/* a + b, or SIZE_MAX on overflow (which no allocation then gets) */
static size_t add_size(size_t a, size_t b)
{
  size_t sum;
  return __builtin_add_overflow(a, b, &sum) ? SIZE_MAX : sum;
}

static size_t mul_size(size_t a, size_t b)
{
  size_t product;
  return __builtin_mul_overflow(a, b, &product) ? SIZE_MAX : product;
}

/* Arenas this large come straight from the kernel, on huge pages where it has them and
 * filled in at once rather than with a fault per 4 KiB page: clearing fresh pages was
 * most of a large manifest's first decode. */
#define ARENA_MAP_MIN (4u << 20)

static void *arena_alloc(size_t size, size_t populate, size_t *mapped_size)
{
  if (size >= ARENA_MAP_MIN) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
#ifdef MADV_HUGEPAGE
      (void)madvise(p, size, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
      /* what is surely written; the shapes after it only as far as they are (an older
       * kernel refuses: its faults do it) */
      (void)madvise(p, populate, MADV_POPULATE_WRITE);
#endif
      *mapped_size = size;
      return p;
    }
  }
  *mapped_size = 0;
  return calloc(1, size);
}

static void arena_free(void *arena)
{
  struct manifest_storage *st = arena;

  if (st && st->mapped_size)
    munmap(st, st->mapped_size);
  else
    free(st);
}

int manifest_decode(const uint8_t *bytes, size_t len, const uint64_t *buffer_sizes,
                    uint32_t n_buffers, struct manifest *out, char *err, size_t errlen)
{
  static const uint64_t no_buffers[1];
  struct decoder d = { bytes, err, errlen };
  struct where manifest = { NO_TENSOR, NULL, 0 };
  struct pb_reader all = { bytes, bytes + len };
  size_t index_slots = 2, tensors_size, index_size, names_size, values_size, total, mapped;
  size_t n_chunks = 0, names_at = 0, values_at = 0, populate;
  struct chunk_work work = { .d = &d, .lock = PTHREAD_MUTEX_INITIALIZER };
  struct manifest_storage *st;
  struct chunk *chunks = NULL;
  char scan_err[CHUNK_ERR_SIZE];
  char *arena = NULL, *names;
  struct sizes s;
  bool indexed = false;
  int rc, scan_rc;

  memset(out, 0, sizeof *out);
  if (err && errlen)
    err[0] = '\0';
  if (!bytes && len)
    return refuse(PROTO_E_INVAL, err, errlen, &manifest, "no bytes");
  if (len > GPUSHM_LIMIT_WEIGHT_MANIFEST)
    return refuse(PROTO_E_LIMIT, err, errlen, &manifest,
                  "%zu bytes, over the limit of %llu", len,
                  (unsigned long long)GPUSHM_LIMIT_WEIGHT_MANIFEST);
  if (!buffer_sizes) {
    buffer_sizes = no_buffers;
    n_buffers = 0;
  }
  if (scan(&d, all, &s, &chunks, &n_chunks, &scan_rc, scan_err))
    return refuse(PROTO_E_NOMEM, err, errlen, &manifest, "no memory to read it");
  work.chunks = chunks;
  work.n_chunks = n_chunks;
  work.threads = decode_threads(n_chunks);
  work.buffer_sizes = buffer_sizes;
  work.n_buffers = n_buffers;
  work.run = measure_chunk;
  if ((rc = run_chunks(&work)))
    goto fail;
  if (scan_rc) {
    rc = scan_rc;
    if (err && errlen)
      snprintf(err, errlen, "%s", scan_err);
    goto fail;
  }
  if (s.version != MANIFEST_VERSION) {
    rc = refuse(PROTO_E_INVAL, err, errlen, &manifest, "version %llu, not %u",
                (unsigned long long)s.version, MANIFEST_VERSION);
    goto fail;
  }
  if (s.n_tensors == 0) {
    rc = refuse(PROTO_E_INVAL, err, errlen, &manifest, "no tensors");
    goto fail;
  }
  for (size_t i = 0; i < n_chunks; i++) {
    chunks[i].names_at = names_at;
    chunks[i].values_at = values_at;
    names_at += chunks[i].name_bytes; /* each at most the manifest's length: no overflow */
    values_at += chunks[i].n_values;
  }
  s.name_bytes = names_at;
  s.n_values = values_at;

  /* at most half full: probes stay short */
  while (index_slots < 2 * s.n_tensors)
    index_slots *= 2;
  tensors_size = mul_size(s.n_tensors, sizeof *out->tensors);
  index_size = mul_size(index_slots, sizeof *st->index);
  names_size = add_size(s.name_bytes, 7) & ~(size_t)7; /* the values after them aligned */
  values_size = mul_size(s.n_values, sizeof(int64_t));
  total = add_size(add_size(add_size(add_size(sizeof *st, tensors_size), index_size),
                            names_size),
                   values_size);
  /* decoded on threads, each faults in its own part: filled in here, one thread would
   * clear every page first */
  populate = work.threads > 1 ? 0 : total - values_size;
  if (total == SIZE_MAX || !(arena = arena_alloc(total, populate, &mapped))) {
    rc = refuse(PROTO_E_NOMEM, err, errlen, &manifest, "no memory for %zu tensors",
                s.n_tensors);
    goto fail;
  }
  st = (struct manifest_storage *)arena;
  st->mapped_size = mapped;
  work.tensors = (struct manifest_tensor *)(arena + sizeof *st);
  st->index = (uint32_t *)((char *)work.tensors + tensors_size);
  st->index_mask = index_slots - 1;
  names = (char *)st->index + index_size;
  work.arena_names = names;
  work.arena_values = (int64_t *)(names + names_size);
  random_key(st->hash_key);

  work.run = decode_chunk;
  if ((rc = run_chunks(&work)))
    goto fail;
  if (work.threads > 1) {
    work.run = index_chunk;
    work.storage = st;
    indexed = run_chunks(&work) == 0;
    if (!indexed)
      memset(st->index, 0, index_size); /* a name seen twice: which one, found in order */
  }
  if (!indexed && (rc = build_index(st, work.tensors, s.n_tensors, err, errlen)))
    goto fail;
  free(chunks);
  out->version = MANIFEST_VERSION;
  out->n_tensors = s.n_tensors;
  out->tensors = work.tensors;
  out->storage_ = arena;
  return 0;

fail:
  free(chunks);
  arena_free(arena);
  return rc;
}

void manifest_free(struct manifest *m)
{
  arena_free(m->storage_);
  memset(m, 0, sizeof *m);
}

/* ---- overlaps -------------------------------------------------------------------- */

struct span {
  uint64_t first, end;
  uint32_t buffer, tensor;
};

static int span_order(const void *a, const void *b)
{
  const struct span *x = a, *y = b;

  if (x->buffer != y->buffer)
    return x->buffer < y->buffer ? -1 : 1;
  if (x->first != y->first)
    return x->first < y->first ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return x->tensor < y->tensor ? -1 : x->tensor > y->tensor;
}

/* Tied weights: the same elements, read the same way. */
static bool same_layout(const struct manifest_tensor *a, const struct manifest_tensor *b)
{
  return a->buffer == b->buffer && a->offset == b->offset && a->dtype_code == b->dtype_code &&
         a->dtype_bits == b->dtype_bits && a->dtype_lanes == b->dtype_lanes &&
         a->ndim == b->ndim && memcmp(a->shape, b->shape, a->ndim * sizeof *a->shape) == 0 &&
         memcmp(a->strides, b->strides, a->ndim * sizeof *a->strides) == 0;
}

int manifest_check_overlaps(const struct manifest *m, char *err, size_t errlen)
{
  struct span *spans;
  size_t n = 0, reach_owner = 0;
  uint64_t reach = 0;
  int rc = 0;

  if (err && errlen)
    err[0] = '\0';
  if (!m->n_tensors)
    return 0;
  if (!(spans = malloc(mul_size(m->n_tensors, sizeof *spans)))) {
    if (err && errlen)
      snprintf(err, errlen, "manifest: no memory to check %zu tensors for overlaps",
               m->n_tensors);
    return PROTO_E_NOMEM;
  }
  for (size_t i = 0; i < m->n_tensors; i++) {
    const struct manifest_tensor *t = &m->tensors[i];
    struct span *s = &spans[n];
    /* decode checked every tensor's span: anything but OK means no elements */
    if (tensor_span(t->offset, t->ndim, t->shape, t->strides, element_size(t), &s->first,
                    &s->end) != SPAN_OK)
      continue;
    s->buffer = t->buffer;
    s->tensor = (uint32_t)i;
    n++;
  }
  /* a writer lays tensors out in order, mostly: then there is nothing to sort */
  for (size_t i = 1; i < n; i++)
    if (span_order(&spans[i - 1], &spans[i]) > 0) {
      qsort(spans, n, sizeof *spans, span_order);
      break;
    }
  /* Sorted by start, a span overlaps an earlier one iff it starts before the furthest
   * end so far; an alias of that end's owner has the same span, so checking against the
   * owner alone finds every overlap that is not an alias. */
  for (size_t i = 0; i < n; i++) {
    const struct span *s = &spans[i];
    if (i == 0 || s->buffer != spans[i - 1].buffer) {
      reach = s->end;
      reach_owner = i;
      continue;
    }
    if (s->first < reach &&
        !same_layout(&m->tensors[s->tensor], &m->tensors[spans[reach_owner].tensor])) {
      const struct span *o = &spans[reach_owner];
      const struct manifest_tensor *a = &m->tensors[o->tensor], *b = &m->tensors[s->tensor];
      char a_name[ESCAPED_NAME_SIZE], b_name[ESCAPED_NAME_SIZE];
      escape_name(a_name, sizeof a_name, (const uint8_t *)a->name, a->name_len);
      escape_name(b_name, sizeof b_name, (const uint8_t *)b->name, b->name_len);
      if (err && errlen)
        snprintf(err, errlen,
                 "tensors %u \"%s\" and %u \"%s\" overlap in buffer %u: bytes [%llu, %llu) "
                 "and [%llu, %llu)",
                 o->tensor, a_name, s->tensor, b_name, s->buffer,
                 (unsigned long long)o->first, (unsigned long long)o->end,
                 (unsigned long long)s->first, (unsigned long long)s->end);
      rc = PROTO_E_INVAL;
      break;
    }
    if (s->end > reach) {
      reach = s->end;
      reach_owner = i;
    }
  }
  free(spans);
  return rc;
}

/* ---- writing --------------------------------------------------------------------- */


static size_t packed_size(const int64_t *values, size_t n)
{
  size_t size = 0;
  for (size_t i = 0; i < n; i++)
    size += pb_varint_size((uint64_t)values[i]);
  return size;
}

/* One walk for both: with p NULL it counts, otherwise it writes too (the same code
 * doing both keeps the length prefix and the bytes in agreement). */
#define VARINT(field, value)                                                             \
  do {                                                                                   \
    uint64_t v_ = (value);                                                               \
    if (v_) {                                                                            \
      if (p)                                                                             \
        p = pb_put_varint(pb_put_tag(p, (field), PB_WT_VARINT), v_);                              \
      n += 1 + pb_varint_size(v_);                                                          \
    }                                                                                    \
  } while (0)
#define PACKED(field, values, count)                                                     \
  do {                                                                                   \
    size_t count_ = (count), l_;                                                         \
    if (count_) {                                                                        \
      l_ = packed_size((values), count_);                                                \
      if (p) {                                                                           \
        p = pb_put_varint(pb_put_tag(p, (field), PB_WT_LEN), l_);                                 \
        for (size_t i_ = 0; i_ < count_; i_++)                                           \
          p = pb_put_varint(p, (uint64_t)(values)[i_]);                                     \
      }                                                                                  \
      n += 1 + pb_varint_size(l_) + l_;                                                     \
    }                                                                                    \
  } while (0)

/* t's WeightTensor body as protobuf-c packs it: fields in number order. */
static size_t tensor_body(uint8_t *p, const struct manifest_tensor *t)
{
  size_t n = 0;

  if (p) {
    p = pb_put_varint(pb_put_tag(p, F_NAME, PB_WT_LEN), t->name_len);
    memcpy(p, t->name, t->name_len);
    p += t->name_len;
  }
  n += 1 + pb_varint_size(t->name_len) + t->name_len;
  VARINT(F_DTYPE_CODE, t->dtype_code);
  VARINT(F_DTYPE_BITS, t->dtype_bits);
  VARINT(F_DTYPE_LANES, t->dtype_lanes);
  PACKED(F_SHAPE, t->shape, t->ndim);
  PACKED(F_STRIDES, t->strides, t->strides ? t->ndim : 0);
  VARINT(F_BUFFER, t->buffer);
  VARINT(F_OFFSET, t->offset);
  return n;
}

#undef VARINT
#undef PACKED

#define VERSION_FIELD_SIZE 2u

static bool writer_grow(struct manifest_writer *w, size_t need)
{
  size_t cap = w->cap ? w->cap : 256;
  uint8_t *grown;

  while (cap - w->len < need)
    cap = mul_size(cap, 2);
  if (cap == SIZE_MAX || !(grown = realloc(w->data, cap)))
    return false;
  w->data = grown;
  w->cap = cap;
  return true;
}

static void writer_put_version(struct manifest_writer *w)
{
  w->data[0] = F_VERSION << 3 | PB_WT_VARINT;
  w->data[1] = MANIFEST_VERSION;
  w->len = VERSION_FIELD_SIZE;
}

void manifest_writer_init(struct manifest_writer *w)
{
  memset(w, 0, sizeof *w);
  /* Without memory now, the first add writes the version (or says there is none) */
  if (writer_grow(w, VERSION_FIELD_SIZE))
    writer_put_version(w);
}

int manifest_writer_add(struct manifest_writer *w, const struct manifest_tensor *t,
                        const uint64_t *buffer_sizes, uint32_t n_buffers, char *err,
                        size_t errlen)
{
  int64_t strides_out[NDIM_MAX];
  struct manifest_tensor checked;
  struct claim c = {
    .name = (const uint8_t *)t->name,
    .name_len = t->name_len,
    .dtype_code = t->dtype_code,
    .dtype_bits = t->dtype_bits,
    .dtype_lanes = t->dtype_lanes,
    .buffer = t->buffer,
    .offset = t->offset,
    .ndim = t->ndim,
    .n_strides = t->strides ? t->ndim : 0,
    .shape = t->shape,
    .strides = t->strides,
  };
  struct where at = { w->n_tensors, c.name, c.name_len };
  size_t body, need;
  int rc;

  if (err && errlen)
    err[0] = '\0';
  if ((c.name_len && !c.name) || (c.ndim && !c.shape)) {
    at.name_len = 0;
    return refuse(PROTO_E_INVAL, err, errlen, &at, "no name or shape where they are due");
  }
  if (w->n_tensors >= GPUSHM_LIMIT_WEIGHT_TENSORS)
    return refuse(PROTO_E_LIMIT, err, errlen, &at, "more than %u tensors",
                  GPUSHM_LIMIT_WEIGHT_TENSORS);
  if ((rc = check_tensor(&c, buffer_sizes, n_buffers, &at, err, errlen, &checked,
                         strides_out)))
    return rc;
  body = tensor_body(NULL, t);
  need = 1 + pb_varint_size(body) + body + (w->len ? 0 : VERSION_FIELD_SIZE);
  if (w->len + need > GPUSHM_LIMIT_WEIGHT_MANIFEST)
    return refuse(PROTO_E_LIMIT, err, errlen, &at, "the manifest would pass %llu bytes",
                  (unsigned long long)GPUSHM_LIMIT_WEIGHT_MANIFEST);
  if (w->cap - w->len < need && !writer_grow(w, need))
    return refuse(PROTO_E_NOMEM, err, errlen, &at, "no memory for the manifest");
  if (!w->len)
    writer_put_version(w);
  {
    uint8_t *p = pb_put_varint(pb_put_tag(w->data + w->len, F_TENSORS, PB_WT_LEN), body);
    p += tensor_body(p, t);
    w->len = (size_t)(p - w->data);
  }
  w->n_tensors++;
  return 0;
}

void manifest_writer_free(struct manifest_writer *w)
{
  free(w->data);
  memset(w, 0, sizeof *w);
}
