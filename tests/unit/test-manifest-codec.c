/* SPDX-License-Identifier: MIT */
/* manifest_codec against protobuf-c and against each rule it enforces: the writer packs
 * random manifests (every dtype width, lanes 0 and 1, scalars, empty tensors, strides of
 * either sign or none, 32 dimensions) byte for byte as protobuf-c does; the decoder
 * reads them, and the same content spelt every other way protobuf allows (unpacked and
 * split repeated fields, fields out of order or twice, overlong varints, unknown
 * fields), to the same tensors; every refusal is shown on a manifest that passes but for
 * that one thing; the tensor limit is crossed; overlaps; and the time a 100,000- and a
 * 1,000,000-tensor manifest take to decode is logged. */
#include "config.h"
#include "harness.h"
#include "gpushm.pb-c.h"
#include "gpushm_limits.h"
#include "manifest_codec.h"
#include "protocol.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define ROUNDS 300
#define MAX_TENSORS 24
#define ERR_SIZE 512

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* ---- bytes by hand --------------------------------------------------------------- */

struct bytes {
  uint8_t *data;
  size_t len, cap;
};

static void put(struct bytes *b, const void *p, size_t n)
{
  if (b->cap - b->len < n) {
    b->cap = (b->cap + n) * 2;
    CHECK((b->data = realloc(b->data, b->cap)) != NULL);
  }
  if (n)
    memcpy(b->data + b->len, p, n);
  b->len += n;
}

static void put_byte(struct bytes *b, unsigned byte)
{
  uint8_t c = (uint8_t)byte;
  put(b, &c, 1);
}

static void put_varint(struct bytes *b, uint64_t v)
{
  while (v >= 0x80) {
    put_byte(b, (unsigned)(v & 0x7f) | 0x80);
    v >>= 7;
  }
  put_byte(b, (unsigned)v);
}

/* The same value in more bytes than it needs: still the value, to protobuf. */
static void put_overlong_varint(struct bytes *b, uint64_t v)
{
  CHECK(v < (1u << 14));
  put_byte(b, (unsigned)(v & 0x7f) | 0x80);
  put_byte(b, (unsigned)(v >> 7) | 0x80);
  put_byte(b, 0);
}

static void put_tag(struct bytes *b, unsigned field, unsigned wire_type)
{
  put_varint(b, (uint64_t)field << 3 | wire_type);
}

static void put_len_field(struct bytes *b, unsigned field, const void *p, size_t n)
{
  put_tag(b, field, 2);
  put_varint(b, n);
  put(b, p, n);
}

static void put_varint_field(struct bytes *b, unsigned field, uint64_t v)
{
  put_tag(b, field, 0);
  put_varint(b, v);
}

/* ---- manifests through protobuf-c ------------------------------------------------ */

/* One tensor as protobuf-c holds it, and the storage it points to. */
struct pc_tensor {
  Gpushm__WeightTensor w;
  char name[GPUSHM_LIMIT_WEIGHT_NAME + 2];
  int64_t shape[GPUSHM_LIMIT_TENSOR_NDIM + 1], strides[GPUSHM_LIMIT_TENSOR_NDIM + 1];
};

static void pc_tensor_init(struct pc_tensor *t, const char *name, uint32_t code, uint32_t bits,
                           uint32_t lanes, size_t ndim, const int64_t *shape,
                           const int64_t *strides, uint32_t buffer, uint64_t offset)
{
  gpushm__weight_tensor__init(&t->w);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->w.name = t->name;
  t->w.dtype_code = code;
  t->w.dtype_bits = bits;
  t->w.dtype_lanes = lanes;
  memcpy(t->shape, shape, ndim * sizeof *shape);
  t->w.n_shape = ndim;
  t->w.shape = t->shape;
  if (strides)
    memcpy(t->strides, strides, ndim * sizeof *strides);
  t->w.n_strides = strides ? ndim : 0;
  t->w.strides = t->strides;
  t->w.buffer = buffer;
  t->w.offset = offset;
}

/* protobuf-c's packing of a manifest of n tensors (malloc()ed). */
static uint8_t *pc_pack(struct pc_tensor *ts, size_t n, uint32_t version, size_t *len)
{
  Gpushm__WeightManifest m = GPUSHM__WEIGHT_MANIFEST__INIT;
  Gpushm__WeightTensor **ptrs = malloc((n ? n : 1) * sizeof *ptrs);
  uint8_t *out;

  CHECK(ptrs != NULL);
  for (size_t i = 0; i < n; i++)
    ptrs[i] = &ts[i].w;
  m.version = version;
  m.n_tensors = n;
  m.tensors = ptrs;
  *len = gpushm__weight_manifest__get_packed_size(&m);
  CHECK((out = malloc(*len ? *len : 1)) != NULL);
  CHECK(gpushm__weight_manifest__pack(&m, out) == *len);
  free(ptrs);
  return out;
}

/* What the writer takes for a protobuf-c tensor: the same content. */
static struct manifest_tensor as_manifest_tensor(const Gpushm__WeightTensor *w)
{
  struct manifest_tensor t = {
    .name = w->name,
    .name_len = (uint32_t)strlen(w->name),
    .dtype_code = (uint8_t)w->dtype_code,
    .dtype_bits = (uint8_t)w->dtype_bits,
    .dtype_lanes = (uint16_t)w->dtype_lanes,
    .ndim = (uint32_t)w->n_shape,
    .shape = w->shape,
    .strides = w->n_strides ? w->strides : NULL,
    .buffer = w->buffer,
    .offset = w->offset,
  };
  return t;
}

/* The decoded tensor says what the protobuf-c one does (lanes 0 read as 1, no strides
 * as C-contiguous ones, an extent of 0 counting as 1 in them). */
static void expect_same(const struct manifest_tensor *t, const Gpushm__WeightTensor *w)
{
  int64_t stride = 1;

  CHECK(t->name_len == strlen(w->name) && memcmp(t->name, w->name, t->name_len) == 0);
  CHECK(t->name[t->name_len] == '\0');
  CHECK(t->dtype_code == w->dtype_code && t->dtype_bits == w->dtype_bits);
  CHECK(t->dtype_lanes == (w->dtype_lanes ? w->dtype_lanes : 1));
  CHECK(t->ndim == w->n_shape);
  CHECK(t->buffer == w->buffer && t->offset == w->offset);
  for (size_t k = 0; k < t->ndim; k++)
    CHECK(t->shape[k] == w->shape[k]);
  for (size_t k = t->ndim; k-- > 0;) {
    CHECK(t->strides[k] == (w->n_strides ? w->strides[k] : stride));
    stride *= w->shape[k] ? w->shape[k] : 1;
  }
}

/* ---- random tensors -------------------------------------------------------------- */

#define BIG_BUFFER (1ull << 44)

/* Lowest and highest element, in bytes from element [0,...,0] (wide: an independent
 * reckoning of what the codec computes with overflow checks). */
