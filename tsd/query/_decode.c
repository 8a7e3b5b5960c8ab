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
 * None when no point is an integer), or None.
 *
 * decode_buckets(the same six, interval_ms, seek_ms, function) reads the same cells (and
 * refuses the same) but keeps no point: each row's points from seek_ms on are reduced to
 * their buckets of interval_ms (which divides the hour; a point past its row's hour is
 * refused, as its bucket could hold the next row's points) by a running sum (0), average
 * (1) or count (2), as OpenTSDB's runDouble does. Returns (bucket times int64, values
 * float64, row_offsets int64 into the buckets, points per row int64), or None.
 * tests/query/test_row_buckets.py checks it against downsampling whole series.
 *
 * decode_runs(qualifiers, values, counts, base_ms) gives decode_seconds' tuple for the
 * head's clean rows (tsd/query/head_rows.py): per row counts[r] 2-byte qualifiers, each
 * value as long as its flags say, no meta byte, offsets strictly increasing; None for
 * anything else (the numpy path decodes it). runs_buckets(the same four, interval_ms,
 * seek_ms, function) reduces those rows to decode_buckets' tuple instead.
 *
 * head_points(bufs, packed, q_lens, v_lens, counts, base_ms) and head_buckets(the same six,
 * interval_ms, seek_ms, function) answer as decode_runs and runs_buckets over the same
 * rows' plain bytes, read from each row's own bytes (a list of bytes: a packed part of
 * packed[r] bytes, tsd/head/_packed.h, then its raw tail; q_lens, v_lens: the plain
 * qualifier and value bytes): a fresh query's 8.64 M points are not copied into plain
 * rows and then joined first (tsd/query/head_rows.py; tests/query/test_head_rows.py
 * checks both ways agree). None for what those refuse and for rows that do not add up.
 *
 * point_buckets(offsets_ms, doubles, counts, base_ms, interval_ms, seek_ms, function): the
 * same reduction of points already decoded (the embedded store's PointBlock: each point's
 * ms offset from its row's base time and its double, rows of counts[r] points), refused
 * as decode_buckets refuses a point past its row's hour.
 *
 * Why the reductions are here: at 60 s between points a day of 1,000 series is 24,000
 * rows of 60 points, and numpy's downsampler over the decoded points cost more per row
 * (a dozen whole-array passes and their temporaries) than the decode itself.
 *
 * All walk without the GIL: the event loop receives the next reply meanwhile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "_packed.h" /* tsd/head: a head row's packed part, read */

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

/* Allocates the integer arrays, the first `done` points being doubles (0, not integers). */
static int start_ints(PyObject **i_o, PyObject **isi_o, int64_t **iv, unsigned char **isi,
                      Py_ssize_t npoints, Py_ssize_t done) {
    *i_o = PyByteArray_FromStringAndSize(NULL, npoints * 8);
    *isi_o = PyByteArray_FromStringAndSize(NULL, npoints);
    if (!*i_o || !*isi_o) return -1;
    *iv = (int64_t *)PyByteArray_AS_STRING(*i_o);
    *isi = (unsigned char *)PyByteArray_AS_STRING(*isi_o);
    memset(*iv, 0, (size_t)done * 8);
    memset(*isi, 0, (size_t)done);
    return 0;
}

/* The cells of a block, as decode_seconds and decode_buckets take them. */
typedef struct {
    const unsigned char *qb, *vb;
    Py_ssize_t qn, vn, ncells, nrows;
    const int64_t *qlen, *vlen, *counts, *base;
} cells_t;

/* What a walk hands on: each point (its row, time in ms, offset in ms from the row's base
 * time, double and exact long, is_float), then the end of each row. Return 0 to go on, 1
 * to refuse the block (the caller answers None), -1 on a Python error. */
typedef int (*point_fn)(void *sink, Py_ssize_t row, int64_t ts, int64_t off_ms, double d,
                        int64_t i, int is_float);
typedef int (*row_fn)(void *sink, Py_ssize_t row);

/* Walks every point of every row in stored order, refusing what decode_seconds refuses
 * (see the top of this file). Called without the GIL: touches only the block's buffers. */
#define WALKER static inline __attribute__((always_inline)) int

WALKER walk_cells(const cells_t *c, point_fn on_point, row_fn on_row, void *sink) {
    Py_ssize_t qpos = 0, vpos = 0, cell = 0;
    for (Py_ssize_t r = 0; r < c->nrows; r++) {
        long last = -1;
        for (int64_t k = 0; k < c->counts[r]; k++, cell++) {
            if (cell >= c->ncells) return 1;
            Py_ssize_t len = (Py_ssize_t)c->qlen[cell], vlen_c = (Py_ssize_t)c->vlen[cell];
            if (len < 2 || len % 2 || vlen_c < 0 || qpos + len > c->qn || vpos + vlen_c > c->vn)
                return 1;
            const unsigned char *qp = c->qb + qpos, *vp = c->vb + vpos;
            /* A single point (2-byte qualifier) takes its value's length; a compacted
             * cell's flags give each length, and one meta byte follows its values. */
            int single = len == 2;
            Py_ssize_t used = 0;
            for (Py_ssize_t u = 0; u < len; u += 2) {
                unsigned unit = ((unsigned)qp[u] << 8) | qp[u + 1];
                if (unit >= 0xF000) return 1;
                long off = (long)(unit >> 4);
                int is_float = (unit & 0x8) != 0;
                Py_ssize_t at = used, width = single ? vlen_c : (Py_ssize_t)(unit & 0x7) + 1;
                if (single && (unit & 0xF) == 0xB && width == 8) { /* legacy 4-byte float */
                    if (vp[0] | vp[1] | vp[2] | vp[3]) return 1;
                    at = 4;
                    width = 4;
                }
                if (!valid_length(is_float, width) || off <= last) return 1;
                if (!single && used + width > vlen_c - 1) return 1;
                double d;
                int64_t i;
                read_value(vp + at, c->vn - (vpos + at), width, is_float, &d, &i);
                int64_t off_ms = (int64_t)off * 1000;
                int rc = on_point(sink, r, c->base[r] + off_ms, off_ms, d, i, is_float);
                if (rc) return rc;
                used += width;
                last = off;
            }
            if (!single && used != vlen_c - 1) return 1;
            qpos += len;
            vpos += vlen_c;
        }
        int rc = on_row(sink, r);
        if (rc) return rc;
    }
    return cell == c->ncells ? 0 : 1;
}

/* The cells_t over the six buffers every entry point takes first. */
static void fill_cells(Py_buffer b[6], cells_t *c) {
    c->qb = b[0].buf;
    c->vb = b[1].buf;
    c->qn = b[0].len;
    c->vn = b[1].len;
    c->qlen = b[2].buf;
    c->vlen = b[3].buf;
    c->counts = b[4].buf;
    c->base = b[5].buf;
    c->ncells = b[2].len / 8;
    c->nrows = b[4].len / 8;
}

/* Whether the buffers are consistent: as many value lengths as qualifier lengths, a base
 * time per row, whole qualifier units. */
static int cells_ok(const cells_t *c, const Py_buffer b[6]) {
    return b[3].len / 8 == c->ncells && b[5].len / 8 == c->nrows && c->qn % 2 == 0;
}

/* -- decode_seconds: every point ------------------------------------------------------ */

typedef struct {
    int64_t *ts, *iv, *ro;
    double *dv;
    unsigned char *isi;
    PyObject *i_o, *isi_o;
    Py_ssize_t out, npoints;
    int any_int;
    PyThreadState *save; /* the released thread state: the integer arrays need the GIL */
} points_t;

static inline int on_point(void *sink, Py_ssize_t row, int64_t ts, int64_t off_ms, double d,
                           int64_t i, int is_float) {
    points_t *p = sink;
    (void)row;
    (void)off_ms;
    if (p->out >= p->npoints) return 1;
    if (!is_float && p->iv == NULL) {
        PyEval_RestoreThread(p->save);
        int failed = start_ints(&p->i_o, &p->isi_o, &p->iv, &p->isi, p->npoints, p->out) < 0;
        p->save = PyEval_SaveThread();
        if (failed) return -1;
    }
    p->dv[p->out] = d;
    if (p->iv) {
        p->iv[p->out] = i;
        p->isi[p->out] = !is_float;
    }
    p->any_int |= !is_float;
    p->ts[p->out++] = ts;
    return 0;
}

static inline int on_points_row(void *sink, Py_ssize_t row) {
    points_t *p = sink;
    p->ro[row + 1] = p->out;
    return 0;
}

/* A walk with its sink compiled in (see WALKERS): returns as the walk does. */
typedef int (*walk_fn)(const void *cells, void *sink);

/* A walker's two compiled forms: every point (walk_points) or the buckets (walk_buckets).
 * The sinks are inlined into each, not called per point through a pointer. */
typedef struct {
    walk_fn points, buckets;
} walker_t;

/* decode_seconds' and decode_runs' arrays: every point `walk` hands on, without the GIL.
 * The tuple, None when the walk refuses, NULL on a Python error. */
static PyObject *walk_points(walk_fn walk, const void *cells, Py_ssize_t npoints,
                             Py_ssize_t nrows) {
    PyObject *result = NULL, *ts_o = NULL, *d_o = NULL, *ro_o = NULL;
    points_t p = {0};
    p.npoints = npoints;
    ts_o = PyByteArray_FromStringAndSize(NULL, npoints * 8);
    d_o = PyByteArray_FromStringAndSize(NULL, npoints * 8);
    ro_o = PyByteArray_FromStringAndSize(NULL, (nrows + 1) * 8);
    if (!ts_o || !d_o || !ro_o) goto done;
    p.ts = (int64_t *)PyByteArray_AS_STRING(ts_o);
    p.dv = (double *)PyByteArray_AS_STRING(d_o);
    p.ro = (int64_t *)PyByteArray_AS_STRING(ro_o);
    p.ro[0] = 0;
    p.save = PyEval_SaveThread();
    int rc = walk(cells, &p);
    PyEval_RestoreThread(p.save);
    if (rc < 0) goto done;
    if (rc > 0 || p.out != p.npoints) {
        Py_INCREF(Py_None);
        result = Py_None;
    } else if (!p.any_int) {
        result = Py_BuildValue("(OOOOOi)", ts_o, d_o, Py_None, Py_None, ro_o, 0);
    } else {
        result = Py_BuildValue("(OOOOOi)", ts_o, d_o, p.i_o, p.isi_o, ro_o, 1);
    }
done:
    Py_XDECREF(ts_o);
    Py_XDECREF(d_o);
    Py_XDECREF(p.i_o);
    Py_XDECREF(p.isi_o);
    Py_XDECREF(ro_o);
    return result;
}

/* -- decode_runs: the head's clean rows ------------------------------------------------ */

typedef struct {
    const unsigned char *qb, *vb;
    Py_ssize_t qn, vn, nrows;
    const int64_t *counts, *base;
} runs_t;

/* Walks the runs' points row after row (see decode_runs at the top of this file). */
WALKER walk_runs(const void *cells, point_fn on_pt, row_fn on_row, void *sink) {
    const runs_t *c = cells;
    Py_ssize_t npoints = c->qn / 2, vpos = 0, out = 0;
    for (Py_ssize_t r = 0; r < c->nrows; r++) {
        long last = -1;
        int64_t count = c->counts[r], base = c->base[r];
        if (count < 0 || out + count > npoints) return 1;
        for (int64_t k = 0; k < count; k++, out++) {
            const unsigned char *qp = c->qb + 2 * out;
            unsigned unit = ((unsigned)qp[0] << 8) | qp[1];
            if (unit >= 0xF000) return 1;
            long off = (long)(unit >> 4);
            int is_float = (unit & 0x8) != 0;
            Py_ssize_t width = (Py_ssize_t)(unit & 0x7) + 1;
            if (!valid_length(is_float, width) || off <= last || vpos + width > c->vn) return 1;
            double d;
            int64_t i;
            read_value(c->vb + vpos, c->vn - vpos, width, is_float, &d, &i);
            int64_t off_ms = (int64_t)off * 1000;
            int rc = on_pt(sink, r, base + off_ms, off_ms, d, i, is_float);
            if (rc) return rc;
            vpos += width;
            last = off;
        }
        int rc = on_row(sink, r);
        if (rc) return rc;
    }
    return out == npoints && vpos == c->vn ? 0 : 1;
}

/* -- decode_buckets: each row's points reduced to its fixed-interval buckets ---------- */

enum { FN_SUM = 0, FN_AVG = 1, FN_COUNT = 2 };

typedef struct {
    int64_t interval, seek, *ts, *ro, *raw, bucket;
    double *dv, sum;
    int64_t n;     /* values (not NaN) in the open bucket */
    int64_t row_n; /* points of the row so far */
    int function, open;
    Py_ssize_t out, cap;
} buckets_t;

/* The open bucket's value as the downsample aggregators' double path gives it (OpenTSDB's
 * runDouble: NaN skipped, a sum from 0.0 in stored order; an avg that sum over the count;
 * NaN when every value was NaN, except count: 0). */
static inline void close_bucket(buckets_t *s) {
    if (!s->open) return;
    double v;
    if (s->function == FN_COUNT) {
        v = (double)s->n;
    } else if (s->n == 0) {
        v = NAN;
    } else {
        /* x / 1 is x (NaN, -0.0 and infinities too): no division for a bucket of one
         * point, the usual bucket of regular data at the bucket's interval */
        v = s->function == FN_AVG && s->n > 1 ? s->sum / (double)s->n : s->sum;
    }
    s->ts[s->out] = s->bucket;
    s->dv[s->out++] = v;
    s->open = 0;
}

static inline int on_bucket_point(void *sink, Py_ssize_t row, int64_t ts, int64_t off_ms,
                                  double d, int64_t i, int is_float) {
    buckets_t *s = sink;
    (void)i;
    (void)is_float;
    (void)row;
    s->row_n++;
    /* A point beyond its row's hour: its bucket may hold points of the next row. */
    if (off_ms >= 3600000 || ts < 0) return 1;
    if (ts < s->seek) return 0;
    /* The open bucket's point, or the next bucket's, need no division (64-bit division
     * costs more than the rest of a point's work): a row's points come in time order. */
    if (!s->open || ts < s->bucket || ts - s->bucket >= s->interval) {
        int64_t bucket = s->open && ts >= s->bucket && ts - s->bucket < 2 * s->interval
                             ? s->bucket + s->interval
                             : ts - ts % s->interval;
        close_bucket(s);
        if (s->out >= s->cap) return 1;
        s->open = 1;
        s->bucket = bucket;
        s->sum = 0.0;
        s->n = 0;
    }
    if (!isnan(d)) {
        s->sum += d;
        s->n++;
    }
    return 0;
}

static inline int on_buckets_row(void *sink, Py_ssize_t row) {
    buckets_t *s = sink;
    s->raw[row] = s->row_n;
    s->row_n = 0;
    close_bucket(s);
    s->ro[row + 1] = s->out;
    return 0;
}

/* The buckets of every point `walk` hands on (see decode_buckets at the top of this file),
 * reduced without the GIL: the tuple, None when the walk refuses, NULL on a Python error.
 * `cap`: the points the walk can hand on (at most a bucket each). */
static PyObject *walk_buckets(walk_fn walk, const void *cells, Py_ssize_t cap, Py_ssize_t nrows,
                              long long interval, long long seek, int function) {
    PyObject *result = NULL, *ts_o = NULL, *d_o = NULL, *ro_o = NULL, *raw_o = NULL;
    buckets_t s = {0};
    if (interval <= 0 || 3600000 % interval || function < FN_SUM || function > FN_COUNT) {
        Py_INCREF(Py_None);
        return Py_None;
    }
    s.interval = interval;
    s.seek = seek;
    s.function = function;
    s.cap = cap;
    ts_o = PyByteArray_FromStringAndSize(NULL, s.cap * 8);
    d_o = PyByteArray_FromStringAndSize(NULL, s.cap * 8);
    ro_o = PyByteArray_FromStringAndSize(NULL, (nrows + 1) * 8);
    raw_o = PyByteArray_FromStringAndSize(NULL, nrows * 8);
    if (!ts_o || !d_o || !ro_o || !raw_o) goto done;
    s.ts = (int64_t *)PyByteArray_AS_STRING(ts_o);
    s.dv = (double *)PyByteArray_AS_STRING(d_o);
    s.ro = (int64_t *)PyByteArray_AS_STRING(ro_o);
    s.raw = (int64_t *)PyByteArray_AS_STRING(raw_o);
    s.ro[0] = 0;
    memset(s.raw, 0, (size_t)nrows * 8);
    PyThreadState *save = PyEval_SaveThread();
    int rc = walk(cells, &s);
    PyEval_RestoreThread(save);
    if (rc < 0) goto done;
    if (rc > 0) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    if (PyByteArray_Resize(ts_o, s.out * 8) < 0 || PyByteArray_Resize(d_o, s.out * 8) < 0)
        goto done;
    result = Py_BuildValue("(OOOO)", ts_o, d_o, ro_o, raw_o);
done:
    Py_XDECREF(ts_o);
    Py_XDECREF(d_o);
    Py_XDECREF(ro_o);
    Py_XDECREF(raw_o);
    return result;
}

/* -- point_buckets: decoded points (a PointBlock's) reduced to each row's buckets ------ */

typedef struct {
    const int64_t *offsets, *counts, *base;
    const double *values;
    Py_ssize_t npoints, nrows;
} arrays_t;

/* Hands on each row's points (ms offsets from the row's base time, doubles) in order;
 * refuses counts that do not add up to the points. */
WALKER walk_arrays(const void *cells, point_fn on_pt, row_fn on_row, void *sink) {
    const arrays_t *a = cells;
    Py_ssize_t at = 0;
    for (Py_ssize_t r = 0; r < a->nrows; r++) {
        int64_t count = a->counts[r], base = a->base[r];
        if (count < 0 || at + count > a->npoints) return 1;
        for (int64_t k = 0; k < count; k++, at++) {
            int64_t off_ms = a->offsets[at];
            int rc = on_pt(sink, r, base + off_ms, off_ms, a->values[at], 0, 1);
            if (rc) return rc;
        }
        int rc = on_row(sink, r);
        if (rc) return rc;
    }
    return at == a->npoints ? 0 : 1;
}

/* -- head_points / head_buckets: the head's rows, read from their own bytes ----------- */

typedef struct {
    const unsigned char **data;
    const Py_ssize_t *size;
    const int64_t *packed, *qlen, *vlen, *counts, *base;
    Py_ssize_t nrows;
} heads_t;

/* A head point as walk_runs takes it (a 2-byte seconds qualifier `unit`, its value the
 * low bytes of `raw`), handed on; 0 to go on, else what to return. */
#define HEAD_POINT(unit, raw)                                                              \
    do {                                                                                   \
        if ((unit) >= 0xF000) return 1;                                                    \
        long off_ = (long)((unit) >> 4);                                                   \
        int is_float_ = ((unit) & 0x8) != 0;                                               \
        Py_ssize_t width_ = (Py_ssize_t)((unit) & 0x7) + 1;                                \
        if (!valid_length(is_float_, width_) || off_ <= last) return 1;                    \
        double d_;                                                                         \
        int64_t i_;                                                                        \
        raw_value((raw), width_, is_float_, &d_, &i_);                                     \
        int64_t off_ms_ = (int64_t)off_ * 1000;                                            \
        int rc_ = on_pt(sink, r, base + off_ms_, off_ms_, d_, i_, is_float_);              \
        if (rc_) return rc_;                                                               \
        vn += width_;                                                                      \
        seen++;                                                                            \
        last = off_;                                                                       \
    } while (0)

/* read_value of a value already read as an unsigned integer of its `len` bytes */
static inline void raw_value(uint64_t raw, Py_ssize_t len, int is_float, double *d,
                             int64_t *i) {
    int shift = 64 - 8 * (int)len;
    int64_t v = (int64_t)(raw << shift) >> shift;
    uint32_t u = (uint32_t)raw;
    float f;
    double d8;
    memcpy(&f, &u, 4);
    memcpy(&d8, &raw, 8);
    double df = len == 8 ? d8 : (double)f;
    *i = is_float ? 0 : v;
    *d = is_float ? df : (double)v;
}

/* A run of plain points (2-byte seconds qualifiers, then values as long as their flags
 * say): each handed on (HEAD_POINT), the first and last two (qualifier, value) noted for
 * a raw block's state; 0 to go on, else what to return. */
#define PLAIN_POINTS(qb, q_len, vb, v_len)                                                  \
    do {                                                                                   \
        Py_ssize_t va_ = 0;                                                                \
        for (Py_ssize_t qa_ = 0; qa_ < (q_len); qa_ += 2) {                                \
            unsigned unit = ((unsigned)(qb)[qa_] << 8) | (qb)[qa_ + 1];                     \
            Py_ssize_t width = (Py_ssize_t)(unit & 0x7) + 1;                               \
            if (va_ + width > (v_len)) return 1;                                           \
            uint64_t w = load_be64((vb) + va_, (v_len) - va_) >> (64 - 8 * width);         \
            va_ += width;                                                                  \
            q_prev = q_last;                                                               \
            v_prev = v_last;                                                               \
            q_last = unit;                                                                 \
            v_last = w;                                                                    \
            HEAD_POINT(unit, w);                                                           \
        }                                                                                  \
        if (va_ != (v_len)) return 1;                                                      \
    } while (0)

/* Walks each row's points from its bytes: its packed part (tsd/head/_packed.h; a raw
 * block's points walked here, as plain points, not one at a time through the cursor),
 * then its raw tail (the qualifiers, then the values); refuses what walk_runs refuses of
 * the same rows' plain bytes, and a row whose bytes do not add up to its lengths and
 * count. */
WALKER walk_heads(const void *cells, point_fn on_pt, row_fn on_row, void *sink) {
    const heads_t *c = cells;
    for (Py_ssize_t r = 0; r < c->nrows; r++) {
        const unsigned char *b = c->data[r];
        Py_ssize_t size = c->size[r], p = (Py_ssize_t)c->packed[r];
        int64_t base = c->base[r], count = c->counts[r];
        if (p < 0 || p > size) return 1;
        long last = -1;
        int64_t seen = 0;
        Py_ssize_t vn = 0;
        int64_t q_prev = 0, q_last = 0;
        uint64_t v_prev = 0, v_last = 0;
        PackedCursor cur;
        if (!packed_open(&cur, b, p)) return 1;
        uint64_t qual, raw;
        int wide, more;
        while ((more = packed_next(&cur, &qual, &raw, &wide)) > 0) {
            const unsigned char *rq, *rv;
            Py_ssize_t rql, rvl;
            uint64_t n;
            if (more == 2) {
                if (!packed_raw_block(&cur, &rq, &rql, &rv, &rvl, &n) || rql % 2) return 1;
                int64_t before = seen;
                PLAIN_POINTS(rq, rql, rv, rvl);
                if ((uint64_t)(seen - before) != n) return 1;
                packed_skip_raw(&cur, n == 1, q_prev, v_prev, q_last, v_last);
                continue;
            }
            if (wide) return 1;
            HEAD_POINT((unsigned)qual, raw);
        }
        if (more < 0) return 1;
        Py_ssize_t tail_q = (Py_ssize_t)c->qlen[r] - 2 * (Py_ssize_t)seen;
        Py_ssize_t tail_v = (Py_ssize_t)c->vlen[r] - vn;
        if (tail_q < 0 || tail_q % 2 || tail_v < 0 || p + tail_q + tail_v != size) return 1;
        PLAIN_POINTS(b + p, tail_q, b + p + tail_q, tail_v);
        if (seen != count) return 1;
        int rc = on_row(sink, r);
        if (rc) return rc;
    }
    return 0;
}

/* Each walker compiled with each sink inlined. The sink's state is copied into a local for
 * the walk and back: a local no pointer reaches can live in registers, where the state
 * behind `sink` had to be stored and reloaded around every write to the output arrays. */
#define WALKERS(walk, cells_type)                                                          \
    static int walk##_points(const void *c, void *sink) {                                   \
        points_t local = *(points_t *)sink;                                                 \
        int rc = walk((const cells_type *)c, on_point, on_points_row, &local);              \
        *(points_t *)sink = local;                                                          \
        return rc;                                                                          \
    }                                                                                       \
    static int walk##_buckets(const void *c, void *sink) {                                  \
        buckets_t local = *(buckets_t *)sink;                                               \
        int rc = walk((const cells_type *)c, on_bucket_point, on_buckets_row, &local);      \
        *(buckets_t *)sink = local;                                                         \
        return rc;                                                                          \
    }                                                                                       \
    static const walker_t walk##_er = {walk##_points, walk##_buckets};

