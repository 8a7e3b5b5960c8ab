/* The put parsers' hot paths in C: telnet put lines of known series typed (and encoded
 * into a connection's cells in the same pass), a plain put line of a new series parsed,
 * /api/put's usual points of known series and remote write's samples of known series.
 * Drop-in versions of tsd.protocol.telnet's python_take_known_puts, take_known_puts_into
 * and parse_plain_put and of tsd.protocol.put_json.python_known_usual_points (their
 * docstrings are the specification; the Python functions stay the fallback when this is
 * not built, and tests/codec/test_encode_c.py and tests/protocol/test_telnet_plain_put.py
 * check both agree). The cell format is tsd/codec/_format.h.
 *
 * take_known_puts(lines, start, known, out, limit) -> index of the first line not taken
 *
 * take_known_into(lines, start, known, rows, limit, qualifiers, int1, encode_point)
 *   -> (index, points taken, cells added): both in one pass, into the caller's own rows.
 *
 * parse_plain_put(line, max_tags, point_type) -> (point, (metric word, tag text)) or None
 *   a put line of any series in the plain form collectors send, parsed as
 *   tsd.protocol.telnet.parse_put parses it (the full parser takes every other line).
 *
 * known_usual_points(usual, known) -> list of (series, timestamp, value), or None
 *   usual: a /api/put body decoded as tsd.protocol.put_json's usual points (objects with
 *   metric, timestamp, value and tags as raw JSON text); known: dict usual_key -> series
 *   (put_json.usual_key: the metric's UTF-8, 0xFF, the tags' text). None as soon as one
 *   point's series is not in known (the loop in put_json.python_known_usual_points is the
 *   specification).
 *
 * series_fit(series, payloads, fields) -> bool: whether each of remote write's series ends
 *   with its sample's field (then its key is its bytes before that field)
 *   (tsd.protocol.prom_samples.python_series_fit is the specification;
 *   tests/protocol/test_prom_samples.py checks both agree).
 *
 * take_known_series(series, payloads, values, timestamps, known, out, low, high, start, end)
 *   -> (samples taken, others): Prometheus remote write's samples of known series (looked
 *   up by key, in a KeyTable without a bytes object), their series listed (values and
 *   timestamps as float64 and int64 columns)
 *   (tsd.protocol.prom_samples.python_take_known_series is the specification; the same
 *   tests).
 *
 * align_columns(values, timestamps, count) -> bool: remote write's sample columns read back
 *   from their marks, in place
 *   (tsd.protocol.prom_samples.python_align_columns is the specification; the same tests).
 */
#include "_format.h"
#include "_keytable.h"

