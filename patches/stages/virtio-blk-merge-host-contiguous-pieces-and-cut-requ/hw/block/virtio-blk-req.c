/*
 * virtio-blk requests: per-virtqueue pools and data vectors
 *
 * Each virtqueue takes its requests from its own pool, so that the memory
 * a device holds follows the requests in flight rather than queues times
 * depth, and a request of a few segments costs no heap allocation.
 *
 * Copyright (c) 2026 vblk-uring authors
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/iov.h"
#include "qemu/atomic.h"
#include "qemu/coroutine.h"
#include "qemu/main-loop.h"
#include "block/block.h"
#include "system/block-backend.h"
#include "hw/virtio/virtio-blk.h"
#include "hw/virtio/virtio-blk-req.h"
#include "hw/virtio/virtqueue-pool.h"

/*
 * Requests in flight and the queues that wait for room
 *
 * Every request in flight runs in a coroutine with its own stack: a guest
 * that fills deep queues must not make QEMU run out of mappings and
 * abort.  Each queue's pool takes its limit from the process-wide budget
 * (virtqueue-pool.c).  A queue at its limit is throttled: the requests
 * stay in the ring, its thread sleeps instead of polling it, and the
 * completion that frees half of the limit wakes it, from whatever thread
 * that completion runs in.
 *
 * The queues of one device also share a bound, from the backend: twice
 * what it takes at once (blk_get_opt_in_flight()), so that it has the
 * next requests at hand as others complete, while the rest wait in the
 * rings instead of each on its own coroutine in the block layer (see
 * VirtQueuePoolGroup for how the queues share it).
 *
 * A request with more pieces than one host I/O takes goes as several
 * I/Os, each on its own coroutine: it counts as that many requests in
 * flight (virtqueue_pool_charge()).
 */

/* Main loop, when the device does not use ioeventfd: serve the queue */
static void virtio_blk_req_wake_bh(void *opaque)
{
    VirtIOBlockReqPool *p = opaque;

    virtio_queue_notify(VIRTIO_DEVICE(p->s), p->vq_idx);
}

/*
 * Any thread: unthrottle the queue and kick it as the guest would, through
 * its host notifier, which is attached to the queue's AioContext while
 * ioeventfd runs (it cannot stop with requests in flight: stopping
 * drains).  Nothing is allocated.
 */
static void virtio_blk_req_wake(void *opaque)
{
    VirtIOBlockReqPool *p = opaque;
    VirtQueue *vq = virtio_get_queue(VIRTIO_DEVICE(p->s), p->vq_idx);

    virtio_queue_set_throttled(vq, false);
    if (qatomic_read(&p->s->ioeventfd_started)) {
        event_notifier_set(virtio_queue_get_host_notifier(vq));
    } else {
        qemu_bh_schedule(p->wake_bh);
    }
}

void virtio_blk_req_pools_init(VirtIOBlock *s)
{
    uint32_t backend;
    unsigned int i;

    s->req_pools = g_new0(VirtIOBlockReqPool, s->conf.num_queues);
    s->req_group = virtqueue_pool_group_new();
    for (i = 0; i < s->conf.num_queues; i++) {
        VirtIOBlockReqPool *p = &s->req_pools[i];

        p->s = s;
        p->vq_idx = i;
        p->wake_bh = aio_bh_new_guarded(qemu_get_aio_context(),
                                        virtio_blk_req_wake_bh, p,
                                        &DEVICE(s)->mem_reentrancy_guard);
        p->pool = virtqueue_pool_new(sizeof(VirtIOBlockReq),
                                     VIRTIO_BLK_INLINE_SG,
                                     sizeof(struct iovec));
        /* 0: the pool's share of the process-wide budget */
        virtqueue_pool_limit_in_flight(p->pool, 0, virtio_blk_req_wake, p);
        virtqueue_pool_join(p->pool, s->req_group);
    }
    backend = blk_get_opt_in_flight(s->blk);
    virtqueue_pool_group_set_limit(s->req_group,
                                   MIN(backend, UINT_MAX / 2) * 2);
}

void virtio_blk_req_pools_free(VirtIOBlock *s)
{
    unsigned int i;

    if (!s->req_pools) {
        return;
    }
    for (i = 0; i < s->conf.num_queues; i++) {
        virtqueue_pool_free(s->req_pools[i].pool);
        qemu_bh_delete(s->req_pools[i].wake_bh);
    }
    g_free(s->req_pools);
    s->req_pools = NULL;
    virtqueue_pool_group_free(s->req_group);
    s->req_group = NULL;
}

