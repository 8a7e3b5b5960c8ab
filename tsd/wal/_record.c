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
 * encode_samples_payload(series, timestamps, values, qualifiers, int1, encode_point)
 *   -> payload: series a list, timestamps and values columns of as many (int64 and float64
 *   buffers); each sample (series[i], timestamps[i], values[i]) encoded as
 *   tsd.codec.qualifier.encode_points_into encodes that point (tsd/codec/_format.h) into a
 *   row of one cell of its own, in order: the CELLS payload
 *   (tsd.wal.record.python_encode_samples_payload is the specification).
 *
 * sample_runs(blocks, qualifiers, int1, encode_point) -> runs: blocks a list of such
 *   (series, timestamps, values) columns; their samples' cells as the head takes them, a
 *   run a row (tsd.wal.record.python_sample_runs is the specification). No Python object
 *   a sample: a row's qualifiers and values are written straight into its run's bytes.
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

/* The columns of a block of samples: its series (a list) and views of its timestamps and
 * values, as many of each; 0, or -1 with an exception set (no view held). */
typedef struct {
    PyObject *series;
    Py_buffer timestamps, values;
    Py_ssize_t count;
} Block;

static int open_block(PyObject *series, PyObject *timestamps, PyObject *values, Block *block,
                      const char *what)
{
    if (!PyList_CheckExact(series)) {
        PyErr_Format(PyExc_TypeError, "%s: series must be a list", what);
        return -1;
    }
    if (number_column(timestamps, &block->timestamps, 0, "timestamps") < 0)
        return -1;
    if (number_column(values, &block->values, 1, "values") < 0) {
        PyBuffer_Release(&block->timestamps);
        return -1;
    }
    block->series = series;
    block->count = PyList_GET_SIZE(series);
    if (block->timestamps.len / 8 != block->count || block->values.len / 8 != block->count) {
        PyErr_Format(PyExc_ValueError, "%s: as many samples as series", what);
        PyBuffer_Release(&block->timestamps);
        PyBuffer_Release(&block->values);
        return -1;
    }
    return 0;
}

static void close_block(Block *block)
{
    PyBuffer_Release(&block->timestamps);
    PyBuffer_Release(&block->values);
}

/* encode_samples_payload(series, timestamps, values, qualifiers, int1, encode_point)
 *   -> payload: a row of one cell a sample, in order. */
static PyObject *encode_samples_payload(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !encoder_tables_ok(args[3], args[4])) {
        PyErr_SetString(PyExc_TypeError, "encode_samples_payload: bad arguments");
        return NULL;
    }
    Block block;
    if (open_block(args[0], args[1], args[2], &block, "encode_samples_payload") < 0)
        return NULL;
    const long long *timestamps = (const long long *)block.timestamps.buf;
    const double *values = (const double *)block.values.buf;
    Buffer buf = {NULL, 0, 0};
    for (Py_ssize_t i = 0; i < block.count; i++) {
        PyObject *row;
        unsigned char cell[14]; /* lengths, qualifier, value */
        int q_n, v_n;
        if (sample_cell(PyList_GET_ITEM(block.series, i), timestamps[i], values[i], args[3],
                        args[4], args[5], &row, cell + 2, &q_n, cell + 6, &v_n) < 0)
            goto error;
        Py_ssize_t row_n = PyBytes_GET_SIZE(row);
        if (row_n > 0xFFFF) {
            PyErr_SetString(PyExc_ValueError, "encode_samples_payload: a row beyond the format");
            Py_DECREF(row);
            goto error;
        }
        if (reserve(&buf, 8 + row_n + q_n + v_n) < 0) {
            Py_DECREF(row);
            goto error;
        }
        row_head(&buf, row_n, 1);
        append(&buf, PyBytes_AS_STRING(row), row_n);
        Py_DECREF(row);
        cell[0] = (unsigned char)q_n;
        cell[1] = (unsigned char)v_n;
        append(&buf, (const char *)cell, 2 + q_n);
        append(&buf, (const char *)cell + 6, v_n);
    }
    close_block(&block);
    PyObject *payload = PyBytes_FromStringAndSize(buf.data ? buf.data : "", buf.size);
    PyMem_Free(buf.data);
    return payload;
error:
    close_block(&block);
    PyMem_Free(buf.data);
    return NULL;
}

/* One sample's cell, kept until its row's bytes are made. */
typedef struct {
    Py_ssize_t row;
    unsigned char q[4], v[8];
    unsigned char q_len, v_len;
} Cell;

/* A row of sample_runs: its key, cells, and the bytes of its qualifiers and values. */
typedef struct {
    PyObject *key, *qualifiers, *values;
    Py_ssize_t count, q_total, v_total;
    char *q_at, *v_at;
} Row;

static void free_rows(Row *rows, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_XDECREF(rows[i].key);
        Py_XDECREF(rows[i].qualifiers);
        Py_XDECREF(rows[i].values);
    }
    PyMem_Free(rows);
}

