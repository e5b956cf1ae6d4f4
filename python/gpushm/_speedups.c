/* SPDX-License-Identifier: MIT */
/* gpushm._speedups: the hand-off's hot calls (open, create, close, close_unlink, a host
 * view, a DLPack export) in C, for the package's classes to call instead of ctypes, and
 * on their common path the Buffer and Tensor objects gpushm.open() and gpushm.empty()
 * return, built here without a Python frame between the call and its result.
 * Optional: the package works without it (the ctypes path), and uses it where its build
 * backend could compile it (a C compiler and Python's headers; docs/python.md).
 *
 * It links no libgpushm: bind() hands it the addresses of the functions in the very
 * library ctypes loaded ($GPUSHM_LIBRARY or libgpushm.so.1), so that one process never
 * holds two copies of the library's state.  gpushm.h is the prototypes' and structs'
 * source, so a signature that changed fails to compile here, not at run time.
 *
 * Everything a caller passes is checked as the ctypes path checks it: pointers are the
 * package's own (handles it holds), and views are bounded by what the live C handle says
 * (its size, its read-only flag), never by what Python objects say. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <gpushm.h>
#include <gpushm-dlpack.h>

#include <stdint.h>
#include <string.h>

static struct {
  __typeof__(gpushm_buffer_open) *open;
  __typeof__(gpushm_buffer_create) *create;
  __typeof__(gpushm_buffer_close) *close;
  __typeof__(gpushm_buffer_close_unlink) *close_unlink;
  __typeof__(gpushm_buffer_describe) *describe;
  __typeof__(gpushm_buffer_ref) *ref;
  __typeof__(gpushm_buffer_dlpack) *dlpack;
  __typeof__(gpushm_buffer_sync_method) *sync_method;
  __typeof__(gpushm_capsule_destructor) *destructor;
  __typeof__(gpushm_buffer_open_start) *open_start;
  __typeof__(gpushm_buffer_create_start) *create_start;
  __typeof__(gpushm_pending_finish) *pending_finish;
  const char *buffer_capsule, *connection_capsule, *dltensor_capsule,
    *dltensor_versioned_capsule;
} lib;

/* The names bind() takes, and where each goes. */
static const struct binding {
  const char *name;
  void **slot;
} bindings[] = {
  { "gpushm_buffer_open", (void **)&lib.open },
  { "gpushm_buffer_create", (void **)&lib.create },
  { "gpushm_buffer_close", (void **)&lib.close },
  { "gpushm_buffer_close_unlink", (void **)&lib.close_unlink },
  { "gpushm_buffer_describe", (void **)&lib.describe },
  { "gpushm_buffer_ref", (void **)&lib.ref },
  { "gpushm_buffer_dlpack", (void **)&lib.dlpack },
  { "gpushm_buffer_sync_method", (void **)&lib.sync_method },
  { "gpushm_capsule_destructor", (void **)&lib.destructor },
  { "gpushm_buffer_open_start", (void **)&lib.open_start },
  { "gpushm_buffer_create_start", (void **)&lib.create_start },
  { "gpushm_pending_finish", (void **)&lib.pending_finish },
  { "capsule_buffer", (void **)&lib.buffer_capsule },
  { "capsule_connection", (void **)&lib.connection_capsule },
  { "capsule_dltensor", (void **)&lib.dltensor_capsule },
  { "capsule_dltensor_versioned", (void **)&lib.dltensor_versioned_capsule },
};
#define BINDINGS (sizeof bindings / sizeof bindings[0])

#if PY_VERSION_HEX < 0x030A0000 /* (Python 3.8 and 3.9) */
static inline PyObject *Py_NewRef(PyObject *o)
{
  Py_INCREF(o);
  return o;
}
#endif
#if PY_VERSION_HEX < 0x03090000
static inline PyObject *PyObject_CallOneArg(PyObject *f, PyObject *arg)
{
  return PyObject_CallFunctionObjArgs(f, arg, NULL);
}
#endif

static int bound;
static PyObject *empty_args; /* () for tp_new */

/* bind({name: address}): every entry of bindings[], non-zero, or ValueError. */
static PyObject *sp_bind(PyObject *self, PyObject *table)
{
  void *found[BINDINGS];

  (void)self;
  if (!PyDict_Check(table))
    return PyErr_Format(PyExc_TypeError, "bind() takes a dict of addresses");
  for (size_t i = 0; i < BINDINGS; i++) {
    PyObject *v = PyDict_GetItemString(table, bindings[i].name);

    if (!v)
      return PyErr_Format(PyExc_ValueError, "bind(): no address for %s", bindings[i].name);
    found[i] = PyLong_AsVoidPtr(v);
    if (!found[i])
      return PyErr_Occurred() ? NULL
                              : PyErr_Format(PyExc_ValueError, "bind(): %s is NULL",
                                             bindings[i].name);
  }
  for (size_t i = 0; i < BINDINGS; i++)
    *bindings[i].slot = found[i];
  bound = 1;
  Py_RETURN_NONE;
}

static int need_bound(void)
{
  if (bound)
    return 0;
  PyErr_SetString(PyExc_RuntimeError, "gpushm._speedups is not bound to a libgpushm");
  return -1;
}

static int arg_pointer(PyObject *arg, void **out, const char *what)
{
  *out = PyLong_AsVoidPtr(arg);
  if (!*out) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_ValueError, "%s is NULL", what);
    return -1;
  }
  return 0;
}

static int arg_u64(PyObject *arg, uint64_t *out)
{
  unsigned long long v = PyLong_AsUnsignedLongLong(arg);

  if (v == (unsigned long long)-1 && PyErr_Occurred())
    return -1;
  *out = v;
  return 0;
}

