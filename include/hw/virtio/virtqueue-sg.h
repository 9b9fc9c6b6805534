/*
 * Scatter-gather arrays of a virtqueue element, without fixed ceilings
 *
 * Copyright (c) 2026 vblk-uring authors
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_VIRTIO_VIRTQUEUE_SG_H
#define HW_VIRTIO_VIRTQUEUE_SG_H

#include "hw/virtio/virtio.h"

/*
 * Entries mapped without touching the heap: as many as the stack arrays
 * this replaces held, the longest chain of any queue of up to 1024
 * entries.  Only the longer chains of larger queues grow on the heap.
 * Declare it QEMU_UNINITIALIZED: 24 KiB zeroed on every pop would cost
 * more than the pop.
 */
#define VIRTQUEUE_SG_INLINE VIRTQUEUE_MAX_SIZE

/*
 * The guest-physical address and host mapping of each piece of a chain
 * while virtqueue_pop() walks it.  Short chains stay in the inline arrays;
 * longer ones move to the heap, up to @max entries.
 */
typedef struct VirtQueueSg {
    hwaddr *addr;
    struct iovec *iov;
    unsigned int capacity;
    unsigned int max;
    hwaddr inline_addr[VIRTQUEUE_SG_INLINE];
    struct iovec inline_iov[VIRTQUEUE_SG_INLINE];
} VirtQueueSg;

void virtqueue_sg_init(VirtQueueSg *sg, unsigned int max);

/* Make room for @n entries; false if @n is above the chain's limit. */
bool virtqueue_sg_reserve(VirtQueueSg *sg, unsigned int n);

void virtqueue_sg_destroy(VirtQueueSg *sg);

/*
 * A VirtQueueElement's four arrays (in_addr, out_addr, in_sg, out_sg) in
 * one block of memory: its size, and pointing an element at such a block.
 */
size_t virtqueue_element_arrays_size(unsigned int out_num,
                                     unsigned int in_num);
void virtqueue_element_set_arrays(VirtQueueElement *elem,
                                  unsigned int out_num, unsigned int in_num,
                                  void *arrays);

#endif
