/* Compacted cells -> the fields of their packed fast form, at compiled speed
 * (tsd.storage.embedded.packed).
 *
 * Why: the in-memory head writes every row out as one compacted cell, and packing it
 * (packed._fast_fields: some thirty numpy calls, a decimal search over up to sixteen
 * exponents for float cells) cost 0.2-0.5 ms a row, most of the write-out. This computes
 * the same fields for many cells in one call, a few microseconds each.
 *
 * fast_fields(cells): cells is a list of (qualifier, value) pairs. Answers a list of
 * the same length holding, per cell, either
 *   (mode, points, first offset, smallest step, flags byte, decimals, offset bits,
 *    value bits, meta byte, base, low, payload)
 * exactly what packed._fast_fields gives (mode without the zstd bit: the caller compresses
 * the payload and writes the header), or None: "not taken here", the caller then runs the
 * numpy path, which gives the exact answer for every cell (what is taken: two or more
 * points, all seconds or all millisecond qualifiers that round-trip, values of 1, 2, 4 or
 * 8 bytes, all integers below 2**61 or all floats on 4 or 8 bytes with a decimal form;
 * everything else, raw values included, is left to numpy).
 * tests/storage/test_embedded_packed.py checks both paths against each other.
 *
 * Built with -ffp-contract=off: the decimal check must round exactly as numpy does (one
 * IEEE multiply, one rint, one divide), never as a fused multiply-add.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define M_MS 0x01
#define M_ONE_FLAGS 0x02
#define M_TAIL 0x08
#define M_FOR 0x10
#define M_CANON 0x80
#define VMODE_SHIFT 5
#define V_INT 0
#define V_DEC 1
#define MAX_DECIMALS 15
#define MAX_POINTS 0xFFFF
#define INT_LIMIT ((int64_t)1 << 61)
#define TWO52 4503599627370496.0

static const double POW10[MAX_DECIMALS + 1] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                               1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

static int bit_length(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

/* packed._pack_bits: values (each below 2**bits) in `bits` bits each, little-endian bit
 * order, into `out` (zeroed, (count * bits + 7) / 8 bytes). */
static void pack_bits(const uint64_t *column, Py_ssize_t count, int bits, unsigned char *out) {
    unsigned __int128 acc = 0;
    int held = 0;
    Py_ssize_t at = 0;
    if (!bits) return;
    for (Py_ssize_t i = 0; i < count; i++) {
        acc |= (unsigned __int128)column[i] << held;
        held += bits;
        while (held >= 8) {
            out[at++] = (unsigned char)acc;
            acc >>= 8;
            held -= 8;
        }
    }
    if (held > 0) out[at] = (unsigned char)acc;
}

static uint64_t read_be(const unsigned char *p, int width) {
    uint64_t x = 0;
    for (int i = 0; i < width; i++) x = (x << 8) | p[i];
    return x;
}

/* Scratch arrays of one cell. */
typedef struct {
    Py_ssize_t room;
    int64_t *offsets, *ints;
    uint64_t *column;
    double *doubles;
    uint64_t *bits;
    unsigned char *flags;
} Scratch;

static void scratch_free(Scratch *s) {
    PyMem_Free(s->offsets);
    PyMem_Free(s->ints);
    PyMem_Free(s->column);
    PyMem_Free(s->doubles);
    PyMem_Free(s->bits);
    PyMem_Free(s->flags);
}

