/* SPDX-License-Identifier: MIT */
/* Buffers as DLPack tensors (gpushm-dlpack.h) and the opens that keep them alive:
 *  - gpushm_buffer_ref() is one more open: the daemon's reference stays while any
 *    open is left and goes with the last close; its limit is crossed;
 *  - a tensor outlives the handle it was made from, and its deleter (legacy and
 *    versioned) is what releases the buffer;
 *  - read-only opens give read-only versioned tensors and no legacy ones;
 *  - a forked child closing what its parent opened is refused and changes nothing;
 *  - every malformed description (dimensions, extents, strides either way, overflow,
 *    alignment, dtype, sizes) is refused, naming why, and takes no reference;
 *  - the capsule destructor, against a stand-in for Python's capsule API that this
 *    program exports (it is looked up in the process, never linked), closes what each
 *    kind of capsule holds and leaves consumed and foreign capsules alone;
 *  - a device buffer (the fake driver, where built) is a kDLCUDA tensor of its map
 *    device. */
#include "config.h"
#include "gpushm-dlpack.h"
#include "harness.h"

#include <dirent.h>

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIZE 4096u

static struct test_daemon d;

/* The daemon's references to name (from this connection: the last close is one-way,
 * and later requests on the same connection see it). */
static uint32_t daemon_refs(gpushm_t *conn, const char *name)
{
  const gpushm_buffer_info_t *info = find_buffer(conn, name);
  CHECK(info != NULL);
  return gpushm_buffer_info_refs(info);
}

static gpushm_buffer_t *create(gpushm_t *conn, const char *name, uint32_t backend)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;

  gpushm_create_opts_init(&opts);
  opts.backend = backend;
  opts.mode = 0644;
  CHECK_OK(gpushm_buffer_create(conn, name, SIZE, &opts, &b));
  return b;
}

static gpushm_tensor_desc_t desc_of(uint8_t code, uint8_t bits, uint32_t ndim, const int64_t *shape,
                                    const int64_t *strides, uint64_t offset)
{
  gpushm_tensor_desc_t desc;
  gpushm_tensor_desc_init(&desc);
  desc.dtype = (gpushm_dlpack_dtype_t){ code, bits, 1 };
  desc.ndim = ndim;
  desc.shape = shape;
  desc.strides = strides;
  desc.offset = offset;
  return desc;
}

static void test_ref(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "dl-ref", GPUSHM_BACKEND_HOST), *again;
  unsigned taken = 1;

  CHECK(daemon_refs(conn, "dl-ref") == 1);
  CHECK_OK(gpushm_buffer_ref(b));
  CHECK_OK(gpushm_buffer_ref(b));
  CHECK(daemon_refs(conn, "dl-ref") == 1); /* one per process, whatever the local count */
  /* an open is the same handle, counted with the refs */
  CHECK_OK(gpushm_buffer_open(conn, "dl-ref", 0, &again));
  CHECK(again == b);
  for (int closes = 0; closes < 3; closes++) {
    CHECK_OK(gpushm_buffer_close(b));
    memset(gpushm_buffer_ptr(b), closes, SIZE); /* still mapped */
    CHECK(daemon_refs(conn, "dl-ref") == 1);
  }
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(daemon_refs(conn, "dl-ref") == 0);

  CHECK_ERR(gpushm_buffer_ref(NULL), GPUSHM_E_INVAL);

  /* the limit: refs up to it, one more refused and nothing taken */
  CHECK_OK(gpushm_buffer_open(conn, "dl-ref", 0, &b));
  while (taken < GPUSHM_BUFFER_REFS_MAX) {
    CHECK_OK(gpushm_buffer_ref(b));
    taken++;
  }
  CHECK_ERR(gpushm_buffer_ref(b), GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_BUFFER_REFS_MAX") != NULL);
  for (; taken > 1; taken--)
    CHECK_OK(gpushm_buffer_close(b));
  CHECK(daemon_refs(conn, "dl-ref") == 1);
  CHECK_OK(gpushm_buffer_close_unlink(b));
  CHECK(find_buffer(conn, "dl-ref") == NULL);
}

