/* Packed rows -> points, at compiled speed (tsd.storage.embedded.points).
 *
 * Why: a query of 24,000 compacted rows spent about 140 ms of its 200 ms unpacking them
 * (packed.unpack_many): per-entry header parsing in Python, then the columns turned back
 * into OpenTSDB cell bytes, which the query then decoded again. This reads every entry's
 * fast cell (docs/format/embedded.md) once and writes its points (offset in ms from the
 * row's base time, double, exact integer) straight into the block's point arrays: what
 * tsd.query.decode would find in the cell bytes, which are never built.
 *
 * points(entries, payloads): entries is a list of packed-row values (bytes); payloads is
 * None or a list of the same length holding, for each zstd-compressed entry, its payload
 * decompressed (any buffer). Taken: entries of one cell, fast (integer, decimal or raw
 * values) or verbatim, all its qualifiers seconds or all ms, readable flags (integers on 1,
 * 2, 4 or 8 bytes, floats on 4 or 8), two or more points with strictly increasing offsets
 * that fit their qualifiers, and the meta byte:
 * exactly the compacted cells tsd.query.decode reads without a merge or a fix-up, so the
 * points are the ones it would give. Answers
 *   - (counts, qualifier lengths, value lengths, offsets_ms, doubles, ints, is_int) as
 *     bytearrays (int64 per entry, then int64 / float64 / int64 / uint8 per point; ints and
 *     is_int None when no point is an integer),
 *   - or, when payloads is None and entries are compressed, (indices, frames, sizes): the
 *     entries to decompress, their zstd frames and their sizes (uint64) once decompressed
 *     (0: not known before, for raw values under a flags column),
 *   - or None when any entry is anything else (the caller unpacks the cells instead, which
 *     also raises the exact error for a corrupt entry).
 * tests/storage/test_points.py checks it against the cell path on random cells.
 *
 * packed_rows(entries, suffix) reads a batch's keys (see below): at 60 s between
 * points a day of 1,000 series is 24,000 packed entries of 60 points, and finding, checking
 * and unescaping each key in Python cost more than decoding its points.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEAD 23 /* the fast cell's header after its tag, packed.py's _HEAD */
#define M_MS 0x01
#define M_ONE_FLAGS 0x02
#define M_ZSTD 0x04
#define M_TAIL 0x08
#define M_FOR 0x10
#define M_CANON 0x80
#define VMODE(m) (((m) >> 5) & 3)
#define V_INT 0
#define V_DEC 1
#define V_RAW 2
#define MAX_DECIMALS 15

static const double POW10[MAX_DECIMALS + 1] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                               1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* One entry's cell, its header read: a fast cell, or a verbatim one (`verbatim`: the
 * cell's qualifier at `payload` (`qlen` bytes) and its value at `value` (`plen` bytes)). */
typedef struct {
    const unsigned char *payload; /* the stored payload (compressed when M_ZSTD) */
    Py_ssize_t plen;
    int verbatim;
    const unsigned char *value;
    Py_ssize_t qlen;
    unsigned mode, n, flag, k, tbits, vbits;
    uint32_t first;
    int32_t step;
    int64_t base, low;
} Cell;

