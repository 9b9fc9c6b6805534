/*
 * Scatter-gather arrays of a virtqueue element, without fixed ceilings
 *
 * Copyright (c) 2026 vblk-uring authors
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "hw/virtio/virtio.h"
#include "hw/virtio/virtqueue-sg.h"

void virtqueue_sg_init(VirtQueueSg *sg, unsigned int max)
{
    sg->addr = sg->inline_addr;
    sg->iov = sg->inline_iov;
    sg->capacity = VIRTQUEUE_SG_INLINE;
    sg->max = max;
}

static bool virtqueue_sg_on_heap(const VirtQueueSg *sg)
{
    return sg->iov != sg->inline_iov;
}

bool virtqueue_sg_reserve(VirtQueueSg *sg, unsigned int n)
{
    unsigned int capacity = sg->capacity;

    if (n <= capacity) {
        return true;
    }
    if (n > sg->max) {
        return false;
    }
    while (capacity < n) {
        capacity *= 2;
    }
    capacity = MIN(capacity, sg->max);

    if (virtqueue_sg_on_heap(sg)) {
        sg->addr = g_renew(hwaddr, sg->addr, capacity);
        sg->iov = g_renew(struct iovec, sg->iov, capacity);
    } else {
        sg->addr = g_new(hwaddr, capacity);
        sg->iov = g_new(struct iovec, capacity);
        memcpy(sg->addr, sg->inline_addr, sizeof(sg->inline_addr));
        memcpy(sg->iov, sg->inline_iov, sizeof(sg->inline_iov));
    }
    sg->capacity = capacity;
    return true;
}

void virtqueue_sg_destroy(VirtQueueSg *sg)
{
    if (virtqueue_sg_on_heap(sg)) {
        g_free(sg->addr);
        g_free(sg->iov);
    }
}

size_t virtqueue_element_arrays_size(unsigned int out_num,
                                     unsigned int in_num)
{
    size_t entries = (size_t)out_num + in_num;

    return entries * (sizeof(hwaddr) + sizeof(struct iovec));
}

void virtqueue_element_set_arrays(VirtQueueElement *elem,
                                  unsigned int out_num, unsigned int in_num,
                                  void *arrays)
{
    hwaddr *addr = arrays;
    struct iovec *iov = (struct iovec *)(addr + out_num + in_num);

    QEMU_BUILD_BUG_ON(sizeof(hwaddr) % __alignof__(struct iovec));
    elem->out_num = out_num;
    elem->in_num = in_num;
    elem->in_addr = addr;
    elem->out_addr = addr + in_num;
    elem->in_sg = iov;
    elem->out_sg = iov + in_num;
}