static void test_tensor_outlives_handle(gpushm_t *conn)
{
  static const int64_t shape[2] = { 4, 8 };
  gpushm_buffer_t *b = create(conn, "dl-life", GPUSHM_BACKEND_HOST);
  gpushm_tensor_desc_t desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, shape, NULL, 64);
  gpushm_dlpack_managed_versioned_t *v;
  gpushm_dlpack_managed_t *l;
  char message[512];
  float *data;

  CHECK_OK(gpushm_buffer_dlpack(b, &desc, 0, (void **)&v));
  CHECK(v->version.major == 1 && v->version.minor == 0 && v->flags == 0);
  CHECK(v->manager_ctx == b && v->deleter != NULL);
  CHECK(v->dl_tensor.data == (char *)gpushm_buffer_ptr(b) + 64 && v->dl_tensor.byte_offset == 0);
  CHECK(v->dl_tensor.device.device_type == GPUSHM_DLPACK_CPU && v->dl_tensor.device.device_id == 0);
  CHECK(v->dl_tensor.ndim == 2 && v->dl_tensor.shape[0] == 4 && v->dl_tensor.shape[1] == 8);
  CHECK(v->dl_tensor.strides[0] == 8 && v->dl_tensor.strides[1] == 1); /* C-contiguous */
  CHECK(v->dl_tensor.dtype.code == GPUSHM_DLPACK_FLOAT && v->dl_tensor.dtype.bits == 32 &&
        v->dl_tensor.dtype.lanes == 1);
  /* the description was copied: the caller's arrays may go */
  CHECK(v->dl_tensor.shape != shape && v->dl_tensor.strides != NULL);

  CHECK_OK(gpushm_buffer_dlpack(b, &desc, GPUSHM_DLPACK_LEGACY, (void **)&l));
  CHECK(l->manager_ctx == b && l->deleter != NULL && l->dl_tensor.data == v->dl_tensor.data);
  CHECK(l->dl_tensor.ndim == 2 && l->dl_tensor.shape[1] == 8 && l->dl_tensor.strides[0] == 8);

  /* the handle goes; the tensors keep the memory */
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(daemon_refs(conn, "dl-life") == 1);
  data = v->dl_tensor.data;
  for (int i = 0; i < 32; i++)
    data[i] = (float)i;
  CHECK(((float *)l->dl_tensor.data)[31] == 31.0f);
  /* a deleter leaves the thread's last error as it found it */
  CHECK_ERR(gpushm_buffer_open(conn, "dl-missing", 0, &b), GPUSHM_E_NOENT);
  CHECK(strlen(gpushm_last_error_message()) > 0);
  snprintf(message, sizeof message, "%s", gpushm_last_error_message());
  l->deleter(l);
  CHECK(strcmp(gpushm_last_error_message(), message) == 0);
  CHECK(daemon_refs(conn, "dl-life") == 1);
  v->deleter(v); /* the last view: releases the buffer */
  CHECK(daemon_refs(conn, "dl-life") == 0);

  /* a fresh open sees what the tensor wrote */
  CHECK_OK(gpushm_buffer_open(conn, "dl-life", GPUSHM_OPEN_READONLY, &b));
  CHECK(((float *)((char *)gpushm_buffer_ptr(b) + 64))[7] == 7.0f);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "dl-life"));
}

static unsigned count_fds(void)
{
  DIR *dir = opendir("/proc/self/fd");
  unsigned n = 0;

  CHECK(dir != NULL);
  while (readdir(dir))
    n++;
  closedir(dir);
  return n;
}

/* A read-only tensor of a bytes host buffer, written through as PyTorch would: no fault,
 * the writes stay in this tensor, and what the producer writes later shows through in
 * the pages the tensor did not write. */