static int all_digits(const char *s, Py_ssize_t n)
{
    if (n <= 0)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* The value of n ASCII digits (all_digits checked, at most 18). */
static long long decimal(const char *s, Py_ssize_t n)
{
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

static Py_ssize_t digits(const char *s, Py_ssize_t at, Py_ssize_t n)
{
    while (at < n && s[at] >= '0' && s[at] <= '9')
        at++;
    return at;
}

/* tsd.protocol.telnet._PLAIN_FLOAT's fullmatch:
 * -?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|-?[0-9]+[eE][-+]?[0-9]+ */
static int plain_float(const char *s, Py_ssize_t n)
{
    Py_ssize_t at = 0;
    if (at < n && s[at] == '-')
        at++;
    Py_ssize_t start = at;
    at = digits(s, at, n);
    Py_ssize_t whole = at - start;
    int exponent_needed = 0;
    if (at < n && s[at] == '.') {
        at++;
        Py_ssize_t fraction_start = at;
        at = digits(s, at, n);
        if (whole == 0 && at == fraction_start)
            return 0;
    } else {
        if (whole == 0)
            return 0;
        exponent_needed = 1;
    }
    if (at < n && (s[at] == 'e' || s[at] == 'E')) {
        at++;
        if (at < n && (s[at] == '-' || s[at] == '+'))
            at++;
        Py_ssize_t exp_start = at;
        at = digits(s, at, n);
        if (at == exp_start)
            return 0;
    } else if (exponent_needed) {
        return 0;
    }
    return at == n;
}

/* Exact powers of ten up to 1e15 (each a double without rounding). */
static const double POWERS_OF_TEN[16] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                         1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* A plain decimal ("-?digits.digits", plain_float checked) of at most 15 digits, typed
 * without strtod: its digits are an integer below 2**53 and 10**k is exact, so one IEEE
 * division rounds the quotient correctly, as strtod and Python's float() round it (the
 * fast path of Clinger's algorithm). 0 when the text has another form. */
static int short_decimal(const char *s, Py_ssize_t n, double *out)
{
    int negative = n > 0 && s[0] == '-';
    long long mantissa = 0;
    int count = 0, fraction = -1;
    for (Py_ssize_t at = negative; at < n; at++) {
        char c = s[at];
        if (c >= '0' && c <= '9') {
            if (++count > 15)
                return 0;
            mantissa = mantissa * 10 + (c - '0');
            if (fraction >= 0)
                fraction++;
        } else if (c == '.' && fraction < 0) {
            fraction = 0;
        } else {
            return 0; /* an exponent */
        }
    }
    if (fraction < 0)
        return 0;
    double value = (double)mantissa / POWERS_OF_TEN[fraction];
    *out = negative ? -value : value;
    return 1;
}

/* A put line typed: its series (borrowed from known), timestamp and value (an integer in
 * ival, or a float in dval when is_float). */
typedef struct {
    PyObject *series;
    long long timestamp;
    int is_float;
    long long ival;
    double dval;
} Put;

/* A put line's timestamp and value words typed into ``put`` as parse_put types them, in
 * their usual forms: 1 when typed, 0 when the Python parser must (anything unusual, and
 * every error), -1 with an exception set. */
static int type_numbers(const char *text, Py_ssize_t text_n, const char *value_text,
                        Py_ssize_t value_n, Put *put)
{
    long long *timestamp = &put->timestamp;
    int *is_float = &put->is_float;
    long long *ival = &put->ival;
    double *dval = &put->dval;
    if (!all_digits(text, text_n) || text_n > 13)
        return 0;
    long long ts = decimal(text, text_n);
    if (ts == 0)
        return 0;
    *timestamp = ts;
    *is_float = 0;
    /* an integer of up to 18 digits, with an optional minus sign: always within a long */
    int negative = value_n > 1 && value_text[0] == '-';
    if (all_digits(value_text + negative, value_n - negative)) {
        if (value_n - negative > 18)
            return 0;
        long long v = decimal(value_text + negative, value_n - negative);
        *ival = negative ? -v : v;
        return 1;
    }
    if (!plain_float(value_text, value_n))
        return 0;
    if (short_decimal(value_text, value_n, dval)) {
        *is_float = 1;
        return 1;
    }
    char buf[128];
    if (value_n >= (Py_ssize_t)sizeof(buf))
        return 0; /* a long one: the Python function types it */
    memcpy(buf, value_text, value_n);
    buf[value_n] = '\0';
    char *stop = NULL;
    double d = PyOS_string_to_double(buf, &stop, NULL);
    if (d == -1.0 && PyErr_Occurred())
        return -1;
    if (stop != buf + value_n || !(d >= -DBL_MAX && d <= DBL_MAX))
        return 0;
    *is_float = 1;
    *dval = d;
    return 1;
}

/* The telnet ref cache's key of a put line's series (tsd.protocol.telnet.put_line_key):
 * the metric word and the tag text joined by one space. One bytes object: a tuple of two
 * cost three allocations and three hashes per known line, a third of its time. */
static PyObject *series_words(const char *metric, Py_ssize_t metric_n, const char *tags,
                              Py_ssize_t tags_n)
{
    PyObject *key = PyBytes_FromStringAndSize(NULL, metric_n + 1 + tags_n);
    if (key == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(key);
    memcpy(out, metric, metric_n);
    out[metric_n] = ' ';
    memcpy(out + metric_n + 1, tags, tags_n);
    return key;
}

/* The four cuts of a put line, line.split(b" ", 4) (command, metric, timestamp, value,
 * tags); 0 when it is not a put line of that shape. */
static int put_cuts(const char *s, Py_ssize_t n, Py_ssize_t cut[4])
{
    Py_ssize_t found = 0;
    for (Py_ssize_t i = 0; i < n && found < 4; i++)
        if (s[i] == ' ')
            cut[found++] = i;
    return found == 4 && cut[0] == 3 && memcmp(s, "put", 3) == 0;
}

/* The series key of a put line (its metric, a space, its tags: put_line_key) written to
 * out (room for cap bytes); its length, or -1 when it does not fit. */
static Py_ssize_t put_key(const char *s, Py_ssize_t n, const Py_ssize_t cut[4], char *out,
                          Py_ssize_t cap)
{
    Py_ssize_t metric_n = cut[1] - cut[0] - 1, tags_n = n - cut[3] - 1;
    Py_ssize_t key_n = metric_n + 1 + tags_n;
    if (key_n > cap)
        return -1;
    memcpy(out, s + cut[0] + 1, (size_t)metric_n);
    out[metric_n] = ' ';
    memcpy(out + metric_n + 1, s + cut[3] + 1, (size_t)tags_n);
    return key_n;
}

#define KEY_ON_STACK 512

/* -- the key table's probes asked for ahead ------------------------------------------------
 * A lookup in a table of a million series is three dependent cache misses (its index
 * slot, its entry, its key bytes), each a few hundred nanoseconds on a loaded machine:
 * most of a known point's cost. Over a run of lines the misses of later lines are started
 * while earlier ones are worked on, in three stages a block of AHEAD_BLOCK lines apart:
 * a line's key hashed and its index slot prefetched; then its entry; then its key bytes
 * and its value. Only hints: every lookup still reads the table as it is (kt_find), so
 * a table changed meanwhile (a Python encoder called for a line) costs a miss, never a
 * wrong answer. The hashes are kept for the lookups (no line is hashed twice). */
#define AHEAD_BLOCK 8
/* A table this small stays in the caches: looking ahead would only add its passes. */
#define AHEAD_MIN_ENTRIES ((size_t)1 << 16)

typedef struct {
    KeyTable *table;
    PyObject *lines;
    Py_ssize_t start, end;
    int64_t *hashes; /* per line from start: its key's hash, or -1 (not a put line) */
    Py_ssize_t staged; /* lines hashed up to (from start; the first block never is) */
} Ahead;

static void ahead_init(Ahead *a, PyObject *known, PyObject *lines, Py_ssize_t start,
                      Py_ssize_t end)
{
    a->table = NULL;
    a->hashes = NULL;
    a->lines = lines;
    a->start = start;
    a->end = end;
    a->staged = AHEAD_BLOCK;
    if (!kt_check(known) || end - start < 3 * AHEAD_BLOCK ||
        ((KeyTable *)known)->young < AHEAD_MIN_ENTRIES)
        return;
    a->table = (KeyTable *)known; /* the hashes' room is taken when a run gets that far */
}

static void ahead_free(Ahead *a)
{
    PyMem_Free(a->hashes);
    a->hashes = NULL;
}

/* Stage 1 for lines [from, to): hashed, index slots prefetched. */
static void ahead_hash(Ahead *a, Py_ssize_t from, Py_ssize_t to)
{
    KeyTable *t = a->table;
    char buf[KEY_ON_STACK];
    for (Py_ssize_t i = from; i < to; i++) {
        int64_t hash = -1;
        PyObject *line = PyList_GET_ITEM(a->lines, i);
        Py_ssize_t cut[4];
        if (PyBytes_CheckExact(line) &&
            put_cuts(PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line), cut)) {
            Py_ssize_t key_n = put_key(PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line), cut,
                                       buf, KEY_ON_STACK);
            if (key_n >= 0) {
                uint32_t h = kt_hash(buf, key_n);
                hash = h;
                __builtin_prefetch(&t->index.slots[hi_first(&t->index, h)]);
            }
        }
        a->hashes[i - a->start] = hash;
    }
}

/* Stage 2 (entry) or 3 (key bytes and value) for lines [from, to). */
static void ahead_follow(Ahead *a, Py_ssize_t from, Py_ssize_t to, int stage)
{
    KeyTable *t = a->table;
    for (Py_ssize_t i = from; i < to; i++) {
        int64_t hash = a->hashes[i - a->start];
        if (hash < 0)
            continue;
        uint32_t s = t->index.slots[hi_first(&t->index, (uint32_t)hash)];
        if (s == 0 || s == KT_TOMB || s - 1 >= t->n)
            continue;
        KTEntry *e = &t->entries[s - 1];
        if (stage == 2) {
            __builtin_prefetch(e);
        } else {
            __builtin_prefetch(t->arena.bytes + e->off);
            if (e->value != NULL)
                __builtin_prefetch(e->value);
        }
    }
}

/* Line i's key hash (-1: none known), the stages moved on when i starts a block. */
static int64_t ahead_at(Ahead *a, Py_ssize_t i)
{
    if (a->table == NULL || a->table->index.cap == 0)
        return -1;
    Py_ssize_t at = i - a->start;
    if (at < AHEAD_BLOCK)
        return -1; /* a run's first block goes without: a short run (known lines between
                      new ones) hashes nothing ahead in vain */
    if (at % AHEAD_BLOCK == 0) {
        if (a->hashes == NULL) {
            a->hashes = PyMem_Malloc((size_t)(a->end - a->start) * sizeof(int64_t));
            if (a->hashes == NULL) {
                a->table = NULL; /* no lookahead: every lookup hashes its own line */
                return -1;
            }
        }
        Py_ssize_t lead = i + 3 * AHEAD_BLOCK < a->end ? i + 3 * AHEAD_BLOCK : a->end;
        Py_ssize_t hashed = a->start + a->staged;
        if (hashed < lead) {
            ahead_hash(a, hashed, lead);
            a->staged = lead - a->start;
        }
        Py_ssize_t mid = i + AHEAD_BLOCK, far = i + 2 * AHEAD_BLOCK;
        if (mid < a->end)
            ahead_follow(a, mid, far < a->end ? far : a->end, 2);
        ahead_follow(a, i, mid < a->end ? mid : a->end, 3);
    }
    return a->hashes[at];
}

/* Line ``index`` of tsd.protocol.telnet.python_take_known_puts: 1 when it is taken, 0 when
 * it is not, -1 on an error. ``hash``: the line key's hash when known (Ahead), else -1. */
static int parse_line(PyObject *lines, Py_ssize_t index, PyObject *known, Put *put,
                      int64_t hash)
{
    PyObject *line = PyList_GET_ITEM(lines, index);
    PyObject **series = &put->series;
    if (!PyBytes_CheckExact(line))
        return 0;
    const char *s = PyBytes_AS_STRING(line);
    Py_ssize_t n = PyBytes_GET_SIZE(line);
    Py_ssize_t cut[4];
    if (!put_cuts(s, n, cut))
        return 0;
    const char *metric = s + cut[0] + 1, *text = s + cut[1] + 1, *value_text = s + cut[2] + 1;
    Py_ssize_t metric_n = cut[1] - cut[0] - 1, text_n = cut[2] - cut[1] - 1;
    Py_ssize_t value_n = cut[3] - cut[2] - 1;
    const char *tags = s + cut[3] + 1;
    Py_ssize_t tags_n = n - cut[3] - 1;
    if (kt_check(known)) { /* the key's bytes on the stack: no object per line */
        char buf[KEY_ON_STACK];
        Py_ssize_t key_n = metric_n + 1 + tags_n;
        char *k = key_n <= (Py_ssize_t)sizeof(buf) ? buf : PyMem_Malloc((size_t)key_n);
        if (k == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        put_key(s, n, cut, k, key_n);
        KeyTable *t = (KeyTable *)known;
        *series = t->young == 0 ? NULL
                                : kt_get_young_hashed(t, k, key_n,
                                                      hash >= 0 ? (uint32_t)hash
                                                                : kt_hash(k, key_n));
        if (k != buf)
            PyMem_Free(k);
        if (*series == NULL)
            return 0;
        return type_numbers(text, text_n, value_text, value_n, put);
    }
    PyObject *key = series_words(metric, metric_n, tags, tags_n);
    if (key == NULL)
        return -1;
    *series = PyDict_GetItemWithError(known, key);
    Py_DECREF(key);
    if (*series == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return type_numbers(text, text_n, value_text, value_n, put);
}

static PyObject *value_object(const Put *put)
{
    return put->is_float ? PyFloat_FromDouble(put->dval) : PyLong_FromLongLong(put->ival);
}

static int check_lines(PyObject *const *args, Py_ssize_t *start, Py_ssize_t *end,
                       Py_ssize_t limit_at)
{
    PyObject *lines = args[0];
    *start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[limit_at]);
    if ((*start == -1 || limit == -1) && PyErr_Occurred())
        return -1;
    if (!PyList_CheckExact(lines) || !(PyDict_Check(args[2]) || kt_check(args[2]))) {
        PyErr_SetString(PyExc_TypeError, "lines must be a list and known a dict or KeyTable");
        return -1;
    }
    *end = PyList_GET_SIZE(lines);
    if (limit < *end - *start)
        *end = *start + limit;
    return 0;
}

static PyObject *take_known_puts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "take_known_puts(lines, start, known, out, limit)");
        return NULL;
    }
    Py_ssize_t index, end;
    if (check_lines(args, &index, &end, 4) < 0)
        return NULL;
    for (; index < end; index++) {
        Put put;
        int ok = parse_line(args[0], index, args[2], &put, -1);
        if (ok <= 0) {
            if (ok < 0)
                return NULL;
            break;
        }
        PyObject *value = value_object(&put);
        if (value == NULL)
            return NULL;
        PyObject *stamp = PyLong_FromLongLong(put.timestamp);
        if (stamp == NULL) {
            Py_DECREF(value);
            return NULL;
        }
        PyObject *point = PyTuple_Pack(3, put.series, stamp, value);
        Py_DECREF(stamp);
        Py_DECREF(value);
        if (point == NULL)
            return NULL;
        int appended = PyList_Append(args[3], point);
        Py_DECREF(point);
        if (appended < 0)
            return NULL;
    }
    return PyLong_FromSsize_t(index);
}

