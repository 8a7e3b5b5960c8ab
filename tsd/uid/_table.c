/* UidTable: one direction of one generation of a UID cache (tsd/uid/cache.py's UidCache),
 * without a Python object per mapping. A dict is its specification and fallback: the
 * cache's logic is the same Python over either, and tests/uid/test_uid_table.py runs both
 * through the same operations with hypothesis.
 *
 * Why: a TSD caches every name it has seen, in both directions; with a tag value per series
 * (a host, a container id) that is millions of names, and as dicts of str and bytes objects
 * they cost about 185 bytes a name for the two directions (a str, a bytes, two dict
 * slots). Here a mapping is a 24-byte entry, the name's UTF-8 bytes in an arena and a 4-byte
 * slot of an open-addressing index, per direction: the str or bytes a lookup answers is
 * made when asked.
 *
 * A table is either forward (name str -> UID bytes) or reverse (UID bytes -> name str). It
 * behaves as the dict it replaces for what the cache does with one: get, pop, [], in, len,
 * update with pairs, clear, and items in insertion order. A UID is 1 to 8 bytes (OpenTSDB's
 * widths), kept as an integer; a key of another length is never present, a value of another
 * length is refused. Names are kept as UTF-8 with "surrogatepass", so every str comes back
 * equal; a forward key's hash is the str's own (keyed, cached in the str).
 *
 * Entries are kept in insertion order; a removed one is marked dead (UID length 0) and
 * dropped, with its name's bytes, when the entries would grow (dicts compact the same way). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_hashindex.h"

typedef struct {
    uint64_t where; /* the name's arena offset (low 48 bits) | UID length << 48 (0: dead) */
    uint32_t len;   /* the name's length in bytes */
    uint32_t hash;  /* the key's: the name str's hash (forward), the UID's (reverse) */
    uint64_t uid;   /* the UID's bytes, big-endian */
} UTEntry;

#define UT_OFF_BITS 48
#define UT_OFF_MASK (((uint64_t)1 << UT_OFF_BITS) - 1)
#define UT_OFF(e) ((e)->where & UT_OFF_MASK)
#define UT_UID_LEN(e) ((unsigned)((e)->where >> UT_OFF_BITS))
#define UT_TOMB HI_TOMB
#define UT_MAX_ENTRIES ((size_t)UINT32_MAX - 2)

typedef struct {
    PyObject_HEAD
    int reverse; /* keys are UIDs, values names; else names -> UIDs */
    UTEntry *entries;
    size_t n, cap, live; /* entries appended (dead included), room for, live */
    ByteArena arena;   /* the names' bytes */
    size_t live_bytes; /* of live entries' names */
    HashIndex index;
} UidTable;

static PyTypeObject UidTableType;

/* -- keys and values ---------------------------------------------------------------------- */

static uint32_t ut_fold(uint64_t h)
{
    return (uint32_t)(h ^ (h >> 32));
}

static uint32_t ut_uid_hash(uint64_t uid, unsigned uid_len)
{
    return ut_fold((uid ^ ((uint64_t)uid_len << 56)) * 0x9E3779B97F4A7C15ULL);
}

/* A name's UTF-8 bytes: the str's own for ASCII, else encoded into *tmp (a new reference
 * the caller drops). -1 with TypeError for a non-str. */
static int ut_name_bytes(PyObject *name, const char **s, Py_ssize_t *n, PyObject **tmp)
{
    *tmp = NULL;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "a UID name must be str, not %.100s",
                     Py_TYPE(name)->tp_name);
        return -1;
    }
    if (PyUnicode_IS_ASCII(name)) {
        *s = (const char *)PyUnicode_DATA(name);
        *n = PyUnicode_GET_LENGTH(name);
        return 0;
    }
    *tmp = PyUnicode_AsEncodedString(name, "utf-8", "surrogatepass");
    if (*tmp == NULL)
        return -1;
    *s = PyBytes_AS_STRING(*tmp);
    *n = PyBytes_GET_SIZE(*tmp);
    return 0;
}

