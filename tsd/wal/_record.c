/* A writer batch's rows framed for the log and the head, in C:
 * tsd.wal.record.python_encode_payload_and_runs (the specification and the fallback when
 * this is not built; tests/wal/test_record_c.py checks both agree).
 *
 * encode_cells_and_runs(rows) -> (payload, runs) or None
 *   rows: a writer batch's dict row key -> dict qualifier -> value. The CELLS payload of
 *   tsd.wal.record (not framed) and the rows as (row, count, qualifiers joined, values
 *   joined), as tsd.wal.record.python_encode_payload_and_runs gives them; None when a row
 *   does not fit that format's fields (the Python path then raises its error).
 *
 * encode_samples_part(series, timestamps, values, qualifiers, int1, encode_point)
 *   -> (payload, runs): series a list, timestamps and values columns of as many (int64 and
 *   float64 buffers); each sample (series[i], timestamps[i], values[i]) encoded as
 *   tsd.codec.qualifier.encode_points_into encodes that point (tsd/codec/_format.h) into a
 *   row of one cell of its own, in order: the CELLS payload and the runs
 *   (tsd.wal.record.python_encode_samples_part is the specification).
 */
#include "_format.h" /* the cell of a point: encode_cell */

/* -- a writer batch's rows framed for the log and the head --------------------------- */

static void frame_be(unsigned char *out, uint64_t value, int width) {
    for (int i = width - 1; i >= 0; i--) {
        out[i] = (unsigned char)(value & 0xFF);
        value >>= 8;
    }
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

/* A row's head in the payload: its key's length (2 bytes) and cell count (4), big-endian. */
static void row_head(Buffer *buf, Py_ssize_t row_len, Py_ssize_t count) {
    unsigned char head[6];
    frame_be(head, (uint64_t)row_len, 2);
    frame_be(head + 2, (uint64_t)count, 4);
    append(buf, (const char *)head, 6);
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
    row_head(buf, row_len, count);
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
    /* bytes and an int: the cyclic collector would untrack it at its first pass; untracked
     * now, a burst's runs (a row each for new series) are not walked once first */
    PyObject_GC_UnTrack(run);
    int failed = PyList_Append(runs, run);
    Py_DECREF(run);
    return failed ? -1 : 1;
}

/* The payload and the runs; None when a row does not fit the format. */
static PyObject *encode_rows(PyObject *rows) {
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
            Py_XDECREF(runs);
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

static PyObject *encode_cells_and_runs(PyObject *self, PyObject *rows) {
    return encode_rows(rows);
}

/* encode_samples_part(series, timestamps, values, qualifiers, int1, encode_point)
 *   -> (payload, runs). */
static PyObject *encode_samples_part(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !encoder_tables_ok(args[3], args[4])) {
        PyErr_SetString(PyExc_TypeError, "encode_samples_part: bad arguments");
        return NULL;
    }
    PyObject *series = args[0], *qualifiers = args[3], *int1 = args[4], *encode_point = args[5];
    Py_buffer ts_view, value_view;
    if (number_column(args[1], &ts_view, 0, "encode_samples_part: timestamps") < 0) return NULL;
    if (number_column(args[2], &value_view, 1, "encode_samples_part: values") < 0) {
        PyBuffer_Release(&ts_view);
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(series);
    Buffer buf = {NULL, 0, 0};
    PyObject *runs = NULL, *one = NULL;
    if (ts_view.len / 8 != count || value_view.len / 8 != count) {
        PyErr_SetString(PyExc_ValueError, "encode_samples_part: as many samples as series");
        goto error;
    }
    runs = PyList_New(0);
    one = PyLong_FromLong(1);
    if (runs == NULL || one == NULL) goto error;
    const long long *timestamps = (const long long *)ts_view.buf;
    const double *values = (const double *)value_view.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *row, *qualifier, *value;
        if (encode_cell_double(PyList_GET_ITEM(series, i), timestamps[i], values[i], qualifiers,
                               int1, encode_point, &row, &qualifier, &value) < 0)
            goto error;
        Py_ssize_t row_n = PyBytes_GET_SIZE(row), q_n = PyBytes_GET_SIZE(qualifier);
        Py_ssize_t v_n = PyBytes_GET_SIZE(value);
        PyObject *run = NULL;
        if (row_n > 0xFFFF || q_n > 0xFF || v_n > 0xFF)
            PyErr_SetString(PyExc_ValueError, "encode_samples_part: a cell beyond the format");
        else if (reserve(&buf, 8 + row_n + q_n + v_n) == 0)
            run = PyTuple_Pack(4, row, one, qualifier, value);
        if (run != NULL) {
            unsigned char lens[2] = {(unsigned char)q_n, (unsigned char)v_n};
            row_head(&buf, row_n, 1);
            append(&buf, PyBytes_AS_STRING(row), row_n);
            append(&buf, (const char *)lens, 2);
            append(&buf, PyBytes_AS_STRING(qualifier), q_n);
            append(&buf, PyBytes_AS_STRING(value), v_n);
            PyObject_GC_UnTrack(run); /* bytes and an int: as encode_row's */
        }
        Py_DECREF(row);
        Py_DECREF(qualifier);
        Py_DECREF(value);
        if (run == NULL) goto error;
        int failed = PyList_Append(runs, run);
        Py_DECREF(run);
        if (failed) goto error;
    }
    PyObject *payload = PyBytes_FromStringAndSize(buf.data ? buf.data : "", buf.size);
    PyMem_Free(buf.data);
    buf.data = NULL;
    if (payload == NULL) goto error;
    Py_DECREF(one);
    PyBuffer_Release(&ts_view);
    PyBuffer_Release(&value_view);
    return Py_BuildValue("(NN)", payload, runs);
error:
    PyMem_Free(buf.data);
    Py_XDECREF(runs);
    Py_XDECREF(one);
    PyBuffer_Release(&ts_view);
    PyBuffer_Release(&value_view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode_cells_and_runs", encode_cells_and_runs, METH_O,
     "{row: {qualifier: value}} -> (cells payload, runs), or None"},
    {"encode_samples_part", (PyCFunction)(void (*)(void))encode_samples_part, METH_FASTCALL,
     "series, int64 timestamps, float64 values -> (cells payload, runs), a row of one cell a"
     " sample"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record(void)
{
    if (format_init() < 0)
        return NULL;
    return PyModule_Create(&module);
}
