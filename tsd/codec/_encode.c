/* Points into a writer batch's cells, in C: tsd.codec.qualifier.encode_points_into and
 * tsd.codec.rowkey's tag suffix (their Python versions are the specification and the
 * fallback when this is not built; tests/codec/test_encode_c.py checks both agree). The
 * cell format is tsd/codec/_format.h, shared with the telnet parser (tsd/protocol/_parse.c).
 *
 * encode_into(rows, points, qualifiers, int1, encode_point) -> cells added
 *   rows: dict row key -> dict qualifier -> value bytes; points: a sequence of
 *   (series, timestamp, value); qualifiers: the 2-byte seconds qualifiers by
 *   offset << 4 | flags; int1: the 256 one-byte values; encode_point: the Python encoder,
 *   called for what is not the common case (ms timestamps, 8-byte integers, errors).
 *
 * tag_suffix(pairs, tagk_width, tagv_width) -> bytes or None
 *   (tagk, tagv) UID pairs joined in tag key order, as tsd.codec.rowkey.make_series_key
 *   joins them; None for anything it would check further (widths, a repeated tag key).
 *
 * series_keys(cls, metrics, tags_list, metric_uids, key_uids, value_uids, metric_width,
 *             tagk_width, tagv_width) -> list
 *   A burst of new series' row-key templates (unsalted) in one pass: per series, its names
 *   looked up in the three {name: uid} dicts of its UID batch, its pairs sorted and joined
 *   as tag_suffix joins them, and a cls (tsd.codec.rowkey.SeriesKey) made with its slots set
 *   as SeriesKey(b"", metric_uid, suffix) sets them; None for a series it would not make
 *   (a name without a UID, a UID of another width, a repeated tag key): the caller takes
 *   that series through the per-series path for its error. python_series_keys is the
 *   specification.
 *
 * series_name_key(metric, tags) -> str or (metric, tags)
 *   tsd.codec.rowkey.python_series_name_key: the names joined by NULs, or the pair itself
 *   when a name holds a NUL (tags: a tuple of (tag key, tag value) pairs of str, as
 *   tsd.data_points.Tags).
 */
#include "_format.h"

static PyObject *encode_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_into takes 5 arguments");
        return NULL;
    }
    PyObject *rows = args[0], *qualifiers = args[2], *int1 = args[3], *encode_point = args[4];
    if (!PyDict_CheckExact(rows) || !encoder_tables_ok(qualifiers, int1)) {
        PyErr_SetString(PyExc_TypeError, "encode_into: bad arguments");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "points must be iterable");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    long long added = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *point = items[i];
        if (!PyTuple_Check(point) || PyTuple_GET_SIZE(point) != 3) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "a point is a (series, timestamp, value) tuple");
            return NULL;
        }
        int one = encode_one(rows, PyTuple_GET_ITEM(point, 0), PyTuple_GET_ITEM(point, 1),
                             PyTuple_GET_ITEM(point, 2), qualifiers, int1, encode_point);
        if (one < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        added += one;
    }
    Py_DECREF(seq);
    return PyLong_FromLongLong(added);
}

/* tag_suffix(pairs, tagk_width, tagv_width): the tag pairs' bytes sorted by tag key, or None
 * when a pair is not (bytes, bytes) of those widths or a tag key repeats. */
#define MAX_SUFFIX_PAIRS 256

static PyObject *tag_suffix(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "tag_suffix(pairs, tagk_width, tagv_width)");
        return NULL;
    }
    Py_ssize_t kw = PyLong_AsSsize_t(args[1]), vw = PyLong_AsSsize_t(args[2]);
    if ((kw == -1 || vw == -1) && PyErr_Occurred()) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "pairs must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const char *keys[MAX_SUFFIX_PAIRS], *values[MAX_SUFFIX_PAIRS];
    int plain = kw > 0 && vw > 0 && n <= MAX_SUFFIX_PAIRS;
    for (Py_ssize_t i = 0; plain && i < n; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            plain = 0;
            break;
        }
        PyObject *k = PyTuple_GET_ITEM(pair, 0), *v = PyTuple_GET_ITEM(pair, 1);
        if (!PyBytes_CheckExact(k) || !PyBytes_CheckExact(v) || PyBytes_GET_SIZE(k) != kw
            || PyBytes_GET_SIZE(v) != vw) {
            plain = 0;
            break;
        }
        /* insertion sort by tag key: a handful of pairs */
        const char *key = PyBytes_AS_STRING(k), *value = PyBytes_AS_STRING(v);
        Py_ssize_t j = i;
        for (; j > 0; j--) {
            int order = memcmp(keys[j - 1], key, (size_t)kw);
            if (order == 0) plain = 0; /* a tag key given twice */
            if (order <= 0) break;
            keys[j] = keys[j - 1];
            values[j] = values[j - 1];
        }
        keys[j] = key;
        values[j] = value;
    }
    if (!plain) {
        Py_DECREF(seq);
        Py_RETURN_NONE;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (kw + vw));
    if (out != NULL) {
        char *at = PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(at, keys[i], (size_t)kw);
            memcpy(at + kw, values[i], (size_t)vw);
            at += kw + vw;
        }
    }
    Py_DECREF(seq);
    return out;
}