/* A UID's bytes as an integer: 1 (and *uid, *uid_len), 0 when it cannot be a UID (length
 * outside 1-8), -1 with TypeError for a non-bytes. */
static int ut_uid(PyObject *o, uint64_t *uid, unsigned *uid_len)
{
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "a UID must be bytes, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(o);
    if (n < 1 || n > 8)
        return 0;
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(o);
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        v = (v << 8) | b[i];
    *uid = v;
    *uid_len = (unsigned)n;
    return 1;
}

static PyObject *ut_uid_object(const UTEntry *e)
{
    unsigned n = UT_UID_LEN(e);
    char b[8];
    for (unsigned i = 0; i < n; i++)
        b[i] = (char)(e->uid >> (8 * (n - 1 - i)));
    return PyBytes_FromStringAndSize(b, (Py_ssize_t)n);
}

static PyObject *ut_name_object(const UidTable *t, const UTEntry *e)
{
    return PyUnicode_DecodeUTF8(t->arena.bytes + UT_OFF(e), (Py_ssize_t)e->len, "surrogatepass");
}

/* A looked-up key: the name's bytes and hash (forward) or the UID (reverse). */
typedef struct {
    const char *s;
    Py_ssize_t n;
    PyObject *tmp;
    uint64_t uid;
    unsigned uid_len;
    uint32_t hash;
} UTKey;

/* 1: key filled (drop with ut_key_done), 0: it cannot be in a table of this kind, -1: error. */
static int ut_key(UidTable *t, PyObject *o, UTKey *k)
{
    memset(k, 0, sizeof(*k));
    if (t->reverse) {
        int r = ut_uid(o, &k->uid, &k->uid_len);
        if (r == 1)
            k->hash = ut_uid_hash(k->uid, k->uid_len);
        return r;
    }
    if (ut_name_bytes(o, &k->s, &k->n, &k->tmp) < 0)
        return -1;
    Py_hash_t h = PyObject_Hash(o);
    if (h == -1) {
        Py_CLEAR(k->tmp);
        return -1;
    }
    k->hash = ut_fold((uint64_t)h);
    return 1;
}

static void ut_key_done(UTKey *k)
{
    Py_CLEAR(k->tmp);
}

/* -- the index ---------------------------------------------------------------------------- */

static int ut_matches(const UidTable *t, const UTEntry *e, const UTKey *k)
{
    if (e->hash != k->hash)
        return 0;
    if (t->reverse)
        return e->uid == k->uid && UT_UID_LEN(e) == k->uid_len;
    return e->len == (uint32_t)k->n && memcmp(t->arena.bytes + UT_OFF(e), k->s, (size_t)k->n) == 0;
}

/* The entry holding k (-1: none), and its index slot. */
static Py_ssize_t ut_find(const UidTable *t, const UTKey *k, size_t *slot_out)
{
    if (t->index.cap == 0)
        return -1;
    for (size_t i = hi_first(&t->index, k->hash);; i = hi_next(&t->index, i)) {
        uint32_t s = t->index.slots[i];
        if (s == 0)
            return -1;
        if (s != UT_TOMB && ut_matches(t, &t->entries[s - 1], k)) {
            if (slot_out != NULL)
                *slot_out = i;
            return (Py_ssize_t)(s - 1);
        }
    }
}

/* Drop dead entries (in order) and, when they waste half of it, their names' bytes; then
 * index the live ones afresh at a capacity for ``want`` entries. */
static int ut_rebuild(UidTable *t, size_t want)
{
    size_t w = 0;
    for (size_t r = 0; r < t->n; r++)
        if (UT_UID_LEN(&t->entries[r]) != 0)
            t->entries[w++] = t->entries[r];
    t->n = w;
    if (arena_wasteful(&t->arena, t->live_bytes)) {
        ByteArena fresh;
        if (arena_fresh(&fresh, t->live_bytes) < 0)
            return -1;
        for (size_t i = 0; i < w; i++) {
            UTEntry *e = &t->entries[i];
            uint64_t at = arena_take(&fresh, &t->arena, UT_OFF(e), e->len);
            e->where = at | ((uint64_t)UT_UID_LEN(e) << UT_OFF_BITS);
        }
        arena_swap(&t->arena, &fresh);
    }
    if (hi_renew(&t->index, want) < 0)
        return -1;
    for (size_t i = 0; i < w; i++)
        hi_put(&t->index, t->entries[i].hash, i);
    return 0;
}