static void written_privately(gpushm_t *conn, uint64_t size)
{
  const int64_t shape[1] = { (int64_t)size };
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  gpushm_tensor_desc_t desc = desc_of(GPUSHM_DLPACK_UINT, 8, 1, shape, NULL, 0);
  gpushm_dlpack_managed_versioned_t *v;
  gpushm_buffer_t *rw, *ro, *fresh;
  gpushm_create_opts_t opts;
  gpushm_t *other;
  uint8_t *shared, *view;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST;
  opts.mode = 0644;
  CHECK_OK(gpushm_buffer_create(conn, "dl-private", size, &opts, &rw));
  shared = gpushm_buffer_ptr(rw);
  memset(shared, 0x11, size);
  CHECK_OK(gpushm_buffer_open(conn, "dl-private", GPUSHM_OPEN_READONLY, &ro));
  CHECK_OK(gpushm_buffer_dlpack(ro, &desc, 0, (void **)&v));
  CHECK(v->flags == GPUSHM_DLPACK_FLAG_READ_ONLY);
  view = v->dl_tensor.data;
  CHECK(view[0] == 0x11 && view[size - 1] == 0x11);
  memset(view, 0x22, page); /* the first page, as a consumer ignoring the flag */
  CHECK(view[0] == 0x22 && shared[0] == 0x11);
  CHECK(((uint8_t *)gpushm_buffer_ptr(ro))[0] == 0x11);
  shared[0] = 0x33;          /* a page the view wrote: it keeps its own */
  shared[size - 1] = 0x44;   /* one it did not: the producer's write shows */
  CHECK(view[0] == 0x22 && view[size - 1] == 0x44);
  other = daemon_connect(&d); /* another connection's open: what everyone else sees */
  CHECK_OK(gpushm_buffer_open(other, "dl-private", GPUSHM_OPEN_READONLY, &fresh));
  CHECK(((uint8_t *)gpushm_buffer_ptr(fresh))[1] == 0x11);
  CHECK_OK(gpushm_buffer_close(fresh));
  gpushm_disconnect(other);
  v->deleter(v);
  CHECK_OK(gpushm_buffer_close(ro));
  CHECK_OK(gpushm_buffer_close_unlink(rw));
}

static void test_read_only(gpushm_t *conn)
{
  static const int64_t shape[1] = { SIZE };
  gpushm_buffer_t *rw = create(conn, "dl-ro", GPUSHM_BACKEND_HOST), *ro;
  gpushm_tensor_desc_t desc = desc_of(GPUSHM_DLPACK_UINT, 8, 1, shape, NULL, 0);
  gpushm_dlpack_managed_versioned_t *v;
  void *out = &out;

  CHECK_OK(gpushm_buffer_open(conn, "dl-ro", GPUSHM_OPEN_READONLY, &ro));
  CHECK(ro != rw);
  CHECK_OK(gpushm_buffer_dlpack(ro, &desc, 0, (void **)&v));
  CHECK(v->flags == GPUSHM_DLPACK_FLAG_READ_ONLY && v->manager_ctx == ro);
  /* the open's own mapping stays read-only for the kernel; the tensor is a private view */
  CHECK(mprotect(gpushm_buffer_ptr(ro), SIZE, PROT_READ) == 0);
  CHECK(mprotect(gpushm_buffer_ptr(ro), SIZE, PROT_READ | PROT_WRITE) < 0 && errno == EACCES);
  CHECK(v->dl_tensor.data != gpushm_buffer_ptr(ro));
  v->deleter(v);
  /* a consumer that writes despite the flag (PyTorch) writes its own copy, in both kinds
   * of host memory: a slot of a shared segment, and an allocation of its own */
  written_privately(conn, 2 * SIZE);
  written_privately(conn, 2u << 20);
  /* the fds kept for such views go with the mappings that keep them: a reader (a
   * process of its own, as readers are) that opened both kinds read-only and viewed
   * them leaves none behind */
  {
    static const uint64_t sizes[2] = { 2 * SIZE, 2u << 20 };
    gpushm_buffer_t *made[2];
    gpushm_create_opts_t opts;
    pid_t pid;
    gpushm_create_opts_init(&opts);
    opts.mode = 0644;
    CHECK_OK(gpushm_buffer_create(conn, "dl-fds-0", sizes[0], &opts, &made[0]));
    CHECK_OK(gpushm_buffer_create(conn, "dl-fds-1", sizes[1], &opts, &made[1]));
    CHECK((pid = fork()) >= 0);
    if (pid == 0) {
      unsigned before = count_fds();
      gpushm_t *reader = daemon_connect(&d);
      gpushm_buffer_t *seen;
      for (int i = 0; i < 2; i++) {
        const int64_t n[1] = { (int64_t)sizes[i] };
        gpushm_tensor_desc_t bytes = desc_of(GPUSHM_DLPACK_UINT, 8, 1, n, NULL, 0);
        CHECK_OK(gpushm_buffer_open(reader, i ? "dl-fds-1" : "dl-fds-0",
                                    GPUSHM_OPEN_READONLY, &seen));
        CHECK_OK(gpushm_buffer_dlpack(seen, &bytes, 0, (void **)&v));
        v->deleter(v);
        CHECK_OK(gpushm_buffer_close(seen));
      }
      gpushm_disconnect(reader);
      if (count_fds() != before) {
        fprintf(stderr, "the reader had %u fds open before and %u after\n", before,
                count_fds());
        _exit(1);
      }
      _exit(0);
    }
    check_child(pid);
    CHECK_OK(gpushm_buffer_close_unlink(made[0]));
    CHECK_OK(gpushm_buffer_close_unlink(made[1]));
  }
  CHECK_ERR(gpushm_buffer_dlpack(ro, &desc, GPUSHM_DLPACK_LEGACY, &out), GPUSHM_E_PERM);
  CHECK(out == NULL && strstr(gpushm_last_error_message(), "legacy") != NULL);

  /* asked for on a read-write open */
  CHECK_OK(gpushm_buffer_dlpack(rw, &desc, GPUSHM_DLPACK_READ_ONLY, (void **)&v));
  CHECK(v->flags == GPUSHM_DLPACK_FLAG_READ_ONLY);
  v->deleter(v);
  CHECK_ERR(gpushm_buffer_dlpack(rw, &desc, GPUSHM_DLPACK_LEGACY | GPUSHM_DLPACK_READ_ONLY, &out),
            GPUSHM_E_PERM);
  CHECK_OK(gpushm_buffer_close(ro));
  CHECK_OK(gpushm_buffer_close_unlink(rw));
}