static inline uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A signed little-endian integer of `w` (0..8) bytes. */
static inline int64_t sle(const unsigned char *p, unsigned w) {
    uint64_t v = 0;
    for (unsigned i = 0; i < w; i++) v |= (uint64_t)p[i] << (8 * i);
    if (w && w < 8 && (p[w - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * w);
    return (int64_t)v;
}

/* A verbatim cell: a compacted cell of two or more points, all seconds or all ms
 * qualifiers (as tsd.query.decode classifies them). */
static int read_verbatim(const unsigned char *d, Py_ssize_t len, Cell *c) {
    if (len < 10) return 0;
    Py_ssize_t qlen = (Py_ssize_t)le32(d + 2), vlen = (Py_ssize_t)le32(d + 6);
    if (10 + qlen + vlen != len || qlen < 4 || qlen % 2) return 0;
    const unsigned char *q = d + 10;
    int ms = q[0] >= 0xF0;
    if (ms && (qlen % 4 || qlen < 8)) return 0;
    for (Py_ssize_t k = 0; k < qlen; k += ms ? 4 : 2)
        if ((q[k] >= 0xF0) != ms) return 0; /* seconds and ms mixed */
    c->verbatim = 1;
    c->mode = ms ? M_MS : 0;
    c->n = (unsigned)(qlen / (ms ? 4 : 2));
    c->payload = q;
    c->qlen = qlen;
    c->value = q + qlen;
    c->plen = vlen;
    return 1;
}

/* The header of a packed-row value of one cell; 0 when it is not one this takes. */
static int read_head(const unsigned char *d, Py_ssize_t len, Cell *c) {
    if (len >= 10 && d[0] == 1 && d[1] == 0) return read_verbatim(d, len, c);
    c->verbatim = 0;
    if (len < 1 + HEAD || d[0] != 1 || d[1] != 1) return 0;
    const unsigned char *h = d + 1;
    c->mode = h[1];
    c->n = (unsigned)h[2] | (unsigned)h[3] << 8;
    c->first = le32(h + 4);
    c->step = (int32_t)le32(h + 8);
    c->flag = h[12];
    c->k = h[13];
    c->tbits = h[14];
    c->vbits = h[15];
    unsigned w1 = h[17], w2 = h[18];
    c->plen = (Py_ssize_t)le32(h + 19);
    if (w1 > 8 || w2 > 8 || 1 + HEAD + (Py_ssize_t)w1 + w2 + c->plen != len) return 0;
    c->base = sle(h + HEAD, w1);
    c->low = sle(h + HEAD + w1, w2);
    c->payload = h + HEAD + w1 + w2;
    unsigned vmode = VMODE(c->mode);
    if (vmode > V_RAW || c->n < 2 || !(c->mode & M_TAIL) || c->tbits > 64 || c->vbits > 64)
        return 0;
    if ((c->mode & M_ONE_FLAGS) && (c->mode & M_CANON)) return 0;
    if ((c->mode & M_CANON) && vmode == V_RAW) return 0;
    if (vmode == V_DEC && c->k > MAX_DECIMALS) return 0;
    if ((c->mode & M_ONE_FLAGS) && c->flag > 0xF) return 0;
    return 1;
}

static inline Py_ssize_t bit_bytes(Py_ssize_t count, unsigned bits) {
    return (count * (Py_ssize_t)bits + 7) / 8;
}

/* Bytes of a point's value for readable flags; 0 for flags this does not take. */
static inline unsigned width_of(unsigned f) {
    if (f & 0x8) return f == 0xB ? 4 : f == 0xF ? 8 : 0;
    unsigned w = (f & 7) + 1;
    return (w == 1 || w == 2 || w == 4 || w == 8) ? w : 0;
}

/* Payload bytes the header and flags call for (-1: flags this does not take). */
static Py_ssize_t payload_size(const Cell *c, const unsigned char *p, Py_ssize_t have,
                               Py_ssize_t *vbytes_out) {
    Py_ssize_t n = c->n, at = bit_bytes(n - 1, c->tbits);
    int column = !(c->mode & (M_ONE_FLAGS | M_CANON));
    Py_ssize_t vbytes;
    if (VMODE(c->mode) == V_RAW) {
        vbytes = 0;
        if (column) {
            if (at + n > have) return -1;
            for (Py_ssize_t i = 0; i < n; i++) {
                unsigned w = width_of(p[at + i]);
                if (!w) return -1;
                vbytes += w;
            }
        } else {
            unsigned w = width_of(c->flag);
            if (!w) return -1;
            vbytes = n * (Py_ssize_t)w;
        }
    } else {
        vbytes = bit_bytes((c->mode & M_FOR) ? n : n - 1, c->vbits);
    }
    *vbytes_out = vbytes;
    return at + (column ? n : 0) + vbytes;
}

/* Little-endian 64 bits at p, zero past `avail` bytes. */
static inline uint64_t load_le64(const unsigned char *p, Py_ssize_t avail) {
    uint64_t w = 0;
    if (avail >= 8) {
        memcpy(&w, p, 8);
        return w; /* little-endian hosts (x86-64, arm64) */
    }
    for (Py_ssize_t k = 0; k < avail; k++) w |= (uint64_t)p[k] << (8 * k);
    return w;
}

/* Entry `i` of a column of `bits`-wide entries (little-endian bit order), `avail` bytes. */
static inline uint64_t bits_at(const unsigned char *col, Py_ssize_t avail, Py_ssize_t i,
                               unsigned bits) {
    if (!bits) return 0;
    uint64_t pos = (uint64_t)i * bits, byte = pos >> 3;
    unsigned sh = (unsigned)(pos & 7);
    uint64_t v = load_le64(col + byte, avail - (Py_ssize_t)byte) >> sh;
    if (sh && bits + sh > 64 && (Py_ssize_t)byte + 8 < avail)
        v |= (uint64_t)col[byte + 8] << (64 - sh);
    return bits == 64 ? v : v & ((UINT64_C(1) << bits) - 1);
}

/* OpenTSDB's flags for an integer: the smallest width that holds it. */
static inline unsigned int_flags(int64_t v) {
    if (v >= -0x80 && v <= 0x7F) return 0;
    if (v >= -0x8000 && v <= 0x7FFF) return 1;
    if (v >= -(INT64_C(1) << 31) && v < (INT64_C(1) << 31)) return 3;
    return 7;
}

/* An integer's low `w` bytes, sign-extended: what a cell of that width holds. */
static inline int64_t narrowed(int64_t v, unsigned w) {
    return w == 8 ? v : (int64_t)((uint64_t)v << (64 - 8 * w)) >> (64 - 8 * w);
}

/* A big-endian value of readable flags `f` at p: sets *d, *iv; returns whether an integer. */
static inline int raw_value(const unsigned char *p, unsigned f, double *d, int64_t *iv) {
    unsigned w = width_of(f);
    uint64_t u = 0;
    for (unsigned k = 0; k < w; k++) u = (u << 8) | p[k];
    if (f & 0x8) {
        if (w == 8) {
            memcpy(d, &u, 8);
        } else {
            uint32_t u4 = (uint32_t)u;
            float x;
            memcpy(&x, &u4, 4);
            *d = (double)x;
        }
        *iv = 0;
        return 0;
    }
    *iv = (int64_t)(u << (64 - 8 * w)) >> (64 - 8 * w);
    *d = (double)*iv;
    return 1;
}

typedef struct {
    int64_t *off;
    double *dv;
    int64_t *iv;         /* NULL until an integer is met */
    unsigned char *isi;  /* NULL until an integer is met */
    PyObject *i_o, *isi_o;
    Py_ssize_t total;    /* points of the whole block */
    PyThreadState *unlocked; /* the GIL released by pass 2 (NULL: held) */
} Out;

static int start_ints(Out *o, Py_ssize_t done) {
    if (o->unlocked) PyEval_RestoreThread(o->unlocked); /* allocating takes the GIL */
    o->i_o = PyByteArray_FromStringAndSize(NULL, o->total * 8);
    o->isi_o = PyByteArray_FromStringAndSize(NULL, o->total);
    if (o->unlocked) o->unlocked = PyEval_SaveThread();
    if (!o->i_o || !o->isi_o) return -1;
    o->iv = (int64_t *)PyByteArray_AS_STRING(o->i_o);
    o->isi = (unsigned char *)PyByteArray_AS_STRING(o->isi_o);
    memset(o->iv, 0, (size_t)done * 8);
    memset(o->isi, 0, (size_t)done);
    return 0;
}

/* The offsets (ms from the row's base) of a fast cell's points into `offs`: first + step * i
 * + the running sum of the packed steps (wrapping as numpy); 0 unless they strictly increase
 * and fit the qualifiers. A regular series (no packed steps) is checked once, not per point. */
static int read_offsets(const Cell *c, const unsigned char *steps, Py_ssize_t steps_len,
                        int64_t *offs) {
    Py_ssize_t n = c->n;
    int ms = c->mode & M_MS;
    int64_t limit = ms ? (INT64_C(1) << 22) : 0xF00; /* offsets that fit the qualifier */
    int64_t scale = ms ? 1 : 1000;
    if (!c->tbits) {
        /* n < 2**16 and |step| < 2**31: no wrap; increasing iff step > 0 */
        int64_t first = c->first, step = c->step;
        if (step <= 0 || first + step * (int64_t)(n - 1) >= limit) return 0;
        for (Py_ssize_t i = 0; i < n; i++) offs[i] = (first + step * (int64_t)i) * scale;
        return 1;
    }
    uint64_t off = c->first;
    int64_t last = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) off += (uint64_t)(int64_t)c->step + bits_at(steps, steps_len, i - 1, c->tbits);
        int64_t so = (int64_t)off;
        if (so <= last || so >= limit) return 0;
        last = so;
        offs[i] = so * scale;
    }
    return 1;
}

