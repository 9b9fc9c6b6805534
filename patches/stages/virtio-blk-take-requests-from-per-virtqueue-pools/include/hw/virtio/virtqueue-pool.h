/*
 * A virtqueue's pool of request objects
 *
 * Copyright (c) 2026 vblk-uring authors
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_VIRTIO_VIRTQUEUE_POOL_H
#define HW_VIRTIO_VIRTQUEUE_POOL_H

#include "hw/virtio/virtio.h"

/*
 * Requests of one virtqueue: a device struct that starts with a
 * VirtQueueElement, with room for the element's arrays of up to
 * @inline_sg pieces.  Longer chains take their arrays from the heap.
 *
 * Objects are taken by the thread that pops the virtqueue (one at a time,
 * as virtqueue_pop() requires) and given back from any thread.  The pool
 * holds as many objects as requests were in flight at once recently:
 * after a burst, the surplus goes back to the heap once the queue has
 * been used for a while at a lower depth.
 */
typedef struct VirtQueuePool VirtQueuePool;

VirtQueuePool *virtqueue_pool_new(size_t elem_size, unsigned int inline_sg);

/* Every object must have been given back. */
void virtqueue_pool_free(VirtQueuePool *pool);

/* A VirtQueueElementAlloc for virtqueue_pop_alloc(), @opaque the pool */
VirtQueueElement *virtqueue_pool_alloc(void *opaque, size_t sz,
                                       unsigned int out_num,
                                       unsigned int in_num);

/*
 * Take over an element that virtqueue_alloc_element() made (as
 * qemu_get_virtqueue_element() does): returns a pool object holding the
 * same element, and frees @elem.  Not for the popping thread's hot path.
 */
VirtQueueElement *virtqueue_pool_adopt(VirtQueuePool *pool,
                                       VirtQueueElement *elem);

/* Give an object back; any thread. */
void virtqueue_pool_release(VirtQueueElement *elem);

#endif
