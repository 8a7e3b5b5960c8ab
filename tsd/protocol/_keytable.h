/* KeyTable: the telnet ref cache (put_line_key bytes -> series ref) without a Python object
 * per key. Included by _parse.c, whose put parsers look lines up in it without building
 * the key's bytes object. tsd.protocol.ref_table.PythonRefTable is the specification (and
 * the fallback): a young generation and an old one in recency order, bounded together by
 * max_entries, with exactly its observable behaviour (tests/protocol/test_ref_table.py
 * runs both through the same operations with hypothesis).
 *
 * Layout, per entry: its key's bytes in one arena (no object header), a 24-byte entry
 * (arena offset, length, hash, value) in an array kept in the order entries were added or
 * recalled (the recency order: eviction takes the first live one), and a 4-byte slot of
 * an open-addressing index (linear probing, at most 70% full). Entries at or after
 * young_start are the young generation; a turn moves young_start to the end. An entry that
 * leaves (evicted, or recalled: appended again) is marked dead (value NULL); dead entries
 * and their key bytes are compacted away when the array or the arena would grow.
 *
 * The arrays are mapped pages of their own (mremap to grow, on Linux), not the C heap:
 * growing a table of millions of entries leaves no freed blocks behind in the heap (the
 * daemon keeps freed heap memory for queries: tsd.query.keep_freed_bytes), and the unused
 * tail of an array is never touched, so never resident. The hash is Python's own for
 * bytes (keyed SipHash): hash(key) for the same bytes, so crafted keys cannot make the
 * probes collide. */

#include <stdint.h>
#include <string.h>

#include "_hashindex.h"

typedef struct {
    uint64_t off;
    uint32_t len;
    uint32_t hash;
    PyObject *value; /* NULL: dead */
} KTEntry;

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_entries;
    Py_ssize_t evictions;
    KTEntry *entries;
    size_t n, cap;       /* entries appended (dead included), room for */
    size_t head;         /* no live entry before */
    size_t young_start;  /* entries from here on are young */
    size_t young, old;   /* live entries of each generation */
    ByteArena arena;   /* the keys' bytes */
    size_t live_bytes; /* of live entries' keys */
    HashIndex index;
} KeyTable;

#define KT_TOMB HI_TOMB
#define KT_MAX_ENTRIES ((size_t)UINT32_MAX - 2)

static PyTypeObject KeyTableType;

/* memory: mapped regions (tsd/_region.h) */

/* -- hashing and the index --------------------------------------------------------------- */

static uint32_t kt_hash(const char *key, Py_ssize_t len)
{
    Py_hash_t h = _Py_HashBytes(key, len);
    uint64_t u = (uint64_t)h;
    return (uint32_t)(u ^ (u >> 32));
}

/* The entry holding key (-1: none), and its index slot. */
static Py_ssize_t kt_find(KeyTable *t, const char *key, Py_ssize_t len, uint32_t hash,
                          size_t *slot_out)
{
    if (t->index.cap == 0)
        return -1;
    for (size_t i = hi_first(&t->index, hash);; i = hi_next(&t->index, i)) {
        uint32_t s = t->index.slots[i];
        if (s == 0)
            return -1;
        if (s == KT_TOMB)
            continue;
        KTEntry *e = &t->entries[s - 1];
        if (e->hash == hash && e->len == (uint32_t)len &&
            memcmp(t->arena.bytes + e->off, key, (size_t)len) == 0) {
            if (slot_out != NULL)
                *slot_out = i;
            return (Py_ssize_t)(s - 1);
        }
    }
}

/* Drop dead entries (and, when they waste half of it, their key bytes), then index the
 * live ones afresh at a capacity for ``want`` entries. */
static int kt_rebuild(KeyTable *t, size_t want)
{
    /* compact the entries, keeping their order; young_start follows */
    size_t w = 0, young_start = 0;
    for (size_t r = t->head; r < t->n; r++) {
        if (r == t->young_start)
            young_start = w;
        if (t->entries[r].value != NULL)
            t->entries[w++] = t->entries[r];
    }
    if (t->young_start >= t->n)
        young_start = w;
    t->n = w;
    t->head = 0;
    t->young_start = young_start;
    if (arena_wasteful(&t->arena, t->live_bytes)) {
        ByteArena fresh;
        if (arena_fresh(&fresh, t->live_bytes) < 0)
            return -1;
        for (size_t i = 0; i < w; i++)
            t->entries[i].off = arena_take(&fresh, &t->arena, t->entries[i].off, t->entries[i].len);
        arena_swap(&t->arena, &fresh);
    }
    if (hi_renew(&t->index, want) < 0)
        return -1;
    for (size_t i = 0; i < w; i++)
        hi_put(&t->index, t->entries[i].hash, i);
    return 0;
}

