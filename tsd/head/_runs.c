/* A batch's runs as the head checks and joins them, and a snapshot's rows parted, in C:
 * tsd.head.head.python_run_columns, python_join_repeated_rows and python_join_parts (the
 * specifications and the fallbacks when this is not built; tests/head/test_run_bounds.py
 * and tests/head/test_join_parts.py check both agree), and a row's sealed points packed
 * (tsd.head.pack's specification; tests/head/test_pack.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_packed.h" /* PackState, get_varint, unzz, read_state */

/* -- a batch's runs as the head checks them ---------------------------------------------- */

/* A run's qualifiers (bytes, ``count`` cells) checked: 1 when they are all 2-byte or all
 * 4-byte and their offsets strictly increase, else 0 (an empty run too); its first and
 * last offset in ms in *first and *last (0 and 0 unless of one width). */
static int offset_bounds(PyObject *qualifiers, long long count, long long *first, long long *last)
{
    const unsigned char *q = (const unsigned char *)PyBytes_AS_STRING(qualifiers);
    Py_ssize_t size = PyBytes_GET_SIZE(qualifiers);
    int width = count <= 0 ? 0 : size == 2 * count ? 2 : size == 4 * count ? 4 : 0;
    int increasing = width != 0;
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
            *first = offset;
        else if (offset <= *last)
            increasing = 0;
        *last = offset;
    }
    return increasing;
}

/* run_columns(runs) -> bytes, or None
 *   tsd.head.head.python_run_columns (the specification): per run, six native int64s in
 *   one buffer: its cell count, its qualifiers' and its values' lengths, then its bounds
 *   (python_run_bounds: increasing as 0 or 1, first and last offset ms), read as an
 *   (n, 6) array in one call: a burst of new series is a run of one point per row, and
 *   building the columns from Python objects (a tuple and three ints per run, then an
 *   array from each) was most of the head's share of a new series. None when a run is not
 *   a tuple (row key, int, bytes, bytes): the caller then asks the Python version. */