/* A capsule that owns buf (libgpushm's destructor closes it), as gpushm._capsule.own()
 * makes; buf is closed if it cannot be made. */
static PyObject *own(gpushm_buffer_t *buf)
{
  PyObject *cap = PyCapsule_New(buf, lib.buffer_capsule, (PyCapsule_Destructor)lib.destructor);

  if (!cap)
    lib.close(buf);
  return cap;
}

/* (pointer, capsule, name, id, bytes, backend, device, map_device, read_only, owner uid,
 * owner gid, metadata, data pointer, kind) of a handle just made; it is closed on error. */
static PyObject *described(gpushm_buffer_t *buf)
{
  gpushm_buffer_desc_t d = { .size = sizeof d };
  PyObject *cap, *out;

  if (lib.describe(buf, &d) < 0) {
    lib.close(buf);
    return PyErr_Format(PyExc_RuntimeError, "gpushm_buffer_describe failed on a handle "
                        "just made");
  }
  if (!(cap = own(buf)))
    return NULL;
  out = Py_BuildValue("(NOsKKIiiOIIy#NI)", PyLong_FromVoidPtr(buf), cap,
                      d.name ? d.name : "", (unsigned long long)d.id,
                      (unsigned long long)d.bytes, d.backend, d.device, d.map_device,
                      d.read_only ? Py_True : Py_False, d.owner_uid, d.owner_gid,
                      (const char *)(d.metadata ? d.metadata : ""),
                      (Py_ssize_t)(d.metadata ? d.metadata_size : 0),
                      PyLong_FromVoidPtr(d.ptr), d.kind);
  Py_DECREF(cap); /* (the tuple holds it, or it is gone with the handle) */
  return out;
}

/* open(conn, name, flags): described() of the open, or libgpushm's negative code (its
 * error text is the thread's, for the caller's usual check()). */
static PyObject *sp_open(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  gpushm_buffer_t *buf = NULL;
  void *conn;
  const char *name;
  unsigned long flags;
  int r;

  (void)self;
  if (nargs != 3)
    return PyErr_Format(PyExc_TypeError, "open(conn, name, flags)");
  if (need_bound() < 0 || arg_pointer(args[0], &conn, "conn") < 0 ||
      !(name = PyBytes_AsString(args[1])))
    return NULL;
  flags = PyLong_AsUnsignedLong(args[2]);
  if (flags == (unsigned long)-1 && PyErr_Occurred())
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  r = lib.open(conn, name, (uint32_t)flags, &buf);
  Py_END_ALLOW_THREADS
  if (r < 0)
    return PyLong_FromLong(r);
  return described(buf);
}

/* create(conn, name, size, opts): as open(); opts the address of a gpushm_create_opts_t
 * the caller keeps alive (the package's cached ctypes structure), or 0. */
static PyObject *sp_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  gpushm_buffer_t *buf = NULL;
  void *conn, *opts;
  const char *name;
  uint64_t size;
  int r;

  (void)self;
  if (nargs != 4)
    return PyErr_Format(PyExc_TypeError, "create(conn, name, size, opts)");
  if (need_bound() < 0 || arg_pointer(args[0], &conn, "conn") < 0 ||
      !(name = PyBytes_AsString(args[1])) || arg_u64(args[2], &size) < 0)
    return NULL;
  opts = PyLong_AsVoidPtr(args[3]);
  if (!opts && PyErr_Occurred())
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  r = lib.create(conn, name, size, opts, &buf);
  Py_END_ALLOW_THREADS
  if (r < 0)
    return PyLong_FromLong(r);
  return described(buf);
}

/* end(capsule, pointer, how): the capsule disarmed (its destructor closes nothing), then
 * the handle closed (or closed and unlinked) without the GIL; the C call's result.  The
 * caller knows the capsule still owns pointer (a handle's own, never handed out). */
static PyObject *end(PyObject *const *args, Py_ssize_t nargs, int (*how)(gpushm_buffer_t *))
{
  void *buf;
  int r;

  if (nargs != 2)
    return PyErr_Format(PyExc_TypeError, "takes (capsule, pointer)");
  if (need_bound() < 0 || arg_pointer(args[1], &buf, "pointer") < 0)
    return NULL;
  if (PyCapsule_GetPointer(args[0], lib.buffer_capsule) != buf)
    return PyErr_Occurred() ? NULL
                            : PyErr_Format(PyExc_ValueError, "the capsule owns another handle");
  if (PyCapsule_SetName(args[0], NULL) != 0)
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  r = how(buf);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(r);
}

static PyObject *sp_close(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  (void)self;
  return end(args, nargs, lib.close);
}

static PyObject *sp_close_unlink(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  (void)self;
  return end(args, nargs, lib.close_unlink);
}

/* A span of a buffer's host mapping exported through the buffer protocol, holding an
 * open of its own (a capsule: freeing it closes the open) and what else must live as
 * long (a weight set's generation). */
typedef struct {
  PyObject_HEAD
  PyObject *open;
  PyObject *keep;
  void *ptr;
  Py_ssize_t len;
  int readonly;
} View;

static int view_getbuffer(PyObject *self, Py_buffer *b, int flags)
{
  View *v = (View *)self;

  return PyBuffer_FillInfo(b, self, v->ptr, v->len, v->readonly, flags);
}

static void view_dealloc(PyObject *self)
{
  View *v = (View *)self;

  Py_XDECREF(v->open);
  Py_XDECREF(v->keep);
  PyObject_Free(self);
}