static void span_of(const Gpushm__WeightTensor *w, const int64_t *strides, __int128 *low,
                    __int128 *high)
{
  *low = *high = 0;
  for (size_t k = 0; k < w->n_shape; k++) {
    __int128 reach = (__int128)(w->shape[k] - 1) * strides[k];
    *(reach < 0 ? low : high) += reach;
  }
}

static void random_tensor(struct pc_tensor *t, unsigned index, uint32_t n_buffers)
{
  static const uint32_t widths[] = { 8, 16, 32, 64, 128, 24, 248 };
  static const uint32_t lane_counts[] = { 0, 1, 1, 2, 3, 4, 65535 };
  static const char *const pieces[] = { "weight", "bias", "\xc3\xa9", "\xe2\x82\xac",
                                        "\xf0\x9d\x84\x9e", "_", "-", "~" };
  uint32_t bits = widths[next() % 7], lanes = lane_counts[next() % 7], align;
  size_t ndim = next() % 8 == 0 ? (next() % 3 ? 0 : GPUSHM_LIMIT_TENSOR_NDIM) : next() % 5;
  int64_t shape[GPUSHM_LIMIT_TENSOR_NDIM], strides[GPUSHM_LIMIT_TENSOR_NDIM];
  uint64_t elem = bits / 8 * (lanes ? lanes : 1), offset;
  bool given = next() % 2, empty = false;
  __int128 low, high;
  char name[128];
  int n;

  n = snprintf(name, sizeof name, "t%u.", index);
  for (unsigned i = 0, pieces_n = (unsigned)(next() % 4); i < pieces_n; i++)
    n += snprintf(name + n, sizeof name - (size_t)n, "%s", pieces[next() % 8]);
  for (size_t k = 0; k < ndim; k++) {
    shape[k] = k >= 4 ? 1 : (int64_t)(next() % 9);
    empty |= shape[k] == 0;
  }
  /* given strides: C order scaled, a dimension reversed, broadcast (0) now and then */
  for (size_t k = ndim, stride = 1 + next() % 3; k-- > 0;) {
    strides[k] = (int64_t)stride * (next() % 4 == 0 ? -1 : 1);
    if (next() % 10 == 0)
      strides[k] = 0;
    stride *= (size_t)(shape[k] ? shape[k] : 1);
  }
  pc_tensor_init(t, name, (uint32_t)(next() % 256), bits, lanes, ndim, shape,
                 given ? strides : NULL, (uint32_t)(next() % n_buffers), 0);
  if (!given)
    for (size_t k = ndim, stride = 1; k-- > 0;) {
      strides[k] = (int64_t)stride;
      stride *= (size_t)(shape[k] ? shape[k] : 1);
    }
  span_of(&t->w, strides, &low, &high);
  align = (uint32_t)(elem & (~elem + 1));
  if (align > 16)
    align = 16;
  offset = empty ? 0 : (uint64_t)(-low * (__int128)elem);
  offset = (offset + align - 1) / align * align + align * (next() % 1000);
  t->w.offset = offset;
}

static const uint64_t big_buffers[4] = { BIG_BUFFER, BIG_BUFFER, BIG_BUFFER, BIG_BUFFER };

static void decode_ok(const uint8_t *bytes, size_t len, const uint64_t *sizes, uint32_t n,
                      struct manifest *m)
{
  char err[ERR_SIZE];
  int rc = manifest_decode(bytes, len, sizes, n, m, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "manifest_decode: %d: %s\n", rc, err);
    exit(1);
  }
}

/* Random manifests: the writer's bytes are protobuf-c's, and read back the same. */
static void test_round_trips(void)
{
  static struct pc_tensor ts[MAX_TENSORS];

  for (unsigned round = 0; round < ROUNDS; round++) {
    size_t n = 1 + next() % MAX_TENSORS, pc_len;
    struct manifest_writer w;
    struct manifest m;
    uint8_t *pc;
    char err[ERR_SIZE];

    manifest_writer_init(&w);
    for (size_t i = 0; i < n; i++) {
      struct manifest_tensor t;
      random_tensor(&ts[i], (unsigned)i, 4);
      t = as_manifest_tensor(&ts[i].w);
      if (manifest_writer_add(&w, &t, big_buffers, 4, err, sizeof err) != 0) {
        fprintf(stderr, "manifest_writer_add: %s\n", err);
        exit(1);
      }
    }
    CHECK(w.n_tensors == n);
    pc = pc_pack(ts, n, 1, &pc_len);
    CHECK(w.len == pc_len && memcmp(w.data, pc, pc_len) == 0);

    decode_ok(w.data, w.len, big_buffers, 4, &m);
    CHECK(m.version == 1 && m.n_tensors == n);
    for (size_t i = 0; i < n; i++) {
      expect_same(&m.tensors[i], &ts[i].w);
      CHECK(manifest_find(&m, ts[i].name, strlen(ts[i].name)) == (long)i);
    }
    /* random layouts overlap or not: only that it answers */
    (void)manifest_check_overlaps(&m, err, sizeof err);
    manifest_free(&m);
    manifest_free(&m); /* zeroed: harmless */
    free(pc);
    manifest_writer_free(&w);
  }
}

/* The content of t spelt as protobuf allows but protobuf-c never packs it. */
static void put_odd_tensor(struct bytes *out, const Gpushm__WeightTensor *w, unsigned variant)
{
  static const uint8_t junk[] = { 0xff, 0x00, 0x12, 0x80 };
  struct bytes body = { 0 }, packed = { 0 };

  put_varint_field(&body, 9, 12345);                /* unknown fields of each type */
  put_len_field(&body, 100, junk, sizeof junk);
  put_tag(&body, 10, 1);
  put(&body, "\1\2\3\4\5\6\7\10", 8);
  put_tag(&body, 15, 5);
  put(&body, "\1\2\3\4", 4);
  put_varint_field(&body, 536870911, 1);            /* the largest field number */
  put_varint_field(&body, 8, 77);                   /* offset, overwritten below */
  put_len_field(&body, 1, "bad\n", 4);              /* a name overwritten below */
  /* dtype in reverse order, the buffer index overlong */
  put_tag(&body, 7, 0);
  put_overlong_varint(&body, w->buffer);
  if (w->dtype_lanes)
    put_varint_field(&body, 4, w->dtype_lanes);
  put_varint_field(&body, 3, w->dtype_bits);
  put_varint_field(&body, 2, w->dtype_code);
  /* shape unpacked; strides packed in two runs with an unpacked one between */
  for (size_t k = 0; k < w->n_shape; k++)
    put_varint_field(&body, 5, (uint64_t)w->shape[k]);
  if (w->n_strides) {
    size_t half = w->n_strides / 2;
    for (size_t k = 0; k < half; k++)
      put_varint(&packed, (uint64_t)w->strides[k]);
    put_len_field(&body, 6, packed.data, packed.len);
    if (variant % 2) /* an empty packed run adds nothing */
      put_len_field(&body, 6, NULL, 0);
    if (half < w->n_strides)
      put_varint_field(&body, 6, (uint64_t)w->strides[half]);
    packed.len = 0;
    for (size_t k = half + 1; k < w->n_strides; k++)
      put_varint(&packed, (uint64_t)w->strides[k]);
    put_len_field(&body, 6, packed.data, packed.len);
  }
  put_len_field(&body, 1, w->name, strlen(w->name));
  put_varint_field(&body, 8, w->offset);
  put_len_field(out, 2, body.data, body.len);
  free(body.data);
  free(packed.data);
}