static PyObject *run_columns(PyObject *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "runs must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *run = items[i];
        if (!PyTuple_CheckExact(run) || PyTuple_GET_SIZE(run) < 4
            || !PyLong_CheckExact(PyTuple_GET_ITEM(run, 1))
            || !PyBytes_CheckExact(PyTuple_GET_ITEM(run, 2))
            || !PyBytes_CheckExact(PyTuple_GET_ITEM(run, 3))) {
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 6 * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    int64_t *col = (int64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++, col += 6) {
        PyObject *run = items[i];
        long long count = PyLong_AsLongLong(PyTuple_GET_ITEM(run, 1));
        if (count == -1 && PyErr_Occurred()) {
            Py_DECREF(out);
            Py_DECREF(seq);
            return NULL;
        }
        Py_ssize_t size = PyBytes_GET_SIZE(PyTuple_GET_ITEM(run, 2));
        long long first = 0, last = 0;
        int increasing = offset_bounds(PyTuple_GET_ITEM(run, 2), (long long)count, &first, &last);
        col[0] = count;
        col[1] = size;
        col[2] = PyBytes_GET_SIZE(PyTuple_GET_ITEM(run, 3));
        col[3] = increasing;
        col[4] = first;
        col[5] = last;
    }
    Py_DECREF(seq);
    return out;
}

/* prefix_groups(keys, end) -> (heads, index), or None
 *   tsd.head.head.python_prefix_groups (the specification): the keys' distinct first
 *   ``end`` bytes (heads, a list of bytes in the order they first come) and per key the
 *   number of its head (index: native int64s in one bytes): a batch's new rows by group
 *   (metric and hour), without a slice per key. A key is compared with the head of the
 *   key before it first, then with the others. None when a key is not bytes or shorter
 *   than end, or past MAX_HEADS heads (many metrics in one batch): the caller then asks
 *   the Python version. */
#define MAX_HEADS 64
static PyObject *prefix_groups(PyObject *self, PyObject *args)
{
    PyObject *keys_arg;
    Py_ssize_t end;
    if (!PyArg_ParseTuple(args, "On:prefix_groups", &keys_arg, &end))
        return NULL;
    if (end < 0)
        Py_RETURN_NONE;
    PyObject *keys = PySequence_Fast(keys_arg, "keys must be a sequence");
    if (keys == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    PyObject **items = PySequence_Fast_ITEMS(keys);
    const char *heads[MAX_HEADS];
    Py_ssize_t found = 0, last = -1;
    PyObject *index = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    PyObject *list = NULL, *out = NULL;
    if (index == NULL)
        goto done;
    int64_t *at = (int64_t *)PyBytes_AS_STRING(index);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = items[i];
        if (!PyBytes_CheckExact(key) || PyBytes_GET_SIZE(key) < end)
            goto none;
        const char *bytes = PyBytes_AS_STRING(key);
        if (last < 0 || memcmp(bytes, heads[last], (size_t)end) != 0) {
            Py_ssize_t h = 0;
            while (h < found && memcmp(bytes, heads[h], (size_t)end) != 0)
                h++;
            if (h == found) {
                if (found == MAX_HEADS)
                    goto none;
                heads[found++] = bytes;
            }
            last = h;
        }
        at[i] = last;
    }
    list = PyList_New(found);
    if (list == NULL)
        goto done;
    for (Py_ssize_t h = 0; h < found; h++) {
        PyObject *head = PyBytes_FromStringAndSize(heads[h], end);
        if (head == NULL)
            goto done;
        PyList_SET_ITEM(list, h, head);
    }
    out = PyTuple_Pack(2, list, index);
    goto done;
none:
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(list);
    Py_XDECREF(index);
    Py_DECREF(keys);
    return out;
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

/* Whether the runs' row keys are all different, checked in a table of the keys' own
 * pointers (their hashes cached in them: the head's index reads the same objects): 1 when
 * they are, 0 when a key repeats (or is not bytes: the dict path then says), 2 when a run
 * is not a 4-tuple (the caller asks Python), -1 with an exception set. A batch of new
 * series (one dict's rows) never repeats one, and a dict of its n keys, grown as they
 * came, cost twice this. */
static int all_distinct(PyObject **items, Py_ssize_t n)
{
    size_t capacity = 8;
    while (capacity < (size_t)n * 2)
        capacity <<= 1;
    PyObject **table = PyMem_Calloc(capacity, sizeof(PyObject *));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int found = 1;
    for (Py_ssize_t i = 0; i < n && found == 1; i++) {
        PyObject *run = items[i];
        if (!PyTuple_CheckExact(run) || PyTuple_GET_SIZE(run) != 4) {
            found = 2;
            break;
        }
        PyObject *key = PyTuple_GET_ITEM(run, 0);
        if (!PyBytes_CheckExact(key)) {
            found = 0;
            break;
        }
        Py_hash_t hash = PyObject_Hash(key);
        if (hash == -1) {
            found = -1;
            break;
        }
        size_t at = (size_t)hash & (capacity - 1);
        for (PyObject *other; (other = table[at]) != NULL; at = (at + 1) & (capacity - 1)) {
            if (other == key
                || (PyBytes_GET_SIZE(other) == PyBytes_GET_SIZE(key)
                    && memcmp(PyBytes_AS_STRING(other), PyBytes_AS_STRING(key),
                              (size_t)PyBytes_GET_SIZE(key)) == 0)) {
                found = 0;
                break;
            }
        }
        table[at] = key;
    }
    PyMem_Free(table);
    return found;
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
    int distinct = all_distinct(items, n);
    if (distinct != 0) {
        Py_DECREF(seq);
        return distinct < 0 ? NULL : distinct == 2 ? Py_NewRef(Py_None) : PySequence_List(arg);
    }
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


/* -- points appended to the rows held -------------------------------------------------------- */

/* append_rows(bufs, slots, at, runs) -> True, or None
 *   tsd.head.head.python_append_rows (the specification): per i, the row bytes
 *   bufs[slots[i]] (its qualifiers, then its values) replaced by a new bytes object with
 *   runs[i]'s qualifiers inserted at at[i] (the end of the row's qualifiers) and its values
 *   at the end. A row is an exact-size bytes object, not a bytearray with room to grow (56
 *   bytes less a row of two points, an eighth of the points' bytes less on long rows).
 *   None (nothing changed) when an argument is not as described: the caller then asks the
 *   Python version, which says what is wrong. */
static PyObject *append_rows(PyObject *self, PyObject *args)
{
    PyObject *bufs, *slots_arg, *at_arg, *runs_arg;
    if (!PyArg_ParseTuple(args, "O!OOO:append_rows", &PyList_Type, &bufs, &slots_arg, &at_arg,
                          &runs_arg))
        return NULL;
    PyObject *slots = NULL, *at = NULL, *runs = NULL, *out = NULL;
    if ((slots = PySequence_Fast(slots_arg, "slots must be a sequence")) == NULL
        || (at = PySequence_Fast(at_arg, "at must be a sequence")) == NULL
        || (runs = PySequence_Fast(runs_arg, "runs must be a sequence")) == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(slots);
    if (PySequence_Fast_GET_SIZE(at) != n || PySequence_Fast_GET_SIZE(runs) != n)
        goto none;
    Py_ssize_t rows = PyList_GET_SIZE(bufs);
    /* checked whole first: nothing changes unless every row can */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *run = PySequence_Fast_GET_ITEM(runs, i);
        Py_ssize_t s = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(slots, i));
        Py_ssize_t a = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(at, i));
        if ((s == -1 || a == -1) && PyErr_Occurred()) {
            PyErr_Clear();
            goto none;
        }
        if (s < 0 || s >= rows || !PyTuple_CheckExact(run) || PyTuple_GET_SIZE(run) < 4
            || !PyBytes_CheckExact(PyTuple_GET_ITEM(run, 2))
            || !PyBytes_CheckExact(PyTuple_GET_ITEM(run, 3)))
            goto none;
        PyObject *buf = PyList_GET_ITEM(bufs, s);
        if (!PyBytes_CheckExact(buf) || a < 0 || a > PyBytes_GET_SIZE(buf))
            goto none;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *run = PySequence_Fast_GET_ITEM(runs, i);
        Py_ssize_t s = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(slots, i));
        Py_ssize_t a = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(at, i));
        PyObject *buf = PyList_GET_ITEM(bufs, s);
        PyObject *q = PyTuple_GET_ITEM(run, 2), *v = PyTuple_GET_ITEM(run, 3);
        Py_ssize_t old = PyBytes_GET_SIZE(buf), q_size = PyBytes_GET_SIZE(q);
        Py_ssize_t v_size = PyBytes_GET_SIZE(v);
        PyObject *row = PyBytes_FromStringAndSize(NULL, old + q_size + v_size);
        if (row == NULL)
            goto done;
        char *to = PyBytes_AS_STRING(row);
        const char *from = PyBytes_AS_STRING(buf);
        memcpy(to, from, (size_t)a);
        memcpy(to + a, PyBytes_AS_STRING(q), (size_t)q_size);
        memcpy(to + a + q_size, from + a, (size_t)(old - a));
        memcpy(to + old + q_size, PyBytes_AS_STRING(v), (size_t)v_size);
        PyList_SetItem(bufs, s, row); /* steals row, drops the old bytes */
    }
    out = Py_NewRef(Py_True);
    goto done;
