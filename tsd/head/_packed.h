/* A head row's packed part (tsd/head/pack.py: the format and its Python specification),
 * read: shared by the head's own helpers (tsd/head/_runs.c: unpack, full_rows) and the
 * query's reduction of head rows straight to their buckets (tsd/query/_decode.c's
 * head_buckets), so that one reading of the format serves both.
 *
 * Integers are LEB128 varints, signed ones zigzag-coded; values are held as uint64
 * (differences modulo 2**64). */
#ifndef TSD_HEAD_PACKED_H
#define TSD_HEAD_PACKED_H

#include <stdint.h>
#include <string.h>

typedef struct {
    int64_t q, dq;
    uint64_t v, dv;
} PackState;

static inline int64_t unzz(uint64_t z) { return (int64_t)(z >> 1) ^ -(int64_t)(z & 1); }

/* 1 and the varint at *at (moved past it), or 0 when the bytes end first */
static inline int get_varint(const unsigned char *p, Py_ssize_t end, Py_ssize_t *at,
                             uint64_t *x)
{
    uint64_t r = 0;
    for (int shift = 0; *at < end && shift < 64; shift += 7) {
        unsigned char b = p[(*at)++];
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *x = r;
            return 1;
        }
    }
    return 0;
}

/* the state at the front of a packed part (zeros when it is empty) and where its blocks
 * start; 0 when it is cut short */
static inline int read_state(const unsigned char *p, Py_ssize_t len, PackState *st,
                             Py_ssize_t *at)
{
    memset(st, 0, sizeof(*st));
    *at = 0;
    if (len == 0)
        return 1;
    uint64_t z[4];
    for (int i = 0; i < 4; i++)
        if (!get_varint(p, len, at, &z[i]))
            return 0;
    st->q = unzz(z[0]);
    st->dq = unzz(z[1]);
    st->v = (uint64_t)unzz(z[2]);
    st->dv = (uint64_t)unzz(z[3]);
    return 1;
}

/* The points of a packed part (python_unpack's walk, nothing copied): packed_open, then
 * packed_next until it answers 0 (the end) or -1 (not well formed); a block by
 * differences a point at a time, a raw block handed over whole. */
typedef struct {
    const unsigned char *p;
    Py_ssize_t len, at;
    PackState st;
    int mode;          /* the current block's: 0 / 1 by differences, 2 raw, -1 none */
    uint64_t left;     /* points left in the block (modes 0 and 1) */
    uint64_t run_left; /* points left in the current run */
    int64_t dd;        /* the run's ddQ */
    uint64_t x;        /* the run's ddV (mode 0) or dV (mode 1) */
    int wide;          /* the run's qualifiers are 4 bytes */
    const unsigned char *rq, *rv; /* a raw block's qualifiers and values */
    Py_ssize_t ql, vl;            /* their lengths */
} PackedCursor;

/* 1, or 0 when the packed part's state at its front is cut short */
static inline int packed_open(PackedCursor *c, const unsigned char *p, Py_ssize_t len)
{
    PackState ignored;
    c->p = p;
    c->len = len;
    c->mode = -1;
    c->run_left = c->left = 0;
    if (!read_state(p, len, &ignored, &c->at))
        return 0;
    memset(&c->st, 0, sizeof(c->st)); /* blocks are decoded from a state of zeros */
    return 1;
}

/* Whether the cursor stands at the start of a raw block (packed_next answered 2): its
 * qualifiers and values, for a caller that walks them itself and then calls
 * packed_skip_raw. 1 with them set, 0 when not at a raw block's start. */
static inline int packed_raw_block(PackedCursor *c, const unsigned char **q, Py_ssize_t *q_len,
                                   const unsigned char **v, Py_ssize_t *v_len, uint64_t *n)
{
    if (c->mode != 2)
        return 0;
    *q = c->rq;
    *q_len = c->ql;
    *v = c->rv;
    *v_len = c->vl;
    *n = c->left;
    return 1;
}

