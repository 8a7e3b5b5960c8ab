/* A batch's runs as the head checks and joins them, and a snapshot's rows parted, in C:
 * tsd.head.head.python_run_columns, python_join_repeated_rows and python_join_parts (the
 * specifications and the fallbacks when this is not built; tests/head/test_run_bounds.py
 * and tests/head/test_join_parts.py check both agree). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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
