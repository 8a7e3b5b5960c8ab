/* Data cells in seconds -> points, at compiled speed (the common read of tsd.query.decode).
 *
 * Why: decode.py's numpy path makes about twenty passes over per-point arrays (units, flags,
 * lengths, value positions, gathers, row checks); at 8.64 M points that was 260 ms of a
 * query. This walks the cells once. It takes only what needs no merging or fix-up beyond
 * OpenTSDB's single-cell value length rule, and answers None for anything else, which the
 * numpy path (and its scalar fallback) then decodes: tests/query/test_decode.py checks both
 * against the scalar reference on random rows.
 *
 * decode_seconds(qualifiers, values, qlen, vlen, counts, base_ms) with the CellBlock's
 * joined qualifiers and values, int64 buffers of per-cell qualifier and value lengths,
 * cells per row and each row's base time in ms. Accepted: every cell a single seconds point
 * (2-byte qualifier; the value's length is the point's, a legacy 8-byte float whose first
 * four bytes are zero is read from its last four) or a compacted cell of seconds qualifiers
 * (even length >= 4, no unit >= 0xF000, values of the flags' lengths plus one meta byte);
 * readable lengths (floats 4 or 8 bytes, integers 1, 2, 4, 8); offsets strictly increasing
 * through each row's cells. Returns (timestamps int64, doubles float64, ints int64, is_int
 * uint8, row_offsets int64, any_int) as bytearrays (writable under numpy; ints and is_int
 * None when no point is an integer), or None. decode_runs (below) does the same for the
 * head's clean rows (tsd/query/head_rows.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int valid_length(int is_float, Py_ssize_t len) {
    if (is_float) return len == 4 || len == 8;
    return len == 1 || len == 2 || len == 4 || len == 8;
}

/* The 8 bytes at p as a big-endian word (fewer when `avail` < 8: zero-padded). */
static inline uint64_t load_be64(const unsigned char *p, Py_ssize_t avail) {
    uint64_t w = 0;
    if (avail >= 8) {
        memcpy(&w, p, 8);
        return __builtin_bswap64(w);
    }
    for (Py_ssize_t k = 0; k < 8; k++) w = (w << 8) | (k < avail ? p[k] : 0);
    return w;
}

/* The value of `len` big-endian bytes at p: sets *d (double) and *i (exact long, 0 for
 * floats). Without branches on the type: stored types mix at random (4-byte floats where
 * exact, 8-byte otherwise) and a mispredicted branch per point cost more than the work. */
static inline void read_value(const unsigned char *p, Py_ssize_t avail, Py_ssize_t len,
                              int is_float, double *d, int64_t *i) {
    uint64_t w = load_be64(p, avail);
    int shift = 64 - 8 * (int)len;
    int64_t v = (int64_t)w >> shift;
    uint32_t u = (uint32_t)(w >> 32);
    float f;
    double d8, d4;
    memcpy(&f, &u, 4);
    memcpy(&d8, &w, 8);
    d4 = (double)f;
    double df = len == 8 ? d8 : d4;
    *i = is_float ? 0 : v;
    *d = is_float ? df : (double)v;
}

/* The arrays a decode fills: timestamps, doubles and row offsets, and once an integer is
 * met (most data is all doubles) the exact integers and the is-integer flags. */
typedef struct {
    PyObject *ts, *d, *i, *isi, *ro;
    int64_t *tsv, *iv, *rov;
    double *dv;
    unsigned char *isiv;
} Out;

static int start_out(Out *o, Py_ssize_t npoints, Py_ssize_t nrows) {
    memset(o, 0, sizeof(*o));
    o->ts = PyByteArray_FromStringAndSize(NULL, npoints * 8);
    o->d = PyByteArray_FromStringAndSize(NULL, npoints * 8);
    o->ro = PyByteArray_FromStringAndSize(NULL, (nrows + 1) * 8);
    if (!o->ts || !o->d || !o->ro) return -1;
    o->tsv = (int64_t *)PyByteArray_AS_STRING(o->ts);
    o->dv = (double *)PyByteArray_AS_STRING(o->d);
    o->rov = (int64_t *)PyByteArray_AS_STRING(o->ro);
    o->rov[0] = 0;
    return 0;
}

