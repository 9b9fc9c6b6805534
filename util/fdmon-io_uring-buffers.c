/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The fixed buffer table of an AioContext's io_uring
 *
 * An io_uring can hold a table of registered ("fixed") buffers: memory the
 * kernel pins and maps once, which READ_FIXED, WRITE_FIXED and their
 * vectored forms then name by index instead of pinning pages per request.
 * fdmon-io_uring.c owns the ring of each AioContext; this file lends its
 * buffer table to one user, the owner, and changes the table for it.
 *
 * Threads.  The ring is submitted to by the AioContext's home thread only,
 * so its table is changed only there: every function here but
 * aio_buffers_owner_release() asserts that it runs in that thread
 * (aio_buffers_owner(), inline in block/aio.h, only reads).  The
 * owner is released by fdmon_io_uring_destroy(), when no thread runs the
 * AioContext any more; the ring's table goes away with the ring.
 *
 * Tables of their own (AioBufferTable) have no home thread: they submit
 * nothing, and their user serializes its calls.  An AioContext that
 * clones one shares the pages it pinned, and keeps them when it is freed.
 *
 * Indexes.  Queued sqes name buffers by index and the kernel resolves the
 * index when it takes the sqe, not when the sqe is prepared.  Every change
 * of the table therefore submits what is queued first, so that each sqe
 * finds the buffer its request was prepared for.
 */

#include "qemu/osdep.h"
#include <liburing.h>
#include "block/aio.h"
#include "qemu/io_uring-buffers-abi.h"
#include "block/aio-wait.h"
#include "aio-posix.h"
#include "trace.h"


static struct io_uring *buffers_ring(AioContext *ctx)
{
    assert(in_aio_context_home_thread(ctx));
    assert(ctx->fdmon_ops->add_sqe);    /* the ring is fdmon-io_uring's */
    return &ctx->fdmon_io_uring;
}

/* Let queued sqes go before the indexes they name change meaning */
static struct io_uring *buffers_ring_flushed(AioContext *ctx)
{
    struct io_uring *ring = buffers_ring(ctx);

    if (io_uring_sq_ready(ring)) {
        io_uring_submit(ring);
    }
    return ring;
}

int aio_buffers_claim(AioContext *ctx, AioBuffersOwner *owner)
{
    assert(in_aio_context_home_thread(ctx));
    if (!ctx->fdmon_ops->add_sqe) {
        return -ENOTSUP;
    }
    if (ctx->fdmon_buffers_owner && ctx->fdmon_buffers_owner != owner) {
        return -EBUSY;
    }
    ctx->fdmon_buffers_owner = owner;
    return 0;
}

void aio_buffers_owner_release(AioContext *ctx)
{
    AioBuffersOwner *owner = ctx->fdmon_buffers_owner;

    if (owner) {
        ctx->fdmon_buffers_owner = NULL;
        owner->release(owner, ctx);
    }
}

int aio_buffers_register(AioContext *ctx, const struct iovec *iov,
                         unsigned nr)
{
    struct io_uring *ring = buffers_ring_flushed(ctx);
    int ret;

    if (iov) {
        ret = io_uring_register_buffers(ring, iov, nr);
    } else {
        ret = io_uring_register_buffers_sparse(ring, nr);
    }
    trace_fdmon_io_uring_buffers(ctx, "register", 0, nr, ret);
    return ret < 0 ? ret : 0;
}

int aio_buffers_update(AioContext *ctx, unsigned index,
                       const struct iovec *iov, unsigned nr)
{
    struct io_uring *ring = buffers_ring_flushed(ctx);
    int ret;

    /* No tags: nothing waits to hear that the kernel let a buffer go */
    ret = io_uring_register_buffers_update_tag(ring, index, iov, NULL, nr);
    trace_fdmon_io_uring_buffers(ctx, "update", index, nr, ret);
    return ret < 0 ? ret : 0;
}

/*
 * A table of its own is a ring that nothing is submitted to: it only
 * holds the table, for AioContexts to clone.
 */
struct AioBufferTable {
    struct io_uring ring;
};

/* Clone @src's table into @dst, replacing the table @dst had if any */
static int clone_buffers(struct io_uring *dst, struct io_uring *src)
{
    int ret;

#ifdef HAVE_IO_URING_CLONE_BUFFERS
    ret = __io_uring_clone_buffers(dst, src, IORING_REGISTER_DST_REPLACE);
#else
    ret = uring_abi_clone_buffers(dst, src);
#endif
    return ret < 0 ? ret : 0;
}

int aio_buffers_clone(AioContext *ctx, AioBufferTable *src)
{
    int ret = clone_buffers(buffers_ring_flushed(ctx), &src->ring);

    trace_fdmon_io_uring_buffers(ctx, "clone", 0, 0, ret);
    return ret;
}

void aio_buffers_unregister(AioContext *ctx)
{
    int ret = io_uring_unregister_buffers(buffers_ring_flushed(ctx));

    trace_fdmon_io_uring_buffers(ctx, "unregister", 0, 0, ret);
}

int aio_buffer_table_new(AioBufferTable **ptable, const struct iovec *iov,
                         unsigned nr)
{
    AioBufferTable *table = g_new0(AioBufferTable, 1);
    int ret = io_uring_queue_init(1, &table->ring, 0);

    if (ret == 0) {
        ret = iov ? io_uring_register_buffers(&table->ring, iov, nr) :
                    io_uring_register_buffers_sparse(&table->ring, nr);
        if (ret < 0) {
            io_uring_queue_exit(&table->ring);
        }
    }
    if (ret < 0) {
        g_free(table);
        return ret;
    }
    *ptable = table;
    return 0;
}

int aio_buffer_table_update(AioBufferTable *table, unsigned index,
                            const struct iovec *iov, unsigned nr)
{
    int ret = io_uring_register_buffers_update_tag(&table->ring, index, iov,
                                                   NULL, nr);

    return ret < 0 ? ret : 0;
}

void aio_buffer_table_free(AioBufferTable *table)
{
    if (table) {
        io_uring_queue_exit(&table->ring);
        g_free(table);
    }
}

/* Try it on a pair of scratch tables */
bool aio_buffer_table_can_clone(void)
{
    AioBufferTable *src, *dst;
    int ret = aio_buffer_table_new(&src, NULL, 1);

    if (ret == 0) {
        ret = aio_buffer_table_new(&dst, NULL, 1);
        if (ret == 0) {
            ret = clone_buffers(&dst->ring, &src->ring);
            aio_buffer_table_free(dst);
        }
        aio_buffer_table_free(src);
    }
    return ret == 0;
}
