/* SPDX-License-Identifier: MIT */
/* Open buffers as DLPack tensors, and the Python capsules that carry them
 * (gpushm-dlpack.h).  Built on the public API alone: a tensor is one more open of its
 * buffer (gpushm_buffer_ref), which its deleter closes. */
#include "config.h"
#include "error.h"
#include "buffer.h"
#include "segment.h"
#include "gpushm.h"
#include "gpushm-dlpack.h"
#include "gpushm_limits.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Consumers read these structs at DLPack's offsets, not ours: pin them (LP64, the
 * platforms gpushm runs on). */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(offsetof(gpushm_dlpack_tensor_t, device) == 8 &&
               offsetof(gpushm_dlpack_tensor_t, ndim) == 16 &&
               offsetof(gpushm_dlpack_tensor_t, dtype) == 20 &&
               offsetof(gpushm_dlpack_tensor_t, shape) == 24 &&
               offsetof(gpushm_dlpack_tensor_t, strides) == 32 &&
               offsetof(gpushm_dlpack_tensor_t, byte_offset) == 40 &&
               sizeof(gpushm_dlpack_tensor_t) == 48, "DLTensor's layout");
_Static_assert(offsetof(gpushm_dlpack_managed_t, manager_ctx) == 48 &&
               offsetof(gpushm_dlpack_managed_t, deleter) == 56 &&
               sizeof(gpushm_dlpack_managed_t) == 64, "DLManagedTensor's layout");
_Static_assert(offsetof(gpushm_dlpack_managed_versioned_t, manager_ctx) == 8 &&
               offsetof(gpushm_dlpack_managed_versioned_t, deleter) == 16 &&
               offsetof(gpushm_dlpack_managed_versioned_t, flags) == 24 &&
               offsetof(gpushm_dlpack_managed_versioned_t, dl_tensor) == 32 &&
               sizeof(gpushm_dlpack_managed_versioned_t) == 80,
               "DLManagedTensorVersioned's layout");
_Static_assert(sizeof(gpushm_tensor_desc_t) == GPUSHM_TENSOR_DESC_SIZE_V1,
               "the first published gpushm_tensor_desc_t");
#endif
_Static_assert(sizeof(gpushm_dlpack_dtype_t) == 4 && sizeof(gpushm_dlpack_device_t) == 8,
               "DLDataType's and DLDevice's layouts");
_Static_assert(GPUSHM_TENSOR_MAX_NDIM == GPUSHM_LIMIT_TENSOR_NDIM, "one limit, two spellings");

/* One allocation per tensor: the managed struct the consumer is given comes first (the
 * deleter finds the rest from its address), then what must live as long as it: the
 * buffer's open, the shape and the strides. */
struct dlpack_tensor {
  union {
    gpushm_dlpack_managed_t legacy;
    gpushm_dlpack_managed_versioned_t versioned;
  } managed;
  gpushm_buffer_t *buf;
  void *view; /* read-only host memory: the private view data points into; NULL: none */
  size_t view_len;
  int64_t dims[]; /* shape[ndim], then strides[ndim] */
};

/* Deleters and capsule destructors run at a garbage collector's whim: between a failed
 * call and its caller's reading of gpushm_last_error_message(), say.  The close they do
 * would reset it, so they put the thread's message back (client_save_error()). */

/* The deleters may run on any thread, at any time (a framework's garbage collector,
 * interpreter shutdown): they touch nothing but the tensor and the thread-safe close. */
static void delete_tensor(struct dlpack_tensor *t)
{
  gpushm_buffer_t *buf = t->buf;
  struct client_saved_error saved;

  client_save_error(&saved);
  if (t->view)
    munmap(t->view, t->view_len);
  free(t);
  gpushm_buffer_close(buf);
  client_restore_error(&saved);
}

static void delete_legacy(gpushm_dlpack_managed_t *self)
{
  delete_tensor((struct dlpack_tensor *)self);
}

static void delete_versioned(gpushm_dlpack_managed_versioned_t *self)
{
  delete_tensor((struct dlpack_tensor *)self);
}

void gpushm_tensor_desc_init(gpushm_tensor_desc_t *desc)
{
  memset(desc, 0, sizeof *desc);
  desc->size = sizeof *desc;
  desc->dtype.code = GPUSHM_DLPACK_UINT;
  desc->dtype.bits = 8;
  desc->dtype.lanes = 1;
}

/* Bytes per element, and the alignment its loads need: the largest power of two that
 * divides its size, up to 16 (a float4 or a complex128 load on a GPU). */