none:
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(slots);
    Py_XDECREF(at);
    Py_XDECREF(runs);
    return out;
}

/* -- a row's sealed points, packed ----------------------------------------------------------- */

/* tsd.head.pack (the specification: python_pack, python_unpack, python_pack_rows,
 * python_full_rows; the format is described there). Integers are LEB128 varints, signed
 * ones zigzag-coded; values are held as uint64 (differences modulo 2**64). */

/* a delta block is kept only at most this share of the raw block's size (tsd.head.pack's
 * PACKED_SHARE) */
#define PACKED_SHARE_NUM 3
#define PACKED_SHARE_DEN 4

/* the most qualifier or value bytes unpack decodes (malformed bytes could claim runs of
 * 2**60 points: given up on past this) */
#define MAX_UNPACKED ((Py_ssize_t)1 << 30)

static size_t put_varint(unsigned char *to, uint64_t x)
{
    size_t n = 0;
    while (x >= 0x80) {
        to[n++] = (unsigned char)(x | 0x80);
        x >>= 7;
    }
    to[n++] = (unsigned char)x;
    return n;
}

static uint64_t zz(int64_t n) { return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63); }

/* one point of the cells' bytes at (*q_at, *v_at), moved past it: 1, or 0 when it is not
 * a whole point */
static int next_point(const unsigned char *q, Py_ssize_t q_end, Py_ssize_t *q_at,
                      const unsigned char *v, Py_ssize_t v_end, Py_ssize_t *v_at, int *wide,
                      int64_t *qual, uint64_t *value)
{
    Py_ssize_t a = *q_at;
    int w = (q[a] & 0xF0) == 0xF0;
    int width = w ? 4 : 2;
    if (a + width > q_end)
        return 0;
    uint64_t x = 0;
    for (int i = 0; i < width; i++)
        x = x << 8 | q[a + i];
    int v_len = (int)(x & 7) + 1;
    if (*v_at + v_len > v_end)
        return 0;
    uint64_t y = 0;
    for (int i = 0; i < v_len; i++)
        y = y << 8 | v[*v_at + i];
    *wide = w;
    *qual = (int64_t)x;
    *value = y;
    *q_at = a + width;
    *v_at += v_len;
    return 1;
}

typedef struct {
    int wide;
    int64_t ddq;
    int64_t x[2]; /* mode 0: ddV, mode 1: dV (as signed) */
} PackToken;

/* python_pack: a new bytes object, None (the points are not whole), or NULL (error) */
static PyObject *pack_points(const unsigned char *packed, Py_ssize_t p_len,
                             const unsigned char *q, Py_ssize_t q_len, const unsigned char *v,
                             Py_ssize_t v_len)
{
    PackState st;
    Py_ssize_t blocks_at;
    if (!read_state(packed, p_len, &st, &blocks_at))
        Py_RETURN_NONE;
    /* at most one point per 2 qualifier bytes */
    Py_ssize_t cap = q_len / 2 + 1;
    PackToken *tokens = PyMem_Malloc((size_t)cap * sizeof(PackToken));
    if (tokens == NULL)
        return PyErr_NoMemory();
    Py_ssize_t n = 0, q_at = 0, v_at = 0;
    while (q_at < q_len) {
        int wide;
        int64_t qual;
        uint64_t value;
        if (!next_point(q, q_len, &q_at, v, v_len, &v_at, &wide, &qual, &value)) {
            PyMem_Free(tokens);
            Py_RETURN_NONE;
        }
        int64_t dq = qual - st.q;
        uint64_t dv = value - st.v;
        tokens[n].wide = wide;
        tokens[n].ddq = dq - st.dq;
        tokens[n].x[0] = (int64_t)(dv - st.dv);
        tokens[n].x[1] = (int64_t)dv;
        n++;
        st.q = qual;
        st.dq = dq;
        st.v = value;
        st.dv = dv;
    }
    if (v_at != v_len) {
        PyMem_Free(tokens);
        Py_RETURN_NONE;
    }
    /* each mode's size, the smaller kept (ties: mode 0), unless the raw block is not
     * PACKED_SHARE bigger */
    unsigned char scratch[10];
    size_t raw = put_varint(scratch, (uint64_t)n << 2 | 2) + put_varint(scratch, (uint64_t)q_len)
                 + put_varint(scratch, (uint64_t)v_len) + (size_t)q_len + (size_t)v_len;
    size_t best_size = (size_t)-1;
    int best = 1;
    for (int mode = 1; mode >= 0; mode--) {
        size_t size = put_varint(scratch, (uint64_t)n << 2 | (uint64_t)mode);
        for (Py_ssize_t i = 0; i < n;) {
            Py_ssize_t j = i + 1;
            while (j < n && tokens[j].wide == tokens[i].wide && tokens[j].ddq == tokens[i].ddq
                   && tokens[j].x[mode] == tokens[i].x[mode])
                j++;
            size += put_varint(scratch, (uint64_t)(j - i) << 2 | (uint64_t)tokens[i].wide << 1
                                            | (uint64_t)(tokens[i].ddq != 0));
            if (tokens[i].ddq)
                size += put_varint(scratch, zz(tokens[i].ddq));
            size += put_varint(scratch, zz(tokens[i].x[mode]));
            i = j;
        }
        if (size <= best_size) {
            best_size = size;
            best = mode;
        }
    }
    if (best_size * PACKED_SHARE_DEN > raw * PACKED_SHARE_NUM) { /* too little saved: raw */
        best_size = raw;
        best = 2;
    }
    unsigned char head[40];
    size_t head_len = put_varint(head, zz(st.q));
    head_len += put_varint(head + head_len, zz(st.dq));
    head_len += put_varint(head + head_len, zz((int64_t)st.v));
    head_len += put_varint(head + head_len, zz((int64_t)st.dv));
    Py_ssize_t kept = p_len - blocks_at;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(head_len + best_size) + kept);
    if (out == NULL) {
        PyMem_Free(tokens);
        return NULL;
    }
    unsigned char *to = (unsigned char *)PyBytes_AS_STRING(out);
    memcpy(to, head, head_len);
    to += head_len;
    memcpy(to, packed + blocks_at, (size_t)kept);
    to += kept;
    to += put_varint(to, (uint64_t)n << 2 | (uint64_t)best);
    if (best == 2) {
        to += put_varint(to, (uint64_t)q_len);
        to += put_varint(to, (uint64_t)v_len);
        memcpy(to, q, (size_t)q_len);
        memcpy(to + q_len, v, (size_t)v_len);
    } else {
        for (Py_ssize_t i = 0; i < n;) {
            Py_ssize_t j = i + 1;
            while (j < n && tokens[j].wide == tokens[i].wide && tokens[j].ddq == tokens[i].ddq
                   && tokens[j].x[best] == tokens[i].x[best])
                j++;
            to += put_varint(to, (uint64_t)(j - i) << 2 | (uint64_t)tokens[i].wide << 1
                                     | (uint64_t)(tokens[i].ddq != 0));
            if (tokens[i].ddq)
                to += put_varint(to, zz(tokens[i].ddq));
            to += put_varint(to, zz(tokens[i].x[best]));
            i = j;
        }
    }
    PyMem_Free(tokens);
    return out;
}