/* desc must be refused with GPUSHM_E_INVAL, the message containing why. */
static void refused(gpushm_buffer_t *b, const gpushm_tensor_desc_t *desc, unsigned flags,
                    const char *why)
{
  void *out = &out;
  int r = gpushm_buffer_dlpack(b, desc, flags, &out);
  if (r != GPUSHM_E_INVAL || out != NULL || !strstr(gpushm_last_error_message(), why)) {
    fprintf(stderr, "expected a refusal naming '%s', got %d: %s\n", why, r,
            gpushm_last_error_message());
    exit(1);
  }
}

/* desc must be accepted (and its tensor is deleted at once). */
static void accepted(gpushm_buffer_t *b, const gpushm_tensor_desc_t *desc)
{
  gpushm_dlpack_managed_versioned_t *v;
  CHECK_OK(gpushm_buffer_dlpack(b, desc, 0, (void **)&v));
  v->deleter(v);
}

static void test_bad_descs(gpushm_t *conn)
{
  static const int64_t fit[2] = { 32, 32 };               /* 1024 floats: the whole buffer */
  static const int64_t one_more[2] = { 32, 33 };
  static const int64_t negative[2] = { -1, 4 };
  static const int64_t empty[2] = { 0, 5 };
  static const int64_t huge[2] = { INT64_C(1) << 62, 4 };
  static const int64_t two[1] = { 2 };
  static const int64_t backwards[1] = { -1 };
  static const int64_t far[2] = { 1, 1024 };
  static const int64_t wrap[2] = { INT64_C(1) << 61, 1 };
  static const int64_t big_shape[2] = { 2, 2 };
  int64_t many[GPUSHM_TENSOR_MAX_NDIM + 1];
  gpushm_buffer_t *b = create(conn, "dl-bad", GPUSHM_BACKEND_HOST);
  gpushm_tensor_desc_t desc;
  void *out;

  for (unsigned i = 0; i <= GPUSHM_TENSOR_MAX_NDIM; i++)
    many[i] = 1;
  CHECK_ERR(gpushm_buffer_dlpack(NULL, &desc, 0, &out), GPUSHM_E_INVAL);
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, fit, NULL, 0);
  CHECK_ERR(gpushm_buffer_dlpack(b, NULL, 0, &out), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_dlpack(b, &desc, 0, NULL), GPUSHM_E_INVAL);
  refused(b, &desc, 0x80, "unknown DLPack flags");
  desc.size = 0;
  refused(b, &desc, 0, "gpushm_tensor_desc_t size 0");

  /* extents: exactly the buffer passes, one element more does not */
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, fit, NULL, 0);
  accepted(b, &desc);
  desc.offset = 4;
  refused(b, &desc, 0, "beyond the buffer's 4096 bytes");
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, one_more, NULL, 0);
  refused(b, &desc, 0, "beyond the buffer's 4096 bytes");
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, negative, NULL, 0);
  refused(b, &desc, 0, "extent -1 of dimension 0 is negative");
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, fit, NULL, SIZE + 4);
  refused(b, &desc, 0, "past the buffer's 4096 bytes");
  /* an empty tensor has no element to lie outside, but its offset must still be inside */
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, empty, NULL, SIZE);
  accepted(b, &desc);
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 0, NULL, NULL, SIZE - 4); /* 0-d: one element */
  accepted(b, &desc);
  desc.offset = SIZE;
  refused(b, &desc, 0, "beyond the buffer");
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, NULL, NULL, 0);
  refused(b, &desc, 0, "no shape");

  /* strides: forward past the end, backward before the start, and overflow */
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, far, (const int64_t[]){ 1, 1 }, 0);
  accepted(b, &desc); /* 1024 floats with stride 1 */
  desc.strides = (const int64_t[]){ 1, 2 };
  refused(b, &desc, 0, "beyond the buffer");
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 1, two, backwards, 4); /* elements at 4 and 0 */
  accepted(b, &desc);
  desc.offset = 0;
  refused(b, &desc, 0, "before the buffer's start");
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, huge, NULL, 0);
  refused(b, &desc, 0, "2^63");
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, wrap, (const int64_t[]){ 4, 1 }, 0);
  refused(b, &desc, 0, "2^63");
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, big_shape, (const int64_t[]){ INT64_MAX / 2, 1 }, 0);
  refused(b, &desc, 0, "2^63");
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 2, big_shape, (const int64_t[]){ INT64_MIN / 2, 1 },
                 SIZE / 2);
  refused(b, &desc, 0, "2^63");

  /* dimensions */
  desc = desc_of(GPUSHM_DLPACK_UINT, 8, GPUSHM_TENSOR_MAX_NDIM, many, NULL, 0);
  accepted(b, &desc);
  desc.ndim++;
  refused(b, &desc, 0, "33 dimensions");

  /* dtypes and alignment */
  desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 1, two, NULL, 2);
  refused(b, &desc, 0, "not a multiple of 4");
  desc = desc_of(GPUSHM_DLPACK_COMPLEX, 128, 1, two, NULL, 8);
  refused(b, &desc, 0, "not a multiple of 16");
  desc.offset = 16;
  accepted(b, &desc);
  desc = desc_of(GPUSHM_DLPACK_INT, 12, 1, two, NULL, 0);
  refused(b, &desc, 0, "whole bytes");
  desc = desc_of(GPUSHM_DLPACK_INT, 0, 1, two, NULL, 0);
  refused(b, &desc, 0, "whole bytes");
  desc = desc_of(GPUSHM_DLPACK_INT, 32, 1, two, NULL, 0);
  desc.dtype.lanes = 0;
  refused(b, &desc, 0, "at least one lane");
  desc.dtype.lanes = 4; /* a 16-byte element */
  desc.offset = 16;
  accepted(b, &desc);

  /* no refusal took a reference: the handle's close is the last */
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(daemon_refs(conn, "dl-bad") == 0);
  CHECK_OK(gpushm_unlink(conn, "dl-bad"));
}

