/* SPDX-License-Identifier: MIT */
/* Weight sets (0.8, GPUSHM_FEATURE_WEIGHTS; docs/weights.md): a whole model shared by
 * name, in immutable generations.  A publisher lays its tensors out in buffers it
 * created (any number, on any devices), names each tensor's place in a manifest and
 * publishes it: the name then denotes the new generation, and holders of older ones
 * keep theirs, unchanged, until they close them, when gpushmd frees what nobody holds.
 *
 *   publisher:                                   reader:
 *     gpushm_weights_builder_new(&b);              gpushm_weights_open(conn, "m", &w);
 *     gpushm_weights_builder_add_buffer(b, buf,    n = gpushm_weights_tensor_count(w);
 *                                       &i);      gpushm_weights_tensor(w, k, &t);
 *     gpushm_weights_builder_add_tensor(b, name,  gpushm_weights_tensor_ptr(w, k, &p);
 *                                       i, &desc); gpushm_weights_wait_newer(w, -1);
 *     gpushm_weights_publish(conn, "m", b, NULL,   gpushm_weights_close(w);
 *                            &w);
 *
 * The manifest travels as a sealed memfd (a million tensors fit), which libgpushm
 * checks, tensor by tensor, against the buffers it names before it hands out anything:
 * a manifest that lies (an element past its buffer, a misaligned element, a name twice)
 * is refused at open, naming the tensor.  Buffers of a published generation take no new
 * writer: publish only what you are done writing (its stream synchronised); the
 * publisher's own handles stay writable, and writing through them after publishing
 * breaks the promise every reader relies on. */
#ifndef GPUSHM_WEIGHTS_H
#define GPUSHM_WEIGHTS_H

#include "gpushm.h"
#include "gpushm-dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What gpushm_weights_newest() says once the set's name is gone (unlinked, or its
 * creator gone for a session set): no newer generation will come. */
#define GPUSHM_WEIGHTS_GONE UINT64_MAX

typedef struct gpushm_weights gpushm_weights_t;
typedef struct gpushm_weights_builder gpushm_weights_builder_t;

/* One tensor of a generation: its name, the buffer it lies in (an index of the
 * generation's buffers) and where in it.  desc.shape and desc.strides (always given,
 * in elements) point into w, valid until it is closed; desc is filled in its first
 * layout (desc.size GPUSHM_TENSOR_DESC_SIZE_V1), so that this struct never grows. */
typedef struct gpushm_weight_tensor {
  const char *name;
  size_t name_len;
  uint32_t buffer;
  gpushm_tensor_desc_t desc;
} gpushm_weight_tensor_t;

/* ---- publishing ---------------------------------------------------------------------- */

GPUSHM_API int gpushm_weights_builder_new(gpushm_weights_builder_t **out);
GPUSHM_API void gpushm_weights_builder_free(gpushm_weights_builder_t *b);
/* A buffer the generation's tensors lie in: open read-write on the connection that will
 * publish (its writer), plain memory (no image, event, timeline or ring).  *index: what
 * tensors name it by (the same buffer added twice: its first index).  The builder takes
 * an open of its own (gpushm_buffer_ref()), closed by gpushm_weights_builder_free(). */
GPUSHM_API int gpushm_weights_builder_add_buffer(gpushm_weights_builder_t *b,
                                                 gpushm_buffer_t *buf, uint32_t *index);
/* A tensor: name (1 to 1024 bytes of printable UTF-8, unique in the generation) in
 * buffer index at desc (offset, dtype, shape, strides: NULL for C-contiguous).  Checked
 * at once against the buffer (GPUSHM_E_INVAL, saying why); partial overlaps between
 * tensors are refused at publish (an exact alias, tied weights, is not one). */
GPUSHM_API int gpushm_weights_builder_add_tensor(gpushm_weights_builder_t *b, const char *name,
                                                 uint32_t buffer,
                                                 const gpushm_tensor_desc_t *desc);

/* Publishing options.  Initialise with gpushm_weights_publish_opts_init(). */
typedef struct gpushm_weights_publish_opts {
  uint32_t size;               /* sizeof(gpushm_weights_publish_opts_t) */
  uint32_t mode;               /* the first publish: the set's mode (0: the daemon's) */
  gpushm_lifetime_t lifetime;  /* the first publish */
  uint64_t after;              /* nonzero: only if the name denotes this generation now
                                * (GPUSHM_E_EXIST otherwise: another publisher came first) */
} gpushm_weights_publish_opts_t;

/* The size of the first published gpushm_weights_publish_opts_t (gpushm 0.8). */
#define GPUSHM_WEIGHTS_PUBLISH_OPTS_SIZE_V1 24u

GPUSHM_API void gpushm_weights_publish_opts_init(gpushm_weights_publish_opts_t *opts);

/* Publishes b's tensors as the next generation of weight set name (its first, made with
 * opts' mode and lifetime, if there is none): atomically, readers opening name from now
 * on get it.  The buffers must be open read-write by conn and by no other connection
 * (GPUSHM_E_INVAL, naming the other), readable by whoever may read the set.  Publishing
 * under a name of another kind is GPUSHM_E_EXIST; into a set the caller may not write,
 * GPUSHM_E_PERM; past 16 generations alive (readers that never let go), GPUSHM_E_LIMIT.
 * *out (may be NULL) holds the new generation, as an open would.  b
 * stays the caller's to free. */
GPUSHM_API int gpushm_weights_publish(gpushm_t *conn, const char *name,
                                      const gpushm_weights_builder_t *b,
                                      const gpushm_weights_publish_opts_t *opts,
                                      gpushm_weights_t **out);

/* ---- reading ------------------------------------------------------------------------- */

