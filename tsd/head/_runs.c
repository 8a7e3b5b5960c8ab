/* A batch's runs as the head checks and joins them, and a snapshot's rows parted, in C:
 * tsd.head.head.python_run_bounds, python_join_repeated_rows and python_join_parts (the
 * specifications and the fallbacks when this is not built; tests/head/test_run_bounds.py
 * and tests/head/test_join_parts.py check both agree). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

/* -- a batch's repeated rows joined -------------------------------------------------------- */

/* The runs of one row joined: (key, summed count, qualifiers joined, values joined); NULL
 * with an exception set, or with none when a run is not a tuple (key, int, bytes, bytes). */
static PyObject *join_group(PyObject *group)
{
    Py_ssize_t n = PyList_GET_SIZE(group);
    long long cells = 0;
    Py_ssize_t q_size = 0, v_size = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *run = PyList_GET_ITEM(group, i);
        PyObject *q = PyTuple_GET_ITEM(run, 2), *v = PyTuple_GET_ITEM(run, 3);
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(run, 1)) || !PyBytes_CheckExact(q) ||
            !PyBytes_CheckExact(v))
            return NULL;
        long long count = PyLong_AsLongLong(PyTuple_GET_ITEM(run, 1));
        if (count == -1 && PyErr_Occurred())
            return NULL;
        cells += count;
        q_size += PyBytes_GET_SIZE(q);
        v_size += PyBytes_GET_SIZE(v);
    }
    PyObject *qs = PyBytes_FromStringAndSize(NULL, q_size);
    PyObject *vs = PyBytes_FromStringAndSize(NULL, v_size);
    PyObject *count = PyLong_FromLongLong(cells);
    PyObject *joined = NULL;
    if (qs != NULL && vs != NULL && count != NULL) {
        char *q_at = PyBytes_AS_STRING(qs), *v_at = PyBytes_AS_STRING(vs);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *run = PyList_GET_ITEM(group, i);
            PyObject *q = PyTuple_GET_ITEM(run, 2), *v = PyTuple_GET_ITEM(run, 3);
            memcpy(q_at, PyBytes_AS_STRING(q), (size_t)PyBytes_GET_SIZE(q));
            q_at += PyBytes_GET_SIZE(q);
            memcpy(v_at, PyBytes_AS_STRING(v), (size_t)PyBytes_GET_SIZE(v));
            v_at += PyBytes_GET_SIZE(v);
        }
        joined = PyTuple_Pack(4, PyTuple_GET_ITEM(PyList_GET_ITEM(group, 0), 0), count, qs, vs);
    }
    Py_XDECREF(qs);
    Py_XDECREF(vs);
    Py_XDECREF(count);
    return joined;
}

/* join_repeated_rows(runs) -> list of runs, or None
 *   tsd.head.head.python_join_repeated_rows (the specification): one run per row, the
 *   runs of a row that comes more than once joined in order, in the order rows first
 *   come. None when a run is not a tuple (row key, int, bytes, bytes): the caller then
 *   asks the Python version. */
static PyObject *join_repeated_rows(PyObject *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "runs must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    /* row key -> its run (a tuple) or, once repeated, a list of its runs; in first order */
    PyObject *by_row = PyDict_New();
    PyObject *out = NULL;
    if (by_row == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *run = items[i];
        if (!PyTuple_CheckExact(run) || PyTuple_GET_SIZE(run) != 4)
            goto python;
        PyObject *key = PyTuple_GET_ITEM(run, 0);
        PyObject *have = PyDict_GetItemWithError(by_row, key);
        if (have == NULL) {
            if (PyErr_Occurred() || PyDict_SetItem(by_row, key, run) < 0)
                goto done;
        } else if (PyList_CheckExact(have)) {
            if (PyList_Append(have, run) < 0)
                goto done;
        } else {
            PyObject *group = PyList_New(2);
            if (group == NULL)
                goto done;
            Py_INCREF(have);
            PyList_SET_ITEM(group, 0, have);
            Py_INCREF(run);
            PyList_SET_ITEM(group, 1, run);
            int failed = PyDict_SetItem(by_row, key, group);
            Py_DECREF(group);
            if (failed < 0)
                goto done;
        }
    }
    out = PyList_New(PyDict_GET_SIZE(by_row));
    if (out == NULL)
        goto done;
    Py_ssize_t pos = 0, at = 0;
    PyObject *key, *value;
    while (PyDict_Next(by_row, &pos, &key, &value)) {
        PyObject *run;
        if (PyList_CheckExact(value)) {
            run = join_group(value);
            if (run == NULL) {
                Py_CLEAR(out);
                if (PyErr_Occurred())
                    goto done;
                goto python;
            }
        } else {
            run = Py_NewRef(value);
        }
        PyList_SET_ITEM(out, at++, run);
    }
    goto done;
python:
    Py_XDECREF(out);
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(by_row);
    Py_DECREF(seq);
    return out;
}

