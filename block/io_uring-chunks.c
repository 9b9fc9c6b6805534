/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring fixed buffers: cutting guest RAM into chunks and finding them
 *
 * Pure functions, no io_uring here, so that they can be unit tested.
 */

#include "qemu/osdep.h"
#include "qemu/bitops.h"
#include "block/io_uring-fixed.h"

size_t uring_chunk_count(uintptr_t start, size_t len)
{
    uint64_t first, last;

    if (len == 0) {
        return 0;
    }
    first = QEMU_ALIGN_DOWN((uint64_t)start, URING_CHUNK_MAX);
    last = QEMU_ALIGN_DOWN((uint64_t)start + len - 1, URING_CHUNK_MAX);
    return (last - first) / URING_CHUNK_MAX + 1;
}

/*
 * Cut [start, start + len) at every 1 GiB-aligned address.  A hugepage
 * (2 MiB or 1 GiB) is naturally aligned, so no chunk ever splits one and
 * the kernel can describe each chunk with one bvec per hugepage.
 */
size_t uring_chunk_split(uintptr_t start, size_t len,
                         UringChunk *out, size_t max)
{
    uint64_t pos = start, end = (uint64_t)start + len;
    size_t n = 0;

    while (pos < end && n < max) {
        uint64_t next = QEMU_ALIGN_DOWN(pos, URING_CHUNK_MAX) + URING_CHUNK_MAX;

        out[n++] = (UringChunk) {
            .start = pos,
            .len = MIN(next, end) - pos,
        };
        pos = next;
    }
    return n;
}

/*
 * Like uring_chunk_split(), and cut also where the pages change between
 * hugepages and small ones: @huge has a bit for each @unit-sized,
 * @unit-aligned piece of memory from the one holding @start on, set where
 * the piece is one hugepage.  The kernel describes a registered buffer
 * with one bvec per hugepage only if all of it is on hugepages of one
 * size, else with one per small page (io_check_coalesce_buffer() in
 * Linux's io_uring/rsrc.c): one small page would cost the whole chunk.
 * Each chunk gets its huge flag.  Returns how many chunks there are; the
 * first @max are stored.
 */
size_t uring_chunk_split_runs(uintptr_t start, size_t len,
                              const unsigned long *huge, size_t unit,
                              UringChunk *out, size_t max)
{
    uint64_t base = QEMU_ALIGN_DOWN((uint64_t)start, unit);
    uint64_t pos = start, end = (uint64_t)start + len;
    size_t n = 0;

    while (pos < end) {
        uint64_t next = QEMU_ALIGN_DOWN(pos, URING_CHUNK_MAX) + URING_CHUNK_MAX;
        uint64_t i = (pos - base) / unit;
        bool h = test_bit(i, huge);

        next = MIN(next, end);
        /* Up to the first piece of the other kind */
        for (i++; base + i * unit < next && test_bit(i, huge) == h; i++) {
            /* same kind */
        }
        next = MIN(next, base + i * unit);
        if (n < max) {
            out[n] = (UringChunk) { .start = pos, .len = next - pos, .huge = h };
        }
        n++;
        pos = next;
    }
    return n;
}

/* The chunk holding @addr in a table sorted by start, or NULL */
const UringChunk *uring_chunk_find(const UringChunkTable *t, uintptr_t addr)
{
    unsigned lo = 0, hi = t ? t->nr : 0;

    /* Find the last chunk that starts at or before addr */
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;

        if (t->chunks[mid].start <= addr) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo == 0) {
        return NULL;
    }
    if (addr - t->chunks[lo - 1].start >= t->chunks[lo - 1].len) {
        return NULL;
    }
    return &t->chunks[lo - 1];
}

static bool chunk_holds(const UringChunk *c, const struct iovec *iov)
{
    uintptr_t base = (uintptr_t)iov->iov_base;

    return base >= c->start && base - c->start <= c->len &&
           iov->iov_len <= c->len - (base - c->start);
}

/*
 * The one chunk that holds every non-empty element of @iov, or NULL with
 * the reason in @why.
 */
const UringChunk *uring_chunk_for_iov(const UringChunkTable *t,
                                      const struct iovec *iov, int niov,
                                      IoUringFallbackReason *why)
{
    const UringChunk *c = NULL;
    int i;

    for (i = 0; i < niov; i++) {
        if (iov[i].iov_len == 0) {
            continue;
        }
        if (!c) {
            c = uring_chunk_find(t, (uintptr_t)iov[i].iov_base);
            if (!c) {
                *why = IO_URING_FALLBACK_REASON_UNREGISTERED;
                return NULL;
            }
        }
        if (!chunk_holds(c, &iov[i])) {
            uintptr_t base = (uintptr_t)iov[i].iov_base;
            uintptr_t last = base + iov[i].iov_len - 1;

            if (uring_chunk_find(t, base) && uring_chunk_find(t, last)) {
                *why = IO_URING_FALLBACK_REASON_CROSSES_CHUNK;
            } else {
                *why = IO_URING_FALLBACK_REASON_UNREGISTERED;
            }
            return NULL;
        }
    }
    if (!c) {
        *why = IO_URING_FALLBACK_REASON_UNREGISTERED; /* nothing to transfer */
    }
    return c;
}

/*
 * The chunk that holds the start of @iov, from byte @skip of iov[0] on,
 * and in @bytes how much of @iov from there it holds in one run: whole
 * elements, up to the first one that ends past the chunk (its part in
 * the chunk included) or begins outside it.  NULL, with @bytes 0, when
 * the start is in no chunk or nothing is left to transfer.
 */
const UringChunk *uring_chunk_prefix(const UringChunkTable *t,
                                     const struct iovec *iov, int niov,
                                     size_t skip, size_t *bytes)
{
    const UringChunk *c = NULL;
    size_t held = 0;
    int i;

    for (i = 0; i < niov; i++, skip = 0) {
        uintptr_t base = (uintptr_t)iov[i].iov_base + skip;
        size_t len = iov[i].iov_len - skip;
        size_t room;

        if (len == 0) {
            continue;
        }
        if (!c) {
            c = uring_chunk_find(t, base);
            if (!c) {
                break;
            }
        } else if (base < c->start || base - c->start >= c->len) {
            break;
        }
        room = c->len - (base - c->start);
        held += MIN(len, room);
        if (len > room) {
            break;
        }
    }
    *bytes = held;
    return held ? c : NULL;
}