/* Room for one more entry and one more index slot. */
static int kt_reserve(KeyTable *t)
{
    size_t live = t->young + t->old;
    if (live + 1 >= KT_MAX_ENTRIES) {
        PyErr_SetString(PyExc_OverflowError, "KeyTable: too many entries");
        return -1;
    }
    if (t->n == t->cap) {
        size_t dead = t->n - live;
        if (dead > 0 && dead * 4 >= t->n) /* a quarter dead: compact rather than grow */
            return kt_rebuild(t, live + 1 > t->index.cap / 2 ? live + 1 : live);
        if (entries_grow((void **)&t->entries, &t->cap, sizeof(KTEntry), 1024) < 0)
            return -1;
    }
    if (hi_full(&t->index))
        return kt_rebuild(t, live + 1);
    return 0;
}

static int kt_arena_add(KeyTable *t, const char *key, Py_ssize_t len, uint64_t *off)
{
    if ((uint64_t)len >= UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "KeyTable: key too long");
        return -1;
    }
    return arena_add(&t->arena, key, (size_t)len, 65536, SIZE_MAX, off);
}

/* -- the generations (tsd.protocol.ref_table.PythonRefTable, step for step) ------------- */

static void kt_turn(KeyTable *t)
{
    t->young_start = t->n;
    t->old += t->young;
    t->young = 0;
}

static void kt_kill(KeyTable *t, size_t entry, size_t slot)
{
    KTEntry *e = &t->entries[entry];
    t->index.slots[slot] = KT_TOMB;
    Py_CLEAR(e->value);
    t->live_bytes -= e->len;
    if (entry < t->young_start)
        t->old--;
    else
        t->young--;
}

/* Drop the least recently added or recalled entry of old (turning first when old is
 * empty: a bound of 1). */
static void kt_evict(KeyTable *t)
{
    if (t->old == 0)
        kt_turn(t);
    size_t i = t->head;
    while (t->entries[i].value == NULL)
        i++;
    KTEntry *e = &t->entries[i];
    size_t slot = 0;
    kt_find(t, t->arena.bytes + e->off, e->len, e->hash, &slot);
    kt_kill(t, i, slot);
    t->head = i + 1;
    t->evictions++;
}

/* Append an entry to the young generation (room reserved: kt_reserve), turning first
 * when young holds all but an eighth of the bound (tsd.recent.young_bound). Steals value. */
static void kt_append(KeyTable *t, uint64_t off, uint32_t len, uint32_t hash, PyObject *value)
{
    Py_ssize_t young_max = t->max_entries - t->max_entries / 8;
    if ((Py_ssize_t)t->young >= (young_max > 1 ? young_max : 1))
        kt_turn(t);
    KTEntry *e = &t->entries[t->n];
    e->off = off;
    e->len = len;
    e->hash = hash;
    e->value = value;
    t->live_bytes += len;
    hi_put(&t->index, hash, t->n);
    t->n++;
    t->young++;
}

/* key (an old entry's) moved to young, with value: recall, or remember of its key. Its
 * key bytes stay where they are in the arena. */
static int kt_move_young(KeyTable *t, const char *key, Py_ssize_t len, uint32_t hash,
                         PyObject *value)
{
    if (kt_reserve(t) < 0) /* before the entry dies: a compaction would drop its bytes */
        return -1;
    size_t slot = 0;
    Py_ssize_t at = kt_find(t, key, len, hash, &slot); /* indexes change in a compaction */
    uint64_t off = t->entries[at].off;
    Py_INCREF(value);
    kt_kill(t, (size_t)at, slot);
    kt_append(t, off, (uint32_t)len, hash, value);
    return 0;
}

static int kt_remember(KeyTable *t, const char *key, Py_ssize_t len, PyObject *value)
{
    uint32_t hash = kt_hash(key, len);
    Py_ssize_t at = kt_find(t, key, len, hash, NULL);
    if (at >= 0 && (size_t)at >= t->young_start) {
        PyObject *was = t->entries[at].value;
        Py_INCREF(value);
        t->entries[at].value = value;
        Py_DECREF(was);
        return 0;
    }
    if (at >= 0)
        return kt_move_young(t, key, len, hash, value);
    if ((Py_ssize_t)(t->young + t->old) >= t->max_entries)
        kt_evict(t);
    uint64_t off;
    if (kt_reserve(t) < 0 || kt_arena_add(t, key, len, &off) < 0)
        return -1;
    Py_INCREF(value);
    kt_append(t, off, (uint32_t)len, hash, value);
    return 0;
}

