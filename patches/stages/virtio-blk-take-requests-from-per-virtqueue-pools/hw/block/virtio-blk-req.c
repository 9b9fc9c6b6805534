/*
 * virtio-blk requests: per-virtqueue pools
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
#include "hw/virtio/virtio-blk.h"
#include "hw/virtio/virtio-blk-req.h"
#include "hw/virtio/virtqueue-pool.h"

void virtio_blk_req_pools_init(VirtIOBlock *s)
{
    unsigned int i;

    s->req_pools = g_new0(VirtIOBlockReqPool, s->conf.num_queues);
    for (i = 0; i < s->conf.num_queues; i++) {
        s->req_pools[i].pool = virtqueue_pool_new(sizeof(VirtIOBlockReq),
                                                  VIRTIO_BLK_INLINE_SG);
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

VirtIOBlockReq *virtio_blk_req_pop(VirtIOBlock *s, VirtQueue *vq)
{
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
