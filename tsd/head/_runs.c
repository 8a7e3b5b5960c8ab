/* A batch's runs as the head checks them, in C: tsd.head.head.python_run_bounds (the
 * specification and the fallback when this is not built; tests/head/test_run_bounds.py
 * checks both agree). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* -- a batch's runs as the head checks them ---------------------------------------------- */

/* run_bounds(runs) -> [(increasing, first offset ms, last offset ms)] per run, or None
 *   tsd.head.head.python_run_bounds (the specification) in one pass: a run is a tuple
 *   (row key, count, qualifiers, values) whose qualifiers are all 2-byte (seconds) or all
 *   4-byte (milliseconds); any other run, or an empty one, is (False, 0, 0). None when a
 *   run is not such a tuple of bytes: the caller then asks the Python version. */
static PyObject *run_bounds(PyObject *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "runs must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *run = items[i];
        if (!PyTuple_CheckExact(run) || PyTuple_GET_SIZE(run) < 3
            || !PyLong_CheckExact(PyTuple_GET_ITEM(run, 1))
            || !PyBytes_CheckExact(PyTuple_GET_ITEM(run, 2))) {
            Py_DECREF(out);
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
        Py_ssize_t count = PyLong_AsSsize_t(PyTuple_GET_ITEM(run, 1));
        if (count == -1 && PyErr_Occurred())
            goto error;
        const unsigned char *q = (const unsigned char *)PyBytes_AS_STRING(PyTuple_GET_ITEM(run, 2));
        Py_ssize_t size = PyBytes_GET_SIZE(PyTuple_GET_ITEM(run, 2));
        int width = count <= 0 ? 0 : size == 2 * count ? 2 : size == 4 * count ? 4 : 0;
        int increasing = width != 0;
        long long first = 0, last = 0;
        for (Py_ssize_t at = 0; width && at < size; at += width) {
            long long offset;
            if (width == 2) {
                offset = (long long)(((unsigned)q[at] << 8 | q[at + 1]) >> 4) * 1000;
            } else {
                uint32_t raw = (uint32_t)q[at] << 24 | (uint32_t)q[at + 1] << 16
                               | (uint32_t)q[at + 2] << 8 | q[at + 3];
                offset = (raw & 0x0FFFFFC0u) >> 6;
            }
            if (at == 0)
                first = offset;
            else if (offset <= last)
                increasing = 0;
            last = offset;
        }
        PyObject *start = PyLong_FromLongLong(first);
        PyObject *end = start == NULL ? NULL : PyLong_FromLongLong(last);
        PyObject *bounds = end == NULL ? NULL
                                       : PyTuple_Pack(3, increasing ? Py_True : Py_False,
                                                      start, end);
        Py_XDECREF(start);
        Py_XDECREF(end);
        if (bounds == NULL)
            goto error;
        PyList_SET_ITEM(out, i, bounds);
    }
    Py_DECREF(seq);
    return out;
error:
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef methods[] = {
    {"run_bounds", run_bounds, METH_O,
     "Per run of a batch: (offsets increase, first offset ms, last offset ms), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_runs", NULL, -1, methods};

PyMODINIT_FUNC PyInit__runs(void)
{
    return PyModule_Create(&module);
}
