/* SPDX-License-Identifier: MIT */
/* libFuzzer target: manifest_decode() (proto/manifest_codec.c) on hostile bytes.
 *
 * Input: one byte n, then n % 5 buffer sizes (little-endian uint64; bytes past the end
 * read as 0), then the manifest.  A refusal must say why and leave nothing allocated.
 * A manifest that decodes must be one protobuf-c reads to the same tensors; the writer
 * must take every tensor back (decode checked each as it does) and pack them byte for
 * byte as protobuf-c does; that must decode to the same tensors, each found by its name;
 * and manifest_check_overlaps() must answer alike for both.  For a quarter of the inputs
 * the manifest must decode alike on threads and on one.
 * ASan, UBSan and LSan watch that nothing reads out of bounds, wraps or leaks. */
#include "config.h"
#include "gpushm.pb-c.h"
#include "manifest_codec.h"
#include "protocol.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUFFERS 4u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
  fprintf(stderr, "fuzz-manifest-codec: %s%s%s\n", what, detail ? ": " : "",
          detail ? detail : "");
  abort();
}

#define EXPECT(cond, detail)                                                             \
  do {                                                                                   \
    if (!(cond))                                                                         \
      fail(#cond, (detail));                                                             \
  } while (0)

static bool same_tensor(const struct manifest_tensor *a, const struct manifest_tensor *b)
{
  return a->name_len == b->name_len && memcmp(a->name, b->name, a->name_len) == 0 &&
         a->dtype_code == b->dtype_code && a->dtype_bits == b->dtype_bits &&
         a->dtype_lanes == b->dtype_lanes && a->ndim == b->ndim && a->buffer == b->buffer &&
         a->offset == b->offset &&
         memcmp(a->shape, b->shape, a->ndim * sizeof *a->shape) == 0 &&
         memcmp(a->strides, b->strides, a->ndim * sizeof *a->strides) == 0;
}

/* What protobuf-c read of a tensor says what the decoder does: lanes 0 as 1, no strides
 * as the C-contiguous ones (an extent of 0 counting as 1). */
static bool same_as_protobuf_c(const struct manifest_tensor *t, const Gpushm__WeightTensor *w)
{
  uint64_t stride = 1;

  if (strlen(w->name) != t->name_len || memcmp(w->name, t->name, t->name_len) != 0 ||
      t->name[t->name_len] != '\0' || w->dtype_code != t->dtype_code ||
      w->dtype_bits != t->dtype_bits || (w->dtype_lanes ? w->dtype_lanes : 1) != t->dtype_lanes ||
      w->n_shape != t->ndim || w->buffer != t->buffer || w->offset != t->offset ||
      (w->n_strides && w->n_strides != t->ndim))
    return false;
  for (size_t k = 0; k < t->ndim; k++)
    if (w->shape[k] != t->shape[k])
      return false;
  for (size_t k = t->ndim; k-- > 0;) {
    if (t->strides[k] != (w->n_strides ? w->strides[k] : (int64_t)stride))
      return false;
    stride *= (uint64_t)(w->shape[k] ? w->shape[k] : 1); /* wraps only past the last use */
  }
  return true;
}

/* The writer's bytes are what protobuf-c packs of the same tensors, strides given. */
static void expect_packed_as_protobuf_c(const struct manifest *m, const uint8_t *bytes,
                                        size_t len)
{
  Gpushm__WeightManifest pm = GPUSHM__WEIGHT_MANIFEST__INIT;
  Gpushm__WeightTensor *ws = calloc(m->n_tensors, sizeof *ws);
  Gpushm__WeightTensor **ptrs = calloc(m->n_tensors, sizeof *ptrs);
  uint8_t *packed;

  EXPECT(ws && ptrs, "out of memory");
  for (size_t i = 0; i < m->n_tensors; i++) {
    const struct manifest_tensor *t = &m->tensors[i];
    gpushm__weight_tensor__init(&ws[i]);
    ws[i].name = (char *)t->name;
    ws[i].dtype_code = t->dtype_code;
    ws[i].dtype_bits = t->dtype_bits;
    ws[i].dtype_lanes = t->dtype_lanes;
    ws[i].n_shape = ws[i].n_strides = t->ndim;
    ws[i].shape = (int64_t *)t->shape;
    ws[i].strides = (int64_t *)t->strides;
    ws[i].buffer = t->buffer;
    ws[i].offset = t->offset;
    ptrs[i] = &ws[i];
  }
  pm.version = 1;
  pm.n_tensors = m->n_tensors;
  pm.tensors = ptrs;
  EXPECT(gpushm__weight_manifest__get_packed_size(&pm) == len, "packed sizes differ");
  EXPECT((packed = malloc(len)) != NULL, "out of memory");
  EXPECT(gpushm__weight_manifest__pack(&pm, packed) == len, NULL);
  EXPECT(memcmp(packed, bytes, len) == 0, "the writer's bytes are not protobuf-c's");
  free(packed);
  free(ptrs);
  free(ws);
}

/* Decoded on threads and on one (this build takes MANIFEST_CHUNK_TENSORS tensors a
 * chunk, not thousands: a manifest of a few tensors is several chunks): the same
 * refusal, word for word, or the same tensors. */
static void expect_threads_agree(const uint8_t *data, size_t size, const uint64_t *sizes,
                                 uint32_t n_buffers)
{
  char err[2][256];
  struct manifest m[2];
  int rc[2];

  for (int one = 0; one < 2; one++) {
    if (one)
      EXPECT(setenv("GPUSHM_MANIFEST_THREADS", "1", 1) == 0, NULL);
    rc[one] = manifest_decode(data, size, sizes, n_buffers, &m[one], err[one],
                              sizeof err[one]);
  }
  EXPECT(unsetenv("GPUSHM_MANIFEST_THREADS") == 0, NULL);
  EXPECT(rc[0] == rc[1], err[0]);
  if (rc[0]) {
    EXPECT(strcmp(err[0], err[1]) == 0, err[0]);
  } else {
    EXPECT(m[0].n_tensors == m[1].n_tensors, NULL);
    for (size_t i = 0; i < m[0].n_tensors; i++) {
      EXPECT(same_tensor(&m[0].tensors[i], &m[1].tensors[i]), m[0].tensors[i].name);
      EXPECT(manifest_find(&m[0], m[0].tensors[i].name, m[0].tensors[i].name_len) == (long)i,
             m[0].tensors[i].name);
    }
    manifest_free(&m[0]);
    manifest_free(&m[1]);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  uint64_t sizes[MAX_BUFFERS] = { 0 };
  uint32_t n_buffers = 0;
  struct manifest m, again;
  struct manifest_writer w;
  Gpushm__WeightManifest *pc;
  char err[256], err2[256];
  bool threads_too = false;
  int rc, overlaps;

  if (size) {
    n_buffers = data[0] % (MAX_BUFFERS + 1);
    threads_too = data[0] / (MAX_BUFFERS + 1) % 4 == 0; /* threads take longer */
    data++;
    size--;
    for (uint32_t b = 0; b < n_buffers; b++)
      for (unsigned k = 0; k < 8; k++, data++, size--) {
        if (!size)
          break;
        sizes[b] |= (uint64_t)*data << (8 * k);
      }
  }

  if (threads_too)
    expect_threads_agree(data, size, sizes, n_buffers);
  err[0] = 'x';
  rc = manifest_decode(data, size, sizes, n_buffers, &m, err, sizeof err);
  if (rc) {
    EXPECT(rc == PROTO_E_INVAL || rc == PROTO_E_LIMIT || rc == PROTO_E_NOMEM, err);
    EXPECT(err[0] && err[0] != 'x', "a refusal without a reason");
    EXPECT(!m.storage_ && !m.tensors && !m.n_tensors, "a refusal left a manifest");
    return 0;
  }
  EXPECT(m.version == 1 && m.n_tensors > 0, NULL);

  /* protobuf-c reads what was accepted, to the same tensors */
  pc = gpushm__weight_manifest__unpack(NULL, size, data);
  EXPECT(pc != NULL, "decoded, but protobuf-c refuses it");
  EXPECT(pc->version == 1 && pc->n_tensors == m.n_tensors, "protobuf-c counts otherwise");
  for (size_t i = 0; i < m.n_tensors; i++)
    EXPECT(same_as_protobuf_c(&m.tensors[i], pc->tensors[i]), m.tensors[i].name);
  gpushm__weight_manifest__free_unpacked(pc, NULL);

  /* written back, strides given */
  manifest_writer_init(&w);
  for (size_t i = 0; i < m.n_tensors; i++) {
    EXPECT(manifest_find(&m, m.tensors[i].name, m.tensors[i].name_len) == (long)i,
           m.tensors[i].name);
    if (manifest_writer_add(&w, &m.tensors[i], sizes, n_buffers, err, sizeof err) != 0)
      fail("the writer refuses a decoded tensor", err);
  }
  EXPECT(w.n_tensors == m.n_tensors, NULL);
  expect_packed_as_protobuf_c(&m, w.data, w.len);
  if (manifest_decode(w.data, w.len, sizes, n_buffers, &again, err, sizeof err) != 0)
    fail("the writer's manifest is refused", err);
  EXPECT(again.n_tensors == m.n_tensors, NULL);
  for (size_t i = 0; i < m.n_tensors; i++)
    EXPECT(same_tensor(&m.tensors[i], &again.tensors[i]), m.tensors[i].name);

  /* any bytes as a name: not found, or found where that name is */
  {
    size_t len = size < 48 ? size : 48;
    long at = manifest_find(&m, (const char *)data, len);
    EXPECT(at == -1 || (m.tensors[at].name_len == len &&
                        memcmp(m.tensors[at].name, data, len) == 0), NULL);
  }

  overlaps = manifest_check_overlaps(&m, err, sizeof err);
  EXPECT(overlaps == 0 || overlaps == PROTO_E_INVAL || overlaps == PROTO_E_NOMEM, NULL);
  EXPECT(overlaps == 0 || strstr(err, "overlap") || overlaps == PROTO_E_NOMEM, err);
  EXPECT(manifest_check_overlaps(&again, err2, sizeof err2) == overlaps,
         "overlaps found in one copy only");

  manifest_free(&again);
  manifest_writer_free(&w);
  manifest_free(&m);
  return 0;
}