/* series_keys: see the top of this file. The slots of cls, learnt once. */
static PyTypeObject *keys_type;
#define KEY_SLOTS 4
static Py_ssize_t key_slot[KEY_SLOTS]; /* metric_uid, _tsuid, _last_base, _last_key */
static const char *const key_slot_names[KEY_SLOTS] = {"metric_uid", "_tsuid", "_last_base",
                                                      "_last_key"};

static int learn_key_type(PyTypeObject *type)
{
    if (keys_type == type)
        return 0;
    if (!PyType_Check(type) || type->tp_alloc == NULL) {
        PyErr_SetString(PyExc_TypeError, "series_keys: cls must be SeriesKey");
        return -1;
    }
    for (int i = 0; i < KEY_SLOTS; i++) {
        key_slot[i] = member_offset(type, key_slot_names[i]);
        if (key_slot[i] < 0) {
            PyErr_Format(PyExc_TypeError, "series_keys: cls has no slot %s", key_slot_names[i]);
            return -1;
        }
    }
    Py_XDECREF(keys_type);
    Py_INCREF(type);
    keys_type = type;
    return 0;
}

/* value of name in uids when it is exact bytes of width; NULL (no exception) otherwise;
 * NULL with an exception set on an error. Borrowed. */
static PyObject *uid_of(PyObject *uids, PyObject *name, Py_ssize_t width)
{
    PyObject *uid = PyDict_GetItemWithError(uids, name);
    if (uid == NULL || !PyBytes_CheckExact(uid) || PyBytes_GET_SIZE(uid) != width)
        return NULL;
    return uid;
}

static PyObject *one_series_key(PyObject *metric, PyObject *tags, PyObject *metric_uids,
                                PyObject *key_uids, PyObject *value_uids, Py_ssize_t mw,
                                Py_ssize_t kw, Py_ssize_t vw, PyObject *minus_one,
                                PyObject *empty)
{
    PyObject *metric_uid = uid_of(metric_uids, metric, mw);
    if (metric_uid == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    if (!PyTuple_CheckExact(tags) || PyTuple_GET_SIZE(tags) > MAX_SUFFIX_PAIRS)
        return Py_NewRef(Py_None);
    Py_ssize_t n = PyTuple_GET_SIZE(tags);
    const char *keys[MAX_SUFFIX_PAIRS], *values[MAX_SUFFIX_PAIRS];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(tags, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            return Py_NewRef(Py_None);
        PyObject *k = uid_of(key_uids, PyTuple_GET_ITEM(pair, 0), kw);
        PyObject *v = k == NULL ? NULL : uid_of(value_uids, PyTuple_GET_ITEM(pair, 1), vw);
        if (v == NULL)
            return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        const char *key = PyBytes_AS_STRING(k), *value = PyBytes_AS_STRING(v);
        Py_ssize_t j = i;
        for (; j > 0; j--) { /* insertion sort by tag key, as tag_suffix */
            int order = memcmp(keys[j - 1], key, (size_t)kw);
            if (order == 0)
                return Py_NewRef(Py_None); /* a tag key given twice */
            if (order < 0)
                break;
            keys[j] = keys[j - 1];
            values[j] = values[j - 1];
        }
        keys[j] = key;
        values[j] = value;
    }
    /* the TSUID: the metric UID, then the pairs (the suffix of every row key) */
    PyObject *tsuid = PyBytes_FromStringAndSize(NULL, mw + n * (kw + vw));
    if (tsuid == NULL)
        return NULL;
    char *at = PyBytes_AS_STRING(tsuid);
    memcpy(at, PyBytes_AS_STRING(metric_uid), (size_t)mw);
    at += mw;
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(at, keys[i], (size_t)kw);
        memcpy(at + kw, values[i], (size_t)vw);
        at += kw + vw;
    }
    PyObject *key = keys_type->tp_alloc(keys_type, 0);
    if (key == NULL) {
        Py_DECREF(tsuid);
        return NULL;
    }
    /* SeriesKey(b"", metric_uid, suffix): unsalted, its prefix is the metric UID itself */
    PyObject *slots[KEY_SLOTS] = {metric_uid, tsuid, minus_one, empty};
    for (int i = 0; i < KEY_SLOTS; i++)
        *(PyObject **)((char *)key + key_slot[i]) = Py_NewRef(slots[i]);
    Py_DECREF(tsuid);
    /* Its slots only ever hold bytes and ints (the row-key cache included): it can be in no
     * reference cycle, so the cyclic collector need not walk it. A burst of new series
     * makes one per series, and each young collection walked them all (millions live). */
    PyObject_GC_UnTrack(key);
    return key;
}

