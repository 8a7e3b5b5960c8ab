/* The cell format every compiled ingest helper shares: OpenTSDB's value flags and
 * qualifier widths (tsd/codec/const.py, tsd/codec/qualifier.py and tsd/codec/value.py are
 * the specification), and the encoding of one point into its cell (encode_cell) and into
 * a rows dict (row key -> qualifier -> value: encode_one) as
 * tsd.codec.qualifier.python_encode_points_into encodes it. Included by
 * tsd/codec/_encode.c (encode_into), tsd/protocol/_parse.c (take_known_into: typing and
 * encoding in one pass) and tsd/wal/_record.c (encode_samples_payload, sample_runs: remote write's samples); each
 * module that includes it calls format_init() once. */
#ifndef TSD_FORMAT_H
#define TSD_FORMAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <float.h>
#include <math.h>
#include <string.h>
#include <stdint.h>

#define MAX_TIMESPAN 3600
#define MAX_MS_TIMESTAMP 9999999999999LL /* tsd.data_points.MAX_MS_TIMESTAMP */
#define FLAG_BITS 4
#define FLAGS_INT1 0x0
#define FLAGS_INT2 0x1
#define FLAGS_INT4 0x3
#define FLAGS_FLOAT32 0xB
#define FLAGS_FLOAT64 0xF

static PyObject *row_key_name;

/* SeriesKey (tsd.codec.rowkey) keeps the row key of the last hour asked in two slots,
 * _last_base and _last_key. Their offsets are learnt from the first series' type, so a
 * row of the same hour is read from the slots without a Python call (a frame costs about
 * as much as typing the line). Another hour's key is built here from the _tsuid and
 * metric_uid slots (and _salted_prefix, a salted key's) as SeriesKey.row_key builds it
 * (prefix, the hour's 4 bytes, the
 * tag suffix: the TSUID past its metric UID), and
 * kept in the two slots as row_key keeps it (a new series' first point: no Python call
 * either); the hour's int is shared by the series that ask for it, as row_key shares it
 * (here among the last SHARED_BASES hours asked). Any other object calls row_key. The
 * offsets are learnt per type: SeriesKey and its salted subclass (key_type). */
/* The slot offsets of a series key type (SeriesKey and its salted subclass: two types). */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t last_base_at, last_key_at, tsuid_at, metric_at;
    /* _salted_prefix's offset; NO_PREFIX_SLOT when the prefix is the metric UID (an
     * unsalted key), UNKNOWN_PREFIX when the type has a salt this file cannot find */
    Py_ssize_t prefix_at;
} KeyType;
#define NO_PREFIX_SLOT (-1)
#define UNKNOWN_PREFIX (-2)
#define KEY_TYPES 2
static KeyType key_types[KEY_TYPES];
#define SHARED_BASES 8
static PyObject *shared_bases[SHARED_BASES];
static int next_shared;

static Py_ssize_t member_offset(PyTypeObject *type, const char *name)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t offset = -1;
    if (Py_TYPE(descr) == &PyMemberDescr_Type) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == T_OBJECT_EX)
            offset = member->offset;
    }
    Py_DECREF(descr);
    return offset;
}

/* series.row_key(base) called; a new reference (NULL with an exception set). */
static PyObject *called_row(PyObject *series, long long base)
{
    PyObject *base_obj = PyLong_FromLongLong(base);
    if (base_obj == NULL)
        return NULL;
    PyObject *row = PyObject_CallMethodOneArg(series, row_key_name, base_obj);
    Py_DECREF(base_obj);
    return row;
}

/* The int of hour ``base``, shared with the last series that asked for it; a new
 * reference. */