/* Room for one more entry and one more index slot. */
static int ut_reserve(UidTable *t)
{
    if (t->live + 1 >= UT_MAX_ENTRIES) {
        PyErr_SetString(PyExc_OverflowError, "UidTable: too many entries");
        return -1;
    }
    if (t->n == t->cap) {
        size_t dead = t->n - t->live;
        if (dead > 0 && dead * 4 >= t->n) /* a quarter dead: compact rather than grow */
            return ut_rebuild(t, t->live + 1 > t->index.cap / 2 ? t->live + 1 : t->live);
        /* the first time, a page of entries */
        if (entries_grow((void **)&t->entries, &t->cap, sizeof(UTEntry), 170) < 0)
            return -1;
    }
    if (hi_full(&t->index))
        return ut_rebuild(t, t->live + 1);
    return 0;
}

/* The name's bytes appended to the arena, at *off. */
static int ut_arena_add(UidTable *t, const char *s, Py_ssize_t n, uint64_t *off)
{
    if ((uint64_t)n >= UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "UidTable: name too long");
        return -1;
    }
    return arena_add(&t->arena, s, (size_t)n, 4096, UT_OFF_MASK, off);
}

static void ut_kill(UidTable *t, size_t entry, size_t slot)
{
    UTEntry *e = &t->entries[entry];
    t->index.slots[slot] = UT_TOMB;
    t->live_bytes -= e->len;
    e->where &= UT_OFF_MASK; /* UID length 0: dead */
    t->live--;
}

/* key -> value, as dict's __setitem__ (a present key keeps its place). */
static int ut_set(UidTable *t, PyObject *key, PyObject *value)
{
    UTKey k;
    int r = ut_key(t, key, &k);
    if (r < 0)
        return -1;
    if (r == 0) {
        PyErr_SetString(PyExc_ValueError, "a UID is 1 to 8 bytes");
        return -1;
    }
    /* the value: a UID (forward) or a name's bytes (reverse) */
    uint64_t uid = k.uid;
    unsigned uid_len = k.uid_len;
    const char *s = k.s;
    Py_ssize_t n = k.n;
    PyObject *tmp = NULL;
    int ok = -1;
    if (t->reverse) {
        if (ut_name_bytes(value, &s, &n, &tmp) < 0)
            goto done;
    } else {
        r = ut_uid(value, &uid, &uid_len);
        if (r < 0)
            goto done;
        if (r == 0) {
            PyErr_SetString(PyExc_ValueError, "a UID is 1 to 8 bytes");
            goto done;
        }
    }
    Py_ssize_t found = ut_find(t, &k, NULL);
    if (found >= 0) {
        UTEntry *e = &t->entries[found];
        if (t->reverse) { /* a new name for the UID (the same one: nothing to do) */
            if (e->len == (uint32_t)n && memcmp(t->arena.bytes + UT_OFF(e), s, (size_t)n) == 0) {
                ok = 0;
                goto done;
            }
            uint64_t off;
            if (ut_arena_add(t, s, n, &off) < 0)
                goto done;
            e = &t->entries[found];
            t->live_bytes += (size_t)n - e->len;
            e->where = off | ((uint64_t)uid_len << UT_OFF_BITS);
            e->len = (uint32_t)n;
            /* the old name's bytes are dead: repack once they outweigh the live ones, or a
             * UID renamed over and over would grow the arena without bound */
            if (arena_wasteful(&t->arena, t->live_bytes) && ut_rebuild(t, t->live) < 0)
                goto done;
        } else { /* a new UID for the name */
            e->uid = uid;
            e->where = UT_OFF(e) | ((uint64_t)uid_len << UT_OFF_BITS);
        }
        ok = 0;
        goto done;
    }
    if (ut_reserve(t) < 0)
        goto done;
    uint64_t off;
    if (ut_arena_add(t, s, n, &off) < 0)
        goto done;
    UTEntry *e = &t->entries[t->n];
    e->where = off | ((uint64_t)uid_len << UT_OFF_BITS);
    e->len = (uint32_t)n;
    e->hash = k.hash;
    e->uid = uid;
    hi_put(&t->index, k.hash, t->n);
    t->n++;
    t->live++;
    t->live_bytes += (size_t)n;
    ok = 0;
done:
    Py_XDECREF(tmp);
    ut_key_done(&k);
    return ok;
}