static int scratch_fit(Scratch *s, Py_ssize_t n) {
    if (n <= s->room) return 0;
    scratch_free(s);
    s->offsets = PyMem_Malloc(n * sizeof(int64_t));
    s->ints = PyMem_Malloc(n * sizeof(int64_t));
    s->column = PyMem_Malloc(n * sizeof(uint64_t));
    s->doubles = PyMem_Malloc(n * sizeof(double));
    s->bits = PyMem_Malloc(n * sizeof(uint64_t));
    s->flags = PyMem_Malloc(n);
    s->room = n;
    if (!s->offsets || !s->ints || !s->column || !s->doubles || !s->bits || !s->flags) {
        s->room = 0;
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* packed._canonical_flags of point i */
static unsigned canonical_flag(int v_dec, int64_t value, double decimal) {
    if (v_dec) return (double)(float)decimal == decimal ? 0xB : 0xF;
    if (value >= -0x80 && value <= 0x7F) return 0;
    if (value >= -0x8000 && value <= 0x7FFF) return 1;
    if (value >= -((int64_t)1 << 31) && value < ((int64_t)1 << 31)) return 3;
    return 7;
}

/* The fields of one cell, Py_None when not taken here, NULL on an error. */
static PyObject *fields(const unsigned char *q, Py_ssize_t qlen, const unsigned char *v,
                        Py_ssize_t vlen, Scratch *s) {
    unsigned mode = 0;
    Py_ssize_t n;
    if (qlen < 4 || qlen % 2) Py_RETURN_NONE;
    int ms = (q[0] & 0xF0) == 0xF0;
    if (ms) {
        if (qlen % 4) Py_RETURN_NONE;
        n = qlen / 4;
        mode |= M_MS;
    } else {
        n = qlen / 2;
    }
    if (n < 2 || n > MAX_POINTS) Py_RETURN_NONE;
    if (scratch_fit(s, n) < 0) return NULL;
    int64_t *offsets = s->offsets, *ints = s->ints;
    unsigned char *flags = s->flags;
    Py_ssize_t total = 0;
    int any_float = 0, all_float = 1, one_flags = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned flag;
        if (ms) {
            uint32_t raw = (uint32_t)read_be(q + 4 * i, 4);
            if ((raw & 0xF0000030u) != 0xF0000000u) Py_RETURN_NONE; /* does not round-trip */
            offsets[i] = (raw >> 6) & 0x3FFFFF;
            flag = raw & 0xF;
        } else {
            unsigned raw = (unsigned)read_be(q + 2 * i, 2);
            if (raw >= 0xF000) Py_RETURN_NONE; /* seconds and milliseconds mixed */
            offsets[i] = raw >> 4;
            flag = raw & 0xF;
        }
        flags[i] = (unsigned char)flag;
        int width = (flag & 7) + 1;
        if (width != 1 && width != 2 && width != 4 && width != 8) Py_RETURN_NONE;
        if (flag & 8) {
            any_float = 1;
            if (width < 4) Py_RETURN_NONE;
        } else {
            all_float = 0;
        }
        if (flag != flags[0]) one_flags = 0;
        total += width;
    }
    Py_ssize_t tail = vlen - total;
    if (tail != 0 && tail != 1) Py_RETURN_NONE;
    if (any_float && !all_float) Py_RETURN_NONE;

    /* offsets: the smallest step, the steps above it */
    int64_t step = offsets[1] - offsets[0];
    for (Py_ssize_t i = 2; i < n; i++)
        if (offsets[i] - offsets[i - 1] < step) step = offsets[i] - offsets[i - 1];
    uint64_t top = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        s->column[i - 1] = (uint64_t)(offsets[i] - offsets[i - 1] - step);
        if (s->column[i - 1] > top) top = s->column[i - 1];
    }
    int tbits = bit_length(top);
    Py_ssize_t obytes = ((n - 1) * tbits + 7) / 8;

    /* values */
    int vmode = V_INT, k = 0;
    const unsigned char *p = v;
    if (!any_float) {
        for (Py_ssize_t i = 0; i < n; i++) {
            int width = (flags[i] & 7) + 1;
            uint64_t raw = read_be(p, width);
            p += width;
            int shift = 64 - 8 * width;
            int64_t x = shift ? (int64_t)(raw << shift) >> shift : (int64_t)raw;
            if (x >= INT_LIMIT || x <= -INT_LIMIT) Py_RETURN_NONE;
            ints[i] = x;
        }
    } else {
        double *doubles = s->doubles;
        uint64_t *bits = s->bits;
        for (Py_ssize_t i = 0; i < n; i++) {
            int width = (flags[i] & 7) + 1;
            uint64_t raw = read_be(p, width);
            p += width;
            bits[i] = raw;
            if (width == 4) {
                uint32_t b32 = (uint32_t)raw;
                float f;
                memcpy(&f, &b32, 4);
                doubles[i] = (double)f;
            } else {
                memcpy(&doubles[i], &raw, 8);
            }
            if (!isfinite(doubles[i]) || fabs(doubles[i]) >= TWO52) Py_RETURN_NONE;
        }
        int found = 0;
        for (k = 0; k <= MAX_DECIMALS && !found; k++) {
            double scale = POW10[k];
            for (Py_ssize_t i = 0; i < n; i++) {
                double m = nearbyint(doubles[i] * scale);
                if (fabs(m) >= TWO52) Py_RETURN_NONE;
                ints[i] = (int64_t)m;
            }
            found = 1;
            for (Py_ssize_t i = 0; i < n && found; i++) {
                double back = (double)ints[i] / scale;
                if ((flags[i] & 7) == 3) {
                    float f = (float)back;
                    uint32_t b32;
                    memcpy(&b32, &f, 4);
                    found = b32 == (uint32_t)bits[i];
                } else {
                    uint64_t b64;
                    memcpy(&b64, &back, 8);
                    found = b64 == bits[i];
                }
            }
        }
        if (!found) Py_RETURN_NONE;
        k -= 1;
        vmode = V_DEC;
    }

    /* flags: one byte for all, OpenTSDB's for the values, or a column */
    int flags_column = 0;
    if (one_flags) {
        mode |= M_ONE_FLAGS;
    } else {
        int canonical = 1;
        double scale = POW10[k];
        for (Py_ssize_t i = 0; i < n && canonical; i++)
            canonical = canonical_flag(vmode == V_DEC, ints[i], (double)ints[i] / scale) ==
                        flags[i];
        if (canonical)
            mode |= M_CANON;
        else
            flags_column = 1;
    }

    /* the value column: values above their minimum, or deltas above theirs */
    int64_t low = ints[1] - ints[0], high = low, vmin = ints[0], vmax = ints[0];
    for (Py_ssize_t i = 1; i < n; i++) {
        int64_t d = ints[i] - ints[i - 1];
        if (d < low) low = d;
        if (d > high) high = d;
        if (ints[i] < vmin) vmin = ints[i];
        if (ints[i] > vmax) vmax = ints[i];
    }
    int delta_bits = bit_length((uint64_t)high - (uint64_t)low);
    int value_bits = bit_length((uint64_t)vmax - (uint64_t)vmin);
    int64_t base;
    int vbits;
    Py_ssize_t m;
    if ((int64_t)value_bits * n <= (int64_t)delta_bits * (n - 1) + 16) {
        mode |= M_FOR;
        base = vmin;
        low = 0;
        vbits = value_bits;
        m = n;
    } else {
        base = ints[0];
        vbits = delta_bits;
        m = n - 1;
    }
    if (tail) mode |= M_TAIL;
    mode |= (unsigned)vmode << VMODE_SHIFT;

    Py_ssize_t vbytes = (m * vbits + 7) / 8;
    Py_ssize_t size = obytes + (flags_column ? n : 0) + vbytes;
    PyObject *payload = PyBytes_FromStringAndSize(NULL, size);
    if (!payload) return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(payload);
    memset(out, 0, size);
    pack_bits(s->column, n - 1, tbits, out);
    out += obytes;
    if (flags_column) {
        memcpy(out, flags, n);
        out += n;
    }
    if (mode & M_FOR) {
        for (Py_ssize_t i = 0; i < n; i++) s->column[i] = (uint64_t)ints[i] - (uint64_t)vmin;
    } else {
        for (Py_ssize_t i = 1; i < n; i++)
            s->column[i - 1] = (uint64_t)(ints[i] - ints[i - 1]) - (uint64_t)low;
    }
    pack_bits(s->column, m, vbits, out);
    return Py_BuildValue("(InLLIiiiILLN)", mode, n, (long long)offsets[0], (long long)step,
                         one_flags ? (unsigned)flags[0] : 0u, k, tbits, vbits,
                         tail ? (unsigned)v[vlen - 1] : 0u, (long long)base, (long long)low,
                         payload);
}