/* A forked child's garbage collector may close what its parent opened (Python objects,
 * tensors): refused, and nothing in the parent changes. */
static void test_fork(gpushm_t *conn)
{
  static const int64_t shape[1] = { 16 };
  gpushm_buffer_t *b = create(conn, "dl-fork", GPUSHM_BACKEND_HOST);
  gpushm_tensor_desc_t desc = desc_of(GPUSHM_DLPACK_UINT, 8, 1, shape, NULL, 0);
  gpushm_dlpack_managed_versioned_t *v;
  pid_t pid;

  CHECK_OK(gpushm_buffer_dlpack(b, &desc, 0, (void **)&v));
  if ((pid = fork()) == 0) {
    CHECK_ERR(gpushm_buffer_close(b), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), "before fork()") != NULL);
    CHECK_ERR(gpushm_buffer_ref(b), GPUSHM_E_INVAL);
    v->deleter(v); /* frees the tensor, closes nothing */
    CHECK_ERR(gpushm_buffer_close_unlink(b), GPUSHM_E_INVAL);
    _exit(0);
  }
  check_child(pid);
  CHECK(daemon_refs(conn, "dl-fork") == 1);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(daemon_refs(conn, "dl-fork") == 1);
  v->deleter(v);
  CHECK(daemon_refs(conn, "dl-fork") == 0);
  CHECK_OK(gpushm_unlink(conn, "dl-fork"));
}