/* python_unpack into q_out / v_out (NULL: only counted), at most q_cap / v_cap bytes (0
 * past them); the lengths in *q_n and *v_n. 1, or 0 when the packed part is not well
 * formed. */
static int unpack_points(const unsigned char *p, Py_ssize_t len, unsigned char *q_out,
                         Py_ssize_t q_cap, Py_ssize_t *q_n, unsigned char *v_out,
                         Py_ssize_t v_cap, Py_ssize_t *v_n)
{
    PackState st;
    Py_ssize_t at;
    if (!read_state(p, len, &st, &at))
        return 0;
    memset(&st, 0, sizeof(st));
    Py_ssize_t qn = 0, vn = 0;
    while (at < len) {
        uint64_t head;
        if (!get_varint(p, len, &at, &head))
            return 0;
        uint64_t n = head >> 2;
        int mode = (int)(head & 3);
        if (mode == 3)
            return 0;
        if (mode == 2) {
            uint64_t ql, vl;
            if (!get_varint(p, len, &at, &ql) || !get_varint(p, len, &at, &vl)
                || ql > (uint64_t)(len - at) || vl > (uint64_t)(len - at) - ql)
                return 0;
            const unsigned char *rq = p + at, *rv = p + at + ql;
            /* the points' bounds walked by their qualifiers alone; the state after the
             * block needs only its last two points' numbers (a read's hot loop) */
            Py_ssize_t qa = 0, va = 0, at_q[2] = {-1, -1}, at_v[2] = {0, 0};
            uint64_t points = 0;
            while (qa < (Py_ssize_t)ql) {
                int width = (rq[qa] & 0xF0) == 0xF0 ? 4 : 2;
                if (qa + width > (Py_ssize_t)ql)
                    return 0;
                Py_ssize_t v_len = (rq[qa + width - 1] & 7) + 1;
                if (va + v_len > (Py_ssize_t)vl)
                    return 0;
                at_q[0] = at_q[1];
                at_v[0] = at_v[1];
                at_q[1] = qa;
                at_v[1] = va;
                qa += width;
                va += v_len;
                points++;
            }
            if (va != (Py_ssize_t)vl || points != n)
                return 0;
            for (int k = 0; k < 2; k++) {
                if (at_q[k] < 0)
                    continue;
                int wide;
                int64_t qual;
                uint64_t value;
                Py_ssize_t qk = at_q[k], vk = at_v[k];
                if (!next_point(rq, (Py_ssize_t)ql, &qk, rv, (Py_ssize_t)vl, &vk, &wide, &qual,
                                &value))
                    return 0;
                st.dq = qual - st.q;
                st.q = qual;
                st.dv = value - st.v;
                st.v = value;
            }
            if (qn + (Py_ssize_t)ql > q_cap || vn + (Py_ssize_t)vl > v_cap)
                return 0;
            if (q_out != NULL) {
                memcpy(q_out + qn, rq, (size_t)ql);
                memcpy(v_out + vn, rv, (size_t)vl);
            }
            qn += (Py_ssize_t)ql;
            vn += (Py_ssize_t)vl;
            at += (Py_ssize_t)(ql + vl);
            continue;
        }
        uint64_t left = n;
        while (left > 0) {
            uint64_t run, z, ddq = 0;
            if (!get_varint(p, len, &at, &run))
                return 0;
            uint64_t count = run >> 2;
            int wide = (int)(run >> 1 & 1);
            if ((run & 1) && !get_varint(p, len, &at, &ddq))
                return 0;
            if (!get_varint(p, len, &at, &z))
                return 0;
            if (count == 0 || count > left)
                return 0;
            int64_t dd = (run & 1) ? unzz(ddq) : 0;
            uint64_t x = (uint64_t)unzz(z);
            int width = wide ? 4 : 2;
            for (uint64_t k = 0; k < count; k++) {
                st.dq = (int64_t)((uint64_t)st.dq + (uint64_t)dd);
                st.q = (int64_t)((uint64_t)st.q + (uint64_t)st.dq);
                st.dv = mode == 0 ? st.dv + x : x;
                st.v += st.dv;
                int v_len = (int)((uint64_t)st.q & 7) + 1;
                if (qn + width > q_cap || vn + v_len > v_cap)
                    return 0;
                if (q_out != NULL) {
                    for (int i = 0; i < width; i++)
                        q_out[qn + i] = (unsigned char)((uint64_t)st.q >> (8 * (width - 1 - i)));
                    for (int i = 0; i < v_len; i++)
                        v_out[vn + i] = (unsigned char)(st.v >> (8 * (v_len - 1 - i)));
                }
                qn += width;
                vn += v_len;
            }
            left -= count;
        }
    }
    *q_n = qn;
    *v_n = vn;
    return 1;
}

