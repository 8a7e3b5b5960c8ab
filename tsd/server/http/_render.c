/* A result series' "dps" written at compiled speed (tsd/server/http/render.py).
 *
 * Why: render.py's Python path builds one bytes object per point ('"%d":%s' % pair) and
 * joins them; a group-by over 10,000 series answers 240,000 points and spent more time
 * there than in the query. Here the timestamps (an int64 buffer) and the values' JSON texts
 * (one buffer, orjson's, comma-separated: no number, null or "NaN" text holds a comma) are
 * interleaved in one pass, no object per point.
 *
 * dps_json(timestamps, values, arrays): with arrays false, {"t1":v1,"t2":v2,...}; true,
 * [[t1,v1],[t2,v2],...]. Returns None when the values do not split into one text per
 * timestamp (the caller then takes the Python path, which raises). render.py's Python path
 * is the spec: tests/server/test_render_native.py checks both give the same bytes.
 *
 * dps_json_many(timestamps, values, counts, arrays): the dps of many series at once, as a
 * list of bytes (one per series, counts[k] points each, end to end in timestamps and
 * values): a group-by over 10,000 series renders its answers in one call rather than a
 * call (and an orjson pass, a NaN check) per series. None when the values do not split
 * into one text per timestamp. Its spec is dps_json of each series alone.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* "00" to "99": two digits per division (a timestamp's ten digits in five steps). */
static const char PAIRS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* The decimal digits of v at p (at most 20 and a sign); their count. Written in place
 * from the last pair back: no division per digit, no copy of a call's length. */
static Py_ssize_t write_int(char *p, int64_t v) {
    static const uint64_t POWERS[20] = {1ULL,
                                        10ULL,
                                        100ULL,
                                        1000ULL,
                                        10000ULL,
                                        100000ULL,
                                        1000000ULL,
                                        10000000ULL,
                                        100000000ULL,
                                        1000000000ULL,
                                        10000000000ULL,
                                        100000000000ULL,
                                        1000000000000ULL,
                                        10000000000000ULL,
                                        100000000000000ULL,
                                        1000000000000000ULL,
                                        10000000000000000ULL,
                                        100000000000000000ULL,
                                        1000000000000000000ULL,
                                        10000000000000000000ULL};
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    Py_ssize_t k = 0;
    if (v < 0) p[k++] = '-';
    int digits = 1;
    while (digits < 20 && u >= POWERS[digits]) digits++;
    char *s = p + k + digits;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        s -= 2;
        s[0] = PAIRS[2 * r];
        s[1] = PAIRS[2 * r + 1];
    }
    if (u >= 10) {
        s[-2] = PAIRS[2 * u];
        s[-1] = PAIRS[2 * u + 1];
    } else {
        s[-1] = (char)('0' + u);
    }
    return k + digits;
}

/* One series' dps at p: n stamps from t, their texts from v (n texts, commas between,
 * possibly followed by more texts after a comma); the bytes written. *used is set to the
 * bytes of v its texts took (without the comma after them). p has room for
 * 2 + (those bytes) + 26 n. */
static Py_ssize_t write_dps(char *p, const int64_t *t, Py_ssize_t n, const char *v,
                            Py_ssize_t vlen, int arrays, Py_ssize_t *used) {
    Py_ssize_t at = 0, from = 0;
    p[at++] = arrays ? '[' : '{';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t to = from; /* a value's text is a few bytes: copied as it is found */
        if (i) p[at++] = ',';
        p[at++] = arrays ? '[' : '"';
        at += write_int(p + at, t[i]);
        if (arrays) {
            p[at++] = ',';
        } else {
            p[at++] = '"';
            p[at++] = ':';
        }
        while (to < vlen && v[to] != ',') p[at++] = v[to++];
        if (arrays) p[at++] = ']';
        *used = to;
        from = to + 1;
    }
    if (!n) *used = 0;
    p[at++] = arrays ? ']' : '}';
    return at;
}

/* Commas in v[0:vlen]. */
static Py_ssize_t count_commas(const char *v, Py_ssize_t vlen) {
    Py_ssize_t commas = 0;
    for (Py_ssize_t i = 0; i < vlen; i++) commas += v[i] == ',';
    return commas;
}