static PyObject *series_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "series_keys(cls, metrics, tags_list, metric_uids, key_uids, value_uids,"
                        " metric_width, tagk_width, tagv_width)");
        return NULL;
    }
    if (learn_key_type((PyTypeObject *)args[0]) < 0)
        return NULL;
    PyObject *metric_uids = args[3], *key_uids = args[4], *value_uids = args[5];
    if (!PyDict_Check(metric_uids) || !PyDict_Check(key_uids) || !PyDict_Check(value_uids)) {
        PyErr_SetString(PyExc_TypeError, "series_keys: the UIDs are dicts");
        return NULL;
    }
    Py_ssize_t mw = PyLong_AsSsize_t(args[6]), kw = PyLong_AsSsize_t(args[7]),
               vw = PyLong_AsSsize_t(args[8]);
    if (PyErr_Occurred())
        return NULL;
    if (mw <= 0 || kw <= 0 || vw <= 0) {
        PyErr_SetString(PyExc_ValueError, "series_keys: widths are positive");
        return NULL;
    }
    PyObject *metrics = PySequence_Fast(args[1], "metrics must be a sequence");
    if (metrics == NULL)
        return NULL;
    PyObject *tags_list = PySequence_Fast(args[2], "tags_list must be a sequence");
    if (tags_list == NULL) {
        Py_DECREF(metrics);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(metrics);
    PyObject *out = NULL, *minus_one = PyLong_FromLong(-1), *empty = PyBytes_FromStringAndSize(NULL, 0);
    if (minus_one == NULL || empty == NULL)
        goto done;
    if (PySequence_Fast_GET_SIZE(tags_list) != n) {
        PyErr_SetString(PyExc_ValueError, "series_keys: as many tags as metrics");
        goto done;
    }
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    PyObject **ms = PySequence_Fast_ITEMS(metrics), **ts = PySequence_Fast_ITEMS(tags_list);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = one_series_key(ms[i], ts[i], metric_uids, key_uids, value_uids, mw, kw,
                                       vw, minus_one, empty);
        if (key == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, key);
    }
done:
    Py_XDECREF(minus_one);
    Py_XDECREF(empty);
    Py_DECREF(metrics);
    Py_DECREF(tags_list);
    return out;
}

static PyObject *nul;

static PyObject *series_name_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *tags = nargs == 2 ? args[1] : NULL;
    if (tags == NULL || !PyUnicode_Check(args[0]) || !PyTuple_Check(tags)) {
        PyErr_SetString(PyExc_TypeError, "series_name_key(metric, tags): tags a tuple of pairs");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(tags);
    PyObject *names = PyList_New(1 + 2 * n), *key = NULL;
    if (names == NULL)
        return NULL;
    PyList_SET_ITEM(names, 0, Py_NewRef(args[0]));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(tags, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "series_name_key: tags are (key, value) pairs");
            Py_DECREF(names);
            return NULL;
        }
        PyList_SET_ITEM(names, 1 + 2 * i, Py_NewRef(PyTuple_GET_ITEM(pair, 0)));
        PyList_SET_ITEM(names, 2 + 2 * i, Py_NewRef(PyTuple_GET_ITEM(pair, 1)));
    }
    key = PyUnicode_Join(nul, names); /* raises for a name that is not a str */
    Py_DECREF(names);
    if (key == NULL)
        return NULL;
    Py_ssize_t nuls = PyUnicode_Count(key, nul, 0, PY_SSIZE_T_MAX);
    if (nuls < 0)
        Py_CLEAR(key);
    else if (nuls != 2 * n) /* a name holds a NUL: the join would be ambiguous */
        Py_SETREF(key, PyTuple_Pack(2, args[0], tags));
    return key;
}

static PyMethodDef methods[] = {
    {"encode_into", (PyCFunction)(void (*)(void))encode_into, METH_FASTCALL,
     "Encode (series, timestamp, value) points into a batch's rows; the cells added."},
    {"tag_suffix", (PyCFunction)(void (*)(void))tag_suffix, METH_FASTCALL,
     "Tag pairs' bytes sorted by tag key, or None (tsd.codec.rowkey.make_series_key)."},
    {"series_name_key", (PyCFunction)(void (*)(void))series_name_key, METH_FASTCALL,
     "A series' key in the ingest service's refs (tsd.codec.rowkey.series_name_key)."},
    {"series_keys", (PyCFunction)(void (*)(void))series_keys, METH_FASTCALL,
     "A burst of new series' row-key templates in one pass (tsd.codec.rowkey.series_keys)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_encode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__encode(void)
{
    if (format_init() < 0)
        return NULL;
    nul = PyUnicode_FromStringAndSize("\0", 1);
    if (nul == NULL)
        return NULL;
    return PyModule_Create(&module);
}