/* Past the raw block packed_raw_block handed over, whose `n` points (checked by the
 * caller, as packed_next checks them) ended with the qualifiers and values `q1`, `v1`
 * after `q0`, `v0` (the state before the block's when it held one point). */
static inline void packed_skip_raw(PackedCursor *c, int one, int64_t q0, uint64_t v0,
                                   int64_t q1, uint64_t v1)
{
    PackState *st = &c->st;
    if (one) {
        q0 = st->q;
        v0 = st->v;
    }
    st->dq = q1 - q0;
    st->q = q1;
    st->dv = v1 - v0;
    st->v = v1;
    c->mode = -1;
    c->left = 0;
}

/* The next point: its qualifier (2 or 4 bytes as an integer: a 4-byte one is
 * >= 0xF0000000), its value (the low (qualifier & 7) + 1 bytes, big-endian, as an
 * unsigned integer) and its qualifier's width in *wide; 1, 0 at the end, -1 when the
 * bytes are not well formed, 2 (no point handed on) at the start of a raw block, which
 * the caller walks itself (packed_raw_block, then packed_skip_raw: a raw block's points
 * are plain cells, read faster by a loop of their own than a point at a time here). */
static inline __attribute__((always_inline)) int
packed_next(PackedCursor *c, uint64_t *qual, uint64_t *value, int *wide)
{
    for (;;) {
        if (c->mode == 2) /* a raw block not walked past (packed_skip_raw) */
            return -1;
        if (c->run_left > 0) {
            c->run_left--;
            c->left--;
            PackState *st = &c->st;
            st->dq = (int64_t)((uint64_t)st->dq + (uint64_t)c->dd);
            st->q = (int64_t)((uint64_t)st->q + (uint64_t)st->dq);
            st->dv = c->mode == 0 ? st->dv + c->x : c->x;
            st->v += st->dv;
            int v_len = (int)((uint64_t)st->q & 7) + 1;
            *qual = (uint64_t)st->q;
            *value = v_len == 8 ? st->v : st->v & (((uint64_t)1 << (8 * v_len)) - 1);
            *wide = c->wide;
            return 1;
        }
        if (c->left > 0) { /* the block's next run */
            uint64_t run, z, ddq = 0;
            if (!get_varint(c->p, c->len, &c->at, &run))
                return -1;
            uint64_t count = run >> 2;
            if ((run & 1) && !get_varint(c->p, c->len, &c->at, &ddq))
                return -1;
            if (!get_varint(c->p, c->len, &c->at, &z) || count == 0 || count > c->left)
                return -1;
            c->wide = (int)(run >> 1 & 1);
            c->dd = (run & 1) ? unzz(ddq) : 0;
            c->x = (uint64_t)unzz(z);
            c->run_left = count;
            continue;
        }
        if (c->at >= c->len)
            return 0;
        uint64_t head;
        if (!get_varint(c->p, c->len, &c->at, &head))
            return -1;
        c->mode = (int)(head & 3);
        c->left = head >> 2;
        if (c->mode == 3)
            return -1;
        if (c->mode == 2) {
            uint64_t ql, vl;
            Py_ssize_t room;
            if (!get_varint(c->p, c->len, &c->at, &ql) || !get_varint(c->p, c->len, &c->at, &vl))
                return -1;
            room = c->len - c->at;
            if (ql > (uint64_t)room || vl > (uint64_t)room - ql)
                return -1;
            c->rq = c->p + c->at;
            c->rv = c->rq + ql;
            c->ql = (Py_ssize_t)ql;
            c->vl = (Py_ssize_t)vl;
            c->at += (Py_ssize_t)(ql + vl);
            if (ql > 0 || vl > 0 || c->left > 0)
                return 2;
            c->mode = -1; /* an empty raw block */
            continue;
        }
    }
}

#endif