/* Points decoded a chunk at a time on the fast path: the integers of a chunk first, then
 * its values (a loop of independent steps the compiler vectorizes). */
#define CHUNK 256

/* dv[j] = x[j] / scale, two at a time (SSE2's divpd where the compiler has vectors: the
 * same correctly rounded quotient as one at a time). */
typedef double pair_of_doubles __attribute__((vector_size(16)));
static inline void divide_chunk(double *dv, const int64_t *x, Py_ssize_t m, double scale) {
    Py_ssize_t j = 0;
    pair_of_doubles by = {scale, scale};
    for (; j + 2 <= m; j += 2) {
        pair_of_doubles two = {(double)x[j], (double)x[j + 1]};
        two /= by;
        memcpy(dv + j, &two, sizeof two);
    }
    for (; j < m; j++) dv[j] = (double)x[j] / scale;
}

/* bits_at, without its checks for a column of at most 56 bits (a value never spans a
 * ninth byte: the usual column); `mask` is the low `bits` bits. */
static inline uint64_t column_bits(const unsigned char *col, Py_ssize_t avail, Py_ssize_t i,
                                   unsigned bits, uint64_t mask) {
    if (bits > 56) return bits_at(col, avail, i, bits);
    uint64_t pos = (uint64_t)i * bits, byte = pos >> 3;
    return (load_le64(col + byte, avail - (Py_ssize_t)byte) >> (pos & 7)) & mask;
}