static PyBufferProcs view_as_buffer = { .bf_getbuffer = view_getbuffer };

static PyTypeObject view_type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "gpushm._speedups.HostView",
  .tp_basicsize = sizeof(View),
  .tp_dealloc = view_dealloc,
  .tp_as_buffer = &view_as_buffer,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "Bytes of a gpushm buffer's host mapping, holding an open of the buffer.",
};

/* A memoryview of bytes [first, first + length) of buf's host mapping (d: its
 * description, the span checked against it), holding an open of its own and keep (None
 * or what must outlive it); or libgpushm's negative code. */
static PyObject *view_of(gpushm_buffer_t *buf, const gpushm_buffer_desc_t *d, uint64_t first,
                         uint64_t length, PyObject *keep)
{
  PyObject *mv;
  View *v;
  int r;

  if ((r = lib.ref(buf)) < 0)
    return PyLong_FromLong(r);
  if (!(v = PyObject_New(View, &view_type))) {
    lib.close(buf);
    return NULL;
  }
  v->keep = NULL;
  v->ptr = (char *)d->ptr + first;
  v->len = (Py_ssize_t)length;
  v->readonly = d->read_only != 0;
  if (!(v->open = own(buf))) {
    Py_DECREF(v);
    return NULL;
  }
  if (keep != Py_None)
    v->keep = Py_NewRef(keep);
  mv = PyMemoryView_FromObject((PyObject *)v);
  Py_DECREF(v);
  return mv;
}

/* host_view(pointer, first, length, keep): a memoryview of bytes [first, first + length)
 * of the buffer's host mapping, read-only where the handle is, holding an open of its own
 * and keep (None or what must outlive it); ValueError past the buffer's end. */
static PyObject *sp_host_view(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  gpushm_buffer_desc_t d = { .size = sizeof d };
  void *buf;
  uint64_t first, length;

  (void)self;
  if (nargs != 4)
    return PyErr_Format(PyExc_TypeError, "host_view(pointer, first, length, keep)");
  if (need_bound() < 0 || arg_pointer(args[0], &buf, "pointer") < 0 ||
      arg_u64(args[1], &first) < 0 || arg_u64(args[2], &length) < 0)
    return NULL;
  if (lib.describe(buf, &d) < 0)
    return PyErr_Format(PyExc_RuntimeError, "gpushm_buffer_describe failed");
  if (d.backend != GPUSHM_BACKEND_HOST || !d.ptr)
    return PyErr_Format(PyExc_ValueError, "not host memory mapped here");
  if (first > d.bytes || length > d.bytes - first || length > PY_SSIZE_T_MAX)
    return PyErr_Format(PyExc_ValueError, "bytes [%llu, +%llu) lie past the buffer's %llu",
                        (unsigned long long)first, (unsigned long long)length,
                        (unsigned long long)d.bytes);
  return view_of(buf, &d, first, length, args[3]);
}

/* dlpack(pointer, desc, flags): a DLPack capsule (versioned unless flags has
 * GPUSHM_DLPACK_LEGACY) of the tensor desc describes (the address of a
 * gpushm_tensor_desc_t the caller keeps alive), or libgpushm's negative code. */
static PyObject *sp_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  void *buf, *desc, *out = NULL;
  unsigned long flags;
  PyObject *cap;
  int r;

  (void)self;
  if (nargs != 3)
    return PyErr_Format(PyExc_TypeError, "dlpack(pointer, desc, flags)");
  if (need_bound() < 0 || arg_pointer(args[0], &buf, "pointer") < 0 ||
      arg_pointer(args[1], &desc, "desc") < 0)
    return NULL;
  flags = PyLong_AsUnsignedLong(args[2]);
  if (flags == (unsigned long)-1 && PyErr_Occurred())
    return NULL;
  if ((r = lib.dlpack(buf, desc, (uint32_t)flags, &out)) < 0)
    return PyLong_FromLong(r);
  if (!out)
    return PyErr_Format(PyExc_RuntimeError, "gpushm_buffer_dlpack returned no tensor");
  if (flags & GPUSHM_DLPACK_LEGACY) {
    gpushm_dlpack_managed_t *m = out;

    if (!(cap = PyCapsule_New(m, lib.dltensor_capsule, (PyCapsule_Destructor)lib.destructor)))
      m->deleter(m);
  } else {
    gpushm_dlpack_managed_versioned_t *m = out;

    if (!(cap = PyCapsule_New(m, lib.dltensor_versioned_capsule,
                              (PyCapsule_Destructor)lib.destructor)))
      m->deleter(m);
  }
  return cap;
}

/* ---- whole calls of the public API: gpushm.open() and gpushm.empty() -------------------
 * What core.py's Buffer._described() and Tensor() make, made here without a Python frame
 * between the call and its result: the package's classes and its manifest decoder are
 * bound by bind_classes().  Anything off the common path (a closed or inherited
 * connection, a name with a NUL, an image, a buffer without exactly one tensor in its
 * manifest) goes back to the Python path, which says what is wrong as it always has. */

static struct {
  PyObject *buffer, *tensor; /* gpushm.core.Buffer, Tensor */
  PyObject *decode;          /* gpushm.manifest._decode(metadata, size) -> specs */
  PyObject *core;            /* gpushm.core's namespace: _PID, BACKEND_NAMES */
  PyObject *capsule_kind;    /* CAPSULE_BUFFER, as Buffer._kind says it */
  PyObject *array_interface; /* Tensor's own __array_interface__ getter (the Python path) */
} py;