/* The value of key, a new reference; NULL without an error when absent. */
static PyObject *ut_lookup(UidTable *t, PyObject *key, int pop)
{
    UTKey k;
    int r = ut_key(t, key, &k);
    if (r <= 0)
        return NULL;
    size_t slot;
    Py_ssize_t found = ut_find(t, &k, &slot);
    ut_key_done(&k);
    if (found < 0)
        return NULL;
    UTEntry *e = &t->entries[found];
    PyObject *value = t->reverse ? ut_name_object(t, e) : ut_uid_object(e);
    if (value != NULL && pop)
        ut_kill(t, (size_t)found, slot);
    return value;
}

static void ut_release(UidTable *t)
{
    region_free(t->entries, t->cap * sizeof(UTEntry));
    arena_release(&t->arena);
    hi_release(&t->index);
    t->entries = NULL;
    t->n = t->cap = t->live = t->live_bytes = 0;
}

/* -- the Python type ---------------------------------------------------------------------- */

static int ut_init(UidTable *t, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"reverse", NULL};
    int reverse = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:UidTable", kwlist, &reverse))
        return -1;
    ut_release(t);
    t->reverse = reverse;
    return 0;
}

static void ut_dealloc(UidTable *t)
{
    ut_release(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static Py_ssize_t ut_len(UidTable *t)
{
    return (Py_ssize_t)t->live;
}

static int ut_contains(UidTable *t, PyObject *key)
{
    UTKey k;
    int r = ut_key(t, key, &k);
    if (r <= 0)
        return r;
    Py_ssize_t found = ut_find(t, &k, NULL);
    ut_key_done(&k);
    return found >= 0;
}

static PyObject *ut_subscript(UidTable *t, PyObject *key)
{
    PyObject *value = ut_lookup(t, key, 0);
    if (value == NULL && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, key);
    return value;
}

static int ut_ass_subscript(UidTable *t, PyObject *key, PyObject *value)
{
    if (value != NULL)
        return ut_set(t, key, value);
    PyObject *old = ut_lookup(t, key, 1);
    if (old == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, key);
        return -1;
    }
    Py_DECREF(old);
    return 0;
}

static PyObject *ut_get(UidTable *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default=None)");
        return NULL;
    }
    PyObject *value = ut_lookup(t, args[0], 0);
    if (value != NULL || PyErr_Occurred())
        return value;
    PyObject *fallback = nargs > 1 ? args[1] : Py_None;
    Py_INCREF(fallback);
    return fallback;
}

static PyObject *ut_pop(UidTable *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "pop(key[, default])");
        return NULL;
    }
    PyObject *value = ut_lookup(t, args[0], 1);
    if (value != NULL || PyErr_Occurred())
        return value;
    if (nargs < 2) {
        PyErr_SetObject(PyExc_KeyError, args[0]);
        return NULL;
    }
    Py_INCREF(args[1]);
    return args[1];
}