/* Point `out` (seconds offset `off` in a row of base `base_ms`) from the value at p:
 * allocates the integer arrays at the first integer, the points before it being doubles. */
static inline int put_point(Out *o, Py_ssize_t out, Py_ssize_t npoints, int64_t base_ms,
                            long off, const unsigned char *p, Py_ssize_t avail,
                            Py_ssize_t width, int is_float) {
    int64_t scratch = 0;
    if (!is_float && o->iv == NULL) {
        o->i = PyByteArray_FromStringAndSize(NULL, npoints * 8);
        o->isi = PyByteArray_FromStringAndSize(NULL, npoints);
        if (!o->i || !o->isi) return -1;
        o->iv = (int64_t *)PyByteArray_AS_STRING(o->i);
        o->isiv = (unsigned char *)PyByteArray_AS_STRING(o->isi);
        memset(o->iv, 0, (size_t)out * 8);
        memset(o->isiv, 0, (size_t)out);
    }
    read_value(p, avail, width, is_float, &o->dv[out], o->iv ? &o->iv[out] : &scratch);
    if (o->isiv) o->isiv[out] = !is_float;
    o->tsv[out] = base_ms + (int64_t)off * 1000;
    return 0;
}

/* The answer for `status` (1 decoded, 0 not taken: None, -1 a Python error), the arrays'
 * references released. */
static PyObject *finish(Out *o, int status) {
    PyObject *result = NULL;
    if (status == 0) {
        Py_INCREF(Py_None);
        result = Py_None;
    } else if (status > 0) {
        int any_int = o->iv != NULL;
        result = Py_BuildValue("(OOOOOi)", o->ts, o->d, any_int ? o->i : Py_None,
                               any_int ? o->isi : Py_None, o->ro, any_int);
    }
    Py_XDECREF(o->ts);
    Py_XDECREF(o->d);
    Py_XDECREF(o->i);
    Py_XDECREF(o->isi);
    Py_XDECREF(o->ro);
    return result;
}

/* decode_seconds' walk: 1 decoded, 0 not taken, -1 error. */
static int walk_cells(Out *o, const Py_buffer *q, const Py_buffer *v, const int64_t *qlen,
                      const int64_t *vlen, Py_ssize_t ncells, const int64_t *counts,
                      Py_ssize_t nrows, const int64_t *base) {
    const unsigned char *qb = q->buf, *vb = v->buf;
    Py_ssize_t npoints = q->len / 2, qpos = 0, vpos = 0, cell = 0, out = 0;
    for (Py_ssize_t r = 0; r < nrows; r++) {
        long last = -1;
        for (int64_t c = 0; c < counts[r]; c++, cell++) {
            if (cell >= ncells) return 0;
            Py_ssize_t len = (Py_ssize_t)qlen[cell], vlen_c = (Py_ssize_t)vlen[cell];
            if (len < 2 || len % 2 || qpos + len > q->len || vpos + vlen_c > v->len) return 0;
            const unsigned char *qp = qb + qpos, *vp = vb + vpos;
            /* A single point (2-byte qualifier) takes its value's length; a compacted
             * cell's flags give each length, and one meta byte follows its values. */
            int single = len == 2;
            Py_ssize_t used = 0;
            for (Py_ssize_t k = 0; k < len; k += 2) {
                unsigned unit = ((unsigned)qp[k] << 8) | qp[k + 1];
                if (unit >= 0xF000) return 0;
                long off = (long)(unit >> 4);
                int is_float = (unit & 0x8) != 0;
                Py_ssize_t at = used, width = single ? vlen_c : (Py_ssize_t)(unit & 0x7) + 1;
                if (single && (unit & 0xF) == 0xB && width == 8) { /* legacy 4-byte float */
                    if (vp[0] | vp[1] | vp[2] | vp[3]) return 0;
                    at = 4;
                    width = 4;
                }
                if (!valid_length(is_float, width) || off <= last) return 0;
                if (!single && used + width > vlen_c - 1) return 0;
                if (put_point(o, out, npoints, base[r], off, vp + at, v->len - (vpos + at), width,
                              is_float) < 0)
                    return -1;
                out++;
                used += width;
                last = off;
            }
            if (!single && used != vlen_c - 1) return 0;
            qpos += len;
            vpos += vlen_c;
        }
        o->rov[r + 1] = out;
    }
    return cell == ncells && out == npoints;
}