/* take_known_into(lines, start, known, rows, limit, qualifiers, int1, encode_point)
 *   -> (index, points taken, cells added): take_known_puts and encode_into in one pass,
 *   without a Python object per point beyond its cell. */
static PyObject *take_known_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 || !PyDict_CheckExact(args[3]) || !encoder_tables_ok(args[5], args[6])) {
        PyErr_SetString(PyExc_TypeError, "take_known_into: bad arguments");
        return NULL;
    }
    PyObject *rows = args[3], *qualifiers = args[5], *int1 = args[6], *encode_point = args[7];
    Py_ssize_t index, end, start;
    if (check_lines(args, &index, &end, 4) < 0)
        return NULL;
    start = index;
    long long added = 0;
    PyObject *last_series = NULL, *last_row = NULL;
    long long last_base = -1;
    Ahead ahead;
    ahead_init(&ahead, args[2], args[0], index, end);
    for (; index < end; index++) {
        Put put;
        int ok = parse_line(args[0], index, args[2], &put, ahead_at(&ahead, index));
        if (ok <= 0) {
            if (ok < 0)
                goto error;
            break;
        }
        PyObject *series = put.series, *bytes = NULL;
        long long timestamp = put.timestamp;
        int flags = 0;
        int fast = 0;
        if (timestamp <= 0xFFFFFFFFLL) {
            fast = encode_number(put.is_float, put.ival, put.dval, int1, &flags, &bytes);
            if (fast < 0)
                goto error;
        }
        if (!fast) { /* milliseconds, or an 8-byte integer: the general encoder */
            PyObject *value = value_object(&put);
            PyObject *stamp = value == NULL ? NULL : PyLong_FromLongLong(timestamp);
            int one = stamp == NULL ? -1
                                    : encode_one(rows, series, stamp, value, qualifiers, int1,
                                                 encode_point);
            Py_XDECREF(value);
            Py_XDECREF(stamp);
            if (one < 0)
                goto error;
            added += one;
            continue;
        }
        long long base = timestamp - timestamp % MAX_TIMESPAN;
        PyObject *qualifier =
            PyTuple_GET_ITEM(qualifiers, ((timestamp - base) << FLAG_BITS) | flags);
        PyObject *row;
        if (series == last_series && base == last_base) {
            row = last_row;
            Py_INCREF(row);
        } else {
            row = series_row(series, base);
            if (row == NULL) {
                Py_DECREF(bytes);
                goto error;
            }
            Py_XDECREF(last_row);
            last_row = row;
            Py_INCREF(last_row);
            last_series = series;
            last_base = base;
        }
        int one = put_cell(rows, row, qualifier, bytes);
        Py_DECREF(row);
        Py_DECREF(bytes);
        if (one < 0)
            goto error;
        added += one;
    }
    Py_XDECREF(last_row);
    ahead_free(&ahead);
    return Py_BuildValue("(nnL)", index, index - start, added);
