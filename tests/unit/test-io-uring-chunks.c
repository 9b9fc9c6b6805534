/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring fixed buffers: cutting guest RAM into chunks, finding them
 */

#include "qemu/osdep.h"
#include "qemu/units.h"
#include "qemu/bitmap.h"
#include "block/io_uring-fixed.h"

#define BASE (0x7f0000000000ull)   /* 1 GiB aligned */

static void test_count(void)
{
    g_assert_cmpuint(uring_chunk_count(BASE, 0), ==, 0);
    g_assert_cmpuint(uring_chunk_count(BASE, 1), ==, 1);
    g_assert_cmpuint(uring_chunk_count(BASE, GiB), ==, 1);
    g_assert_cmpuint(uring_chunk_count(BASE, GiB + 1), ==, 2);
    g_assert_cmpuint(uring_chunk_count(BASE + GiB - 4096, 4096), ==, 1);
    g_assert_cmpuint(uring_chunk_count(BASE + GiB - 4096, 8192), ==, 2);
    /* 1 GiB that is not aligned takes two chunks */
    g_assert_cmpuint(uring_chunk_count(BASE + 2 * MiB, GiB), ==, 2);
    g_assert_cmpuint(uring_chunk_count(BASE + 2 * MiB, 3 * GiB + 4096), ==, 4);
}

static void test_split(void)
{
    UringChunk c[8];
    size_t n, i;
    uint64_t end;

    /* 3.5 GiB starting 256 MiB into a 1 GiB window */
    n = uring_chunk_split(BASE + 256 * MiB, 3 * GiB + 512 * MiB, c, 8);
    g_assert_cmpuint(n, ==, 4);
    g_assert_cmpuint(c[0].start, ==, BASE + 256 * MiB);
    g_assert_cmpuint(c[0].len, ==, 768 * MiB);
    for (i = 1; i < n; i++) {
        g_assert_cmpuint(c[i].start, ==, c[i - 1].start + c[i - 1].len);
        g_assert_cmpuint(c[i].start % GiB, ==, 0);
        g_assert_cmpuint(c[i].len, <=, GiB);
    }
    end = c[n - 1].start + c[n - 1].len;
    g_assert_cmpuint(end, ==, BASE + 256 * MiB + 3 * GiB + 512 * MiB);
    g_assert_cmpuint(c[3].len, ==, 768 * MiB);

    /* Never more than asked for */
    g_assert_cmpuint(uring_chunk_split(BASE, 4 * GiB, c, 2), ==, 2);
    g_assert_cmpuint(c[1].start, ==, BASE + GiB);
    g_assert_cmpuint(uring_chunk_split(BASE, 0, c, 8), ==, 0);
}

/* Two adjacent chunks, a gap, and one more */
static UringChunkTable *make_table(void)
{
    UringChunkTable *t = g_malloc0(sizeof(*t) + 3 * sizeof(UringChunk));

    t->nr = 3;
    t->chunks[0] = (UringChunk) { .start = BASE + GiB - 64 * MiB,
                                  .len = 64 * MiB, .slot = 4, .pinned = true };
    t->chunks[1] = (UringChunk) { .start = BASE + GiB, .len = 192 * MiB,
                                  .slot = 5, .pinned = true };
    t->chunks[2] = (UringChunk) { .start = BASE + 4 * GiB, .len = 2 * MiB,
                                  .slot = 0, .pinned = true };
    return t;
}

static void test_find(void)
{
    g_autofree UringChunkTable *t = make_table();

    g_assert_null(uring_chunk_find(NULL, BASE));
    g_assert_null(uring_chunk_find(t, 0));
    g_assert_null(uring_chunk_find(t, BASE + GiB - 64 * MiB - 1));
    g_assert_true(uring_chunk_find(t, BASE + GiB - 64 * MiB) == &t->chunks[0]);
    g_assert_true(uring_chunk_find(t, BASE + GiB - 1) == &t->chunks[0]);
    g_assert_true(uring_chunk_find(t, BASE + GiB) == &t->chunks[1]);
    g_assert_true(uring_chunk_find(t, BASE + GiB + 192 * MiB - 1) ==
                  &t->chunks[1]);
    g_assert_null(uring_chunk_find(t, BASE + GiB + 192 * MiB));   /* gap */
    g_assert_true(uring_chunk_find(t, BASE + 4 * GiB + 4096) == &t->chunks[2]);
    g_assert_null(uring_chunk_find(t, BASE + 4 * GiB + 2 * MiB));
    g_assert_null(uring_chunk_find(t, UINTPTR_MAX));
}

static void *at(uint64_t addr)
{
    return (void *)(uintptr_t)addr;
}