static PyObject *decode_seconds(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer q, v, ql, vl, cn, bm;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*", &q, &v, &ql, &vl, &cn, &bm)) return NULL;
    Out o;
    Py_ssize_t ncells = ql.len / 8, nrows = cn.len / 8;
    int status = 0;
    if (vl.len / 8 == ncells && bm.len / 8 == nrows && q.len % 2 == 0) {
        status = start_out(&o, q.len / 2, nrows) < 0
                     ? -1
                     : walk_cells(&o, &q, &v, ql.buf, vl.buf, ncells, cn.buf, nrows, bm.buf);
    } else {
        memset(&o, 0, sizeof(o));
    }
    PyBuffer_Release(&q);
    PyBuffer_Release(&v);
    PyBuffer_Release(&ql);
    PyBuffer_Release(&vl);
    PyBuffer_Release(&cn);
    PyBuffer_Release(&bm);
    return finish(&o, status);
}

/* decode_runs' walk: 1 decoded, 0 not taken, -1 error. */
static int walk_runs(Out *o, const Py_buffer *q, const Py_buffer *v, const int64_t *counts,
                     Py_ssize_t nrows, const int64_t *base) {
    const unsigned char *qb = q->buf, *vb = v->buf;
    Py_ssize_t npoints = q->len / 2, vpos = 0, out = 0;
    for (Py_ssize_t r = 0; r < nrows; r++) {
        long last = -1;
        if (counts[r] < 0 || out + counts[r] > npoints) return 0;
        for (int64_t c = 0; c < counts[r]; c++) {
            const unsigned char *qp = qb + 2 * out;
            unsigned unit = ((unsigned)qp[0] << 8) | qp[1];
            if (unit >= 0xF000) return 0;
            long off = (long)(unit >> 4);
            int is_float = (unit & 0x8) != 0;
            Py_ssize_t width = (Py_ssize_t)(unit & 0x7) + 1;
            if (!valid_length(is_float, width) || off <= last || vpos + width > v->len) return 0;
            if (put_point(o, out, npoints, base[r], off, vb + vpos, v->len - vpos, width,
                          is_float) < 0)
                return -1;
            out++;
            vpos += width;
            last = off;
        }
        o->rov[r + 1] = out;
    }
    return out == npoints && vpos == v->len;
}

/* decode_runs(qualifiers, values, counts, base_ms): the head's clean rows of seconds points
 * (tsd.head.HeadRuns), row after row: per row `counts[r]` 2-byte qualifiers, each value as
 * long as its flags say, no meta byte, offsets strictly increasing. The same tuple as
 * decode_seconds, or None for anything else (the numpy path in tsd.query.head_rows then
 * decodes it). */
static PyObject *decode_runs(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer q, v, cn, bm;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &q, &v, &cn, &bm)) return NULL;
    Out o;
    Py_ssize_t nrows = cn.len / 8;
    int status = 0;
    if (bm.len / 8 == nrows && q.len % 2 == 0) {
        status = start_out(&o, q.len / 2, nrows) < 0
                     ? -1
                     : walk_runs(&o, &q, &v, cn.buf, nrows, bm.buf);
    } else {
        memset(&o, 0, sizeof(o));
    }
    PyBuffer_Release(&q);
    PyBuffer_Release(&v);
    PyBuffer_Release(&cn);
    PyBuffer_Release(&bm);
    return finish(&o, status);
}

static PyMethodDef methods[] = {
    {"decode_seconds", decode_seconds, METH_VARARGS,
     "Seconds data cells -> (timestamps, doubles, ints, is_int, row_offsets, any_int) or None"},
    {"decode_runs", decode_runs, METH_VARARGS,
     "The head's clean seconds rows -> the same tuple as decode_seconds, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_decode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__decode(void) { return PyModule_Create(&module); }