/* -- a snapshot's rows parted into qualifiers and values --------------------------------- */

/* join_parts(bufs, q_lens, v_lens) -> (qualifiers, values) or None
 *   tsd.head.head.python_join_parts (the specification) in one pass: each row's bytes
 *   (its qualifiers, then its values) copied to the two joined strings. None when a row is
 *   not a bytearray or bytes of exactly q_lens[i] + v_lens[i] bytes, or the lengths are not
 *   as many int64s as there are rows: the caller then asks the Python version. */
static PyObject *join_parts(PyObject *self, PyObject *args)
{
    PyObject *bufs;
    Py_buffer qb, vb;
    if (!PyArg_ParseTuple(args, "O!y*y*", &PyList_Type, &bufs, &qb, &vb))
        return NULL;
    PyObject *out = NULL, *qs = NULL, *vs = NULL;
    Py_ssize_t n = PyList_GET_SIZE(bufs);
    if (qb.len != n * (Py_ssize_t)sizeof(int64_t) || vb.len != qb.len)
        goto none;
    const int64_t *ql = (const int64_t *)qb.buf, *vl = (const int64_t *)vb.buf;
    Py_ssize_t q_total = 0, v_total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyList_GET_ITEM(bufs, i);
        Py_ssize_t size;
        if (PyByteArray_CheckExact(b))
            size = PyByteArray_GET_SIZE(b);
        else if (PyBytes_CheckExact(b))
            size = PyBytes_GET_SIZE(b);
        else
            goto none;
        if (ql[i] < 0 || vl[i] < 0 || size != ql[i] + vl[i])
            goto none;
        q_total += (Py_ssize_t)ql[i];
        v_total += (Py_ssize_t)vl[i];
    }
    qs = PyBytes_FromStringAndSize(NULL, q_total);
    vs = PyBytes_FromStringAndSize(NULL, v_total);
    if (qs == NULL || vs == NULL)
        goto done;
    char *q = PyBytes_AS_STRING(qs), *v = PyBytes_AS_STRING(vs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyList_GET_ITEM(bufs, i);
        const char *at = PyByteArray_CheckExact(b) ? PyByteArray_AS_STRING(b) : PyBytes_AS_STRING(b);
        memcpy(q, at, (size_t)ql[i]);
        memcpy(v, at + ql[i], (size_t)vl[i]);
        q += ql[i];
        v += vl[i];
    }
    out = PyTuple_Pack(2, qs, vs);
    goto done;
none:
    Py_INCREF(Py_None);
    out = Py_None;
done:
    Py_XDECREF(qs);
    Py_XDECREF(vs);
    PyBuffer_Release(&qb);
    PyBuffer_Release(&vb);
    return out;
}

/* picked(items, at) -> [items[i] for i in at] or None
 *   tsd.head.head._picked (the specification) over an int64 buffer of indices: no Python
 *   int per index and no argument tuple (a 30-day panel's snapshot picks 72,000 keys and
 *   72,000 row buffers). None when an index is out of range: the caller then asks the
 *   Python version, which raises. */
static PyObject *picked(PyObject *self, PyObject *args)
{
    PyObject *items;
    Py_buffer ab;
    if (!PyArg_ParseTuple(args, "O!y*", &PyList_Type, &items, &ab))
        return NULL;
    Py_ssize_t n = ab.len / (Py_ssize_t)sizeof(int64_t), size = PyList_GET_SIZE(items);
    const int64_t *at = (const int64_t *)ab.buf;
    if (ab.len % (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(&ab);
        Py_RETURN_NONE;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (at[i] < 0 || at[i] >= size) {
            PyBuffer_Release(&ab);
            Py_RETURN_NONE;
        }
    }
    PyObject *out = PyList_New(n);
    if (out != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyList_GET_ITEM(items, (Py_ssize_t)at[i]);
            Py_INCREF(item);
            PyList_SET_ITEM(out, i, item);
        }
    }
    PyBuffer_Release(&ab);
    return out;
}

static PyMethodDef methods[] = {
    {"run_bounds", run_bounds, METH_O,
     "Per run of a batch: (offsets increase, first offset ms, last offset ms), or None."},
    {"join_repeated_rows", join_repeated_rows, METH_O,
     "A batch's runs, one per row (a repeated row's runs joined in order), or None."},
    {"join_parts", join_parts, METH_VARARGS,
     "Rows (qualifiers then values) parted: (all qualifiers, all values), or None."},
    {"picked", picked, METH_VARARGS,
     "[items[i] for i in at] (at: int64 indices), or None when one is out of range."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_runs", NULL, -1, methods};

PyMODINIT_FUNC PyInit__runs(void)
{
    return PyModule_Create(&module);
}
