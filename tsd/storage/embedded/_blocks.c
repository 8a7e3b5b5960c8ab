/* LMDB entries -> a CellBlock's columns, at compiled speed (tsd/storage/embedded/blocks.py).
 *
 * Why: blocks.py's Python loop spends about a microsecond of key handling per row (split,
 * unescape, family lookup, appends) and joins the cells afterwards; a day of 1,000 series
 * is 24,000 rows per query. This walks the cursor's (key, value) pairs once and copies the
 * qualifiers and values straight into the joined buffers. Same rows as the Python loop
 * (tests/storage/test_contract.py compares scan_blocks with scan, with and without this).
 *
 * scan_entries(entries, stop, max_rows, max_cells, names) reads from the iterator `entries`
 * (an lmdb cursor's iternext()) the way _BlockBuilder.read does without a row filter:
 * `stop` is the stop key or None, `names` maps a stored family name to its index in the
 * block or None (not wanted). Returns (keys, counts, family_index, qualifier_lengths,
 * value_lengths, qualifiers, values, batch_cells, next_key) with the integer columns as
 * bytes of int64 (family_index: uint8) and next_key the row to resume at (None: done),
 * or the string "corrupt" for a key or bucket it cannot read (the caller raises).
 *
 * The key layout is tsd/storage/embedded/keys.py's: escape(row) 00 00 family 00 qualifier,
 * 00 escaped as 00 FF; keys of exactly KEY_LIMIT bytes are buckets whose value lists
 * [u32 qualifier length][qualifier][u32 value length][value].
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KEY_LIMIT 511

/* A bytes object grown in place (its only reference is ours): the joined qualifiers and
 * values are handed out without a final copy. */
typedef struct {
    PyObject *obj;
    Py_ssize_t n, cap;
} Bytes;

static int bytes_add(Bytes *b, const void *src, Py_ssize_t len) {
    if (b->n + len > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 65536;
        while (cap < b->n + len) cap *= 2;
        if (!b->obj) {
            b->obj = PyBytes_FromStringAndSize(NULL, cap);
            if (!b->obj) return -1;
        } else if (_PyBytes_Resize(&b->obj, cap) < 0) {
            return -1;
        }
        b->cap = cap;
    }
    if (len) memcpy(PyBytes_AS_STRING(b->obj) + b->n, src, (size_t)len);
    b->n += len;
    return 0;
}

static int bytes_i64(Bytes *b, int64_t v) { return bytes_add(b, &v, 8); }

/* The bytes added so far (valid until the next add). */
#define BYTES_AT(b) PyBytes_AS_STRING((b).obj)

/* The bytes object of exactly what was added (a new reference); b is emptied. */
static PyObject *bytes_take(Bytes *b) {
    if (!b->obj) return PyBytes_FromStringAndSize(NULL, 0);
    if (b->n != b->cap && _PyBytes_Resize(&b->obj, b->n) < 0) return NULL;
    PyObject *obj = b->obj;
    b->obj = NULL;
    b->n = b->cap = 0;
    return obj;
}

typedef struct {
    Bytes counts, findex, qlen, vlen, quals, vals;
    PyObject *keys;
    Py_ssize_t cells;
} Out;

static int add_cell(Out *o, int family, const char *q, Py_ssize_t ql, const char *v,
                    Py_ssize_t vl) {
    unsigned char f = (unsigned char)family;
    if (bytes_add(&o->findex, &f, 1) < 0 || bytes_i64(&o->qlen, ql) < 0 ||
        bytes_i64(&o->vlen, vl) < 0 ||
        bytes_add(&o->quals, q, ql) < 0 || bytes_add(&o->vals, v, vl) < 0)
        return -1;
    return 0;
}

