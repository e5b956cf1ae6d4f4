/* SPDX-License-Identifier: MIT */
/*
 * gpushm-dlpack.h — open buffers as DLPack tensors, and the Python capsules that carry
 * them, so that a framework (PyTorch, CuPy, NumPy, JAX, ...) uses gpushm memory without
 * a copy and without knowing gpushm.  The Python package (python/) is built on this;
 * C and C++ programs that hand tensors to a framework can use it as well.
 *
 * Lifetime: every tensor made here holds one open of its buffer (what
 * gpushm_buffer_ref() takes), and its deleter closes it.  A buffer stays mapped while any
 * tensor made from it lives, whoever closed their own handle meanwhile; the last tensor
 * to go is what unmaps it and tells gpushmd.  The deleter is C: no interpreter needs to
 * be alive to run it (a framework may free a tensor while Python shuts down).
 *
 * The structs below are DLPack's (dlpack.h, https://github.com/dmlc/dlpack), its stable
 * ABI, spelled with a gpushm_ prefix so that this header can be included beside
 * dlpack.h.  A DLPack producer may be asked for either of two layouts: the versioned
 * DLManagedTensorVersioned (DLPack 1.0 and later, which can mark a tensor read-only)
 * and the legacy DLManagedTensor (consumers older than 1.0).
 *
 * Conventions as in gpushm.h: 0 or a negative GPUSHM_E_* code, the detail in
 * gpushm_last_error_message(); all functions are thread-safe.
 */
#ifndef GPUSHM_DLPACK_H
#define GPUSHM_DLPACK_H

#include "gpushm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- DLPack's ABI ------------------------------------------------------------- */

/* The DLPack version this library produces (DLManagedTensorVersioned.version). */
#define GPUSHM_DLPACK_MAJOR 1u
#define GPUSHM_DLPACK_MINOR 0u

/* DLDeviceType values gpushm produces: host buffers are kDLCPU (pageable shared memory,
 * not pinned), device buffers kDLCUDA on their map device. */
#define GPUSHM_DLPACK_CPU 1
#define GPUSHM_DLPACK_CUDA 2
#define GPUSHM_DLPACK_CUDA_HOST 3

/* DLDataTypeCode values. */
#define GPUSHM_DLPACK_INT 0u
#define GPUSHM_DLPACK_UINT 1u
#define GPUSHM_DLPACK_FLOAT 2u
#define GPUSHM_DLPACK_OPAQUE_HANDLE 3u
#define GPUSHM_DLPACK_BFLOAT 4u
#define GPUSHM_DLPACK_COMPLEX 5u
#define GPUSHM_DLPACK_BOOL 6u

/* DLManagedTensorVersioned.flags bits. */
#define GPUSHM_DLPACK_FLAG_READ_ONLY (1ull << 0)
#define GPUSHM_DLPACK_FLAG_IS_COPIED (1ull << 1)

typedef struct gpushm_dlpack_device {
  int32_t device_type; /* GPUSHM_DLPACK_CPU, GPUSHM_DLPACK_CUDA, ... */
  int32_t device_id;
} gpushm_dlpack_device_t;

typedef struct gpushm_dlpack_dtype {
  uint8_t code;   /* GPUSHM_DLPACK_INT, ... */
  uint8_t bits;   /* of one lane */
  uint16_t lanes; /* 1 for scalars */
} gpushm_dlpack_dtype_t;

typedef struct gpushm_dlpack_tensor {
  void *data;
  gpushm_dlpack_device_t device;
  int32_t ndim;
  gpushm_dlpack_dtype_t dtype;
  int64_t *shape;
  int64_t *strides; /* in elements */
  uint64_t byte_offset;
} gpushm_dlpack_tensor_t;

/* DLManagedTensor (legacy). */
typedef struct gpushm_dlpack_managed {
  gpushm_dlpack_tensor_t dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct gpushm_dlpack_managed *self);
} gpushm_dlpack_managed_t;

typedef struct gpushm_dlpack_version {
  uint32_t major;
  uint32_t minor;
} gpushm_dlpack_version_t;

/* DLManagedTensorVersioned (DLPack 1.0 and later). */
typedef struct gpushm_dlpack_managed_versioned {
  gpushm_dlpack_version_t version;
  void *manager_ctx;
  void (*deleter)(struct gpushm_dlpack_managed_versioned *self);
  uint64_t flags; /* GPUSHM_DLPACK_FLAG_* */
  gpushm_dlpack_tensor_t dl_tensor;
} gpushm_dlpack_managed_versioned_t;

/* ---- tensors of a buffer ------------------------------------------------------ */

/* Dimensions a tensor may have (NumPy's own limit was 32 until 2.0). */
#define GPUSHM_TENSOR_MAX_NDIM 32u

/* Where a tensor lies in its buffer.  Initialise with gpushm_tensor_desc_init(), which
 * sets size (the convention of gpushm_create_opts_t: fields may be appended). */
typedef struct gpushm_tensor_desc {
  uint32_t size;                /* sizeof(gpushm_tensor_desc_t) when initialised */
  uint32_t ndim;                /* at most GPUSHM_TENSOR_MAX_NDIM */
  uint64_t offset;              /* bytes from the buffer's start to element [0, ..., 0] */
  gpushm_dlpack_dtype_t dtype;  /* whole bytes per lane; lanes >= 1 */
  const int64_t *shape;         /* ndim extents, each >= 0 */
  const int64_t *strides;       /* ndim strides in elements; NULL: C-contiguous */
} gpushm_tensor_desc_t;

