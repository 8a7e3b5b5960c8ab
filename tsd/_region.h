/* Mapped regions: the growable arrays of the compiled tables (tsd/protocol/_keytable.h's
 * KeyTable, tsd/uid/_table.c's UidTable) as anonymous mappings of their own, not the C heap.
 * Growing a table of millions of entries (mremap) leaves no freed blocks behind in the heap
 * (the daemon keeps freed heap memory for queries: tsd.query.keep_freed_bytes), and the
 * unused tail of an array is never touched, so never resident. Elsewhere than Linux: the C
 * heap, zeroed as a mapping is. */

#ifndef TSD_REGION_H
#define TSD_REGION_H

#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#define REGION_MMAP 1
#endif

/* A region this large is asked to be backed by huge pages (where the kernel's transparent
 * huge pages are on "madvise"): a lookup in a table of a million keys touches three
 * random places (index slot, entry, key bytes), and with 4 KiB pages each is a TLB miss
 * as well as a cache miss. Below it, the unused tail of a small table stays unmapped. */
#define REGION_HUGE_BYTES ((size_t)4 << 20)

static inline void region_huge(void *p, size_t size)
{
#if defined(REGION_MMAP) && defined(MADV_HUGEPAGE)
    if (p != NULL && size >= REGION_HUGE_BYTES)
        (void)madvise(p, size, MADV_HUGEPAGE); /* advice: refused or absent is harmless */
#else
    (void)p;
    (void)size;
#endif
}

static inline void *region_new(size_t size)
{
    if (size == 0)
        return NULL;
#ifdef REGION_MMAP
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    region_huge(p, size);
    return p;
#else
    return calloc(1, size);
#endif
}

static inline void region_free(void *p, size_t size)
{
    if (p == NULL)
        return;
#ifdef REGION_MMAP
    munmap(p, size);
#else
    (void)size;
    free(p);
#endif
}

static inline void *region_regrow(void *p, size_t old, size_t size)
{
    if (p == NULL)
        return region_new(size);
#ifdef REGION_MMAP
    void *q = mremap(p, old, size, MREMAP_MAYMOVE);
    if (q == MAP_FAILED)
        return NULL;
    region_huge(q, size);
    return q;
#else
    void *q = realloc(p, size);
    if (q != NULL && size > old)
        memset((char *)q + old, 0, size - old);
    return q;
#endif
}

static inline size_t region_page_round(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

#endif /* TSD_REGION_H */