error:
    Py_XDECREF(last_row);
    ahead_free(&ahead);
    return NULL;
}

/* -- a put line of a new series, in its plain form ---------------------------------------- */

#define MAX_PLAIN_TAGS 64

/* A byte of tsd.protocol.names.PLAIN_NAME_CHARS ([A-Za-z0-9./_-]): valid in any config. */
static int plain_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '/' || c == '_' || c == '-';
}

static int plain_run(const char *s, Py_ssize_t n)
{
    if (n <= 0)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!plain_char((unsigned char)s[i]))
            return 0;
    return 1;
}

typedef struct {
    const char *key, *value;
    Py_ssize_t key_n, value_n;
} Tag;

/* Python's str order for ASCII names: bytes, then length. */
static int tag_before(const Tag *a, const Tag *b)
{
    Py_ssize_t n = a->key_n < b->key_n ? a->key_n : b->key_n;
    int c = memcmp(a->key, b->key, n);
    return c < 0 || (c == 0 && a->key_n < b->key_n);
}

/* The interned str of the ASCII name s[:n] (a metric or a tag key: the same few names
 * on every line), a new reference. The last names made are kept in a small table by a
 * hash of their bytes, so a name seen lately costs a compare, not a decode, a hash and a
 * lookup in the interpreter's table of interned strings. */
#define NAME_SLOTS 64
static PyObject *name_slots[NAME_SLOTS];

static PyObject *interned_ascii(const char *s, Py_ssize_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    PyObject **slot = &name_slots[h % NAME_SLOTS];
    PyObject *known = *slot;
    if (known != NULL && PyUnicode_GET_LENGTH(known) == n &&
        memcmp(PyUnicode_1BYTE_DATA(known), s, (size_t)n) == 0) {
        Py_INCREF(known);
        return known;
    }
    PyObject *text = PyUnicode_DecodeASCII(s, n, NULL);
    if (text == NULL)
        return NULL;
    PyUnicode_InternInPlace(&text);
    Py_XSETREF(*slot, Py_NewRef(text));
    return text;
}

/* A tag's (key, value) pair: the last pair made of the same text in its slot (hashed by
 * the tag's text) is shared rather than made again. Collectors repeat most tags line after
 * line (a data centre, an environment: one tag of a new series' line is new, not all):
 * no tuple and no value str for those, and the UID lookups of a burst meet one str object
 * whose hash is known. A pair is immutable, so sharing one is invisible to its users. */
#define PAIR_SLOTS 1024
static PyObject *pair_slots[PAIR_SLOTS];

static int same_ascii(PyObject *text, const char *s, Py_ssize_t n)
{
    return PyUnicode_GET_LENGTH(text) == n && memcmp(PyUnicode_1BYTE_DATA(text), s, (size_t)n) == 0;
}

static PyObject *tag_pair(const Tag *tag)
{
    uint32_t h = 2166136261u; /* FNV-1a over key, '=', value */
    for (Py_ssize_t i = 0; i < tag->key_n; i++)
        h = (h ^ (unsigned char)tag->key[i]) * 16777619u;
    h = (h ^ (unsigned char)'=') * 16777619u;
    for (Py_ssize_t i = 0; i < tag->value_n; i++)
        h = (h ^ (unsigned char)tag->value[i]) * 16777619u;
    PyObject **slot = &pair_slots[h % PAIR_SLOTS];
    PyObject *known = *slot;
    if (known != NULL && same_ascii(PyTuple_GET_ITEM(known, 1), tag->value, tag->value_n) &&
        same_ascii(PyTuple_GET_ITEM(known, 0), tag->key, tag->key_n))
        return Py_NewRef(known);
    PyObject *key = interned_ascii(tag->key, tag->key_n);
    PyObject *value = key == NULL ? NULL : PyUnicode_DecodeASCII(tag->value, tag->value_n, NULL);
    PyObject *pair = value == NULL ? NULL : PyTuple_Pack(2, key, value);
    Py_XDECREF(key);
    Py_XDECREF(value);
    if (pair != NULL) {
        PyObject_GC_UnTrack(pair); /* two str: the collector would untrack it at its first pass */
        Py_XSETREF(*slot, Py_NewRef(pair));
    }
    return pair;
}

