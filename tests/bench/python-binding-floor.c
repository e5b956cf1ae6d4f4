/* SPDX-License-Identifier: MIT */
/* Row 10's floor for the Python figure: the thinnest CPython binding of the calls a
 * host hand-off makes (create, open read-only, close, close_unlink) and of NumPy's view
 * of a buffer (__array_interface__, built once per handle), with none of the package's
 * layers (specs, manifests, capsules, Buffer and Tensor objects, checks).  What Python
 * costs through it is the interpreter's share of the hand-off (the loop, the socket
 * calls, NumPy); what the package costs beyond it is the package's.  Built at run time
 * by tests/bench/python-handoff-host.py --binding floor against the libgpushm it is
 * given, where the interpreter's headers are (python3-dev); not part of the package. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <gpushm.h>

typedef struct {
  PyObject_HEAD
  gpushm_buffer_t *buf;
  PyObject *interface;
} Handle;

static PyTypeObject handle_type; /* below its methods */
static gpushm_t *conn;

static PyObject *gpushm_error(const char *what)
{
  return PyErr_Format(PyExc_OSError, "%s: %s", what, gpushm_last_error_message());
}

/* A handle of buf, its contents uint32 words; takes buf over, also on failure. */
static PyObject *handle_new(gpushm_buffer_t *buf, int readonly)
{
  Handle *h = PyObject_New(Handle, &handle_type);

  if (!h) {
    gpushm_buffer_close(buf);
    return NULL;
  }
  h->buf = buf;
  h->interface = Py_BuildValue("{s:(K),s:s,s:(K,O),s:i}", "shape",
                               (unsigned long long)(gpushm_buffer_size(buf) / 4), "typestr",
                               "<u4", "data",
                               (unsigned long long)(uintptr_t)gpushm_buffer_ptr(buf),
                               readonly ? Py_True : Py_False, "version", 3);
  if (!h->interface) {
    Py_DECREF(h);
    return NULL;
  }
  return (PyObject *)h;
}

static void handle_dealloc(Handle *h)
{
  if (h->buf)
    gpushm_buffer_close(h->buf);
  Py_XDECREF(h->interface);
  PyObject_Free(h);
}

/* Ends h's handle with end (named what in an error); the handle is gone either way. */
static PyObject *handle_end(Handle *h, int (*end)(gpushm_buffer_t *), const char *what)
{
  gpushm_buffer_t *buf = h->buf;

  h->buf = NULL;
  if (buf && end(buf) < 0)
    return gpushm_error(what);
  Py_RETURN_NONE;
}

static PyObject *handle_close(Handle *h, PyObject *unused)
{
  (void)unused;
  return handle_end(h, gpushm_buffer_close, "close");
}

static PyObject *handle_close_unlink(Handle *h, PyObject *unused)
{
  (void)unused;
  return handle_end(h, gpushm_buffer_close_unlink, "close_unlink");
}

static PyObject *handle_interface(Handle *h, void *closure)
{
  (void)closure;
  if (!h->buf)
    return PyErr_Format(PyExc_ValueError, "closed");
  Py_INCREF(h->interface);
  return h->interface;
}

static PyMethodDef handle_methods[] = {
  { "close", (PyCFunction)handle_close, METH_NOARGS, NULL },
  { "close_unlink", (PyCFunction)handle_close_unlink, METH_NOARGS, NULL },
  { NULL, NULL, 0, NULL },
};

static PyGetSetDef handle_getset[] = {
  { "__array_interface__", (getter)handle_interface, NULL, NULL, NULL },
  { NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject handle_type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "python_binding_floor.Handle",
  .tp_basicsize = sizeof(Handle),
  .tp_dealloc = (destructor)handle_dealloc,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_methods = handle_methods,
  .tp_getset = handle_getset,
};

static PyObject *floor_connect(PyObject *self, PyObject *unused)
{
  (void)self;
  (void)unused;
  if (!conn && gpushm_connect(NULL, "python-binding-floor", &conn) < 0)
    return gpushm_error("connect");
  Py_RETURN_NONE;
}

static PyObject *floor_create(PyObject *self, PyObject *args)
{
  const char *name;
  unsigned long long bytes;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *buf;

  (void)self;
  if (!PyArg_ParseTuple(args, "sK", &name, &bytes))
    return NULL;
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST;
  if (gpushm_buffer_create(conn, name, bytes, &opts, &buf) < 0)
    return gpushm_error("create");
  return handle_new(buf, 0);
}

static PyObject *floor_open(PyObject *self, PyObject *args)
{
  const char *name;
  gpushm_buffer_t *buf;

  (void)self;
  if (!PyArg_ParseTuple(args, "s", &name))
    return NULL;
  if (gpushm_buffer_open(conn, name, GPUSHM_OPEN_READONLY, &buf) < 0)
    return gpushm_error("open");
  return handle_new(buf, 1);
}

static PyMethodDef floor_methods[] = {
  { "connect", floor_connect, METH_NOARGS, NULL },
  { "create", floor_create, METH_VARARGS, NULL },
  { "open", floor_open, METH_VARARGS, NULL },
  { NULL, NULL, 0, NULL },
};

static struct PyModuleDef floor_module = {
  PyModuleDef_HEAD_INIT, "python_binding_floor", NULL, -1, floor_methods,
  NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_python_binding_floor(void)
{
  if (PyType_Ready(&handle_type) < 0)
    return NULL;
  return PyModule_Create(&floor_module);
}
