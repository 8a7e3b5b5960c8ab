/* Points into a writer batch's cells, in C: tsd.codec.qualifier.encode_points_into and
 * tsd.codec.rowkey's tag suffix (their Python versions are the specification and the
 * fallback when this is not built; tests/codec/test_encode_c.py checks both agree). The
 * cell format is tsd/codec/_format.h, shared with the telnet parser (tsd/protocol/_parse.c).
 *
 * encode_into(rows, points, qualifiers, int1, encode_point) -> cells added
 *   rows: dict row key -> dict qualifier -> value bytes; points: a sequence of
 *   (series, timestamp, value); qualifiers: the 2-byte seconds qualifiers by
 *   offset << 4 | flags; int1: the 256 one-byte values; encode_point: the Python encoder,
 *   called for what is not the common case (ms timestamps, 8-byte integers, errors).
 *
 * merge_rows(into, rows) -> cells added
 *   rows' cells merged into into (both dicts of that form), a later cell winning.
 *
 * tag_suffix(pairs, tagk_width, tagv_width) -> bytes or None
 *   (tagk, tagv) UID pairs joined in tag key order, as tsd.codec.rowkey.make_series_key
 *   joins them; None for anything it would check further (widths, a repeated tag key).
 */
#include "_format.h"

static PyObject *encode_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_into takes 5 arguments");
        return NULL;
    }
    PyObject *rows = args[0], *qualifiers = args[2], *int1 = args[3], *encode_point = args[4];
    if (!PyDict_CheckExact(rows) || !PyTuple_CheckExact(qualifiers) || !PyTuple_CheckExact(int1) ||
        PyTuple_GET_SIZE(int1) != 256 ||
        PyTuple_GET_SIZE(qualifiers) < ((MAX_TIMESPAN - 1) << FLAG_BITS | 0xF) + 1) {
        PyErr_SetString(PyExc_TypeError, "encode_into: bad arguments");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "points must be iterable");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    long long added = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *point = items[i];
        if (!PyTuple_Check(point) || PyTuple_GET_SIZE(point) != 3) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "a point is a (series, timestamp, value) tuple");
            return NULL;
        }
        int one = encode_one(rows, PyTuple_GET_ITEM(point, 0), PyTuple_GET_ITEM(point, 1),
                             PyTuple_GET_ITEM(point, 2), qualifiers, int1, encode_point);
        if (one < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        added += one;
    }
    Py_DECREF(seq);
    return PyLong_FromLongLong(added);
}

/* tag_suffix(pairs, tagk_width, tagv_width): the tag pairs' bytes sorted by tag key, or None
 * when a pair is not (bytes, bytes) of those widths or a tag key repeats. */
#define MAX_SUFFIX_PAIRS 256

static PyObject *tag_suffix(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "tag_suffix(pairs, tagk_width, tagv_width)");
        return NULL;
    }
    Py_ssize_t kw = PyLong_AsSsize_t(args[1]), vw = PyLong_AsSsize_t(args[2]);
    if ((kw == -1 || vw == -1) && PyErr_Occurred()) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "pairs must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const char *keys[MAX_SUFFIX_PAIRS], *values[MAX_SUFFIX_PAIRS];
    int plain = kw > 0 && vw > 0 && n <= MAX_SUFFIX_PAIRS;
    for (Py_ssize_t i = 0; plain && i < n; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            plain = 0;
            break;
        }
        PyObject *k = PyTuple_GET_ITEM(pair, 0), *v = PyTuple_GET_ITEM(pair, 1);
        if (!PyBytes_CheckExact(k) || !PyBytes_CheckExact(v) || PyBytes_GET_SIZE(k) != kw
            || PyBytes_GET_SIZE(v) != vw) {
            plain = 0;
            break;
        }
        /* insertion sort by tag key: a handful of pairs */
        const char *key = PyBytes_AS_STRING(k), *value = PyBytes_AS_STRING(v);
        Py_ssize_t j = i;
        for (; j > 0; j--) {
            int order = memcmp(keys[j - 1], key, (size_t)kw);
            if (order == 0) plain = 0; /* a tag key given twice */
            if (order <= 0) break;
            keys[j] = keys[j - 1];
            values[j] = values[j - 1];
        }
        keys[j] = key;
        values[j] = value;
    }
    if (!plain) {
        Py_DECREF(seq);
        Py_RETURN_NONE;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (kw + vw));
    if (out != NULL) {
        char *at = PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(at, keys[i], (size_t)kw);
            memcpy(at + kw, values[i], (size_t)vw);
            at += kw + vw;
        }
    }
    Py_DECREF(seq);
    return out;
}

/* merge_rows(into, rows) -> cells added: rows' cells into into (both dicts row key -> dict
 * qualifier -> value), a row into does not hold taken over as it is, a later cell
 * replacing an earlier one (tsd.codec.qualifier.python_merge_rows is the specification). */
static PyObject *merge_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_CheckExact(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "merge_rows(into, rows) takes two dicts");
        return NULL;
    }
    PyObject *into = args[0], *row, *cells;
    Py_ssize_t pos = 0;
    long long added = 0;
    while (PyDict_Next(args[1], &pos, &row, &cells)) {
        if (!PyDict_Check(cells)) {
            PyErr_SetString(PyExc_TypeError, "merge_rows: a row's cells are a dict");
            return NULL;
        }
        PyObject *have = PyDict_GetItemWithError(into, row);
        if (have == NULL) {
            if (PyErr_Occurred() || PyDict_SetItem(into, row, cells) < 0)
                return NULL;
            added += PyDict_GET_SIZE(cells);
            continue;
        }
        if (!PyDict_Check(have)) {
            PyErr_SetString(PyExc_TypeError, "merge_rows: a row's cells are a dict");
            return NULL;
        }
        Py_ssize_t before = PyDict_GET_SIZE(have);
        if (PyDict_GET_SIZE(cells) == 1) { /* the usual request: a cell a row */
            Py_ssize_t at = 0;
            PyObject *qualifier, *value;
            PyDict_Next(cells, &at, &qualifier, &value);
            if (PyDict_SetItem(have, qualifier, value) < 0)
                return NULL;
        } else if (PyDict_Update(have, cells) < 0) {
            return NULL;
        }
        added += PyDict_GET_SIZE(have) - before;
    }
    return PyLong_FromLongLong(added);
}

static PyMethodDef methods[] = {
    {"encode_into", (PyCFunction)(void (*)(void))encode_into, METH_FASTCALL,
     "Encode (series, timestamp, value) points into a batch's rows; the cells added."},
    {"merge_rows", (PyCFunction)(void (*)(void))merge_rows, METH_FASTCALL,
     "Cells of rows merged into a batch's rows (later cells win); the cells added."},
    {"tag_suffix", (PyCFunction)(void (*)(void))tag_suffix, METH_FASTCALL,
     "Tag pairs' bytes sorted by tag key, or None (tsd.codec.rowkey.make_series_key)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_encode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__encode(void)
{
    if (format_init() < 0)
        return NULL;
    return PyModule_Create(&module);
}