/* The size of the first published gpushm_tensor_desc_t (gpushm 0.4). */
#define GPUSHM_TENSOR_DESC_SIZE_V1 40u

/* Zeroes desc (a 0-d uint8 tensor at offset 0) and sets desc->size. */
GPUSHM_API void gpushm_tensor_desc_init(gpushm_tensor_desc_t *desc);

/* gpushm_buffer_dlpack() flags */
/* *out is a legacy gpushm_dlpack_managed_t (DLManagedTensor) instead of a
 * gpushm_dlpack_managed_versioned_t.  It cannot say "read-only", and its consumer would
 * write through it: a read-only open (or GPUSHM_DLPACK_READ_ONLY) is refused with
 * GPUSHM_E_PERM rather than handed out as writable. */
#define GPUSHM_DLPACK_LEGACY 0x1u
/* Marks the tensor read-only although buf is open read-write.  Read-only opens always
 * give read-only tensors. */
#define GPUSHM_DLPACK_READ_ONLY 0x2u

/* Makes a DLPack tensor of buf's memory as desc describes it, holding one more open of
 * buf that the tensor's deleter closes: call the deleter (or hand the tensor to a
 * consumer, who will), never gpushm_buffer_close() for it.  The tensor's device is
 * buf's map device (GPUSHM_DLPACK_CUDA) or the CPU (host buffers); data points at
 * element [0, ..., 0] and byte_offset is 0 (what consumers expect).  desc is copied.
 *
 * Refused with GPUSHM_E_INVAL, saying why: a NULL buf, desc or out; an event; more
 * than GPUSHM_TENSOR_MAX_NDIM dimensions; a negative extent; a dtype of no whole bytes
 * or no lanes; elements not aligned to their size (up to 16 bytes: a GPU faults on a
 * misaligned load, and the fault is sticky); any element, for any strides, outside the
 * buffer.  GPUSHM_E_PERM for a legacy tensor of read-only memory (GPUSHM_DLPACK_LEGACY),
 * and for a read-only tensor of legacy CUDA IPC memory, which CUDA maps read-write
 * whatever the open; GPUSHM_E_LIMIT as for gpushm_buffer_ref(), GPUSHM_E_NOMEM.
 *
 * A read-only open's host memory comes as a private (copy-on-write) mapping of the
 * buffer, made for the tensor and unmapped by its deleter (since 0.8): it reads what
 * the buffer holds, and a consumer that writes despite the read-only flag (PyTorch has
 * no read-only tensors) writes its own copy of each page it writes instead of faulting;
 * nobody else sees those writes.  For it, such an open keeps a read-only fd of its
 * memory (of its segment, for carved buffers). */
GPUSHM_API int gpushm_buffer_dlpack(gpushm_buffer_t *buf, const gpushm_tensor_desc_t *desc,
                                    unsigned flags, void **out);

/* ---- Python capsules ------------------------------------------------------------ */

/* What a PyCapsule made for gpushm holds, by its name (gpushm_capsule_name()):
 *  - GPUSHM_CAPSULE_DLTENSOR, "dltensor": a gpushm_dlpack_managed_t, DLPack's legacy
 *    capsule (__dlpack__() without max_version);
 *  - GPUSHM_CAPSULE_DLTENSOR_VERSIONED, "dltensor_versioned": a
 *    gpushm_dlpack_managed_versioned_t (__dlpack__(max_version=(1, 0)) and later);
 *  - GPUSHM_CAPSULE_BUFFER, "gpushm.buffer": one open of a gpushm_buffer_t (or of a
 *    gpushm_event_t: gpushm_event_close() is the same close);
 *  - GPUSHM_CAPSULE_CONNECTION, "gpushm.connection": a gpushm_t, the caller's handle;
 *  - GPUSHM_CAPSULE_RING, "gpushm.ring": a gpushm_ring_t (0.8). */
#define GPUSHM_CAPSULE_DLTENSOR 0u
#define GPUSHM_CAPSULE_DLTENSOR_VERSIONED 1u
#define GPUSHM_CAPSULE_BUFFER 2u
#define GPUSHM_CAPSULE_CONNECTION 3u
#define GPUSHM_CAPSULE_RING 4u

/* The capsule name of a GPUSHM_CAPSULE_* kind (NULL for another value).  PyCapsule_New()
 * keeps the name's pointer, not a copy, and the capsule may outlive every Python object
 * (a module's constants go at interpreter shutdown): these names live as long as the
 * library. */
GPUSHM_API const char *gpushm_capsule_name(unsigned kind);

/* A PyCapsule_Destructor (it is given the PyObject * of the capsule) for capsules made
 * with PyCapsule_New(pointer, gpushm_capsule_name(kind), gpushm_capsule_destructor):
 * it closes what the capsule holds — the buffer's open, the connection — and, for a
 * DLPack capsule that no consumer took (a consumer renames it "used_dltensor..." and
 * becomes the tensor's owner), calls the tensor's deleter.  A capsule of another name
 * is left alone.
 *
 * libgpushm does not link libpython (a C program must not need it, and a Python
 * extension must not bind one version of it): PyCapsule_IsValid() and
 * PyCapsule_GetPointer() are looked up in the process (dlsym(RTLD_DEFAULT)) when first
 * needed.  They are there in a python executable; where they are not (a Python that
 * loaded libpython privately), nothing is closed and the memory stays mapped until the
 * process exits.  Python calls destructors holding the GIL, as those calls need. */
GPUSHM_API void gpushm_capsule_destructor(void *capsule);

#ifdef __cplusplus
}
#endif
#endif /* GPUSHM_DLPACK_H */
