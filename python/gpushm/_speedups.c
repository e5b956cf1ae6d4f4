/* SPDX-License-Identifier: MIT */
/* gpushm._speedups: the hand-off's hot calls (open, create, close, close_unlink, a host
 * view, a DLPack export) in C, for the package's classes to call instead of ctypes.
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

static struct {
  __typeof__(gpushm_buffer_open) *open;
  __typeof__(gpushm_buffer_create) *create;
  __typeof__(gpushm_buffer_close) *close;
  __typeof__(gpushm_buffer_close_unlink) *close_unlink;
  __typeof__(gpushm_buffer_describe) *describe;
  __typeof__(gpushm_buffer_ref) *ref;
  __typeof__(gpushm_buffer_dlpack) *dlpack;
  __typeof__(gpushm_capsule_destructor) *destructor;
  const char *buffer_capsule, *dltensor_capsule, *dltensor_versioned_capsule;
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
  { "gpushm_capsule_destructor", (void **)&lib.destructor },
  { "capsule_buffer", (void **)&lib.buffer_capsule },
  { "capsule_dltensor", (void **)&lib.dltensor_capsule },
  { "capsule_dltensor_versioned", (void **)&lib.dltensor_versioned_capsule },
};
#define BINDINGS (sizeof bindings / sizeof bindings[0])

static int bound;

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

/* host_view(pointer, first, length, keep): a memoryview of bytes [first, first + length)
 * of the buffer's host mapping, read-only where the handle is, holding an open of its own
 * and keep (None or what must outlive it); ValueError past the buffer's end. */
static PyObject *sp_host_view(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  gpushm_buffer_desc_t d = { .size = sizeof d };
  void *buf;
  uint64_t first, length;
  View *v;
  PyObject *mv;
  int r;

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
  if ((r = lib.ref(buf)) < 0)
    return PyLong_FromLong(r);
  if (!(v = PyObject_New(View, &view_type))) {
    lib.close(buf);
    return NULL;
  }
  v->keep = NULL;
  v->ptr = (char *)d.ptr + first;
  v->len = (Py_ssize_t)length;
  v->readonly = d.read_only != 0;
  if (!(v->open = own(buf))) {
    Py_DECREF(v);
    return NULL;
  }
  if (args[3] != Py_None) {
    Py_INCREF(args[3]);
    v->keep = args[3];
  }
  mv = PyMemoryView_FromObject((PyObject *)v);
  Py_DECREF(v);
  return mv;
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

static PyMethodDef methods[] = {
  { "bind", sp_bind, METH_O, "Binds to the libgpushm functions at these addresses." },
  { "open", (PyCFunction)(void (*)(void))sp_open, METH_FASTCALL, NULL },
  { "create", (PyCFunction)(void (*)(void))sp_create, METH_FASTCALL, NULL },
  { "close", (PyCFunction)(void (*)(void))sp_close, METH_FASTCALL, NULL },
  { "close_unlink", (PyCFunction)(void (*)(void))sp_close_unlink, METH_FASTCALL, NULL },
  { "host_view", (PyCFunction)(void (*)(void))sp_host_view, METH_FASTCALL, NULL },
  { "dlpack", (PyCFunction)(void (*)(void))sp_dlpack, METH_FASTCALL, NULL },
  { NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
  PyModuleDef_HEAD_INIT, "gpushm._speedups",
  "The hand-off's hot calls in C (optional: the package falls back to ctypes).", -1,
  methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
  if (PyType_Ready(&view_type) < 0)
    return NULL;
  return PyModule_Create(&module);
}