static PyObject *shared_base(long long base)
{
    for (int i = 0; i < SHARED_BASES; i++) {
        PyObject *known = shared_bases[i];
        if (known != NULL && PyLong_AsLongLong(known) == base) {
            Py_INCREF(known);
            return known;
        }
    }
    PyObject *made = PyLong_FromLongLong(base);
    if (made == NULL)
        return NULL;
    Py_XSETREF(shared_bases[next_shared], Py_NewRef(made));
    next_shared = (next_shared + 1) % SHARED_BASES;
    return made;
}

/* SeriesKey.row_key(base) of a series of a known key type whose _last_base is another hour:
 * the prefix (_salted_prefix, or metric_uid when unsalted) + the hour's 4 bytes
 * (big-endian, its low 32 bits) + _tsuid past its
 * metric_uid (the tag suffix), kept in
 * _last_key and _last_base; a new reference (NULL with an exception set). A slot not
 * holding bytes (never so in a SeriesKey) leaves it to row_key. */
static PyObject *built_row(const KeyType *known, PyObject *series, long long base)
{
    char *at_series = (char *)series;
    PyObject *metric = *(PyObject **)(at_series + known->metric_at);
    PyObject *prefix = known->prefix_at >= 0 ? *(PyObject **)(at_series + known->prefix_at)
                                             : metric;
    PyObject *tsuid = *(PyObject **)(at_series + known->tsuid_at);
    if (prefix == NULL || tsuid == NULL || metric == NULL || !PyBytes_CheckExact(prefix) ||
        !PyBytes_CheckExact(tsuid) || !PyBytes_CheckExact(metric) ||
        PyBytes_GET_SIZE(metric) > PyBytes_GET_SIZE(tsuid)) {
        return called_row(series, base);
    }
    Py_ssize_t np = PyBytes_GET_SIZE(prefix);
    Py_ssize_t nm = PyBytes_GET_SIZE(metric), ns = PyBytes_GET_SIZE(tsuid) - nm;
    PyObject *key = PyBytes_FromStringAndSize(NULL, np + 4 + ns);
    if (key == NULL)
        return NULL;
    PyObject *shared = shared_base(base);
    if (shared == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    char *at = PyBytes_AS_STRING(key);
    uint32_t hour = (uint32_t)((unsigned long long)base & 0xFFFFFFFFULL);
    memcpy(at, PyBytes_AS_STRING(prefix), (size_t)np);
    at[np] = (char)(hour >> 24);
    at[np + 1] = (char)(hour >> 16);
    at[np + 2] = (char)(hour >> 8);
    at[np + 3] = (char)hour;
    memcpy(at + np + 4, PyBytes_AS_STRING(tsuid) + nm, (size_t)ns);
    Py_XSETREF(*(PyObject **)(at_series + known->last_base_at), shared);
    Py_XSETREF(*(PyObject **)(at_series + known->last_key_at), Py_NewRef(key));
    return key;
}

/* The slots of type, learnt on first sight (the first KEY_TYPES types with _last_base
 * and _last_key slots); NULL for any other. */
static const KeyType *key_type(PyTypeObject *type)
{
    for (int i = 0; i < KEY_TYPES; i++) {
        if (key_types[i].type == type)
            return &key_types[i];
        if (key_types[i].type != NULL)
            continue;
        Py_ssize_t base_at = member_offset(type, "_last_base");
        Py_ssize_t key_at = member_offset(type, "_last_key");
        if (base_at < 0 || key_at < 0)
            return NULL;
        KeyType *known = &key_types[i];
        known->last_base_at = base_at;
        known->last_key_at = key_at;
        known->tsuid_at = member_offset(type, "_tsuid");
        known->metric_at = member_offset(type, "metric_uid");
        /* a salted key keeps its prefix (salt + metric UID) in _salted_prefix; an
         * unsalted one (no _salt slot) starts with its metric UID */
        known->prefix_at = member_offset(type, "_salted_prefix");
        if (known->prefix_at < 0)
            known->prefix_at = member_offset(type, "_salt") >= 0 ? UNKNOWN_PREFIX
                                                                  : NO_PREFIX_SLOT;
        Py_INCREF(type);
        known->type = type;
        return known;
    }
    return NULL;
}

/* series.row_key(base), a new reference; NULL with an exception set. */
static PyObject *series_row(PyObject *series, long long base)
{
    const KeyType *known = key_type(Py_TYPE(series));
    if (known != NULL) {
        PyObject *last = *(PyObject **)((char *)series + known->last_base_at);
        PyObject *key = *(PyObject **)((char *)series + known->last_key_at);
        if (last != NULL && key != NULL && PyLong_CheckExact(last)) {
            int overflow = 0;
            long long at = PyLong_AsLongLongAndOverflow(last, &overflow);
            if (at == base && !overflow) {
                Py_INCREF(key);
                return key;
            }
            PyErr_Clear();
        }
        if (known->tsuid_at >= 0 && known->metric_at >= 0 && known->prefix_at != UNKNOWN_PREFIX)
            return built_row(known, series, base);
    }
    return called_row(series, base);
}

/* The value bytes of a finite float as a point's value (a float32 when it holds the value
 * exactly, else a float64, big-endian) written to buf (8 bytes): their length, the flags
 * in *flags; 0 when it is not finite (encode_point's to refuse), -1 on an error. */
static int double_value_bytes(double dval, int *flags, unsigned char *buf)
{
    if (!isfinite(dval))
        return 0;
    float f = (float)dval;
    if (!isinf(f) && (double)f == dval) {
        *flags = FLAGS_FLOAT32;
        return PyFloat_Pack4(dval, (char *)buf, 0) < 0 ? -1 : 4;
    }
    *flags = FLAGS_FLOAT64;
    return PyFloat_Pack8(dval, (char *)buf, 0) < 0 ? -1 : 8;
}

/* The 4-byte qualifier of a millisecond timestamp (Prometheus' remote write), as
 * encode_point writes it: MS_FLAG | offset_ms << MS_FLAG_BITS | flags, big-endian, into q;
 * the row's hour (seconds) in *base. */
static void ms_qualifier(long long ts, int flags, unsigned char *q, long long *base)
{
    long long seconds = ts / 1000;
    *base = seconds - seconds % MAX_TIMESPAN;
    unsigned long long bits = 0xF0000000ULL | ((unsigned long long)(ts - *base * 1000) << 6) |
                              (unsigned long long)flags;
    q[0] = (unsigned char)(bits >> 24);
    q[1] = (unsigned char)(bits >> 16);
    q[2] = (unsigned char)(bits >> 8);
    q[3] = (unsigned char)bits;
}

/* The encoder's qualifier of a seconds timestamp (its table's entry: a borrowed reference)
 * and the row's hour in *base. */
static inline PyObject *seconds_qualifier(long long ts, int flags, PyObject *qualifiers,
                                          long long *base)
{
    *base = ts - ts % MAX_TIMESPAN;
    return PyTuple_GET_ITEM(qualifiers, ((ts - *base) << FLAG_BITS) | flags);
}

/* Value bytes and flags of a number in the common cases (an integer of 4 bytes or less,
 * a finite float); 0 when the caller must ask encode_point, -1 on an error. */
static int encode_number(int is_float, long long ival, double dval, PyObject *int1, int *flags,
                         PyObject **bytes)
{
    unsigned char buf[8];
    if (!is_float) {
        if (ival < -0x80000000LL || ival > 0x7FFFFFFFLL)
            return 0;
        if (ival >= -0x80 && ival <= 0x7F) {
            *flags = FLAGS_INT1;
            *bytes = PyTuple_GET_ITEM(int1, ival & 0xFF);
            Py_INCREF(*bytes);
            return 1;
        }
        if (ival >= -0x8000 && ival <= 0x7FFF) {
            *flags = FLAGS_INT2;
            buf[0] = (unsigned char)((ival >> 8) & 0xFF);
            buf[1] = (unsigned char)(ival & 0xFF);
            *bytes = PyBytes_FromStringAndSize((const char *)buf, 2);
        } else {
            *flags = FLAGS_INT4;
            unsigned long u = (unsigned long)(ival & 0xFFFFFFFFLL);
            buf[0] = (unsigned char)(u >> 24);
            buf[1] = (unsigned char)(u >> 16);
            buf[2] = (unsigned char)(u >> 8);
            buf[3] = (unsigned char)u;
            *bytes = PyBytes_FromStringAndSize((const char *)buf, 4);
        }
        return *bytes == NULL ? -1 : 1;
    }
    int size = double_value_bytes(dval, flags, buf);
    if (size <= 0)
        return size;
    *bytes = PyBytes_FromStringAndSize((const char *)buf, size);
    return *bytes == NULL ? -1 : 1;
}

/* encode_number of a Python int (not a bool) or float. */
static int encode_value(PyObject *value, PyObject *int1, int *flags, PyObject **bytes)
{
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        return encode_number(0, v, 0.0, int1, flags, bytes);
    }
    if (PyFloat_CheckExact(value))
        return encode_number(1, 0, PyFloat_AS_DOUBLE(value), int1, flags, bytes);
    return 0;
}