/* protobuf-c's own packings, and the same content spelt otherwise, read the same. */
static void test_odd_encodings(void)
{
  static struct pc_tensor ts[MAX_TENSORS];

  for (unsigned round = 0; round < ROUNDS / 3; round++) {
    size_t n = 1 + next() % MAX_TENSORS, pc_len;
    struct bytes odd = { 0 };
    Gpushm__WeightManifest *back;
    struct manifest m;
    uint8_t *pc;

    for (size_t i = 0; i < n; i++)
      random_tensor(&ts[i], (unsigned)i, 4);
    pc = pc_pack(ts, n, 1, &pc_len);
    decode_ok(pc, pc_len, big_buffers, 4, &m);
    CHECK(m.n_tensors == n);
    for (size_t i = 0; i < n; i++)
      expect_same(&m.tensors[i], &ts[i].w);
    manifest_free(&m);

    put_varint_field(&odd, 1, 7); /* a version overwritten below */
    put_varint_field(&odd, 3, 99);
    for (size_t i = 0; i < n; i++) {
      put_odd_tensor(&odd, &ts[i].w, round);
      if (i == n / 2)
        put_len_field(&odd, 2000, "future", 6);
    }
    put_tag(&odd, 1, 0);
    put_overlong_varint(&odd, 1);

    /* it is protobuf: protobuf-c reads the same content from it */
    CHECK((back = gpushm__weight_manifest__unpack(NULL, odd.len, odd.data)) != NULL);
    CHECK(back->version == 1 && back->n_tensors == n);
    for (size_t i = 0; i < n; i++) {
      Gpushm__WeightTensor *b = back->tensors[i], *a = &ts[i].w;
      CHECK(strcmp(b->name, a->name) == 0 && b->offset == a->offset && b->buffer == a->buffer);
      CHECK(b->n_shape == a->n_shape && b->n_strides == a->n_strides);
      for (size_t k = 0; k < a->n_strides; k++)
        CHECK(b->strides[k] == a->strides[k]);
    }
    gpushm__weight_manifest__free_unpacked(back, NULL);

    decode_ok(odd.data, odd.len, big_buffers, 4, &m);
    CHECK(m.n_tensors == n);
    for (size_t i = 0; i < n; i++)
      expect_same(&m.tensors[i], &ts[i].w);
    manifest_free(&m);
    free(pc);
    free(odd.data);
  }
}

/* ---- refusals -------------------------------------------------------------------- */

/* A manifest that passes: three tensors in two buffers, one of them strided backwards. */
#define BASE_N 3
static struct pc_tensor base[BASE_N];
static const uint64_t base_sizes[2] = { 128, 1u << 20 };

static void make_base(void)
{
  static const int64_t s0[] = { 4, 8 }, s1[] = { 2, 3 }, st1[] = { 1, 2 }, s2[] = { 3 },
                       st2[] = { -1 };
  pc_tensor_init(&base[0], "embed.weight", 4, 16, 1, 2, s0, NULL, 0, 0);    /* [0, 64) */
  pc_tensor_init(&base[1], "layers.0.weight", 2, 32, 0, 2, s1, st1, 1, 256); /* [256, 280) */
  pc_tensor_init(&base[2], "lm_head.weight", 0, 8, 4, 1, s2, st2, 0, 72);    /* [64, 76) */
}

/* The base manifest with tensor which (BASE_N: none) changed by change. */
static uint8_t *base_with(size_t which, void (*change)(struct pc_tensor *), size_t *len)
{
  struct pc_tensor ts[BASE_N];

  memcpy(ts, base, sizeof ts);
  for (size_t i = 0; i < BASE_N; i++) {
    ts[i].w.name = ts[i].name;
    ts[i].w.shape = ts[i].shape;
    ts[i].w.strides = ts[i].strides;
  }
  if (which < BASE_N)
    change(&ts[which]);
  return pc_pack(ts, BASE_N, 1, len);
}

static void expect_refused_bytes(const char *what, const uint8_t *bytes, size_t len,
                                 const uint64_t *sizes, uint32_t n_sizes, int code,
                                 const char *word)
{
  char err[ERR_SIZE];
  struct manifest m;
  int rc;

  memset(&m, 0xa5, sizeof m);
  rc = manifest_decode(bytes, len, sizes, n_sizes, &m, err, sizeof err);
  if (rc != code || !strstr(err, word)) {
    fprintf(stderr, "%s: manifest_decode = %d (expected %d), \"%s\" (expected \"%s\" in it)\n",
            what, rc, code, err, word);
    exit(1);
  }
  CHECK(m.storage_ == NULL && m.tensors == NULL && m.n_tensors == 0);
}

static void expect_refused(const char *what, size_t which, void (*change)(struct pc_tensor *),
                           int code, const char *word)
{
  size_t len;
  uint8_t *bytes = base_with(which, change, &len);
  expect_refused_bytes(what, bytes, len, base_sizes, 2, code, word);
  free(bytes);
}

static void expect_passes(const char *what, size_t which, void (*change)(struct pc_tensor *))
{
  char err[ERR_SIZE];
  struct manifest m;
  size_t len;
  uint8_t *bytes = base_with(which, change, &len);

  if (manifest_decode(bytes, len, base_sizes, 2, &m, err, sizeof err) != 0) {
    fprintf(stderr, "%s: refused: %s\n", what, err);
    exit(1);
  }
  manifest_free(&m);
  free(bytes);
}

static void set_name(struct pc_tensor *t, const char *name)
{
  snprintf(t->name, sizeof t->name, "%s", name);
}