static void test_for_iov(void)
{
    g_autofree UringChunkTable *t = make_table();
    IoUringFallbackReason why = IO_URING_FALLBACK_REASON__MAX;
    uint64_t end0 = BASE + GiB;
    struct iovec iov[3];

    /* Ends exactly on the chunk's end */
    iov[0] = (struct iovec) { at(end0 - 8192), 8192 };
    g_assert_true(uring_chunk_for_iov(t, iov, 1, &why) == &t->chunks[0]);

    /* One byte more crosses into the next chunk */
    iov[0].iov_len = 8193;
    g_assert_null(uring_chunk_for_iov(t, iov, 1, &why));
    g_assert_cmpint(why, ==, IO_URING_FALLBACK_REASON_CROSSES_CHUNK);

    /* Segments on both sides of a chunk boundary */
    iov[0] = (struct iovec) { at(end0 - 4096), 4096 };
    iov[1] = (struct iovec) { at(end0), 4096 };
    g_assert_null(uring_chunk_for_iov(t, iov, 2, &why));
    g_assert_cmpint(why, ==, IO_URING_FALLBACK_REASON_CROSSES_CHUNK);

    /* Several segments in one chunk, in any order */
    iov[0] = (struct iovec) { at(end0 + 8192), 512 };
    iov[1] = (struct iovec) { at(end0), 4096 };
    iov[2] = (struct iovec) { at(end0 + 192 * MiB - 512), 512 };
    g_assert_true(uring_chunk_for_iov(t, iov, 3, &why) == &t->chunks[1]);

    /* Running off the end of a chunk into nothing */
    iov[0] = (struct iovec) { at(end0 + 192 * MiB - 512), 1024 };
    g_assert_null(uring_chunk_for_iov(t, iov, 1, &why));
    g_assert_cmpint(why, ==, IO_URING_FALLBACK_REASON_UNREGISTERED);

    /* Memory nobody registered */
    iov[0] = (struct iovec) { at(BASE), 4096 };
    g_assert_null(uring_chunk_for_iov(t, iov, 1, &why));
    g_assert_cmpint(why, ==, IO_URING_FALLBACK_REASON_UNREGISTERED);
    g_assert_null(uring_chunk_for_iov(NULL, iov, 1, &why));
    g_assert_cmpint(why, ==, IO_URING_FALLBACK_REASON_UNREGISTERED);

    /* Zero-length entries do not count, wherever they point */
    iov[0] = (struct iovec) { at(BASE), 0 };
    iov[1] = (struct iovec) { at(BASE + 4 * GiB), 2 * MiB };
    iov[2] = (struct iovec) { NULL, 0 };
    g_assert_true(uring_chunk_for_iov(t, iov, 3, &why) == &t->chunks[2]);

    /* ... and nothing to transfer is nothing to register */
    iov[1].iov_len = 0;
    g_assert_null(uring_chunk_for_iov(t, iov, 3, &why));
    g_assert_cmpint(why, ==, IO_URING_FALLBACK_REASON_UNREGISTERED);
}

/*
 * Cutting a request by chunk: each call takes the run of @iov, from @skip
 * on, that one chunk holds; the runs of a request cover it exactly.
 */