/* decode_cell's values for an integer or decimal column with no flags column (one flags
 * byte, or the canonical flags of each value: the one place those are read), without a
 * per-point branch on the cell's mode (a day of points at 10 s is 8.6 M of them per 1,000
 * series). 1 done, 0 not taken, -1 error. */
static int decode_values_fast(const Cell *c, const unsigned char *vals, Py_ssize_t vbytes,
                              Out *o, Py_ssize_t at, Py_ssize_t *value_bytes) {
    Py_ssize_t n = c->n, used = 0;
    unsigned vmode = VMODE(c->mode), bits = c->vbits;
    int one = (c->mode & M_ONE_FLAGS) != 0, delta = !(c->mode & M_FOR);
    unsigned w = 0;
    if (one) {
        w = width_of(c->flag);
        /* decimals under float flags, integers under integer flags */
        if (!w || (vmode == V_DEC) != ((c->flag & 0x8) != 0)) return 0;
    }
    if (vmode == V_INT && !o->iv && start_ints(o, at) < 0) return -1;
    uint64_t mask = bits ? (bits == 64 ? ~UINT64_C(0) : (UINT64_C(1) << bits) - 1) : 0;
    uint64_t base = (uint64_t)c->base, acc = base, low = (uint64_t)c->low;
    double scale = POW10[vmode == V_DEC ? c->k : 0];
    int64_t x[CHUNK];
    for (Py_ssize_t s = 0; s < n; s += CHUNK) {
        Py_ssize_t m = n - s < CHUNK ? n - s : CHUNK;
        if (delta) {
            for (Py_ssize_t j = 0; j < m; j++) {
                Py_ssize_t i = s + j;
                if (i) acc += column_bits(vals, vbytes, i - 1, bits, mask) + low;
                x[j] = (int64_t)acc;
            }
        } else {
            for (Py_ssize_t j = 0; j < m; j++)
                x[j] = (int64_t)(column_bits(vals, vbytes, s + j, bits, mask) + base);
        }
        double *dv = o->dv + at + s;
        if (vmode == V_DEC) {
            divide_chunk(dv, x, m, scale);
            if (one) {
                if (w == 4)
                    for (Py_ssize_t j = 0; j < m; j++) dv[j] = (double)(float)dv[j];
                used += m * (Py_ssize_t)w;
            } else {
                Py_ssize_t wide = 0; /* canonical: 4 bytes when a float holds it exactly */
                for (Py_ssize_t j = 0; j < m; j++) wide += (double)(float)dv[j] != dv[j];
                used += 4 * m + 4 * wide;
            }
            if (o->iv) {
                memset(o->iv + at + s, 0, (size_t)m * 8);
                memset(o->isi + at + s, 0, (size_t)m);
            }
        } else {
            int64_t *iv = o->iv + at + s;
            if (one) {
                for (Py_ssize_t j = 0; j < m; j++) iv[j] = narrowed(x[j], w);
                used += m * (Py_ssize_t)w;
            } else {
                for (Py_ssize_t j = 0; j < m; j++) {
                    iv[j] = x[j];
                    used += width_of(int_flags(x[j]));
                }
            }
            for (Py_ssize_t j = 0; j < m; j++) dv[j] = (double)iv[j];
            memset(o->isi + at + s, 1, (size_t)m);
        }
    }
    *value_bytes = used;
    return 1;
}