/* Interned attribute names, in the order of the values described_buffer() sets. */
enum {
  A_PTR, A_CAP, A_NAME, A_ID, A_SIZE, A_BACKEND, A_DEVICE, A_MAP_DEVICE, A_READONLY, A_OWNER,
  A_METADATA, A_DATA, A_PID, A_KIND, A_CONNECTION, A_IMAGE, A_SYNC, A_ACQUIRED_STREAM,
  A_ACQUIRED, A_KEEP, A_BUFFER, A_SPEC, A_VIEW_OPEN, A_TEMPLATE, A_COUNT
};
static const char *const attr_names[A_COUNT] = {
  "_ptr", "_cap", "_name", "_id", "_size", "_backend", "_device", "_map_device", "_readonly",
  "_owner", "_metadata", "_data", "_pid", "_kind", "_connection", "_image", "_sync",
  "_acquired_stream", "_acquired", "_keep", "_buffer", "_spec", "_view_open",
  "_array_template",
};
static PyObject *attr[A_COUNT];

/* bind_classes(Buffer, Tensor, decode, core namespace, CAPSULE_BUFFER, the Python
 * __array_interface__ getter) */
static PyObject *sp_bind_classes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  (void)self;
  if (nargs != 6 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyDict_Check(args[3]))
    return PyErr_Format(PyExc_TypeError, "bind_classes(Buffer, Tensor, decode, core "
                        "namespace, kind, array interface)");
  for (int i = 0; i < A_COUNT; i++)
    if (!attr[i] && !(attr[i] = PyUnicode_InternFromString(attr_names[i])))
      return NULL;
  Py_XSETREF(py.buffer, Py_NewRef(args[0]));
  Py_XSETREF(py.tensor, Py_NewRef(args[1]));
  Py_XSETREF(py.decode, Py_NewRef(args[2]));
  Py_XSETREF(py.core, Py_NewRef(args[3]));
  Py_XSETREF(py.capsule_kind, Py_NewRef(args[4]));
  Py_XSETREF(py.array_interface, Py_NewRef(args[5]));
  Py_RETURN_NONE;
}

/* An instance of cls with no __init__ run, and the attributes in names/values set. */
static PyObject *instance(PyObject *cls, const int *names, PyObject *const *values, int n)
{
  PyObject *obj = ((PyTypeObject *)cls)->tp_new((PyTypeObject *)cls, empty_args, NULL);

  for (int i = 0; obj && i < n; i++)
    if (PyObject_SetAttr(obj, attr[names[i]], values[i]) < 0)
      Py_CLEAR(obj);
  return obj;
}

/* A Buffer of a handle just opened or created through connection, as
 * Buffer._described() makes it; the handle is closed on error. */
static PyObject *described_buffer(gpushm_buffer_t *buf, PyObject *connection, PyObject *pid,
                                  gpushm_buffer_desc_t *described)
{
  static const int names[] = {
    A_PTR, A_CAP, A_NAME, A_ID, A_SIZE, A_BACKEND, A_DEVICE, A_MAP_DEVICE, A_READONLY, A_OWNER,
    A_METADATA, A_DATA, A_PID, A_KIND, A_CONNECTION, A_IMAGE, A_SYNC, A_ACQUIRED_STREAM,
    A_ACQUIRED, A_KEEP,
  };
  gpushm_buffer_desc_t d = { .size = sizeof d };
  PyObject *v[sizeof names / sizeof names[0]] = { NULL }, *backends, *obj = NULL;
  const int n = (int)(sizeof names / sizeof names[0]);

  if (lib.describe(buf, &d) < 0) {
    lib.close(buf);
    return PyErr_Format(PyExc_RuntimeError, "gpushm_buffer_describe failed on a handle "
                        "just made");
  }
  if (!(v[1] = own(buf)))
    return NULL;
  /* from here the capsule owns the handle: dropping it closes the handle */
  if (described)
    *described = d;
  backends = PyDict_GetItemString(py.core, "BACKEND_NAMES");
  {
    PyObject *key = PyLong_FromUnsignedLong(d.backend);
    PyObject *found = key && backends ? PyDict_GetItemWithError(backends, key) : NULL;

    Py_XDECREF(key);
    v[5] = found ? Py_NewRef(found)
                 : PyErr_Occurred() ? NULL : PyUnicode_InternFromString("host");
  }
  v[0] = PyLong_FromVoidPtr(buf);
  v[2] = PyUnicode_DecodeUTF8(d.name ? d.name : "", d.name ? (Py_ssize_t)strlen(d.name) : 0,
                              "replace");
  v[3] = PyLong_FromUnsignedLongLong(d.id);
  v[4] = PyLong_FromUnsignedLongLong(d.bytes);
  v[6] = PyLong_FromLong(d.device);
  v[7] = PyLong_FromLong(d.map_device);
  v[8] = Py_NewRef(d.read_only ? Py_True : Py_False);
  v[9] = Py_BuildValue("(II)", d.owner_uid, d.owner_gid);
  v[10] = PyBytes_FromStringAndSize(d.metadata ? d.metadata : "",
                                    d.metadata ? (Py_ssize_t)d.metadata_size : 0);
  v[11] = PyLong_FromVoidPtr(d.ptr);
  v[12] = Py_NewRef(pid);
  v[13] = Py_NewRef(py.capsule_kind);
  v[14] = Py_NewRef(connection);
  if (d.kind == GPUSHM_KIND_IMAGE) { /* (what it is: core._image_info(), as _described()) */
    PyObject *info = PyDict_GetItemString(py.core, "_image_info");

    if (!info)
      PyErr_SetString(PyExc_RuntimeError, "gpushm.core has no _image_info");
    v[15] = info && v[0] && !PyErr_Occurred() ? PyObject_CallOneArg(info, v[0]) : NULL;
  } else {
    v[15] = Py_NewRef(Py_None);
  }
  v[16] = Py_NewRef(Py_None);
  v[17] = Py_NewRef(Py_None);
  v[18] = Py_NewRef(Py_False);
  v[19] = Py_NewRef(Py_None);
  for (int i = 0; i < n; i++)
    if (!v[i])
      goto out;
  obj = instance(py.buffer, names, v, n);
out:
  for (int i = 0; i < n; i++)
    Py_XDECREF(v[i]);
  return obj;
}

