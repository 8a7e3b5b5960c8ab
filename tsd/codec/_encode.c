/* The ingest hot path's two per-point loops at compiled speed (tsd.codec.qualifier and
 * tsd.wal.record).
 *
 * Why: at a million series, every point of a 10 s interval is a row of its own, and the
 * Python loops encoding points into the writer's batch (encode_points_into) and framing
 * that batch's rows for the write-ahead log and the head (encode_cells_and_runs) were a
 * third of the daemon's time (bench/cardinality). These do the same, without a Python
 * step per point.
 *
 * encode_points_into(rows, points, qualifiers, int1, encode_point) -> cells added
 *   rows: dict row key -> dict qualifier -> value bytes; points: a list of
 *   (series, timestamp, value). The common points (an int of 1, 2 or 4 bytes, or a finite
 *   float; a timestamp in seconds) are encoded here as tsd.codec.qualifier.encode_points_into
 *   does, with its tables (qualifiers: the seconds qualifiers by offset << 4 | flags;
 *   int1: the one-byte values); any other point goes through encode_point(timestamp,
 *   value), whose error (CodecError) propagates with the points before it in rows.
 *
 * encode_cells_and_runs(rows) -> (payload, runs) or None
 *   rows: a dict row key -> dict qualifier -> value (a writer batch's). The cells payload of
 *   tsd.wal.record (not framed) and the rows as (row, count, qualifiers joined, values
 *   joined); None when a row does not fit that format's fields (the caller's Python
 *   path then says why).
 *
 * tests/codec/test_encode_c.py checks both against the Python code.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define FLAGS_INT1 0x0
#define FLAGS_INT2 0x1
#define FLAGS_INT4 0x3
#define FLAGS_FLOAT32 0xB
#define FLAGS_FLOAT64 0xF
#define MAX_TIMESPAN 3600

static PyObject *ROW_KEY = NULL;   /* "row_key" */
static PyObject *LAST_BASE = NULL; /* "_last_base": SeriesKey's slots (tsd.codec.rowkey) */
static PyObject *LAST_KEY = NULL;  /* "_last_key" */

static void put_be(unsigned char *out, uint64_t value, int width) {
    for (int i = width - 1; i >= 0; i--) {
        out[i] = (unsigned char)(value & 0xFF);
        value >>= 8;
    }
}

/* The flags and value bytes of a common value; 0 with *flags -1 when not common. */
static PyObject *common_value(PyObject *value, PyObject *int1, int *flags) {
    unsigned char buf[8];
    *flags = -1;
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return NULL;
        }
        if (v < -0x80000000LL || v > 0x7FFFFFFFLL) return NULL;
        if (v >= -0x80 && v <= 0x7F) {
            PyObject *b = PyTuple_GetItem(int1, (Py_ssize_t)(v & 0xFF));
            if (b == NULL) return NULL;
            *flags = FLAGS_INT1;
            Py_INCREF(b);
            return b;
        }
        if (v >= -0x8000 && v <= 0x7FFF) {
            put_be(buf, (uint64_t)(uint16_t)(int16_t)v, 2);
            *flags = FLAGS_INT2;
            return PyBytes_FromStringAndSize((const char *)buf, 2);
        }
        put_be(buf, (uint64_t)(uint32_t)(int32_t)v, 4);
        *flags = FLAGS_INT4;
        return PyBytes_FromStringAndSize((const char *)buf, 4);
    }
    if (PyFloat_CheckExact(value)) {
        double d = PyFloat_AS_DOUBLE(value);
        if (!isfinite(d)) return NULL;
        float f = fabs(d) <= FLT_MAX ? (float)d : 0.0f;
        if (fabs(d) <= FLT_MAX && (double)f == d) { /* struct '>f' and back gives the same value */
            uint32_t bits;
            memcpy(&bits, &f, 4);
            put_be(buf, bits, 4);
            *flags = FLAGS_FLOAT32;
            return PyBytes_FromStringAndSize((const char *)buf, 4);
        }
        uint64_t bits;
        memcpy(&bits, &d, 8);
        put_be(buf, bits, 8);
        *flags = FLAGS_FLOAT64;
        return PyBytes_FromStringAndSize((const char *)buf, 8);
    }
    return NULL;
}

/* series.row_key(base): its last key when the base is its last (SeriesKey's cache, read
 * without the Python call: most points of a series fall in the hour of the one before). */
static PyObject *row_key(PyObject *series, PyObject *base) {
    PyObject *last_base = PyObject_GetAttr(series, LAST_BASE);
    if (last_base == NULL) {
        PyErr_Clear();
    } else {
        int same = PyLong_CheckExact(last_base) && PyObject_RichCompareBool(last_base, base, Py_EQ) == 1;
        Py_DECREF(last_base);
        if (same) {
            PyObject *key = PyObject_GetAttr(series, LAST_KEY);
            if (key != NULL && PyBytes_CheckExact(key)) return key;
            Py_XDECREF(key);
            PyErr_Clear();
        }
    }
    return PyObject_CallMethodOneArg(series, ROW_KEY, base);
}