/* parse_plain_put(line, max_tags, point_type) -> (point, (metric word, tag text)) or None
 *   tsd.protocol.telnet.parse_put's answer for a put line in its plain form, the form
 *   collectors send: single spaces, a metric and 1 to max_tags tags "k=v" of
 *   PLAIN_NAME_CHARS (names valid whatever the configuration), distinct keys, a usual
 *   timestamp and value (type_numbers). None for anything else, errors included: the
 *   caller then runs the full parser, whose answer and reply stay OpenTSDB's. point_type
 *   is tsd.data_points.DataPoint (a tuple of metric, timestamp, value, sorted tag pairs). */
/* The fields of a plain put line (see parse_plain_put): 1 with fields[0..3] (metric,
 * timestamp, value, sorted tag pairs: DataPoint's order) and the alias set (new
 * references), 0 when the line is not plain, -1 on an error. */
static int plain_fields(PyObject *line, Py_ssize_t max_tags, PyObject *fields[4],
                        PyObject **alias_out)
{
    if (max_tags > MAX_PLAIN_TAGS)
        max_tags = MAX_PLAIN_TAGS;
    if (max_tags < 1 || !PyBytes_CheckExact(line)) /* no tag allowed: the full parser's error */
        return 0;
    const char *s = PyBytes_AS_STRING(line);
    Py_ssize_t n = PyBytes_GET_SIZE(line);
    if (n < 4 || memcmp(s, "put ", 4) != 0)
        return 0;
    /* the words after "put", each ended by a single space or the line's end */
    const char *word[4 + MAX_PLAIN_TAGS];
    Py_ssize_t size[4 + MAX_PLAIN_TAGS];
    Py_ssize_t words = 0, at = 4;
    while (at < n) {
        if (words == 3 + max_tags)
            return 0; /* too many tags for the fast form */
        const char *end = memchr(s + at, ' ', n - at);
        Py_ssize_t stop = end == NULL ? n : end - s;
        if (stop == at)
            return 0; /* an empty word: two spaces, or a space at the end */
        word[words] = s + at;
        size[words++] = stop - at;
        at = stop + 1;
        if (end != NULL && at == n)
            return 0;
    }
    if (words < 4 || !plain_run(word[0], size[0]))
        return 0;
    Put put;
    int typed = type_numbers(word[1], size[1], word[2], size[2], &put);
    if (typed <= 0)
        return typed;
    Tag tags[MAX_PLAIN_TAGS];
    Py_ssize_t count = words - 3;
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *w = word[3 + i];
        const char *eq = memchr(w, '=', size[3 + i]);
        if (eq == NULL)
            return 0;
        Tag tag = {w, eq + 1, eq - w, size[3 + i] - (eq - w) - 1};
        if (!plain_run(tag.key, tag.key_n) || !plain_run(tag.value, tag.value_n))
            return 0; /* a second '=' is not a plain character either */
        Py_ssize_t j = i; /* insertion sort by key; a key given twice goes to Python */
        while (j > 0 && tag_before(&tag, &tags[j - 1])) {
            tags[j] = tags[j - 1];
            j--;
        }
        const Tag *prev = j > 0 ? &tags[j - 1] : NULL;
        if (prev != NULL && prev->key_n == tag.key_n && !memcmp(prev->key, tag.key, tag.key_n))
            return 0;
        tags[j] = tag;
    }
    PyObject *pairs = PyTuple_New(count);
    if (pairs == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = tag_pair(&tags[i]);
        if (pair == NULL) {
            Py_DECREF(pairs);
            return -1;
        }
        PyTuple_SET_ITEM(pairs, i, pair);
    }
    PyObject_GC_UnTrack(pairs); /* untracked pairs: as the collector's first pass would */
    fields[3] = pairs;
    fields[0] = interned_ascii(word[0], size[0]);
    fields[1] = fields[0] == NULL ? NULL : PyLong_FromLongLong(put.timestamp);
    fields[2] = fields[1] == NULL ? NULL : value_object(&put);
    PyObject *alias = fields[2] == NULL ? NULL
                                        : series_words(word[0], size[0], word[3], n - (word[3] - s));
    if (alias == NULL) {
        for (int i = 0; i < 4; i++)
            Py_CLEAR(fields[i]);
        return -1;
    }
    *alias_out = alias;
    return 1;
}

/* The point (a point_type of the fields) and alias of a plain put line: as plain_fields. */
static int plain_put(PyObject *line, Py_ssize_t max_tags, PyTypeObject *point_type,
                     PyObject **point_out, PyObject **alias_out)
{
    PyObject *fields[4] = {NULL, NULL, NULL, NULL};
    int parsed = plain_fields(line, max_tags, fields, alias_out);
    if (parsed <= 0)
        return parsed;
    PyObject *point = point_type->tp_alloc(point_type, 4);
    if (point == NULL) {
        for (int i = 0; i < 4; i++)
            Py_DECREF(fields[i]);
        Py_DECREF(*alias_out);
        return -1;
    }
    for (int i = 0; i < 4; i++)
        PyTuple_SET_ITEM(point, i, fields[i]);
    *point_out = point;
    return 1;
}

/* point_type (or item_type) is a tuple subclass laid out as a tuple (a NamedTuple) */
static int tuple_like(PyObject *type)
{
    return PyType_Check(type) && PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type) &&
           ((PyTypeObject *)type)->tp_basicsize == PyTuple_Type.tp_basicsize;
}

