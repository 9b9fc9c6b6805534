/*
 * virtio-blk requests: per-virtqueue pools
 *
 * Copyright (c) 2026 vblk-uring authors
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_VIRTIO_BLK_REQ_H
#define HW_VIRTIO_BLK_REQ_H

#include "hw/virtio/virtio-blk.h"

/*
 * Pieces of a request kept inside its pool object: header, status and up
 * to six data segments, what nearly every request of a Linux guest has.
 */
#define VIRTIO_BLK_INLINE_SG 8

typedef struct VirtIOBlockReqPool {
    struct VirtQueuePool *pool;
    VirtIOBlock *s;
    unsigned int vq_idx;
    QEMUBH *wake_bh;        /* without ioeventfd: serve the queue */
} VirtIOBlockReqPool;

void virtio_blk_req_pools_init(VirtIOBlock *s);
void virtio_blk_req_pools_free(VirtIOBlock *s);

/*
 * The next request of @vq, or NULL when there is none or when the queue
 * has as many requests in flight as it may: then a completion notifies
 * the queue again once there is room.
 */
VirtIOBlockReq *virtio_blk_req_pop(VirtIOBlock *s, VirtQueue *vq);

/*
 * Whether virtio_blk_req_pop() may take another request of @vq; if not,
 * the queue is throttled until a completion makes room and notifies it.
 */
bool virtio_blk_req_may_pop(VirtIOBlock *s, VirtQueue *vq);

/* A request loaded by migration, moved into its queue's pool */
VirtIOBlockReq *virtio_blk_req_adopt(VirtIOBlock *s, unsigned int vq_idx,
                                     VirtIOBlockReq *req);

void virtio_blk_req_free(VirtIOBlockReq *req);

#endif