/* Put qualifier -> value into rows[row]; 1 when the cell is new, 0 when replaced, -1 on
 * error. Steals nothing. */
static int add_cell(PyObject *rows, PyObject *row, PyObject *qualifier, PyObject *value) {
    PyObject *cells = PyDict_GetItemWithError(rows, row);
    if (cells == NULL) {
        if (PyErr_Occurred()) return -1;
        cells = PyDict_New();
        if (cells == NULL) return -1;
        if (PyDict_SetItem(cells, qualifier, value) < 0 || PyDict_SetItem(rows, row, cells) < 0) {
            Py_DECREF(cells);
            return -1;
        }
        Py_DECREF(cells);
        return 1;
    }
    int present = PyDict_Contains(cells, qualifier);
    if (present < 0) return -1;
    if (PyDict_SetItem(cells, qualifier, value) < 0) return -1;
    return present ? 0 : 1;
}

static PyObject *encode_points_into(PyObject *self, PyObject *args) {
    PyObject *rows, *points, *qualifiers, *int1, *encode_point;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O", &PyDict_Type, &rows, &PyList_Type, &points,
                          &PyTuple_Type, &qualifiers, &PyTuple_Type, &int1, &encode_point))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(points);
    long long added = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *point = PyList_GET_ITEM(points, i);
        if (!PyTuple_Check(point) || PyTuple_GET_SIZE(point) != 3) {
            PyErr_SetString(PyExc_TypeError, "a point is (series, timestamp, value)");
            return NULL;
        }
        PyObject *series = PyTuple_GET_ITEM(point, 0);
        PyObject *timestamp = PyTuple_GET_ITEM(point, 1);
        PyObject *value = PyTuple_GET_ITEM(point, 2);
        PyObject *value_bytes = NULL, *qualifier = NULL, *base_obj = NULL;
        int flags;
        long long ts = -1;
        if (PyLong_CheckExact(timestamp)) {
            int overflow = 0;
            ts = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
            if (overflow || (ts == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                ts = -1;
            }
        }
        if (ts >= 0 && ts <= 0xFFFFFFFFLL) value_bytes = common_value(value, int1, &flags);
        if (value_bytes != NULL) {
            long long base = ts - ts % MAX_TIMESPAN;
            qualifier = PyTuple_GetItem(qualifiers, (Py_ssize_t)(((ts - base) << 4) | flags));
            if (qualifier == NULL) {
                Py_DECREF(value_bytes);
                return NULL;
            }
            Py_INCREF(qualifier);
            base_obj = PyLong_FromLongLong(base);
        } else {
            if (PyErr_Occurred()) return NULL;
            PyObject *encoded = PyObject_CallFunctionObjArgs(encode_point, timestamp, value, NULL);
            if (encoded == NULL) return NULL;
            if (!PyTuple_Check(encoded) || PyTuple_GET_SIZE(encoded) != 3) {
                Py_DECREF(encoded);
                PyErr_SetString(PyExc_TypeError, "encode_point gives (base, qualifier, value)");
                return NULL;
            }
            base_obj = PyTuple_GET_ITEM(encoded, 0);
            qualifier = PyTuple_GET_ITEM(encoded, 1);
            value_bytes = PyTuple_GET_ITEM(encoded, 2);
            Py_INCREF(base_obj);
            Py_INCREF(qualifier);
            Py_INCREF(value_bytes);
            Py_DECREF(encoded);
        }
        PyObject *row = NULL;
        if (base_obj != NULL) row = row_key(series, base_obj);
        int fresh = row == NULL ? -1 : add_cell(rows, row, qualifier, value_bytes);
        Py_XDECREF(row);
        Py_XDECREF(base_obj);
        Py_DECREF(qualifier);
        Py_DECREF(value_bytes);
        if (fresh < 0) return NULL;
        added += fresh;
    }
    return PyLong_FromLongLong(added);
}

typedef struct {
    char *data;
    Py_ssize_t size, cap;
} Buffer;