/* The points of one cell (payload `p` of `have` bytes, decompressed) at `at` of `o`:
 * 1 done, 0 not taken, -1 error. *vlen gets the cell's value bytes (with its meta byte). */
static int decode_cell(const Cell *c, const unsigned char *p, Py_ssize_t have, Out *o,
                       Py_ssize_t at, Py_ssize_t *vlen) {
    Py_ssize_t n = c->n, vbytes = 0;
    if (payload_size(c, p, have, &vbytes) != have) return 0;
    const unsigned char *steps = p;
    Py_ssize_t steps_len = bit_bytes(n - 1, c->tbits);
    if (!read_offsets(c, steps, steps_len, o->off + at)) return 0;
    int column = !(c->mode & (M_ONE_FLAGS | M_CANON));
    const unsigned char *flags = p + steps_len;
    const unsigned char *vals = flags + (column ? n : 0);
    unsigned vmode = VMODE(c->mode);
    Py_ssize_t value_bytes = 0, raw_at = 0;
    if (!column && vmode != V_RAW) {
        int taken = decode_values_fast(c, vals, vbytes, o, at, &value_bytes);
        if (taken <= 0) return taken;
        *vlen = value_bytes + 1;
        return 1;
    }
    uint64_t acc = (uint64_t)c->base; /* the running integer of a delta column */
    double *dv = o->dv + at;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t x = 0;
        if (vmode != V_RAW) {
            if (c->mode & M_FOR) {
                x = (int64_t)(bits_at(vals, vbytes, i, c->vbits) + (uint64_t)c->base);
            } else {
                if (i) acc += bits_at(vals, vbytes, i - 1, c->vbits) + (uint64_t)c->low;
                x = (int64_t)acc;
            }
        }
        unsigned f;
        double d = 0;
        if (vmode == V_DEC) d = (double)x / POW10[c->k];
        /* a flags column, or raw values under one flags byte (read_head refuses raw values
         * under canonical flags) */
        f = (c->mode & M_ONE_FLAGS) ? c->flag : flags[i];
        unsigned w = f > 0xF ? 0 : width_of(f);
        if (!w) return 0;
        int is_int;
        int64_t iv = 0;
        if (vmode == V_RAW) {
            is_int = raw_value(vals + raw_at, f, &d, &iv);
            raw_at += w;
        } else if (vmode == V_DEC) {
            if (!(f & 0x8)) return 0; /* decimals written under integer flags */
            if (w == 4) d = (double)(float)d;
            is_int = 0;
        } else {
            if (f & 0x8) return 0; /* integers written under float flags */
            iv = narrowed(x, w);
            d = (double)iv;
            is_int = 1;
        }
        if (is_int && !o->iv && start_ints(o, at + i) < 0) return -1;
        if (o->iv) {
            o->iv[at + i] = iv;
            o->isi[at + i] = (unsigned char)is_int;
        }
        dv[i] = d;
        value_bytes += w;
    }
    *vlen = value_bytes + 1;
    return 1;
}

