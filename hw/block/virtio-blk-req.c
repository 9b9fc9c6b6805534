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
#include "block/block.h"
#include "system/block-backend.h"
#include "hw/virtio/virtio-blk.h"
#include "hw/virtio/virtio-blk-req.h"
#include "hw/virtio/virtqueue-pool.h"

void virtio_blk_req_pools_init(VirtIOBlock *s)
{
    unsigned int i;

    s->req_pools = g_new(VirtQueuePool *, s->conf.num_queues);
    for (i = 0; i < s->conf.num_queues; i++) {
        s->req_pools[i] = virtqueue_pool_new(sizeof(VirtIOBlockReq),
                                             VIRTIO_BLK_INLINE_SG,
                                             sizeof(struct iovec));
    }
}

void virtio_blk_req_pools_free(VirtIOBlock *s)
{
    unsigned int i;

    if (!s->req_pools) {
        return;
    }
    for (i = 0; i < s->conf.num_queues; i++) {
        virtqueue_pool_free(s->req_pools[i]);
    }
    g_free(s->req_pools);
    s->req_pools = NULL;
}

VirtIOBlockReq *virtio_blk_req_pop(VirtIOBlock *s, VirtQueue *vq)
{
    VirtQueuePool *pool = s->req_pools[virtio_get_queue_index(vq)];

    return virtqueue_pop_alloc(vq, sizeof(VirtIOBlockReq),
                               virtqueue_pool_alloc, pool);
}

VirtIOBlockReq *virtio_blk_req_adopt(VirtIOBlock *s, unsigned int vq_idx,
                                     VirtIOBlockReq *req)
{
    return (VirtIOBlockReq *)virtqueue_pool_adopt(s->req_pools[vq_idx],
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