/* update(pairs): each (key, value) set in turn, as dict.update with an iterable of pairs. */
static PyObject *ut_update(UidTable *t, PyObject *pairs)
{
    PyObject *it = PyObject_GetIter(pairs);
    if (it == NULL)
        return NULL;
    PyObject *item;
    while ((item = PyIter_Next(it)) != NULL) {
        PyObject *pair = PySequence_Fast(item, "UidTable.update takes (key, value) pairs");
        Py_DECREF(item);
        if (pair == NULL)
            goto fail;
        if (PySequence_Fast_GET_SIZE(pair) != 2) {
            Py_DECREF(pair);
            PyErr_SetString(PyExc_ValueError, "UidTable.update takes (key, value) pairs");
            goto fail;
        }
        int r = ut_set(t, PySequence_Fast_GET_ITEM(pair, 0), PySequence_Fast_GET_ITEM(pair, 1));
        Py_DECREF(pair);
        if (r < 0)
            goto fail;
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
fail:
    Py_DECREF(it);
    return NULL;
}

static PyObject *ut_clear(UidTable *t, PyObject *unused)
{
    (void)unused;
    ut_release(t);
    Py_RETURN_NONE;
}

/* [(key, value), ...] in insertion order (tests compare with the dict it replaces). */
static PyObject *ut_items(UidTable *t, PyObject *unused)
{
    (void)unused;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < t->n; i++) {
        UTEntry *e = &t->entries[i];
        if (UT_UID_LEN(e) == 0)
            continue;
        PyObject *uid = ut_uid_object(e);
        PyObject *name = uid == NULL ? NULL : ut_name_object(t, e);
        PyObject *pair = name == NULL ? NULL
                                      : (t->reverse ? PyTuple_Pack(2, uid, name)
                                                    : PyTuple_Pack(2, name, uid));
        Py_XDECREF(uid);
        Py_XDECREF(name);
        if (pair == NULL || PyList_Append(out, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return out;
}

/* The bytes the table's arrays take (mapped: resident only where touched). */
static PyObject *ut_nbytes(UidTable *t, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSize_t(t->n * sizeof(UTEntry) + t->arena.used +
                             t->index.cap * sizeof(uint32_t));
}

static PyObject *ut_get_reverse(UidTable *t, void *closure)
{
    (void)closure;
    return PyBool_FromLong(t->reverse);
}

static PyMethodDef ut_methods[] = {
    {"get", (PyCFunction)(void (*)(void))ut_get, METH_FASTCALL,
     "get(key, default=None): the value of key, or default."},
    {"pop", (PyCFunction)(void (*)(void))ut_pop, METH_FASTCALL,
     "pop(key[, default]): remove key and answer its value (KeyError or default if absent)."},
    {"update", (PyCFunction)ut_update, METH_O, "update(pairs): set each (key, value)."},
    {"clear", (PyCFunction)ut_clear, METH_NOARGS, "clear(): drop every entry."},
    {"items", (PyCFunction)ut_items, METH_NOARGS, "items(): (key, value) pairs in order."},
    {"nbytes", (PyCFunction)ut_nbytes, METH_NOARGS, "nbytes(): the bytes of its arrays."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ut_getset[] = {
    {"reverse", (getter)ut_get_reverse, NULL, "keys are UIDs (else names)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods ut_as_sequence = {
    .sq_contains = (objobjproc)ut_contains,
};

static PyMappingMethods ut_as_mapping = {
    .mp_length = (lenfunc)ut_len,
    .mp_subscript = (binaryfunc)ut_subscript,
    .mp_ass_subscript = (objobjargproc)ut_ass_subscript,
};

static PyTypeObject UidTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tsd.uid._table.UidTable",
    .tp_basicsize = sizeof(UidTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "UidTable(reverse=False): name -> UID (or UID -> name) without an object each.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ut_init,
    .tp_dealloc = (destructor)ut_dealloc,
    .tp_methods = ut_methods,
    .tp_getset = ut_getset,
    .tp_as_sequence = &ut_as_sequence,
    .tp_as_mapping = &ut_as_mapping,
};

static struct PyModuleDef table_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tsd.uid._table",
    .m_doc = "One direction of a UID cache generation without a Python object per mapping.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__table(void)
{
    if (PyType_Ready(&UidTableType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&table_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&UidTableType);
    if (PyModule_AddObject(m, "UidTable", (PyObject *)&UidTableType) < 0) {
        Py_DECREF(&UidTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