/* Closes buffer's open (buf) without the GIL, as Buffer.close() does where nobody else
 * holds its capsule, keeping the exception being raised. */
static void close_now(PyObject *buffer, gpushm_buffer_t *buf)
{
  PyObject *type, *value, *tb, *cap;

  PyErr_Fetch(&type, &value, &tb);
  cap = PyObject_GetAttr(buffer, attr[A_CAP]);
  if (cap && PyCapsule_GetPointer(cap, lib.buffer_capsule) == buf &&
      PyCapsule_SetName(cap, NULL) == 0) {
    PyObject_SetAttr(buffer, attr[A_CAP], Py_None); /* (closed: the handle says so) */
    Py_BEGIN_ALLOW_THREADS
    lib.close(buf);
    Py_END_ALLOW_THREADS
  }
  Py_XDECREF(cap);
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

/* A Tensor of buffer with spec (Tensor.__init__'s check of spec against the buffer is
 * the decoder's, which had its size). */
static PyObject *tensor_of(PyObject *buffer, PyObject *spec)
{
  static const int names[] = { A_BUFFER, A_SPEC, A_VIEW_OPEN };
  PyObject *const v[] = { buffer, spec, Py_None };

  return instance(py.tensor, names, v, 3);
}

/* The Tensor of an open's buffer (buf, described by d) whose manifest names one
 * tensor; else the Buffer (the Python path goes on from it).  Takes buffer. */
static PyObject *tensor_of_manifest(PyObject *buffer, gpushm_buffer_t *buf,
                                    const gpushm_buffer_desc_t *d)
{
  PyObject *specs, *out;

  if (d->kind == GPUSHM_KIND_IMAGE || !d->metadata || !d->metadata_size)
    return buffer; /* (images and bytes: the Python path) */
  {
    PyObject *meta = PyObject_GetAttr(buffer, attr[A_METADATA]);
    PyObject *size = meta ? PyObject_GetAttr(buffer, attr[A_SIZE]) : NULL;

    specs = size ? PyObject_CallFunctionObjArgs(py.decode, meta, size, NULL) : NULL;
    Py_XDECREF(meta);
    Py_XDECREF(size);
  }
  if (!specs) {
    close_now(buffer, buf); /* as the Python path's buf.close(): without the GIL */
    Py_DECREF(buffer);
    return NULL;
  }
  if (!PyTuple_Check(specs) || PyTuple_GET_SIZE(specs) != 1) {
    Py_DECREF(specs);
    return buffer; /* (a bundle: the Python path says what to do) */
  }
  out = tensor_of(buffer, PyTuple_GET_ITEM(specs, 0));
  Py_DECREF(specs);
  Py_DECREF(buffer);
  return out;
}

/* The connection's handle, where it may be used here and now (open, and this process's:
 * Connection._live()'s conditions); NULL without an error where not. *cap: the capsule,
 * held while its handle is used (a close() elsewhere then leaves the closing to it). */
static void *live_connection(PyObject *conn, PyObject **cap, PyObject **pid)
{
  PyObject *theirs = NULL, *ptr = NULL;
  void *out = NULL;

  *cap = *pid = NULL;
  if ((*pid = PyDict_GetItemString(py.core, "_PID")))
    Py_INCREF(*pid); /* (the caller's, as *cap is) */
  if (!*pid || !(*cap = PyObject_GetAttr(conn, attr[A_CAP])) || *cap == Py_None ||
      !(theirs = PyObject_GetAttr(conn, attr[A_PID])) ||
      PyObject_RichCompareBool(theirs, *pid, Py_EQ) != 1 ||
      !(ptr = PyObject_GetAttr(conn, attr[A_PTR])))
    goto out;
  out = PyLong_AsVoidPtr(ptr);
  /* a connection's handle, owned by that capsule (not another kind of handle) */
  if (out && PyCapsule_GetPointer(*cap, lib.connection_capsule) != out)
    out = NULL;
out:
  Py_XDECREF(theirs);
  Py_XDECREF(ptr);
  if (!out) {
    Py_CLEAR(*cap);
    Py_CLEAR(*pid);
    PyErr_Clear();
  }
  return out;
}

/* A name as libgpushm takes it, or NULL without an error (a NUL in it: the Python
 * path refuses it with its message). */
static const char *c_name(PyObject *name)
{
  Py_ssize_t n;
  /* (exactly a str: a subclass is whatever str() makes of it, on the Python path) */
  const char *s = PyUnicode_CheckExact(name) ? PyUnicode_AsUTF8AndSize(name, &n) : NULL;

  if (!s || strlen(s) != (size_t)n) {
    PyErr_Clear();
    return NULL;
  }
  return s;
}

/* open_tensor(connection, name, flags): gpushm.open(name)'s Tensor where the buffer's
 * manifest names one tensor; else the Buffer (the Python path goes on from it), a
 * negative libgpushm code, or NotImplemented (the Python path from the start). */
static PyObject *sp_open_tensor(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  gpushm_buffer_desc_t d = { .size = sizeof d };
  gpushm_buffer_t *buf = NULL;
  PyObject *cap, *pid, *buffer;
  const char *name;
  unsigned long flags;
  void *conn;
  int r;

  (void)self;
  if (nargs != 3)
    return PyErr_Format(PyExc_TypeError, "open_tensor(connection, name, flags)");
  if (need_bound() < 0 || !py.buffer)
    return PyErr_Format(PyExc_RuntimeError, "gpushm._speedups: bind_classes() first");
  flags = PyLong_AsUnsignedLong(args[2]);
  if (flags == (unsigned long)-1 && PyErr_Occurred())
    return NULL;
  if (!(name = c_name(args[1])) || !(conn = live_connection(args[0], &cap, &pid)))
    Py_RETURN_NOTIMPLEMENTED;
  Py_BEGIN_ALLOW_THREADS
  r = lib.open(conn, name, (uint32_t)flags, &buf);
  Py_END_ALLOW_THREADS
  if (r < 0) {
    Py_DECREF(cap);
    Py_DECREF(pid);
    return PyLong_FromLong(r);
  }
  buffer = described_buffer(buf, args[0], pid, &d);
  Py_DECREF(cap);
  Py_DECREF(pid);
  return buffer ? tensor_of_manifest(buffer, buf, &d) : NULL;
}

/* create_tensor(connection, name, plan): gpushm.empty()'s Tensor, plan its (size, the
 * address of the create options, the spec, the options object that keeps the address
 * valid), the spec already checked to fit the size; else a negative libgpushm code, or
 * NotImplemented. */
static PyObject *sp_create_tensor(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  gpushm_buffer_t *buf = NULL;
  PyObject *cap, *pid, *buffer, *out;
  const char *name;
  uint64_t size;
  void *conn, *opts;
  int r;

  (void)self;
  if (nargs != 3 || !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) != 4)
    return PyErr_Format(PyExc_TypeError, "create_tensor(connection, name, plan)");
  if (need_bound() < 0 || !py.buffer)
    return PyErr_Format(PyExc_RuntimeError, "gpushm._speedups: bind_classes() first");
  if (arg_u64(PyTuple_GET_ITEM(args[2], 0), &size) < 0 ||
      arg_pointer(PyTuple_GET_ITEM(args[2], 1), &opts, "opts") < 0)
    return NULL;
  if (!(name = c_name(args[1])) || !(conn = live_connection(args[0], &cap, &pid)))
    Py_RETURN_NOTIMPLEMENTED;
  Py_BEGIN_ALLOW_THREADS
  r = lib.create(conn, name, size, opts, &buf);
  Py_END_ALLOW_THREADS
  if (r < 0) {
    Py_DECREF(cap);
    Py_DECREF(pid);
    return PyLong_FromLong(r);
  }
  buffer = described_buffer(buf, args[0], pid, NULL);
  Py_DECREF(cap);
  Py_DECREF(pid);
  if (!buffer)
    return NULL;
  out = tensor_of(buffer, PyTuple_GET_ITEM(args[2], 2));
  Py_DECREF(buffer);
  return out;
}

