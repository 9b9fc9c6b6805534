/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring fixed buffers: x-query-io-uring-buffers
 */

#include "qemu/osdep.h"
#include "block/io_uring-fixed.h"
#include "exec/cpu-common.h"
#include "qapi/qapi-commands-io-uring.h"
#include "qemu/main-loop.h"
#include "qom/object.h"
#include "system/iothread.h"

typedef struct {
    AioContext *ctx;
    const char *name;
} CtxName;

static int find_iothread(Object *obj, void *opaque)
{
    CtxName *n = opaque;
    IOThread *iothread = (IOThread *)object_dynamic_cast(obj, TYPE_IOTHREAD);

    if (iothread && iothread_get_aio_context(iothread) == n->ctx) {
        n->name = object_get_canonical_path_component(obj);
        return 1;
    }
    return 0;
}

static char *ring_name(AioContext *ctx)
{
    CtxName n = { .ctx = ctx };

    if (ctx == qemu_get_aio_context()) {
        return g_strdup("main-loop");
    }
    if (ctx == iohandler_get_aio_context()) {
        return g_strdup("iohandler");
    }
    object_child_foreach(object_get_objects_root(), find_iothread, &n);
    /* Never an address: QMP output must not reveal QEMU's memory layout */
    return g_strdup(n.name ?: "unnamed");
}

/* Every reason, in the enum's order, zero counts included */
static IoUringFallbackCountList *fallbacks_info(const uint64_t *f)
{
    IoUringFallbackCountList *list = NULL, **tail = &list;
    IoUringFallbackReason why;

    for (why = 0; why < IO_URING_FALLBACK_REASON__MAX; why++) {
        IoUringFallbackCount *count = g_new0(IoUringFallbackCount, 1);

        count->reason = why;
        count->count = f[why];
        QAPI_LIST_APPEND(tail, count);
    }
    return list;
}

static IoUringRingInfo *ring_info(const UringRingStats *s)
{
    IoUringRingInfo *info = g_new0(IoUringRingInfo, 1);

    info->name = ring_name(s->ctx);
    info->synced = s->synced;
    info->cloned = s->cloned;
    info->disabled_reason = g_strdup(s->disabled_reason);
    info->chunks = s->chunks;
    info->bytes = s->bytes;
    info->fixed_reads = s->fixed_reads;
    info->fixed_writes = s->fixed_writes;
    info->fallbacks = fallbacks_info(s->fallbacks);
    return info;
}

IoUringBuffersInfo *qmp_x_query_io_uring_buffers(Error **errp)
{
    IoUringBuffersInfo *info = g_new0(IoUringBuffersInfo, 1);
    UringChunkTable *t = uring_fixed_table_get();
    g_autoptr(GPtrArray) rings = uring_fixed_ring_stats();
    IoUringBufferChunkList **chunk_tail = &info->chunks;
    IoUringRingInfoList **ring_tail = &info->rings;
    unsigned i;

    info->clone_buffers = uring_fixed_can_clone();
    info->vectored_fixed = uring_fixed_can_vectored();
    info->pinning = uring_fixed_pinning();

    for (i = 0; t && i < t->nr; i++) {
        const UringChunk *c = &t->chunks[i];
        IoUringBufferChunk *chunk = g_new0(IoUringBufferChunk, 1);
        ram_addr_t offset = 0;
        RAMBlock *rb;

        /* Where it is in guest terms, not in QEMU's address space */
        rb = qemu_ram_block_from_host((void *)c->start, false, &offset);
        chunk->ram_block = g_strdup(rb ? qemu_ram_get_idstr(rb) : "");
        chunk->offset = offset;
        chunk->size = c->len;
        /* The RAM block knows its page size: a hugepage on hugetlbfs */
        chunk->page_size = rb ? qemu_ram_pagesize(rb)
                              : qemu_real_host_page_size();
        chunk->slot = c->slot;
        chunk->pinned = c->pinned;
        chunk->hugepages = c->huge;
        QAPI_LIST_APPEND(chunk_tail, chunk);

        info->registered_bytes += c->len;
        if (c->pinned && info->clone_buffers) {
            info->pinned_bytes += c->len;
        }
    }
    uring_chunk_table_unref(t);

    for (i = 0; i < rings->len; i++) {
        const UringRingStats *s = g_ptr_array_index(rings, i);

        QAPI_LIST_APPEND(ring_tail, ring_info(s));
        if (!info->clone_buffers) {
            info->pinned_bytes += s->bytes;
        }
    }
    return info;
}
