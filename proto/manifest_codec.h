/* SPDX-License-Identifier: MIT */
/* A weight set's manifest (WeightManifest in gpushm.proto) coded and checked by hand.
 *
 * A manifest names up to a million tensors and comes from another process, which may be
 * hostile.  protobuf-c's generic unpack makes an allocation for every tensor, name and
 * repeated field, and a consumer's first open of a 100,000-tensor set has to take
 * under 20 ms in all.  manifest_decode() reads the bytes twice (once to size one arena,
 * once to fill it), a large manifest in chunks of tensors on as many threads as the
 * process has CPUs (up to eight, each pass's threads gone when it returns), makes a
 * constant number of allocations whatever the count, checks every tensor against the
 * generation's buffers and indexes the names.  The wire format
 * is protobuf's: manifest_decode() reads what protobuf-c packs (packed or unpacked
 * repeated fields, unknown fields skipped), and the writer packs byte for byte what
 * protobuf-c would (tests/unit/test-manifest-codec.c, fuzz-manifest-codec). */
#ifndef GPUSHM_MANIFEST_CODEC_H
#define GPUSHM_MANIFEST_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct manifest_tensor {
  const char *name;        /* NUL-terminated, in the manifest's storage */
  uint32_t name_len;
  uint8_t dtype_code, dtype_bits;  /* DLPack DLDataTypeCode and bits per lane */
  uint16_t dtype_lanes;             /* >= 1 (the wire's 0 means 1) */
  uint32_t ndim;                    /* <= GPUSHM_LIMIT_TENSOR_NDIM */
  const int64_t *shape;             /* ndim extents */
  const int64_t *strides;           /* ndim strides in elements, always filled: C-contiguous
                                     * where the wire gave none */
  uint32_t buffer;                  /* index into the generation's buffers */
  uint64_t offset;                  /* bytes from the buffer's start to element [0,...,0] */
};

struct manifest {
  uint32_t version;
  size_t n_tensors;
  struct manifest_tensor *tensors;
  /* private: one allocation holding the tensors, names, shapes, strides and an
   * open-addressing hash index of the names (keyed at random for each manifest, so that
   * a hostile one cannot choose names that collide), built at decode */
  void *storage_;
};

/* Decodes bytes[0, len) (a packed WeightManifest) and checks every tensor against the
 * generation's buffers (n_buffers sizes in bytes; buffer_sizes may be NULL only with
 * n_buffers 0).  Refused, err saying which tensor (its index and name,
 * printable-escaped) and why: more than GPUSHM_LIMIT_WEIGHT_MANIFEST bytes, truncated or
 * malformed protobuf (bad varint, length past the end, wrong wire type for a known
 * field, a uint32 field's value over 32 bits), version != 1, zero tensors, more than
 * GPUSHM_LIMIT_WEIGHT_TENSORS, an empty name, a name longer than
 * GPUSHM_LIMIT_WEIGHT_NAME or not valid UTF-8 or with control characters, a name seen
 * twice, buffer index >= n_buffers, ndim > GPUSHM_LIMIT_TENSOR_NDIM, strides count !=
 * ndim (when given), a negative extent, dtype bits 0 or not a multiple of 8, lanes >
 * 65535 or bits > 255 or code > 255, any element (for any sign of strides) outside
 * [0, size) of its buffer (a tensor without elements: its offset past the end), an
 * element not aligned to its size (up to 16 bytes: the largest power of two dividing
 * bits/8*lanes, capped at 16), arithmetic overflow anywhere.  Unknown fields are skipped
 * (forward compatible), as protobuf does; a singular field given twice takes the last
 * value and a repeated one appends, as protobuf does.  0, or PROTO_E_INVAL /
 * PROTO_E_LIMIT (more bytes or tensors than the limits, a name too long) /
 * PROTO_E_NOMEM, with *out zeroed and nothing left allocated. */
int manifest_decode(const uint8_t *bytes, size_t len, const uint64_t *buffer_sizes,
                    uint32_t n_buffers, struct manifest *out, char *err, size_t errlen);
/* Frees what manifest_decode() made and zeroes *m (a zeroed one may be freed again). */
void manifest_free(struct manifest *m);
/* The index of the tensor named name (len bytes), or -1. O(1) expected. */
long manifest_find(const struct manifest *m, const char *name, size_t len);

/* Partial overlaps between tensors of one buffer are refused; exact aliases (same
 * buffer, offset, dtype, shape and strides: tied weights) are allowed.  Spans are
 * [lowest byte, highest byte + 1) of each tensor's elements; a tensor with an empty
 * shape (an extent of 0: no elements) occupies nothing.  O(n log n).  0, PROTO_E_INVAL
 * naming both tensors, or PROTO_E_NOMEM. */
int manifest_check_overlaps(const struct manifest *m, char *err, size_t errlen);
/* The bytes the elements of t, a tensor of a decoded manifest, span in its buffer:
 * [*first, *end), as above; false for a tensor with no elements. */
bool manifest_tensor_span(const struct manifest_tensor *t, uint64_t *first, uint64_t *end);

/* Building one: tensors appended and encoded as they come (bytes identical to what
 * protobuf-c packs for the same WeightManifest: dtype_lanes is written as given, so
 * 0 and 1 both mean one lane but pack differently, as they would in protobuf-c). */
struct manifest_writer {
  uint8_t *data;
  size_t len, cap;
  size_t n_tensors;
};
void manifest_writer_init(struct manifest_writer *w);   /* writes version = 1 first */
/* t checked as manifest_decode would check it, except against buffer sizes when
 * buffer_sizes is NULL (then neither the buffer index nor the end of the buffer is
 * checked), and except that names seen twice and overlaps are only found at decode;
 * strides NULL in t means C-contiguous (then none are written).  Refused with
 * PROTO_E_LIMIT as well when the manifest would pass GPUSHM_LIMIT_WEIGHT_TENSORS tensors
 * or GPUSHM_LIMIT_WEIGHT_MANIFEST bytes.  0 or a PROTO_E_*, with w as it was. */
int manifest_writer_add(struct manifest_writer *w, const struct manifest_tensor *t,
                        const uint64_t *buffer_sizes, uint32_t n_buffers, char *err,
                        size_t errlen);
void manifest_writer_free(struct manifest_writer *w);

#endif