static PyObject *dps_json(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer ts, values;
    int arrays;
    if (!PyArg_ParseTuple(args, "y*y*p", &ts, &values, &arrays)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = ts.len / (Py_ssize_t)sizeof(int64_t);
    if (ts.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "timestamps: not an int64 buffer");
        goto done;
    }
    const char *v = (const char *)values.buf;
    Py_ssize_t vlen = values.len;
    /* one text per timestamp: n - 1 commas (none in an empty answer) */
    Py_ssize_t commas = count_commas(v, vlen);
    if ((n == 0 && vlen != 0) || (n > 0 && (commas != n - 1 || vlen == 0))) {
        Py_INCREF(Py_None);
        out = Py_None;
        goto done;
    }
    /* per point: the timestamp (<= 20 digits and a sign), 4 bytes of punctuation, a comma */
    Py_ssize_t cap = 2 + vlen + n * 26;
    out = PyBytes_FromStringAndSize(NULL, cap);
    if (out == NULL) goto done;
    char *p = PyBytes_AS_STRING(out);
    Py_ssize_t at, used;
    const int64_t *t = (const int64_t *)ts.buf;
    Py_BEGIN_ALLOW_THREADS
    at = write_dps(p, t, n, v, vlen, arrays, &used);
    Py_END_ALLOW_THREADS
    _PyBytes_Resize(&out, at);
done:
    PyBuffer_Release(&ts);
    PyBuffer_Release(&values);
    return out;
}

static PyObject *dps_json_many(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer ts, values, counts;
    int arrays;
    if (!PyArg_ParseTuple(args, "y*y*y*p", &ts, &values, &counts, &arrays)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = ts.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t m = counts.len / (Py_ssize_t)sizeof(int64_t);
    if (ts.len % (Py_ssize_t)sizeof(int64_t) || counts.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "timestamps, counts: not int64 buffers");
        goto done;
    }
    const int64_t *t = (const int64_t *)ts.buf;
    const int64_t *c = (const int64_t *)counts.buf;
    const char *v = (const char *)values.buf;
    Py_ssize_t vlen = values.len;
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        if (c[k] < 0) total = -1;
        if (total < 0) break;
        total += (Py_ssize_t)c[k];
    }
    Py_ssize_t commas = count_commas(v, vlen);
    if (total != n || (n == 0 && vlen != 0) || (n > 0 && (commas != n - 1 || vlen == 0))) {
        Py_INCREF(Py_None);
        out = Py_None;
        goto done;
    }
    out = PyList_New(m);
    if (out == NULL) goto done;
    /* per point: the timestamp (<= 20 digits and a sign), 4 bytes of punctuation, a comma;
     * a series' texts are at most all the texts */
    Py_ssize_t scratch_cap = 0;
    for (Py_ssize_t k = 0; k < m; k++)
        if (2 + 26 * (Py_ssize_t)c[k] > scratch_cap) scratch_cap = 2 + 26 * (Py_ssize_t)c[k];
    scratch_cap += vlen;
    char *scratch = PyMem_Malloc((size_t)scratch_cap);
    if (scratch == NULL) {
        PyErr_NoMemory();
        Py_CLEAR(out);
        goto done;
    }
    Py_ssize_t point = 0, from = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        Py_ssize_t count = (Py_ssize_t)c[k], used = 0;
        Py_ssize_t at = write_dps(scratch, t + point, count, v + from, vlen - from, arrays, &used);
        PyObject *one = PyBytes_FromStringAndSize(scratch, at);
        if (one == NULL) {
            PyMem_Free(scratch);
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, k, one);
        point += count;
        if (count) from += used + 1;
    }
    PyMem_Free(scratch);
done:
    PyBuffer_Release(&ts);
    PyBuffer_Release(&values);
    PyBuffer_Release(&counts);
    return out;
}

static PyMethodDef methods[] = {
    {"dps_json", dps_json, METH_VARARGS,
     "dps_json(timestamps, values, arrays) -> bytes | None: a series' dps as JSON"},
    {"dps_json_many", dps_json_many, METH_VARARGS,
     "dps_json_many(timestamps, values, counts, arrays) -> list[bytes] | None: many series'"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_render", NULL, -1, methods};

PyMODINIT_FUNC PyInit__render(void) { return PyModule_Create(&module); }