/* pack(packed, qualifiers, values) -> bytes or None: python_pack */
static PyObject *pack(PyObject *self, PyObject *args)
{
    Py_buffer pb, qb, vb;
    if (!PyArg_ParseTuple(args, "y*y*y*:pack", &pb, &qb, &vb))
        return NULL;
    PyObject *out = pack_points(pb.buf, pb.len, qb.buf, qb.len, vb.buf, vb.len);
    PyBuffer_Release(&pb);
    PyBuffer_Release(&qb);
    PyBuffer_Release(&vb);
    return out;
}

/* unpack(packed) -> (qualifiers, values), or None when it is not well formed (the Python
 * version then says why): python_unpack */
static PyObject *unpack(PyObject *self, PyObject *arg)
{
    Py_buffer pb;
    if (PyObject_GetBuffer(arg, &pb, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t qn, vn;
    PyObject *qs = NULL, *vs = NULL, *out = NULL;
    if (!unpack_points(pb.buf, pb.len, NULL, MAX_UNPACKED, &qn, NULL, MAX_UNPACKED, &vn)) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    qs = PyBytes_FromStringAndSize(NULL, qn);
    vs = PyBytes_FromStringAndSize(NULL, vn);
    if (qs == NULL || vs == NULL)
        goto done;
    if (!unpack_points(pb.buf, pb.len, (unsigned char *)PyBytes_AS_STRING(qs), qn, &qn,
                       (unsigned char *)PyBytes_AS_STRING(vs), vn, &vn)) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    out = PyTuple_Pack(2, qs, vs);
done:
    Py_XDECREF(qs);
    Py_XDECREF(vs);
    PyBuffer_Release(&pb);
    return out;
}

/* pack_rows(bufs, slots, packed, tail_q) -> [new packed length or -1], or None (nothing
 * changed: an argument is not as described): python_pack_rows */
static PyObject *pack_rows(PyObject *self, PyObject *args)
{
    PyObject *bufs, *slots_arg, *packed_arg, *tail_arg;
    if (!PyArg_ParseTuple(args, "O!OOO:pack_rows", &PyList_Type, &bufs, &slots_arg, &packed_arg,
                          &tail_arg))
        return NULL;
    PyObject *slots = NULL, *packed = NULL, *tail = NULL, *out = NULL;
    if ((slots = PySequence_Fast(slots_arg, "slots must be a sequence")) == NULL
        || (packed = PySequence_Fast(packed_arg, "packed must be a sequence")) == NULL
        || (tail = PySequence_Fast(tail_arg, "tail_q must be a sequence")) == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(slots), rows = PyList_GET_SIZE(bufs);
    if (PySequence_Fast_GET_SIZE(packed) != n || PySequence_Fast_GET_SIZE(tail) != n)
        goto none;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t s = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(slots, i));
        Py_ssize_t p = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(packed, i));
        Py_ssize_t t = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(tail, i));
        if ((s == -1 || p == -1 || t == -1) && PyErr_Occurred()) {
            PyErr_Clear();
            goto none;
        }
        if (s < 0 || s >= rows || p < 0 || t < 0)
            goto none;
        PyObject *buf = PyList_GET_ITEM(bufs, s);
        if (!PyBytes_CheckExact(buf) || p + t > PyBytes_GET_SIZE(buf))
            goto none;
    }
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t s = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(slots, i));
        Py_ssize_t p = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(packed, i));
        Py_ssize_t t = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(tail, i));
        PyObject *buf = PyList_GET_ITEM(bufs, s);
        const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(buf);
        Py_ssize_t size = PyBytes_GET_SIZE(buf);
        PyObject *done = pack_points(b, p, b + p, t, b + p + t, size - p - t);
        if (done == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        Py_ssize_t length = -1;
        if (done == Py_None)
            Py_DECREF(done);
        else {
            length = PyBytes_GET_SIZE(done);
            PyList_SetItem(bufs, s, done); /* steals done, drops the old bytes */
        }
        PyObject *number = PyLong_FromSsize_t(length);
        if (number == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, number);
    }
    goto done;
none:
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(slots);
    Py_XDECREF(packed);
    Py_XDECREF(tail);
    return out;
}