/* ---- the capsule destructor, against a stand-in for Python's capsule API ---------- */

/* A PyCapsule as far as the destructor can tell: a name and a pointer.  The functions
 * below are what dlsym(RTLD_DEFAULT) finds in this program (linked -export-dynamic). */
struct fake_capsule {
  const char *name;
  void *pointer;
};

int PyCapsule_IsValid(void *capsule, const char *name);
void *PyCapsule_GetPointer(void *capsule, const char *name);
static unsigned get_pointer_calls;

__attribute__((visibility("default"))) int PyCapsule_IsValid(void *capsule, const char *name)
{
  const struct fake_capsule *c = capsule;
  return c && c->pointer && c->name && strcmp(c->name, name) == 0;
}

__attribute__((visibility("default"))) void *PyCapsule_GetPointer(void *capsule, const char *name)
{
  struct fake_capsule *c = capsule;
  get_pointer_calls++;
  CHECK(PyCapsule_IsValid(c, name)); /* asked only for the name it has */
  return c->pointer;
}

static void test_capsules(void)
{
  static const int64_t shape[1] = { 16 };
  gpushm_t *conn = daemon_connect(&d), *other = daemon_connect(&d);
  gpushm_buffer_t *b = create(conn, "dl-capsule", GPUSHM_BACKEND_HOST);
  gpushm_tensor_desc_t desc = desc_of(GPUSHM_DLPACK_UINT, 8, 1, shape, NULL, 0);
  gpushm_dlpack_managed_versioned_t *v;
  gpushm_dlpack_managed_t *l;
  struct fake_capsule cap;

  CHECK(strcmp(gpushm_capsule_name(GPUSHM_CAPSULE_DLTENSOR), "dltensor") == 0);
  CHECK(strcmp(gpushm_capsule_name(GPUSHM_CAPSULE_DLTENSOR_VERSIONED), "dltensor_versioned") == 0);
  CHECK(strcmp(gpushm_capsule_name(GPUSHM_CAPSULE_BUFFER), "gpushm.buffer") == 0);
  CHECK(strcmp(gpushm_capsule_name(GPUSHM_CAPSULE_CONNECTION), "gpushm.connection") == 0);
  CHECK(strcmp(gpushm_capsule_name(GPUSHM_CAPSULE_RING), "gpushm.ring") == 0);
  CHECK(gpushm_capsule_name(5) == NULL);
  gpushm_capsule_destructor(NULL);

  /* never consumed: the destructor deletes the tensor (and so the open it held) */
  CHECK_OK(gpushm_buffer_dlpack(b, &desc, 0, (void **)&v));
  CHECK_OK(gpushm_buffer_dlpack(b, &desc, GPUSHM_DLPACK_LEGACY, (void **)&l));
  CHECK_OK(gpushm_buffer_ref(b));
  CHECK_OK(gpushm_buffer_close(b)); /* the handle's own open: three left */
  cap = (struct fake_capsule){ "dltensor_versioned", v };
  gpushm_capsule_destructor(&cap);
  CHECK(get_pointer_calls == 1);
  cap = (struct fake_capsule){ "dltensor", l };
  gpushm_capsule_destructor(&cap);
  CHECK(daemon_refs(conn, "dl-capsule") == 1);
  cap = (struct fake_capsule){ "gpushm.buffer", b };
  gpushm_capsule_destructor(&cap);
  CHECK(daemon_refs(conn, "dl-capsule") == 0);

  /* consumed (renamed by its consumer, who deletes it) and foreign capsules: left alone */
  CHECK_OK(gpushm_buffer_open(conn, "dl-capsule", 0, &b));
  CHECK_OK(gpushm_buffer_dlpack(b, &desc, 0, (void **)&v));
  cap = (struct fake_capsule){ "used_dltensor_versioned", v };
  gpushm_capsule_destructor(&cap);
  cap = (struct fake_capsule){ "something.else", b };
  gpushm_capsule_destructor(&cap);
  CHECK(get_pointer_calls == 3);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(daemon_refs(conn, "dl-capsule") == 1); /* v's open */
  v->deleter(v);
  CHECK(daemon_refs(conn, "dl-capsule") == 0);

  /* a ring capsule closes the ring */
  {
    gpushm_create_opts_t opts;
    gpushm_ring_t *ring;
    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_HOST;
    CHECK_OK(gpushm_ring_create(conn, "dl-ring", 2, 64, &opts, &ring));
    CHECK(daemon_refs(conn, "dl-ring") == 1);
    cap = (struct fake_capsule){ "gpushm.ring", ring };
    gpushm_capsule_destructor(&cap);
    CHECK(get_pointer_calls == 4);
    CHECK(daemon_refs(conn, "dl-ring") == 0);
    CHECK_OK(gpushm_unlink(conn, "dl-ring"));
  }
  /* a connection capsule disconnects */
  cap = (struct fake_capsule){ "gpushm.connection", other };
  gpushm_capsule_destructor(&cap);
  CHECK(get_pointer_calls == 5);
  CHECK_OK(gpushm_unlink(conn, "dl-capsule"));
  gpushm_disconnect(conn);
}