/* rows[row][qualifier] = value; 1 when the cell is new, 0 when replaced, -1 on error. */
static int put_cell(PyObject *rows, PyObject *row, PyObject *qualifier, PyObject *value)
{
    PyObject *cells = PyDict_GetItemWithError(rows, row);
    if (cells == NULL) {
        if (PyErr_Occurred())
            return -1;
        cells = PyDict_New();
        if (cells == NULL)
            return -1;
        if (PyDict_SetItem(cells, qualifier, value) < 0 || PyDict_SetItem(rows, row, cells) < 0) {
            Py_DECREF(cells);
            return -1;
        }
        Py_DECREF(cells);
        return 1;
    }
    Py_ssize_t before = PyDict_GET_SIZE(cells); /* one lookup: the size tells a new cell */
    if (PyDict_SetItem(cells, qualifier, value) < 0)
        return -1;
    return PyDict_GET_SIZE(cells) > before ? 1 : 0;
}

/* Whether qualifiers and int1 are the encoder's tables (tsd.codec.qualifier.ENCODER_TABLES:
 * every seconds qualifier by offset << FLAG_BITS | flags, the 256 one-byte values), the
 * sizes encode_cell indexes them by without a check. */
static inline int encoder_tables_ok(PyObject *qualifiers, PyObject *int1)
{
    return PyTuple_CheckExact(qualifiers) && PyTuple_CheckExact(int1) &&
           PyTuple_GET_SIZE(int1) == 256 &&
           PyTuple_GET_SIZE(qualifiers) >= ((MAX_TIMESPAN - 1) << FLAG_BITS | 0xF) + 1;
}