static void name_empty(struct pc_tensor *t) { set_name(t, ""); }
static void name_long(struct pc_tensor *t)
{
  memset(t->name, 'n', GPUSHM_LIMIT_WEIGHT_NAME + 1);
  t->name[GPUSHM_LIMIT_WEIGHT_NAME + 1] = '\0';
}
static void name_longest(struct pc_tensor *t)
{
  memset(t->name, 'n', GPUSHM_LIMIT_WEIGHT_NAME);
  t->name[GPUSHM_LIMIT_WEIGHT_NAME] = '\0';
}
static void name_utf8(struct pc_tensor *t)
{
  set_name(t, "na\xc3\xafve.\xe2\x82\xac.\xf0\x9d\x84\x9e");
}
static void name_bad_byte(struct pc_tensor *t) { set_name(t, "w\xff"); }
static void name_overlong(struct pc_tensor *t) { set_name(t, "w\xc0\xaf"); }
static void name_surrogate(struct pc_tensor *t) { set_name(t, "w\xed\xa0\x80"); }
static void name_past_unicode(struct pc_tensor *t) { set_name(t, "w\xf4\x90\x80\x80"); }
static void name_cut(struct pc_tensor *t) { set_name(t, "w\xe2\x82"); }
static void name_newline(struct pc_tensor *t) { set_name(t, "a\nb"); }
static void name_escape(struct pc_tensor *t) { set_name(t, "\x1b[31m"); }
static void name_del(struct pc_tensor *t) { set_name(t, "a\x7f"); }
static void name_c1(struct pc_tensor *t) { set_name(t, "a\xc2\x85"); }
static void name_twice(struct pc_tensor *t) { set_name(t, "embed.weight"); }
static void buffer_past(struct pc_tensor *t) { t->w.buffer = 2; }
static void ndim_33(struct pc_tensor *t)
{
  for (size_t k = 0; k < 33; k++)
    t->shape[k] = 1;
  t->w.n_shape = 33;
  t->w.n_strides = 0;
}
static void ndim_32(struct pc_tensor *t)
{
  ndim_33(t);
  t->w.n_shape = 32;
}
static void strides_short(struct pc_tensor *t) { t->w.n_strides = 1; }
static void extent_negative(struct pc_tensor *t) { t->shape[0] = -1; }
static void bits_0(struct pc_tensor *t) { t->w.dtype_bits = 0; }
static void bits_12(struct pc_tensor *t) { t->w.dtype_bits = 12; }
static void bits_256(struct pc_tensor *t) { t->w.dtype_bits = 256; }
static void code_256(struct pc_tensor *t) { t->w.dtype_code = 256; }
static void lanes_65536(struct pc_tensor *t) { t->w.dtype_lanes = 65536; }
static void lanes_65535(struct pc_tensor *t)
{
  t->w.dtype_bits = 8;
  t->w.dtype_lanes = 65535;
  t->w.n_shape = t->w.n_strides = 0; /* one element of 65535 bytes, at 256 in buffer 1 */
}
static void past_end(struct pc_tensor *t) { t->w.offset = 66; }      /* [66, 130) */
static void to_end(struct pc_tensor *t) { t->w.offset = 64; }        /* [64, 128) */
static void before_start(struct pc_tensor *t) { t->w.offset = 4; }   /* [-4, 8) */
static void misaligned(struct pc_tensor *t) { t->w.offset = 258; }   /* float32 at 258 */
static void align_capped(struct pc_tensor *t)
{
  t->w.dtype_bits = 64;
  t->w.dtype_lanes = 4; /* 32-byte elements: 16-byte alignment is enough */
  t->w.offset = 272;
  t->w.n_strides = 0;
}
static void align_short(struct pc_tensor *t)
{
  align_capped(t);
  t->w.offset = 264;
}
static void overflow_extent(struct pc_tensor *t)
{
  t->shape[0] = INT64_C(1) << 62; /* C strides (8, 1): (2^62 - 1) * 8 elements */
}
static void overflow_strides(struct pc_tensor *t)
{
  t->shape[0] = 2;
  t->shape[1] = INT64_C(1) << 32;
  t->shape[2] = INT64_C(1) << 32; /* the first stride would be 2^64 */
  t->w.n_shape = 3;
  t->w.n_strides = 0;
}
static void overflow_bytes(struct pc_tensor *t)
{
  t->w.n_shape = t->w.n_strides = 1;
  t->shape[0] = 2;
  t->strides[0] = INT64_MIN; /* INT64_MIN elements of 4 bytes */
}
static void overflow_offset(struct pc_tensor *t)
{
  t->w.offset = UINT64_MAX - 1; /* the last element's end wraps */
  t->w.dtype_bits = 8;
  t->w.dtype_lanes = 1;
  t->w.n_strides = 0;
}
static void empty_at_end(struct pc_tensor *t)
{
  t->shape[0] = 0;
  t->w.offset = 128;
}
static void empty_past_end(struct pc_tensor *t)
{
  t->shape[0] = 0;
  t->w.offset = 130;
}
static void empty_huge(struct pc_tensor *t)
{
  t->shape[0] = 0;
  t->shape[1] = INT64_MAX; /* no elements: no extent to overflow */
}
static void scalar(struct pc_tensor *t)
{
  t->w.n_shape = 0;
  t->w.n_strides = 0;
}

/* A manifest of one tensor, given as its body. */
static void one_tensor_body(struct bytes *out, const struct bytes *body)
{
  out->len = 0;
  put_varint_field(out, 1, 1);
  put_len_field(out, 2, body->data, body->len);
}

