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
#include "qemu/memalign.h"
#include "qemu/coroutine.h"
#include "qemu/main-loop.h"
#include "block/block.h"
#include "system/block-backend.h"
#include "hw/virtio/virtio-blk.h"
#include "hw/virtio/virtio-blk-req.h"
#include "hw/virtio/virtqueue-pool.h"

/* A queue that hit its limit of requests in flight has room again */
typedef struct VirtIOBlockWake {
    VirtIOBlock *s;
    unsigned int vq_idx;
} VirtIOBlockWake;

static void virtio_blk_req_wake_bh(void *opaque)
{
    VirtIOBlockWake *wake = opaque;

    virtio_queue_notify(VIRTIO_DEVICE(wake->s), wake->vq_idx);
    object_unref(OBJECT(wake->s));
    g_free(wake);
}

/* Any thread: have the main loop notify the queue as if the guest kicked */
static void virtio_blk_req_wake(void *opaque)
{
    VirtIOBlockReqPool *p = opaque;
    VirtIOBlockWake *wake = g_new(VirtIOBlockWake, 1);

    wake->s = p->s;
    wake->vq_idx = p->vq_idx;
    object_ref(OBJECT(p->s));
    aio_bh_schedule_oneshot(qemu_get_aio_context(), virtio_blk_req_wake_bh,
                            wake);
}

/*
 * Every request in flight runs in a coroutine with its own stack: a guest
 * that fills deep queues must not make QEMU run out of mappings and
 * abort.  The queues of one device together take at most half of the
 * stacks the process can map; a queue at its limit waits for completions.
 */
static unsigned int virtio_blk_max_in_flight(VirtIOBlock *s)
{
    unsigned int per_queue = qemu_coroutine_max_stacks() / 2 /
                             s->conf.num_queues;

    if (s->conf.max_in_flight) {
        return MAX(s->conf.max_in_flight, 2);
    }
    return MAX(per_queue, VIRTIO_BLK_MIN_IN_FLIGHT);
}

void virtio_blk_req_pools_init(VirtIOBlock *s)
{
    unsigned int max_in_flight = virtio_blk_max_in_flight(s);
    unsigned int i;

    s->req_pools = g_new0(VirtIOBlockReqPool, s->conf.num_queues);
    for (i = 0; i < s->conf.num_queues; i++) {
        VirtIOBlockReqPool *p = &s->req_pools[i];

        p->s = s;
        p->vq_idx = i;
        p->pool = virtqueue_pool_new(sizeof(VirtIOBlockReq),
                                     VIRTIO_BLK_INLINE_SG,
                                     sizeof(struct iovec));
        if (max_in_flight < s->conf.queue_size) {
            virtqueue_pool_set_limit(p->pool, max_in_flight,
                                     virtio_blk_req_wake, p);
        }
    }
}

void virtio_blk_req_pools_free(VirtIOBlock *s)
{
    unsigned int i;

    if (!s->req_pools) {
        return;
    }
    for (i = 0; i < s->conf.num_queues; i++) {
        virtqueue_pool_free(s->req_pools[i].pool);
    }
    g_free(s->req_pools);
    s->req_pools = NULL;
}

static VirtQueuePool *vq_pool(VirtIOBlock *s, VirtQueue *vq)
{
    return s->req_pools[virtio_get_queue_index(vq)].pool;
}

bool virtio_blk_req_may_pop(VirtIOBlock *s, VirtQueue *vq)
{
    return virtqueue_pool_may_take(vq_pool(s, vq));
}

VirtIOBlockReq *virtio_blk_req_pop(VirtIOBlock *s, VirtQueue *vq)
{
    VirtQueuePool *pool = vq_pool(s, vq);

    if (!virtqueue_pool_may_take(pool)) {
        return NULL;
    }
    return virtqueue_pop_alloc(vq, sizeof(VirtIOBlockReq),
                               virtqueue_pool_alloc, pool);
}

VirtIOBlockReq *virtio_blk_req_adopt(VirtIOBlock *s, unsigned int vq_idx,
                                     VirtIOBlockReq *req)
{
    return (VirtIOBlockReq *)virtqueue_pool_adopt(s->req_pools[vq_idx].pool,
                                                  &req->elem);
}

static void virtio_blk_req_drop_bounce(VirtIOBlockReq *req)
{
    qemu_vfree(req->bounce);
    req->bounce = NULL;
}

void virtio_blk_req_free(VirtIOBlockReq *req)
{
    virtio_blk_req_drop_bounce(req);
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

/* Replace pieces [@first, @n) of @merged by one bounce buffer */
static bool collapse_tail(VirtIOBlockReq *req, struct iovec *merged,
                          unsigned int first, unsigned int n, bool is_write)
{
    size_t offset = iov_size(merged, first);
    size_t len = iov_size(merged + first, n - first);

    req->bounce = qemu_try_blockalign(blk_bs(req->dev->blk), len);
    if (!req->bounce) {
        return false;
    }
    req->bounce_offset = offset;
    req->bounce_len = len;
    req->bounce_to_guest = !is_write;
    if (is_write) {
        iov_to_buf(req->data_iov, req->data_niov, offset, req->bounce, len);
    }
    merged[first].iov_base = req->bounce;
    merged[first].iov_len = len;
    return true;
}

bool virtio_blk_req_set_data(VirtIOBlockReq *req, struct iovec *iov,
                             unsigned int niov, bool is_write)
{
    struct iovec *merged = virtqueue_pool_extra(&req->elem);
    unsigned int max_iov = blk_get_max_iov(req->dev->blk);
    unsigned int n;

    /* A request parked by werror=stop is parsed again when it restarts */
    virtio_blk_req_drop_bounce(req);
    req->data_iov = iov;
    req->data_niov = niov;

    n = merge_host_contiguous(merged, iov, niov);
    if (n > max_iov) {
        if (!collapse_tail(req, merged, max_iov - 1, n, is_write)) {
            return false;
        }
        n = max_iov;
    }
    qemu_iovec_init_external(&req->qiov, merged, n);
    return true;
}

void virtio_blk_req_data_done(VirtIOBlockReq *req, bool ok)
{
    if (!req->bounce) {
        return;
    }
    if (ok && req->bounce_to_guest) {
        iov_from_buf(req->data_iov, req->data_niov, req->bounce_offset,
                     req->bounce, req->bounce_len);
    }
    virtio_blk_req_drop_bounce(req);
}