/* Device memory (the fake driver stands in for a GPU): a kDLCUDA tensor of the map
 * device, in a process of its own since it loads the driver. */
static void test_device(void)
{
  static const int64_t shape[1] = { 256 };
  const char *fake = getenv("GPUSHM_FAKE_CUDA_LIB");
  gpushm_tensor_desc_t desc = desc_of(GPUSHM_DLPACK_FLOAT, 32, 1, shape, NULL, 0);
  gpushm_dlpack_managed_versioned_t *v;
  gpushm_buffer_t *b;
  gpushm_t *conn;

  if (!fake || access(fake, R_OK) != 0) {
    test_log("no fake CUDA driver: device tensors not tested");
    return;
  }
  setenv("GPUSHM_CUDA_LIBRARY", fake, 1);
  setenv("GPUSHM_FAKE_CUDA_DEVICES", "2", 1);
  daemon_start(&d, "--allow-legacy-ipc", "yes", NULL);
  conn = daemon_connect(&d);
  {
    /* legacy IPC maps read-write whatever the open: no read-only tensor of it */
    gpushm_buffer_t *rw, *ro;
    gpushm_create_opts_t opts;
    void *out = &out;
    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_CUDA_IPC;
    opts.mode = 0644;
    CHECK_OK(gpushm_buffer_create(conn, "dl-ipc", SIZE, &opts, &rw));
    CHECK_OK(gpushm_buffer_open(conn, "dl-ipc", GPUSHM_OPEN_READONLY, &ro));
    CHECK_ERR(gpushm_buffer_dlpack(ro, &desc, 0, &out), GPUSHM_E_PERM);
    CHECK(out == NULL && strstr(gpushm_last_error_message(), "legacy CUDA IPC") != NULL);
    CHECK_ERR(gpushm_buffer_dlpack(rw, &desc, GPUSHM_DLPACK_READ_ONLY, &out), GPUSHM_E_PERM);
    CHECK_OK(gpushm_buffer_dlpack(rw, &desc, 0, &out)); /* read-write: as before */
    ((gpushm_dlpack_managed_versioned_t *)out)->deleter(out);
    CHECK_OK(gpushm_buffer_close(ro));
    CHECK_OK(gpushm_buffer_close_unlink(rw));
  }
  for (int map = 0; map < 2; map++) {
    gpushm_create_opts_t opts;
    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_CUDA_FD;
    opts.device = 0;
    opts.flags = GPUSHM_MAP_DEVICE(map);
    CHECK_OK(gpushm_buffer_create(conn, map ? "dl-dev1" : "dl-dev0", SIZE, &opts, &b));
    CHECK_OK(gpushm_buffer_dlpack(b, &desc, 0, (void **)&v));
    CHECK(v->dl_tensor.device.device_type == GPUSHM_DLPACK_CUDA);
    CHECK(v->dl_tensor.device.device_id == map && gpushm_buffer_map_device(b) == map);
    CHECK(v->dl_tensor.data == gpushm_buffer_ptr(b));
    CHECK_OK(gpushm_buffer_close_unlink(b));
    CHECK(daemon_refs(conn, map ? "dl-dev1" : "dl-dev0") == 1);
    v->deleter(v);
    CHECK(find_buffer(conn, map ? "dl-dev1" : "dl-dev0") == NULL); /* unlinked and released */
  }
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

int main(void)
{
  gpushm_t *conn;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  test_ref(conn);
  test_tensor_outlives_handle(conn);
  test_read_only(conn);
  test_bad_descs(conn);
  test_fork(conn);
  test_capsules();
  gpushm_disconnect(conn);
  daemon_stop(&d);
  test_device();
  return 0;
}