/* decode_cell for a verbatim cell: the qualifiers and value bytes as they are. */
static int decode_verbatim(const Cell *c, Out *o, Py_ssize_t at, Py_ssize_t *vlen) {
    Py_ssize_t n = c->n, used = 0;
    int ms = c->mode & M_MS;
    int64_t last = -1;
    const unsigned char *q = c->payload, *v = c->value;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t off;
        unsigned f;
        if (ms) {
            uint32_t u = (uint32_t)q[4 * i] << 24 | (uint32_t)q[4 * i + 1] << 16 |
                         (uint32_t)q[4 * i + 2] << 8 | q[4 * i + 3];
            off = (int64_t)((u & 0x0FFFFFC0) >> 6);
            f = u & 0xF;
        } else {
            unsigned u = (unsigned)q[2 * i] << 8 | q[2 * i + 1];
            off = (int64_t)(u >> 4) * 1000;
            f = u & 0xF;
        }
        unsigned w = width_of(f);
        if (!w || off <= last || used + (Py_ssize_t)w > c->plen - 1) return 0;
        last = off;
        o->off[at + i] = off;
        int64_t iv;
        int is_int = raw_value(v + used, f, &o->dv[at + i], &iv);
        if (is_int && !o->iv && start_ints(o, at + i) < 0) return -1;
        if (o->iv) {
            o->iv[at + i] = iv;
            o->isi[at + i] = (unsigned char)is_int;
        }
        used += w;
    }
    if (used != c->plen - 1) return 0; /* the values, then one meta byte */
    *vlen = c->plen;
    return 1;
}