static PyObject *parse_plain_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !tuple_like(args[2])) {
        PyErr_SetString(PyExc_TypeError, "parse_plain_put(line, max_tags, point_type)");
        return NULL;
    }
    Py_ssize_t max_tags = PyLong_AsSsize_t(args[1]);
    if (max_tags == -1 && PyErr_Occurred())
        return NULL;
    PyObject *point, *alias;
    int parsed = plain_put(args[0], max_tags, (PyTypeObject *)args[2], &point, &alias);
    if (parsed <= 0)
        return parsed < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *answer = PyTuple_Pack(2, point, alias);
    Py_DECREF(point);
    Py_DECREF(alias);
    return answer;
}

/* take_new_plain(lines, start, limit, known, max_tags, keys, metrics, tags, timestamps,
 *                values) -> index
 *   Consecutive plain put lines of series not in known (a burst of new series), each
 *   parsed as parse_plain_put parses it, as columns: its alias appended to keys and its
 *   point's fields to metrics, tags, timestamps and values (no object per line beyond
 *   the fields: tsd.protocol.telnet_frame.NewPuts), from lines[start], at most limit of
 *   them; it stops at the first line that is not a plain put (None, empty, a command,
 *   any other form) or whose series is known (its alias a key of known): the index of
 *   that line. tsd.protocol.telnet.python_take_new_plain is the specification. */
static PyObject *take_new_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int lists = nargs == 10;
    for (Py_ssize_t i = 5; lists && i < 10; i++)
        lists = PyList_CheckExact(args[i]);
    if (!lists || !PyList_CheckExact(args[0]) || !(PyDict_Check(args[3]) || kt_check(args[3]))) {
        PyErr_SetString(PyExc_TypeError, "take_new_plain(lines, start, limit, known, max_tags,"
                                         " keys, metrics, tags, timestamps, values)");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[1]), limit = PyLong_AsSsize_t(args[2]),
               max_tags = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *lines = args[0], *known = args[3];
    /* the columns in DataPoint's order (metric, timestamp, value, tags), the keys after */
    PyObject *columns[5] = {args[6], args[8], args[9], args[7], args[5]};
    Py_ssize_t end = PyList_GET_SIZE(lines), room = limit > 0 ? limit : 0;
    if (index < end - room) /* the spec's min(len(lines), start + limit), before the clamp */
        end = index + room;
    if (index < 0)
        index = 0;
    for (; index < end; index++) {
        PyObject *fields[5] = {NULL, NULL, NULL, NULL, NULL};
        int parsed = plain_fields(PyList_GET_ITEM(lines, index), max_tags, fields, &fields[4]);
        if (parsed < 0)
            return NULL;
        if (parsed == 0)
            break;
        int seen = kt_check(known) ? kt_contains((KeyTable *)known, fields[4])
                                   : PyDict_Contains(known, fields[4]);
        int failed = seen != 0;
        for (int i = 0; i < 5; i++) {
            if (!failed && PyList_Append(columns[i], fields[i]) < 0) {
                failed = 1;
                seen = -1;
                for (int j = 0; j < i; j++) /* the line's fields appended so far go again */
                    PyList_SetSlice(columns[j], PyList_GET_SIZE(columns[j]) - 1,
                                    PyList_GET_SIZE(columns[j]), NULL);
            }
            Py_DECREF(fields[i]);
        }
        if (seen == 1)
            break; /* a known series: the known path takes it */
        if (seen < 0)
            return NULL;
    }
    return PyLong_FromSsize_t(index);
}

/* known_usual_points(usual, known): see the header. The points' four fields are read
 * from their slots (msgspec keeps a Struct's fields as member slots), at offsets learnt
 * from the points' type, a quarter of the time of attribute lookups; any other object
 * is read through getattr. */
static PyObject *metric_name, *timestamp_name, *value_name, *tags_name;

typedef struct {
    PyTypeObject *type;
    Py_ssize_t at[4]; /* metric, timestamp, value, tags */
} Fields;

static PyObject *field(PyObject *point, const Fields *fields, int which, PyObject *name)
{
    if (Py_TYPE(point) == fields->type) {
        PyObject *got = *(PyObject **)((char *)point + fields->at[which]);
        if (got != NULL) {
            Py_INCREF(got);
            return got;
        }
    }
    return PyObject_GetAttr(point, name);
}

/* tsd.protocol.put_json.usual_key: the metric's UTF-8 (lone surrogates passed through), a
 * 0xFF byte (never in UTF-8: the metric ends there) and the tags' JSON text, as one bytes
 * object: one allocation and one hash a point, where a (metric, text) pair cost three. */
static PyObject *usual_key(PyObject *point, const Fields *fields)
{
    PyObject *metric = field(point, fields, 0, metric_name);
    if (metric == NULL) return NULL;
    if (!PyUnicode_Check(metric)) {
        Py_DECREF(metric);
        PyErr_SetString(PyExc_TypeError, "a usual point's metric is a str");
        return NULL;
    }
    PyObject *encoded = NULL; /* only for a metric with lone surrogates */
    Py_ssize_t metric_n;
    const char *metric_utf8 = PyUnicode_AsUTF8AndSize(metric, &metric_n);
    if (metric_utf8 == NULL) {
        PyErr_Clear();
        encoded = PyUnicode_AsEncodedString(metric, "utf-8", "surrogatepass");
        if (encoded == NULL) {
            Py_DECREF(metric);
            return NULL;
        }
        metric_utf8 = PyBytes_AS_STRING(encoded);
        metric_n = PyBytes_GET_SIZE(encoded);
    }
    PyObject *key = NULL;
    PyObject *tags = field(point, fields, 3, tags_name);
    Py_buffer view; /* msgspec.Raw is a buffer: copied straight */
    if (tags != NULL && PyObject_GetBuffer(tags, &view, PyBUF_SIMPLE) == 0) {
        key = PyBytes_FromStringAndSize(NULL, metric_n + 1 + view.len);
        if (key != NULL) {
            char *out = PyBytes_AS_STRING(key);
            memcpy(out, metric_utf8, metric_n);
            out[metric_n] = (char)0xFF;
            memcpy(out + metric_n + 1, view.buf, view.len);
        }
        PyBuffer_Release(&view);
    }
    Py_XDECREF(tags);
    Py_XDECREF(encoded);
    Py_DECREF(metric);
    return key;
}