/* open_start(connection, name, flags): gpushm_buffer_open_start()'s pending (its
 * address), a negative libgpushm code, or NotImplemented (the Python path). */
static PyObject *sp_open_start(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  gpushm_pending_t *pending = NULL;
  PyObject *cap, *pid;
  const char *name;
  unsigned long flags;
  void *conn;
  int r;

  (void)self;
  if (nargs != 3)
    return PyErr_Format(PyExc_TypeError, "open_start(connection, name, flags)");
  if (need_bound() < 0 || !py.buffer)
    return PyErr_Format(PyExc_RuntimeError, "gpushm._speedups: bind_classes() first");
  flags = PyLong_AsUnsignedLong(args[2]);
  if (flags == (unsigned long)-1 && PyErr_Occurred())
    return NULL;
  if (!(name = c_name(args[1])) || !(conn = live_connection(args[0], &cap, &pid)))
    Py_RETURN_NOTIMPLEMENTED;
  /* (it waits for no reply, but may for the connection, another thread's call on it) */
  Py_BEGIN_ALLOW_THREADS
  r = lib.open_start(conn, name, (uint32_t)flags, &pending);
  Py_END_ALLOW_THREADS
  Py_DECREF(cap);
  Py_DECREF(pid);
  return r < 0 ? PyLong_FromLong(r) : PyLong_FromVoidPtr(pending);
}

/* create_start(connection, name, plan): gpushm_buffer_create_start() as create_tensor()
 * creates; the pending's address, a negative libgpushm code, or NotImplemented. */
static PyObject *sp_create_start(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  gpushm_pending_t *pending = NULL;
  PyObject *cap, *pid;
  const char *name;
  uint64_t size;
  void *conn, *opts;
  int r;

  (void)self;
  if (nargs != 3 || !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) != 4)
    return PyErr_Format(PyExc_TypeError, "create_start(connection, name, plan)");
  if (need_bound() < 0 || !py.buffer)
    return PyErr_Format(PyExc_RuntimeError, "gpushm._speedups: bind_classes() first");
  if (arg_u64(PyTuple_GET_ITEM(args[2], 0), &size) < 0 ||
      arg_pointer(PyTuple_GET_ITEM(args[2], 1), &opts, "opts") < 0)
    return NULL;
  if (!(name = c_name(args[1])) || !(conn = live_connection(args[0], &cap, &pid)))
    Py_RETURN_NOTIMPLEMENTED;
  Py_BEGIN_ALLOW_THREADS
  r = lib.create_start(conn, name, size, opts, &pending);
  Py_END_ALLOW_THREADS
  Py_DECREF(cap);
  Py_DECREF(pid);
  return r < 0 ? PyLong_FromLong(r) : PyLong_FromVoidPtr(pending);
}

