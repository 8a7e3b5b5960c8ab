/* The parts the compiled tables share (tsd/protocol/_keytable.h's KeyTable, tsd/uid/_table.c's
 * UidTable): an open-addressing index of entry numbers and an arena of key bytes, both in
 * mapped regions (tsd/_region.h). A table keeps its own entries (each with its key's hash,
 * and its bytes' offset in the arena) and says how a key matches one.
 *
 * The index: linear probing over a power-of-two count of 4-byte slots (0: empty, HI_TOMB: a
 * removed entry's, else the entry's number + 1), at most 70% full with the tombstones,
 * rebuilt at most half full. The arena: bytes appended, offsets handed out; a table that
 * drops entries repacks it once the dead bytes outweigh the live ones. */

#ifndef TSD_HASHINDEX_H
#define TSD_HASHINDEX_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_region.h"

#define HI_TOMB UINT32_MAX

typedef struct {
    uint32_t *slots;
    size_t cap, fill; /* slots, slots ever used (entries and tombstones) */
} HashIndex;

/* The first slot of hash's probe sequence, and the one after i. */
static inline size_t hi_first(const HashIndex *ix, uint32_t hash)
{
    return hash & (ix->cap - 1);
}

static inline size_t hi_next(const HashIndex *ix, size_t i)
{
    return (i + 1) & (ix->cap - 1);
}

/* Entry ``entry`` indexed under hash (its key not indexed yet). */
static inline void hi_put(HashIndex *ix, uint32_t hash, size_t entry)
{
    size_t i = hi_first(ix, hash);
    while (ix->slots[i] != 0 && ix->slots[i] != HI_TOMB)
        i = hi_next(ix, i);
    if (ix->slots[i] == 0)
        ix->fill++;
    ix->slots[i] = (uint32_t)(entry + 1);
}

/* Whether one more entry would pass 70% full: time to rebuild. */
static inline int hi_full(const HashIndex *ix)
{
    return (ix->fill + 1) * 10 > ix->cap * 7;
}

/* Emptied, at a capacity for ``want`` entries at most half full (MemoryError: -1). */
static inline int hi_renew(HashIndex *ix, size_t want)
{
    size_t cap = 16;
    while (cap * 5 < (want + 1) * 10)
        cap <<= 1;
    if (cap != ix->cap) {
        uint32_t *slots = region_new(cap * sizeof(uint32_t));
        if (slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        region_free(ix->slots, ix->cap * sizeof(uint32_t));
        ix->slots = slots;
        ix->cap = cap;
    } else {
        memset(ix->slots, 0, cap * sizeof(uint32_t));
    }
    ix->fill = 0;
    return 0;
}

static inline void hi_release(HashIndex *ix)
{
    region_free(ix->slots, ix->cap * sizeof(uint32_t));
    ix->slots = NULL;
    ix->cap = ix->fill = 0;
}

typedef struct {
    char *bytes;
    size_t used, cap;
} ByteArena;

/* s[:n] appended at *off; the arena's first region is ``first`` bytes (-1 with
 * MemoryError, or OverflowError past ``limit`` bytes). */
static inline int arena_add(ByteArena *a, const char *s, size_t n, size_t first, size_t limit,
                            uint64_t *off)
{
    if (a->used + n > a->cap) {
        size_t cap = a->cap ? a->cap : first;
        while (a->used + n > cap)
            cap *= 2;
        if (cap > limit) {
            PyErr_SetString(PyExc_OverflowError, "a table's key bytes passed their limit");
            return -1;
        }
        char *bytes = region_regrow(a->bytes, a->cap, cap);
        if (bytes == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->bytes = bytes;
        a->cap = cap;
    }
    if (n > 0)
        memcpy(a->bytes + a->used, s, n);
    *off = a->used;
    a->used += n;
    return 0;
}

/* Whether the arena holds more than twice ``live`` bytes (and 64 KiB more): worth repacking. */
static inline int arena_wasteful(const ByteArena *a, size_t live)
{
    return a->used > 2 * live + 65536;
}

/* A fresh arena for ``live`` bytes and room (``arena_take`` fills it, ``arena_swap`` puts
 * it in place of the old one). */
static inline int arena_fresh(ByteArena *fresh, size_t live)
{
    fresh->cap = region_page_round(live + live / 4 + 4096);
    fresh->used = 0;
    fresh->bytes = region_new(fresh->cap);
    if (fresh->bytes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Bytes [off, off + n) of ``from`` copied to the end of ``to`` (room made by arena_fresh):
 * their offset there. */
static inline uint64_t arena_take(ByteArena *to, const ByteArena *from, uint64_t off, size_t n)
{
    uint64_t at = to->used;
    memcpy(to->bytes + at, from->bytes + off, n);
    to->used += n;
    return at;
}

static inline void arena_swap(ByteArena *a, ByteArena *fresh)
{
    region_free(a->bytes, a->cap);
    *a = *fresh;
}

static inline void arena_release(ByteArena *a)
{
    region_free(a->bytes, a->cap);
    a->bytes = NULL;
    a->used = a->cap = 0;
}

/* Room for entry n of ``stride`` bytes in *entries (grown to twice, the first time
 * ``first``), -1 with MemoryError. */
static inline int entries_grow(void **entries, size_t *cap, size_t stride, size_t first)
{
    size_t grown = *cap ? *cap * 2 : first;
    void *more = region_regrow(*entries, *cap * stride, grown * stride);
    if (more == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *entries = more;
    *cap = grown;
    return 0;
}

#endif /* TSD_HASHINDEX_H */