/* The cell of a point whose value encode_number took (flags, value bytes: a new reference,
 * handed on) at ts, 0 <= ts <= MAX_MS_TIMESTAMP: its row key, qualifier and value bytes, new
 * references in *row_out, *qualifier_out and *bytes_out; 0, or -1 with an exception set
 * (bytes released). */
static int number_cell(PyObject *series, long long ts, int flags, PyObject *bytes,
                       PyObject *qualifiers, PyObject **row_out, PyObject **qualifier_out,
                       PyObject **bytes_out)
{
    PyObject *qualifier;
    long long base;
    if (ts <= 0xFFFFFFFFLL) {
        qualifier = seconds_qualifier(ts, flags, qualifiers, &base);
        Py_INCREF(qualifier);
    } else {
        unsigned char qbuf[4];
        ms_qualifier(ts, flags, qbuf, &base);
        qualifier = PyBytes_FromStringAndSize((const char *)qbuf, 4);
        if (qualifier == NULL) {
            Py_DECREF(bytes);
            return -1;
        }
    }
    PyObject *row = series_row(series, base);
    if (row == NULL) {
        Py_DECREF(qualifier);
        Py_DECREF(bytes);
        return -1;
    }
    *row_out = row;
    *qualifier_out = qualifier;
    *bytes_out = bytes;
    return 0;
}