static void test_malformed(void)
{
  struct bytes body = { 0 }, b = { 0 };
  static const uint8_t eleven[] = { 0x08, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                    0x80, 0x00 };
  static const uint8_t tenth_too_big[] = { 0x08, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                           0x80, 0x02 };
  size_t len;
  uint8_t *good = base_with(BASE_N, NULL, &len);

  /* each cut: a shorter manifest, or refused as truncated; never a crash or leak */
  for (size_t cut = 0; cut < len; cut++) {
    char err[ERR_SIZE];
    struct manifest m;
    int rc = manifest_decode(good, cut, base_sizes, 2, &m, err, sizeof err);
    CHECK(rc == 0 || rc == PROTO_E_INVAL);
    manifest_free(&m);
  }
  expect_refused_bytes("a cut tensor", good, len - 1, base_sizes, 2, PROTO_E_INVAL,
                       "truncated");
  expect_refused_bytes("a version without a value", (const uint8_t *)"\x08", 1, base_sizes, 2,
                       PROTO_E_INVAL, "truncated varint");
  expect_refused_bytes("eleven varint bytes", eleven, sizeof eleven, base_sizes, 2,
                       PROTO_E_INVAL, "longer than 64 bits");
  expect_refused_bytes("a tenth varint byte over 1", tenth_too_big, sizeof tenth_too_big,
                       base_sizes, 2, PROTO_E_INVAL, "longer than 64 bits");
  expect_refused_bytes("field 0", (const uint8_t *)"\x00\x01", 2, base_sizes, 2,
                       PROTO_E_INVAL, "bad tag");
  expect_refused_bytes("a version of wire type 2", (const uint8_t *)"\x0a\x01\x01", 3,
                       base_sizes, 2, PROTO_E_INVAL, "wire type");
  expect_refused_bytes("tensors of wire type 0", (const uint8_t *)"\x08\x01\x10\x01", 4,
                       base_sizes, 2, PROTO_E_INVAL, "wire type");
  expect_refused_bytes("a group", (const uint8_t *)"\x08\x01\x1b\x1c", 4, base_sizes, 2,
                       PROTO_E_INVAL, "wire type");

  /* inside a tensor: each body is a valid tensor but for its last field */
#define TENSOR_BODY_START()                                                              \
  do {                                                                                   \
    body.len = 0;                                                                        \
    put_len_field(&body, 1, "w", 1);                                                     \
    put_varint_field(&body, 3, 8);                                                       \
  } while (0)
  TENSOR_BODY_START();
  put_varint_field(&body, 1, 5);
  one_tensor_body(&b, &body);
  expect_refused_bytes("a name of wire type 0", b.data, b.len, base_sizes, 2, PROTO_E_INVAL,
                       "wire type 0 for field 1");
  TENSOR_BODY_START();
  put_tag(&body, 5, 5);
  put(&body, "\1\0\0\0", 4);
  one_tensor_body(&b, &body);
  expect_refused_bytes("a shape of wire type 5", b.data, b.len, base_sizes, 2, PROTO_E_INVAL,
                       "wire type 5 for field 5");
  TENSOR_BODY_START();
  put_len_field(&body, 8, "\1", 1);
  one_tensor_body(&b, &body);
  expect_refused_bytes("an offset of wire type 2", b.data, b.len, base_sizes, 2, PROTO_E_INVAL,
                       "wire type 2 for field 8");
  TENSOR_BODY_START();
  put_len_field(&body, 5, "\x01\x80", 2); /* the second packed value cut */
  one_tensor_body(&b, &body);
  expect_refused_bytes("a packed shape cut short", b.data, b.len, base_sizes, 2, PROTO_E_INVAL,
                       "truncated varint");
  TENSOR_BODY_START();
  put_tag(&body, 1, 2);
  put_varint(&body, 100); /* a name longer than what follows */
  put(&body, "abc", 3);
  one_tensor_body(&b, &body);
  expect_refused_bytes("a name past the tensor's end", b.data, b.len, base_sizes, 2,
                       PROTO_E_INVAL, "runs past the end");
  TENSOR_BODY_START();
  put_varint_field(&body, 7, UINT64_C(1) << 32); /* buffer 0 to protobuf's low 32 bits */
  one_tensor_body(&b, &body);
  expect_refused_bytes("a buffer index over 32 bits", b.data, b.len, base_sizes, 2,
                       PROTO_E_INVAL, "too large for uint32");
  TENSOR_BODY_START();
  put_varint_field(&body, 3, (UINT64_C(1) << 32) + 8);
  one_tensor_body(&b, &body);
  expect_refused_bytes("dtype bits over 32 bits", b.data, b.len, base_sizes, 2, PROTO_E_INVAL,
                       "too large for uint32");
  /* the same field twice: the last one counts, as protobuf has it */
  TENSOR_BODY_START();
  put_varint_field(&body, 3, 7);
  one_tensor_body(&b, &body);
  expect_refused_bytes("bits given twice, the last one bad", b.data, b.len, base_sizes, 2,
                       PROTO_E_INVAL, "bits 7");
#undef TENSOR_BODY_START

  free(body.data);
  free(b.data);
  free(good);
}