static void learn_fields(Fields *fields, PyObject *point)
{
    PyTypeObject *type = Py_TYPE(point);
    const char *names[4] = {"metric", "timestamp", "value", "tags"};
    fields->type = NULL;
    for (int i = 0; i < 4; i++) {
        fields->at[i] = member_offset(type, names[i]);
        if (fields->at[i] < 0) return; /* not slots: getattr for every field */
    }
    fields->type = type;
}

static PyObject *known_usual_points(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "known_usual_points(list of points, dict)");
        return NULL;
    }
    PyObject *usual = args[0], *known = args[1];
    Py_ssize_t n = PyList_GET_SIZE(usual);
    PyObject *points = PyList_New(n);
    if (points == NULL) return NULL;
    Fields fields = {NULL, {0, 0, 0, 0}};
    if (n) learn_fields(&fields, PyList_GET_ITEM(usual, 0));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *point = PyList_GET_ITEM(usual, i);
        PyObject *key = usual_key(point, &fields);
        if (key == NULL) goto fail;
        PyObject *series = PyDict_GetItemWithError(known, key); /* borrowed */
        Py_DECREF(key);
        if (series == NULL) {
            if (PyErr_Occurred()) goto fail;
            Py_DECREF(points);
            Py_RETURN_NONE;
        }
        PyObject *timestamp = field(point, &fields, 1, timestamp_name);
        if (timestamp == NULL) goto fail;
        PyObject *value = field(point, &fields, 2, value_name);
        if (value == NULL) {
            Py_DECREF(timestamp);
            goto fail;
        }
        PyObject *item = PyTuple_New(3);
        if (item == NULL) {
            Py_DECREF(timestamp);
            Py_DECREF(value);
            goto fail;
        }
        Py_INCREF(series);
        PyTuple_SET_ITEM(item, 0, series);
        PyTuple_SET_ITEM(item, 1, timestamp);
        PyTuple_SET_ITEM(item, 2, value);
        PyList_SET_ITEM(points, i, item);
    }
    return points;
fail:
    Py_DECREF(points);
    return NULL;
}

/* tsd.protocol.prom_samples.SAMPLE_FIELD_HEADER */
#define SAMPLE_FIELD_HEADER 2

/* series_fit(series, payloads, fields) -> bool
 *   (tsd.protocol.prom_samples.python_series_fit is the specification). series, payloads:
 *   lists of bytes; fields: bytes. */
static PyObject *series_fit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) ||
        !PyBytes_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "series_fit: bad arguments");
        return NULL;
    }
    PyObject *series = args[0], *payloads = args[1], *fields = args[2];
    Py_ssize_t count = PyList_GET_SIZE(series);
    if (PyList_GET_SIZE(payloads) != count)
        Py_RETURN_FALSE;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *payload = PyList_GET_ITEM(payloads, i);
        PyObject *one = PyList_GET_ITEM(series, i);
        if (!PyBytes_CheckExact(payload) || !PyBytes_CheckExact(one)) {
            PyErr_SetString(PyExc_TypeError, "series_fit: bytes expected");
            return NULL;
        }
        total += PyBytes_GET_SIZE(payload) + SAMPLE_FIELD_HEADER;
    }
    if (total != PyBytes_GET_SIZE(fields))
        Py_RETURN_FALSE;
    const char *field = PyBytes_AS_STRING(fields);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *one = PyList_GET_ITEM(series, i);
        Py_ssize_t size = PyBytes_GET_SIZE(one);
        Py_ssize_t need = PyBytes_GET_SIZE(PyList_GET_ITEM(payloads, i)) + SAMPLE_FIELD_HEADER;
        if (size < need || memcmp(PyBytes_AS_STRING(one) + size - need, field, (size_t)need))
            Py_RETURN_FALSE;
        field += need;
    }
    Py_RETURN_TRUE;
}

/* take_known_series(series, payloads, values, timestamps, known, out, low, high, start,
 *   end) -> (samples taken, others): remote write's one sample per series, samples start
 *   to end (tsd.protocol.prom_samples.python_take_known_series is the specification).
 *   series, payloads: lists of bytes (series_fit said they fit); values, timestamps:
 *   float64 and int64 columns of as many; known: a dict or a KeyTable, looked up by each
 *   series' key (its bytes without its sample's field: no object made for a KeyTable); out:
 *   a list the series of each sample taken is appended to; others: the indices not taken
 *   (an unknown key, a value that is not finite, a timestamp outside low < timestamp <=
 *   high), in order. */