/* finish(connection, pending, how): gpushm_pending_finish() without the GIL, and of the
 * handle: the Buffer (how None), the Tensor of that spec (how a spec: a create's), or
 * open_tensor()'s answer (how True: the Tensor, or the Buffer for the Python path); a
 * negative libgpushm code where it failed.  pending is freed whatever the outcome. */
static PyObject *sp_finish(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  gpushm_buffer_desc_t d = { .size = sizeof d };
  gpushm_buffer_t *buf = NULL;
  PyObject *buffer, *pid, *out;
  void *pending;
  int r;

  (void)self;
  if (nargs != 3)
    return PyErr_Format(PyExc_TypeError, "finish(connection, pending, how)");
  if (need_bound() < 0 || !py.buffer)
    return PyErr_Format(PyExc_RuntimeError, "gpushm._speedups: bind_classes() first");
  if (arg_pointer(args[1], &pending, "pending") < 0)
    return NULL;
  if (!(pid = PyDict_GetItemString(py.core, "_PID")))
    return PyErr_Format(PyExc_RuntimeError, "gpushm.core has no _PID");
  Py_INCREF(pid);
  Py_BEGIN_ALLOW_THREADS
  r = lib.pending_finish(pending, &buf);
  Py_END_ALLOW_THREADS
  if (r < 0) {
    Py_DECREF(pid);
    return PyLong_FromLong(r);
  }
  buffer = described_buffer(buf, args[0], pid, &d);
  Py_DECREF(pid);
  if (!buffer || args[2] == Py_None)
    return buffer;
  if (args[2] == Py_True)
    return tensor_of_manifest(buffer, buf, &d);
  out = tensor_of(buffer, args[2]);
  Py_DECREF(buffer);
  return out;
}

/* array_interface(tensor): Tensor.__array_interface__ (the property's getter) of a
 * host tensor of this process's open (no sync buffer), its span checked against the live
 * C handle; anything else the Python getter answers (and says what is wrong). */
static PyObject *sp_array_interface(PyObject *self, PyObject *tensor)
{
  gpushm_buffer_desc_t d = { .size = sizeof d };
  PyObject *buffer = NULL, *cap = NULL, *theirs = NULL, *ptr = NULL, *spec = NULL;
  PyObject *tmpl = NULL, *keep = NULL, *view = NULL, *out = NULL, *pid;
  unsigned long long first, length;
  void *buf;

  (void)self;
  if (need_bound() < 0 || !py.buffer)
    return PyErr_Format(PyExc_RuntimeError, "gpushm._speedups: bind_classes() first");
  if (!(buffer = PyObject_GetAttr(tensor, attr[A_BUFFER])) ||
      !(cap = PyObject_GetAttr(buffer, attr[A_CAP])) || cap == Py_None ||
      !(theirs = PyObject_GetAttr(buffer, attr[A_PID])) ||
      !(pid = PyDict_GetItemString(py.core, "_PID")) ||
      PyObject_RichCompareBool(theirs, pid, Py_EQ) != 1 ||
      !(ptr = PyObject_GetAttr(buffer, attr[A_PTR])) || !(buf = PyLong_AsVoidPtr(ptr)) ||
      lib.describe(buf, &d) < 0 || d.backend != GPUSHM_BACKEND_HOST || !d.ptr ||
      lib.sync_method(buf, NULL) != 0 || !(spec = PyObject_GetAttr(tensor, attr[A_SPEC])) ||
      !(tmpl = PyObject_GetAttr(spec, attr[A_TEMPLATE])) || !PyTuple_Check(tmpl) ||
      PyTuple_GET_SIZE(tmpl) != 6 || !(keep = PyObject_GetAttr(buffer, attr[A_KEEP])))
    goto fallback;
  first = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(tmpl, 3));
  if (PyErr_Occurred())
    goto fallback;
  length = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(tmpl, 4));
  if (PyErr_Occurred() || first > d.bytes || length > d.bytes - first ||
      length > PY_SSIZE_T_MAX)
    goto fallback; /* (the Python path says which element lies outside) */
  if (!(view = view_of(buf, &d, first, length, keep)))
    goto out;
  if (PyLong_Check(view)) { /* libgpushm's error: the Python path raises it */
    Py_CLEAR(view);
    goto fallback;
  }
  out = Py_BuildValue("{s:i,s:O,s:O,s:O,s:O,s:O}", "version", 3, "shape",
                      PyTuple_GET_ITEM(tmpl, 0), "typestr", PyTuple_GET_ITEM(tmpl, 1), "data",
                      view, "offset", PyTuple_GET_ITEM(tmpl, 5), "strides",
                      PyTuple_GET_ITEM(tmpl, 2));
  goto out;
fallback:
  /* what the Python getter would meet again it reports; what it would not (an
   * interrupt, memory running out) goes up as it is */
  if (PyErr_Occurred() && (!PyErr_ExceptionMatches(PyExc_Exception) ||
                           PyErr_ExceptionMatches(PyExc_MemoryError)))
    goto out;
  PyErr_Clear();
  out = PyObject_CallOneArg(py.array_interface, tensor);
out:
  Py_XDECREF(buffer);
  Py_XDECREF(cap);
  Py_XDECREF(theirs);
  Py_XDECREF(ptr);
  Py_XDECREF(spec);
  Py_XDECREF(tmpl);
  Py_XDECREF(keep);
  Py_XDECREF(view);
  return out;
}