/* The cells of a bucket value; -2 when it is corrupt. */
static Py_ssize_t add_bucket(Out *o, int family, const unsigned char *v, Py_ssize_t n) {
    Py_ssize_t pos = 0, added = 0;
    while (pos < n) {
        if (pos + 4 > n) return -2;
        uint32_t ql = ((uint32_t)v[pos] << 24) | ((uint32_t)v[pos + 1] << 16) |
                      ((uint32_t)v[pos + 2] << 8) | v[pos + 3];
        pos += 4;
        if ((Py_ssize_t)ql > n - pos) return -2;
        const unsigned char *q = v + pos;
        pos += ql;
        if (pos + 4 > n) return -2;
        uint32_t vl = ((uint32_t)v[pos] << 24) | ((uint32_t)v[pos + 1] << 16) |
                      ((uint32_t)v[pos + 2] << 8) | v[pos + 3];
        pos += 4;
        /* decode_bucket slices past the end without complaint: keep what is there */
        Py_ssize_t take = (Py_ssize_t)vl <= n - pos ? (Py_ssize_t)vl : n - pos;
        if (add_cell(o, family, (const char *)q, ql, (const char *)v + pos, take) < 0) return -1;
        pos += vl;
        added++;
    }
    return added;
}

/* The unescaped row of escaped bytes (00 FF -> 00). */
static PyObject *unescape(const unsigned char *p, Py_ssize_t n) {
    PyObject *row = PyBytes_FromStringAndSize(NULL, n);
    if (!row) return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(row);
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        w[m++] = p[i];
        if (p[i] == 0 && i + 1 < n && p[i + 1] == 0xFF) i++;
    }
    if (m != n && _PyBytes_Resize(&row, m) < 0) return NULL;
    return row;
}