/* one row's plain bytes (a new reference), Py_None (a new reference: the row does not add
 * up) or NULL (error): python_full_rows of one row with a packed part of p > 0 bytes */
static PyObject *plain_row(PyObject *buf, int64_t p, int64_t q_len, int64_t v_len)
{
    Py_ssize_t size = PyBytes_GET_SIZE(buf);
    if (p < 0 || p > size || q_len < 0 || v_len < 0)
        return Py_NewRef(Py_None);
    PyObject *row = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(q_len + v_len));
    if (row == NULL)
        return NULL;
    unsigned char *to = (unsigned char *)PyBytes_AS_STRING(row);
    const unsigned char *from = (const unsigned char *)PyBytes_AS_STRING(buf);
    Py_ssize_t qn, vn, tail_q, tail_v;
    if (!unpack_points(from, (Py_ssize_t)p, to, (Py_ssize_t)q_len, &qn, to + q_len,
                       (Py_ssize_t)v_len, &vn)
        || (tail_q = (Py_ssize_t)q_len - qn) + (tail_v = (Py_ssize_t)v_len - vn) != size - p) {
        Py_DECREF(row);
        return Py_NewRef(Py_None);
    }
    memcpy(to + qn, from + p, (size_t)tail_q);
    memcpy(to + q_len + vn, from + p + tail_q, (size_t)tail_v);
    return row;
}

/* full_row(buf, packed, q_len, v_len) -> bytes, or None: full_rows of one row, no arrays */
static PyObject *full_row(PyObject *self, PyObject *args)
{
    PyObject *buf;
    long long p, q_len, v_len;
    if (!PyArg_ParseTuple(args, "SLLL:full_row", &buf, &p, &q_len, &v_len))
        return NULL;
    if (p == 0)
        return Py_NewRef(buf);
    return plain_row(buf, p, q_len, v_len);
}

/* full_rows(bufs, packed, q_lens, v_lens) -> list of bytes, or None: python_full_rows over
 * int64 buffers of the lengths (numpy arrays). None when an argument is not as described
 * or a row does not add up: the caller then asks the Python version, which says so. */
static PyObject *full_rows(PyObject *self, PyObject *args)
{
    PyObject *bufs;
    Py_buffer pb, qb, vb;
    if (!PyArg_ParseTuple(args, "O!y*y*y*:full_rows", &PyList_Type, &bufs, &pb, &qb, &vb))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = PyList_GET_SIZE(bufs);
    Py_ssize_t want = n * (Py_ssize_t)sizeof(int64_t);
    if (pb.len != want || qb.len != want || vb.len != want)
        goto none;
    const int64_t *pl = pb.buf, *ql = qb.buf, *vl = vb.buf;
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *buf = PyList_GET_ITEM(bufs, i);
        if (!PyBytes_CheckExact(buf))
            goto none;
        if (pl[i] == 0) {
            PyList_SET_ITEM(out, i, Py_NewRef(buf));
            continue;
        }
        PyObject *row = plain_row(buf, pl[i], ql[i], vl[i]);
        if (row == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, row);
        if (row == Py_None)
            goto none;
    }
    goto done;
none:
    Py_XDECREF(out);
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&pb);
    PyBuffer_Release(&qb);
    PyBuffer_Release(&vb);
    return out;
}

/* -- the head's index: row key -> slot ------------------------------------------------------ */

/* SlotIndex(keys): the head's row key -> slot map as an open-addressing table of
 *   entries of 8 bytes: an int32 slot and the low 32 bits of its key's hash (the table kept
 *   between 3/8 and 3/4 full, about 16 bytes a row) where a dict took an entry (about 40
 *   bytes) and an int object (32) per row. The keys are not copied: ``keys`` is the head's
 *   list of slot -> row key (None: a free slot), and a probe whose hash bits match compares
 *   the key asked for with ``keys[slot]`` (its cached hash, then its bytes). The hash bits
 *   spare a probe past another key the read of that key, and a rebuild the read of every
 *   key: where an entry goes in a table of up to 2^32 entries is in its own bits. Without
 *   them (a byte of the hash, 5 bytes an entry) a rebuild read each held key at random
 *   (its list item, then the key): at issue 26's 4 M series the table grows at an hour's
 *   close, when the head adds a row per series, and that rebuild of 6 M keys held the
 *   close's interval for 0.6 s. The caller sets ``keys[slot]`` before add_many and removes
 *   a key before it clears its slot. tsd.head.index.DictSlotIndex is the specification (a
 *   dict) and the fallback; tests/head/test_slot_index.py checks both answer alike. */
#define SLOT_EMPTY (-1)
#define SLOT_REMOVED (-2)

typedef struct {
    int32_t slot;  /* SLOT_EMPTY, SLOT_REMOVED or the row's slot */
    uint32_t hash; /* the low 32 bits of its key's hash */
} SlotEntry;

typedef struct {
    PyObject_HEAD
    PyObject *keys;  /* list: slot -> bytes or None */
    SlotEntry *table;
    size_t mask;     /* capacity - 1, a power of two */
    Py_ssize_t used; /* keys held */
    Py_ssize_t filled; /* keys held and removed marks */
} SlotIndex;

static int same_key(SlotIndex *self, int32_t slot, PyObject *key, Py_hash_t hash)
{
    if (slot >= PyList_GET_SIZE(self->keys))
        return 0;
    PyObject *stored = PyList_GET_ITEM(self->keys, slot);
    if (stored == key)
        return 1;
    if (!PyBytes_CheckExact(stored))
        return 0;
    Py_ssize_t n = PyBytes_GET_SIZE(key);
    if (PyBytes_GET_SIZE(stored) != n || PyObject_Hash(stored) != hash)
        return 0;
    return memcmp(PyBytes_AS_STRING(stored), PyBytes_AS_STRING(key), (size_t)n) == 0;
}