/* Opens the generation name denotes now.  Refused (GPUSHM_E_INVAL, naming the tensor and
 * why) where its manifest lies about the buffers; GPUSHM_E_NOENT for no such set (or
 * one the caller may not see); GPUSHM_E_PERM without read access. */
GPUSHM_API int gpushm_weights_open(gpushm_t *conn, const char *name, gpushm_weights_t **out);
/* Lets go of the generation and every buffer opened through it (their tensors'
 * pointers go with them; DLPack tensors made of them hold opens of their own).  Where
 * the set's publisher recycles buffers (a generation named buffers of the one this
 * connection closed before) and the connection holds a later generation of the set,
 * the buffers stay open and mapped, unread, until the next generation opened through it
 * names them again (and takes them over: no mapping) or not (closed then), or it lets
 * go of the set's last generation, or disconnects: they keep memory, never a
 * generation, and of up to GPUSHM_LIMIT_WEIGHT_SETS_KEPT sets a connection.  In a
 * child forked after the open: GPUSHM_E_INVAL, only the child's copy of the memory
 * freed (the generation is the parent's). */
GPUSHM_API int gpushm_weights_close(gpushm_weights_t *w);

GPUSHM_API const char *gpushm_weights_name(const gpushm_weights_t *w);
GPUSHM_API uint64_t gpushm_weights_id(const gpushm_weights_t *w);
/* This generation's number (1 for a set's first). */
GPUSHM_API uint64_t gpushm_weights_generation(const gpushm_weights_t *w);
/* The set's newest generation now, read from shared memory (no round trip), or
 * GPUSHM_WEIGHTS_GONE once its name is gone. */
GPUSHM_API uint64_t gpushm_weights_newest(const gpushm_weights_t *w);
/* Sleeps (no polling of the daemon) until a generation newer than w's is published: 0
 * (open the name again to get it), GPUSHM_E_NOENT if the set's name went instead,
 * GPUSHM_E_TIMEOUT after timeout_ms (< 0: for ever). */
GPUSHM_API int gpushm_weights_wait_newer(gpushm_weights_t *w, int timeout_ms);

/* Recycling (docs/weights.md#recycling): a publisher that writes a new generation into
 * the buffers of an older one, instead of new buffers, must first know that nobody reads
 * them.  gpushm_weights_oldest(): the oldest generation of w's set that anyone still
 * holds (w's own at most), read from shared memory only gpushmd writes (no round trip);
 * 0 from a gpushmd that does not say.  gpushm_weights_wait_released() sleeps (no polling
 * of the daemon) until every generation of w's set up to generation is let go of by
 * every holder: 0, after which their buffers are the publisher's alone to write (those
 * a later generation also names excepted); GPUSHM_E_INVAL for a generation not older
 * than w's (w holds it); GPUSHM_E_TIMEOUT after timeout_ms (< 0: for ever);
 * GPUSHM_E_UNSUPPORTED from a gpushmd that does not say.  A reader's tensors that
 * outlive its close of a generation (DLPack tensors hold memory, not the generation)
 * read what a recycling publisher writes next. */
GPUSHM_API uint64_t gpushm_weights_oldest(const gpushm_weights_t *w);
GPUSHM_API int gpushm_weights_wait_released(gpushm_weights_t *w, uint64_t generation,
                                            int timeout_ms);

GPUSHM_API size_t gpushm_weights_tensor_count(const gpushm_weights_t *w);
GPUSHM_API int gpushm_weights_tensor(const gpushm_weights_t *w, size_t index,
                                     gpushm_weight_tensor_t *out);
/* The index of the tensor named name, or GPUSHM_E_NOENT. */
GPUSHM_API long gpushm_weights_find(const gpushm_weights_t *w, const char *name);

GPUSHM_API uint32_t gpushm_weights_buffer_count(const gpushm_weights_t *w);
/* Buffer index of the generation, opened read-only through it at the first call (one
 * round trip; its memory mapped as gpushm_buffer_open() maps it), w's: never close it. */
GPUSHM_API int gpushm_weights_buffer(gpushm_weights_t *w, uint32_t index,
                                     gpushm_buffer_t **out);
/* Where tensor index's element [0, ..., 0] is in this process (its buffer opened if need
 * be): a device pointer for device memory. */
GPUSHM_API int gpushm_weights_tensor_ptr(gpushm_weights_t *w, size_t index, void **ptr);

/* ---- copying into memory of the caller's own ----------------------------------------- */

/* Copies w's tensors into memory of the caller's (an engine that keeps parameters of its
 * own): tensor i to dst[i], where its element [0, ..., 0] goes, the rest laid out with the
 * tensor's strides (NULL: not copied; bytes between its elements are left alone there); n:
 * gpushm_weights_tensor_count(w).  Buffer after buffer, each opened and mapped as
 * gpushm_weights_buffer() does just before its copies are queued, so that mapping one
 * overlaps the copies out of the one before; tensors adjacent in both memories go as one
 * copy, and a tensor whose elements lie apart as one copy a block.  Device memory, and host
 * memory given a stream, is copied with cuMemcpyAsync on stream (a CUstream; NULL: the
 * legacy default stream of the buffer's map device), into any memory CUDA can address: done
 * when the stream has passed the copies, which gpushm_weights_close() waits for before it
 * unmaps anything.  Host memory without a stream is copied by the CPU, done on return.
 * GPUSHM_E_INVAL for n not the tensor count; GPUSHM_E_UNSUPPORTED for a tensor whose
 * elements are both apart and repeated (strides 2 and 2); where a buffer cannot be opened
 * or mapped, its error, the copies queued before it left queued. */
GPUSHM_API int gpushm_weights_copy(gpushm_weights_t *w, void *const dst[], size_t n,
                                   void *stream);

#ifdef __cplusplus
}
#endif
#endif /* GPUSHM_WEIGHTS_H */