static int reserve(Buffer *buf, Py_ssize_t more) {
    if (buf->size + more <= buf->cap) return 0;
    Py_ssize_t cap = buf->cap ? buf->cap : 1 << 16;
    while (cap < buf->size + more) cap *= 2;
    char *grown = PyMem_Realloc(buf->data, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    buf->data = grown;
    buf->cap = cap;
    return 0;
}

static void append(Buffer *buf, const char *data, Py_ssize_t size) {
    memcpy(buf->data + buf->size, data, (size_t)size);
    buf->size += size;
}

/* 1 on success, 0 when the row does not fit the format (no error set), -1 on error. */
static int encode_row(Buffer *buf, PyObject *runs, PyObject *row, PyObject *cells) {
    Py_ssize_t row_len = PyBytes_GET_SIZE(row), count = PyDict_GET_SIZE(cells);
    if (row_len > 0xFFFF || count > 0xFFFFFFFFLL) return 0;
    Py_ssize_t q_total = 0, v_total = 0, pos = 0;
    PyObject *q, *v;
    while (PyDict_Next(cells, &pos, &q, &v)) {
        if (!PyBytes_CheckExact(q) || !PyBytes_CheckExact(v)) return 0;
        if (PyBytes_GET_SIZE(q) > 0xFF || PyBytes_GET_SIZE(v) > 0xFF) return 0;
        q_total += PyBytes_GET_SIZE(q);
        v_total += PyBytes_GET_SIZE(v);
    }
    if (reserve(buf, 6 + row_len + 2 * count + q_total + v_total) < 0) return -1;
    unsigned char head[6];
    put_be(head, (uint64_t)row_len, 2);
    put_be(head + 2, (uint64_t)count, 4);
    append(buf, (const char *)head, 6);
    append(buf, PyBytes_AS_STRING(row), row_len);
    char *q_lens = buf->data + buf->size, *v_lens = q_lens + count;
    char *q_at = v_lens + count, *v_at = q_at + q_total;
    pos = 0;
    Py_ssize_t i = 0;
    while (PyDict_Next(cells, &pos, &q, &v)) {
        Py_ssize_t ql = PyBytes_GET_SIZE(q), vl = PyBytes_GET_SIZE(v);
        q_lens[i] = (char)ql;
        v_lens[i] = (char)vl;
        memcpy(q_at, PyBytes_AS_STRING(q), (size_t)ql);
        memcpy(v_at, PyBytes_AS_STRING(v), (size_t)vl);
        q_at += ql;
        v_at += vl;
        i++;
    }
    PyObject *run = NULL, *n = PyLong_FromSsize_t(count);
    if (n != NULL && count == 1) {
        pos = 0;
        PyDict_Next(cells, &pos, &q, &v);
        run = PyTuple_Pack(4, row, n, q, v);
    } else if (n != NULL) {
        char *q_start = v_lens + count;
        PyObject *qs = PyBytes_FromStringAndSize(q_start, q_total);
        PyObject *vs = PyBytes_FromStringAndSize(q_start + q_total, v_total);
        if (qs != NULL && vs != NULL) run = PyTuple_Pack(4, row, n, qs, vs);
        Py_XDECREF(qs);
        Py_XDECREF(vs);
    }
    Py_XDECREF(n);
    buf->size += 2 * count + q_total + v_total;
    if (run == NULL) return -1;
    int failed = PyList_Append(runs, run);
    Py_DECREF(run);
    return failed ? -1 : 1;
}

static PyObject *encode_cells_and_runs(PyObject *self, PyObject *rows) {
    if (!PyDict_CheckExact(rows)) {
        PyErr_SetString(PyExc_TypeError, "rows must be a dict row -> {qualifier: value}");
        return NULL;
    }
    Buffer buf = {NULL, 0, 0};
    PyObject *runs = PyList_New(0);
    if (runs == NULL) return NULL;
    Py_ssize_t pos = 0;
    PyObject *row, *cells;
    while (PyDict_Next(rows, &pos, &row, &cells)) {
        int done = 0;
        if (PyBytes_CheckExact(row) && PyDict_CheckExact(cells))
            done = encode_row(&buf, runs, row, cells);
        if (done <= 0) {
            PyMem_Free(buf.data);
            Py_DECREF(runs);
            if (done < 0) return NULL;
            Py_RETURN_NONE;
        }
    }
    PyObject *payload = PyBytes_FromStringAndSize(buf.data ? buf.data : "", buf.size);
    PyMem_Free(buf.data);
    if (payload == NULL) {
        Py_DECREF(runs);
        return NULL;
    }
    PyObject *answer = PyTuple_Pack(2, payload, runs);
    Py_DECREF(payload);
    Py_DECREF(runs);
    return answer;
}

static PyMethodDef methods[] = {
    {"encode_points_into", encode_points_into, METH_VARARGS,
     "(rows, points, qualifiers, int1, encode_point) -> cells added"},
    {"encode_cells_and_runs", encode_cells_and_runs, METH_O,
     "{row: {qualifier: value}} -> (cells payload, runs), or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_encode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__encode(void) {
    ROW_KEY = PyUnicode_InternFromString("row_key");
    LAST_BASE = PyUnicode_InternFromString("_last_base");
    LAST_KEY = PyUnicode_InternFromString("_last_key");
    if (ROW_KEY == NULL || LAST_BASE == NULL || LAST_KEY == NULL) return NULL;
    return PyModule_Create(&module);
}