static PyObject *take_known_series(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) ||
        !(PyDict_Check(args[4]) || kt_check(args[4])) || !PyList_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError, "take_known_series: bad arguments");
        return NULL;
    }
    PyObject *series = args[0], *payloads = args[1], *known = args[4], *out = args[5];
    int is_table = kt_check(known);
    long long low = PyLong_AsLongLong(args[6]), high = PyLong_AsLongLong(args[7]);
    Py_ssize_t start = PyLong_AsSsize_t(args[8]), end = PyLong_AsSsize_t(args[9]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(series);
    if (PyList_GET_SIZE(payloads) != count || start < 0 || start > end || end > count) {
        PyErr_SetString(PyExc_ValueError,
                        "take_known_series: as many payloads as series, 0 <= start <= end <= series");
        return NULL;
    }
    Py_buffer value_view, ts_view;
    if (number_column(args[2], &value_view, 1, "take_known_series: values") < 0)
        return NULL;
    if (number_column(args[3], &ts_view, 0, "take_known_series: timestamps") < 0) {
        PyBuffer_Release(&value_view);
        return NULL;
    }
    PyObject *others = NULL;
    Py_ssize_t taken = 0;
    if (value_view.len / 8 != count || ts_view.len / 8 != count) {
        PyErr_SetString(PyExc_ValueError, "take_known_series: as many samples as series");
        goto error;
    }
    others = PyList_New(0);
    if (others == NULL)
        goto error;
    const double *values = (const double *)value_view.buf;
    const long long *timestamps = (const long long *)ts_view.buf;
    for (Py_ssize_t i = start; i < end; i++) {
        PyObject *one = PyList_GET_ITEM(series, i), *payload = PyList_GET_ITEM(payloads, i);
        if (!PyBytes_CheckExact(one) || !PyBytes_CheckExact(payload)) {
            PyErr_SetString(PyExc_TypeError, "take_known_series: bytes expected");
            goto error;
        }
        Py_ssize_t key_n =
            PyBytes_GET_SIZE(one) - PyBytes_GET_SIZE(payload) - SAMPLE_FIELD_HEADER;
        if (key_n < 0) {
            PyErr_SetString(PyExc_ValueError, "take_known_series: a series shorter than its sample");
            goto error;
        }
        PyObject *found; /* borrowed */
        if (is_table) {
            found = kt_get_young((KeyTable *)known, PyBytes_AS_STRING(one), key_n);
        } else {
            PyObject *key = PyBytes_FromStringAndSize(PyBytes_AS_STRING(one), key_n);
            if (key == NULL)
                goto error;
            found = PyDict_GetItemWithError(known, key);
            Py_DECREF(key);
            if (found == NULL && PyErr_Occurred())
                goto error;
        }
        int failed;
        if (found != NULL && isfinite(values[i]) && low < timestamps[i] && timestamps[i] <= high) {
            failed = PyList_Append(out, found) < 0;
            taken++;
        } else {
            PyObject *index = PyLong_FromSsize_t(i);
            failed = index == NULL || PyList_Append(others, index) < 0;
            Py_XDECREF(index);
        }
        if (failed)
            goto error;
    }
    PyBuffer_Release(&value_view);
    PyBuffer_Release(&ts_view);
    PyObject *done = Py_BuildValue("(nO)", taken, others);
    Py_DECREF(others);
    return done;
error:
    Py_XDECREF(others);
    PyBuffer_Release(&value_view);
    PyBuffer_Release(&ts_view);
    return NULL;
}

/* tsd.protocol.prom_samples.MARK_VALUE_BITS and MARK_TIMESTAMP, as 8-byte items */
#define MARK_VALUE_BITS 0x7FF8747364000001ULL
#define MARK_TIMESTAMP_BITS 0x8000000000000000ULL

/* One column's items behind its marks: per mark, the last item before the next mark (0
 * when there is none: 0.0 and 0 are both zero bits) into the column's first count items;
 * 0 unless count marks lead the column. An item written is always one already read. */
static int align_column(uint64_t *items, Py_ssize_t n, Py_ssize_t count, uint64_t mark)
{
    if (count == 0)
        return n == 0;
    Py_ssize_t marks = 0;
    uint64_t current = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t item = items[i];
        if (item == mark) {
            if (marks == count)
                return 0;
            if (marks)
                items[marks - 1] = current;
            marks++;
            current = 0;
        } else if (!marks) {
            return 0;
        } else {
            current = item;
        }
    }
    if (marks != count)
        return 0;
    items[marks - 1] = current;
    return 1;
}

/* align_columns(values, timestamps, count) -> bool
 *   (tsd.protocol.prom_samples.python_align_columns is the specification). values,
 *   timestamps: writable float64 and int64 columns, aligned in place. */
static PyObject *align_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyLong_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "align_columns: bad arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    if (count < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "align_columns: count must not be negative");
        return NULL;
    }
    Py_buffer value_view, ts_view;
    if (number_column(args[0], &value_view, 1, "align_columns: values") < 0)
        return NULL;
    if (number_column(args[1], &ts_view, 0, "align_columns: timestamps") < 0) {
        PyBuffer_Release(&value_view);
        return NULL;
    }
    PyObject *answer = NULL;
    if (value_view.readonly || ts_view.readonly) {
        PyErr_SetString(PyExc_TypeError, "align_columns: the columns must be writable");
    } else {
        int aligned =
            align_column((uint64_t *)value_view.buf, value_view.len / 8, count,
                         MARK_VALUE_BITS) &&
            align_column((uint64_t *)ts_view.buf, ts_view.len / 8, count, MARK_TIMESTAMP_BITS);
        answer = PyBool_FromLong(aligned);
    }
    PyBuffer_Release(&value_view);
    PyBuffer_Release(&ts_view);
    return answer;
}

static PyMethodDef methods[] = {
    {"take_known_puts", (PyCFunction)(void (*)(void))take_known_puts, METH_FASTCALL,
     "Type the put lines of known series (tsd.protocol.telnet.take_known_puts)."},
    {"take_known_into", (PyCFunction)(void (*)(void))take_known_into, METH_FASTCALL,
     "take_known_puts and encode_into in one pass: (index, points, cells added)."},
    {"take_new_plain", (PyCFunction)(void (*)(void))take_new_plain, METH_FASTCALL,
     "Consecutive plain put lines of new series, parsed into columns (a burst)."},
    {"parse_plain_put", (PyCFunction)(void (*)(void))parse_plain_put, METH_FASTCALL,
     "A put line in its plain form parsed as parse_put parses it, or None."},
    {"known_usual_points", (PyCFunction)(void (*)(void))known_usual_points, METH_FASTCALL,
     "(series, timestamp, value) of decoded usual points of known series, or None."},
    {"series_fit", (PyCFunction)(void (*)(void))series_fit, METH_FASTCALL,
     "Whether each remote write series ends with its sample's field."},
    {"take_known_series", (PyCFunction)(void (*)(void))take_known_series, METH_FASTCALL,
     "Remote write samples of known series, their series listed: (taken, others)."},
    {"align_columns", (PyCFunction)(void (*)(void))align_columns, METH_FASTCALL,
     "Remote write sample columns read back from their marks, in place: aligned or not."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_parse", NULL, -1, methods};

PyMODINIT_FUNC PyInit__parse(void)
{
    if (format_init() < 0)
        return NULL;
    metric_name = PyUnicode_InternFromString("metric");
    timestamp_name = PyUnicode_InternFromString("timestamp");
    value_name = PyUnicode_InternFromString("value");
    tags_name = PyUnicode_InternFromString("tags");
    if (metric_name == NULL || timestamp_name == NULL || value_name == NULL || tags_name == NULL)
        return NULL;
    if (PyType_Ready(&KeyTableType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&KeyTableType);
    if (PyModule_AddObject(m, "KeyTable", (PyObject *)&KeyTableType) < 0) {
        Py_DECREF(&KeyTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