/* Pass 1 of sample_runs: each sample's cell, and its row (first-come order). */
static int gather_cells(Block *block, PyObject *const *tables, PyObject *index, Cell *cells,
                        Row **rows, Py_ssize_t *row_count, Py_ssize_t *row_cap)
{
    const long long *timestamps = (const long long *)block->timestamps.buf;
    const double *values = (const double *)block->values.buf;
    for (Py_ssize_t i = 0; i < block->count; i++) {
        PyObject *key;
        int q_n, v_n;
        Cell *cell = cells + i;
        if (sample_cell(PyList_GET_ITEM(block->series, i), timestamps[i], values[i], tables[0],
                        tables[1], tables[2], &key, cell->q, &q_n, cell->v, &v_n) < 0)
            return -1;
        PyObject *known = PyDict_GetItemWithError(index, key);
        Py_ssize_t at;
        if (known != NULL) {
            at = PyLong_AsSsize_t(known);
            Py_DECREF(key);
        } else {
            if (PyErr_Occurred()) {
                Py_DECREF(key);
                return -1;
            }
            if (*row_count == *row_cap) {
                Py_ssize_t cap = *row_cap ? *row_cap * 2 : 256;
                Row *grown = PyMem_Realloc(*rows, (size_t)cap * sizeof(Row));
                if (grown == NULL) {
                    Py_DECREF(key);
                    PyErr_NoMemory();
                    return -1;
                }
                *rows = grown;
                *row_cap = cap;
            }
            at = (*row_count)++;
            (*rows)[at] = (Row){key, NULL, NULL, 0, 0, 0, NULL, NULL};
            PyObject *number = PyLong_FromSsize_t(at);
            if (number == NULL || PyDict_SetItem(index, key, number) < 0) {
                Py_XDECREF(number);
                return -1;
            }
            Py_DECREF(number);
        }
        Row *row = *rows + at;
        row->count++;
        row->q_total += q_n;
        row->v_total += v_n;
        cell->row = at;
        cell->q_len = (unsigned char)q_n;
        cell->v_len = (unsigned char)v_n;
    }
    return 0;
}

/* sample_runs(blocks, qualifiers, int1, encode_point) -> runs: the samples of blocks (each
 * (series, timestamps, values)), in order, as one run a row, rows in the order they first
 * come, a row's cells in the order of its samples. */
static PyObject *sample_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !encoder_tables_ok(args[1], args[2])) {
        PyErr_SetString(PyExc_TypeError, "sample_runs: bad arguments");
        return NULL;
    }
    PyObject *blocks = args[0];
    Py_ssize_t block_count = PyList_GET_SIZE(blocks), total = 0;
    Block *opened = PyMem_Calloc((size_t)(block_count ? block_count : 1), sizeof(Block));
    if (opened == NULL)
        return PyErr_NoMemory();
    Py_ssize_t open_count = 0, row_count = 0, row_cap = 0;
    Cell *cells = NULL;
    Row *rows = NULL;
    PyObject *index = NULL, *runs = NULL;
    for (; open_count < block_count; open_count++) {
        PyObject *one = PyList_GET_ITEM(blocks, open_count);
        if (!PyTuple_Check(one) || PyTuple_GET_SIZE(one) != 3) {
            PyErr_SetString(PyExc_TypeError, "sample_runs: a block is (series, timestamps, values)");
            goto done;
        }
        if (open_block(PyTuple_GET_ITEM(one, 0), PyTuple_GET_ITEM(one, 1),
                       PyTuple_GET_ITEM(one, 2), opened + open_count, "sample_runs") < 0)
            goto done;
        total += opened[open_count].count;
    }
    cells = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(Cell));
    index = PyDict_New();
    if (cells == NULL || index == NULL) {
        if (cells == NULL)
            PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t b = 0; b < block_count; b++) {
        if (gather_cells(opened + b, args + 1, index, cells + at, &rows, &row_count, &row_cap) < 0)
            goto done;
        at += opened[b].count;
    }
    for (Py_ssize_t r = 0; r < row_count; r++) {
        Row *row = rows + r;
        row->qualifiers = PyBytes_FromStringAndSize(NULL, row->q_total);
        row->values = PyBytes_FromStringAndSize(NULL, row->v_total);
        if (row->qualifiers == NULL || row->values == NULL)
            goto done;
        row->q_at = PyBytes_AS_STRING(row->qualifiers);
        row->v_at = PyBytes_AS_STRING(row->values);
    }
    for (Py_ssize_t i = 0; i < total; i++) {
        Cell *cell = cells + i;
        Row *row = rows + cell->row;
        memcpy(row->q_at, cell->q, cell->q_len);
        memcpy(row->v_at, cell->v, cell->v_len);
        row->q_at += cell->q_len;
        row->v_at += cell->v_len;
    }
    runs = PyList_New(row_count);
    if (runs == NULL)
        goto done;
    for (Py_ssize_t r = 0; r < row_count; r++) {
        Row *row = rows + r;
        PyObject *count = PyLong_FromSsize_t(row->count);
        PyObject *run = count == NULL ? NULL
                                      : PyTuple_Pack(4, row->key, count, row->qualifiers, row->values);
        Py_XDECREF(count);
        if (run == NULL) {
            Py_CLEAR(runs);
            goto done;
        }
        PyObject_GC_UnTrack(run); /* bytes and an int: as encode_row's */
        PyList_SET_ITEM(runs, r, run);
    }
done:
    for (Py_ssize_t b = 0; b < open_count; b++)
        close_block(opened + b);
    PyMem_Free(opened);
    PyMem_Free(cells);
    free_rows(rows, row_count);
    Py_XDECREF(index);
    return runs;
}

static PyMethodDef methods[] = {
    {"encode_cells_and_runs", encode_cells_and_runs, METH_O,
     "{row: {qualifier: value}} -> (cells payload, runs), or None"},
    {"encode_samples_payload", (PyCFunction)(void (*)(void))encode_samples_payload,
     METH_FASTCALL, "series, int64 timestamps, float64 values -> cells payload, a row of one"
     " cell a sample"},
    {"sample_runs", (PyCFunction)(void (*)(void))sample_runs, METH_FASTCALL,
     "[(series, int64 timestamps, float64 values)] -> runs, one a row"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record(void)
{
    if (format_init() < 0)
        return NULL;
    return PyModule_Create(&module);
}