static PyObject *fast_fields(PyObject *self, PyObject *cells) {
    if (!PyList_Check(cells)) {
        PyErr_SetString(PyExc_TypeError, "fast_fields takes a list of (qualifier, value)");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(cells);
    PyObject *result = PyList_New(count);
    if (!result) return NULL;
    Scratch scratch = {0};
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PyList_GET_ITEM(cells, i);
        PyObject *q, *v;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "fast_fields takes a list of (qualifier, value)");
            goto fail;
        }
        q = PyTuple_GET_ITEM(pair, 0);
        v = PyTuple_GET_ITEM(pair, 1);
        if (!PyBytes_Check(q) || !PyBytes_Check(v)) { /* another buffer: numpy's */
            Py_INCREF(Py_None);
            PyList_SET_ITEM(result, i, Py_None);
            continue;
        }
        PyObject *found =
            fields((const unsigned char *)PyBytes_AS_STRING(q), PyBytes_GET_SIZE(q),
                   (const unsigned char *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), &scratch);
        if (!found) goto fail;
        PyList_SET_ITEM(result, i, found);
    }
    scratch_free(&scratch);
    return result;
fail:
    scratch_free(&scratch);
    Py_DECREF(result);
    return NULL;
}

static PyMethodDef methods[] = {
    {"fast_fields", fast_fields, METH_O,
     "(qualifier, value) cells -> per cell the fields of its packed fast form, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pack", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pack(void) { return PyModule_Create(&module); }