/* The handle's capsule, taken out of handle (its _cap set to None) where it is a live
 * open of this process's that nobody else holds (Buffer.close()'s and close_unlink()'s
 * conditions, on a build with the GIL); else NULL, without an error, and handle as it
 * was.  *buf: the open. */
static PyObject *take_sole_capsule(PyObject *handle, void **buf)
{
#ifdef Py_GIL_DISABLED
  (void)handle;
  (void)buf;
  return NULL; /* (references count differently there: the Python path decides) */
#else
  PyObject *cap, *theirs = NULL, *ptr = NULL, *pid;
  int ok;

  if (!(cap = PyObject_GetAttr(handle, attr[A_CAP])) || cap == Py_None)
    goto no;
  ok = (theirs = PyObject_GetAttr(handle, attr[A_PID])) &&
       (pid = PyDict_GetItemString(py.core, "_PID")) &&
       PyObject_RichCompareBool(theirs, pid, Py_EQ) == 1 &&
       (ptr = PyObject_GetAttr(handle, attr[A_PTR])) && (*buf = PyLong_AsVoidPtr(ptr)) &&
       PyCapsule_GetPointer(cap, lib.buffer_capsule) == *buf;
  Py_XDECREF(theirs);
  Py_XDECREF(ptr);
  /* ours and the attribute's: nobody else's (a view, a call on another thread) */
  if (!ok || Py_REFCNT(cap) != 2 || PyObject_SetAttr(handle, attr[A_CAP], Py_None) < 0)
    goto no;
  return cap;
no:
  Py_XDECREF(cap);
  PyErr_Clear();
  return NULL;
#endif
}

/* close_handle(buffer): Buffer.close() where the open is this process's and nobody else
 * holds its capsule: closed here, without the GIL; None.  NotImplemented otherwise (the
 * Python path: already closed, another thread's, a forked child's). */
static PyObject *sp_close_handle(PyObject *self, PyObject *handle)
{
  PyObject *cap;
  void *buf = NULL;

  (void)self;
  if (need_bound() < 0 || !py.buffer)
    return PyErr_Format(PyExc_RuntimeError, "gpushm._speedups: bind_classes() first");
  if (!(cap = take_sole_capsule(handle, &buf)))
    Py_RETURN_NOTIMPLEMENTED;
  if (PyCapsule_SetName(cap, NULL) == 0) {
    Py_BEGIN_ALLOW_THREADS
    lib.close(buf);
    Py_END_ALLOW_THREADS
  }
  Py_DECREF(cap);
  PyErr_Clear();
  Py_RETURN_NONE;
}

/* close_unlink_handle(buffer): Buffer.close_unlink() under the same conditions, as one
 * request; its result (a negative libgpushm code on error), or NotImplemented. */
static PyObject *sp_close_unlink_handle(PyObject *self, PyObject *handle)
{
  PyObject *cap;
  void *buf = NULL;
  int r;

  (void)self;
  if (need_bound() < 0 || !py.buffer)
    return PyErr_Format(PyExc_RuntimeError, "gpushm._speedups: bind_classes() first");
  if (!(cap = take_sole_capsule(handle, &buf)))
    Py_RETURN_NOTIMPLEMENTED;
  if (PyCapsule_SetName(cap, NULL) != 0) {
    Py_DECREF(cap);
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  r = lib.close_unlink(buf);
  Py_END_ALLOW_THREADS
  Py_DECREF(cap);
  return PyLong_FromLong(r);
}

static PyMethodDef methods[] = {
  { "bind", sp_bind, METH_O, "Binds to the libgpushm functions at these addresses." },
  { "open", (PyCFunction)(void (*)(void))sp_open, METH_FASTCALL, NULL },
  { "create", (PyCFunction)(void (*)(void))sp_create, METH_FASTCALL, NULL },
  { "close", (PyCFunction)(void (*)(void))sp_close, METH_FASTCALL, NULL },
  { "close_unlink", (PyCFunction)(void (*)(void))sp_close_unlink, METH_FASTCALL, NULL },
  { "host_view", (PyCFunction)(void (*)(void))sp_host_view, METH_FASTCALL, NULL },
  { "dlpack", (PyCFunction)(void (*)(void))sp_dlpack, METH_FASTCALL, NULL },
  { "bind_classes", (PyCFunction)(void (*)(void))sp_bind_classes, METH_FASTCALL, NULL },
  { "open_tensor", (PyCFunction)(void (*)(void))sp_open_tensor, METH_FASTCALL, NULL },
  { "create_tensor", (PyCFunction)(void (*)(void))sp_create_tensor, METH_FASTCALL, NULL },
  { "open_start", (PyCFunction)(void (*)(void))sp_open_start, METH_FASTCALL, NULL },
  { "create_start", (PyCFunction)(void (*)(void))sp_create_start, METH_FASTCALL, NULL },
  { "finish", (PyCFunction)(void (*)(void))sp_finish, METH_FASTCALL, NULL },
  { "array_interface", sp_array_interface, METH_O, NULL },
  { "close_handle", sp_close_handle, METH_O, NULL },
  { "close_unlink_handle", sp_close_unlink_handle, METH_O, NULL },
  { NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
  PyModuleDef_HEAD_INIT, "gpushm._speedups",
  "The hand-off's hot calls in C (optional: the package falls back to ctypes).", -1,
  methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
  if (PyType_Ready(&view_type) < 0 || !(empty_args = PyTuple_New(0)))
    return NULL;
  return PyModule_Create(&module);
}