bool virtio_blk_req_may_pop(VirtIOBlock *s, VirtQueue *vq)
{
    VirtQueuePool *pool = s->req_pools[virtio_get_queue_index(vq)].pool;

    if (likely(virtqueue_pool_may_take(pool))) {
        return true;
    }
    /*
     * Throttled before the pool records that we wait (its barrier orders
     * the two), so that the wake, which unthrottles, cannot come first.
     * If the pool says yes after all, nobody else will unthrottle.
     */
    virtio_queue_set_throttled(vq, true);
    if (virtqueue_pool_may_take(pool)) {
        virtio_queue_set_throttled(vq, false);
        return true;
    }
    return false;
}

VirtIOBlockReq *virtio_blk_req_pop(VirtIOBlock *s, VirtQueue *vq)
{
    /*
     * An empty ring is not asked for room: refused, the queue would wait
     * for a turn, and spend it on nothing when woken.
     */
    if (virtio_queue_empty(vq) || !virtio_blk_req_may_pop(s, vq)) {
        return NULL;
    }
    return virtqueue_pop_alloc(vq, sizeof(VirtIOBlockReq),
                               virtqueue_pool_alloc,
                               s->req_pools[virtio_get_queue_index(vq)].pool);
}

VirtIOBlockReq *virtio_blk_req_adopt(VirtIOBlock *s, unsigned int vq_idx,
                                     VirtIOBlockReq *req)
{
    return (VirtIOBlockReq *)virtqueue_pool_adopt(s->req_pools[vq_idx].pool,
                                                  &req->elem);
}

void virtio_blk_req_free(VirtIOBlockReq *req)
{
    virtqueue_pool_release(&req->elem);
}

/* Copy @iov into @merged, joining pieces that follow each other in memory */
static unsigned int merge_host_contiguous(struct iovec *merged,
                                          const struct iovec *iov,
                                          unsigned int niov)
{
    unsigned int n = 0, i;

    for (i = 0; i < niov; i++) {
        if (n && merged[n - 1].iov_base + merged[n - 1].iov_len ==
                 iov[i].iov_base) {
            merged[n - 1].iov_len += iov[i].iov_len;
        } else {
            merged[n++] = iov[i];
        }
    }
    return n;
}

void virtio_blk_req_set_data(VirtIOBlockReq *req, struct iovec *iov,
                             unsigned int niov)
{
    struct iovec *merged = virtqueue_pool_extra(&req->elem);
    int max_iov = blk_get_max_iov(req->dev->blk);

    qemu_iovec_init_external(&req->qiov, merged,
                             merge_host_contiguous(merged, iov, niov));
    /*
     * Before the queue's next pop: served as several I/Os (see
     * virtio_blk_req_submit_split()), it counts as that many
     */
    if (req->qiov.niov > max_iov) {
        virtqueue_pool_charge(&req->elem,
                              DIV_ROUND_UP(req->qiov.niov, max_iov) - 1);
    }
}

/*
 * A request with more pieces than one host I/O takes, in flight as
 * several.  Only such requests pay for this (one allocation, its size
 * in proportion to the number of pieces, never to the bytes).
 */
typedef struct VirtIOBlockSplit {
    VirtIOBlockReq *req;
    BlockCompletionFunc *cb;
    unsigned int pending;       /* atomic */
    int ret;                    /* atomic: the first error, or 0 */
    QEMUIOVector parts[];
} VirtIOBlockSplit;

static void virtio_blk_split_part_done(void *opaque, int ret)
{
    VirtIOBlockSplit *split = opaque;

    if (ret) {
        qatomic_cmpxchg(&split->ret, 0, ret);
    }
    if (qatomic_fetch_dec(&split->pending) == 1) {
        split->cb(split->req, split->ret);
        g_free(split);
    }
}

void virtio_blk_req_submit_split(VirtIOBlockReq *req, bool is_write,
                                 BdrvRequestFlags flags,
                                 BlockCompletionFunc *cb)
{
    BlockBackend *blk = req->dev->blk;
    int max_iov = blk_get_max_iov(blk);
    int nparts = DIV_ROUND_UP(req->qiov.niov, max_iov);
    VirtIOBlockSplit *split = g_malloc(sizeof(*split) +
                                       nparts * sizeof(QEMUIOVector));
    int64_t offset = req->sector_num << BDRV_SECTOR_BITS;
    int i;

    split->req = req;
    split->cb = cb;
    split->ret = 0;
    split->pending = nparts;
    for (i = 0; i < nparts; i++) {
        QEMUIOVector *part = &split->parts[i];
        int first = i * max_iov;

        qemu_iovec_init_external(part, req->qiov.iov + first,
                                 MIN(max_iov, req->qiov.niov - first));
    }
    /* Every part is set up before the first can complete */
    for (i = 0; i < nparts; i++) {
        QEMUIOVector *part = &split->parts[i];

        if (is_write) {
            blk_aio_pwritev(blk, offset, part, flags,
                            virtio_blk_split_part_done, split);
        } else {
            blk_aio_preadv(blk, offset, part, flags,
                           virtio_blk_split_part_done, split);
        }
        /* Completions come from the event loop, never from in here */
        offset += part->size;
    }
}
