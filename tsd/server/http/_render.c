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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The decimal digits of v at p (at most 20 and a sign); their count. */
static Py_ssize_t write_int(char *p, int64_t v) {
    char tmp[24];
    Py_ssize_t n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    Py_ssize_t k = 0;
    if (v < 0) p[k++] = '-';
    while (n) p[k++] = tmp[--n];
    return k;
}

static PyObject *dps_json(PyObject *self, PyObject *args) {
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
    Py_ssize_t commas = 0;
    for (Py_ssize_t i = 0; i < vlen; i++) commas += v[i] == ',';
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
    Py_ssize_t at = 0, from = 0;
    const int64_t *t = (const int64_t *)ts.buf;
    Py_BEGIN_ALLOW_THREADS
    p[at++] = arrays ? '[' : '{';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t to = from;
        while (to < vlen && v[to] != ',') to++;
        if (i) p[at++] = ',';
        p[at++] = arrays ? '[' : '"';
        at += write_int(p + at, t[i]);
        if (arrays) {
            p[at++] = ',';
        } else {
            p[at++] = '"';
            p[at++] = ':';
        }
        memcpy(p + at, v + from, (size_t)(to - from));
        at += to - from;
        if (arrays) p[at++] = ']';
        from = to + 1;
    }
    p[at++] = arrays ? ']' : '}';
    Py_END_ALLOW_THREADS
    _PyBytes_Resize(&out, at);
done:
    PyBuffer_Release(&ts);
    PyBuffer_Release(&values);
    return out;
}

static PyMethodDef methods[] = {
    {"dps_json", dps_json, METH_VARARGS,
     "dps_json(timestamps, values, arrays) -> bytes | None: a series' dps as JSON"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_render", NULL, -1, methods};

PyMODINIT_FUNC PyInit__render(void) { return PyModule_Create(&module); }
