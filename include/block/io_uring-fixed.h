/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring fixed buffers over guest RAM
 *
 * Guest RAM that the block layer is told about (bdrv_register_buf()) is
 * kept in one process-wide registry, cut into chunks of at most 1 GiB at
 * 1 GiB-aligned host addresses.  Each chunk owns a slot in the fixed buffer
 * table of every AioContext's io_uring, so a request whose iovec lies in
 * one chunk can be submitted as READ_FIXED/WRITE_FIXED (or the vectored
 * variants) and the kernel skips pinning and mapping pages per request.
 */
#ifndef BLOCK_IO_URING_FIXED_H
#define BLOCK_IO_URING_FIXED_H

#include "block/aio.h"
#include "qapi/qapi-types-io-uring.h"

/* The kernel's limit for one registered buffer (io_uring/rsrc.c) */
#define URING_CHUNK_MAX (1ULL << 30)

/* The kernel's limit for the number of registered buffers */
#define URING_SLOTS_MAX 16384

/*
 * One piece of a registered range: never more than 1 GiB, never across
 * a 1 GiB-aligned host address.
 */
typedef struct UringChunk {
    uintptr_t start;
    size_t len;
    unsigned slot;          /* index in every ring's buffer table */
    bool pinned;            /* the kernel accepted it */
    bool huge;              /* all its pages were hugepages when pinned */
} UringChunk;

/* An immutable snapshot of the registry, sorted by start address. */
typedef struct UringChunkTable {
    unsigned refcnt;
    uint64_t generation;
    unsigned nr;
    UringChunk chunks[];
} UringChunkTable;

/* Pure helpers (block/io_uring-chunks.c) */
size_t uring_chunk_count(uintptr_t start, size_t len);
size_t uring_chunk_split(uintptr_t start, size_t len,
                         UringChunk *out, size_t max);
size_t uring_chunk_split_runs(uintptr_t start, size_t len,
                              const unsigned long *huge, size_t unit,
                              UringChunk *out, size_t max);
const UringChunk *uring_chunk_find(const UringChunkTable *t, uintptr_t addr);
const UringChunk *uring_chunk_for_iov(const UringChunkTable *t,
                                      const struct iovec *iov, int niov,
                                      IoUringFallbackReason *why);
const UringChunk *uring_chunk_prefix(const UringChunkTable *t,
                                     const struct iovec *iov, int niov,
                                     size_t skip, size_t *bytes);

/* Registry, main loop thread with the BQL held */
bool uring_fixed_ram_on_hugepages(void *host);
bool uring_fixed_ram_coalesces(void *host);
void uring_fixed_register(void *host, size_t size);
void uring_fixed_unregister(void *host, size_t size);

/*
 * Per request, in the AioContext's own thread: the fixed buffer index that
 * covers all of @iov, or -1 with the reason in @why.
 */
int uring_fixed_lookup(AioContext *ctx, const struct iovec *iov, int niov,
                       IoUringFallbackReason *why);
/* One part of a request cut by chunk: bytes @pos to @pos + @bytes of it */
typedef struct UringCut {
    size_t pos;
    size_t bytes;
    int buf_index;
} UringCut;

/*
 * Per request whose pieces lie in several chunks (uring_fixed_lookup()
 * said IO_URING_FALLBACK_REASON_CROSSES_CHUNK): cut @iov into one part
 * per run of pieces in the same chunk, appended to @cuts (a GArray of
 * UringCut).
 * False, with the reason in @why, if some part cannot go fixed.
 */
bool uring_fixed_cut(AioContext *ctx, const struct iovec *iov, int niov,
                     GArray *cuts, IoUringFallbackReason *why);
void uring_fixed_count_fixed(AioContext *ctx, bool write);
void uring_fixed_count_fallback(AioContext *ctx, IoUringFallbackReason why);

/* Fill @sqe with READ(V)_FIXED or WRITE(V)_FIXED on buffer @buf_index */
struct io_uring_sqe;
void uring_prep_rw_fixed(struct io_uring_sqe *sqe, int fd,
                         const struct iovec *iov, int niov, uint64_t offset,
                         int rw_flags, int buf_index, bool write);

typedef struct UringRingStats {
    AioContext *ctx;
    bool synced;
    bool cloned;            /* buffers cloned from the pinning ring */
    char *disabled_reason;
    unsigned chunks;        /* usable by this ring */
    uint64_t bytes;
    uint64_t fixed_reads, fixed_writes;
    uint64_t fallbacks[IO_URING_FALLBACK_REASON__MAX];
} UringRingStats;

/* Snapshots for monitoring; free with the matching functions */
UringChunkTable *uring_fixed_table_get(void);
void uring_chunk_table_unref(UringChunkTable *t);
GPtrArray *uring_fixed_ring_stats(void); /* of UringRingStats */
bool uring_fixed_can_clone(void);
/* Whether guest RAM waits to be pinned, or is being pinned */
bool uring_fixed_pinning(void);
bool uring_fixed_can_vectored(void);

#endif