static int element_layout(const gpushm_dlpack_dtype_t *dtype, uint64_t *size, uint64_t *align)
{
  if (dtype->bits == 0 || dtype->bits % 8 || dtype->lanes == 0)
    return client_error(GPUSHM_E_INVAL, "dtype of code %u, %u bits, %u lanes: only whole bytes "
                        "per lane and at least one lane are supported", dtype->code, dtype->bits,
                        dtype->lanes);
  *size = (uint64_t)(dtype->bits / 8) * dtype->lanes;
  *align = *size & -*size;
  if (*align > 16)
    *align = 16;
  return 0;
}

/* Fills strides (in elements) from desc's, or C-contiguous ones, and checks that every
 * element lies in [0, buf_size) bytes of the buffer, whatever the signs of the strides.
 * All arithmetic is checked: a hostile manifest must not wrap around into a small
 * extent. */
static int check_extent(const gpushm_tensor_desc_t *desc, uint64_t elem_size, uint64_t buf_size,
                        int64_t *shape, int64_t *strides)
{
  int64_t lowest = 0, highest = 0, lo_bytes, hi_bytes, next = 1;
  bool empty = false;

  for (uint32_t i = 0; i < desc->ndim; i++) {
    if (desc->shape[i] < 0)
      return client_error(GPUSHM_E_INVAL, "extent %" PRId64 " of dimension %u is negative",
                          desc->shape[i], i);
    shape[i] = desc->shape[i];
    empty |= shape[i] == 0;
  }
  for (uint32_t i = desc->ndim; i-- > 0;) {
    if (desc->strides) {
      strides[i] = desc->strides[i];
    } else {
      strides[i] = next;
      if (__builtin_mul_overflow(next, shape[i] ? shape[i] : 1, &next))
        return client_error(GPUSHM_E_INVAL, "a tensor of more than 2^63 elements");
    }
  }
  if (desc->offset > buf_size)
    return client_error(GPUSHM_E_INVAL, "offset %" PRIu64 " is past the buffer's %" PRIu64
                        " bytes", desc->offset, buf_size);
  if (empty)
    return 0; /* no element to lie anywhere */
  for (uint32_t i = 0; i < desc->ndim; i++) {
    int64_t span;
    if (__builtin_mul_overflow(shape[i] - 1, strides[i], &span) ||
        __builtin_add_overflow(span < 0 ? lowest : highest, span, span < 0 ? &lowest : &highest))
      return client_error(GPUSHM_E_INVAL, "dimension %u (extent %" PRId64 ", stride %" PRId64
                          ") reaches past 2^63 elements", i, shape[i], strides[i]);
  }
  /* Bytes from element [0, ..., 0] to the end of the highest element, and back to the
   * start of the lowest. */
  if (__builtin_add_overflow(highest, 1, &hi_bytes) ||
      __builtin_mul_overflow(hi_bytes, (int64_t)elem_size, &hi_bytes) ||
      __builtin_mul_overflow(lowest, (int64_t)elem_size, &lo_bytes))
    return client_error(GPUSHM_E_INVAL, "the tensor spans more than 2^63 bytes");
  if ((uint64_t)hi_bytes > buf_size - desc->offset)
    return client_error(GPUSHM_E_INVAL, "the tensor's elements reach %" PRId64 " bytes past "
                        "offset %" PRIu64 ", beyond the buffer's %" PRIu64 " bytes", hi_bytes,
                        desc->offset, buf_size);
  /* -lo_bytes, computed where INT64_MIN cannot overflow */
  if (lo_bytes < 0 && (uint64_t)-(lo_bytes + 1) + 1 > desc->offset)
    return client_error(GPUSHM_E_INVAL, "negative strides reach %" PRIu64 " bytes before "
                        "offset %" PRIu64 ", before the buffer's start",
                        (uint64_t)-(lo_bytes + 1) + 1, desc->offset);
  return 0;
}

/* Read-only host memory as a consumer gets it: a private (copy-on-write) mapping of the
 * buffer, from the read-only fd the open keeps.  Reads see the shared memory, as the
 * open's own mapping does, page by page until the consumer writes one; a consumer that
 * writes despite the read-only flag (PyTorch has no read-only tensors) writes its own
 * copy of that page instead of faulting, and nobody else sees it.  *delta: where the
 * buffer starts in *view. */
static int private_view(const gpushm_buffer_t *buf, void **view, size_t *len, size_t *delta)
{
  const struct client_mapping *m = buf->map;
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t start =
    m->segment ? (uint64_t)((char *)m->ptr - (char *)client_segment_host(m->segment)) : 0;
  int fd = m->segment ? client_segment_fd(m->segment) : m->memory_fd;
  void *p;

  if (fd < 0)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' keeps no fd for a private view (opened by "
                        "a library before 0.8, or by the parent of this process)", m->name);
  *delta = (size_t)(start % page);
  *len = (size_t)((*delta + m->size + page - 1) / page * page);
  p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)(start - *delta));
  if (p == MAP_FAILED)
    return client_error(errno == ENOMEM ? GPUSHM_E_NOMEM : GPUSHM_E_IO, "a private view of "
                        "'%s': %s", m->name, strerror(errno));
  *view = p;
  return 0;
}