static void test_prefix(void)
{
    g_autofree UringChunkTable *t = make_table();
    uint64_t end0 = BASE + GiB;
    struct iovec iov[4];
    size_t bytes = 1;

    /* One piece across the boundary of two adjacent chunks: two runs */
    iov[0] = (struct iovec) { at(end0 - 4096), 3 * 4096 };
    g_assert_true(uring_chunk_prefix(t, iov, 1, 0, &bytes) == &t->chunks[0]);
    g_assert_cmpuint(bytes, ==, 4096);
    g_assert_true(uring_chunk_prefix(t, iov, 1, 4096, &bytes) ==
                  &t->chunks[1]);
    g_assert_cmpuint(bytes, ==, 2 * 4096);

    /* Pieces in the same chunk make one run; the next chunk ends it */
    iov[0] = (struct iovec) { at(end0 - 3 * 4096), 4096 };
    iov[1] = (struct iovec) { at(end0 - 64 * MiB), 4096 };
    iov[2] = (struct iovec) { at(end0 + 4096), 4096 };
    iov[3] = (struct iovec) { at(end0 - 4096), 4096 };
    g_assert_true(uring_chunk_prefix(t, iov, 4, 0, &bytes) == &t->chunks[0]);
    g_assert_cmpuint(bytes, ==, 2 * 4096);
    g_assert_true(uring_chunk_prefix(t, iov + 2, 2, 0, &bytes) ==
                  &t->chunks[1]);
    g_assert_cmpuint(bytes, ==, 4096);
    g_assert_true(uring_chunk_prefix(t, iov + 3, 1, 0, &bytes) ==
                  &t->chunks[0]);
    g_assert_cmpuint(bytes, ==, 4096);

    /* A run stops where a piece runs off its chunk, that part included */
    iov[0] = (struct iovec) { at(end0 + 4096), 4096 };
    iov[1] = (struct iovec) { at(end0 + 192 * MiB - 512), 1024 };
    g_assert_true(uring_chunk_prefix(t, iov, 2, 0, &bytes) == &t->chunks[1]);
    g_assert_cmpuint(bytes, ==, 4096 + 512);
    /* ... and what follows is in no chunk */
    g_assert_null(uring_chunk_prefix(t, iov + 1, 1, 512, &bytes));
    g_assert_cmpuint(bytes, ==, 0);

    /* Empty entries are skipped; nothing left is no chunk */
    iov[0] = (struct iovec) { at(BASE), 0 };
    iov[1] = (struct iovec) { at(BASE + 4 * GiB), 4096 };
    g_assert_true(uring_chunk_prefix(t, iov, 2, 0, &bytes) == &t->chunks[2]);
    g_assert_cmpuint(bytes, ==, 4096);
    g_assert_null(uring_chunk_prefix(t, iov + 1, 1, 4096, &bytes));
    g_assert_cmpuint(bytes, ==, 0);
}

/*
 * Chunks along hugepages: a chunk is all hugepages or all small pages,
 * and never crosses a 1 GiB boundary
 */
static void test_split_runs(void)
{
    const size_t unit = 2 * MiB;
    unsigned long *huge = bitmap_new(2 * GiB / unit);
    UringChunk c[8];
    size_t n;

    /* All hugepages: the 1 GiB cuts only */
    bitmap_set(huge, 0, 2 * GiB / unit);
    n = uring_chunk_split_runs(BASE, 2 * GiB, huge, unit, c, 8);
    g_assert_cmpuint(n, ==, 2);
    g_assert(c[0].huge && c[1].huge);
    g_assert_cmpuint(c[1].start, ==, BASE + GiB);

    /* One small piece at 6 MiB: before, it, after */
    clear_bit(3, huge);
    n = uring_chunk_split_runs(BASE, GiB, huge, unit, c, 8);
    g_assert_cmpuint(n, ==, 3);
    g_assert(c[0].huge && !c[1].huge && c[2].huge);
    g_assert_cmpuint(c[0].len, ==, 6 * MiB);
    g_assert_cmpuint(c[1].start, ==, BASE + 6 * MiB);
    g_assert_cmpuint(c[1].len, ==, unit);
    g_assert_cmpuint(c[2].start, ==, BASE + 8 * MiB);
    g_assert_cmpuint(c[2].start + c[2].len, ==, BASE + GiB);

    /*
     * A range that starts inside a piece and ends inside another: the
     * bitmap starts at the piece that holds the start (4 MiB, huge; then
     * 6 MiB, small)
     */
    bitmap_zero(huge, 2 * GiB / unit);
    set_bit(0, huge);
    n = uring_chunk_split_runs(BASE + 5 * MiB, 2 * MiB, huge, unit, c, 8);
    g_assert_cmpuint(n, ==, 2);
    g_assert(c[0].huge && !c[1].huge);
    g_assert_cmpuint(c[0].start, ==, BASE + 5 * MiB);
    g_assert_cmpuint(c[0].len, ==, MiB);
    g_assert_cmpuint(c[1].len, ==, MiB);

    /* Alternating: counted in full, only @max stored */
    bitmap_zero(huge, 2 * GiB / unit);
    bitmap_set(huge, 0, 1);
    bitmap_set(huge, 2, 1);
    bitmap_set(huge, 4, 1);
    n = uring_chunk_split_runs(BASE, 10 * MiB, huge, unit, c, 2);
    g_assert_cmpuint(n, ==, 5);
    g_assert(c[0].huge && !c[1].huge);
    g_assert_cmpuint(uring_chunk_split_runs(BASE, 10 * MiB, huge, unit,
                                            NULL, 0), ==, 5);
    g_free(huge);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/io-uring-chunks/count", test_count);
    g_test_add_func("/io-uring-chunks/split", test_split);
    g_test_add_func("/io-uring-chunks/split-runs", test_split_runs);
    g_test_add_func("/io-uring-chunks/find", test_find);
    g_test_add_func("/io-uring-chunks/for-iov", test_for_iov);
    g_test_add_func("/io-uring-chunks/prefix", test_prefix);
    return g_test_run();
}