/* the table position holding ``key``, or -1 */
static Py_ssize_t slot_find(SlotIndex *self, PyObject *key, Py_hash_t hash)
{
    size_t i = (size_t)hash & self->mask;
    uint32_t bits = (uint32_t)(size_t)hash;
    for (;;) {
        SlotEntry e = self->table[i];
        if (e.slot == SLOT_EMPTY)
            return -1;
        if (e.slot >= 0 && e.hash == bits && same_key(self, e.slot, key, hash))
            return (Py_ssize_t)i;
        i = (i + 1) & self->mask;
    }
}

/* ``slot`` at the first free position of the probe of a key whose hash's low bits are
 * ``bits`` (the key is not held) */
static void slot_place(SlotIndex *self, uint32_t bits, int32_t slot)
{
    size_t i = (size_t)bits & self->mask;
    while (self->table[i].slot >= 0)
        i = (i + 1) & self->mask;
    if (self->table[i].slot == SLOT_EMPTY)
        self->filled++;
    self->table[i].slot = slot;
    self->table[i].hash = bits;
    self->used++;
}

/* Adding and looking up go SLOT_BLOCK keys at a time, the table entries where the next
 * block's probes start asked for (prefetched) while one is worked on, so that their cache
 * misses overlap rather than follow one another; a rebuild asks for where the entries a
 * block ahead go. At an hour's close the head adds a row for every series (4 M at issue
 * 26's load). */
#define SLOT_BLOCK 16

/* a table for ``need`` keys at most half full, holding the keys held (removed marks gone) */
static int slot_rebuild(SlotIndex *self, Py_ssize_t need)
{
    size_t capacity = 8;
    while (capacity < (size_t)need * 2)
        capacity <<= 1;
    if (capacity > ((size_t)1 << 32)) {
        PyErr_SetString(PyExc_OverflowError, "SlotIndex: more than 2^31 keys");
        return -1;
    }
    SlotEntry *table = PyMem_Malloc(capacity * sizeof(SlotEntry));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(table, 0xFF, capacity * sizeof(SlotEntry)); /* every entry SLOT_EMPTY */
    SlotEntry *old = self->table;
    size_t old_size = old == NULL ? 0 : self->mask + 1;
    self->table = table;
    self->mask = capacity - 1;
    self->used = self->filled = 0;
    for (size_t i = 0; i < old_size; i++) {
        if (i % SLOT_BLOCK == 0)
            for (size_t j = i + SLOT_BLOCK; j < i + 2 * SLOT_BLOCK && j < old_size; j++)
                if (old[j].slot >= 0)
                    __builtin_prefetch(&table[(size_t)old[j].hash & self->mask], 1);
        if (old[i].slot >= 0)
            slot_place(self, old[i].hash, old[i].slot);
    }
    PyMem_Free(old);
    return 0;
}

static int slot_index_init(SlotIndex *self, PyObject *args, PyObject *kwds)
{
    PyObject *keys;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "SlotIndex(keys) takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!:SlotIndex", &PyList_Type, &keys))
        return -1;
    Py_INCREF(keys);
    Py_XSETREF(self->keys, keys);
    PyMem_Free(self->table);
    self->table = NULL;
    return slot_rebuild(self, 0);
}

static void slot_index_dealloc(SlotIndex *self)
{
    PyMem_Free(self->table);
    Py_XDECREF(self->keys);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_hash_t key_hash(PyObject *key)
{
    if (!PyBytes_CheckExact(key)) {
        PyErr_SetString(PyExc_TypeError, "a row key is bytes");
        return -1;
    }
    return PyObject_Hash(key);
}

/* At the start of the block of keys at ``i``: the next block's hashes (bytes cache
 * theirs) and the table entries where their probes start asked for (the first block's
 * too when i is 0). Stops at a key that is not bytes: its lookup says so. */
static void prefetch_probes(SlotIndex *self, PyObject **items, Py_ssize_t n, Py_ssize_t i)
{
    Py_ssize_t end = n - i < 2 * SLOT_BLOCK ? n : i + 2 * SLOT_BLOCK;
    for (Py_ssize_t j = i == 0 ? 0 : i + SLOT_BLOCK; j < end; j++) {
        if (!PyBytes_CheckExact(items[j]))
            break;
        __builtin_prefetch(&self->table[(size_t)PyObject_Hash(items[j]) & self->mask]);
    }
}

static PyObject *slot_get(SlotIndex *self, PyObject *key)
{
    Py_hash_t hash = key_hash(key);
    if (hash == -1)
        return NULL;
    Py_ssize_t at = slot_find(self, key, hash);
    if (at < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(self->table[at].slot);
}

static PyObject *slot_get_many(SlotIndex *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "keys must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i % SLOT_BLOCK == 0)
            prefetch_probes(self, items, n, i);
        Py_hash_t hash = key_hash(items[i]);
        if (hash == -1)
            goto error;
        Py_ssize_t at = slot_find(self, items[i], hash);
        PyObject *slot = at < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(self->table[at].slot);
        if (slot == NULL)
            goto error;
        PyList_SET_ITEM(out, i, slot);
    }
    Py_DECREF(seq);
    return out;
error:
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *slot_add_many(SlotIndex *self, PyObject *args)
{
    PyObject *keys_arg, *slots_arg;
    if (!PyArg_ParseTuple(args, "OO:add_many", &keys_arg, &slots_arg))
        return NULL;
    PyObject *keys = PySequence_Fast(keys_arg, "keys must be a sequence");
    if (keys == NULL)
        return NULL;
    PyObject *slots = PySequence_Fast(slots_arg, "slots must be a sequence");
    if (slots == NULL) {
        Py_DECREF(keys);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    if (PySequence_Fast_GET_SIZE(slots) != n) {
        PyErr_SetString(PyExc_ValueError, "add_many: as many slots as keys");
        goto error;
    }
    if ((size_t)(self->filled + n) * 4 > (self->mask + 1) * 3 && slot_rebuild(self, self->used + n) < 0)
        goto error;
    PyObject **items = PySequence_Fast_ITEMS(keys);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i % SLOT_BLOCK == 0)
            prefetch_probes(self, items, n, i);
        PyObject *key = items[i];
        long slot = PyLong_AsLong(PySequence_Fast_GET_ITEM(slots, i));
        if (slot == -1 && PyErr_Occurred())
            goto error;
        if (slot < 0 || slot > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "add_many: a slot is an int32 at least 0");
            goto error;
        }
        Py_hash_t hash = key_hash(key);
        if (hash == -1)
            goto error;
        Py_ssize_t at = slot_find(self, key, hash);
        if (at >= 0)
            self->table[at].slot = (int32_t)slot; /* held: moved to this slot, as a dict update */
        else
            slot_place(self, (uint32_t)(size_t)hash, (int32_t)slot);
    }
    Py_DECREF(keys);
    Py_DECREF(slots);
    Py_RETURN_NONE;
error:
    Py_DECREF(keys);
    Py_DECREF(slots);
    return NULL;
}