static PyObject *points(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *entries, *payloads;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &entries, &payloads)) return NULL;
    if (payloads != Py_None &&
        (!PyList_Check(payloads) || PyList_GET_SIZE(payloads) != PyList_GET_SIZE(entries))) {
        PyErr_SetString(PyExc_TypeError, "payloads: None or a list as long as entries");
        return NULL;
    }
    Py_ssize_t rows = PyList_GET_SIZE(entries), total = 0;
    PyObject *counts_o = NULL, *ql_o = NULL, *vl_o = NULL, *off_o = NULL, *d_o = NULL;
    PyObject *result = NULL, *want = NULL, *frames = NULL, *sizes = NULL;
    Out o = {0};
    Py_buffer *views = NULL; /* the decompressed payloads' buffers (pass 2) */
    Py_ssize_t viewed = 0;   /* views[0 .. viewed) taken; each held where its entry is zstd */
    Cell *cells = PyMem_Malloc(sizeof(Cell) * (size_t)(rows ? rows : 1));
    if (!cells) return PyErr_NoMemory();
    /* pass 1: every header, the points in all, the compressed entries */
    for (Py_ssize_t r = 0; r < rows; r++) {
        PyObject *e = PyList_GET_ITEM(entries, r);
        if (!PyBytes_Check(e)) goto none;
        if (!read_head((const unsigned char *)PyBytes_AS_STRING(e), PyBytes_GET_SIZE(e),
                       &cells[r]))
            goto none;
        total += cells[r].n;
        if (!cells[r].verbatim && (cells[r].mode & M_ZSTD) && payloads == Py_None) {
            if (!want && (!(want = PyList_New(0)) || !(frames = PyList_New(0)) ||
                          !(sizes = PyByteArray_FromStringAndSize(NULL, 0))))
                goto fail;
            Py_ssize_t vbytes = 0;
            Cell *c = &cells[r];
            /* the size once decompressed; 0 when the flags of raw values, inside, tell it */
            uint64_t size = 0;
            if (VMODE(c->mode) != V_RAW || (c->mode & M_ONE_FLAGS))
                size = (uint64_t)payload_size(c, NULL, 0, &vbytes);
            PyObject *index = PyLong_FromSsize_t(r);
            PyObject *frame = PyBytes_FromStringAndSize((const char *)c->payload, c->plen);
            int bad = !index || !frame || PyList_Append(want, index) < 0 ||
                      PyList_Append(frames, frame) < 0;
            Py_XDECREF(index);
            Py_XDECREF(frame);
            if (bad) goto fail;
            Py_ssize_t had = PyByteArray_GET_SIZE(sizes);
            if (PyByteArray_Resize(sizes, had + 8) < 0) goto fail;
            memcpy(PyByteArray_AS_STRING(sizes) + had, &size, 8);
        }
    }
    if (want) {
        result = PyTuple_Pack(3, want, frames, sizes);
        goto done;
    }
    counts_o = PyByteArray_FromStringAndSize(NULL, rows * 8);
    ql_o = PyByteArray_FromStringAndSize(NULL, rows * 8);
    vl_o = PyByteArray_FromStringAndSize(NULL, rows * 8);
    off_o = PyByteArray_FromStringAndSize(NULL, total * 8);
    d_o = PyByteArray_FromStringAndSize(NULL, total * 8);
    if (!counts_o || !ql_o || !vl_o || !off_o || !d_o) goto fail;
    int64_t *counts = (int64_t *)PyByteArray_AS_STRING(counts_o);
    int64_t *ql = (int64_t *)PyByteArray_AS_STRING(ql_o);
    int64_t *vl = (int64_t *)PyByteArray_AS_STRING(vl_o);
    o.off = (int64_t *)PyByteArray_AS_STRING(off_o);
    o.dv = (double *)PyByteArray_AS_STRING(d_o);
    o.total = total;
    /* pass 2: the points. The payloads' buffers are taken first; the walk itself touches
     * no Python object (the entries stay alive in their list), so it runs without the GIL:
     * the blocks a scan's reader threads read decode side by side. */
    views = PyMem_Calloc((size_t)(rows ? rows : 1), sizeof(Py_buffer));
    if (!views) {
        PyErr_NoMemory();
        goto fail;
    }
    for (; viewed < rows; viewed++) {
        Cell *c = &cells[viewed];
        if (c->verbatim || !(c->mode & M_ZSTD)) continue;
        PyObject *raw = payloads == Py_None ? Py_None : PyList_GET_ITEM(payloads, viewed);
        if (raw == Py_None || PyObject_GetBuffer(raw, &views[viewed], PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            goto none;
        }
    }
    Py_ssize_t at = 0;
    int status = 1;
    o.unlocked = PyEval_SaveThread();
    for (Py_ssize_t r = 0; r < rows; r++) {
        Cell *c = &cells[r];
        Py_ssize_t vlen = 0;
        int taken;
        if (c->verbatim) {
            taken = decode_verbatim(c, &o, at, &vlen);
        } else if (c->mode & M_ZSTD) {
            taken = decode_cell(c, views[r].buf, views[r].len, &o, at, &vlen);
        } else {
            taken = decode_cell(c, c->payload, c->plen, &o, at, &vlen);
        }
        if (taken <= 0) {
            status = taken;
            break;
        }
        counts[r] = c->n;
        ql[r] = (int64_t)c->n * ((c->mode & M_MS) ? 4 : 2);
        vl[r] = vlen;
        at += c->n;
    }
    PyEval_RestoreThread(o.unlocked);
    o.unlocked = NULL;
    if (status < 0) goto fail;
    if (!status) goto none;
    result = Py_BuildValue("(OOOOOOO)", counts_o, ql_o, vl_o, off_o, d_o,
                           o.i_o ? o.i_o : Py_None, o.isi_o ? o.isi_o : Py_None);
    goto done;
none:
    Py_INCREF(Py_None);
    result = Py_None;
    goto done;
fail:
    result = NULL;
done:
    for (Py_ssize_t r = 0; r < viewed; r++) {
        if (views[r].obj) PyBuffer_Release(&views[r]);
    }
    PyMem_Free(views);
    PyMem_Free(cells);
    Py_XDECREF(want);
    Py_XDECREF(frames);
    Py_XDECREF(sizes);
    Py_XDECREF(counts_o);
    Py_XDECREF(ql_o);
    Py_XDECREF(vl_o);
    Py_XDECREF(off_o);
    Py_XDECREF(d_o);
    Py_XDECREF(o.i_o);
    Py_XDECREF(o.isi_o);
    return result;
}