int gpushm_buffer_dlpack(gpushm_buffer_t *buf, const gpushm_tensor_desc_t *user_desc,
                         unsigned flags, void **out)
{
  gpushm_tensor_desc_t desc;
  int64_t shape[GPUSHM_TENSOR_MAX_NDIM], strides[GPUSHM_TENSOR_MAX_NDIM];
  gpushm_dlpack_tensor_t *dl;
  struct dlpack_tensor *t;
  uint64_t elem_size = 0, align = 1; /* set by element_layout() */
  uintptr_t data;
  bool read_only, legacy = flags & GPUSHM_DLPACK_LEGACY;
  int r;

  client_clear_error();
  if (!buf || !user_desc || !out)
    return client_error(GPUSHM_E_INVAL, "buf, desc and out must not be NULL");
  *out = NULL;
  if (flags & ~(GPUSHM_DLPACK_LEGACY | GPUSHM_DLPACK_READ_ONLY))
    return client_error(GPUSHM_E_INVAL, "unknown DLPack flags 0x%x", flags);
  gpushm_tensor_desc_init(&desc);
  if ((r = client_copy_opts(&desc, sizeof desc, user_desc, GPUSHM_TENSOR_DESC_SIZE_V1,
                            "gpushm_tensor_desc_t")) < 0)
    return r;
  if (desc.ndim > GPUSHM_TENSOR_MAX_NDIM)
    return client_error(GPUSHM_E_INVAL, "%u dimensions, more than the %u a tensor may have",
                        desc.ndim, GPUSHM_TENSOR_MAX_NDIM);
  if (desc.ndim && !desc.shape)
    return client_error(GPUSHM_E_INVAL, "%u dimensions but no shape", desc.ndim);
  if ((r = element_layout(&desc.dtype, &elem_size, &align)) < 0)
    return r;
  read_only = gpushm_buffer_is_readonly(buf) || (flags & GPUSHM_DLPACK_READ_ONLY);
  if (legacy && read_only)
    return client_error(GPUSHM_E_PERM, "'%s' is read-only here, and a legacy DLPack tensor "
                        "(DLManagedTensor) cannot say so: its consumer would write to it; "
                        "ask for a versioned one (DLPack 1.0)", gpushm_buffer_name(buf));
  /* Legacy IPC maps read-write whatever the open: a read-only tensor of it would be one
   * in name only, which a consumer that ignores the flag writes through to everyone. */
  if (read_only && gpushm_buffer_backend(buf) == GPUSHM_BACKEND_CUDA_IPC)
    return client_error(GPUSHM_E_PERM, "'%s' is legacy CUDA IPC memory, which CUDA maps "
                        "read-write whatever the open, so no read-only tensor of it can be "
                        "held to that: open it read-write, or copy it", gpushm_buffer_name(buf));
  if ((r = check_extent(&desc, elem_size, gpushm_buffer_size(buf), shape, strides)) < 0)
    return r;
  data = (uintptr_t)gpushm_buffer_ptr(buf) + desc.offset;
  if (data % align)
    return client_error(GPUSHM_E_INVAL, "offset %" PRIu64 " puts %" PRIu64 "-byte elements at "
                        "an address not a multiple of %" PRIu64, desc.offset, elem_size, align);

  if (!(t = malloc(sizeof *t + 2 * (size_t)desc.ndim * sizeof(int64_t))))
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  t->view = NULL;
  if (gpushm_buffer_is_readonly(buf) && gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST &&
      buf->map && buf->map->ptr) {
    size_t delta = 0;
    if ((r = private_view(buf, &t->view, &t->view_len, &delta)) < 0) {
      free(t);
      return r;
    }
    data = (uintptr_t)t->view + delta + desc.offset;
  }
  if ((r = gpushm_buffer_ref(buf)) < 0) {
    if (t->view)
      munmap(t->view, t->view_len);
    free(t);
    return r;
  }
  memset(&t->managed, 0, sizeof t->managed);
  memcpy(t->dims, shape, desc.ndim * sizeof(int64_t));
  memcpy(t->dims + desc.ndim, strides, desc.ndim * sizeof(int64_t));
  t->buf = buf;
  if (legacy) {
    dl = &t->managed.legacy.dl_tensor;
    t->managed.legacy.manager_ctx = buf;
    t->managed.legacy.deleter = delete_legacy;
  } else {
    dl = &t->managed.versioned.dl_tensor;
    t->managed.versioned.version.major = GPUSHM_DLPACK_MAJOR;
    t->managed.versioned.version.minor = GPUSHM_DLPACK_MINOR;
    t->managed.versioned.manager_ctx = buf;
    t->managed.versioned.deleter = delete_versioned;
    t->managed.versioned.flags = read_only ? GPUSHM_DLPACK_FLAG_READ_ONLY : 0;
  }
  /* data at the first element and byte_offset 0: what PyTorch, CuPy and NumPy produce,
   * and all that some consumers read. */
  dl->data = (void *)data;
  if (gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST)
    dl->device = (gpushm_dlpack_device_t){ GPUSHM_DLPACK_CPU, 0 };
  else
    dl->device = (gpushm_dlpack_device_t){ GPUSHM_DLPACK_CUDA, gpushm_buffer_map_device(buf) };
  dl->ndim = (int32_t)desc.ndim;
  dl->dtype = desc.dtype;
  dl->shape = desc.ndim ? t->dims : NULL;
  dl->strides = desc.ndim ? t->dims + desc.ndim : NULL;
  dl->byte_offset = 0;
  *out = t;
  return 0;
}