static PyObject *scan_entries(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *entries, *stop, *names;
    Py_ssize_t max_rows, max_cells;
    if (!PyArg_ParseTuple(args, "OOnnO!", &entries, &stop, &max_rows, &max_cells, &PyDict_Type,
                          &names))
        return NULL;
    if (stop != Py_None && !PyBytes_Check(stop)) {
        PyErr_SetString(PyExc_TypeError, "stop must be bytes or None");
        return NULL;
    }
    Out o;
    memset(&o, 0, sizeof o);
    PyObject *result = NULL, *next_key = NULL, *item = NULL;
    o.keys = PyList_New(0);
    if (!o.keys) return NULL;
    /* the current row's prefix (escaped row + 00 00) and family prefix, copied */
    Bytes prefix = {0}, fprefix = {0};
    int family = -1, corrupt = 0;
    Py_ssize_t qualifier_at = 0, row_cells = 0, batch_cells = 0;
    const char *sk = stop == Py_None ? NULL : PyBytes_AS_STRING(stop);
    Py_ssize_t sn = stop == Py_None ? 0 : PyBytes_GET_SIZE(stop);
    while ((item = PyIter_Next(entries)) != NULL) {
        PyObject *kobj, *vobj;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyBytes_Check(kobj = PyTuple_GET_ITEM(item, 0)) ||
            !PyBytes_Check(vobj = PyTuple_GET_ITEM(item, 1))) {
            PyErr_SetString(PyExc_TypeError, "entries must be (bytes, bytes) pairs");
            goto fail;
        }
        const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(kobj);
        Py_ssize_t kn = PyBytes_GET_SIZE(kobj);
        const char *v = PyBytes_AS_STRING(vobj);
        Py_ssize_t vn = PyBytes_GET_SIZE(vobj);
        if (fprefix.n && kn >= fprefix.n && memcmp(k, BYTES_AT(fprefix), (size_t)fprefix.n) == 0 &&
            kn < KEY_LIMIT) {
            if (family >= 0) {
                if (add_cell(&o, family, (const char *)k + qualifier_at, kn - qualifier_at, v,
                             vn) < 0)
                    goto fail;
                row_cells++;
            }
            Py_CLEAR(item);
            continue;
        }
        if (!prefix.n || kn < prefix.n || memcmp(k, BYTES_AT(prefix), (size_t)prefix.n) != 0) {
            if (row_cells) {
                if (bytes_i64(&o.counts, row_cells) < 0) goto fail;
                batch_cells += row_cells;
                row_cells = 0;
            } else if (prefix.n) {
                if (PyList_SetSlice(o.keys, PyList_GET_SIZE(o.keys) - 1, PyList_GET_SIZE(o.keys),
                                    NULL) < 0)
                    goto fail;
            }
            if (sk) {
                Py_ssize_t m = kn < sn ? kn : sn;
                int c = memcmp(k, sk, (size_t)m);
                if (c > 0 || (c == 0 && kn >= sn)) break;
            }
            Py_ssize_t end = -1;
            for (Py_ssize_t i = 0; i + 1 < kn; i++) {
                if (k[i] == 0 && k[i + 1] == 0) {
                    end = i;
                    break;
                }
                if (k[i] == 0) i++; /* 00 FF: an escaped 00 */
            }
            if (end < 0) {
                corrupt = 1;
                break;
            }
            prefix.n = 0;
            fprefix.n = 0;
            if (bytes_add(&prefix, k, end + 2) < 0) goto fail;
            if (PyList_GET_SIZE(o.keys) >= max_rows || batch_cells >= max_cells) {
                next_key = PyBytes_FromStringAndSize(BYTES_AT(prefix), prefix.n);
                if (!next_key) goto fail;
                prefix.n = 0; /* nothing pending */
                break;
            }
            PyObject *row = unescape(k, end);
            if (!row) goto fail;
            int appended = PyList_Append(o.keys, row);
            Py_DECREF(row);
            if (appended < 0) goto fail;
        }
        Py_ssize_t family_at = prefix.n, family_end = -1;
        for (Py_ssize_t i = family_at; i < kn; i++) {
            if (k[i] == 0) {
                family_end = i;
                break;
            }
        }
        if (family_end < 0) {
            corrupt = 1;
            break;
        }
        PyObject *stored = PyBytes_FromStringAndSize((const char *)k + family_at,
                                                     family_end - family_at);
        if (!stored) goto fail;
        PyObject *found = PyDict_GetItemWithError(names, stored);
        Py_DECREF(stored);
        if (!found) {
            if (PyErr_Occurred()) goto fail;
            corrupt = 1;
            break;
        }
        family = found == Py_None ? -1 : (int)PyLong_AsLong(found);
        if (family == -1 && PyErr_Occurred()) goto fail;
        qualifier_at = family_end + 1;
        fprefix.n = 0;
        if (bytes_add(&fprefix, k, qualifier_at) < 0) goto fail;
        if (family >= 0) {
            if (kn == KEY_LIMIT) {
                Py_ssize_t added = add_bucket(&o, family, (const unsigned char *)v, vn);
                if (added == -1) goto fail;
                if (added == -2) {
                    corrupt = 1;
                    break;
                }
                row_cells += added;
            } else {
                if (add_cell(&o, family, (const char *)k + qualifier_at, kn - qualifier_at, v,
                             vn) < 0)
                    goto fail;
                row_cells++;
            }
        }
        Py_CLEAR(item);
    }
    Py_CLEAR(item);
    if (PyErr_Occurred()) goto fail;
    if (corrupt) {
        result = PyUnicode_FromString("corrupt");
        goto done;
    }
    if (row_cells) {
        if (bytes_i64(&o.counts, row_cells) < 0) goto fail;
        batch_cells += row_cells;
    } else if (prefix.n && PyList_GET_SIZE(o.keys) > (Py_ssize_t)(o.counts.n / 8)) {
        if (PyList_SetSlice(o.keys, PyList_GET_SIZE(o.keys) - 1, PyList_GET_SIZE(o.keys), NULL) <
            0)
            goto fail;
    }
    PyObject *cols[6] = {NULL};
    Bytes *from[6] = {&o.counts, &o.findex, &o.qlen, &o.vlen, &o.quals, &o.vals};
    for (int i = 0; i < 6; i++) {
        cols[i] = bytes_take(from[i]);
        if (!cols[i]) {
            for (int j = 0; j < i; j++) Py_DECREF(cols[j]);
            goto fail;
        }
    }
    result = Py_BuildValue("(ONNNNNNnO)", o.keys, cols[0], cols[1], cols[2], cols[3], cols[4],
                           cols[5], batch_cells, next_key ? next_key : Py_None);
    goto done;
fail:
    result = NULL;
done:
    Py_XDECREF(item);
    Py_XDECREF(next_key);
    Py_DECREF(o.keys);
    Bytes *owned[8] = {&o.counts, &o.findex, &o.qlen, &o.vlen, &o.quals, &o.vals, &prefix, &fprefix};
    for (int i = 0; i < 8; i++) Py_XDECREF(owned[i]->obj);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_entries", scan_entries, METH_VARARGS,
     "LMDB (key, value) entries -> a CellBlock's columns (see the file's comment)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_blocks", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__blocks(void) { return PyModule_Create(&module); }