/* packed_rows(entries, suffix): the rows of packed entries read from the packed database,
 * in one pass: for each (key, value) pair, the escaped row before the key's first 00 00
 * (keys.py), unescaped (00 FF -> 00), when what follows the 00 00 is `suffix` (the family
 * and PACKED_END) and the value is not empty. Returns (rows, values) as lists, or None as
 * soon as an entry is not so (the caller then reads the batch the general way, which
 * decides). */
static PyObject *packed_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *entries;
    const char *suffix;
    Py_ssize_t slen;
    if (!PyArg_ParseTuple(args, "O!y#", &PyList_Type, &entries, &suffix, &slen)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    PyObject *rows = PyList_New(n), *values = PyList_New(n);
    if (!rows || !values) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(entries, i);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) goto none;
        PyObject *k = PyTuple_GET_ITEM(e, 0), *v = PyTuple_GET_ITEM(e, 1);
        if (!PyBytes_Check(k) || !PyBytes_Check(v) || PyBytes_GET_SIZE(v) == 0) goto none;
        const char *kb = PyBytes_AS_STRING(k);
        Py_ssize_t klen = PyBytes_GET_SIZE(k), end = -1, zeros = 0;
        for (Py_ssize_t j = 0; j + 1 < klen; j++) {
            if (kb[j] == 0) {
                if (kb[j + 1] == 0) {
                    end = j;
                    break;
                }
                zeros += (unsigned char)kb[j + 1] == 0xFF;
            }
        }
        if (end < 0 || klen - end - 2 != slen || memcmp(kb + end + 2, suffix, (size_t)slen))
            goto none;
        PyObject *row = PyBytes_FromStringAndSize(NULL, end - zeros);
        if (!row) goto fail;
        char *out = PyBytes_AS_STRING(row);
        for (Py_ssize_t j = 0, o = 0; j < end; j++) {
            out[o++] = kb[j];
            if (kb[j] == 0 && (unsigned char)kb[j + 1] == 0xFF) j++; /* the FF is the escape */
        }
        PyList_SET_ITEM(rows, i, row);
        Py_INCREF(v);
        PyList_SET_ITEM(values, i, v);
    }
    PyObject *result = PyTuple_Pack(2, rows, values);
    Py_DECREF(rows);
    Py_DECREF(values);
    return result;
none:
    Py_DECREF(rows);
    Py_DECREF(values);
    Py_INCREF(Py_None);
    return Py_None;
fail:
    Py_XDECREF(rows);
    Py_XDECREF(values);
    return NULL;
}

static PyMethodDef methods[] = {
    {"packed_rows", packed_rows, METH_VARARGS,
     "(key, value) pairs of packed entries -> (their rows unescaped, their values), or None"},
    {"points", points, METH_VARARGS,
     "Packed-row values -> (counts, qualifier lengths, value lengths, offsets_ms, doubles, "
     "ints, is_int), (indices, frames, sizes) to decompress first, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_points", NULL, -1, methods};

PyMODINIT_FUNC PyInit__points(void) { return PyModule_Create(&module); }