static void test_refusals(void)
{
  char err[ERR_SIZE];
  struct manifest m;
  size_t len;
  uint8_t *bytes;

  expect_passes("the base manifest", BASE_N, NULL);

  bytes = pc_pack(base, BASE_N, 0, &len);
  expect_refused_bytes("version 0", bytes, len, base_sizes, 2, PROTO_E_INVAL, "version 0");
  free(bytes);
  bytes = pc_pack(base, BASE_N, 2, &len);
  expect_refused_bytes("version 2", bytes, len, base_sizes, 2, PROTO_E_INVAL, "version 2");
  free(bytes);
  bytes = pc_pack(base, 0, 1, &len);
  expect_refused_bytes("no tensors", bytes, len, base_sizes, 2, PROTO_E_INVAL, "no tensors");
  free(bytes);
  bytes = base_with(BASE_N, NULL, &len);
  expect_refused_bytes("buffers missing", bytes, len, base_sizes, 1, PROTO_E_INVAL,
                       "buffer index 1, but the generation has 1");
  expect_refused_bytes("no buffer sizes", bytes, len, NULL, 0, PROTO_E_INVAL, "buffer index");
  free(bytes);

  expect_refused("an empty name", 1, name_empty, PROTO_E_INVAL, "tensor 1: name is empty");
  expect_refused("a name too long", 2, name_long, PROTO_E_LIMIT, "long");
  expect_passes("a name of the longest", 2, name_longest);
  expect_passes("a name in UTF-8", 0, name_utf8);
  expect_refused("a byte 0xff", 0, name_bad_byte, PROTO_E_INVAL, "UTF-8");
  expect_refused("an overlong '/'", 0, name_overlong, PROTO_E_INVAL, "UTF-8");
  expect_refused("a surrogate", 0, name_surrogate, PROTO_E_INVAL, "UTF-8");
  expect_refused("past U+10FFFF", 0, name_past_unicode, PROTO_E_INVAL, "UTF-8");
  expect_refused("a sequence cut", 0, name_cut, PROTO_E_INVAL, "UTF-8");
  expect_refused("a newline", 0, name_newline, PROTO_E_INVAL,
                 "tensor 0 \"a\\x0ab\": name has a control character");
  expect_refused("an escape sequence", 1, name_escape, PROTO_E_INVAL, "control");
  expect_refused("DEL", 1, name_del, PROTO_E_INVAL, "control");
  expect_refused("a C1 control", 1, name_c1, PROTO_E_INVAL, "control");
  expect_refused("a name twice", 2, name_twice, PROTO_E_INVAL,
                 "tensor 2 \"embed.weight\": name seen twice (first as tensor 0)");
  expect_refused("a buffer past the generation's", 2, buffer_past, PROTO_E_INVAL,
                 "buffer index 2");
  expect_refused("33 dimensions", 0, ndim_33, PROTO_E_INVAL, "33 dimensions");
  expect_passes("32 dimensions", 0, ndim_32);
  expect_refused("1 stride for 2 dimensions", 1, strides_short, PROTO_E_INVAL,
                 "1 strides for 2 dimensions");
  expect_refused("a negative extent", 1, extent_negative, PROTO_E_INVAL, "negative extent");
  expect_refused("bits 0", 0, bits_0, PROTO_E_INVAL, "bits 0");
  expect_refused("bits 12", 0, bits_12, PROTO_E_INVAL, "bits 12");
  expect_refused("bits 256", 0, bits_256, PROTO_E_INVAL, "bits 256");
  expect_refused("code 256", 0, code_256, PROTO_E_INVAL, "code 256");
  expect_refused("lanes 65536", 1, lanes_65536, PROTO_E_INVAL, "lanes 65536");
  expect_passes("lanes 65535", 1, lanes_65535);
  expect_refused("past the buffer's end", 0, past_end, PROTO_E_INVAL, "outside buffer 0");
  expect_passes("up to the buffer's end", 0, to_end);
  expect_refused("before the buffer's start", 2, before_start, PROTO_E_INVAL, "outside");
  expect_refused("misaligned", 1, misaligned, PROTO_E_INVAL, "not aligned to 4");
  expect_passes("32-byte elements 16-byte aligned", 1, align_capped);
  expect_refused("32-byte elements 8-byte aligned", 1, align_short, PROTO_E_INVAL,
                 "not aligned to 16");
  expect_refused("an extent's bytes overflow", 0, overflow_extent, PROTO_E_INVAL, "overflow");
  expect_refused("strides overflow", 0, overflow_strides, PROTO_E_INVAL, "overflow");
  expect_refused("INT64_MIN strides", 1, overflow_bytes, PROTO_E_INVAL, "overflow");
  expect_refused("the end wraps", 0, overflow_offset, PROTO_E_INVAL, "overflow");
  expect_passes("an empty tensor at the end", 0, empty_at_end);
  expect_refused("an empty tensor past the end", 0, empty_past_end, PROTO_E_INVAL, "outside");
  expect_passes("an empty tensor of a huge extent", 0, empty_huge);
  expect_passes("a scalar", 0, scalar);

  /* err names the tensor, printable, and fits what it is given */
  bytes = base_with(0, name_escape, &len);
  CHECK(manifest_decode(bytes, len, base_sizes, 2, &m, err, 12) == PROTO_E_INVAL);
  CHECK(strlen(err) == 11);
  CHECK(manifest_decode(bytes, len, base_sizes, 2, &m, NULL, 0) == PROTO_E_INVAL);
  CHECK(manifest_decode(bytes, len, base_sizes, 2, &m, err, sizeof err) == PROTO_E_INVAL);
  CHECK(strstr(err, "\"\\x1b[31m\"") != NULL);
  free(bytes);
  bytes = base_with(2, name_long, &len);
  CHECK(manifest_decode(bytes, len, base_sizes, 2, &m, err, sizeof err) == PROTO_E_LIMIT);
  CHECK(strlen(err) < 300 && strstr(err, "nnn...\""));
  free(bytes);

  /* more bytes than a manifest may have: refused before any is read (not even mapped) */
  {
    size_t big = (size_t)GPUSHM_LIMIT_WEIGHT_MANIFEST + 1;
    void *map = mmap(NULL, big, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(map != MAP_FAILED);
    expect_refused_bytes("a manifest too large", map, big, base_sizes, 2, PROTO_E_LIMIT,
                         "over the limit");
    munmap(map, big);
  }
}

/* The writer refuses what decode would, and leaves its manifest as it was. */
static void test_writer(void)
{
  static const int64_t shape[] = { 4, 8 }, strides[] = { 8, 1 }, backwards[] = { -8, -1 };
  struct manifest_tensor t = {
    .name = "w", .name_len = 1, .dtype_code = 2, .dtype_bits = 32, .dtype_lanes = 1,
    .ndim = 2, .shape = shape, .buffer = 0, .offset = 0,
  };
  uint64_t sizes[1] = { 256 };
  struct manifest_writer w;
  struct manifest m;
  char err[ERR_SIZE];
  size_t len;

  manifest_writer_init(&w);
  CHECK(w.len == 2 && w.data[0] == 0x08 && w.data[1] == 0x01 && w.n_tensors == 0);
  CHECK(manifest_writer_add(&w, &t, sizes, 1, err, sizeof err) == 0);
  len = w.len;
  /* the same name again: only decode can tell */
  t.strides = strides;
  CHECK(manifest_writer_add(&w, &t, NULL, 0, err, sizeof err) == 0);
  CHECK(w.len - len == len - 2 + 4); /* the same, and strides: tag, length, two values */
  len = w.len;
  CHECK(manifest_decode(w.data, w.len, sizes, 1, &m, err, sizeof err) == PROTO_E_INVAL);
  CHECK(strstr(err, "twice"));

  t.name_len = 0;
  CHECK(manifest_writer_add(&w, &t, sizes, 1, err, sizeof err) == PROTO_E_INVAL);
  CHECK(strstr(err, "empty"));
  t.name = "v";
  t.name_len = 1;
  t.buffer = 1;
  CHECK(manifest_writer_add(&w, &t, sizes, 1, err, sizeof err) == PROTO_E_INVAL);
  CHECK(strstr(err, "buffer index 1"));
  t.buffer = 0;
  t.offset = 132;
  CHECK(manifest_writer_add(&w, &t, sizes, 1, err, sizeof err) == PROTO_E_INVAL);
  CHECK(strstr(err, "outside buffer 0"));
  t.offset = 2;
  CHECK(manifest_writer_add(&w, &t, sizes, 1, err, sizeof err) == PROTO_E_INVAL);
  CHECK(strstr(err, "aligned"));
  t.dtype_bits = 4;
  t.offset = 0;
  CHECK(manifest_writer_add(&w, &t, sizes, 1, err, sizeof err) == PROTO_E_INVAL);
  CHECK(strstr(err, "bits 4"));
  t.dtype_bits = 32;
  t.ndim = 33;
  CHECK(manifest_writer_add(&w, &t, sizes, 1, err, sizeof err) == PROTO_E_INVAL);
  CHECK(strstr(err, "33 dimensions"));
  t.ndim = 2;
  t.strides = backwards; /* before the start, whatever the buffer */
  CHECK(manifest_writer_add(&w, &t, NULL, 0, err, sizeof err) == PROTO_E_INVAL);
  CHECK(strstr(err, "before its start"));
  CHECK(w.len == len && w.n_tensors == 2);
  /* without buffer sizes, nothing about them is checked */
  t.strides = NULL;
  t.buffer = 7;
  t.offset = 1u << 20;
  CHECK(manifest_writer_add(&w, &t, NULL, 0, err, sizeof err) == 0);
  CHECK(w.n_tensors == 3);
  manifest_writer_free(&w);
  CHECK(w.data == NULL && w.len == 0);
}

/* ---- overlaps -------------------------------------------------------------------- */

static int overlaps_of(struct pc_tensor *ts, size_t n, char *err)
{
  static const uint64_t sizes[2] = { 4096, 4096 };
  struct manifest m;
  size_t len;
  uint8_t *bytes = pc_pack(ts, n, 1, &len);
  int rc;

  decode_ok(bytes, len, sizes, 2, &m);
  rc = manifest_check_overlaps(&m, err, ERR_SIZE);
  manifest_free(&m);
  free(bytes);
  return rc;
}

static void test_overlaps(void)
{
  static const int64_t s48[] = { 4, 8 }, s44[] = { 4, 4 }, s3[] = { 3 }, back[] = { -1 },
                       s16[] = { 16 }, two[] = { 2 }, s0[] = { 0, 8 };
  struct pc_tensor ts[4];
  char err[ERR_SIZE];

  /* bf16 [0, 64), then [32, 96): partial */
  pc_tensor_init(&ts[0], "a", 4, 16, 1, 2, s48, NULL, 0, 0);
  pc_tensor_init(&ts[1], "b", 4, 16, 1, 2, s48, NULL, 0, 32);
  CHECK(overlaps_of(ts, 2, err) == PROTO_E_INVAL);
  CHECK(strstr(err, "tensors 0 \"a\" and 1 \"b\" overlap in buffer 0"));
  CHECK(strstr(err, "[0, 64) and [32, 96)"));
  /* in another buffer: apart */
  ts[1].w.buffer = 1;
  CHECK(overlaps_of(ts, 2, err) == 0);
  /* adjacent: apart */
  ts[1].w.buffer = 0;
  ts[1].w.offset = 64;
  CHECK(overlaps_of(ts, 2, err) == 0);
  /* tied: the same layout under two names, in either order, with a third apart */
  ts[1].w.offset = 0;
  pc_tensor_init(&ts[2], "c", 4, 16, 1, 2, s48, NULL, 0, 64);
  CHECK(overlaps_of(ts, 3, err) == 0);
  /* the same span read as float32: not tied */
  pc_tensor_init(&ts[1], "b", 2, 32, 1, 2, s44, NULL, 0, 0);
  CHECK(overlaps_of(ts, 2, err) == PROTO_E_INVAL);
  /* the same bytes, strides given as the C-contiguous ones they are: tied */
  {
    static const int64_t c_strides[] = { 8, 1 };
    pc_tensor_init(&ts[1], "b", 4, 16, 1, 2, s48, c_strides, 0, 0);
    CHECK(overlaps_of(ts, 2, err) == 0);
  }
  /* two tied and one that overlaps both, found whatever the order */
  pc_tensor_init(&ts[1], "b", 4, 16, 1, 2, s48, NULL, 0, 0);
  pc_tensor_init(&ts[2], "c", 4, 16, 1, 1, s16, NULL, 0, 62);
  CHECK(overlaps_of(ts, 3, err) == PROTO_E_INVAL && strstr(err, "\"c\""));
  pc_tensor_init(&ts[2], "c", 4, 16, 1, 1, two, NULL, 0, 0); /* inside a's first bytes */
  CHECK(overlaps_of(ts, 3, err) == PROTO_E_INVAL && strstr(err, "\"c\""));
  /* strided backwards: int8 x4 elements at 72, 68, 64 span [64, 76) */
  pc_tensor_init(&ts[1], "b", 0, 8, 4, 1, s3, back, 0, 72);
  CHECK(overlaps_of(ts, 2, err) == 0);
  pc_tensor_init(&ts[2], "c", 0, 8, 1, 1, two, NULL, 0, 75);
  CHECK(overlaps_of(ts, 3, err) == PROTO_E_INVAL && strstr(err, "[64, 76) and [75, 77)"));
  /* an empty tensor occupies nothing */
  pc_tensor_init(&ts[2], "c", 4, 16, 1, 2, s0, NULL, 0, 16);
  CHECK(overlaps_of(ts, 3, err) == 0);
}

/* ---- many tensors ---------------------------------------------------------------- */

static const char *const kinds[] = {
  "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
  "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",    "input_layernorm",
};
#define N_KINDS 8u
#define TENSOR_ROWS 64
#define TENSOR_COLS 128
#define TENSOR_BYTES (TENSOR_ROWS * TENSOR_COLS * 2)
#define TENSORS_PER_BUFFER 65536u
#define MANY_BUFFERS (GPUSHM_LIMIT_WEIGHT_TENSORS / TENSORS_PER_BUFFER + 1)

static size_t model_name(char *out, size_t size, size_t i)
{
  return (size_t)snprintf(out, size, "model.layers.%zu.%s.weight", i / N_KINDS,
                          kinds[i % N_KINDS]);
}

/* n 2-D bf16 tensors of a model, one after the other in buffers of 65536 each, but for
 * tensors bad[0..n_bad), which lie past their buffer's end. */
static void write_model_with(struct manifest_writer *w, size_t n, const size_t *bad,
                             size_t n_bad)
{
  static const int64_t shape[] = { TENSOR_ROWS, TENSOR_COLS };
  char name[96], err[ERR_SIZE];

  manifest_writer_init(w);
  for (size_t i = 0; i < n; i++) {
    struct manifest_tensor t = {
      .name = name, .dtype_code = 4, .dtype_bits = 16, .dtype_lanes = 1, .ndim = 2,
      .shape = shape, .buffer = (uint32_t)(i / TENSORS_PER_BUFFER),
      .offset = (uint64_t)(i % TENSORS_PER_BUFFER) * TENSOR_BYTES,
    };
    for (size_t k = 0; k < n_bad; k++)
      if (bad[k] == i)
        t.offset = (uint64_t)TENSORS_PER_BUFFER * TENSOR_BYTES;
    t.name_len = (uint32_t)model_name(name, sizeof name, i);
    if (manifest_writer_add(w, &t, NULL, 0, err, sizeof err) != 0) {
      fprintf(stderr, "manifest_writer_add: %s\n", err);
      exit(1);
    }
  }
}

static void write_model(struct manifest_writer *w, size_t n)
{
  write_model_with(w, n, NULL, 0);
}

static uint64_t many_sizes[MANY_BUFFERS];

static double timed_decode(const struct manifest_writer *w, struct manifest *m)
{
  double start = test_clock_ms();
  decode_ok(w->data, w->len, many_sizes, MANY_BUFFERS, m);
  return test_clock_ms() - start;
}

static void test_100k(void)
{
  enum { N = 100000 };
  struct manifest_writer w;
  struct manifest m;
  char name[96], err[ERR_SIZE];
  double ms, overlaps_ms, find_ms;

  write_model(&w, N);
  ms = timed_decode(&w, &m);
  CHECK(m.n_tensors == N);
  find_ms = test_clock_ms();
  for (size_t i = 0; i < N; i++) {
    size_t len = model_name(name, sizeof name, i);
    CHECK(manifest_find(&m, name, len) == (long)i);
    CHECK(manifest_find(&m, name, len - 1) == -1); /* "...weigh" */
  }
  find_ms = test_clock_ms() - find_ms;
  CHECK(manifest_find(&m, "model.layers.99999999.mlp.up_proj.weight", 40) == -1);
  CHECK(manifest_find(&m, "", 0) == -1);
  CHECK(strcmp(m.tensors[12350].name, "model.layers.1543.mlp.down_proj.weight") == 0);
  overlaps_ms = test_clock_ms();
  CHECK(manifest_check_overlaps(&m, err, sizeof err) == 0);
  overlaps_ms = test_clock_ms() - overlaps_ms;
  test_log("decode of %d tensors (%.1f MB): %.2f ms; %d finds twice: %.2f ms; "
           "overlap check: %.2f ms", N, (double)w.len / 1e6, ms, N, find_ms, overlaps_ms);
  manifest_free(&m);
  manifest_writer_free(&w);
}

/* Tensor i's name field in w made a group's (wire type 3): malformed inside tensor i. */
static void break_tensor(struct manifest_writer *w, size_t i)
{
  char name[96];
  size_t len = model_name(name, sizeof name, i);
  uint8_t *at = memmem(w->data, w->len, name, len);

  CHECK(at && at - w->data >= 2 && at[-1] == len && at[-2] == 0x0a);
  at[-2] = 0x0b;
}

static void expect_first_refusal(const struct manifest_writer *w, const char *want)
{
  struct manifest m;
  char err[ERR_SIZE];

  CHECK(manifest_decode(w->data, w->len, many_sizes, MANY_BUFFERS, &m, err, sizeof err) ==
        PROTO_E_INVAL);
  if (!strstr(err, want)) {
    fprintf(stderr, "refused with \"%s\", expected \"%s\" in it\n", err, want);
    exit(1);
  }
  CHECK(m.storage_ == NULL);
}

/* Large manifests are read in chunks, on threads where there are CPUs for them: what is
 * refused is still what one pass in order would refuse first (every structural refusal
 * before any other, then the lowest tensor, then a name seen twice). */
static void test_order_of_refusals(void)
{
  enum { N = 80000 };
  const size_t two[] = { 70000, 30000 }, early[] = { 5 };
  struct manifest_writer w;
  char name[96];
  size_t len;

  write_model_with(&w, N, two, 2);
  expect_first_refusal(&w, "tensor 30000 \"model.layers.3750.self_attn.q_proj.weight\": "
                           "elements up to byte");
  manifest_writer_free(&w);

  /* refusals in many chunks at once, the first late in its chunk, the others early in
   * theirs (so that they are found first), ten times over */
  {
    size_t many[18];
    many[0] = 2 * 4096 + 4000;
    for (size_t k = 1; k < 18; k++)
      many[k] = (k + 2) * 4096 + 1;
    write_model_with(&w, N, many, 18);
    for (int i = 0; i < 10; i++)
      expect_first_refusal(&w, "tensor 12192 ");
    manifest_writer_free(&w);
  }

  write_model_with(&w, N, early, 1); /* checked in the second pass ... */
  break_tensor(&w, 60000);           /* ... found in the first */
  expect_first_refusal(&w, "tensor 60000: malformed protobuf at byte");
  manifest_writer_free(&w);

  write_model_with(&w, N, NULL, 0);
  break_tensor(&w, 40000);
  CHECK((w.data = realloc(w.data, w.len + 1)) != NULL);
  w.data[w.len++] = 0x0f; /* a top-level field of wire type 7, after it */
  expect_first_refusal(&w, "tensor 40000: malformed protobuf at byte");
  w.data[w.len - 1] = 0x0f;
  len = model_name(name, sizeof name, 40000);
  ((uint8_t *)memmem(w.data, w.len, name, len))[-2] = 0x0a; /* mended */
  expect_first_refusal(&w, "manifest: malformed protobuf at byte");
  manifest_writer_free(&w);

  /* a name seen twice (tensor 75001, k_proj of layer 9375, renamed layer 9376's, as
   * tensor 75009 is), with and without a tensor outside its buffer after them */
  for (int with_bad = 1; with_bad >= 0; with_bad--) {
    const size_t bad[] = { 79000 };
    uint8_t *at;

    write_model_with(&w, N, bad, (size_t)with_bad);
    len = model_name(name, sizeof name, 75001);
    CHECK(strcmp(name, "model.layers.9375.self_attn.k_proj.weight") == 0);
    CHECK((at = memmem(w.data, w.len, name, len)) != NULL);
    at[16] = '6';
    expect_first_refusal(&w, with_bad ? "tensor 79000 " : "tensor 75009 \"model.layers.9376."
                                                          "self_attn.k_proj.weight\": name seen "
                                                          "twice (first as tensor 75001)");
    manifest_writer_free(&w);
  }
}

/* The tensor limit: reached and decoded (timed), then crossed by one. */
static void test_limit(void)
{
  const size_t n = GPUSHM_LIMIT_WEIGHT_TENSORS;
  static const int64_t shape[] = { 1 };
  struct manifest_tensor extra = {
    .name = "extra", .name_len = 5, .dtype_code = 4, .dtype_bits = 16, .dtype_lanes = 1,
    .ndim = 1, .shape = shape,
  };
  struct manifest_writer w, one;
  struct manifest m;
  char err[ERR_SIZE];
  double ms;

  write_model(&w, n);
  ms = timed_decode(&w, &m);
  CHECK(m.n_tensors == n);
  CHECK(manifest_find(&m, "model.layers.124999.input_layernorm.weight", 42) == (long)n - 1);
  test_log("decode of %zu tensors (%.1f MB): %.2f ms", n, (double)w.len / 1e6, ms);
  manifest_free(&m);

  CHECK(manifest_writer_add(&w, &extra, NULL, 0, err, sizeof err) == PROTO_E_LIMIT);
  CHECK(strstr(err, "more than 1000000 tensors") && w.n_tensors == n);
  /* one more tensor appended (protobuf's concatenation) */
  manifest_writer_init(&one);
  CHECK(manifest_writer_add(&one, &extra, NULL, 0, err, sizeof err) == 0);
  CHECK((w.data = realloc(w.data, w.len + one.len)) != NULL);
  memcpy(w.data + w.len, one.data + 2, one.len - 2); /* without its version field */
  w.len += one.len - 2;
  CHECK(manifest_decode(w.data, w.len, many_sizes, MANY_BUFFERS, &m, err, sizeof err) ==
        PROTO_E_LIMIT);
  CHECK(strstr(err, "more than 1000000 tensors") && m.storage_ == NULL);
  manifest_writer_free(&one);
  manifest_writer_free(&w);
}

int main(void)
{
  for (size_t i = 0; i < MANY_BUFFERS; i++)
    many_sizes[i] = (uint64_t)TENSORS_PER_BUFFER * TENSOR_BYTES;
  test_round_trips();
  test_odd_encodings();
  make_base();
  test_malformed();
  test_refusals();
  test_writer();
  test_overlaps();
  test_100k();
  test_order_of_refusals(); /* on as many threads as this machine has CPUs for */
  CHECK(setenv("GPUSHM_MANIFEST_THREADS", "1", 1) == 0);
  test_order_of_refusals(); /* and on one */
  CHECK(unsetenv("GPUSHM_MANIFEST_THREADS") == 0);
  test_limit();
  printf("test-manifest-codec: %d random manifests packed as protobuf-c packs them and read "
         "back, every refusal, the limit\n", ROUNDS);
  return 0;
}