/* The young value of key, borrowed (NULL: none): the parsers' lookup. */
/* The young value of key, whose kt_hash is hash (a caller that hashed it ahead). */
static PyObject *kt_get_young_hashed(KeyTable *t, const char *key, Py_ssize_t len,
                                     uint32_t hash)
{
    if (t->young == 0)
        return NULL;
    Py_ssize_t at = kt_find(t, key, len, hash, NULL);
    if (at < 0 || (size_t)at < t->young_start)
        return NULL;
    return t->entries[at].value;
}

static PyObject *kt_get_young(KeyTable *t, const char *key, Py_ssize_t len)
{
    return t->young == 0 ? NULL : kt_get_young_hashed(t, key, len, kt_hash(key, len));
}

/* -- the Python type -------------------------------------------------------------------- */

static int kt_key(PyObject *key, const char **s, Py_ssize_t *n)
{
    if (!PyBytes_Check(key))
        return 0;
    *s = PyBytes_AS_STRING(key);
    *n = PyBytes_GET_SIZE(key);
    return 1;
}

static void kt_release(KeyTable *t)
{
    for (size_t i = t->head; i < t->n; i++)
        Py_CLEAR(t->entries[i].value);
    region_free(t->entries, t->cap * sizeof(KTEntry));
    arena_release(&t->arena);
    hi_release(&t->index);
    t->entries = NULL;
    t->n = t->cap = t->head = t->young_start = t->young = t->old = 0;
    t->live_bytes = 0;
}

static int kt_init(KeyTable *t, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"max_entries", NULL};
    Py_ssize_t max_entries;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n", names, &max_entries))
        return -1;
    if (max_entries < 1) {
        PyErr_Format(PyExc_ValueError, "max_entries must be at least 1, not %zd", max_entries);
        return -1;
    }
    kt_release(t);
    t->max_entries = max_entries;
    t->evictions = 0;
    return 0;
}

static void kt_dealloc(KeyTable *t)
{
    kt_release(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static Py_ssize_t kt_len(KeyTable *t)
{
    return (Py_ssize_t)t->young;
}

static int kt_contains(KeyTable *t, PyObject *key)
{
    const char *s;
    Py_ssize_t n;
    return kt_key(key, &s, &n) && kt_get_young(t, s, n) != NULL;
}

static PyObject *kt_get(KeyTable *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default=None)");
        return NULL;
    }
    const char *s;
    Py_ssize_t n;
    PyObject *value = kt_key(args[0], &s, &n) ? kt_get_young(t, s, n) : NULL;
    if (value == NULL)
        value = nargs == 2 ? args[1] : Py_None;
    Py_INCREF(value);
    return value;
}

static PyObject *kt_recall_key(KeyTable *t, PyObject *key)
{
    const char *s;
    Py_ssize_t n;
    if (t->old == 0 || !kt_key(key, &s, &n))
        Py_RETURN_NONE;
    uint32_t hash = kt_hash(s, n);
    Py_ssize_t at = kt_find(t, s, n, hash, NULL);
    if (at < 0 || (size_t)at >= t->young_start)
        Py_RETURN_NONE;
    PyObject *value = t->entries[at].value;
    Py_INCREF(value);
    if (kt_move_young(t, s, n, hash, value) < 0) {
        Py_DECREF(value);
        return NULL;
    }
    return value;
}

static PyObject *kt_recall(KeyTable *t, PyObject *key)
{
    return kt_recall_key(t, key);
}

static PyObject *kt_lookup(KeyTable *t, PyObject *key)
{
    const char *s;
    Py_ssize_t n;
    PyObject *value = kt_key(key, &s, &n) ? kt_get_young(t, s, n) : NULL;
    if (value != NULL) {
        Py_INCREF(value);
        return value;
    }
    return kt_recall_key(t, key);
}

static PyObject *kt_remember_one(KeyTable *t, PyObject *key, PyObject *value)
{
    const char *s;
    Py_ssize_t n;
    if (!kt_key(key, &s, &n)) {
        PyErr_SetString(PyExc_TypeError, "KeyTable keys are bytes");
        return NULL;
    }
    if (value == Py_None) {
        PyErr_SetString(PyExc_TypeError, "KeyTable values are not None");
        return NULL;
    }
    if (kt_remember(t, s, n, value) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *kt_remember_py(KeyTable *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "remember(key, value)");
        return NULL;
    }
    return kt_remember_one(t, args[0], args[1]);
}