/* One point's cell: its row key, qualifier and value bytes, new references in *row_out,
 * *qualifier_out and *bytes_out; 0, or -1 with an exception set. */
static int encode_cell(PyObject *series, PyObject *timestamp, PyObject *value,
                       PyObject *qualifiers, PyObject *int1, PyObject *encode_point,
                       PyObject **row_out, PyObject **qualifier_out, PyObject **bytes_out)
{
    PyObject *bytes = NULL;
    int flags = 0;
    long long ts = -1;
    if (PyLong_CheckExact(timestamp)) {
        int overflow = 0;
        ts = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
        if (overflow || (ts == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            ts = -1;
        }
    }
    if (ts >= 0 && ts <= MAX_MS_TIMESTAMP) {
        int fast = encode_value(value, int1, &flags, &bytes);
        if (fast < 0)
            return -1;
        if (fast)
            return number_cell(series, ts, flags, bytes, qualifiers, row_out, qualifier_out,
                               bytes_out);
    }
    PyObject *encoded = PyObject_CallFunctionObjArgs(encode_point, timestamp, value, NULL);
    if (encoded == NULL)
        return -1;
    if (!PyTuple_Check(encoded) || PyTuple_GET_SIZE(encoded) != 3) {
        Py_DECREF(encoded);
        PyErr_SetString(PyExc_TypeError, "encode_point must return a 3-tuple");
        return -1;
    }
    PyObject *row = PyObject_CallMethodOneArg(series, row_key_name, PyTuple_GET_ITEM(encoded, 0));
    if (row == NULL) {
        Py_DECREF(encoded);
        return -1;
    }
    *row_out = row;
    *qualifier_out = PyTuple_GET_ITEM(encoded, 1);
    *bytes_out = PyTuple_GET_ITEM(encoded, 2);
    Py_INCREF(*qualifier_out);
    Py_INCREF(*bytes_out);
    Py_DECREF(encoded);
    return 0;
}

/* encode_cell of a float value and an integer timestamp given as C numbers: no Python
 * object for either unless encode_point must be asked (a value that is not finite, a
 * timestamp out of range). */
static inline int encode_cell_double(PyObject *series, long long ts, double value,
                              PyObject *qualifiers, PyObject *int1, PyObject *encode_point,
                              PyObject **row_out, PyObject **qualifier_out, PyObject **bytes_out)
{
    if (ts >= 0 && ts <= MAX_MS_TIMESTAMP) {
        PyObject *bytes = NULL;
        int flags = 0;
        int fast = encode_number(1, 0, value, int1, &flags, &bytes);
        if (fast < 0)
            return -1;
        if (fast)
            return number_cell(series, ts, flags, bytes, qualifiers, row_out, qualifier_out,
                               bytes_out);
    }
    PyObject *timestamp = PyLong_FromLongLong(ts), *number = PyFloat_FromDouble(value);
    int done = -1;
    if (timestamp != NULL && number != NULL)
        done = encode_cell(series, timestamp, number, qualifiers, int1, encode_point, row_out,
                           qualifier_out, bytes_out);
    Py_XDECREF(timestamp);
    Py_XDECREF(number);
    return done;
}

/* The bytes of a float sample's cell at ts (int64), not as Python objects: its row key (a
 * new reference in *row_out: a SeriesKey keeps it), its qualifier (at most 4 bytes) into q
 * and its value (at most 8) into v, their lengths in *q_len and *v_len; through
 * encode_cell_double's objects when encode_point must be asked. 0, or -1 with an
 * exception set. */
static inline int sample_cell(PyObject *series, long long ts, double value, PyObject *qualifiers,
                       PyObject *int1, PyObject *encode_point, PyObject **row_out,
                       unsigned char *q, int *q_len, unsigned char *v, int *v_len)
{
    if (ts >= 0 && ts <= MAX_MS_TIMESTAMP) {
        int flags = 0;
        int size = double_value_bytes(value, &flags, v);
        if (size < 0)
            return -1;
        if (size > 0) {
            long long base;
            if (ts <= 0xFFFFFFFFLL) {
                PyObject *known = seconds_qualifier(ts, flags, qualifiers, &base);
                if (!PyBytes_CheckExact(known) || PyBytes_GET_SIZE(known) > 4)
                    goto slow;
                *q_len = (int)PyBytes_GET_SIZE(known);
                memcpy(q, PyBytes_AS_STRING(known), (size_t)*q_len);
            } else {
                ms_qualifier(ts, flags, q, &base);
                *q_len = 4;
            }
            *v_len = size;
            *row_out = series_row(series, base);
            return *row_out == NULL ? -1 : 0;
        }
    }
slow:;
    PyObject *row, *qualifier, *bytes;
    if (encode_cell_double(series, ts, value, qualifiers, int1, encode_point, &row, &qualifier,
                           &bytes) < 0)
        return -1;
    int fits = PyBytes_CheckExact(qualifier) && PyBytes_CheckExact(bytes) &&
               PyBytes_GET_SIZE(qualifier) <= 4 && PyBytes_GET_SIZE(bytes) <= 8;
    if (fits) {
        *q_len = (int)PyBytes_GET_SIZE(qualifier);
        *v_len = (int)PyBytes_GET_SIZE(bytes);
        memcpy(q, PyBytes_AS_STRING(qualifier), (size_t)*q_len);
        memcpy(v, PyBytes_AS_STRING(bytes), (size_t)*v_len);
        *row_out = row;
    } else {
        PyErr_SetString(PyExc_ValueError, "a sample's cell beyond the format");
        Py_DECREF(row);
    }
    Py_DECREF(qualifier);
    Py_DECREF(bytes);
    return fits ? 0 : -1;
}

/* A column of 8-byte numbers (a C-contiguous buffer of int64, or of float64 when is_float)
 * as a view to release; 0, or -1 with a TypeError naming it (what). */
static inline int number_column(PyObject *column, Py_buffer *view, int is_float, const char *what)
{
    if (PyObject_GetBuffer(column, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError) &&
            !PyErr_ExceptionMatches(PyExc_BufferError))
            return -1;
        PyErr_Clear();
    } else {
        const char *format = view->format ? view->format : "B";
        if (*format == '<' || *format == '=' || *format == '@')
            format++;
        if (view->itemsize == 8 && format[0] != '\0' && format[1] == '\0' &&
            (is_float ? format[0] == 'd' : (format[0] == 'q' || format[0] == 'l')))
            return 0;
        PyBuffer_Release(view);
    }
    PyErr_Format(PyExc_TypeError, "%s must be %s column", what, is_float ? "a float64" : "an int64");
    return -1;
}

/* One point into rows; cells added (0 or 1), or -1 with an exception set. */
static inline int encode_one(PyObject *rows, PyObject *series, PyObject *timestamp,
                             PyObject *value, PyObject *qualifiers, PyObject *int1,
                             PyObject *encode_point)
{
    PyObject *row, *qualifier, *bytes;
    if (encode_cell(series, timestamp, value, qualifiers, int1, encode_point, &row, &qualifier,
                    &bytes) < 0)
        return -1;
    int added = put_cell(rows, row, qualifier, bytes);
    Py_DECREF(row);
    Py_DECREF(qualifier);
    Py_DECREF(bytes);
    return added;
}

/* The names this header looks up; 0, or -1 with an exception set. */
static int format_init(void)
{
    row_key_name = PyUnicode_InternFromString("row_key");
    return row_key_name == NULL ? -1 : 0;
}

#endif