/* ---- Python capsules ------------------------------------------------------------ */

static const char *const capsule_names[] = {
  [GPUSHM_CAPSULE_DLTENSOR] = "dltensor",
  [GPUSHM_CAPSULE_DLTENSOR_VERSIONED] = "dltensor_versioned",
  [GPUSHM_CAPSULE_BUFFER] = "gpushm.buffer",
  [GPUSHM_CAPSULE_CONNECTION] = "gpushm.connection",
  [GPUSHM_CAPSULE_RING] = "gpushm.ring",
};
#define CAPSULE_KINDS (sizeof capsule_names / sizeof capsule_names[0])

const char *gpushm_capsule_name(unsigned kind)
{
  return kind < CAPSULE_KINDS ? capsule_names[kind] : NULL;
}

/* Python's capsule API, found in the process rather than linked (gpushm-dlpack.h says
 * why); resolved once, the first time a capsule dies. */
static int (*py_capsule_is_valid)(void *capsule, const char *name);
static void *(*py_capsule_get_pointer)(void *capsule, const char *name);
static pthread_once_t python_once = PTHREAD_ONCE_INIT;

static void find_python(void)
{
  /* POSIX's way to turn dlsym's object pointer into a function pointer. */
  *(void **)&py_capsule_is_valid = dlsym(RTLD_DEFAULT, "PyCapsule_IsValid");
  *(void **)&py_capsule_get_pointer = dlsym(RTLD_DEFAULT, "PyCapsule_GetPointer");
}

void gpushm_capsule_destructor(void *capsule)
{
  void *p;

  pthread_once(&python_once, find_python);
  if (!capsule || !py_capsule_is_valid || !py_capsule_get_pointer)
    return;
  /* IsValid before GetPointer: GetPointer of another name would set a Python
   * exception, which a destructor must not leave behind.  A consumed DLPack capsule
   * has the consumer's name ("used_dltensor...") and matches none. */
  for (unsigned kind = 0; kind < CAPSULE_KINDS; kind++) {
    if (!py_capsule_is_valid(capsule, capsule_names[kind]))
      continue;
    p = py_capsule_get_pointer(capsule, capsule_names[kind]);
    switch (kind) {
    case GPUSHM_CAPSULE_DLTENSOR: {
      gpushm_dlpack_managed_t *m = p;
      if (m->deleter)
        m->deleter(m);
      break;
    }
    case GPUSHM_CAPSULE_DLTENSOR_VERSIONED: {
      gpushm_dlpack_managed_versioned_t *m = p;
      if (m->deleter)
        m->deleter(m);
      break;
    }
    case GPUSHM_CAPSULE_BUFFER: {
      struct client_saved_error saved;
      client_save_error(&saved);
      gpushm_buffer_close(p);
      client_restore_error(&saved);
      break;
    }
    case GPUSHM_CAPSULE_CONNECTION: {
      /* a disconnect can send unmaps, which fail on a lost connection and say so */
      struct client_saved_error saved;
      client_save_error(&saved);
      gpushm_disconnect(p);
      client_restore_error(&saved);
      break;
    }
    case GPUSHM_CAPSULE_RING: {
      struct client_saved_error saved;
      client_save_error(&saved);
      gpushm_ring_close(p);
      client_restore_error(&saved);
      break;
    }
    }
    return;
  }
}