static PyObject *slot_remove(SlotIndex *self, PyObject *key)
{
    Py_hash_t hash = key_hash(key);
    if (hash == -1)
        return NULL;
    Py_ssize_t at = slot_find(self, key, hash);
    if (at < 0)
        Py_RETURN_FALSE;
    self->table[at].slot = SLOT_REMOVED;
    self->used--;
    if (self->used * 8 < self->filled && self->mask > 7 && slot_rebuild(self, self->used) < 0)
        return NULL;
    Py_RETURN_TRUE;
}

static PyObject *slot_table_size(SlotIndex *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSize_t(self->mask + 1);
}

static Py_ssize_t slot_len(SlotIndex *self)
{
    return self->used;
}

static int slot_contains(SlotIndex *self, PyObject *key)
{
    Py_hash_t hash = key_hash(key);
    if (hash == -1)
        return -1;
    return slot_find(self, key, hash) >= 0;
}

static PyMethodDef slot_index_methods[] = {
    {"get", (PyCFunction)slot_get, METH_O, "The slot of a row key, or None."},
    {"get_many", (PyCFunction)slot_get_many, METH_O, "The slot of each key (None: not held)."},
    {"add_many", (PyCFunction)slot_add_many, METH_VARARGS,
     "Map keys[i] to slots[i] (keys[slot] set in the head's list first)."},
    {"remove", (PyCFunction)slot_remove, METH_O, "Forget a key; whether it was held."},
    {"table_size", (PyCFunction)slot_table_size, METH_NOARGS, "The table's entries (memory)."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods slot_index_sequence = {
    .sq_length = (lenfunc)slot_len,
    .sq_contains = (objobjproc)slot_contains,
};

static PyTypeObject SlotIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tsd.head._runs.SlotIndex",
    .tp_basicsize = sizeof(SlotIndex),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The head's row key -> slot map: int32 slots in an open-addressing table.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)slot_index_init,
    .tp_dealloc = (destructor)slot_index_dealloc,
    .tp_methods = slot_index_methods,
    .tp_as_sequence = &slot_index_sequence,
};

static PyMethodDef methods[] = {
    {"run_columns", run_columns, METH_O,
     "Per run: (cells, qualifier bytes, value bytes, increasing, first, last) as int64s."},
    {"prefix_groups", prefix_groups, METH_VARARGS,
     "The keys' distinct first end bytes, and each key's number among them, or None."},
    {"join_repeated_rows", join_repeated_rows, METH_O,
     "A batch's runs, one per row (a repeated row's runs joined in order), or None."},
    {"append_rows", append_rows, METH_VARARGS,
     "Points appended to rows held (new bytes per row), or None: ask the Python version."},
    {"join_parts", join_parts, METH_VARARGS,
     "Rows (qualifiers then values) parted: (all qualifiers, all values), or None."},
    {"picked", picked, METH_VARARGS,
     "[items[i] for i in at] (at: int64 indices), or None when one is out of range."},
    {"pack", pack, METH_VARARGS, "A packed part with points added (tsd.head.pack), or None."},
    {"unpack", unpack, METH_O, "A packed part's (qualifiers, values), or None."},
    {"pack_rows", pack_rows, METH_VARARGS,
     "Rows' raw tails packed: each row's new packed length (-1: left), or None."},
    {"full_row", full_row, METH_VARARGS, "One row's plain bytes (full_rows of one), or None."},
    {"full_rows", full_rows, METH_VARARGS,
     "Rows' plain bytes (packed parts decoded, tails after), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_runs", NULL, -1, methods};

PyMODINIT_FUNC PyInit__runs(void)
{
    if (PyType_Ready(&SlotIndexType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "SlotIndex", (PyObject *)&SlotIndexType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