static PyObject *kt_remember_many(KeyTable *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "remember_many(keys, values)");
        return NULL;
    }
    PyObject *keys = PySequence_Fast(args[0], "remember_many: keys must be a sequence");
    if (keys == NULL)
        return NULL;
    PyObject *values = PySequence_Fast(args[1], "remember_many: values must be a sequence");
    if (values == NULL) {
        Py_DECREF(keys);
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(keys);
    if (PySequence_Fast_GET_SIZE(values) != count) {
        PyErr_SetString(PyExc_ValueError, "remember_many: as many values as keys");
        goto error;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *done = kt_remember_one(t, PySequence_Fast_GET_ITEM(keys, i),
                                         PySequence_Fast_GET_ITEM(values, i));
        if (done == NULL)
            goto error;
        Py_DECREF(done);
    }
    Py_DECREF(keys);
    Py_DECREF(values);
    Py_RETURN_NONE;
error:
    Py_DECREF(keys);
    Py_DECREF(values);
    return NULL;
}

static PyObject *kt_entries(KeyTable *t, PyObject *unused)
{
    return PyLong_FromSize_t(t->young + t->old);
}

static PyObject *kt_clear(KeyTable *t, PyObject *unused)
{
    kt_release(t);
    Py_RETURN_NONE;
}

/* [(key, value)] of one generation in order (young: 1), for tests and diagnostics. */
static PyObject *kt_items_of(KeyTable *t, int young)
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    size_t from = young ? t->young_start : t->head, to = young ? t->n : t->young_start;
    for (size_t i = from; i < to; i++) {
        KTEntry *e = &t->entries[i];
        if (e->value == NULL)
            continue;
        PyObject *pair = Py_BuildValue("(y#O)", t->arena.bytes + e->off, (Py_ssize_t)e->len, e->value);
        if (pair == NULL || PyList_Append(out, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return out;
}

static PyObject *kt_items(KeyTable *t, PyObject *unused)
{
    return kt_items_of(t, 1);
}

static PyObject *kt_old_items(KeyTable *t, PyObject *unused)
{
    return kt_items_of(t, 0);
}

static PyObject *kt_nbytes(KeyTable *t, PyObject *unused)
{
    /* the bytes the table has touched at most: used entries, arena, index */
    return PyLong_FromSize_t(t->n * sizeof(KTEntry) + t->arena.used + t->index.cap * sizeof(uint32_t));
}

static PyObject *kt_get_evictions(KeyTable *t, void *closure)
{
    return PyLong_FromSsize_t(t->evictions);
}

static PyObject *kt_get_max(KeyTable *t, void *closure)
{
    return PyLong_FromSsize_t(t->max_entries);
}

static PyMethodDef kt_methods[] = {
    {"get", (PyCFunction)(void (*)(void))kt_get, METH_FASTCALL,
     "The young value of key, or default."},
    {"remember", (PyCFunction)(void (*)(void))kt_remember_py, METH_FASTCALL,
     "Keep key -> value in the young generation, evicting when full."},
    {"remember_many", (PyCFunction)(void (*)(void))kt_remember_many, METH_FASTCALL,
     "remember of each pair."},
    {"recall", (PyCFunction)kt_recall, METH_O, "An old entry's value, moved to young."},
    {"lookup", (PyCFunction)kt_lookup, METH_O, "get, then recall."},
    {"entries", (PyCFunction)kt_entries, METH_NOARGS, "Entries held, both generations."},
    {"clear", (PyCFunction)kt_clear, METH_NOARGS, "Forget every entry."},
    {"items", (PyCFunction)kt_items, METH_NOARGS, "The young (key, value) pairs in order."},
    {"old_items", (PyCFunction)kt_old_items, METH_NOARGS, "The old pairs, oldest first."},
    {"nbytes", (PyCFunction)kt_nbytes, METH_NOARGS, "Bytes of the table's own arrays."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kt_getset[] = {
    {"evictions", (getter)kt_get_evictions, NULL, "entries dropped to stay within the bound",
     NULL},
    {"max_entries", (getter)kt_get_max, NULL, "the bound", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods kt_as_sequence = {
    .sq_length = (lenfunc)kt_len,
    .sq_contains = (objobjproc)kt_contains,
};

static PyTypeObject KeyTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tsd.protocol._parse.KeyTable",
    .tp_basicsize = sizeof(KeyTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "put_line_key bytes -> series ref, bounded (tsd.protocol.ref_table).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)kt_init,
    .tp_dealloc = (destructor)kt_dealloc,
    .tp_methods = kt_methods,
    .tp_getset = kt_getset,
    .tp_as_sequence = &kt_as_sequence,
};

static int kt_check(PyObject *o)
{
    return Py_IS_TYPE(o, &KeyTableType);
}