WALKERS(walk_cells, cells_t)
WALKERS(walk_runs, void)
WALKERS(walk_arrays, void)
WALKERS(walk_heads, void)
#define cells_walker walk_cells_er
#define runs_walker walk_runs_er
#define arrays_walker walk_arrays_er
#define heads_walker walk_heads_er

/* -- the entry points --------------------------------------------------------------- */

/* What every entry point does once it holds its buffers: None when they are not
 * consistent (`ok` 0), else the walk's points, or with `bucketed` its buckets. */
static PyObject *walk_entry(const walker_t *walker, const void *cells, int ok, Py_ssize_t cap,
                            Py_ssize_t nrows, int bucketed, long long interval, long long seek,
                            int function) {
    if (!ok) {
        Py_INCREF(Py_None);
        return Py_None;
    }
    if (!bucketed) return walk_points(walker->points, cells, cap, nrows);
    return walk_buckets(walker->buckets, cells, cap, nrows, interval, seek, function);
}

/* decode_seconds and (`bucketed`) decode_buckets: a block's cells. */
static PyObject *cells_entry(PyObject *args, int bucketed) {
    Py_buffer b[6];
    cells_t c;
    long long interval = 0, seek = 0;
    int function = 0, parsed;
    if (bucketed)
        parsed = PyArg_ParseTuple(args, "y*y*y*y*y*y*LLi", &b[0], &b[1], &b[2], &b[3], &b[4],
                                  &b[5], &interval, &seek, &function);
    else
        parsed = PyArg_ParseTuple(args, "y*y*y*y*y*y*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]);
    if (!parsed) return NULL;
    fill_cells(b, &c);
    PyObject *result = walk_entry(&cells_walker, &c, cells_ok(&c, b), c.qn / 2, c.nrows, bucketed,
                                  interval, seek, function);
    for (int k = 0; k < 6; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* decode_runs and (`bucketed`) runs_buckets: the head's clean rows. */
static PyObject *runs_entry(PyObject *args, int bucketed) {
    Py_buffer b[4];
    long long interval = 0, seek = 0;
    int function = 0, parsed;
    if (bucketed)
        parsed = PyArg_ParseTuple(args, "y*y*y*y*LLi", &b[0], &b[1], &b[2], &b[3], &interval,
                                  &seek, &function);
    else
        parsed = PyArg_ParseTuple(args, "y*y*y*y*", &b[0], &b[1], &b[2], &b[3]);
    if (!parsed) return NULL;
    runs_t c = {b[0].buf, b[1].buf, b[0].len, b[1].len, b[2].len / 8, b[2].buf, b[3].buf};
    int ok = b[3].len / 8 == c.nrows && c.qn % 2 == 0;
    PyObject *result =
        walk_entry(&runs_walker, &c, ok, c.qn / 2, c.nrows, bucketed, interval, seek, function);
    for (int k = 0; k < 4; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* head_points and (`bucketed`) head_buckets: the head's rows from their own bytes. */
static PyObject *heads_entry(PyObject *args, int bucketed) {
    PyObject *bufs, *rows = NULL, *result = NULL;
    Py_buffer b[5];
    long long interval = 0, seek = 0;
    int function = 0, parsed;
    const unsigned char **data = NULL;
    Py_ssize_t *size = NULL;
    if (bucketed)
        parsed = PyArg_ParseTuple(args, "Oy*y*y*y*y*LLi", &bufs, &b[0], &b[1], &b[2], &b[3],
                                  &b[4], &interval, &seek, &function);
    else
        parsed = PyArg_ParseTuple(args, "Oy*y*y*y*y*", &bufs, &b[0], &b[1], &b[2], &b[3], &b[4]);
    if (!parsed) return NULL;
    /* a tuple of its own: the rows' bytes stay alive, whatever happens to `bufs`, while the
     * walk runs without the GIL */
    rows = PySequence_Tuple(bufs);
    if (rows == NULL) goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(rows), want = n * 8, cap = 0;
    int ok = 1;
    for (int k = 0; k < 5; k++) ok &= b[k].len == want;
    if (ok && n > 0) {
        data = PyMem_Malloc((size_t)n * sizeof(*data));
        size = PyMem_Malloc((size_t)n * sizeof(*size));
        if (data == NULL || size == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        const int64_t *counts = b[3].buf;
        /* a row's buckets: at most one a point, and at most the hour's (one more where a
         * base time is not on the hour): the output arrays no bigger than the answer of a
         * regular series (8.64 M points to 1.44 M buckets: allocations the allocator
         * reuses from one query to the next, not fresh pages every time) */
        int64_t per_row = bucketed && interval > 0 ? 3600000 / interval + 1 : INT64_MAX;
        for (Py_ssize_t r = 0; r < n && ok; r++) {
            PyObject *row = PyTuple_GET_ITEM(rows, r);
            ok = PyBytes_CheckExact(row) && counts[r] >= 0;
            if (!ok) break;
            data[r] = (const unsigned char *)PyBytes_AS_STRING(row);
            size[r] = PyBytes_GET_SIZE(row);
            cap += (Py_ssize_t)(counts[r] < per_row ? counts[r] : per_row);
        }
    }
    heads_t c = {data, size, b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, n};
    result = walk_entry(&heads_walker, &c, ok, cap, n, bucketed, interval, seek, function);
done:
    PyMem_Free(data);
    PyMem_Free(size);
    Py_XDECREF(rows);
    for (int k = 0; k < 5; k++) PyBuffer_Release(&b[k]);
    return result;
}

static PyObject *point_buckets(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[4];
    long long interval, seek;
    int function;
    if (!PyArg_ParseTuple(args, "y*y*y*y*LLi", &b[0], &b[1], &b[2], &b[3], &interval, &seek,
                          &function))
        return NULL;
    arrays_t a = {b[0].buf, b[2].buf, b[3].buf, b[1].buf, b[0].len / 8, b[2].len / 8};
    int ok = b[1].len / 8 == a.npoints && b[3].len / 8 == a.nrows;
    PyObject *result =
        walk_entry(&arrays_walker, &a, ok, a.npoints, a.nrows, 1, interval, seek, function);
    for (int k = 0; k < 4; k++) PyBuffer_Release(&b[k]);
    return result;
}

static PyObject *decode_seconds(PyObject *self, PyObject *args) {
    (void)self;
    return cells_entry(args, 0);
}

static PyObject *decode_buckets(PyObject *self, PyObject *args) {
    (void)self;
    return cells_entry(args, 1);
}

static PyObject *decode_runs(PyObject *self, PyObject *args) {
    (void)self;
    return runs_entry(args, 0);
}

static PyObject *runs_buckets(PyObject *self, PyObject *args) {
    (void)self;
    return runs_entry(args, 1);
}

static PyObject *head_points(PyObject *self, PyObject *args) {
    (void)self;
    return heads_entry(args, 0);
}

static PyObject *head_buckets(PyObject *self, PyObject *args) {
    (void)self;
    return heads_entry(args, 1);
}

/* rollup_cells(qualifiers, values, qlen, vlen, counts, base_ms, step_ms, agg_id, count_id):
 * the cells of rollup rows (tsd.query.rollup.decode_rollup_rows) that a read takes, in one
 * walk: a 3-byte qualifier whose first byte is agg_id or count_id (count_id -1: none) and
 * whose value length is its flags' (floats 4 or 8 bytes); its time is its row's base time
 * plus its interval index times step_ms. Returns
 *   ((rows, times, doubles, ints, is_int) of the agg_id cells,
 *    (rows, times, doubles) of the count_id cells,
 *    (rows holding a cell taken, agg cells in strictly increasing (row, time),
 *     count cells likewise, both of the same (row, time) in the same order))
 * as int64/float64/uint8 bytearrays and ints, in cell order. The numpy path of
 * decode_rollup_rows computes the same (tests/query/test_rollup_decode.py). */
static PyObject *rollup_cells(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer q, v, ql, vl, cn, bm;
    long long step_ms;
    int agg_id, count_id;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*Lii", &q, &v, &ql, &vl, &cn, &bm, &step_ms,
                          &agg_id, &count_id))
        return NULL;
    PyObject *result = NULL;
    PyObject *o[8] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    Py_ssize_t ncells = ql.len / 8, nrows = cn.len / 8;
    if (vl.len / 8 != ncells || bm.len / 8 != nrows) {
        PyErr_SetString(PyExc_ValueError, "rollup_cells: lengths disagree");
        goto fail;
    }
    {
        const unsigned char *qb = q.buf, *vb = v.buf;
        const int64_t *qlen = ql.buf, *vlen = vl.buf, *counts = cn.buf, *base = bm.buf;
        Py_ssize_t sizes[8] = {8, 8, 8, 8, 1, 8, 8, 8};
        for (int k = 0; k < 8; k++) {
            o[k] = PyByteArray_FromStringAndSize(NULL, ncells * sizes[k]);
            if (!o[k]) goto fail;
        }
        int64_t *m_row = (int64_t *)PyByteArray_AS_STRING(o[0]);
        int64_t *m_ts = (int64_t *)PyByteArray_AS_STRING(o[1]);
        double *m_d = (double *)PyByteArray_AS_STRING(o[2]);
        int64_t *m_i = (int64_t *)PyByteArray_AS_STRING(o[3]);
        unsigned char *m_isi = (unsigned char *)PyByteArray_AS_STRING(o[4]);
        int64_t *c_row = (int64_t *)PyByteArray_AS_STRING(o[5]);
        int64_t *c_ts = (int64_t *)PyByteArray_AS_STRING(o[6]);
        double *c_d = (double *)PyByteArray_AS_STRING(o[7]);
        Py_ssize_t qpos = 0, vpos = 0, cell = 0, nm = 0, nc = 0, seen = 0;
        int m_ordered = 1, c_ordered = 1;
        for (Py_ssize_t r = 0; r < nrows; r++) {
            int row_seen = 0;
            for (int64_t c = 0; c < counts[r]; c++, cell++) {
                if (cell >= ncells) {
                    PyErr_SetString(PyExc_ValueError, "rollup_cells: counts exceed the cells");
                    goto fail;
                }
                Py_ssize_t len = (Py_ssize_t)qlen[cell], width = (Py_ssize_t)vlen[cell];
                if (qpos + len > q.len || vpos + width > v.len) {
                    PyErr_SetString(PyExc_ValueError, "rollup_cells: lengths exceed the bytes");
                    goto fail;
                }
                const unsigned char *qp = qb + qpos, *vp = vb + vpos;
                qpos += len;
                vpos += width;
                if (len != 3) continue;
                int first = qp[0];
                int is_main = first == agg_id;
                if (!is_main && !(count_id >= 0 && first == count_id)) continue;
                unsigned unit = ((unsigned)qp[1] << 8) | qp[2];
                int is_float = (unit & 0x8) != 0;
                if (width != (Py_ssize_t)(unit & 0x7) + 1 || !valid_length(is_float, width))
                    continue;
                int64_t ts = base[r] + (int64_t)(unit >> 4) * step_ms;
                double d;
                int64_t iv;
                read_value(vp, v.len - (vp - vb), width, is_float, &d, &iv);
                row_seen = 1;
                if (is_main) {
                    if (nm && (m_row[nm - 1] > r || (m_row[nm - 1] == r && m_ts[nm - 1] >= ts)))
                        m_ordered = 0;
                    m_row[nm] = r;
                    m_ts[nm] = ts;
                    m_d[nm] = d;
                    m_i[nm] = iv;
                    m_isi[nm] = !is_float;
                    nm++;
                } else {
                    if (nc && (c_row[nc - 1] > r || (c_row[nc - 1] == r && c_ts[nc - 1] >= ts)))
                        c_ordered = 0;
                    c_row[nc] = r;
                    c_ts[nc] = ts;
                    c_d[nc] = d;
                    nc++;
                }
            }
            seen += row_seen;
        }
        int paired = nm == nc;
        for (Py_ssize_t k = 0; paired && k < nm; k++)
            paired = m_row[k] == c_row[k] && m_ts[k] == c_ts[k];
        Py_ssize_t keep[8] = {nm, nm, nm, nm, nm, nc, nc, nc};
        for (int k = 0; k < 8; k++)
            if (PyByteArray_Resize(o[k], keep[k] * sizes[k])) goto fail;
        result = Py_BuildValue("((OOOOO)(OOO)(niii))", o[0], o[1], o[2], o[3], o[4], o[5], o[6],
                               o[7], seen, m_ordered, c_ordered, paired);
    }
fail:
    for (int k = 0; k < 8; k++) Py_XDECREF(o[k]);
    PyBuffer_Release(&q);
    PyBuffer_Release(&v);
    PyBuffer_Release(&ql);
    PyBuffer_Release(&vl);
    PyBuffer_Release(&cn);
    PyBuffer_Release(&bm);
    return result;
}

/* key_times(keys, at): per row key (a list of bytes) its length and the big-endian 4-byte
 * base time at offset `at`, in one pass over the list (base_times_s and the limits' byte
 * count of tsd.query.decode and head_rows: a 30-day panel in the head is 72,000 row keys,
 * where a length per key read through map() and the keys joined into a byte matrix
 * were most of its read). Returns (lengths int64, base times int64) as bytearrays, or
 * None when an item is not bytes or is too short (the Python path, key_times_python, is
 * the spec; tests/query/test_key_times.py checks both). */
static PyObject *key_times(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *keys;
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &keys, &at)) return NULL;
    if (at < 0) Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *lengths = PyByteArray_FromStringAndSize(NULL, n * 8);
    PyObject *bases = PyByteArray_FromStringAndSize(NULL, n * 8);
    if (!lengths || !bases) {
        Py_XDECREF(lengths);
        Py_XDECREF(bases);
        return NULL;
    }
    int64_t *len_out = (int64_t *)PyByteArray_AS_STRING(lengths);
    int64_t *base_out = (int64_t *)PyByteArray_AS_STRING(bases);
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *key = PyList_GET_ITEM(keys, r);
        if (!PyBytes_CheckExact(key) || PyBytes_GET_SIZE(key) < at + 4) {
            Py_DECREF(lengths);
            Py_DECREF(bases);
            Py_RETURN_NONE;
        }
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(key) + at;
        len_out[r] = PyBytes_GET_SIZE(key);
        base_out[r] = ((int64_t)p[0] << 24) | ((int64_t)p[1] << 16) | ((int64_t)p[2] << 8) | p[3];
    }
    return Py_BuildValue("(NN)", lengths, bases);
}

static PyMethodDef methods[] = {
    {"decode_seconds", decode_seconds, METH_VARARGS,
     "Seconds data cells -> (timestamps, doubles, ints, is_int, row_offsets, any_int) or None"},
    {"rollup_cells", rollup_cells, METH_VARARGS,
     "Rollup cells a read takes -> ((agg cells), (count cells), (seen, ordered, paired))"},
    {"decode_runs", decode_runs, METH_VARARGS,
     "The head's clean seconds rows -> the same tuple as decode_seconds, or None"},
    {"decode_buckets", decode_buckets, METH_VARARGS,
     "Seconds data cells -> each row's buckets (timestamps, values, row_offsets, row_points) "
     "or None"},
    {"runs_buckets", runs_buckets, METH_VARARGS,
     "The head's clean seconds rows -> decode_buckets' tuple, or None"},
    {"head_points", head_points, METH_VARARGS,
     "The head's clean seconds rows, from their own bytes -> decode_runs' tuple, or None"},
    {"head_buckets", head_buckets, METH_VARARGS,
     "The head's clean seconds rows, from their own bytes -> decode_buckets' tuple, or None"},
    {"point_buckets", point_buckets, METH_VARARGS,
     "Decoded points (ms offsets, doubles, counts per row, base ms) -> decode_buckets' tuple, "
     "or None"},
    {"key_times", key_times, METH_VARARGS,
     "Row keys -> (lengths int64, base times int64) as bytearrays, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_decode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__decode(void) { return PyModule_Create(&module); }
